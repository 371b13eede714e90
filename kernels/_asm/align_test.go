package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// alignConsts moves the vector-sized RODATA symbols, bytes in offset order
// with their gaps zeroed, into 64-byte aligned text symbols and leaves the
// rest of the file alone.
func TestAlignConsts(t *testing.T) {
	in := `// header

TEXT ·f(SB), NOSPLIT, $0
	VMOVDQU32 v<>+0(SB), Z1
	RET

DATA v<>+4(SB)/4, $0x00000002
DATA v<>+0(SB)/4, $0x00000001
DATA v<>+10(SB)/2, $0xabcd
DATA v<>+56(SB)/8, $0x0102030405060708
GLOBL v<>(SB), RODATA|NOPTR, $64

DATA small<>+0(SB)/4, $0x00000007
GLOBL small<>(SB), RODATA|NOPTR, $32
`
	path := filepath.Join(t.TempDir(), "x.s")
	if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := alignConsts(path)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d constants moved, want 1", n)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if !strings.Contains(got, "\tLEAQ v<>(SB), CX\n\tMOVQ CX, 0(AX)\n\tRET\n") {
		t.Errorf("vecConstAddrs does not store v's address:\n%s", got)
	}
	for _, want := range []string{
		"\tVMOVDQU32 v<>+0(SB), Z1\n",
		"DATA small<>+0(SB)/4, $0x00000007\nGLOBL small<>(SB), RODATA|NOPTR, $32\n",
		"TEXT v<>(SB), NOSPLIT|NOFRAME, $0\n\tPCALIGN $64\n\tLONG $0x00000001\n\tLONG $0x00000002\n\tBYTE $0x00\n\tBYTE $0x00\n\tWORD $0xabcd\n",
		"\tQUAD $0x0102030405060708\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "DATA v<>") || strings.Contains(got, "GLOBL v<>") {
		t.Errorf("v's RODATA left in place:\n%s", got)
	}
	// 4 + 4 + 2 zero + 2 + 44 zero + 8 bytes: 64.
	var size int
	body := got[strings.Index(got, "TEXT v<>"):strings.Index(got, "TEXT ·vecConstAddrs")]
	for _, l := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(l, "\tBYTE"):
			size++
		case strings.HasPrefix(l, "\tWORD"):
			size += 2
		case strings.HasPrefix(l, "\tLONG"):
			size += 4
		case strings.HasPrefix(l, "\tQUAD"):
			size += 8
		}
	}
	if size != 64 {
		t.Errorf("v holds %d bytes, want 64", size)
	}
}

// Overlapping DATA is refused, not written twice.
func TestAlignConstsOverlap(t *testing.T) {
	in := "DATA v<>+0(SB)/8, $0x1\nDATA v<>+4(SB)/4, $0x2\nGLOBL v<>(SB), RODATA|NOPTR, $64\n"
	path := filepath.Join(t.TempDir(), "x.s")
	if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := alignConsts(path); err == nil {
		t.Fatal("overlapping DATA accepted")
	}
}
