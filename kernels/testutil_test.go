package kernels

// setExactQuant sets ExactQuant for a test and returns the restore func.
func setExactQuant(v bool) func() {
	prev := ExactQuant
	ExactQuant = v
	return func() { ExactQuant = prev }
}
