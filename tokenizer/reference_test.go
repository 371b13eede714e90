package tokenizer

import (
	"encoding/hex"
	"os"
	"slices"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The files in testdata/reference were produced by SentencePiece itself
// (gen_reference.py, python3-sentencepiece 0.1.97) for Grok-1's model, the
// grok-tiny-kjv model and a small nmt_nfkc model, and for variants of them
// that switch on the SentencePiece features Grok-1 does not use: UNUSED
// pieces (resegmentation), characters that occur only inside pieces,
// remove_extra_whitespaces, no byte fallback (runs of unknown characters
// become one UNK), a precompiled_charsmap normalizer with user-defined
// symbols, escape_whitespaces=false and add_dummy_prefix=false.

type referenceCase struct {
	Hex     string `json:"hex"`
	IDs     []int  `json:"ids"`
	Decoded string `json:"decoded"`
	DIDs    []int  `json:"dids"`
	DText   string `json:"dtext"`
}

// rawField is one field of a serialized message, kept for re-encoding.
type rawField struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

func parseRaw(t testing.TB, data []byte) []rawField {
	t.Helper()
	var out []rawField
	err := forEachField(data, func(f field) error {
		out = append(out, rawField{f.num, f.typ, f.v, f.b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func serializeRaw(fields []rawField) []byte {
	var b []byte
	for _, f := range fields {
		b = protowire.AppendTag(b, f.num, f.typ)
		switch f.typ {
		case protowire.VarintType:
			b = protowire.AppendVarint(b, f.v)
		case protowire.Fixed32Type:
			b = protowire.AppendFixed32(b, uint32(f.v))
		case protowire.Fixed64Type:
			b = protowire.AppendFixed64(b, f.v)
		case protowire.BytesType:
			b = protowire.AppendBytes(b, f.b)
		}
	}
	return b
}

// setVarint replaces every occurrence of field num of msg by one varint
// field at the end.
func setVarint(t testing.TB, msg []byte, num protowire.Number, v uint64) []byte {
	fields := slices.DeleteFunc(parseRaw(t, msg), func(f rawField) bool { return f.num == num })
	return serializeRaw(append(fields, rawField{num: num, typ: protowire.VarintType, v: v}))
}

// variantModel edits a serialized ModelProto with the rules of variant()
// in testdata/reference/gen_reference.py.
func variantModel(t testing.TB, base []byte, name string) []byte {
	t.Helper()
	var out []rawField
	pieces := 0
	for _, f := range parseRaw(t, base) {
		switch {
		case f.num == fieldModelPieces:
			var piece string
			typ := uint64(typeNormal)
			for _, pf := range parseRaw(t, f.b) {
				switch pf.num {
				case fieldPiecePiece:
					piece = string(pf.b)
				case fieldPieceType:
					typ = pf.v
				}
			}
			switch name {
			case "kjv-vchar":
				if slices.Contains([]string{"▁", "k", "j", "z", "x", "q"}, piece) {
					continue
				}
			case "kjv-nobytes":
				if typ == uint64(typeByte) {
					continue
				}
			case "kjv-unused":
				if typ == uint64(typeNormal) && utf8.RuneCountInString(piece) >= 2 && pieces%2 == 0 {
					f.b = setVarint(t, f.b, fieldPieceType, uint64(typeUnused))
				}
			}
			pieces++
		case f.num == fieldModelTrainerSpec && name == "kjv-nobytes":
			f.b = setVarint(t, f.b, fieldTrainerByteFallback, 0)
		case f.num == fieldModelNormalizerSpec:
			switch name {
			case "kjv-rx":
				f.b = setVarint(t, f.b, fieldNormRemoveExtraWhitespaces, 1)
			case "nfkc-noescape":
				f.b = setVarint(t, f.b, fieldNormEscapeWhitespaces, 0)
			case "nfkc-nodummy":
				f.b = setVarint(t, f.b, fieldNormAddDummyPrefix, 0)
			}
		}
		out = append(out, f)
	}
	return serializeRaw(out)
}

func TestReference(t *testing.T) {
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	grok := read(grok1Model)
	kjv := read(kjvModel)
	nfkc := read("testdata/reference/nfkc.model")
	models := []struct {
		name  string
		proto []byte
	}{
		{"grok1", grok},
		{"kjv", kjv},
		{"kjv-unused", variantModel(t, kjv, "kjv-unused")},
		{"kjv-vchar", variantModel(t, kjv, "kjv-vchar")},
		{"kjv-rx", variantModel(t, kjv, "kjv-rx")},
		{"kjv-nobytes", variantModel(t, kjv, "kjv-nobytes")},
		{"nfkc", nfkc},
		{"nfkc-noescape", variantModel(t, nfkc, "nfkc-noescape")},
		{"nfkc-nodummy", variantModel(t, nfkc, "nfkc-nodummy")},
	}
	for _, m := range models {
		t.Run(m.name, func(t *testing.T) {
			tok, err := FromModelProto(m.proto)
			if err != nil {
				t.Fatal(err)
			}
			switch m.name {
			case "kjv-unused":
				if !tok.hasUnused || tok.segment {
					t.Fatal("variant has no UNUSED pieces")
				}
			case "kjv-vchar":
				if len(tok.virtual) == 0 {
					t.Fatal("variant has no virtual symbols")
				}
			case "kjv-nobytes":
				if tok.byteFallback {
					t.Fatal("variant has byte fallback")
				}
			case "nfkc":
				if tok.charsmap == nil || tok.user == nil || tok.fastNormalize {
					t.Fatal("nfkc model lacks a charsmap or user-defined symbols")
				}
			}
			cases := readJSONL[referenceCase](t, "testdata/reference/"+m.name+".jsonl")
			if len(cases) == 0 {
				t.Fatal("no cases")
			}
			for i, c := range cases {
				in, err := hex.DecodeString(c.Hex)
				if err != nil {
					t.Fatal(err)
				}
				if c.IDs == nil {
					c.IDs = []int{}
				}
				if got := tok.EncodeBytes(in); !slices.Equal(got, c.IDs) {
					t.Errorf("%d: EncodeBytes(%q)\n got %v\nwant %v", i, in, got, c.IDs)
				}
				if got, err := tok.Decode(c.IDs); err != nil || got != c.Decoded {
					t.Errorf("%d: Decode(%v) = %q, %v; want %q", i, c.IDs, got, err, c.Decoded)
				}
				if got, err := tok.Decode(c.DIDs); err != nil || got != c.DText {
					t.Errorf("%d: Decode(%v) = %q, %v; want %q", i, c.DIDs, got, err, c.DText)
				}
				if got := streamDecode(t, tok, c.DIDs); got != c.DText {
					t.Errorf("%d: streamed %v = %q, want %q", i, c.DIDs, got, c.DText)
				}
			}
		})
	}
}
