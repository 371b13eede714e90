package xaickpt

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// This file is a minimal pickle writer for tests. It emits the byte streams
// CPython's pickler (3.8-3.13) produces for numpy arrays and xAI's
// QuantizedWeight8bit dataclass under protocols 3, 4 and 5, including
// numpy's reduce functions (_reconstruct + BUILD with b'b' for 3/4,
// _frombuffer with BYTEARRAY8/BINBYTES for 5), the memo (objects Python
// shares by identity — globals, interned strings, dtypes, b'b' — are shared
// here by value) and protocol 4's framing (frames of about 64 KiB; payloads
// of 64 KiB or more written outside frames). TestWriterMatchesFixture and
// TestWriterMatchesNumpy check it byte for byte against files written by
// numpy 1.24.2 / Python 3.11.

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

// pyGlobal, pyTuple, pyDict and typecode are the Python values the writer
// composes the pickles of.
type (
	pyGlobal struct{ module, name string }
	pyTuple  []any
	pyKV     struct {
		k string
		v any
	}
	pyDict      []pyKV
	pyBytes     []byte // a fresh bytes object (never shared)
	pyByteArray []byte // protocol 5 bytearray (PickleBuffer of a writable array)
	typecode    struct{}
	dtypeObj    struct{ code, order string }
)

const frameTarget = 64 * 1024

// pickleWriter holds the state of one dump.
type pickleWriter struct {
	proto   int
	numpy2  bool // numpy ≥ 2 module names (numpy._core)
	out     []byte
	frame   []byte
	framing bool
	memo    map[string]int
	nmemo   int
}

// dumpPickle returns pickle.dumps(obj, protocol=proto) as numpy would make it.
func dumpPickle(proto int, obj any, numpy2 bool) []byte {
	p := &pickleWriter{proto: proto, numpy2: numpy2, memo: make(map[string]int)}
	p.out = append(p.out, opProto, byte(proto))
	if proto >= 4 {
		p.framing = true
	}
	p.save(obj)
	p.write(opStop)
	if p.framing && len(p.frame) > 0 {
		p.commitFrame(true)
	}
	return p.out
}

func (p *pickleWriter) write(b ...byte) {
	if p.framing {
		p.frame = append(p.frame, b...)
	} else {
		p.out = append(p.out, b...)
	}
}

// commitFrame is pickle's _Framer.commit_frame: a frame is flushed once it
// reaches 64 KiB (or when forced); frames under 4 bytes get no header.
func (p *pickleWriter) commitFrame(force bool) {
	if !p.framing || (len(p.frame) < frameTarget && !force) {
		return
	}
	if len(p.frame) >= 4 {
		p.out = append(p.out, opFrame)
		p.out = binary.LittleEndian.AppendUint64(p.out, uint64(len(p.frame)))
	}
	p.out = append(p.out, p.frame...)
	p.frame = nil
}

// writeLarge is _Framer.write_large_bytes: the current frame is closed and
// the header and payload go out unframed.
func (p *pickleWriter) writeLarge(header, payload []byte) {
	p.commitFrame(true)
	p.out = append(p.out, header...)
	p.out = append(p.out, payload...)
}

func (p *pickleWriter) memoize(key string) {
	idx := p.nmemo
	p.nmemo++
	if key != "" {
		p.memo[key] = idx
	}
	switch {
	case p.proto >= 4:
		p.write(opMemoize)
	case idx < 256:
		p.write(opBinPut, byte(idx))
	default:
		p.write(opLongBinPut)
		p.write(binary.LittleEndian.AppendUint32(nil, uint32(idx))...)
	}
}

func (p *pickleWriter) get(key string) bool {
	idx, ok := p.memo[key]
	if !ok {
		return false
	}
	if idx < 256 {
		p.write(opBinGet, byte(idx))
	} else {
		p.write(opLongBinGet)
		p.write(binary.LittleEndian.AppendUint32(nil, uint32(idx))...)
	}
	return true
}

func (p *pickleWriter) save(obj any) {
	p.commitFrame(false) // Pickler.save starts every object with this
	switch v := obj.(type) {
	case nil:
		p.write(opNone)
	case bool:
		if v {
			p.write(opNewTrue)
		} else {
			p.write(opNewFalse)
		}
	case int:
		p.saveInt(v)
	case string:
		p.saveStr(v)
	case pyGlobal:
		p.saveGlobal(v)
	case pyTuple:
		p.saveTuple(v)
	case pyDict:
		p.write(opEmptyDict)
		p.memoize("")
		if len(v) > 1 {
			p.write(opMark)
		}
		for _, kv := range v {
			p.save(kv.k)
			p.save(kv.v)
		}
		if len(v) > 1 {
			p.write(opSetItems)
		} else if len(v) == 1 {
			p.write(opSetItem)
		}
	case typecode:
		if !p.get("bytes:b") {
			p.saveBytes([]byte("b"), "bytes:b")
		}
	case pyBytes:
		p.saveBytes(v, "")
	case pyByteArray:
		header := binary.LittleEndian.AppendUint64([]byte{opByteArray8}, uint64(len(v)))
		if len(v) >= frameTarget {
			p.writeLarge(header, v)
		} else {
			p.write(append(header, v...)...)
		}
		p.memoize("")
	case dtypeObj:
		key := "dtype:" + v.code + v.order
		if p.get(key) {
			return
		}
		p.reduce(pyGlobal{"numpy", "dtype"}, pyTuple{v.code, false, true}, key,
			pyTuple{3, v.order, nil, nil, nil, -1, -1, 0})
	case npArray:
		p.saveArray(v)
	case qw8:
		mod := v.module
		if mod == "" {
			mod = "__main__"
		}
		// copyreg.__newobj__: NEWOBJ of the class with no arguments, then
		// BUILD with the instance dict.
		p.save(pyGlobal{mod, "QuantizedWeight8bit"})
		p.save(pyTuple{})
		p.write(opNewObj)
		p.memoize("")
		p.save(pyDict{{"weight", v.weight}, {"scales", v.scales}})
		p.write(opBuild)
	default:
		panic(fmt.Sprintf("pickleWriter: cannot save %T", obj))
	}
}

// reduce is Pickler.save_reduce for a plain callable.
func (p *pickleWriter) reduce(fn pyGlobal, args pyTuple, key string, state any) {
	p.save(fn)
	p.save(args)
	p.write(opReduce)
	p.memoize(key)
	if state != nil {
		p.save(state)
		p.write(opBuild)
	}
}

// saveArray is numpy's ndarray.__reduce_ex__ followed by save_reduce.
func (p *pickleWriter) saveArray(a npArray) {
	core := "numpy.core"
	if p.numpy2 {
		core = "numpy._core"
	}
	dt := dtypeObj{a.code, a.order}
	shape := make(pyTuple, len(a.shape))
	for i, d := range a.shape {
		shape[i] = d
	}
	if p.proto >= 5 {
		var buf any = pyByteArray(a.data)
		if a.readonly {
			buf = pyBytes(a.data)
		}
		order := "C"
		if a.fortran {
			order = "F"
		}
		p.reduce(pyGlobal{core + ".numeric", "_frombuffer"}, pyTuple{buf, dt, shape, order}, "", nil)
		return
	}
	p.reduce(pyGlobal{core + ".multiarray", "_reconstruct"}, pyTuple{pyGlobal{"numpy", "ndarray"}, pyTuple{0}, typecode{}}, "",
		pyTuple{1, shape, dt, a.fortran, pyBytes(a.data)})
}

func (p *pickleWriter) saveInt(v int) {
	switch {
	case v >= 0 && v <= 0xff:
		p.write(opBinInt1, byte(v))
	case v >= 0 && v <= 0xffff:
		p.write(opBinInt2, byte(v), byte(v>>8))
	case v >= -1<<31 && v < 1<<31:
		p.write(opBinInt)
		p.write(binary.LittleEndian.AppendUint32(nil, uint32(int32(v)))...)
	default:
		// LONG1 as encode_long writes a non-negative int: little-endian,
		// bit_length/8 + 1 bytes (shapes are never negative).
		var b []byte
		for x, n := uint64(v), bits.Len64(uint64(v))/8+1; n > 0; n-- {
			b = append(b, byte(x))
			x >>= 8
		}
		p.write(opLong1, byte(len(b)))
		p.write(b...)
	}
}

func (p *pickleWriter) saveStr(s string) {
	if p.get("str:" + s) {
		return
	}
	if p.proto >= 4 && len(s) < 256 {
		p.write(opShortBinUnicode, byte(len(s)))
	} else {
		p.write(opBinUnicode)
		p.write(binary.LittleEndian.AppendUint32(nil, uint32(len(s)))...)
	}
	p.write([]byte(s)...)
	p.memoize("str:" + s)
}

func (p *pickleWriter) saveBytes(b []byte, key string) {
	var header []byte
	switch {
	case len(b) < 256:
		header = []byte{opShortBinBytes, byte(len(b))}
	case uint64(len(b)) <= 0xffffffff:
		header = binary.LittleEndian.AppendUint32([]byte{opBinBytes}, uint32(len(b)))
	default:
		header = binary.LittleEndian.AppendUint64([]byte{opBinBytes8}, uint64(len(b)))
	}
	if len(b) >= frameTarget {
		p.writeLarge(header, b)
	} else {
		p.write(append(header, b...)...)
	}
	p.memoize(key)
}

func (p *pickleWriter) saveGlobal(g pyGlobal) {
	key := "global:" + g.module + "." + g.name
	if p.get(key) {
		return
	}
	if p.proto >= 4 {
		p.save(g.module)
		p.save(g.name)
		p.write(opStackGlobal)
	} else {
		p.write(opGlobal)
		p.write([]byte(g.module + "\n" + g.name + "\n")...)
	}
	p.memoize(key)
}

func (p *pickleWriter) saveTuple(t pyTuple) {
	if len(t) == 0 {
		p.write(opEmptyTuple)
		return
	}
	if len(t) <= 3 {
		for _, x := range t {
			p.save(x)
		}
		p.write(opTuple1 + byte(len(t)-1))
		p.memoize("")
		return
	}
	p.write(opMark)
	for _, x := range t {
		p.save(x)
	}
	p.write(opTuple)
	p.memoize("")
}
