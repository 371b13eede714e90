package main

import (
	"math"
	"runtime/debug"
	"time"
	"unsafe"

	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/parallel"
)

// readMeter measures the memory bandwidth of the pool's threads on a
// buffer far beyond the last-level cache, three ways in the same run:
//
//   - read: each thread streams its range three ways: as several
//     interleaved streams with the widest loads the kernels have
//     (kernels.Dot); as the rows of an F32 matrix times a vector, the
//     one-token product's own loads (several rows at once, the next ones
//     prefetched); and with a scalar loop of eight independent sums. The
//     best of the three is the roofline decode is judged against;
//   - copy: copy() (the runtime's memmove) from one half to the other,
//     bytes read plus bytes written, as STREAM counts them;
//   - triad: y += a·x (kernels.Axpy), two reads and a write per element.
//
// Each figure is the best of its passes. Decode reads weights and writes
// almost nothing, so read is its roofline; copy and triad only show that
// read is not under-measuring (a roofline ratio above 1.0 would say so).
type readMeter struct {
	pool *parallel.Pool
	buf  []float32 // all ones, so that every loop's result can be checked

	wide   wideTask
	rows   rowsTask
	scalar readTask
	copyT  copyTask
	triad  triadTask

	bestGBs, scalarGBs, wideGBs, rowsGBs, copyGBs, triadGBs float64
	broken                                                  bool // a loop's result came out wrong
}

// readStreams is how many interleaved streams each thread reads: enough
// for the hardware prefetchers of both CPU kinds here to keep many lines
// in flight, as the decode kernels do reading four weight rows at once.
const readStreams = 4

// readPiece is the elements a stream reads per call (16 KiB).
const readPiece = 4096

func newReadMeter(pool *parallel.Pool, bytes int) *readMeter {
	m := &readMeter{pool: pool, buf: make([]float32, bytes/4/readPiece*readPiece)}
	for i := range m.buf {
		m.buf[i] = 1
	}
	th := pool.Threads()
	m.wide = wideTask{buf: m.buf, sums: make([]float64, 8*th)}
	m.rows = rowsTask{m: kernels.F32Mat(m.buf, len(m.buf)/readPiece, readPiece, false), x: m.buf[:readPiece], dst: make([]float32, len(m.buf)/readPiece)}
	m.scalar = readTask{buf: unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(m.buf))), len(m.buf)/2), sums: make([]uint64, 8*th)}
	half := len(m.buf) / 2 / readPiece * readPiece
	m.copyT = copyTask{dst: m.buf[:half], src: m.buf[half : 2*half]}
	m.triad = triadTask{y: m.buf[:half], x: m.buf[half : 2*half]}
	return m
}

// timeBest runs f passes times and returns the shortest time.
func timeBest(passes int, f func()) time.Duration {
	best := time.Duration(math.MaxInt64)
	for range passes {
		t0 := time.Now()
		f()
		best = min(best, time.Since(t0))
	}
	return best
}

// best runs passes read passes of each loop and returns the better loop's
// GB/s (0 if a loop's result came out wrong: the pool lost a range).
func (m *readMeter) best(passes int) float64 {
	if m.buf == nil {
		return 0
	}
	n := len(m.buf)
	clear(m.wide.sums)
	wide := timeBest(passes, func() { m.pool.Run(n/readPiece, 1, &m.wide) })
	var ws float64
	for _, s := range m.wide.sums {
		ws += s
	}
	rows := timeBest(passes, func() {
		clear(m.rows.dst) // so that a range the pool lost shows
		m.pool.Run(len(m.rows.dst), 4, &m.rows)
	})
	for _, v := range m.rows.dst {
		if v != readPiece {
			m.broken = true
			return 0
		}
	}
	clear(m.scalar.sums)
	scalar := timeBest(passes, func() { m.pool.Run(len(m.scalar.buf), 1024, &m.scalar) })
	var ss uint64
	for _, s := range m.scalar.sums {
		ss += s
	}
	const one = 0x3f800000_3f800000 // two float32 ones
	if ws != float64(n)*float64(passes) || ss != uint64(len(m.scalar.buf))*one*uint64(passes) {
		m.broken = true
		return 0
	}
	w := float64(4*n) / wide.Seconds() / 1e9
	s := float64(4*n) / scalar.Seconds() / 1e9
	r := float64(4*n) / rows.Seconds() / 1e9
	m.wideGBs, m.scalarGBs, m.rowsGBs = max(m.wideGBs, w), max(m.scalarGBs, s), max(m.rowsGBs, r)
	m.bestGBs = max(m.bestGBs, w, s, r)
	return max(w, s, r)
}

// crossCheck measures copy and triad, best of passes each. They write the
// buffer, so they run once, after the read passes: the triad adds 0.
func (m *readMeter) crossCheck(passes int) {
	if m.buf == nil {
		return
	}
	half := len(m.copyT.dst)
	c := timeBest(passes, func() { m.pool.Run(half/readPiece, 1, &m.copyT) })
	t := timeBest(passes, func() { m.pool.Run(half/readPiece, 1, &m.triad) })
	m.copyGBs = float64(2*4*half) / c.Seconds() / 1e9
	m.triadGBs = float64(3*4*half) / t.Seconds() / 1e9
}

// free returns the buffer's memory to the operating system, so that the
// resident size measured next is the model's.
func (m *readMeter) free() {
	if m.buf != nil {
		m.buf = nil
		m.wide, m.scalar, m.copyT, m.triad = wideTask{}, readTask{}, copyTask{}, triadTask{}
		debug.FreeOSMemory()
	}
}

// wideTask reads pieces [lo, hi) of the buffer as readStreams interleaved
// streams, each piece with kernels.Dot (the widest loads of the level).
type wideTask struct {
	buf  []float32
	sums []float64 // per worker, 8 apart so that workers never share a cache line
}

func (t *wideTask) Run(worker, lo, hi int) {
	n := hi - lo
	per := (n + readStreams - 1) / readStreams
	var s float64
	for k := 0; k < per; k++ {
		for st := 0; st < readStreams; st++ {
			p := lo + st*per + k
			if p >= lo+st*per+per || p >= hi {
				continue
			}
			x := t.buf[p*readPiece : (p+1)*readPiece]
			s += float64(kernels.Dot(x, x))
		}
	}
	t.sums[worker*8] += s
}

// rowsTask multiplies rows [lo, hi) of the buffer, viewed as an F32 matrix
// of readPiece columns, by a vector of ones: the one-token product's own
// access pattern (several rows at once, the next ones prefetched).
type rowsTask struct {
	m      kernels.Mat
	x, dst []float32
}

func (t *rowsTask) Run(_, lo, hi int) { kernels.MatMulRows(t.dst, t.x, 1, &t.m, lo, hi) }

// readTask sums a buffer of words on the pool with scalar loads.
type readTask struct {
	buf  []uint64
	sums []uint64 // per worker, 8 apart
}

func (r *readTask) Run(worker, lo, hi int) {
	b := r.buf[lo:hi]
	tail := b[len(b)&^7:]
	b = b[:len(b)&^7]
	// Eight independent sums keep eight loads in flight per iteration, so
	// the loop is bound by memory, not by the adds.
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for i := 0; i < len(b); i += 8 {
		x := b[i : i+8 : i+8]
		s0 += x[0]
		s1 += x[1]
		s2 += x[2]
		s3 += x[3]
		s4 += x[4]
		s5 += x[5]
		s6 += x[6]
		s7 += x[7]
	}
	for _, x := range tail {
		s0 += x
	}
	r.sums[worker*8] += s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// copyTask copies pieces [lo, hi) of src to dst.
type copyTask struct{ dst, src []float32 }

func (t *copyTask) Run(_, lo, hi int) {
	copy(t.dst[lo*readPiece:hi*readPiece], t.src[lo*readPiece:hi*readPiece])
}

// triadTask computes y += 0·x over pieces [lo, hi): STREAM's triad traffic
// (two reads, one write) that leaves the buffer's values as they are.
type triadTask struct{ y, x []float32 }

func (t *triadTask) Run(_, lo, hi int) {
	kernels.Axpy(t.y[lo*readPiece:hi*readPiece], 0, t.x[lo*readPiece:hi*readPiece])
}
