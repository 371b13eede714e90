#!/bin/sh
# Side by side with llama.cpp: alternating rounds of `grok bench` and
# `llama-bench -p 128 -n 32` on the same GGUF files, same threads, in one
# session, and the ratio of their medians.
#
# Usage: bench/llama.sh [OUTDIR]   (default /tmp/grok-bench: the models of
# bench/run.sh, made there if missing — never commit them).
# Environment: ROUNDS (4), THREADS (2), TYPES ("f32 f16 q8_0"),
# LLAMA_BENCH (a llama-bench binary; by default one is built in OUTDIR),
# IK_LLAMA_BENCH (ik_llama.cpp's llama-bench, built by hand from
# ikawrakow/ik_llama.cpp; when set it runs in every round beside llama.cpp),
# PRECISION (exact; "both" also times grok's fast prefill in each round and
# reports it beside the exact one),
# DROP_CACHES=1 (as root: drop the page cache and read the files again before
# the rounds; on a VM up for hours both engines decoded F32 a third slower from
# the old cache, bench/README.md "The page cache ages").
#
# Where llama.cpp comes from when LLAMA_BENCH is unset: this project's
# machines reach only the Go module proxy, Debian and npm. The npm package
# node-llama-cpp ships the source of the llama.cpp release it binds as a
# git bundle (llama/gitRelease.bundle), so the script fetches that package,
# clones the bundle and builds llama-bench as the reference figures did:
# GGML_NATIVE (-march=native), with the AMX extensions off (their build died
# with SIGILL on these VMs). Needs npm, git, cmake (apt-get install cmake)
# and a C++ compiler; the build takes about 6 minutes on 2 cores.
set -eu
out=${1:-/tmp/grok-bench}
rounds=${ROUNDS:-4}
threads=${THREADS:-2}
types=${TYPES:-f32 f16 q8_0}
nlc=${NODE_LLAMA_CPP:-3.22.1}
mkdir -p "$out"

if [ -z "${LLAMA_BENCH:-}" ]; then
	LLAMA_BENCH=$out/llama.cpp/build/bin/llama-bench
	if [ ! -x "$LLAMA_BENCH" ]; then
		(
			cd "$out"
			rm -rf package llama.cpp
			npm pack --silent "node-llama-cpp@$nlc" >/dev/null
			tar xzf "node-llama-cpp-$nlc.tgz" package/llama/gitRelease.bundle
			git clone -q package/llama/gitRelease.bundle llama.cpp
			noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
			cmake -S llama.cpp -B llama.cpp/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
				-DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
				-DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" >"$out/llama-cmake.log"
			cmake --build llama.cpp/build -j "$(nproc)" --target llama-bench >"$out/llama-build.log"
		)
	fi
fi

go build -o "$out/grok" ./cmd/grok
for t in $types; do
	[ -f "$out/medium-$t.gguf" ] || "$out/grok" make-model "$out/medium-$t.gguf" --type $t
done

if [ "${DROP_CACHES:-0}" = 1 ]; then
	sync
	echo 1 >/proc/sys/vm/drop_caches
	for t in $types; do cat "$out/medium-$t.gguf" >/dev/null; done
fi

# num KEY: the number after "KEY": on stdin's first line.
num() { sed -nE "1s/.*\"$1\": ?([0-9.e+-]+).*/\1/p"; }

runs=$out/llama-runs.txt
: >"$runs"
for r in $(seq "$rounds"); do
	for t in $types; do
		m=$out/medium-$t.gguf
		g=$("$out/grok" bench -m "$m" -p 128 -n 32 -t "$threads" -r 3 --precision "${PRECISION:-exact}" --json | tr -d '\n')
		echo "$r $t grok $(echo "$g" | num prefill_tok_s) $(echo "$g" | num decode_tok_s) $(echo "$g" | num bandwidth_gb_s)" >>"$runs"
		if [ "${PRECISION:-exact}" = both ]; then
			echo "$r $t grokfast $(echo "$g" | num fast_prefill_tok_s) - -" >>"$runs"
		fi
		l=$("$LLAMA_BENCH" -m "$m" -t "$threads" -p 128 -n 32 -r 3 -o jsonl 2>/dev/null)
		pp=$(echo "$l" | grep '"n_prompt": 128' | num avg_ts)
		tg=$(echo "$l" | grep '"n_gen": 32' | num avg_ts)
		echo "$r $t llama $pp $tg -" >>"$runs"
		if [ -n "${IK_LLAMA_BENCH:-}" ]; then
			# ik_llama.cpp writes no jsonl: its json array, one object a line.
			l=$("$IK_LLAMA_BENCH" -m "$m" -t "$threads" -p 128 -n 32 -r 3 -o json 2>/dev/null | tr -d '\n' | sed 's/}, *{/}\n{/g')
			pp=$(echo "$l" | grep '"n_prompt": 128' | num avg_ts)
			tg=$(echo "$l" | grep '"n_gen": 32' | num avg_ts)
			echo "$r $t ik $pp $tg -" >>"$runs"
		fi
		tail -3 "$runs" >&2
	done
done

# Medians over the rounds, and grok / llama.cpp.
med() { sort -g | awk '{v[NR] = $1} END {printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "type  grok_prefill llama_prefill ratio  grok_decode llama_decode ratio  (medians of $rounds rounds, $threads threads)"
for t in $types; do
	gp=$(awk -v t=$t '$2 == t && $3 == "grok" {print $4}' "$runs" | med)
	lp=$(awk -v t=$t '$2 == t && $3 == "llama" {print $4}' "$runs" | med)
	gd=$(awk -v t=$t '$2 == t && $3 == "grok" {print $5}' "$runs" | med)
	ld=$(awk -v t=$t '$2 == t && $3 == "llama" {print $5}' "$runs" | med)
	echo "$t $gp $lp $(echo "$gp $lp" | awk '{printf "%.2f", $1 / $2}') $gd $ld $(echo "$gd $ld" | awk '{printf "%.2f", $1 / $2}')"
done
if [ "${PRECISION:-exact}" = both ]; then
	echo "type  grok_fast_prefill llama_prefill ratio  (grok --precision fast, same rounds)"
	for t in $types; do
		fp=$(awk -v t=$t '$2 == t && $3 == "grokfast" {print $4}' "$runs" | med)
		lp=$(awk -v t=$t '$2 == t && $3 == "llama" {print $4}' "$runs" | med)
		echo "$t $fp $lp $(echo "$fp $lp" | awk '{printf "%.2f", $1 / $2}')"
		if [ -n "${IK_LLAMA_BENCH:-}" ]; then
			ip=$(awk -v t=$t '$2 == t && $3 == "ik" {print $4}' "$runs" | med)
			echo "$t fast vs ik_llama.cpp: $fp $ip $(echo "$fp $ip" | awk '{printf "%.2f", $1 / $2}')"
		fi
	done
fi
if [ -n "${IK_LLAMA_BENCH:-}" ]; then
	echo "type  grok_prefill ik_prefill ratio  grok_decode ik_decode ratio  (ik_llama.cpp, same rounds)"
	for t in $types; do
		gp=$(awk -v t=$t '$2 == t && $3 == "grok" {print $4}' "$runs" | med)
		ip=$(awk -v t=$t '$2 == t && $3 == "ik" {print $4}' "$runs" | med)
		gd=$(awk -v t=$t '$2 == t && $3 == "grok" {print $5}' "$runs" | med)
		id=$(awk -v t=$t '$2 == t && $3 == "ik" {print $5}' "$runs" | med)
		echo "$t $gp $ip $(echo "$gp $ip" | awk '{printf "%.2f", $1 / $2}') $gd $id $(echo "$gd $id" | awk '{printf "%.2f", $1 / $2}')"
	done
fi
