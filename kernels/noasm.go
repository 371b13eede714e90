//go:build !amd64 || noasm

package kernels

// Without assembly no kernel set is ever active (levels holds only the
// pure-Go reference), so these are never called.

func (dotKernel) call(w *byte, ldw int, x *float32, ldx int, n int, out *float32, ldo int, scale *float32) {
	panic(noKernels)
}

func (intKernel) call(w *byte, ldw int, xq *byte, dx *float32, cr *int32, ldx int, n int, out *float32, ldo int, scale *float32) {
	panic(noKernels)
}

func (inoutKernel) call(acc *float32, lda int, w *byte, ldw int, xs *float32, n int, ng int) {
	panic(noKernels)
}

func (quantKernel) call(x *float32, n int, xq *byte, dx *float32, cr *int32) { panic(noKernels) }

func (axpyKernel) call(y *float32, alpha float32, x *float32, n int) { panic(noKernels) }

func (geluMulKernel) call(dst, a, b *float32, n int) { panic(noKernels) }

func (maxKernel) call(x *float32, n int) float32 { panic(noKernels) }

func (expSubKernel) call(x *float32, n int, m float32) float64 { panic(noKernels) }

func (scaleKernel) call(x *float32, n int, s float32) { panic(noKernels) }

func (softcapKernel) call(x *float32, n int, mult, m2c, c float32) { panic(noKernels) }

const noKernels = "kernels: built without assembly"

func (addScaledKernel) call(d, sc, a *float32, n int) { panic(noKernels) }

func (dequantKernel) call(dst *float32, src *byte, n int) { panic(noKernels) }

func (widenVecKernel) call(dst *float32, src *byte, n int) { panic(noKernels) }

func (fastKernel) call(ws *byte, ldw int, ds *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int) {
	panic(noKernels)
}

func (widenKernel) call(dst *byte, ds *float32, w *byte, ldw int, rows int, nb int) {
	panic(noKernels)
}

func (fastStoreKernel) call(dst *float32, ldd int, tiles *float32, l0 int, l1 int, m0 int, m1 int, sc *float32) {
	panic(noKernels)
}

func (quant16Kernel) call(x *float32, nb int, dst *byte) { panic(noKernels) }

func (quantS16Kernel) call(x *float32, nb int, dst *byte, ds *float32) { panic(noKernels) }

func (fastMKernel) call(ws *byte, ldw int, ds *float32, dm *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int) {
	panic(noKernels)
}

func (fastHKernel) call(ws *byte, ldw int, ds *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int) {
	panic(noKernels)
}

func (fastHMKernel) call(ws *byte, ldw int, ds *float32, dm *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int) {
	panic(noKernels)
}
