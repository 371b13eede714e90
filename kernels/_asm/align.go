package main

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The Go linker aligns a data symbol to at most 32 bytes on amd64, so a
// 64-byte vector constant in RODATA starts mid-line about half the time,
// whatever the code: every full-width zmm load of it then reads two cache
// lines, and which constants do so moves with the rest of the binary
// (bench/README.md). Text symbols align to the largest PCALIGN they hold,
// so alignConsts moves the vector constants (64 to 512 bytes) into text
// symbols of their own, each starting with PCALIGN $64; the references
// (name<>+off(SB)) stay as they are. The larger tables are read an entry
// of at most 32 bytes at a time, at offsets that 32-byte alignment keeps
// within a line.

var (
	globlLine = regexp.MustCompile(`^GLOBL (\w+<>)\(SB\), RODATA\|NOPTR, \$(\d+)$`)
	dataLine  = regexp.MustCompile(`^DATA (\w+<>)\+(\d+)\(SB\)/(\d), \$0x([0-9a-f]+)$`)
)

// alignConsts rewrites the assembly file at path as above, and appends
// vecConstAddrs, which stores the moved constants' addresses (for the test
// that they are aligned in the linked binary); it returns how many.
func alignConsts(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	lines := strings.Split(string(b), "\n")
	size := map[string]int{}
	for _, l := range lines {
		if m := globlLine.FindStringSubmatch(l); m != nil {
			if n, _ := strconv.Atoi(m[2]); n >= 64 && n <= 512 {
				size[m[1]] = n
			}
		}
	}
	type datum struct {
		off, width int
		val        uint64
	}
	data := map[string][]datum{}
	var order []string
	var kept []string
	for _, l := range lines {
		if m := globlLine.FindStringSubmatch(l); m != nil && size[m[1]] > 0 {
			order = append(order, m[1])
			continue
		}
		if m := dataLine.FindStringSubmatch(l); m != nil && size[m[1]] > 0 {
			off, _ := strconv.Atoi(m[2])
			w, _ := strconv.Atoi(m[3])
			v, err := strconv.ParseUint(m[4], 16, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q: %v", path, l, err)
			}
			data[m[1]] = append(data[m[1]], datum{off, w, v})
			continue
		}
		if strings.HasPrefix(l, "DATA ") {
			for name := range size {
				if strings.HasPrefix(l, "DATA "+name+"+") {
					return 0, fmt.Errorf("%s: DATA line not understood: %q", path, l)
				}
			}
		}
		kept = append(kept, l)
	}
	for len(kept) > 0 && kept[len(kept)-1] == "" {
		kept = kept[:len(kept)-1]
	}
	var out strings.Builder
	out.WriteString(strings.Join(kept, "\n"))
	out.WriteString("\n")
	for _, name := range order {
		ds := data[name]
		sort.Slice(ds, func(i, j int) bool { return ds[i].off < ds[j].off })
		fmt.Fprintf(&out, "\n// %s: a vector constant in text, 64-byte aligned (alignConsts).\nTEXT %s(SB), NOSPLIT|NOFRAME, $0\n\tPCALIGN $64\n", name, name)
		at := 0
		for _, d := range ds {
			if d.off < at {
				return 0, fmt.Errorf("%s: %s: DATA at %d overlaps", path, name, d.off)
			}
			for ; at < d.off; at++ {
				out.WriteString("\tBYTE $0x00\n")
			}
			switch d.width {
			case 1:
				fmt.Fprintf(&out, "\tBYTE $0x%02x\n", d.val)
			case 2:
				fmt.Fprintf(&out, "\tWORD $0x%04x\n", d.val)
			case 4:
				fmt.Fprintf(&out, "\tLONG $0x%08x\n", d.val)
			case 8:
				fmt.Fprintf(&out, "\tQUAD $0x%016x\n", d.val)
			default:
				return 0, fmt.Errorf("%s: %s: DATA of width %d", path, name, d.width)
			}
			at += d.width
		}
		for ; at < size[name]; at++ {
			out.WriteString("\tBYTE $0x00\n")
		}
	}
	fmt.Fprintf(&out, "\n// func vecConstAddrs(p *[%d]uintptr)\nTEXT ·vecConstAddrs(SB), NOSPLIT, $0-8\n\tMOVQ p+0(FP), AX\n", len(order))
	for i, name := range order {
		fmt.Fprintf(&out, "\tLEAQ %s(SB), CX\n\tMOVQ CX, %d(AX)\n", name, 8*i)
	}
	out.WriteString("\tRET\n")
	return len(order), os.WriteFile(path, []byte(out.String()), 0o644)
}
