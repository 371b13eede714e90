package xaickpt

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// detBytes is the deterministic content testdata/numpy-pickles/gen.py
// gives its arrays: byte i is (31·i + 7) mod 251.
func detBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((31*i + 7) % 251)
	}
	return b
}

// numpyObjects are the objects gen.py pickles, as the Go writer describes them.
func numpyObjects() map[string]any {
	arr := func(code, order string, size int, readonly bool, shape ...int) npArray {
		n := size
		for _, d := range shape {
			n *= d
		}
		return npArray{code: code, order: order, shape: shape, data: detBytes(n), readonly: readonly}
	}
	return map[string]any{
		"float":    arr("f4", "<", 4, false, 3, 5),
		"quant":    qw8{weight: arr("i1", "|", 1, false, 16, 6), scales: arr("u2", "<", 2, true, 8, 6)},
		"bigfloat": arr("f4", "<", 4, false, 130, 128),
		"bigquant": qw8{weight: arr("i1", "|", 1, false, 2, 256, 160), scales: arr("u2", "<", 2, true, 2, 8, 160)},
	}
}

// TestWriterMatchesNumpy checks the test writer byte for byte against
// pickles numpy 1.24.2 wrote (small ones stored, large ones by SHA-256), so
// that the round-trip tests below exercise exactly what numpy produces
// under protocols 3, 4 and 5.
func TestWriterMatchesNumpy(t *testing.T) {
	objs := numpyObjects()
	for _, name := range []string{"float", "quant"} {
		for proto := 3; proto <= 5; proto++ {
			file := fmt.Sprintf("%s.p%d", name, proto)
			want, err := os.ReadFile(filepath.Join("testdata/numpy-pickles", file))
			if err != nil {
				t.Fatal(err)
			}
			if got := dumpPickle(proto, objs[name], false); !bytes.Equal(got, want) {
				t.Errorf("%s: writer output differs from numpy's\n got %q\nwant %q", file, got, want)
			}
		}
	}
	f, err := os.Open("testdata/numpy-pickles/large.sha256")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var sum, file string
		var size int
		if _, err := fmt.Sscan(sc.Text(), &sum, &file, &size); err != nil {
			t.Fatal(err)
		}
		name, ps, _ := strings.Cut(file, ".p")
		var proto int
		fmt.Sscan(ps, &proto)
		got := dumpPickle(proto, objs[name], false)
		h := sha256.Sum256(got)
		if hex.EncodeToString(h[:]) != sum || len(got) != size {
			t.Errorf("%s: writer output (%d bytes) differs from numpy's (%d bytes)", file, len(got), size)
		}
		n++
	}
	if n != 6 {
		t.Errorf("large.sha256 has %d entries, want 6", n)
	}
}

// TestWriterMatchesFixture rebuilds every file of the shared fixture from
// the tensors read out of it and checks the bytes: the writer reproduces
// CPython's protocol-4 framing around payloads of 64 KiB and more.
func TestWriterMatchesFixture(t *testing.T) {
	c, err := Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ps := params(&c.cfg)
	for i, p := range ps {
		path := filepath.Join(fixture, CkptDirName, fileName(i))
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tt, _ := c.Lookup(p.Canon)
		var obj any = npArray{code: "f4", order: "<", shape: p.Shape, data: tt.Data}
		if tt.Scales != nil {
			obj = qw8{
				weight: npArray{code: "i1", order: "|", shape: p.Shape, data: tt.Data},
				scales: npArray{code: "u2", order: "<", shape: p.ScaleShape, data: tt.Scales.Data},
			}
		}
		if got := dumpPickle(4, obj, false); !bytes.Equal(got, want) {
			t.Errorf("%s: writer output differs from the fixture", path)
		}
	}
}

// TestWalkNumpyPickles walks numpy's own files.
func TestWalkNumpyPickles(t *testing.T) {
	tests := []struct {
		file    string
		kind    objectKind
		shapes  string // the arrays' declared shapes
		dtypes  []string
		errText string
	}{
		{file: "float.p3", kind: objArray, shapes: "[[3 5]]", dtypes: []string{"f4"}},
		{file: "float.p4", kind: objArray, shapes: "[[3 5]]", dtypes: []string{"f4"}},
		{file: "float.p5", kind: objArray, shapes: "[[3 5]]", dtypes: []string{"f4"}},
		{file: "quant.p3", kind: objQuantized, shapes: "[[16 6] [8 6]]", dtypes: []string{"i1", "u2"}},
		{file: "quant.p4", kind: objQuantized, shapes: "[[16 6] [8 6]]", dtypes: []string{"i1", "u2"}},
		{file: "quant.p5", kind: objQuantized, shapes: "[[16 6] [8 6]]", dtypes: []string{"i1", "u2"}},
		{file: "fortran.p4", kind: objArray, shapes: "[[2 3]]", dtypes: []string{"f4"}},
		{file: "fortran.p5", kind: objArray, shapes: "[[2 3]]", dtypes: []string{"f4"}},
		{file: "bigendian.p4", kind: objArray, shapes: "[[3]]", dtypes: []string{"f4"}},
		{file: "float.p2", errText: "_codecs.encode"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata/numpy-pickles", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			res, err := walk(data)
			if tc.errText != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("walk: %v, want an error mentioning %q", err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Kind != tc.kind {
				t.Errorf("kind %v, want %v", res.Kind, tc.kind)
			}
			var shapes [][]int
			var dts []string
			for _, a := range res.Arrays {
				shapes = append(shapes, a.Shape)
				dts = append(dts, a.DType)
				if got, want := a.Fortran, strings.HasPrefix(tc.file, "fortran"); got != want {
					t.Errorf("Fortran = %v, want %v", got, want)
				}
				if got, want := a.Order == '>', strings.HasPrefix(tc.file, "bigendian"); got != want {
					t.Errorf("order %q, big-endian expected: %v", a.Order, want)
				}
				// The data ranges hold the array bytes themselves.
				if !a.Fortran && !bytes.Equal(data[a.Off:a.Off+a.Len], detBytes(a.Len)) {
					t.Errorf("array data at %d does not hold the array bytes", a.Off)
				}
			}
			if fmt.Sprint(shapes) != tc.shapes || fmt.Sprint(dts) != fmt.Sprint(tc.dtypes) {
				t.Errorf("arrays %v %v, want %v %v", shapes, dts, tc.shapes, tc.dtypes)
			}
		})
	}
}

// TestWalkVariants walks writer output for names the fixtures do not use:
// numpy ≥ 2 module names, model.QuantizedWeight8bit, a bfloat16 dtype
// named by ml_dtypes.
func TestWalkVariants(t *testing.T) {
	w := npArray{code: "i1", order: "|", shape: []int{4, 2}, data: detBytes(8)}
	s := npArray{code: "u2", order: "<", shape: []int{1, 2}, data: detBytes(4)}
	for proto := 3; proto <= 5; proto++ {
		for _, numpy2 := range []bool{false, true} {
			for _, mod := range []string{"__main__", "model"} {
				data := dumpPickle(proto, qw8{weight: w, scales: s, module: mod}, numpy2)
				res, err := walk(data)
				if err != nil {
					t.Fatalf("proto %d numpy2 %v %s: %v", proto, numpy2, mod, err)
				}
				if res.Kind != objQuantized || res.Protocol != proto {
					t.Errorf("proto %d: kind %v protocol %d", proto, res.Kind, res.Protocol)
				}
			}
		}
	}
	// numpy.dtype(ml_dtypes.bfloat16, False, True), as real xAI files
	// name their scales' dtype.
	bf := bfloat16Pickle("ml_dtypes", "bfloat16")
	res, err := walk(bf)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Arrays[0].DType; got != "bfloat16" {
		t.Errorf("dtype %q, want bfloat16", got)
	}
	if _, err := walk(bfloat16Pickle("evil", "bfloat16")); err == nil {
		t.Error("bfloat16 from an unknown module was accepted")
	}
	if _, err := walk(bfloat16Pickle("ml_dtypes", "system")); err == nil {
		t.Error("ml_dtypes.system was accepted")
	}
}

// bfloat16Pickle is a protocol-4 float array whose dtype is
// numpy.dtype(<module.name>, False, True): how numpy pickles a dtype of a
// user-defined scalar type such as ml_dtypes.bfloat16.
func bfloat16Pickle(module, name string) []byte {
	var b []byte
	str := func(s string) { b = append(append(b, opShortBinUnicode, byte(len(s))), s...) }
	b = append(b, opProto, 4)
	str("numpy.core.multiarray")
	str("_reconstruct")
	b = append(b, opStackGlobal)
	str("numpy")
	str("ndarray")
	b = append(b, opStackGlobal, opBinInt1, 0, opTuple1, opShortBinBytes, 1, 'b', opTuple3, opReduce)
	b = append(b, opMark, opBinInt1, 1, opBinInt1, 2, opTuple1)
	str("numpy")
	str("dtype")
	b = append(b, opStackGlobal)
	str(module)
	str(name)
	b = append(b, opStackGlobal, opNewFalse, opNewTrue, opTuple3, opReduce)
	b = append(b, opMark, opBinInt1, 3)
	str("<")
	b = append(b, opNone, opNone, opNone, opBinInt1, 2, opBinInt1, 2, opBinInt1, 0, opTuple, opBuild)
	b = append(b, opNewFalse, opShortBinBytes, 4, 1, 2, 3, 4, opTuple, opBuild, opStop)
	return b
}

// hostile builds small pickles by hand for TestWalkHostile.
func hostile(ops ...any) []byte {
	b := []byte{opProto, 4}
	for _, o := range ops {
		switch v := o.(type) {
		case byte:
			b = append(b, v)
		case int:
			b = append(b, byte(v))
		case rune:
			b = append(b, byte(v))
		case string:
			b = append(append(b, opShortBinUnicode, byte(len(v))), v...)
		case []byte:
			b = append(b, v...)
		}
	}
	return b
}

// objectArray replaces the data of a pickled 8-byte array with an empty
// list, as numpy pickles an object array.
func objectArray(p []byte) []byte {
	i := bytes.LastIndex(p, []byte{opShortBinBytes, 8})
	return slices.Concat(p[:i], []byte{opEmptyList}, p[i+10:])
}

// TestWalkHostile feeds the walker pickles that try to run code or break
// its bookkeeping; each must fail with an error that says why.
func TestWalkHostile(t *testing.T) {
	float := dumpPickle(3, npArray{code: "f4", order: "<", shape: []int{2}, data: detBytes(8)}, false) // no FRAME to fix up
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"os.system via STACK_GLOBAL", hostile("os", "system", byte(opStackGlobal), "echo hi", byte(opTuple1), byte(opReduce), byte(opStop)), "global os.system is not allowed"},
		{"os.system via GLOBAL", append([]byte{opProto, 3, opGlobal}, "os\nsystem\n"...), "global os.system is not allowed"},
		{"builtins.eval", hostile("builtins", "eval", byte(opStackGlobal), byte(opStop)), "builtins.eval"},
		{"REDUCE of ndarray", hostile("numpy", "ndarray", byte(opStackGlobal), byte(opEmptyTuple), byte(opReduce), byte(opStop)), "REDUCE of numpy.ndarray is not allowed"},
		{"REDUCE of QuantizedWeight8bit", hostile("__main__", "QuantizedWeight8bit", byte(opStackGlobal), byte(opEmptyTuple), byte(opReduce), byte(opStop)), "REDUCE of __main__.QuantizedWeight8bit"},
		{"REDUCE of a string", hostile("x", byte(opEmptyTuple), byte(opReduce), byte(opStop)), "REDUCE of a str"},
		{"NEWOBJ of numpy.dtype", hostile("numpy", "dtype", byte(opStackGlobal), byte(opEmptyTuple), byte(opNewObj), byte(opStop)), "NEWOBJ of numpy.dtype is not allowed"},
		{"BUILD on a dict", hostile(byte(opEmptyDict), byte(opEmptyDict), byte(opBuild), byte(opStop)), "BUILD on a dict"},
		{"INST", hostile(byte(opInst), []byte("os\nsystem\n"), byte(opStop)), "INST/OBJ"},
		{"OBJ", hostile(byte(opMark), byte(opObj), byte(opStop)), "INST/OBJ"},
		{"EXT1", hostile(byte(opExt1), 1, byte(opStop)), "EXT1"},
		{"EXT4", hostile(byte(opExt4), 1, 0, 0, 0, byte(opStop)), "EXT1"},
		{"PERSID", hostile(byte(opPersID), []byte("x\n"), byte(opStop)), "persistent ids"},
		{"BINPERSID", hostile("x", byte(opBinPersID), byte(opStop)), "persistent ids"},
		{"NEXT_BUFFER", hostile(byte(opNextBuffer), byte(opStop)), "out-of-band"},
		{"text INT", hostile(byte(opInt), []byte("1\n"), byte(opStop)), "protocol 0-2 form"},
		{"_codecs.encode", hostile("_codecs", "encode", byte(opStackGlobal), byte(opStop)), "_codecs.encode"},
		{"no PROTO", []byte{opNone, opStop}, "no PROTO"},
		{"protocol 6", []byte{opProto, 6, opNone, opStop}, "protocol 6"},
		{"protocol 1", []byte{opProto, 1, opNone, opStop}, "protocol 1"},
		{"unknown opcode", hostile(0xff), "unknown opcode 0xff"},
		{"empty", nil, "truncated"},
		{"no STOP", hostile(byte(opNone)), "no STOP"},
		{"stack underflow", hostile(byte(opStop)), "stack underflow"},
		{"TUPLE3 underflow", hostile(byte(opNone), byte(opTuple3)), "stack underflow"},
		{"pop past MARK", hostile(byte(opNone), byte(opMark), byte(opTuple1)), "stack underflow"},
		{"TUPLE without MARK", hostile(byte(opTuple)), "no MARK"},
		{"BINGET of nothing", hostile(byte(opBinGet), 7, byte(opStop)), "memo index 7"},
		{"SETITEM on a list", hostile(byte(opEmptyList), byte(opNone), byte(opNone), byte(opSetItem), byte(opStop)), "applied to a list"},
		{"odd SETITEMS", hostile(byte(opEmptyDict), byte(opMark), byte(opNone), byte(opSetItems), byte(opStop)), "odd number"},
		{"LONG4 negative", hostile(byte(opLong4), 0xff, 0xff, 0xff, 0xff), "negative length"},
		{"BINBYTES past the end", hostile(byte(opBinBytes), 0xff, 0xff, 0xff, 0x7f), "truncated"},
		{"BINBYTES8 huge", hostile(byte(opBinBytes8), []byte{0, 0, 0, 0, 0, 0, 0, 0x80}), "truncated"},
		{"FRAME past the end", hostile(byte(opFrame), []byte{0xff, 0, 0, 0, 0, 0, 0, 0}), "FRAME"},
		{"STACK_GLOBAL of ints", hostile(byte(opBinInt1), 1, byte(opBinInt1), 2, byte(opStackGlobal)), "two strings"},
		{"top-level None", hostile(byte(opNone), byte(opStop)), "holds a None"},
		{"top-level dtype", hostile("numpy", "dtype", byte(opStackGlobal), "f4", byte(opTuple1), byte(opReduce), byte(opStop)), "holds a numpy.dtype"},
		{"array never built", hostile("numpy.core.multiarray", "_reconstruct", byte(opStackGlobal), "numpy", "ndarray", byte(opStackGlobal), byte(opBinInt1), 0, byte(opTuple1), byte(opShortBinBytes), 1, 'b', byte(opTuple3), byte(opReduce), byte(opStop)), "holds a numpy.ndarray"},
		{"object array", objectArray(float), "not a byte string"},
		{"QuantizedWeight8bit without fields", hostile("__main__", "QuantizedWeight8bit", byte(opStackGlobal), byte(opEmptyTuple), byte(opNewObj), byte(opEmptyDict), byte(opBuild), byte(opStop)), "lacks its weight or scales"},
		{"QuantizedWeight8bit with a str weight", hostile("__main__", "QuantizedWeight8bit", byte(opStackGlobal), byte(opEmptyTuple), byte(opNewObj), byte(opEmptyDict), "weight", "x", byte(opSetItem), byte(opBuild), byte(opStop)), "weight is a str"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := walk(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("walk: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestWalkTruncated cuts real pickles at every length: every prefix must
// fail cleanly (none of them can end in STOP).
func TestWalkTruncated(t *testing.T) {
	files, _ := filepath.Glob("testdata/numpy-pickles/*.p[345]")
	files = append(files, filepath.Join(fixture, CkptDirName, "tensor00005_000"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := walk(data); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for n := 0; n < len(data); n++ {
			if _, err := walk(data[:n:n]); err == nil {
				t.Errorf("%s cut to %d bytes: no error", f, n)
			}
		}
	}
}

// FuzzWalk checks that no input makes the walker panic or report an array
// outside its input or whose shape does not fit its bytes.
func FuzzWalk(f *testing.F) {
	files, _ := filepath.Glob("testdata/numpy-pickles/*.p*")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	for proto := 3; proto <= 5; proto++ {
		f.Add(dumpPickle(proto, qw8{
			weight: npArray{code: "i1", order: "|", shape: []int{4, 2}, data: detBytes(8)},
			scales: npArray{code: "u2", order: "<", shape: []int{2, 2}, data: detBytes(8), readonly: true},
		}, proto == 5))
	}
	f.Add(bfloat16Pickle("ml_dtypes", "bfloat16"))
	for _, tc := range hostileArrays() {
		f.Add(tc.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := walk(data)
		if err != nil {
			return
		}
		if want := map[objectKind]int{objArray: 1, objQuantized: 2}[res.Kind]; len(res.Arrays) != want {
			t.Fatalf("kind %v with %d arrays", res.Kind, len(res.Arrays))
		}
		for _, a := range res.Arrays {
			if a.Off < 0 || a.Len < 0 || a.Off+a.Len > len(data) {
				t.Fatalf("array %+v outside %d bytes", a, len(data))
			}
			n := dtypeSizes[a.DType]
			for _, d := range a.Shape {
				n *= d
			}
			if n != a.Len {
				t.Fatalf("array %+v: shape and dtype need %d bytes", a, n)
			}
		}
	})
}
