#!/usr/bin/python3
"""Regenerates the reference cases in this directory with SentencePiece.

Run from tokenizer/testdata/reference with Debian's python3-sentencepiece
(0.1.97; `apt-get install python3-sentencepiece`, then /usr/bin/python3):

    /usr/bin/python3 gen_reference.py

Inputs: ../tokenizer.model (Grok-1), ../grok-tiny-kjv/tokenizer.model and
nfkc.model (a 600-piece BPE model trained here on Debian's license texts
with normalization_rule_name=nmt_nfkc, byte_fallback=True and
user_defined_symbols=<sep>,<s2>,ab,12,▁x). Model variants are made by
editing the serialized ModelProto with the same rules as
variantModel in reference_test.go. For each model, CASES random byte
strings (prose, vocabulary pieces, odd Unicode, spaces, digits, invalid
UTF-8) are encoded, and random id sequences decoded. Output: one JSON
object per line, {"hex", "ids", "decoded", "dids", "dtext"}.
"""
import json
import random
import struct

import sentencepiece as spm

CASES = 250


def _varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _enc_varint(v):
    out = bytearray()
    while True:
        c, v = v & 0x7F, v >> 7
        if v:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def parse(b):
    i, out = 0, []
    while i < len(b):
        k, i = _varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = _varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        elif w == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError("group")
        out.append([f, w, v])
    return out


def ser(fields):
    out = bytearray()
    for f, w, v in fields:
        out += _enc_varint(f << 3 | w)
        if w == 0:
            out += _enc_varint(v)
        elif w in (1, 5):
            out += v
        else:
            out += _enc_varint(len(v)) + v
    return bytes(out)


def set_varint(msg, num, value):
    """Replaces every occurrence of field num by one varint field at the end."""
    f = parse(msg)
    return ser([x for x in f if x[0] != num] + [[num, 0, value]])


def variant(base, name):
    top = parse(base)
    out = []
    for f in top:
        if f[0] == 1:
            p = {x[0]: x[2] for x in parse(f[2])}
            piece = p[1].decode("utf-8")
            typ = p.get(3, 1)
            if name == "kjv-vchar" and piece in ("▁", "k", "j", "z", "x", "q"):
                continue
            if name == "kjv-nobytes" and typ == 6:
                continue
            idx = sum(1 for g in out if g[0] == 1)
            if name == "kjv-unused" and typ == 1 and len(piece) >= 2 and idx % 2 == 0:
                f = [1, 2, set_varint(f[2], 3, 5)]
        elif f[0] == 2 and name == "kjv-nobytes":
            f = [2, 2, set_varint(f[2], 35, 0)]
        elif f[0] == 3:
            if name == "kjv-rx":
                f = [3, 2, set_varint(f[2], 4, 1)]
            elif name == "nfkc-noescape":
                f = [3, 2, set_varint(f[2], 5, 0)]
            elif name == "nfkc-nodummy":
                f = [3, 2, set_varint(f[2], 3, 0)]
        out.append(f)
    return ser(out)


EXTRA = ["ｆｕｌｌ", "①②", "ﬁ", "Å", "Å", "é", "é", "\u200b", "\u3000", "\u00a0",
         "▁", "▁▁", " ▁ ", "<sep>", "<s2>", "ab", "12", "▁x", "<|separator|>",
         "<|mask|>", "<|control12|>", "[UNK]", "[BOS]", "<s>", "</s>", "<unk>",
         "<0x41>", "\n\n\n", "\t\t", "\r\n", "😀", "👨‍👩‍👧", "中文字符", "한국어",
         "ﷺ", "𝔘𝔫𝔦", "\x00", "\x7f", "\ufffd", "\ufeff", "À", "ǅ", "ß", "İ",
         "quick jazz box", "kkk"]


def random_text(rng, sp, corpus):
    out = b""
    for _ in range(rng.randint(0, 10)):
        k = rng.random()
        if k < 0.3:
            i = rng.randrange(len(corpus))
            s = corpus[i:i + rng.randint(1, 50)]
        elif k < 0.45:
            s = sp.id_to_piece(rng.randrange(sp.vocab_size()))
            s = s.replace("▁", " " if rng.random() < 0.7 else "▁")
        elif k < 0.6:
            s = rng.choice(EXTRA)
        elif k < 0.7:
            s = " " * rng.randint(1, 5)
        elif k < 0.8:
            cps = [rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF),
                               rng.randint(0x3000, 0xFFFF), rng.randint(0x10000, 0x10FFFF)])
                   for _ in range(rng.randint(1, 4))]
            s = "".join(chr(c) for c in cps if not 0xD800 <= c < 0xE000)
        elif k < 0.9:
            s = str(rng.randint(0, 10 ** rng.randint(1, 8)))
        else:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            continue
        out += s.encode("utf-8")
    return out


def main():
    corpus = ""
    for name in ("GPL-3", "Apache-2.0"):
        with open("/usr/share/common-licenses/" + name, encoding="utf-8") as f:
            corpus += f.read()
    with open("../tokenizer.model", "rb") as f:
        grok = f.read()
    with open("../grok-tiny-kjv/tokenizer.model", "rb") as f:
        kjv = f.read()
    with open("nfkc.model", "rb") as f:
        nfkc = f.read()
    models = {
        "grok1": grok,
        "kjv": kjv,
        "kjv-unused": variant(kjv, "kjv-unused"),
        "kjv-vchar": variant(kjv, "kjv-vchar"),
        "kjv-rx": variant(kjv, "kjv-rx"),
        "kjv-nobytes": variant(kjv, "kjv-nobytes"),
        "nfkc": nfkc,
        "nfkc-noescape": variant(nfkc, "nfkc-noescape"),
        "nfkc-nodummy": variant(nfkc, "nfkc-nodummy"),
    }
    for seed, (name, proto) in enumerate(models.items()):
        sp = spm.SentencePieceProcessor(model_proto=proto)
        byte_ids = [i for i in range(sp.vocab_size()) if sp.is_byte(i)]
        rng = random.Random(seed)
        with open(name + ".jsonl", "w", encoding="utf-8") as f:
            for _ in range(CASES):
                text = random_text(rng, sp, corpus)
                ids = sp.encode(text)
                dids = [rng.randrange(sp.vocab_size()) if rng.random() < 0.5 or not ids
                        else rng.choice(ids) for _ in range(rng.randint(0, 10))]
                if byte_ids and rng.random() < 0.3:
                    dids = [rng.choice(byte_ids) for _ in range(rng.randint(1, 6))] + dids
                rec = {"hex": text.hex(), "ids": ids, "decoded": sp.decode(ids),
                       "dids": dids, "dtext": sp.decode(dids)}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
