// Command _asm generates the amd64 assembly of package kernels with avo
// (github.com/mmcloughlin/avo). It lives in its own module so that avo is
// not a dependency of the engine. From kernels/_asm:
//
//	go run . -out ../zkernels_amd64.s -stubs ../zkernels_amd64.go -pkg kernels -tables ../ztables_amd64.go
//
// (kernels/gen.go carries the same line as a go:generate directive). Never
// edit the generated files by hand.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/format"
	"os"
	"regexp"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/reg"
)

var tables = flag.String("tables", "", "write the Go kernel tables to `file`")

// The generated files build on amd64 unless the noasm tag asks for the
// pure-Go kernels.
const (
	buildExpr = "amd64 && !noasm"
	buildTags = "amd64,!noasm" // avo's constraint syntax
)

// group is a set of assembly functions of one signature. Go code names a
// kernel by a small integer of the group's type and calls it through the
// type's generated call method, a switch of direct calls: escape analysis
// trusts //go:noescape on direct calls only, so calling through function
// values would move every stack buffer handed to a kernel to the heap.
type group struct {
	typ, params, args string
	funcs             []string
}

var groups []*group

func newGroup(typ, params, args string) *group {
	g := &group{typ: typ, params: params, args: args}
	groups = append(groups, g)
	return g
}

// add records a generated function and returns the Go constant naming it.
func (g *group) add(name string) string {
	g.funcs = append(g.funcs, name)
	return "k_" + name
}

var (
	dotGroup   = newGroup("dotKernel", "w *byte, ldw int, x *float32, ldx int, n int, out *float32, ldo int, scale *float32", "w, ldw, x, ldx, n, out, ldo, scale")
	intGroup   = newGroup("intKernel", "w *byte, ldw int, xq *byte, dx *float32, cr *int32, ldx int, n int, out *float32, ldo int, scale *float32", "w, ldw, xq, dx, cr, ldx, n, out, ldo, scale")
	inoutGroup = newGroup("inoutKernel", "acc *float32, lda int, w *byte, ldw int, xs *float32, n int, ng int", "acc, lda, w, ldw, xs, n, ng")
	quantGroup = newGroup("quantKernel", "x *float32, n int, xq *byte, dx *float32, cr *int32", "x, n, xq, dx, cr")
)

// genIntFamily generates a's int8 kernels and their table.
func genIntFamily(tb *strings.Builder, a arch) {
	name := a.name
	if a.zmm {
		name = "VNNI"
	}
	fmt.Fprintf(tb, "\nvar int%s = [...]intFamily{\n", name)
	for k := iQ8; k <= iI8; k++ {
		s := intShape(a, k)
		var full, one []string
		for T := 1; T <= s.T; T++ {
			genInt(a, k, s.R, T)
			genInt(a, k, 1, T)
			full = append(full, intGroup.add(intName(a, k, s.R, T)))
			one = append(one, intGroup.add(intName(a, k, 1, T)))
		}
		fmt.Fprintf(tb, "\tik%s: {R: %d, T: %d, B: %d, full: []intKernel{%s}, one: []intKernel{%s}},\n",
			k, s.R, s.T, intBlocks(a), strings.Join(full, ", "), strings.Join(one, ", "))
	}
	fmt.Fprintf(tb, "}\n")
}

func main() {
	flag.Parse() // avo's own flags are registered on flag.CommandLine
	ConstraintExpr(buildTags)

	genCPUID()
	var tb strings.Builder
	for _, a := range []arch{avx2, avx512} {
		genQuant(a)
		fmt.Fprintf(&tb, "\nconst quant%s = %s\n", a.name, quantGroup.add("quantQ8_"+a.name))

		fmt.Fprintf(&tb, "\nvar dot%s = [...]dotFamily{\n", a.name)
		for k := wF32; k <= wQ8; k++ {
			s := dotShapes(a, k)
			var full, one []string
			for T := 1; T <= s.T; T++ {
				genDot(a, k, s.R, T)
				genDot(a, k, 1, T)
				full = append(full, dotGroup.add(dotName(a, k, s.R, T)))
				one = append(one, dotGroup.add(dotName(a, k, 1, T)))
			}
			genDotPrefill(a, k, s.R, s.T)
			pre := dotGroup.add(dotPrefillName(a, k, s.R, s.T))
			acc := ""
			if k == wF32 && a.zmm { // the two-pass path's (F16 in pieces measured no faster)
				var names []string
				for m := 0; m < numAccModes; m++ {
					genDotAcc(a, k, m, s.R, s.T)
					names = append(names, dotGroup.add(dotAccName(a, k, m, s.R, s.T)))
				}
				acc = fmt.Sprintf(", acc: [3]dotKernel{%s}", strings.Join(names, ", "))
			}
			fmt.Fprintf(&tb, "\twk%s: {R: %d, T: %d, E: %d, full: []dotKernel{%s}, one: []dotKernel{%s}, pre: %s%s},\n",
				k, s.R, s.T, dotStepElems(a, k), strings.Join(full, ", "), strings.Join(one, ", "), pre, acc)
		}
		fmt.Fprintf(&tb, "}\n")

		genIntFamily(&tb, a)

		fmt.Fprintf(&tb, "\nvar inout%s = [...]inoutFamily{\n", a.name)
		for k := wF32; k <= wI8; k++ {
			s := inoutShape(a)
			var full, one []string
			for T := 1; T <= s.T; T++ {
				genInOut(a, k, s.R, T)
				genInOut(a, k, 1, T)
				full = append(full, inoutGroup.add(inoutName(a, k, s.R, T)))
				one = append(one, inoutGroup.add(inoutName(a, k, 1, T)))
			}
			fmt.Fprintf(&tb, "\twk%s: {K: %d, T: %d, V: %d, full: []inoutKernel{%s}, one: []inoutKernel{%s}},\n",
				k, s.R, s.T, a.V, strings.Join(full, ", "), strings.Join(one, ", "))
		}
		fmt.Fprintf(&tb, "}\n")

		fmt.Fprintf(&tb, "\nvar vec%s = vecKernels{%s}\n", a.name, genVec(a))

		genDequantTable(&tb, a)
		genFusedTable(&tb, a)
		fmt.Fprintf(&tb, "\nvar fmaPeak%s = %s\n", a.name, genFMAPeak(a))
	}
	genDequantTable(&tb, avx512zen)
	genFusedTable(&tb, avx512zen)
	genIntFamily(&tb, avxvnni)
	genFastTable(&tb)
	fmt.Fprintf(&tb, "\nvar intPeakVNNI = %s\n", genIntPeak())
	genPrefetchLines()
	Generate()
	if f := flag.Lookup("out"); f != nil && f.Value.String() != "" {
		if err := rewriteVEXVNNI(f.Value.String()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		n, err := alignConsts(f.Value.String())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(&tb, "\n// numVecConsts is how many vector constants vecConstAddrs reports.\nconst numVecConsts = %d\n", n)
		fmt.Fprintf(&tb, "\n// vecConstAddrs stores the addresses of the vector constants the\n// generator aligned to 64 bytes (kernels/_asm alignConsts).\n//\n//go:noescape\nfunc vecConstAddrs(p *[numVecConsts]uintptr)\n")
	}

	if *tables != "" {
		var hdr strings.Builder
		fmt.Fprintf(&hdr, "// Code generated by kernels/_asm. DO NOT EDIT.\n\n//go:build %s\n\npackage kernels\n", buildExpr)
		for _, g := range groups {
			fmt.Fprintf(&hdr, "\nconst (\n")
			for i, f := range g.funcs {
				if i == 0 {
					fmt.Fprintf(&hdr, "\tk_%s %s = iota + 1\n", f, g.typ)
				} else {
					fmt.Fprintf(&hdr, "\tk_%s\n", f)
				}
			}
			fmt.Fprintf(&hdr, ")\n\nfunc (k %s) call(%s) {\n\tswitch k {\n", g.typ, g.params)
			ret := "" // a params string holding ") (" declares results
			if strings.Contains(g.params, ")") {
				ret = "return "
			}
			for _, f := range g.funcs {
				fmt.Fprintf(&hdr, "\tcase k_%s:\n\t\t%s%s(%s)\n", f, ret, f, g.args)
			}
			fmt.Fprintf(&hdr, "\tdefault:\n\t\tpanic(\"kernels: no such kernel\")\n\t}\n}\n")
		}
		fmt.Fprintf(&hdr, "\n// sumSpan is the span the dot-form kernels sum over (kernels/_asm);\n// it must equal dotSpan.\nconst sumSpan = %d\n", sumSpan)
		src, err := format.Source([]byte(hdr.String() + tb.String()))
		if err == nil {
			err = os.WriteFile(*tables, src, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if out := flag.Lookup("out").Value.String(); out != "" && out != "-" {
		if err := checkVEX(out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// genCPUID emits cpuid, for the F16C bit that golang.org/x/sys/cpu does not
// report (its OS check for the ymm state is HasAVX).
func genCPUID() {
	TEXT("cpuid", NOSPLIT, "func(leaf, sub uint32) (a, b, c, d uint32)")
	Doc("cpuid executes CPUID with EAX=leaf, ECX=sub.")
	Load(Param("leaf"), EAX)
	Load(Param("sub"), ECX)
	CPUID()
	Store(EAX, Return("a"))
	Store(EBX, Return("b"))
	Store(ECX, Return("c"))
	Store(EDX, Return("d"))
	RET()
}

// checkVEX fails if a function meant for AVX2-only machines names a vector
// register above 15: the assembler would encode it with EVEX, which faults
// without AVX-512. avo's allocator prefers low registers but does not
// promise it.
func checkVEX(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	high := regexp.MustCompile(`\b[XYZ](1[6-9]|2[0-9]|3[01])\b|\bZ[0-9]+\b|\bK[1-7]\b`)
	fn := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "TEXT ") {
			fn = line
			continue
		}
		if strings.Contains(fn, "_AVX2(") && high.MatchString(line) {
			return fmt.Errorf("%s: AVX2 function uses an EVEX-only register: %s", fn, strings.TrimSpace(line))
		}
	}
	return sc.Err()
}
