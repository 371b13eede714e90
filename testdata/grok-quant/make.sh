#!/bin/sh
# Regenerates SHA256SUMS: the Go test writes the F32 models, llama-quantize
# quantises each to every ftype, and the sums of its outputs are recorded.
#
# Usage: testdata/grok-quant/make.sh [WORKDIR]   (default /tmp/grok-quant)
# Environment: LLAMA_QUANTIZE, the llama-quantize binary (default: on PATH);
# LLAMA_GGUF_SPLIT, llama-gguf-split (default: beside llama-quantize).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${1:-/tmp/grok-quant}
lq=${LLAMA_QUANTIZE:-llama-quantize}
mkdir -p "$work"
(cd "$root" && go test ./convert -run '^TestWriteQuantModel$' -count=1 -quant.model="$work")
cd "$work"
: >SHA256SUMS
for m in e8 e2; do
	for ft in Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS Q8_0; do
		"$lq" "grok-quant-$m-f32.gguf" "grok-quant-$m-$ft.gguf" "$ft" 1 >"grok-quant-$m-$ft.log" 2>&1
		sha256sum "grok-quant-$m-$ft.gguf" >>SHA256SUMS
	done
done
# gguf-split shards of one output, for --split-max-size.
gs=${LLAMA_GGUF_SPLIT:-$(dirname "$(command -v "$lq")")/llama-gguf-split}
"$gs" --split --split-max-size 1M grok-quant-e8-Q4_K_M.gguf grok-quant-e8-Q4_K_M-split >split.log 2>&1
sha256sum grok-quant-e8-Q4_K_M-split-*-of-*.gguf >>SHA256SUMS
cp SHA256SUMS "$here/SHA256SUMS"
