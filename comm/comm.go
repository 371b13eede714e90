// Package comm is the communication layer between the shards of a model
// split along the mesh's "model" axis (tensor parallelism, the seed §4.1 and
// §4.4): the few collectives a sharded forward pass needs, behind one
// interface, so that the model code is the same whether its shards are
// goroutine groups of one process (Local) or MPI ranks on several hosts
// (comm/mpi, built with the tag mpi).
package comm

import "errors"

// Comm is one rank's endpoint of a group of Size ranks. Every rank must make
// the same sequence of collective calls with buffers of the same lengths; a
// call returns only when every rank has made it (or the group was aborted).
type Comm interface {
	// Rank is this endpoint's index in [0, Size).
	Rank() int
	// Size is the number of ranks in the group.
	Size() int
	// AllReduceSum replaces buf on every rank by the element-wise sum of
	// every rank's buf. Implementations sum in rank order, so that the
	// result is the same on every rank and from run to run.
	AllReduceSum(buf []float32) error
	// AllGather sets dst, of Size()·len(src) elements, to the ranks' src
	// in rank order: rank r's at dst[r·len(src):].
	AllGather(dst, src []float32) error
	// Bcast copies root's buf into every other rank's buf (of equal length).
	Bcast(buf []byte, root int) error
	// Barrier returns when every rank has called it.
	Barrier() error
	// Abort ends the group: every rank's pending and later calls return
	// ErrAborted (in process) or the job ends with code (MPI).
	Abort(code int)
}

// ErrAborted is returned by the collectives of an aborted group.
var ErrAborted = errors.New("comm: the group was aborted")
