// Package tokenizer is a pure-Go SentencePiece BPE tokenizer that
// reproduces the reference SentencePiece library (sentencepiece_processor.cc,
// bpe_model.cc, normalizer.cc) exactly for Grok-1's tokenizer.model: the
// same ids for every input, invalid UTF-8 included, and the same text for
// every id sequence. Encode and Decode behave like Python's
// SentencePieceProcessor.encode(text) and .decode(ids) called without
// options, which is how Grok-1's runner uses them (no BOS or EOS is added).
//
// What the model specifies is honoured: the NormalizerSpec
// (add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces, and a
// precompiled_charsmap such as nmt_nfkc when present; Grok-1 uses the
// identity rules with a dummy prefix and no whitespace collapsing),
// USER_DEFINED pieces (matched greedily, longest first, and never merged),
// UNUSED pieces (never output: resegmented), byte fallback (<0xNN> pieces)
// and the unknown piece and its surface. TrainerSpec options such as
// split_digits or max_sentencepiece_length only steer training and play no
// part here, as in SentencePiece. Unigram, word and char models,
// treat_whitespace_as_suffix and denormalizer rules are not supported and
// are reported as errors when loading.
//
// A Tokenizer is built from a serialized ModelProto (Load, FromModelProto)
// or from the vocabulary a GGUF file embeds (FromGGUFVocab). It is
// immutable and safe for concurrent use; StreamDecoder decodes generated
// ids incrementally.
package tokenizer

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/grok-go/grok/internal/safefile"
)

// Tokenizer encodes text to token ids and decodes ids back to text the way
// SentencePiece's SentencePieceProcessor does for a BPE model with Encode
// and Decode called without options (no BOS/EOS added, no sampling).
type Tokenizer struct {
	v      vocab // the piece strings
	scores []float32
	types  []pieceType

	// canon[i] is SentencePiece's PieceToId(IdToPiece(i)). PieceToId looks
	// up CONTROL, UNKNOWN and BYTE pieces before the others, so for a
	// piece string that occurs twice the reserved one wins. It is both the
	// id that encoding emits for a symbol of merge id i (< len(pieces)) and
	// the id whose type decoding looks at.
	canon     []int32
	byteValue []int16 // for BYTE pieces the byte value, else -1
	validUTF8 bool    // all pieces (and unk_surface) are valid UTF-8

	unk, bos, eos, pad int
	unkSurface         string
	byteFallback       bool
	byteIDs            [256]int32 // id of <0xNN>, or -1

	// Normalizer (NormalizerSpec).
	addDummyPrefix bool
	removeExtraWS  bool
	escapeWS       bool
	spaceSym       string         // "▁" when escaping whitespace, else " "
	charsmap       *charsMap      // precompiled_charsmap; nil for identity
	fastNormalize  bool           // normalizeIdentity gives the same result
	user           *prefixMatcher // USER_DEFINED pieces; nil when none

	// Encoder tables; see encode.go.
	pieceIDs   pieceIndex           // NORMAL, USER_DEFINED, UNUSED pieces
	reserved   pieceIndex           // CONTROL, UNKNOWN, BYTE pieces
	asciiID    [utf8.RuneSelf]int32 // merge id of each ASCII character, or -1
	charID     map[string]int32     // merge id of other characters
	virtual    []virtualSymbol      // merge ids from len(pieces) on
	merges     *pairTable           // (left, right) merge ids -> merged piece
	joinsSpace []bool               // by merge id: the character precedes a space symbol in some piece
	hasUnused  bool                 // some piece is UNUSED
	hasDup     bool                 // some piece string occurs twice (GGUF only)
	segment    bool                 // encode segment by segment

	pool sync.Pool // *scratch
}

// virtualSymbol is a single character that is not a mergeable piece but
// occurs inside one (or is a reserved piece), so it needs a merge id.
type virtualSymbol struct {
	str string
	out int32 // id emitted for it: the reserved piece, or unk
}

// maxModelFileBytes bounds a tokenizer.model: 2M pieces of 4 KiB would be
// larger, but no real vocabulary comes near it.
const maxModelFileBytes = 1 << 30

// Load reads a SentencePiece model file (tokenizer.model).
func Load(path string) (*Tokenizer, error) {
	// A tokenizer.model is a few MB (Grok-1's: 2.2 MB); the bound keeps a
	// wrong path (a model file, a device) from being read whole.
	data, err := safefile.ReadFile(path, maxModelFileBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := FromModelProto(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// FromModelProto builds a Tokenizer from a serialized SentencePiece
// ModelProto. The model must be of type BPE. A malformed or inconsistent
// model is reported as an error, with the same checks as SentencePiece's
// ModelInterface::InitializePieces (non-empty unique pieces, exactly one
// UNKNOWN piece, all 256 byte pieces when byte_fallback is set). A model
// with more than 2M pieces, or a piece longer than 4 KiB, is refused.
func FromModelProto(data []byte) (*Tokenizer, error) {
	m, err := parseModelProto(data)
	if err != nil {
		return nil, err
	}
	switch m.trainer.modelType {
	case modelTypeBPE:
	case modelTypeUnigram:
		return nil, errors.New("tokenizer: unigram models are not supported (BPE only)")
	default:
		return nil, fmt.Errorf("tokenizer: model type %d is not supported (BPE only)", m.trainer.modelType)
	}
	if m.trainer.treatWhitespaceAsSuffix {
		return nil, errors.New("tokenizer: treat_whitespace_as_suffix is not supported")
	}
	if m.hasDenorm && len(m.denorm.precompiledCharsmap) > 0 {
		return nil, errors.New("tokenizer: denormalizer rules are not supported")
	}
	t := &Tokenizer{
		v:              m.vocab,
		scores:         m.scores,
		types:          m.types,
		unkSurface:     m.trainer.unkSurface,
		byteFallback:   m.trainer.byteFallback,
		addDummyPrefix: m.normalizer.addDummyPrefix,
		removeExtraWS:  m.normalizer.removeExtraWhitespaces,
		escapeWS:       m.normalizer.escapeWhitespaces,
	}
	if len(m.normalizer.precompiledCharsmap) > 0 {
		if t.charsmap, err = newCharsMap(m.normalizer.precompiledCharsmap); err != nil {
			return nil, err
		}
	}
	if err := t.initPieces(true); err != nil {
		return nil, err
	}
	// SentencePieceProcessor::bos_id() and friends: the id of the piece
	// named in the TrainerSpec, if it has the expected type.
	special := func(name string, want pieceType) int {
		if id := t.pieceToID(name); id >= 0 && t.types[id] == want {
			return int(id)
		}
		return -1
	}
	t.bos = special(m.trainer.bosPiece, typeControl)
	t.eos = special(m.trainer.eosPiece, typeControl)
	t.pad = special(m.trainer.padPiece, typeControl)
	t.buildEncoder()
	return t, nil
}

// GGUF token type codes (llama.cpp's llama_token_type), equal to
// SentencePiece's piece types.
const (
	ggufTypeNormal      = 1
	ggufTypeUnknown     = 2
	ggufTypeControl     = 3
	ggufTypeUserDefined = 4
	ggufTypeUnused      = 5
	ggufTypeByte        = 6
)

// FromGGUFVocab builds a Tokenizer from the SentencePiece vocabulary that a
// GGUF file embeds when tokenizer.ggml.model is "llama": the arrays
// tokenizer.ggml.tokens, .scores and .token_type (1 normal, 2 unknown,
// 3 control, 4 user-defined, 5 unused, 6 byte), the special ids (-1 when
// absent) and tokenizer.ggml.add_space_prefix.
//
// GGUF keeps no NormalizerSpec, so the normalizer is taken to be what
// llama.cpp assumes for such models: identity, no whitespace collapsing,
// spaces escaped as U+2581, and a dummy prefix when addSpacePrefix is set.
// Byte fallback is on when byte tokens are present. The unknown surface is
// SentencePiece's default " ⁇ " (a GGUF does not record unk_surface).
// Duplicate and empty tokens, which SentencePiece would reject, are
// tolerated: the first occurrence of a string is the one encoding uses.
// More than 2M tokens, or a token longer than 4 KiB, are refused.
func FromGGUFVocab(tokens []string, scores []float32, types []int32, bos, eos, unk, pad int, addSpacePrefix bool) (*Tokenizer, error) {
	n := len(tokens)
	if n == 0 {
		return nil, errors.New("tokenizer: empty vocabulary")
	}
	if len(scores) != n || len(types) != n {
		return nil, fmt.Errorf("tokenizer: vocabulary has %d tokens, %d scores and %d types", n, len(scores), len(types))
	}
	total := 0
	for i, p := range tokens {
		if err := checkPiece(i, len(p)); err != nil {
			return nil, err
		}
		total += len(p)
	}
	if err := checkVocab(n, total); err != nil {
		return nil, err
	}
	b := newVocabBuilder(n, total)
	for _, p := range tokens {
		b.addString(p)
	}
	t := &Tokenizer{
		v:              b.done(),
		scores:         slices.Clone(scores),
		types:          make([]pieceType, n),
		unkSurface:     " \u2047 ",
		addDummyPrefix: addSpacePrefix,
		escapeWS:       true,
	}
	for i, ty := range types {
		if ty < ggufTypeNormal || ty > ggufTypeByte {
			return nil, fmt.Errorf("tokenizer: token %d has unknown type %d", i, ty)
		}
		t.types[i] = pieceType(ty)
		if ty == ggufTypeByte {
			t.byteFallback = true
		}
	}
	for _, s := range []struct {
		name string
		id   int
	}{{"bos", bos}, {"eos", eos}, {"unk", unk}, {"pad", pad}} {
		if s.id < -1 || s.id >= n {
			return nil, fmt.Errorf("tokenizer: %s id %d out of range [0, %d)", s.name, s.id, n)
		}
	}
	if err := t.initPieces(false); err != nil {
		return nil, err
	}
	if unk >= 0 {
		t.unk = unk
	}
	if t.unk < 0 {
		for b, id := range t.byteIDs {
			if id < 0 {
				return nil, fmt.Errorf("tokenizer: no unknown token and no byte token for 0x%02X", b)
			}
		}
	}
	t.bos, t.eos, t.pad = bos, eos, pad
	t.buildEncoder()
	return t, nil
}

// indexedType reports whether pieces of type typ go into pieceIDs (the
// others go into reserved).
func indexedType(typ pieceType) bool {
	return typ == typeNormal || typ == typeUserDefined || typ == typeUnused
}

// piece returns the string of piece id.
func (t *Tokenizer) piece(id int) string { return t.v.piece(id) }

// indexed reports whether piece id is the one pieceIDs holds for its
// string: a non-empty NORMAL, USER_DEFINED or UNUSED piece, and the first
// with that string.
func (t *Tokenizer) indexed(id int) bool {
	if !indexedType(t.types[id]) || t.v.off[id] == t.v.off[id+1] {
		return false
	}
	if t.hasDup {
		got, _ := t.pieceIDs.get(&t.v, t.piece(id))
		return int(got) == id
	}
	return true
}

// initPieces fills the piece maps and the per-id tables. strict applies
// SentencePiece's load-time checks; the GGUF path is lenient.
func (t *Tokenizer) initPieces(strict bool) error {
	n := len(t.types)
	if n > maxVocabSize {
		return errors.New("tokenizer: vocabulary too large")
	}
	nIndexed, nReserved := 0, 0
	for i, typ := range t.types {
		switch {
		case t.v.off[i] == t.v.off[i+1]: // empty: in neither
		case indexedType(typ):
			nIndexed++
		default:
			nReserved++
		}
	}
	t.pieceIDs = newPieceIndex(nIndexed)
	t.reserved = newPieceIndex(nReserved)
	t.byteValue = make([]int16, n)
	t.unk = -1
	for i := range t.byteIDs {
		t.byteIDs[i] = -1
	}
	for i := range n {
		p := t.piece(i)
		t.byteValue[i] = -1
		typ := t.types[i]
		if p == "" {
			if strict {
				return fmt.Errorf("tokenizer: piece %d is empty", i)
			}
			continue
		}
		x := &t.reserved
		if indexedType(typ) {
			x = &t.pieceIDs
		}
		if !x.add(&t.v, int32(i)) {
			if strict {
				return fmt.Errorf("tokenizer: piece %q is already defined", p)
			}
			t.hasDup = true
		}
		switch typ {
		case typeUnknown:
			if t.unk >= 0 && strict {
				return errors.New("tokenizer: unk is already defined")
			}
			if t.unk < 0 {
				t.unk = i
			}
		case typeByte:
			if strict && !t.byteFallback {
				return fmt.Errorf("tokenizer: byte piece %q is found although byte_fallback is false", p)
			}
			b, ok := pieceToByte(p)
			if !ok {
				return fmt.Errorf("tokenizer: byte piece %q is invalid", p)
			}
			t.byteValue[i] = int16(b)
			if t.byteIDs[b] < 0 {
				t.byteIDs[b] = int32(i)
			}
		case typeUnused:
			t.hasUnused = true
		}
	}
	if strict {
		if t.unk < 0 {
			return errors.New("tokenizer: unk is not defined")
		}
		if t.byteFallback {
			for b, id := range t.byteIDs {
				if id < 0 {
					return fmt.Errorf("tokenizer: byte_fallback is set but there is no piece <0x%02X>", b)
				}
			}
		}
	}

	t.validUTF8 = utf8.ValidString(t.unkSurface)
	t.canon = make([]int32, n)
	for i := range n {
		p := t.piece(i)
		t.canon[i] = int32(i)
		t.validUTF8 = t.validUTF8 && utf8.ValidString(p)
		if p != "" {
			t.canon[i] = t.pieceToID(p)
		}
	}

	t.spaceSym = " "
	if t.escapeWS {
		t.spaceSym = spaceSymbol
	}
	// The model and the normalizer share one PrefixMatcher over the
	// USER_DEFINED pieces (SentencePieceProcessor::Load sets the
	// normalizer's matcher to the model's).
	var user []int32
	userUTF8 := true
	for i := range n {
		if t.types[i] == typeUserDefined && t.indexed(i) {
			user = append(user, int32(i))
			userUTF8 = userUTF8 && utf8.ValidString(t.piece(i))
		}
	}
	if len(user) > 0 {
		t.user = newPrefixMatcher(user, t.piece)
	}
	t.fastNormalize = t.charsmap == nil && !t.removeExtraWS && userUTF8
	return nil
}

// pieceToID is SentencePiece's ModelInterface::PieceToId: reserved pieces
// first, then the others, else unk.
func (t *Tokenizer) pieceToID(p string) int32 {
	if id, ok := t.reserved.get(&t.v, p); ok {
		return id
	}
	if id, ok := t.pieceIDs.get(&t.v, p); ok {
		return id
	}
	return int32(t.unk)
}

// pieceToByte parses a byte piece "<0xNN>" (upper-case hex, as
// SentencePiece's ByteToPiece writes it).
func pieceToByte(p string) (byte, bool) {
	if len(p) != 6 || !strings.HasPrefix(p, "<0x") || p[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(p[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(v), true
}

// VocabSize returns the number of pieces.
func (t *Tokenizer) VocabSize() int { return len(t.types) }

// Piece returns the piece string of id (U+2581 for spaces, "<0xNN>" for
// byte pieces), or "" if id is out of range.
func (t *Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(t.types) {
		return ""
	}
	return t.piece(id)
}

// BOS returns the beginning-of-sentence id, or -1 if the model has none.
func (t *Tokenizer) BOS() int { return t.bos }

// EOS returns the end-of-sentence id, or -1 if the model has none.
func (t *Tokenizer) EOS() int { return t.eos }

// UNK returns the unknown-piece id, or -1 if the model has none.
func (t *Tokenizer) UNK() int { return t.unk }

// PAD returns the padding id, or -1 if the model has none.
func (t *Tokenizer) PAD() int { return t.pad }
