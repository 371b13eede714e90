#!/bin/sh
# Regenerates SHA256SUMS and REFUSALS: the Go test writes the F32 models,
# llama-quantize quantises each to every ftype, and the sums of its outputs
# are recorded; for the ftypes it refuses without an importance matrix, the
# tensor and type it names are recorded instead.
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
	for ft in Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS Q8_0 IQ3_S IQ3_M; do
		"$lq" "grok-quant-$m-f32.gguf" "grok-quant-$m-$ft.gguf" "$ft" 1 >"grok-quant-$m-$ft.log" 2>&1
		sha256sum "grok-quant-$m-$ft.gguf" >>SHA256SUMS
	done
done
# gguf-split shards of one output, for --split-max-size.
gs=${LLAMA_GGUF_SPLIT:-$(dirname "$(command -v "$lq")")/llama-gguf-split}
"$gs" --split --split-max-size 1M grok-quant-e8-Q4_K_M.gguf grok-quant-e8-Q4_K_M-split >split.log 2>&1
sha256sum grok-quant-e8-Q4_K_M-split-*-of-*.gguf >>SHA256SUMS
# grok-tiny's rows of 128 take the fallbacks of the 256-element types; for
# IQ3_XXS and IQ3_XS they fall back to types that need no importance matrix,
# so llama-quantize writes those files too.
cp "$root/testdata/grok-tiny/grok-tiny.gguf" grok-tiny-f32.gguf
for ft in IQ3_S IQ3_M IQ3_XXS IQ3_XS; do
	"$lq" grok-tiny-f32.gguf "grok-tiny-$ft.gguf" "$ft" 1 >"grok-tiny-$ft.log" 2>&1
	sha256sum "grok-tiny-$ft.gguf" >>SHA256SUMS
done
# The ftypes llama-quantize refuses without an importance matrix: the
# offending tensor and its target type.
: >REFUSALS
for m in quant-e8 quant-e2 tiny; do
	for ft in IQ3_XXS IQ3_XS Q2_K_S IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ1_S IQ1_M; do
		grep -q " grok-$m-$ft.gguf$" SHA256SUMS && continue # written above
		if "$lq" "grok-$m-f32.gguf" "grok-$m-$ft.gguf" "$ft" 1 >"grok-$m-$ft.log" 2>&1; then
			echo "make.sh: llama-quantize wrote grok-$m $ft without an importance matrix" >&2
			exit 1
		fi
		t=$(sed -n 's/.*offending tensor: //p' "grok-$m-$ft.log")
		ty=$(sed -n 's/.*target type: //p' "grok-$m-$ft.log")
		echo "grok-$m-$ft $t $ty" >>REFUSALS
	done
done
cp SHA256SUMS REFUSALS "$here/"
