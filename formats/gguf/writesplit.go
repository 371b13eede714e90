package gguf

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Split divides the file w would write into gguf-split shards, as llama.cpp's
// llama-gguf-split does, and returns one Writer per shard. Exactly one limit
// is positive: maxTensors starts a new shard every maxTensors tensors;
// maxBytes starts one before a tensor that would take the shard's tensor
// data (each tensor padded to 32 bytes, as gguf-split counts) past maxBytes,
// though a shard always holds at least one tensor.
//
// The first shard holds all of w's metadata followed by split.no (u16),
// split.tensors.count (i32) and split.count (u16), in gguf-split's order
// (it sets split.count last, once it knows it); the others hold only those
// three keys, so that the shards are byte for byte what gguf-split writes. Split keys already in w (from a model that was itself
// split) are dropped. A file without tensors becomes one shard.
func (w *Writer) Split(maxTensors int, maxBytes int64) ([]*Writer, error) {
	if w.err != nil {
		return nil, w.err
	}
	if (maxTensors > 0) == (maxBytes > 0) {
		return nil, errors.New("gguf: split: give either a tensor count or a byte size per shard")
	}
	if len(w.tensors) > math.MaxInt32 {
		return nil, fmt.Errorf("gguf: split: %d tensors do not fit split.tensors.count (i32)", len(w.tensors))
	}
	// Group the tensors.
	var groups [][]wtensor
	var cur []wtensor
	var curBytes int64
	for i, t := range w.tensors {
		n := pad(t.size, DefaultAlignment)
		var cut bool
		if maxTensors > 0 {
			cut = i > 0 && i%maxTensors == 0
		} else {
			cut = len(cur) > 0 && curBytes+n > maxBytes
		}
		if cut {
			groups = append(groups, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, t)
		curBytes += n
	}
	groups = append(groups, cur)
	if len(groups) > math.MaxUint16 {
		return nil, fmt.Errorf("gguf: split: %d shards do not fit split.count (u16); raise the limit per shard", len(groups))
	}

	out := make([]*Writer, len(groups))
	for i, g := range groups {
		s := NewWriter()
		if i == 0 {
			for _, kv := range w.kvs {
				if !strings.HasPrefix(kv.Key, "split.") {
					s.AddKV(kv.Key, kv.Value) // checked when added to w
				}
			}
		}
		s.AddKV(SplitNoKey, uint16(i))
		s.AddKV(SplitTensorsCountKey, int32(len(w.tensors)))
		s.AddKV(SplitCountKey, uint16(len(groups)))
		for _, t := range g {
			s.names[t.name] = true
			s.tensors = append(s.tensors, t)
		}
		if s.err != nil {
			return nil, s.err
		}
		out[i] = s
	}
	return out, nil
}

// WriteSplit writes the shards of w.Split(maxTensors, maxBytes) to
// prefix-00001-of-NNNNN.gguf and onwards (llama.cpp's names, which OpenModel
// and llama.cpp find from the first shard) and returns their paths. Each
// shard is written as WriteFile writes a file.
func (w *Writer) WriteSplit(prefix string, maxTensors int, maxBytes int64) ([]string, error) {
	shards, err := w.Split(maxTensors, maxBytes)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(shards))
	for i, s := range shards {
		paths[i] = ShardPath(prefix, i, len(shards))
		if err := s.WriteFile(paths[i]); err != nil {
			return nil, fmt.Errorf("%w (shard %s)", err, paths[i])
		}
	}
	return paths, nil
}
