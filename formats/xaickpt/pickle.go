package xaickpt

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// This file is a pickle opcode walker, not an unpickler. It steps through
// the opcodes of one checkpoint file, keeps a stack of lightweight
// placeholders (enough to know which callable a REDUCE applies, which array
// a byte string belongs to and what the top-level object is) and records
// every byte string as a range of the file, so the multi-gigabyte payloads
// are never copied. Nothing is ever imported or called: a GLOBAL outside
// allowedGlobals, a REDUCE/NEWOBJ/BUILD of anything but numpy's array and
// dtype reconstruction and QuantizedWeight8bit, and every opcode that can
// run code by other routes (INST, OBJ, EXT*, PERSID) is an error.

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
// orders of magnitude. A real tensor file has about a hundred opcodes.
const (
	maxOpcodes   = 1 << 20
	maxStringLen = 1 << 10 // names and dtype codes; longer strings are kept as a marker only
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

// vkind is the kind of a placeholder on the walker's stack.
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

var vkindNames = [...]string{"None", "bool", "int", "float", "str", "bytes", "tuple", "list", "dict", "set", "global", "numpy.dtype", "numpy.ndarray", "object"}

func (k vkind) String() string { return vkindNames[k] }

// value is a placeholder for a Python object: only what the walker needs to
// validate the structure and to attribute byte strings to arrays.
type value struct {
	kind  vkind
	i     int64  // vInt (when !big), vBool
	big   bool   // vInt that does not fit int64
	s     string // vStr (truncated past maxStringLen), vGlobal "module.name"
	role  globalRole
	pl    int      // vBytes: index into walkResult.Payloads
	items []*value // vTuple, vList, vSet; vDict as key, value, key, value…

	dtype   *value // vArray: its dtype
	pending bool   // vArray made by _reconstruct, waiting for its BUILD
	state   *value // vObject: the BUILD state
	code    string // vDtype: "f4", "i1", "u2", "bfloat16", …
	order   string // vDtype: byte order from its BUILD state ("<", "|", ">", "=")
}

// payload is one byte string of a pickle: bytes [Off, Off+Len) of the file.
type payload struct {
	Off, Len int
	// Typecode marks numpy's b'b' third argument to _reconstruct, which is
	// not array data.
	Typecode bool
	// The dtype code and byte order of the array whose data this is, when
	// the walker saw it ("" otherwise), and whether that array is stored in
	// Fortran (column-major) order.
	DType, Order string
	Fortran      bool
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
	Payloads []payload
}

// walker holds the state of one walk.
type walker struct {
	data   []byte
	pos    int
	op     int // offset of the current opcode, for errors
	stack  []*value
	marks  []int
	memo   map[uint32]*value
	res    walkResult
	arrays []*value // every array built, to attribute payload dtypes at the end
}

// walk validates one pickle and returns its payloads and top-level kind.
func walk(data []byte) (*walkResult, error) {
	w := &walker{data: data, memo: make(map[uint32]*value)}
	top, err := w.run()
	if err != nil {
		return nil, fmt.Errorf("pickle offset %d: %w", w.op, err)
	}
	if err := w.classify(top); err != nil {
		return nil, fmt.Errorf("pickle: %w", err)
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

func (w *walker) pop() (*value, error) {
	if len(w.stack) == 0 || (len(w.marks) > 0 && len(w.stack) == w.marks[len(w.marks)-1]) {
		return nil, fmt.Errorf("stack underflow")
	}
	v := w.stack[len(w.stack)-1]
	w.stack = w.stack[:len(w.stack)-1]
	return v, nil
}

func (w *walker) top() (*value, error) {
	if len(w.stack) == 0 || (len(w.marks) > 0 && len(w.stack) == w.marks[len(w.marks)-1]) {
		return nil, fmt.Errorf("stack underflow")
	}
	return w.stack[len(w.stack)-1], nil
}

// popMark pops everything above the innermost MARK.
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
	if len(b) > maxStringLen {
		b = b[:maxStringLen]
	}
	return &value{kind: vStr, s: string(b)}, nil
}

// bytesPayload records a byte string operand of n bytes as a payload.
func (w *walker) bytesPayload(n uint64) (*value, error) {
	off := w.pos
	if _, err := w.take(n); err != nil {
		return nil, err
	}
	w.res.Payloads = append(w.res.Payloads, payload{Off: off, Len: int(n)})
	return &value{kind: vBytes, pl: len(w.res.Payloads) - 1}, nil
}

// run steps through the opcodes up to STOP and returns the top of the stack.
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
		if op == opStop {
			return w.pop()
		}
		if err := w.step(op); err != nil {
			return nil, err
		}
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
		if len(w.stack) > 0 && (len(w.marks) == 0 || len(w.stack) > w.marks[len(w.marks)-1]) {
			w.stack = w.stack[:len(w.stack)-1]
		} else if _, err := w.popMark(); err != nil { // pickle.py: POP of a bare MARK pops the mark
			return err
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
		v, err := w.bytesPayload(n)
		if err != nil {
			return err
		}
		w.push(v)
	case opByteArray8:
		n, err := w.u64()
		if err != nil {
			return err
		}
		v, err := w.bytesPayload(n)
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
	case opTuple, opList, opDict, opFrozenSet:
		items, err := w.popMark()
		if err != nil {
			return err
		}
		k := vTuple
		switch op {
		case opList:
			k = vList
		case opDict:
			k = vDict
			if len(items)%2 != 0 {
				return fmt.Errorf("DICT with an odd number of items")
			}
		case opFrozenSet:
			k = vSet
		}
		w.push(&value{kind: k, items: items})
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
			idx = uint64(len(w.memo))
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
		return w.global(module, name)
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
		return w.global(module.s, name.s)
	case opReduce:
		return w.reduce()
	case opNewObj, opNewObjEx:
		if op == opNewObjEx {
			if _, err := w.pop(); err != nil { // kwargs
				return err
			}
		}
		if _, err := w.pop(); err != nil { // args
			return err
		}
		cls, err := w.pop()
		if err != nil {
			return err
		}
		if cls.kind != vGlobal || cls.role != roleQuantized {
			return fmt.Errorf("NEWOBJ of %s is not allowed (only QuantizedWeight8bit)", describe(cls))
		}
		w.push(&value{kind: vObject, s: cls.s})
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
	i := strings.IndexByte(string(rest), '\n')
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
func (w *walker) global(module, name string) error {
	role, err := globalRoleOf(module, name)
	if err != nil {
		return err
	}
	w.push(&value{kind: vGlobal, s: module + "." + name, role: role})
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
	target.items = append(target.items, items...)
	return nil
}

// describe names a placeholder in error messages.
func describe(v *value) string {
	if v.kind == vGlobal {
		return quote(v.s)
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
		if len(a) != 3 || a[0].kind != vGlobal || a[0].role != roleNdarray {
			return fmt.Errorf("_reconstruct needs (numpy.ndarray, shape, typecode)")
		}
		if a[2].kind == vBytes {
			w.res.Payloads[a[2].pl].Typecode = true
		}
		w.push(&value{kind: vArray, pending: true})
	case roleDtype:
		if len(a) < 1 {
			return fmt.Errorf("numpy.dtype without arguments")
		}
		d := &value{kind: vDtype}
		switch {
		case a[0].kind == vStr:
			d.code = a[0].s
		case a[0].kind == vGlobal && a[0].role == roleScalarType:
			d.code = "bfloat16"
		default:
			return fmt.Errorf("numpy.dtype of %s", describe(a[0]))
		}
		w.push(d)
	case roleFrombuffer:
		// _frombuffer(buffer, dtype, shape, order): protocol 5's array.
		if len(a) != 4 || a[0].kind != vBytes || a[1].kind != vDtype || a[3].kind != vStr {
			return fmt.Errorf("_frombuffer needs (buffer, dtype, shape, order)")
		}
		arr := &value{kind: vArray, dtype: a[1], pl: a[0].pl}
		if a[3].s == "F" {
			w.res.Payloads[a[0].pl].Fortran = true
		}
		w.arrays = append(w.arrays, arr)
		w.push(arr)
	}
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
	case target.kind == vArray && target.pending:
		// ndarray.__setstate__((version,) shape, dtype, is_fortran, data).
		s := state.items
		if state.kind != vTuple || (len(s) != 4 && len(s) != 5) {
			return fmt.Errorf("array state is %s with %d items, not numpy's (version, shape, dtype, is_fortran, data)", describe(state), len(s))
		}
		s = s[len(s)-4:]
		if s[1].kind != vDtype {
			return fmt.Errorf("array state has %s where the dtype belongs", describe(s[1]))
		}
		if s[3].kind != vBytes {
			return fmt.Errorf("array data is %s, not a byte string (object arrays are not supported)", describe(s[3]))
		}
		target.pending = false
		target.dtype = s[1]
		target.pl = s[3].pl
		if s[2].kind == vBool && s[2].i != 0 {
			w.res.Payloads[s[3].pl].Fortran = true
		}
		w.arrays = append(w.arrays, target)
	case target.kind == vDtype:
		// numpy.dtype.__setstate__((version, byteorder, …)).
		if state.kind == vTuple && len(state.items) > 1 && state.items[1].kind == vStr {
			target.order = state.items[1].s
		}
	case target.kind == vObject && target.state == nil:
		target.state = state
	default:
		return fmt.Errorf("BUILD on %s is not allowed", describe(target))
	}
	return nil
}

// classify checks the top-level object and attributes dtypes to payloads.
func (w *walker) classify(top *value) error {
	for _, a := range w.arrays {
		p := &w.res.Payloads[a.pl]
		p.DType, p.Order = a.dtype.code, a.dtype.order
	}
	switch {
	case top.kind == vArray && !top.pending:
		w.res.Kind = objArray
		return nil
	case top.kind == vObject:
		st := top.state
		if st != nil && st.kind == vTuple && len(st.items) == 2 && st.items[0].kind == vDict {
			st = st.items[0] // (dict, slots) state
		}
		if st == nil || st.kind != vDict {
			return fmt.Errorf("QuantizedWeight8bit without a field dictionary")
		}
		found := map[string]bool{}
		for i := 0; i+1 < len(st.items); i += 2 {
			k, v := st.items[i], st.items[i+1]
			if k.kind == vStr && (k.s == "weight" || k.s == "scales") {
				if v.kind != vArray || v.pending {
					return fmt.Errorf("QuantizedWeight8bit.%s is %s, not an array", k.s, describe(v))
				}
				found[k.s] = true
			}
		}
		if !found["weight"] || !found["scales"] {
			return fmt.Errorf("QuantizedWeight8bit lacks its weight or scales array")
		}
		w.res.Kind = objQuantized
		return nil
	}
	return fmt.Errorf("file holds %s, not a numpy array or QuantizedWeight8bit", describe(top))
}
