package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"github.com/grok-go/grok/tensor"
)

// MaxHeaderSize is the largest JSON header this package accepts. The header
// of Grok-1 in one file would be about 200 kB; the cap only exists so that
// a hostile length field cannot make the decoder allocate without bound.
const MaxHeaderSize = 100 << 20

// dtypeInfo describes one safetensors dtype: its element size and, for the
// types the engine computes with, the tensor.DType it becomes.
type dtypeInfo struct {
	size   int
	typ    tensor.DType
	usable bool
}

// dtypes lists every fixed-width dtype of the safetensors format. Types the
// engine does not compute with are still known, so that a file holding them
// (a step counter, an F64 buffer) opens and lists them; only using them is
// an error. A dtype missing here makes the file invalid.
var dtypes = map[string]dtypeInfo{
	"F32":     {4, tensor.F32, true},
	"F16":     {2, tensor.F16, true},
	"BF16":    {2, tensor.BF16, true},
	"I8":      {1, tensor.I8, true},
	"F64":     {size: 8},
	"I64":     {size: 8},
	"U64":     {size: 8},
	"I32":     {size: 4},
	"U32":     {size: 4},
	"I16":     {size: 2},
	"U16":     {size: 2},
	"U8":      {size: 1},
	"BOOL":    {size: 1},
	"F8_E4M3": {size: 1},
	"F8_E5M2": {size: 1},
	"F8_E8M0": {size: 1},
	"C64":     {size: 8},
}

// rawEntry is one tensor as a file's header describes it. Begin and End are
// byte offsets relative to the start of the data section.
type rawEntry struct {
	Name       string
	DType      string
	Shape      []int
	Begin, End int
}

// MaxRank is the most dimensions a tensor's shape may have. Grok-1's
// tensors have at most 3 and ggml allows 4; numpy allows 64, but no model
// checkpoint we know of goes past 5. The bound is checked before the shape
// is decoded, so that a header cannot make the reader build millions of
// dimensions.
const MaxRank = 8

// minEntryJSON is the fewest header bytes one tensor entry can take:
// `"":{"dtype":"I8","shape":[],"data_offsets":[0,0]}` and a comma.
const minEntryJSON = 48

// headerJSON is the per-tensor object of the header. Pointers tell a
// missing field from a zero one; numbers stay raw JSON so that 1.5, 1e3 or
// "1" can be refused instead of silently converted.
type headerJSON struct {
	DType       *string      `json:"dtype"`
	Shape       *shapeJSON   `json:"shape"`
	DataOffsets *offsetsJSON `json:"data_offsets"`
}

// shapeJSON and offsetsJSON are JSON arrays of counts whose length is
// checked before anything is allocated for their elements.
type (
	shapeJSON   []int
	offsetsJSON []int
)

// UnmarshalJSON decodes a shape of at most MaxRank dimensions.
func (s *shapeJSON) UnmarshalJSON(b []byte) error {
	n, ok := countElements(b)
	switch {
	case !ok:
		return errors.New("shape is not an array")
	case n > MaxRank:
		return fmt.Errorf("shape has %d dimensions, more than the %d this reader accepts", n, MaxRank)
	}
	v, err := parseCounts(b, n, "shape dimension %d")
	*s = v
	return err
}

// UnmarshalJSON decodes the two data offsets.
func (o *offsetsJSON) UnmarshalJSON(b []byte) error {
	n, ok := countElements(b)
	switch {
	case !ok:
		return errors.New("data_offsets is not an array")
	case n != 2:
		return fmt.Errorf("data_offsets has %d values, want 2", n)
	}
	v, err := parseCounts(b, n, "data_offsets")
	*o = v
	return err
}

// parseCounts parses the n elements of the JSON array b with parseCount;
// what (with %d for the index, if it has one) prefixes an error.
func parseCounts(b []byte, n int, what string) ([]int, error) {
	out := make([]int, 0, n)
	err := eachElement(b, func(e []byte) error {
		v, err := parseCount(e)
		if err != nil {
			if strings.Contains(what, "%d") {
				return fmt.Errorf(what+": %w", len(out), err)
			}
			return fmt.Errorf(what+": %w", err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// countElements returns the number of elements of the JSON array b, which
// encoding/json has already validated, or false if b is not an array. It
// allocates nothing.
func countElements(b []byte) (int, bool) {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' {
		return 0, false
	}
	n := 0
	eachElement(b, func([]byte) error { n++; return nil })
	return n, true
}

// eachElement calls f with the raw bytes of each top-level element of the
// valid JSON array b, stopping at f's first error.
func eachElement(b []byte, f func([]byte) error) error {
	b = bytes.TrimSpace(b)
	body := b[1 : len(b)-1]
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	start, depth, inStr, esc := 0, 0, false, false
	for i, c := range body {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			if err := f(body[start:i]); err != nil {
				return err
			}
			start = i + 1
		}
	}
	return f(body[start:])
}

// parseHeader validates the header of a whole safetensors file image and
// returns its tensors sorted by name, the offset of the data section and the
// string entries of __metadata__. Every offset, size and overlap is checked
// here, so that slicing file[dataStart+Begin : dataStart+End] later cannot
// fail; nothing is allocated in proportion to an unchecked length.
func parseHeader(file []byte) (entries []rawEntry, dataStart int, meta map[string]string, err error) {
	if len(file) < 8 {
		return nil, 0, nil, fmt.Errorf("file is %d bytes, shorter than the 8-byte header length", len(file))
	}
	n := binary.LittleEndian.Uint64(file)
	if n > MaxHeaderSize {
		return nil, 0, nil, fmt.Errorf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(len(file)-8) {
		return nil, 0, nil, fmt.Errorf("header length %d exceeds the %d bytes after the length field", n, len(file)-8)
	}
	dataStart = 8 + int(n)
	dataLen := len(file) - dataStart
	hdr := file[8:dataStart]

	dec := json.NewDecoder(bytes.NewReader(hdr))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, 0, nil, fmt.Errorf("header is not a JSON object")
	}
	// Every tensor entry takes at least minEntryJSON bytes, so this bounds
	// the count and lets the slice be allocated once, within 2× the header.
	entries = make([]rawEntry, 0, len(hdr)/minEntryJSON)
	seenMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, 0, nil, fmt.Errorf("header: %w", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, 0, nil, fmt.Errorf("header: key %v is not a string", tok)
		}
		if name == "__metadata__" {
			if seenMeta {
				return nil, 0, nil, fmt.Errorf("header: duplicate entry %q", name)
			}
			seenMeta = true
			if meta, err = decodeMetadata(dec); err != nil {
				return nil, 0, nil, fmt.Errorf("header: __metadata__: %w", err)
			}
			continue
		}
		var h headerJSON
		if err := dec.Decode(&h); err != nil {
			return nil, 0, nil, fmt.Errorf("header: tensor %q: %w", name, err)
		}
		e, err := checkEntry(name, &h, dataLen)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("header: tensor %q: %w", name, err)
		}
		entries = append(entries, e)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, 0, nil, fmt.Errorf("header: unterminated JSON object")
	}
	// The writer pads the header with spaces up to an 8-byte boundary;
	// anything else after the object is a second value or garbage.
	for _, c := range hdr[dec.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return nil, 0, nil, fmt.Errorf("header: unexpected data after the JSON object")
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	for i := 1; i < len(entries); i++ {
		if entries[i].Name == entries[i-1].Name {
			// encoding/json would silently keep the last one; two
			// descriptions of one tensor mean the file is corrupt.
			return nil, 0, nil, fmt.Errorf("header: duplicate entry %q", entries[i].Name)
		}
	}
	if err := checkOverlap(entries); err != nil {
		return nil, 0, nil, err
	}
	return entries, dataStart, meta, nil
}

// maxMetadata bounds the entries of __metadata__. Writers put a handful
// there ("format": "pt"; training tools a few dozen); the bound keeps the map
// built from them small whatever the header holds.
const maxMetadata = 1024

// decodeMetadata reads the __metadata__ object and keeps its string values;
// values of other types are skipped, as before they were ignored.
func decodeMetadata(dec *json.Decoder) (map[string]string, error) {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	meta := make(map[string]string)
	for n := 0; dec.More(); n++ {
		if n == maxMetadata {
			return nil, fmt.Errorf("more than %d entries", maxMetadata)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("key %v is not a string", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		var str string
		if json.Unmarshal(v, &str) == nil {
			meta[k] = str
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("unterminated JSON object")
	}
	return meta, nil
}

// checkEntry turns one header object into a rawEntry, refusing anything
// that does not describe exactly the bytes between its offsets.
func checkEntry(name string, h *headerJSON, dataLen int) (rawEntry, error) {
	e := rawEntry{Name: name}
	if h.DType == nil || h.Shape == nil || h.DataOffsets == nil {
		return e, errors.New("needs dtype, shape and data_offsets")
	}
	e.DType = *h.DType
	info, ok := dtypes[e.DType]
	if !ok {
		return e, fmt.Errorf("unknown dtype %q", e.DType)
	}
	e.Shape = *h.Shape
	e.Begin, e.End = (*h.DataOffsets)[0], (*h.DataOffsets)[1]
	if e.Begin > e.End {
		return e, fmt.Errorf("data_offsets [%d, %d] begin after end", e.Begin, e.End)
	}
	if e.End > dataLen {
		return e, fmt.Errorf("data_offsets [%d, %d] run past the %d data bytes of the file", e.Begin, e.End, dataLen)
	}
	size, err := byteSize(info.size, e.Shape)
	if err != nil {
		return e, err
	}
	if size != uint64(e.End-e.Begin) {
		return e, fmt.Errorf("%s %v needs %d bytes, data_offsets [%d, %d] give %d", e.DType, e.Shape, size, e.Begin, e.End, e.End-e.Begin)
	}
	return e, nil
}

// parseCount parses a raw JSON value that must be a non-negative integer
// literal (digits only) that fits an int.
func parseCount(raw json.RawMessage) (int, error) {
	s := string(bytes.TrimSpace(raw))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > math.MaxInt || s == "" || s[0] < '0' || s[0] > '9' {
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return 0, fmt.Errorf("%s is not a non-negative integer", s)
	}
	return int(v), nil
}

// byteSize is elemSize × the product of shape, refusing overflow. A shape
// with a zero dimension holds no bytes, whatever its other dimensions.
func byteSize(elemSize int, shape []int) (uint64, error) {
	for _, d := range shape {
		if d == 0 {
			return 0, nil
		}
	}
	n := uint64(elemSize)
	for _, d := range shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n = lo
	}
	return n, nil
}

// checkOverlap refuses two tensors that share bytes: a writer never produces
// them, and a reader that accepted them could hand out aliased views.
func checkOverlap(entries []rawEntry) error {
	byPos := make([]int, 0, len(entries))
	for i, e := range entries {
		if e.End > e.Begin { // empty tensors own no bytes
			byPos = append(byPos, i)
		}
	}
	sort.Slice(byPos, func(a, b int) bool { return entries[byPos[a]].Begin < entries[byPos[b]].Begin })
	for k := 1; k < len(byPos); k++ {
		p, q := entries[byPos[k-1]], entries[byPos[k]]
		if q.Begin < p.End {
			return fmt.Errorf("header: tensors %q [%d, %d] and %q [%d, %d] overlap", p.Name, p.Begin, p.End, q.Name, q.Begin, q.End)
		}
	}
	return nil
}
