package xaickpt

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// Typed pieces of a hand-made pickle, for pk.
type (
	pOp     byte   // one opcode byte
	pRaw    []byte // bytes as they are
	pStr    string // SHORT_BINUNICODE
	pBin    []byte // SHORT_BINBYTES or BINBYTES
	pInt    int64  // BININT1, BININT or LONG1 (8 bytes)
	pGlobal string // "module name", as two strings and STACK_GLOBAL
)

// pk assembles PROTO 4, the pieces (nested []any flattened) and STOP.
func pk(pieces ...any) []byte {
	b := []byte{opProto, 4}
	b = pkAppend(b, pieces)
	return append(b, opStop)
}

func pkAppend(b []byte, pieces []any) []byte {
	for _, p := range pieces {
		switch v := p.(type) {
		case []any:
			b = pkAppend(b, v)
		case pOp:
			b = append(b, byte(v))
		case pRaw:
			b = append(b, v...)
		case pStr:
			b = append(append(b, opShortBinUnicode, byte(len(v))), v...)
		case pBin:
			if len(v) < 256 {
				b = append(b, opShortBinBytes, byte(len(v)))
			} else {
				b = binary.LittleEndian.AppendUint32(append(b, opBinBytes), uint32(len(v)))
			}
			b = append(b, v...)
		case pInt:
			switch {
			case v >= 0 && v < 256:
				b = append(b, opBinInt1, byte(v))
			case v >= -1<<31 && v < 1<<31:
				b = binary.LittleEndian.AppendUint32(append(b, opBinInt), uint32(int32(v)))
			default:
				b = binary.LittleEndian.AppendUint64(append(b, opLong1, 8), uint64(v))
			}
		case pGlobal:
			mod, name, _ := strings.Cut(string(v), " ")
			b = pkAppend(b, []any{pStr(mod), pStr(name), pOp(opStackGlobal)})
		default:
			panic("pk: unknown piece")
		}
	}
	return b
}

// dtypeP is numpy.dtype(code, False, True) with the state numpy pickles
// for a built-in type, byte order order.
func dtypeP(code, order string) []any {
	return dtypeStateP(pStr(code), pStr(order), pOp(opNone), pOp(opNone), pOp(opNone), pInt(-1), pInt(-1), pInt(0))
}

// bf16P is the dtype of an ml_dtypes bfloat16 array as numpy pickles a
// dtype of a user-defined scalar type (the type itself as the argument, the
// item size and alignment in the state).
func bf16P() []any {
	return dtypeStateP(pGlobal("ml_dtypes bfloat16"), pStr("<"), pOp(opNone), pOp(opNone), pOp(opNone), pInt(2), pInt(2), pInt(0))
}

// dtypeStateP is numpy.dtype(code, False, True) with the given state after
// the version; code is a type code (pStr) or a scalar type (pGlobal).
func dtypeStateP(code any, state ...any) []any {
	return []any{pGlobal("numpy dtype"), code, pOp(opNewFalse), pOp(opNewTrue), pOp(opTuple3), pOp(opReduce),
		pOp(opMark), pInt(3), state, pOp(opTuple), pOp(opBuild)}
}

// shapeP is a shape tuple.
func shapeP(dims ...int64) []any {
	s := []any{pOp(opMark)}
	for _, d := range dims {
		s = append(s, pInt(d))
	}
	return append(s, pOp(opTuple))
}

// reconstructP is numpy's _reconstruct(ndarray, (0,), b'b'), before BUILD.
func reconstructP() []any {
	return []any{pGlobal("numpy.core.multiarray _reconstruct"), pGlobal("numpy ndarray"), pInt(0), pOp(opTuple1), pBin("b"), pOp(opTuple3), pOp(opReduce)}
}

// arrStateP is an ndarray's state (1, shape, dtype, fortran, data).
func arrStateP(shape, dtype []any, fortran any, data string) []any {
	return []any{pOp(opMark), pInt(1), shape, dtype, fortran, pBin(data), pOp(opTuple)}
}

// arrP is an array as numpy pickles it under protocols 3 and 4.
func arrP(shape, dtype []any, fortran any, data string) []any {
	return []any{reconstructP(), arrStateP(shape, dtype, fortran, data), pOp(opBuild)}
}

// f4P, i1P and u2P are C-ordered little-endian arrays.
func f4P(data string, dims ...int64) []any {
	return arrP(shapeP(dims...), dtypeP("f4", "<"), pOp(opNewFalse), data)
}
func i1P(data string, dims ...int64) []any {
	return arrP(shapeP(dims...), dtypeP("i1", "|"), pOp(opNewFalse), data)
}
func u2P(data string, dims ...int64) []any {
	return arrP(shapeP(dims...), dtypeP("u2", "<"), pOp(opNewFalse), data)
}

// bufP is protocol 5's _frombuffer(data, dtype, shape, order).
func bufP(data string, dtype, shape []any, order string) []any {
	return []any{pGlobal("numpy.core.numeric _frombuffer"), pOp(opMark), pBin(data), dtype, shape, pStr(order), pOp(opTuple), pOp(opReduce)}
}

// qwP is a QuantizedWeight8bit given the BUILD state state.
func qwP(state ...any) []any {
	return []any{pGlobal("__main__ QuantizedWeight8bit"), pOp(opEmptyTuple), pOp(opNewObj), state, pOp(opBuild)}
}

// dictP is a dict of keys and values, as SETITEMS fills it.
func dictP(kv ...any) []any {
	return []any{pOp(opEmptyDict), pOp(opMark), kv, pOp(opSetItems)}
}

// The parameters the hostile files stand for: a float32 norm [2] and a
// quantised matrix [2, 2] with scales [1, 2].
var (
	normParam  = param{Path: "test/rms_norm", Canon: "norm", Shape: []int{2}}
	quantParam = param{Path: "test/linear", Canon: "w", Quantized: true, Shape: []int{2, 2}, ScaleShape: []int{1, 2}, Transposed: true}
)

// Array contents: the real ones, and decoys of the same sizes.
const (
	real8  = "REALreal" // a float32 [2]
	decoy8 = "decoy!!!"
	realW  = "WWww" // an int8 [2, 2]
	decoyW = "dddd"
	realS  = "SSss" // bfloat16 scales [1, 2]
)

// hostileCase is one hand-made file: the tensor it must give (weight and
// scales bytes), or the substrings of the error it must give.
type hostileCase struct {
	name           string
	p              param
	data           []byte
	weight, scales string
	errs           []string
}

func hostileArrays() []hostileCase {
	goodW, goodS := i1P(realW, 2, 2), u2P(realS, 1, 2)
	bigDim := pRaw{opLong1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1} // 2^64
	var dims65 []int64
	for range 65 {
		dims65 = append(dims65, 1)
	}
	junk := pk(f4P(real8, 2))
	return []hostileCase{
		// The array's bytes are the ones the pickle builds it from, never a
		// byte string of the right length that was dropped or replaced.
		{name: "decoy bytes pushed and POPped", p: normParam, weight: real8,
			data: pk(pBin(decoy8), pOp(opPop), f4P(real8, 2))},
		{name: "decoys under a MARK, POP_MARKed", p: normParam, weight: real8,
			data: pk(pOp(opMark), pBin(decoy8), pBin(decoy8), pOp(opPopMark), f4P(real8, 2))},
		{name: "decoy stored in the memo, never fetched", p: normParam, weight: real8,
			data: pk(pBin(decoy8), pOp(opMemoize), pOp(opPop), f4P(real8, 2))},
		{name: "decoy array built and POPped", p: normParam, weight: real8,
			data: pk(f4P(decoy8, 2), pOp(opPop), f4P(real8, 2))},
		{name: "weight given twice: the last counts", p: quantParam, weight: realW, scales: realS,
			data: pk(qwP(dictP(pStr("weight"), i1P(decoyW, 2, 2), pStr("weight"), goodW, pStr("scales"), goodS)))},
		{name: "slot state overrides the dict", p: quantParam, weight: realW, scales: realS,
			data: pk(qwP(dictP(pStr("weight"), i1P(decoyW, 2, 2), pStr("scales"), goodS), dictP(pStr("weight"), goodW), pOp(opTuple2)))},
		{name: "state dict changed after BUILD", p: quantParam, weight: realW, scales: realS,
			data: pk(pGlobal("__main__ QuantizedWeight8bit"), pOp(opEmptyTuple), pOp(opNewObj),
				pOp(opEmptyDict), pOp(opMemoize), pOp(opMark), pStr("weight"), goodW, pStr("scales"), goodS, pOp(opSetItems), pOp(opBuild),
				pOp(opBinGet), pRaw{0}, pStr("weight"), i1P(decoyW, 2, 2), pOp(opSetItem), pOp(opPop))},
		{name: "scales stored before the weight", p: quantParam, weight: realW, scales: realS,
			data: pk(qwP(dictP(pStr("scales"), goodS, pStr("weight"), goodW)))},
		{name: "weight given its state after the dataclass's BUILD", p: quantParam, weight: realW, scales: realS,
			data: pk(reconstructP(), pOp(opMemoize), pOp(opPop),
				qwP(dictP(pStr("weight"), pOp(opBinGet), pRaw{0}, pStr("scales"), goodS)),
				pOp(opBinGet), pRaw{0}, arrStateP(shapeP(2, 2), dtypeP("i1", "|"), pOp(opNewFalse), realW), pOp(opBuild), pOp(opPop))},
		{name: "array BUILT twice", p: normParam, errs: []string{"already built"},
			data: pk(f4P(real8, 2), arrStateP(shapeP(2), dtypeP("f4", "<"), pOp(opNewFalse), decoy8), pOp(opBuild))},

		// The declared shape and dtype agree with the bytes and the config.
		{name: "shape larger than the data", p: normParam, errs: []string{"shape [4] of f4 needs 16 bytes, but its data has 8"},
			data: pk(f4P(real8, 4))},
		{name: "shape smaller than the data", p: normParam, errs: []string{"shape [1] of f4 needs 4 bytes, but its data has 8"},
			data: pk(f4P(real8, 1))},
		{name: "shape other than the config's", p: normParam, errs: []string{"float array [2] (the config's shape) is pickled with shape [1 2]"},
			data: pk(f4P(real8, 1, 2))},
		{name: "weight shape transposed", p: quantParam, errs: []string{"int8 weight [2 2] (the config's shape) is pickled with shape [4 1]"},
			data: pk(qwP(dictP(pStr("weight"), i1P(realW, 4, 1), pStr("scales"), goodS)))},
		{name: "scales shape other than the config's", p: quantParam, errs: []string{"bfloat16 scales [1 2] (the config's shape) is pickled with shape [2 1]"},
			data: pk(qwP(dictP(pStr("weight"), goodW, pStr("scales"), u2P(realS, 2, 1))))},
		{name: "protocol 5 buffer shorter than its shape", p: normParam, errs: []string{"shape [3] of f4 needs 12 bytes, but its data has 8"},
			data: pk(bufP(real8, dtypeP("f4", "<"), shapeP(3), "C"))},
		{name: "negative dimensions", p: normParam, errs: []string{"dimension 0 is negative (-1)"},
			data: pk(f4P(real8, -1, -2))},
		{name: "dimensions whose product overflows to the byte count", p: normParam, errs: []string{"too large (its byte count overflows)"},
			data: pk(f4P(real8, 1<<62+1, 2))},
		{name: "huge dimensions", p: normParam, errs: []string{"overflows"},
			data: pk(f4P(real8, 1<<31-1, 1<<31-1, 1<<31-1, 1<<31-1))},
		{name: "dimension beyond 64 bits", p: normParam, errs: []string{"dimension 0 does not fit 64 bits"},
			data: pk(arrP([]any{bigDim, pOp(opTuple1)}, dtypeP("f4", "<"), pOp(opNewFalse), real8))},
		{name: "65 dimensions", p: normParam, errs: []string{"65 dimensions"},
			data: pk(f4P(real8, dims65...))},
		{name: "dtype other than the tensor's", p: normParam, errs: []string{`float array [2] has numpy dtype "i4"`},
			data: pk(arrP(shapeP(2), dtypeP("i4", "<"), pOp(opNewFalse), real8))},
		{name: "weight dtype other than int8", p: quantParam, errs: []string{`int8 weight [2 2] has numpy dtype "u1"`},
			data: pk(qwP(dictP(pStr("weight"), arrP(shapeP(2, 2), dtypeP("u1", "|"), pOp(opNewFalse), realW), pStr("scales"), goodS)))},
		{name: "dtype with a subarray", p: normParam, errs: []string{"subarray or fields"},
			data: pk(arrP(shapeP(2), dtypeStateP(pStr("f4"), pStr("<"), []any{shapeP(1), pOp(opNone), pOp(opNone)}, pInt(-1), pInt(-1), pInt(0)), pOp(opNewFalse), real8))},
		{name: "dtype state with another item size", p: normParam, errs: []string{"item size other than 4"},
			data: pk(arrP(shapeP(2), dtypeStateP(pStr("f4"), pStr("<"), pOp(opNone), pOp(opNone), pOp(opNone), pInt(8), pInt(-1), pInt(0)), pOp(opNewFalse), real8))},
		{name: "dtype code '<f4'", p: normParam, weight: real8,
			data: pk(arrP(shapeP(2), dtypeP("<f4", "<"), pOp(opNewFalse), real8))},
		{name: "dtype code '>f4' without a state", p: normParam, errs: []string{"big-endian"},
			data: pk(arrP(shapeP(2), []any{pGlobal("numpy dtype"), pStr(">f4"), pOp(opTuple1), pOp(opReduce)}, pOp(opNewFalse), real8))},
		{name: "dtype code unknown", p: normParam, errs: []string{`numpy dtype "U2" is not supported`},
			data: pk(arrP(shapeP(2), dtypeP("U2", "<"), pOp(opNewFalse), real8))},
		{name: "weight dtype '|i1'", p: quantParam, weight: realW, scales: realS,
			data: pk(qwP(dictP(pStr("weight"), arrP(shapeP(2, 2), dtypeP("|i1", "|"), pOp(opNewFalse), realW), pStr("scales"), goodS)))},
		{name: "bfloat16 scales as xAI writes them", p: quantParam, weight: realW, scales: realS,
			data: pk(qwP(dictP(pStr("weight"), goodW, pStr("scales"), arrP(shapeP(1, 2), bf16P(), pOp(opNewFalse), realS))))},
		{name: "is_fortran given as the int 1", p: normParam, errs: []string{"Fortran"},
			data: pk(arrP(shapeP(2), dtypeP("f4", "<"), pInt(1), real8))},
		{name: "is_fortran given as None", p: normParam, errs: []string{"a None where is_fortran belongs"},
			data: pk(arrP(shapeP(2), dtypeP("f4", "<"), pOp(opNone), real8))},
		{name: "protocol 5 order 'F'", p: normParam, errs: []string{"Fortran"},
			data: pk(bufP(real8, dtypeP("f4", "<"), shapeP(2), "F"))},
		{name: "protocol 5 order 'X'", p: normParam, errs: []string{`_frombuffer order "X"`},
			data: pk(bufP(real8, dtypeP("f4", "<"), shapeP(2), "X"))},

		// The structure: STOP ends the file with the object alone on the
		// stack; underflows and unset memo entries are errors.
		{name: "junk after STOP", p: normParam, errs: []string{fmt.Sprintf("pickle offset %d: 4 bytes of junk after the STOP opcode", len(junk))},
			data: append(junk, "junk"...)},
		{name: "another object left at STOP", p: normParam, errs: []string{"STOP leaves 1 other object(s)"},
			data: pk(f4P(decoy8, 2), f4P(real8, 2))},
		{name: "MARK open at STOP", p: normParam, errs: []string{"MARK(s) still open"},
			data: pk(pOp(opMark), f4P(real8, 2))},
		{name: "BINGET of an unset index", p: normParam, errs: []string{"pickle offset 2: memo index 3 was never stored"},
			data: pk(pOp(opBinGet), pRaw{3})},
		{name: "LONG_BINGET of an unset index", p: normParam, errs: []string{"memo index 4294967295 was never stored"},
			data: pk(pBin(real8), pOp(opMemoize), pOp(opLongBinGet), pRaw{0xff, 0xff, 0xff, 0xff})},
		{name: "POP of an empty stack", p: normParam, errs: []string{"pickle offset 2: stack underflow"},
			data: pk(pOp(opPop))},
		{name: "BUILD without a target", p: normParam, errs: []string{"pickle offset 3: stack underflow"},
			data: pk(pOp(opNone), pOp(opBuild))},
		{name: "REDUCE reaching below a MARK", p: normParam, errs: []string{"stack underflow"},
			data: pk(pGlobal("numpy dtype"), pOp(opMark), pStr("f4"), pOp(opTuple1), pOp(opMark), pOp(opReduce))},
		{name: "POP_MARK without a MARK", p: normParam, errs: []string{"no MARK"},
			data: pk(pOp(opNone), pOp(opPopMark))},
		{name: "NEWOBJ with arguments", p: quantParam, errs: []string{"only an empty tuple"},
			data: pk(pGlobal("__main__ QuantizedWeight8bit"), pInt(1), pOp(opTuple1), pOp(opNewObj), dictP(pStr("weight"), goodW, pStr("scales"), goodS), pOp(opBuild))},
		{name: "dict key not a string", p: quantParam, errs: []string{"dict key is an int"},
			data: pk(qwP(dictP(pInt(1), goodW, pStr("weight"), goodW, pStr("scales"), goodS)))},
		{name: "unknown global", p: normParam, errs: []string{"pickle offset 15: global numpy.load is not allowed"},
			data: pk(pGlobal("numpy load"), pOp(opEmptyTuple), pOp(opReduce))},
		{name: "opcode outside the accepted set", p: normParam, errs: []string{"pickle offset 2: unknown opcode 0xf0"},
			data: pk(pOp(0xf0))},
	}
}

// TestReadParamHostile reads hand-made files that Python would unpickle
// differently from a length-based reader, or not at all: the tensor must
// hold the bytes the pickle actually builds the array from, and every
// disagreement must fail with an error naming the offset. Reading one costs
// a bounded amount of memory, whatever shape it declares.
func TestReadParamHostile(t *testing.T) {
	for _, tc := range hostileArrays() {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			tt, _, err := readParam(tc.p, tc.data)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
				t.Errorf("reading a %d-byte file allocated %d bytes", len(tc.data), alloc)
			}
			if tc.errs != nil {
				if err == nil {
					t.Fatalf("accepted: weight %q", tt.Data)
				}
				for _, want := range append(tc.errs, "pickle offset") {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(tt.Data) != tc.weight {
				t.Errorf("weight %q, want %q", tt.Data, tc.weight)
			}
			switch {
			case tt.Scales != nil && string(tt.Scales.Data) != tc.scales:
				t.Errorf("scales %q, want %q", tt.Scales.Data, tc.scales)
			case tt.Scales == nil && tc.scales != "":
				t.Error("no scales")
			}
		})
	}
}
