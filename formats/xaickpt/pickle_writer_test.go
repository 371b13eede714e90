package xaickpt

import "github.com/grok-go/grok/internal/pickle"

// The tests write pickles with internal/fixtures' pickle writer, which emits
// the byte streams CPython's pickler (3.8-3.13) produces for numpy arrays and
// xAI's QuantizedWeight8bit under protocols 3, 4 and 5 (TestWriterMatchesFixture
// and TestWriterMatchesNumpy check it byte for byte against numpy's files).
// npArray and qw8 are the short spellings the tests use.

// npArray is a numpy array to pickle.
type npArray struct {
	code     string // numpy dtype code: "f4", "i1", "u2", "f2"
	order    string // byte order of the dtype state: "<", "|" (single-byte types), ">"
	shape    []int
	data     []byte
	readonly bool // protocol 5 pickles read-only arrays as bytes, writable ones as bytearray
	fortran  bool
}

// qw8 is xAI's QuantizedWeight8bit.
type qw8 struct {
	weight, scales npArray
	module         string // "__main__" unless set
}

func (a npArray) fixture() pickle.NumpyArray {
	return pickle.NumpyArray{DType: a.code, Shape: a.shape, Data: a.data, ReadOnly: a.readonly, ByteOrder: a.order, Fortran: a.fortran}
}

// dumpPickle returns pickle.dumps(obj, protocol=proto) as numpy would make it.
func dumpPickle(proto int, obj any, numpy2 bool) []byte {
	var o any
	switch v := obj.(type) {
	case npArray:
		o = v.fixture()
	case qw8:
		o = pickle.QuantizedWeight8bit{Weight: v.weight.fixture(), Scales: v.scales.fixture(), Module: v.module}
	}
	b, err := pickle.Dump(o, pickle.Options{Protocol: proto, Numpy2: numpy2, Unchecked: true})
	if err != nil {
		panic(err)
	}
	return b
}
