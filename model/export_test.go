package model

// SetMaxExpertRows lowers the MoE's row budget for models created after
// the call, so that tests reach the grouped path with small batches.
func SetMaxExpertRows(n int) (restore func()) {
	old := maxExpertRows
	maxExpertRows = n
	return func() { maxExpertRows = old }
}
