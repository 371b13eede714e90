// The independent side of tokenizer/bpe_node_test.go: js-tiktoken with the
// ranks it ships and Grok-2's pre-tokenizer pattern.
//
//   node check.mjs classes OUT          one class letter per code point
//   node check.mjs encode RANKS IN OUT  encode each JSON line of IN
//   node check.mjs bench RANKS TEXT N   encode TEXT N times, print MB/s
//
// RANKS names a ranks module of js-tiktoken (cl100k_base, o200k_base).
// Each input line is {"text": ..., "allowed": [...]}; each output line is
// {"split": [byte lengths of the pattern's matches], "ids": [...] (the
// allowed specials as specials, the others as text), "strict": [...] or
// null when tiktoken's default encode throws}.
import { Tiktoken } from "js-tiktoken/lite";
import fs from "node:fs";
import readline from "node:readline";

// Grok-2's pattern in JavaScript. Rust's regex (tiktoken's) has (?i) fold
// 's to 'S and 'ſ, and \s be the White_Space property; JavaScript has no
// inline (?i) before V8 12.4 and its \s adds U+FEFF and drops U+0085, so
// both are spelled out to keep Rust's meaning.
const W = "\\t\\n\\v\\f\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
export const GROK_JS =
  "'[sS\\u017f]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]" +
  "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+" +
  "|\\p{N}" +
  `| ?[^${W}\\p{L}\\p{N}]+[\\r\\n]*` +
  `|[${W}]*[\\r\\n]+` +
  `|[${W}]+(?![^${W}])` +
  `|[${W}]+`;

const SPECIALS = ["<|pad|>", "<|separator|>", "<|eos|>", "<|control1|>", "<|reserved_3|>", "<|mask|>"];

async function load(name) {
  const ranks = (await import(`js-tiktoken/ranks/${name}`)).default;
  // The specials follow the largest rank, as bpe_node_test.go numbers them.
  let base = 0;
  for (const line of ranks.bpe_ranks.split("\n")) {
    const f = line.split(" ");
    if (f.length > 2) base = Math.max(base, Number(f[1]) + f.length - 2);
  }
  const special_tokens = {};
  SPECIALS.forEach((s, i) => (special_tokens[s] = base + i));
  return new Tiktoken({ pat_str: GROK_JS, special_tokens, bpe_ranks: ranks.bpe_ranks });
}

const [mode, ...args] = process.argv.slice(2);
if (mode === "classes") {
  const out = Buffer.alloc(0x110000, "x");
  const L = /^\p{L}$/u, N = /^\p{N}$/u;
  for (let cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xd800 && cp < 0xe000) continue;
    const s = String.fromCodePoint(cp);
    out[cp] = L.test(s) ? 76 : N.test(s) ? 78 : 111; // L, N, o
  }
  fs.writeFileSync(args[0], out);
} else if (mode === "encode") {
  const enc = await load(args[0]);
  const re = new RegExp(GROK_JS, "gu");
  const out = fs.createWriteStream(args[2]);
  const rl = readline.createInterface({ input: fs.createReadStream(args[1]), crlfDelay: Infinity });
  for await (const line of rl) {
    if (!line) continue;
    const { text, allowed } = JSON.parse(line);
    const split = [];
    for (const m of text.matchAll(re)) split.push(Buffer.byteLength(m[0]));
    const ids = enc.encode(text, allowed, []);
    let strict = null;
    try {
      strict = enc.encode(text, allowed);
    } catch (e) {
      strict = null;
    }
    if (!out.write(JSON.stringify({ split, ids, strict }) + "\n")) {
      await new Promise((r) => out.once("drain", r));
    }
  }
  await new Promise((r) => out.end(r));
} else if (mode === "bench") {
  const enc = await load(args[0]);
  const text = fs.readFileSync(args[1], "utf8");
  const n = Number(args[2] || 3);
  enc.encode(text, [], []); // warm up
  const t0 = process.hrtime.bigint();
  let count = 0;
  for (let i = 0; i < n; i++) count = enc.encode(text, [], []).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const mb = (Buffer.byteLength(text) * n) / 1e6;
  console.log(JSON.stringify({ bytes: Buffer.byteLength(text), tokens: count, seconds: s, mb_per_s: mb / s }));
} else {
  console.error("usage: node check.mjs classes OUT | encode RANKS IN OUT | bench RANKS TEXT N");
  process.exit(2);
}
