#!/bin/sh
# Measures prefill and decode of the "medium" random model (bench/README.md,
# `grok make-model`) in F32, F16 and Q8_0, as llama-bench
# -p 128 -n 32 -t 2 did for the reference figures: ROUNDS alternating rounds,
# each one `grok bench --json` per type (itself the median of -r 5), with
# the read bandwidth measured in the same process, same threads.
#
# Usage: bench/run.sh [OUTDIR]   (default /tmp/grok-bench; models go there too,
# 4.8 GB in all — never commit them). Environment: ROUNDS (4), THREADS (2),
# QUIET (e.g. 90: before each run, wait up to 10 minutes for the CPUs to be
# at least that many percent idle over 3 seconds — on a shared machine other
# processes' load halves the figures).
set -eu
out=${1:-/tmp/grok-bench}
rounds=${ROUNDS:-4}
threads=${THREADS:-2}
mkdir -p "$out"

# idle3s prints the percentage of CPU time spent idle over the next 3 seconds.
idle3s() {
	set -- $(head -1 /proc/stat)
	i1=$(($5 + $6)) t1=$(($2 + $3 + $4 + $5 + $6 + $7 + $8 + $9))
	sleep 3
	set -- $(head -1 /proc/stat)
	i2=$(($5 + $6)) t2=$(($2 + $3 + $4 + $5 + $6 + $7 + $8 + $9))
	echo $((100 * (i2 - i1) / (t2 - t1 + 1)))
}
go build -o "$out/grok" ./cmd/grok
for t in f32 f16 q8_0; do
	[ -f "$out/medium-$t.gguf" ] || "$out/grok" make-model "$out/medium-$t.gguf" --type $t
done
for r in $(seq "$rounds"); do
	for t in f32 f16 q8_0; do
		idle=-
		if [ -n "${QUIET:-}" ]; then
			i=0
			while [ $i -lt 200 ]; do
				idle=$(idle3s)
				[ "$idle" -ge "$QUIET" ] && break
				i=$((i + 1))
			done
		fi
		echo "round $r $t: load $(cut -d' ' -f1-3 /proc/loadavg), idle ${idle}%" >&2
		"$out/grok" bench -m "$out/medium-$t.gguf" -p 128 -n 32 -t "$threads" -r 5 --json >"$out/round$r-$t.json"
	done
done
# One line per run: type, prefill tok/s, decode tok/s, GB/s, bandwidth,
# roofline ratio, paired ratio; then the median of each over the rounds.
for f in "$out"/round*-*.json; do
	printf '%s ' "$(basename "$f" .json)"
	tr -d ' \n' <"$f" | sed -E 's/.*"type":"([^"]*)".*"prefill_tok_s":([0-9.e+-]*).*"decode_tok_s":([0-9.e+-]*).*"achieved_gb_s":([0-9.e+-]*),"bandwidth_gb_s":([0-9.e+-]*).*"roofline_ratio":([0-9.e+-]*),"roofline_ratio_paired":([0-9.e+-]*).*/\1 \2 \3 \4 \5 \6 \7/'
	echo
done >"$out/runs.txt"
cat "$out/runs.txt"
echo "median: type prefill_tok_s decode_tok_s achieved_gb_s bandwidth_gb_s roofline_ratio roofline_ratio_paired"
for t in F32 F16 Q8_0; do
	printf '%s' "$t"
	for c in 3 4 5 6 7 8; do
		awk -v t=$t -v c=$c '$2 == t {print $c}' "$out/runs.txt" | sort -g |
			awk '{v[NR] = $1} END {printf " %.3g", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
	done
	echo
done
