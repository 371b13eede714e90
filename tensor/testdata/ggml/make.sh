#!/bin/sh
# Regenerates the golden data in this directory: the Go test writes the
# blocks, dequant.c decodes them with ggml, both are gzipped here; the Go
# test writes float rows, quantize.c quantises them with ggml, the result is
# gzipped here.
#
# Usage: tensor/testdata/ggml/make.sh [WORKDIR]   (default /tmp/grok-ggml-golden)
# Environment: LLAMA (a llama.cpp checkout whose ggml library is built in
# LLAMA/build; by default one is cloned and built in WORKDIR the way
# bench/llama.sh does it: from the git bundle of llama.cpp that the npm
# package node-llama-cpp ships). Needs npm, git, cmake, a C/C++ compiler, go.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=${1:-/tmp/grok-ggml-golden}
nlc=${NODE_LLAMA_CPP:-3.22.1}
mkdir -p "$work"

if [ -z "${LLAMA:-}" ]; then
	LLAMA=$work/llama.cpp
	if [ ! -d "$LLAMA/build" ]; then
		(
			cd "$work"
			rm -rf package llama.cpp
			npm pack --silent "node-llama-cpp@$nlc" >/dev/null
			tar xzf "node-llama-cpp-$nlc.tgz" package/llama/gitRelease.bundle
			git clone -q package/llama/gitRelease.bundle llama.cpp
			noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
			cmake -S llama.cpp -B llama.cpp/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
				-DBUILD_SHARED_LIBS=OFF -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF \
				-DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" >"$work/cmake.log"
			cmake --build llama.cpp/build -j "$(nproc)" --target ggml >"$work/build.log"
		)
	fi
fi
lib=$(find "$LLAMA/build" -name libggml-base.a | head -n 1)
[ -n "$lib" ] || { echo "make.sh: no libggml-base.a under $LLAMA/build (build with -DBUILD_SHARED_LIBS=OFF)" >&2; exit 1; }

cc -O2 -I"$LLAMA/ggml/include" "$here/dequant.c" "$lib" -lstdc++ -lm -lpthread -o "$work/dequant"
(cd "$root" && go test ./tensor -run '^TestGoldenWriteBlocks$' -count=1 -golden.blocks="$work/blocks.bin")
"$work/dequant" "$work/blocks.bin" "$work/ggml_f32.bin"
gzip -9nc "$work/blocks.bin" >"$here/blocks.bin.gz"
gzip -9nc "$work/ggml_f32.bin" >"$here/ggml_f32.bin.gz"

cc -O2 -I"$LLAMA/ggml/include" "$here/quantize.c" "$lib" -lstdc++ -lm -lpthread -o "$work/quantize"
(cd "$root" && go test ./tensor -run '^TestGoldenWriteQuantInput$' -count=1 -golden.qin="$work/qin.bin")
"$work/quantize" "$work/qin.bin" "$work/quant.bin"
gzip -9nc "$work/quant.bin" >"$here/quant.bin.gz"
echo "llama.cpp commit: $(git -C "$LLAMA" rev-parse HEAD)"
