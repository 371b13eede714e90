package xaickpt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// This file is a small abstract interpreter of pickles, not an unpickler. It
// follows the stack, mark and memo semantics of CPython's unpickler over
// tagged placeholder values (int, str, bytes, tuple, list, dict, allowed
// global, dtype, array, QuantizedWeight8bit), so that the arrays it reports
// are the ones pickle.load would build — never a byte string that was pushed
// and dropped — and byte strings are ranges of the file, so the
// multi-gigabyte payloads are never copied. Nothing is ever imported or
// called: a GLOBAL outside allowedGlobals, a REDUCE/NEWOBJ/BUILD of anything
// but numpy's array and dtype reconstruction and QuantizedWeight8bit, and
// every opcode that can run code by other routes (INST, OBJ, EXT*, PERSID)
// is an error. Where numpy itself would refuse an array (shape and byte
// count disagreeing, negative dimensions), so does the walker.

// Pickle opcodes (Lib/pickle.py). Only those a numpy array or a dataclass of
// arrays can contain under protocols 3-5 are handled; the protocol-0 text
// forms are refused.
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opFloat          = 'F'
	opInt            = 'I'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opLong           = 'L'
	opBinInt2        = 'M'
	opNone           = 'N'
	opPersID         = 'P'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opString         = 'S'
	opBinString      = 'T'
	opShortBinString = 'U'
	opUnicode        = 'V'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opDict           = 'd'
	opEmptyDict      = '}'
	opAppends        = 'e'
	opGet            = 'g'
	opBinGet         = 'h'
	opInst           = 'i'
	opLongBinGet     = 'j'
	opList           = 'l'
	opEmptyList      = ']'
	opObj            = 'o'
	opPut            = 'p'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opEmptyTuple     = ')'
	opSetItems       = 'u'
	opBinFloat       = 'G'

	opProto    = 0x80
	opNewObj   = 0x81
	opExt1     = 0x82
	opExt2     = 0x83
	opExt4     = 0x84
	opTuple1   = 0x85
	opTuple2   = 0x86
	opTuple3   = 0x87
	opNewTrue  = 0x88
	opNewFalse = 0x89
	opLong1    = 0x8a
	opLong4    = 0x8b

	opBinBytes      = 'B'
	opShortBinBytes = 'C'

	opShortBinUnicode = 0x8c
	opBinUnicode8     = 0x8d
	opBinBytes8       = 0x8e
	opEmptySet        = 0x8f
	opAddItems        = 0x90
	opFrozenSet       = 0x91
	opNewObjEx        = 0x92
	opStackGlobal     = 0x93
	opMemoize         = 0x94
	opFrame           = 0x95

	opByteArray8     = 0x96
	opNextBuffer     = 0x97
	opReadOnlyBuffer = 0x98
)

// Limits that keep a hostile file from costing more than a real one by
// orders of magnitude. A real tensor file has about a hundred opcodes, and
// every opcode allocates at most one placeholder, so the opcode limit also
// bounds the walker's memory (a few MiB) whatever the file claims.
const (
	maxOpcodes   = 1 << 16
	maxStringLen = 1 << 10 // names and dtype codes; longer strings are kept as a prefix, marked
	maxDims      = 64      // numpy 2's NPY_MAXDIMS
)

// globalRole says what an allowed GLOBAL is used for.
type globalRole int

const (
	roleReconstruct globalRole = iota + 1 // numpy's _reconstruct(ndarray, (0,), b'b'), protocols 3/4
	roleNdarray                           // numpy.ndarray, _reconstruct's first argument
	roleDtype                             // numpy.dtype(code, align, copy)
	roleFrombuffer                        // numpy's _frombuffer(buf, dtype, shape, order), protocol 5
	roleQuantized                         // xAI's QuantizedWeight8bit dataclass
	roleScalarType                        // the bfloat16 scalar type, as numpy.dtype's argument
)

// allowedGlobals are the only importable names a checkpoint file may
// mention: numpy's array reconstruction under numpy 1.x (numpy.core) and 2.x
// (numpy._core) module names, and the dataclass under the module names it
// is pickled from (checkpoint.py aliases it into __main__; model.py defines
// it). bfloat16 is matched by globalRoleOf.
var allowedGlobals = map[string]globalRole{
	"numpy.core.multiarray._reconstruct":  roleReconstruct,
	"numpy._core.multiarray._reconstruct": roleReconstruct,
	"numpy.ndarray":                       roleNdarray,
	"numpy.dtype":                         roleDtype,
	"numpy.core.numeric._frombuffer":      roleFrombuffer,
	"numpy._core.numeric._frombuffer":     roleFrombuffer,
	"__main__.QuantizedWeight8bit":        roleQuantized,
	"model.QuantizedWeight8bit":           roleQuantized,
}

// globalRoleOf returns the role of module.name, or an error naming it. The
// real files' scales are ml_dtypes bfloat16 arrays, whose dtype pickles as
// numpy.dtype(<bfloat16 type>, False, True); the type's module is not known
// for certain (ml_dtypes, or jax/jaxlib in older releases), so any module
// under those packages may name it — and only that name.
func globalRoleOf(module, name string) (globalRole, error) {
	if r, ok := allowedGlobals[module+"."+name]; ok {
		return r, nil
	}
	if name == "bfloat16" {
		for _, pkg := range []string{"ml_dtypes", "jax", "jaxlib"} {
			if module == pkg || strings.HasPrefix(module, pkg+".") {
				return roleScalarType, nil
			}
		}
	}
	if module == "_codecs" && name == "encode" {
		return 0, fmt.Errorf("global _codecs.encode: array data pickled with protocol 0-2 (as text) is not supported; re-save with protocol 3 or later")
	}
	return 0, fmt.Errorf("global %s.%s is not allowed in a checkpoint file (only numpy array reconstruction, numpy.dtype, bfloat16 and QuantizedWeight8bit)", quote(module), quote(name))
}

// quote keeps names from hostile files printable in error messages.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	q := fmt.Sprintf("%q", s)
	return q[1 : len(q)-1]
}

// dtypeSizes are the numpy dtype codes (without byte order) the walker
// knows, with their item sizes. Others are refused: the reader could not
// use them, and an unknown size would defeat the byte-count check.
var dtypeSizes = map[string]int{
	"f2": 2, "f4": 4, "f8": 8,
	"i1": 1, "i2": 2, "i4": 4, "i8": 8,
	"u1": 1, "u2": 2, "u4": 4, "u8": 8,
	"b1": 1, "V2": 2,
	"bfloat16": 2,
}

// vkind is the tag of a placeholder value.
type vkind uint8

const (
	vNone vkind = iota
	vBool
	vInt
	vFloat
	vStr
	vBytes
	vTuple
	vList
	vDict
	vSet
	vGlobal
	vDtype
	vArray
	vObject
)

var vkindNames = [...]string{"None", "bool", "int", "float", "str", "bytes", "tuple", "list", "dict", "set", "global", "numpy.dtype", "numpy.ndarray", "QuantizedWeight8bit"}

func (k vkind) String() string { return vkindNames[k] }

// value is a placeholder for a Python object: its tag and what the walker
// needs to follow the structure. Values are shared by pointer, as Python
// shares objects (DUP, the memo), so a mutation (APPEND, SETITEM, BUILD)
// is seen through every reference.
type value struct {
	kind  vkind
	i     int64          // vInt (when !big), vBool
	big   bool           // vInt that does not fit int64; vStr longer than maxStringLen (s is a prefix)
	s     string         // vStr; vGlobal "module.name"
	role  globalRole     // vGlobal
	items []*value       // vTuple, vList, vSet; vDict as key, value, key, value…; vObject: weight, scales
	keys  map[string]int // vDict: index in items of each key
	off   int            // vBytes: the bytes [off, off+n) of the file
	n     int
	dt    *dtypeVal // vDtype
	arr   *arrayVal // vArray
	built bool      // vObject: BUILD set its fields
}

// dtypeVal is a numpy.dtype being reconstructed.
type dtypeVal struct {
	code  string // without byte order: "f4", "i1", "bfloat16", …
	size  int
	order byte // '<', '>', '|', '='; BUILD's state overrides the code's prefix
}

// arrayVal is a numpy.ndarray being reconstructed.
type arrayVal struct {
	pending bool   // made by _reconstruct, waiting for its BUILD
	at      int    // offset of the opcode that gave it its data
	dtype   *value // vDtype, read at the end: a later BUILD of the dtype changes the array's too
	shape   []int
	off, n  int
	fortran bool
}

// array is one numpy array of a file's top-level object, as the pickle
// builds it: its data is the byte string numpy would use, and its declared
// shape and item size agree with the data's length.
type array struct {
	At       int    // offset of the opcode that built it, for errors
	Off, Len int    // its data: bytes [Off, Off+Len) of the file
	DType    string // numpy dtype code without byte order: "f4", "i1", "u2", "bfloat16", …
	Order    byte   // the dtype's byte order: '<', '>', '|' or '='
	Shape    []int
	Fortran  bool
}

// objectKind is what a checkpoint file holds at the top level.
type objectKind int

const (
	objArray     objectKind = iota + 1 // a numpy array
	objQuantized                       // a QuantizedWeight8bit
)

func (k objectKind) String() string {
	if k == objQuantized {
		return "a QuantizedWeight8bit"
	}
	return "a plain array"
}

// walkResult is what walk learns about one file.
type walkResult struct {
	Protocol int
	Kind     objectKind
	// Arrays are the plain array, or the QuantizedWeight8bit's weight and
	// scales, in that order.
	Arrays []array
}

// walker holds the state of one walk.
type walker struct {
	data  []byte
	pos   int
	op    int // offset of the current opcode, for errors
	stack []*value
	marks []int
	memo  map[uint32]*value
	res   walkResult
}

// walk interprets one pickle and returns the arrays of its object.
func walk(data []byte) (*walkResult, error) {
	w := &walker{data: data, memo: make(map[uint32]*value)}
	top, err := w.run()
	if err == nil {
		err = w.classify(top)
	}
	if err != nil {
		return nil, fmt.Errorf("pickle offset %d: %w", w.op, err)
	}
	return &w.res, nil
}

// take returns the next n bytes, or an error if the file ends first.
func (w *walker) take(n uint64) ([]byte, error) {
	if n > uint64(len(w.data)-w.pos) {
		return nil, fmt.Errorf("truncated: needs %d bytes, %d left", n, len(w.data)-w.pos)
	}
	b := w.data[w.pos : w.pos+int(n)]
	w.pos += int(n)
	return b, nil
}

func (w *walker) u8() (uint64, error) {
	b, err := w.take(1)
	if err != nil {
		return 0, err
	}
	return uint64(b[0]), nil
}

func (w *walker) u16() (uint64, error) {
	b, err := w.take(2)
	if err != nil {
		return 0, err
	}
	return uint64(binary.LittleEndian.Uint16(b)), nil
}

func (w *walker) u32() (uint64, error) {
	b, err := w.take(4)
	if err != nil {
		return 0, err
	}
	return uint64(binary.LittleEndian.Uint32(b)), nil
}

func (w *walker) u64() (uint64, error) {
	b, err := w.take(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (w *walker) push(v *value) { w.stack = append(w.stack, v) }

// fence is the stack height below which the innermost MARK hides the
// stack, as CPython's unpickler fences it.
func (w *walker) fence() int {
	if len(w.marks) == 0 {
		return 0
	}
	return w.marks[len(w.marks)-1]
}

func (w *walker) pop() (*value, error) {
	if len(w.stack) <= w.fence() {
		return nil, fmt.Errorf("stack underflow")
	}
	v := w.stack[len(w.stack)-1]
	w.stack = w.stack[:len(w.stack)-1]
	return v, nil
}

func (w *walker) top() (*value, error) {
	if len(w.stack) <= w.fence() {
		return nil, fmt.Errorf("stack underflow")
	}
	return w.stack[len(w.stack)-1], nil
}

// popMark pops everything above the innermost MARK, and the MARK.
func (w *walker) popMark() ([]*value, error) {
	if len(w.marks) == 0 {
		return nil, fmt.Errorf("no MARK on the stack")
	}
	m := w.marks[len(w.marks)-1]
	w.marks = w.marks[:len(w.marks)-1]
	items := append([]*value(nil), w.stack[m:]...)
	w.stack = w.stack[:m]
	return items, nil
}

// str reads a string operand of n bytes.
func (w *walker) str(n uint64) (*value, error) {
	b, err := w.take(n)
	if err != nil {
		return nil, err
	}
	v := &value{kind: vStr}
	if len(b) > maxStringLen {
		b, v.big = b[:maxStringLen], true
	}
	v.s = string(b)
	return v, nil
}

// bytesValue reads a byte string operand of n bytes as a range of the file.
func (w *walker) bytesValue(n uint64) (*value, error) {
	off := w.pos
	if _, err := w.take(n); err != nil {
		return nil, err
	}
	return &value{kind: vBytes, off: off, n: int(n)}, nil
}

// run steps through the opcodes up to STOP and returns the object STOP
// pops. It is stricter than CPython at the end: the object must be alone
// on the stack, no MARK may be open, and nothing may follow STOP.
func (w *walker) run() (*value, error) {
	for n := 0; ; n++ {
		if n >= maxOpcodes {
			return nil, fmt.Errorf("more than %d opcodes: not a checkpoint tensor file", maxOpcodes)
		}
		w.op = w.pos
		if w.pos >= len(w.data) {
			return nil, fmt.Errorf("truncated: no STOP opcode")
		}
		op := w.data[w.pos]
		w.pos++
		if n == 0 && op != opProto {
			return nil, fmt.Errorf("no PROTO opcode at the start: protocol 0/1 pickles are not supported (protocols 3-5 are)")
		}
		if op != opStop {
			if err := w.step(op); err != nil {
				return nil, err
			}
			continue
		}
		top, err := w.pop()
		if err != nil {
			return nil, err
		}
		switch {
		case len(w.marks) > 0:
			return nil, fmt.Errorf("STOP with %d MARK(s) still open", len(w.marks))
		case len(w.stack) > 0:
			return nil, fmt.Errorf("STOP leaves %d other object(s) on the stack", len(w.stack))
		case w.pos != len(w.data):
			w.op = w.pos
			return nil, fmt.Errorf("%d bytes of junk after the STOP opcode", len(w.data)-w.pos)
		}
		return top, nil
	}
}

// step executes one opcode other than STOP.
func (w *walker) step(op byte) error {
	switch op {
	case opProto:
		p, err := w.u8()
		if err != nil {
			return err
		}
		if p < 2 || p > 5 {
			return fmt.Errorf("pickle protocol %d is not supported (3, 4 and 5 are)", p)
		}
		w.res.Protocol = int(p)
	case opFrame:
		// Frames only group opcodes for buffered reading; the walker reads
		// the mapped file directly, so it just checks the length.
		n, err := w.u64()
		if err != nil {
			return err
		}
		if n > uint64(len(w.data)-w.pos) {
			return fmt.Errorf("truncated: FRAME of %d bytes, %d left", n, len(w.data)-w.pos)
		}
	case opMark:
		w.marks = append(w.marks, len(w.stack))
	case opPop:
		if len(w.stack) > w.fence() {
			w.stack = w.stack[:len(w.stack)-1]
		} else if _, err := w.popMark(); err != nil { // CPython: POP of a bare MARK pops the mark
			return fmt.Errorf("stack underflow")
		}
	case opPopMark:
		if _, err := w.popMark(); err != nil {
			return err
		}
	case opDup:
		v, err := w.top()
		if err != nil {
			return err
		}
		w.push(v)

	case opNone:
		w.push(&value{kind: vNone})
	case opNewTrue, opNewFalse:
		b := int64(0)
		if op == opNewTrue {
			b = 1
		}
		w.push(&value{kind: vBool, i: b})
	case opBinInt1:
		v, err := w.u8()
		if err != nil {
			return err
		}
		w.push(&value{kind: vInt, i: int64(v)})
	case opBinInt2:
		v, err := w.u16()
		if err != nil {
			return err
		}
		w.push(&value{kind: vInt, i: int64(v)})
	case opBinInt:
		v, err := w.u32()
		if err != nil {
			return err
		}
		w.push(&value{kind: vInt, i: int64(int32(uint32(v)))})
	case opLong1, opLong4:
		var n uint64
		var err error
		if op == opLong1 {
			n, err = w.u8()
		} else {
			n, err = w.u32()
			if err == nil && int32(uint32(n)) < 0 {
				err = fmt.Errorf("LONG4 with negative length")
			}
		}
		if err != nil {
			return err
		}
		b, err := w.take(n)
		if err != nil {
			return err
		}
		w.push(longValue(b))
	case opBinFloat:
		if _, err := w.take(8); err != nil {
			return err
		}
		w.push(&value{kind: vFloat})

	case opShortBinUnicode, opBinUnicode, opBinUnicode8:
		n, err := w.lengthOperand(op, opShortBinUnicode, opBinUnicode)
		if err != nil {
			return err
		}
		v, err := w.str(n)
		if err != nil {
			return err
		}
		w.push(v)
	case opShortBinBytes, opBinBytes, opBinBytes8:
		n, err := w.lengthOperand(op, opShortBinBytes, opBinBytes)
		if err != nil {
			return err
		}
		v, err := w.bytesValue(n)
		if err != nil {
			return err
		}
		w.push(v)
	case opByteArray8:
		n, err := w.u64()
		if err != nil {
			return err
		}
		v, err := w.bytesValue(n)
		if err != nil {
			return err
		}
		w.push(v)

	case opEmptyTuple:
		w.push(&value{kind: vTuple})
	case opTuple1, opTuple2, opTuple3:
		n := int(op-opTuple1) + 1
		items := make([]*value, n)
		for i := n - 1; i >= 0; i-- {
			v, err := w.pop()
			if err != nil {
				return err
			}
			items[i] = v
		}
		w.push(&value{kind: vTuple, items: items})
	case opTuple, opList, opFrozenSet:
		items, err := w.popMark()
		if err != nil {
			return err
		}
		k := vTuple
		switch op {
		case opList:
			k = vList
		case opFrozenSet:
			k = vSet
		}
		w.push(&value{kind: k, items: items})
	case opDict:
		items, err := w.popMark()
		if err != nil {
			return err
		}
		if len(items)%2 != 0 {
			return fmt.Errorf("DICT with an odd number of items")
		}
		d := &value{kind: vDict}
		if err := d.setItems(items); err != nil {
			return err
		}
		w.push(d)
	case opEmptyList:
		w.push(&value{kind: vList})
	case opEmptyDict:
		w.push(&value{kind: vDict})
	case opEmptySet:
		w.push(&value{kind: vSet})
	case opAppend, opSetItem:
		n := 1
		if op == opSetItem {
			n = 2
		}
		items := make([]*value, n)
		for i := n - 1; i >= 0; i-- {
			v, err := w.pop()
			if err != nil {
				return err
			}
			items[i] = v
		}
		return w.extend(op, items)
	case opAppends, opSetItems, opAddItems:
		items, err := w.popMark()
		if err != nil {
			return err
		}
		if op == opSetItems && len(items)%2 != 0 {
			return fmt.Errorf("SETITEMS with an odd number of items")
		}
		return w.extend(op, items)

	case opBinPut, opLongBinPut, opMemoize:
		v, err := w.top()
		if err != nil {
			return err
		}
		var idx uint64
		switch op {
		case opBinPut:
			idx, err = w.u8()
		case opLongBinPut:
			idx, err = w.u32()
		default:
			idx = uint64(len(w.memo)) // CPython: MEMOIZE stores at the memo's length
		}
		if err != nil {
			return err
		}
		w.memo[uint32(idx)] = v
	case opBinGet, opLongBinGet:
		var idx uint64
		var err error
		if op == opBinGet {
			idx, err = w.u8()
		} else {
			idx, err = w.u32()
		}
		if err != nil {
			return err
		}
		v, ok := w.memo[uint32(idx)]
		if !ok {
			return fmt.Errorf("memo index %d was never stored", idx)
		}
		w.push(v)

	case opGlobal:
		module, err := w.line()
		if err != nil {
			return err
		}
		name, err := w.line()
		if err != nil {
			return err
		}
		return w.global(module, name, false)
	case opStackGlobal:
		name, err := w.pop()
		if err != nil {
			return err
		}
		module, err := w.pop()
		if err != nil {
			return err
		}
		if module.kind != vStr || name.kind != vStr {
			return fmt.Errorf("STACK_GLOBAL needs two strings, got %v and %v", module.kind, name.kind)
		}
		return w.global(module.s, name.s, module.big || name.big)
	case opReduce:
		return w.reduce()
	case opNewObj, opNewObjEx:
		return w.newObj(op)
	case opBuild:
		return w.build()

	case opInst, opObj:
		return fmt.Errorf("INST/OBJ (protocol 0/1 object construction) is not allowed")
	case opPersID, opBinPersID:
		return fmt.Errorf("persistent ids are not allowed (not a plain pickle of arrays)")
	case opExt1, opExt2, opExt4:
		return fmt.Errorf("extension-registry opcodes (EXT1/2/4) are not allowed")
	case opNextBuffer, opReadOnlyBuffer:
		return fmt.Errorf("out-of-band buffers (pickle protocol 5 buffer_callback) are not supported")
	case opInt, opLong, opFloat, opString, opBinString, opShortBinString, opUnicode, opGet, opPut:
		return fmt.Errorf("opcode %q is a protocol 0-2 form this reader does not support", rune(op))
	default:
		return fmt.Errorf("unknown opcode 0x%02x", op)
	}
	return nil
}

// lengthOperand reads the length of a string or bytes opcode: 1 byte for the
// short form, 4 for the plain one, 8 for the protocol-4 "8" form.
func (w *walker) lengthOperand(op, short, plain byte) (uint64, error) {
	switch op {
	case short:
		return w.u8()
	case plain:
		return w.u32()
	}
	return w.u64()
}

// line reads a newline-terminated operand of the text GLOBAL opcode.
func (w *walker) line() (string, error) {
	rest := w.data[w.pos:]
	if len(rest) > maxStringLen {
		rest = rest[:maxStringLen]
	}
	i := bytes.IndexByte(rest, '\n')
	if i < 0 {
		return "", fmt.Errorf("GLOBAL operand without a newline")
	}
	w.pos += i + 1
	return string(rest[:i]), nil
}

// longValue is the placeholder of a LONG1/LONG4 integer (little-endian two's
// complement).
func longValue(b []byte) *value {
	if len(b) > 8 {
		return &value{kind: vInt, big: true}
	}
	var u uint64
	for i := len(b) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if len(b) > 0 && len(b) < 8 && b[len(b)-1]&0x80 != 0 {
		u |= ^uint64(0) << (8 * len(b)) // sign-extend
	}
	return &value{kind: vInt, i: int64(u)}
}

// global pushes an allowed global, or fails naming it.
func (w *walker) global(module, name string, truncated bool) error {
	if truncated {
		return fmt.Errorf("global %s.%s: name longer than %d bytes", quote(module), quote(name), maxStringLen)
	}
	role, err := globalRoleOf(module, name)
	if err != nil {
		return err
	}
	w.push(&value{kind: vGlobal, s: module + "." + name, role: role})
	return nil
}

// setItems stores key, value, key, value… in a dict: a key stored again
// replaces its value, as in Python, so the last one is the one that counts.
// Only str keys are supported (the dataclass state has nothing else).
func (d *value) setItems(kv []*value) error {
	for i := 0; i+1 < len(kv); i += 2 {
		k := kv[i]
		if k.kind != vStr || k.big {
			return fmt.Errorf("dict key is %s: only short str keys are supported", describe(k))
		}
		if d.keys == nil {
			d.keys = make(map[string]int)
		}
		if j, ok := d.keys[k.s]; ok {
			d.items[j+1] = kv[i+1]
			continue
		}
		d.keys[k.s] = len(d.items)
		d.items = append(d.items, k, kv[i+1])
	}
	return nil
}

// lookup returns a dict's value for key, or nil.
func (d *value) lookup(key string) *value {
	if j, ok := d.keys[key]; ok {
		return d.items[j+1]
	}
	return nil
}

// extend applies APPEND(S)/SETITEM(S)/ADDITEMS to the container below.
func (w *walker) extend(op byte, items []*value) error {
	target, err := w.top()
	if err != nil {
		return err
	}
	want := vList
	switch op {
	case opSetItem, opSetItems:
		want = vDict
	case opAddItems:
		want = vSet
	}
	if target.kind != want {
		return fmt.Errorf("opcode %q applied to a %v, not a %v", rune(op), target.kind, want)
	}
	if want == vDict {
		return target.setItems(items)
	}
	target.items = append(target.items, items...)
	return nil
}

// describe names a placeholder in error messages.
func describe(v *value) string {
	switch v.kind {
	case vGlobal:
		return quote(v.s)
	case vInt:
		return "an int"
	}
	return "a " + v.kind.String()
}

// reduce handles REDUCE, which may only call numpy's _reconstruct, dtype
// and _frombuffer.
func (w *walker) reduce() error {
	args, err := w.pop()
	if err != nil {
		return err
	}
	fn, err := w.pop()
	if err != nil {
		return err
	}
	if fn.kind != vGlobal || (fn.role != roleReconstruct && fn.role != roleDtype && fn.role != roleFrombuffer) {
		return fmt.Errorf("REDUCE of %s is not allowed (only numpy's _reconstruct, dtype and _frombuffer)", describe(fn))
	}
	if args.kind != vTuple {
		return fmt.Errorf("REDUCE of %s with %s arguments, not a tuple", fn.s, describe(args))
	}
	a := args.items
	switch fn.role {
	case roleReconstruct:
		// _reconstruct(ndarray, (0,), b'b'): an empty array that BUILD fills.
		if len(a) != 3 || a[0].kind != vGlobal || a[0].role != roleNdarray || a[1].kind != vTuple || (a[2].kind != vBytes && a[2].kind != vStr) {
			return fmt.Errorf("_reconstruct needs (numpy.ndarray, shape, typecode)")
		}
		w.push(&value{kind: vArray, arr: &arrayVal{pending: true}})
	case roleDtype:
		d, err := newDtype(a)
		if err != nil {
			return err
		}
		w.push(&value{kind: vDtype, dt: d})
	case roleFrombuffer:
		// _frombuffer(buffer, dtype, shape, order) is
		// frombuffer(buffer, dtype).reshape(shape, order=order).
		if len(a) != 4 || a[0].kind != vBytes || a[1].kind != vDtype || a[3].kind != vStr {
			return fmt.Errorf("_frombuffer needs (buffer, dtype, shape, order)")
		}
		arr := &arrayVal{at: w.op, dtype: a[1], off: a[0].off, n: a[0].n}
		switch a[3].s {
		case "C":
		case "F":
			arr.fortran = true
		default:
			return fmt.Errorf("_frombuffer order %q (numpy pickles 'C' or 'F')", quote(a[3].s))
		}
		if err := arr.setShape(a[2]); err != nil {
			return err
		}
		w.push(&value{kind: vArray, arr: arr})
	}
	return nil
}

// newDtype is numpy.dtype(code, align, copy), code a type code with an
// optional byte-order prefix or the bfloat16 scalar type.
func newDtype(a []*value) (*dtypeVal, error) {
	if len(a) < 1 || len(a) > 3 {
		return nil, fmt.Errorf("numpy.dtype with %d arguments", len(a))
	}
	d := &dtypeVal{order: '='}
	switch {
	case a[0].kind == vStr && !a[0].big:
		code := a[0].s
		if len(code) > 1 && strings.IndexByte("<>=|", code[0]) >= 0 {
			d.order, code = code[0], code[1:]
		}
		d.code = code
	case a[0].kind == vGlobal && a[0].role == roleScalarType:
		d.code = "bfloat16"
	default:
		return nil, fmt.Errorf("numpy.dtype of %s", describe(a[0]))
	}
	size, ok := dtypeSizes[d.code]
	if !ok || (a[0].kind == vStr && d.code == "bfloat16") {
		return nil, fmt.Errorf("numpy dtype %q is not supported", quote(a[0].s))
	}
	d.size = size
	return d, nil
}

// setShape sets an array's declared shape and checks it against the data,
// as numpy does: non-negative dimensions whose product times the item size
// is the data's length, computed without overflow.
func (a *arrayVal) setShape(shape *value) error {
	if shape.kind != vTuple {
		return fmt.Errorf("array shape is %s, not a tuple", describe(shape))
	}
	if len(shape.items) > maxDims {
		return fmt.Errorf("array shape has %d dimensions (numpy allows %d)", len(shape.items), maxDims)
	}
	dims := make([]int, len(shape.items))
	total := uint64(a.dtype.dt.size)
	overflow := false
	for i, d := range shape.items {
		switch {
		case d.kind != vInt:
			return fmt.Errorf("array shape has %s as dimension %d", describe(d), i)
		case d.big:
			return fmt.Errorf("array dimension %d does not fit 64 bits", i)
		case d.i < 0:
			return fmt.Errorf("array dimension %d is negative (%d)", i, d.i)
		case uint64(d.i) > math.MaxInt:
			return fmt.Errorf("array dimension %d is too large (%d)", i, d.i)
		}
		dims[i] = int(d.i)
		hi, lo := bits.Mul64(total, uint64(d.i))
		if hi != 0 || lo > math.MaxInt64 {
			overflow = true // keep checking the other dimensions: a 0 makes the array empty
		}
		total = lo
	}
	a.shape = dims
	if overflow && !slices.Contains(dims, 0) {
		return fmt.Errorf("array shape %v of %s is too large (its byte count overflows)", shapeString(dims), a.dtype.dt.code)
	}
	if overflow {
		total = 0
	}
	if total != uint64(a.n) {
		return fmt.Errorf("array shape %v of %s needs %d bytes, but its data has %d", shapeString(dims), a.dtype.dt.code, total, a.n)
	}
	return nil
}

// shapeString prints a shape from a hostile file, shortened if long.
func shapeString(dims []int) string {
	if len(dims) > 8 {
		return fmt.Sprintf("%v… (%d dimensions)", dims[:8], len(dims))
	}
	return fmt.Sprint(dims)
}

// newObj handles NEWOBJ and NEWOBJ_EX, which may only make the dataclass,
// with no arguments, as copyreg.__newobj__ pickles it.
func (w *walker) newObj(op byte) error {
	if op == opNewObjEx {
		kwargs, err := w.pop()
		if err != nil {
			return err
		}
		if kwargs.kind != vDict || len(kwargs.items) != 0 {
			return fmt.Errorf("NEWOBJ_EX with %s keyword arguments (only an empty dict)", describe(kwargs))
		}
	}
	args, err := w.pop()
	if err != nil {
		return err
	}
	cls, err := w.pop()
	if err != nil {
		return err
	}
	if cls.kind != vGlobal || cls.role != roleQuantized {
		return fmt.Errorf("NEWOBJ of %s is not allowed (only QuantizedWeight8bit)", describe(cls))
	}
	if args.kind != vTuple || len(args.items) != 0 {
		return fmt.Errorf("NEWOBJ of QuantizedWeight8bit with arguments (%s; only an empty tuple)", describe(args))
	}
	w.push(&value{kind: vObject, s: cls.s})
	return nil
}

// build handles BUILD, which may only fill an array made by _reconstruct,
// set a dtype's byte order, or set the fields of a QuantizedWeight8bit.
func (w *walker) build() error {
	state, err := w.pop()
	if err != nil {
		return err
	}
	target, err := w.top()
	if err != nil {
		return err
	}
	switch {
	case target.kind == vArray && target.arr.pending:
		return w.buildArray(target.arr, state)
	case target.kind == vDtype:
		return target.dt.setState(state)
	case target.kind == vObject && !target.built:
		return target.setFields(state)
	case target.kind == vArray || target.kind == vObject:
		return fmt.Errorf("BUILD on %s that is already built is not allowed", describe(target))
	default:
		return fmt.Errorf("BUILD on %s is not allowed", describe(target))
	}
}

// buildArray is ndarray.__setstate__((version,) shape, dtype, is_fortran, data).
func (w *walker) buildArray(a *arrayVal, state *value) error {
	s := state.items
	if state.kind != vTuple || (len(s) != 4 && len(s) != 5) {
		return fmt.Errorf("array state is %s with %d items, not numpy's (version, shape, dtype, is_fortran, data)", describe(state), len(s))
	}
	if len(s) == 5 {
		if v := s[0]; (v.kind != vInt && v.kind != vBool) || v.big || (v.i != 0 && v.i != 1) {
			return fmt.Errorf("array state version is not 0 or 1")
		}
		s = s[1:]
	}
	if s[1].kind != vDtype {
		return fmt.Errorf("array state has %s where the dtype belongs", describe(s[1]))
	}
	if f := s[2]; (f.kind != vBool && f.kind != vInt) || f.big {
		return fmt.Errorf("array state has %s where is_fortran belongs", describe(f))
	}
	if s[3].kind != vBytes {
		return fmt.Errorf("array data is %s, not a byte string (object arrays are not supported)", describe(s[3]))
	}
	a.at, a.dtype, a.off, a.n = w.op, s[1], s[3].off, s[3].n
	a.fortran = s[2].i != 0 // numpy takes any true int
	if err := a.setShape(s[0]); err != nil {
		return err
	}
	a.pending = false
	return nil
}

// setState is numpy.dtype.__setstate__((version, byteorder, subarray,
// names, fields, elsize, alignment, flags[, metadata])). Only the byte
// order may differ from the plain type: a subarray or fields would change
// the array's shape or layout.
func (d *dtypeVal) setState(state *value) error {
	s := state.items
	if state.kind != vTuple || len(s) < 2 {
		return fmt.Errorf("dtype state is %s, not numpy's (version, byteorder, …)", describe(state))
	}
	if o := s[1]; o.kind != vStr || len(o.s) != 1 || strings.IndexByte("<>=|", o.s[0]) < 0 {
		return fmt.Errorf("dtype state has %s where the byte order belongs", describe(o))
	}
	for i := 2; i < 5 && i < len(s); i++ {
		if s[i].kind != vNone {
			return fmt.Errorf("dtype %s with a subarray or fields is not supported", d.code)
		}
	}
	if len(s) > 5 {
		if e := s[5]; e.kind != vInt || e.big || (e.i != -1 && e.i != int64(d.size)) {
			return fmt.Errorf("dtype %s state gives an item size other than %d", d.code, d.size)
		}
	}
	d.order = s[1].s[0]
	return nil
}

// setFields is pickle's load_build on the dataclass, which has no
// __setstate__: the state is a dict, or (dict or None, slot dict or None);
// the dict's items are stored first, then the slots', so the last value
// given a name is the field's. The fields are read now, as Python copies
// them now: changing the state dict later changes nothing.
func (o *value) setFields(state *value) error {
	st, slots := state, (*value)(nil)
	if state.kind == vTuple && len(state.items) == 2 {
		st, slots = state.items[0], state.items[1]
	}
	if (st.kind != vDict && st.kind != vNone) || (slots != nil && slots.kind != vDict && slots.kind != vNone) {
		return fmt.Errorf("QuantizedWeight8bit state is %s, not a dict", describe(state))
	}
	field := func(name string) *value {
		if slots != nil {
			if v := slots.lookup(name); v != nil {
				return v
			}
		}
		return st.lookup(name)
	}
	o.items, o.built = []*value{field("weight"), field("scales")}, true
	return nil
}

// classify checks the top-level object and records its arrays.
func (w *walker) classify(top *value) error {
	switch {
	case top.kind == vArray && !top.arr.pending:
		w.res.Kind = objArray
		w.res.Arrays = []array{top.arr.result()}
		return nil
	case top.kind == vObject:
		if !top.built {
			return fmt.Errorf("QuantizedWeight8bit without a field dictionary")
		}
		wt, sc := top.items[0], top.items[1]
		for _, f := range []struct {
			name string
			v    *value
		}{{"weight", wt}, {"scales", sc}} {
			if f.v == nil {
				return fmt.Errorf("QuantizedWeight8bit lacks its weight or scales array: no %s", f.name)
			}
			if f.v.kind != vArray || f.v.arr.pending {
				return fmt.Errorf("QuantizedWeight8bit.%s is %s, not an array", f.name, describe(f.v))
			}
		}
		w.res.Kind = objQuantized
		w.res.Arrays = []array{wt.arr.result(), sc.arr.result()}
		return nil
	}
	if top.kind == vArray {
		return fmt.Errorf("file holds a numpy.ndarray that was never given its state")
	}
	return fmt.Errorf("file holds %s, not a numpy array or QuantizedWeight8bit", describe(top))
}

// result is what the reader needs of a built array.
func (a *arrayVal) result() array {
	d := a.dtype.dt
	return array{At: a.at, Off: a.off, Len: a.n, DType: d.code, Order: d.order, Shape: slices.Clone(a.shape), Fortran: a.fortran}
}
