package cluster

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/grok-go/grok/comm"
)

// State is how far a rank got in opening its model.
type State int

const (
	// Loaded: the rank holds its shard.
	Loaded State = iota
	// NotOpened: the command ended before it opened a model (a usage
	// error, or a command that needs none); fine when every rank says so.
	NotOpened
	// Failed: opening the model failed on this rank (it printed why).
	Failed
)

// Identity is what the ranks of a job must share: the build and the
// model, each as a digest.
type Identity struct {
	// State says whether the rest is meaningful.
	State State
	// Build names the binary: version, commit, Go version.
	Build string
	// Config, Tensors and Files digest the model's config, its tensor
	// table (names, types, shapes, sizes, offsets where the format has
	// them) and the sizes of the files it came from.
	Config, Tensors, Files [sha256.Size]byte
}

// Digest hashes parts, each length-prefixed so that no two lists collide.
func Digest(parts ...string) [sha256.Size]byte {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

const buildBytes = 256

// what lists the parts of an identity in the order of the mismatch bits.
var what = []string{"the build", "the model config", "the tensor table", "the model files' sizes"}

func (id *Identity) encode() []byte {
	b := make([]byte, buildBytes, buildBytes+3*sha256.Size)
	copy(b, id.Build) // cut at buildBytes: the digest below is whole
	d := Digest(id.Build)
	b = append(b, d[:]...)
	b = append(b, id.Config[:]...)
	b = append(b, id.Tensors[:]...)
	b = append(b, id.Files[:]...)
	return b
}

// Agree checks that every rank of c has the identity rank 0 has. Every
// rank must call it; each returns the same verdict: nil, or an error that
// names the ranks that differ and in what (on a follower it also says how
// its build differs from rank 0's).
func Agree(c comm.Comm, id Identity) error {
	mine := id.encode()
	root := make([]byte, len(mine))
	if c.Rank() == 0 {
		copy(root, mine)
	}
	if err := c.Bcast(root, 0); err != nil {
		return err
	}
	var mask uint32
	for i := range what {
		lo := buildBytes + i*sha256.Size
		if string(mine[lo:lo+sha256.Size]) != string(root[lo:lo+sha256.Size]) {
			mask |= 1 << i
		}
	}
	all := make([]float32, 2*c.Size())
	if err := c.AllGather(all, []float32{float32(mask), float32(id.State)}); err != nil {
		return err
	}
	var bad, failed, early []string
	for r := range c.Size() {
		switch State(all[2*r+1]) {
		case Failed:
			failed = append(failed, fmt.Sprint(r))
		case NotOpened:
			early = append(early, fmt.Sprint(r))
		}
	}
	switch {
	case len(early) == c.Size():
		return nil // no rank opened a model: nothing to compare
	case failed != nil:
		return fmt.Errorf("cluster: rank %s could not open the model (its error is above)", strings.Join(failed, ", "))
	case early != nil:
		return fmt.Errorf("cluster: rank %s ended before opening the model while others opened it", strings.Join(early, ", "))
	}
	for r := range c.Size() {
		m := all[2*r]
		if m == 0 {
			continue
		}
		var diff []string
		for i, w := range what {
			if uint32(m)&(1<<i) != 0 {
				diff = append(diff, w)
			}
		}
		bad = append(bad, fmt.Sprintf("rank %d has %s different", r, strings.Join(diff, ", ")))
	}
	if bad == nil {
		return nil
	}
	msg := fmt.Sprintf("cluster: the ranks do not run the same model and build: %s (from rank 0's)", strings.Join(bad, "; "))
	if mask&1 != 0 {
		msg += fmt.Sprintf("; this rank runs %q, rank 0 %q", id.Build, strings.TrimRight(string(root[:buildBytes]), "\x00"))
	}
	return fmt.Errorf("%s", msg)
}
