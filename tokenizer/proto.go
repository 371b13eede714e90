package tokenizer

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file reads a serialized SentencePiece ModelProto (the tokenizer.model
// file) with the low-level protowire package, so that no generated code is
// needed. Only the fields below are interpreted; all others are skipped.
// Field numbers are those of sentencepiece_model.proto (proto2, package
// sentencepiece):
//
//	message ModelProto {
//	  repeated SentencePiece pieces = 1;
//	  optional TrainerSpec trainer_spec = 2;
//	  optional NormalizerSpec normalizer_spec = 3;
//	  optional SelfTestData self_test_data = 4;        // ignored
//	  optional NormalizerSpec denormalizer_spec = 5;
//	}
//	message ModelProto.SentencePiece {
//	  optional string piece = 1;
//	  optional float score = 2;
//	  optional Type type = 3 [default = NORMAL];
//	  // enum Type { NORMAL = 1; UNKNOWN = 2; CONTROL = 3;
//	  //             USER_DEFINED = 4; BYTE = 6; UNUSED = 5; }
//	}
//	message TrainerSpec {
//	  optional ModelType model_type = 3 [default = UNIGRAM];
//	  // enum ModelType { UNIGRAM = 1; BPE = 2; WORD = 3; CHAR = 4; }
//	  optional bool treat_whitespace_as_suffix = 24 [default = false];
//	  optional bool byte_fallback = 35 [default = false];
//	  optional string unk_surface = 44 [default = " \xE2\x81\x87 "];
//	  optional string unk_piece = 45 [default = "<unk>"];
//	  optional string bos_piece = 46 [default = "<s>"];
//	  optional string eos_piece = 47 [default = "</s>"];
//	  optional string pad_piece = 48 [default = "<pad>"];
//	}
//	message NormalizerSpec {
//	  optional string name = 1;
//	  optional bytes precompiled_charsmap = 2;
//	  optional bool add_dummy_prefix = 3 [default = true];
//	  optional bool remove_extra_whitespaces = 4 [default = true];
//	  optional bool escape_whitespaces = 5 [default = true];
//	}
//
// TrainerSpec fields such as split_digits (25), split_by_whitespace (22),
// split_by_number (23), max_sentencepiece_length (20) and
// user_defined_symbols (31) only steer training: at encode time
// SentencePiece uses nothing but the pieces and their types (a digit is
// split off because "0".."9" are USER_DEFINED pieces, not because of
// split_digits), so they are not read.

// Proto field numbers; see the comment above.
const (
	fieldModelPieces         = 1
	fieldModelTrainerSpec    = 2
	fieldModelNormalizerSpec = 3
	fieldModelDenormalizer   = 5

	fieldPiecePiece = 1
	fieldPieceScore = 2
	fieldPieceType  = 3

	fieldTrainerModelType        = 3
	fieldTrainerWhitespaceSuffix = 24
	fieldTrainerByteFallback     = 35
	fieldTrainerUnkSurface       = 44
	fieldTrainerUnkPiece         = 45
	fieldTrainerBosPiece         = 46
	fieldTrainerEosPiece         = 47
	fieldTrainerPadPiece         = 48

	fieldNormName                   = 1
	fieldNormPrecompiledCharsmap    = 2
	fieldNormAddDummyPrefix         = 3
	fieldNormRemoveExtraWhitespaces = 4
	fieldNormEscapeWhitespaces      = 5
)

// TrainerSpec.ModelType values.
const (
	modelTypeUnigram = 1
	modelTypeBPE     = 2
	modelTypeWord    = 3
	modelTypeChar    = 4
)

// pieceType is ModelProto.SentencePiece.Type. The numeric values are also
// llama.cpp's token type codes in GGUF (tokenizer.ggml.token_type).
type pieceType uint8

const (
	typeNormal      pieceType = 1
	typeUnknown     pieceType = 2
	typeControl     pieceType = 3
	typeUserDefined pieceType = 4
	typeUnused      pieceType = 5
	typeByte        pieceType = 6
)

// modelProto holds the parts of a ModelProto that the tokenizer uses.
type modelProto struct {
	vocab  vocab
	scores []float32
	types  []pieceType

	trainer    trainerSpec
	normalizer normalizerSpec
	hasDenorm  bool
	denorm     normalizerSpec
}

type trainerSpec struct {
	modelType               int32
	treatWhitespaceAsSuffix bool
	byteFallback            bool
	unkSurface              string
	unkPiece                string
	bosPiece                string
	eosPiece                string
	padPiece                string
}

type normalizerSpec struct {
	name                   string
	precompiledCharsmap    []byte
	addDummyPrefix         bool
	removeExtraWhitespaces bool
	escapeWhitespaces      bool
}

// Defaults of proto2 optional fields, as declared in sentencepiece_model.proto.
func defaultTrainerSpec() trainerSpec {
	return trainerSpec{
		modelType:  modelTypeUnigram,
		unkSurface: " \u2047 ",
		unkPiece:   "<unk>",
		bosPiece:   "<s>",
		eosPiece:   "</s>",
		padPiece:   "<pad>",
	}
}

func defaultNormalizerSpec() normalizerSpec {
	return normalizerSpec{
		addDummyPrefix:         true,
		removeExtraWhitespaces: true,
		escapeWhitespaces:      true,
	}
}

var errTruncated = errors.New("tokenizer: malformed model proto")

// field is one decoded protobuf field. Only one of v (varint or fixed
// value) and b (length-delimited payload) is meaningful, depending on typ.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// forEachField calls fn for every field of the message encoded in data.
// Groups are skipped as unknown fields. A truncated or otherwise malformed
// encoding yields an error, never a panic.
func forEachField(data []byte, fn func(f field) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return fmt.Errorf("%w: %v", errTruncated, protowire.ParseError(n))
		}
		data = data[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(data)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(data)
			f.v = uint64(v)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(data)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(data)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %v", errTruncated, num, protowire.ParseError(n))
		}
		data = data[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// parseModelProto decodes a serialized ModelProto. Repeated occurrences of a
// singular message field are merged and the last scalar value wins, as
// protobuf parsers do. A field with an unexpected wire type is skipped like
// an unknown field.
//
// The pieces are read in two passes: the first checks and counts them
// without allocating, so that a file declaring an absurd vocabulary is
// refused before anything is built from it; the second copies them into
// one flat vocab.
func parseModelProto(data []byte) (*modelProto, error) {
	m := &modelProto{
		trainer:    defaultTrainerSpec(),
		normalizer: defaultNormalizerSpec(),
		denorm:     defaultNormalizerSpec(),
	}
	n, total := 0, 0
	err := forEachField(data, func(f field) error {
		if f.typ != protowire.BytesType || f.num != fieldModelPieces {
			return nil
		}
		var p pieceProto
		if err := p.parse(f.b); err != nil {
			return err
		}
		if len(p.piece) == 0 {
			// ModelInterface::InitializePieces: "piece must not be empty".
			return fmt.Errorf("tokenizer: piece %d is empty", n)
		}
		if err := checkPiece(n, len(p.piece)); err != nil {
			return err
		}
		n++
		total += len(p.piece)
		if n > maxVocabSize {
			return checkVocab(n, total)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := checkVocab(n, total); err != nil {
		return nil, err
	}
	b := newVocabBuilder(n, total)
	m.scores = make([]float32, 0, n)
	m.types = make([]pieceType, 0, n)
	err = forEachField(data, func(f field) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case fieldModelPieces:
			var p pieceProto
			if err := p.parse(f.b); err != nil {
				return err
			}
			b.add(p.piece)
			m.scores = append(m.scores, p.score)
			m.types = append(m.types, p.typ)
		case fieldModelTrainerSpec:
			return parseTrainerSpec(f.b, &m.trainer)
		case fieldModelNormalizerSpec:
			return parseNormalizerSpec(f.b, &m.normalizer)
		case fieldModelDenormalizer:
			m.hasDenorm = true
			return parseNormalizerSpec(f.b, &m.denorm)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.vocab = b.done()
	return m, nil
}

// pieceProto is one decoded ModelProto.SentencePiece; piece aliases the
// input.
type pieceProto struct {
	piece []byte
	score float32
	typ   pieceType
}

func (p *pieceProto) parse(data []byte) error {
	*p = pieceProto{typ: typeNormal}
	return forEachField(data, func(f field) error {
		switch {
		case f.num == fieldPiecePiece && f.typ == protowire.BytesType:
			p.piece = f.b
		case f.num == fieldPieceScore && f.typ == protowire.Fixed32Type:
			p.score = math.Float32frombits(uint32(f.v))
		case f.num == fieldPieceType && f.typ == protowire.VarintType:
			// proto2 enums are closed: an out-of-range value is kept as
			// an unknown field and the field keeps its default, NORMAL.
			if t := int64(int32(f.v)); t >= int64(typeNormal) && t <= int64(typeByte) {
				p.typ = pieceType(t)
			}
		}
		return nil
	})
}

func parseTrainerSpec(data []byte, t *trainerSpec) error {
	return forEachField(data, func(f field) error {
		if f.typ == protowire.VarintType {
			switch f.num {
			case fieldTrainerModelType:
				if v := int32(f.v); v >= modelTypeUnigram && v <= modelTypeChar {
					t.modelType = v
				}
			case fieldTrainerWhitespaceSuffix:
				t.treatWhitespaceAsSuffix = f.v != 0
			case fieldTrainerByteFallback:
				t.byteFallback = f.v != 0
			}
			return nil
		}
		if f.typ == protowire.BytesType {
			switch f.num {
			case fieldTrainerUnkSurface:
				t.unkSurface = string(f.b)
			case fieldTrainerUnkPiece:
				t.unkPiece = string(f.b)
			case fieldTrainerBosPiece:
				t.bosPiece = string(f.b)
			case fieldTrainerEosPiece:
				t.eosPiece = string(f.b)
			case fieldTrainerPadPiece:
				t.padPiece = string(f.b)
			}
		}
		return nil
	})
}

func parseNormalizerSpec(data []byte, n *normalizerSpec) error {
	return forEachField(data, func(f field) error {
		if f.typ == protowire.VarintType {
			switch f.num {
			case fieldNormAddDummyPrefix:
				n.addDummyPrefix = f.v != 0
			case fieldNormRemoveExtraWhitespaces:
				n.removeExtraWhitespaces = f.v != 0
			case fieldNormEscapeWhitespaces:
				n.escapeWhitespaces = f.v != 0
			}
			return nil
		}
		if f.typ == protowire.BytesType {
			switch f.num {
			case fieldNormName:
				n.name = string(f.b)
			case fieldNormPrecompiledCharsmap:
				n.precompiledCharsmap = append([]byte(nil), f.b...)
			}
		}
		return nil
	})
}
