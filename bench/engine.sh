#!/bin/sh
# bench/engine.sh GEOM [BIN]: the engine benchmark of issue 6 for one geometry, in one run on
# one GPU (a device call): random bf16 weights of SDAR geometry GEOM (1.7b, 4b, 8b; 0.6b and
# tiny for trials), a 1K-token prompt and 1K new tokens, static top-k 1 (the eval preset),
# block 4, steps 4, no stop ids.
#   ours: tests/bin/model-logits bench (BIN; `make tests/bin/model-logits`): the copy
#         bandwidth (cudaMemcpyAsync device-to-device of 1 GiB x10, read+write counted), then
#         (a) batch 1: ms per forward against the floor = weight bytes (layers + lm_head) /
#         that bandwidth (and the same without the prompt's prefill forward, timed alone;
#         the raw lines also time the decode forward alone, waited for one at a time, and
#         queued back to back with the 8-row one that stores the block before),
#         and (b) batch BATCH (128, or the largest whose KV caches fit): tokens/s;
#   ref:  bench/engine-ref.py, the PyTorch reference sampler (transformers' Qwen3 modules in
#         bf16, SDAR masks, a static KV cache), the same two workloads at the batch ours ran.
# Prints the raw lines, then one table with the GPU (name, driver, power limit, maximum SM and
# memory clocks: cards of one name have run the batch-1 forward 11% apart, NOTES-device.md
# session 16) and the ratios.
# Environment: BATCH (128), PROMPT (1024), GEN (1024), GEN_BIG (GEN: new tokens of the big
# batch), REF_GEN_BIG (GEN_BIG: the reference's big batch only; the table says when capped),
# T_OURS / T_REF (seconds allowed per process, 200 / 200), WORKLOADS (both; big: the big
# batch only; one: batch 1 only), REF (1; 0 skips the PyTorch reference), BENCH_MODES (unset;
# 1: the decode forward also with CUDA graphs and programmatic dependent launch each off),
# BENCH_ROUND (unset; 1: batch 1's queued forward with a device-mode sampler round's
# operations added one at a time), BENCH_OPS (unset; 1: the decode forward's and the 8-row
# forward's time per op, plain launches; 2: and the ops of a prefill forward of the big
# batch's sampler: 8K rows of prompts), BENCH_SKIP (unset; 1: the decode forward as it runs
# with the attention, the small ops, both, the products, qkv_prep or add_rmsnorm left out:
# timing only), BENCH_TRACE (unset; 1: the sampling run's time by forward size, the sample op
# and the host work, CUDA graphs off), BENCH_PREFILL (unset; N: instead of the
# workloads, a prefill forward of N prompts of PROMPT with the prefill attention on and off,
# DICE_PREFILL_FA, and its ops each way; with WORKLOADS=one REF=0).
set -u
geom=${1:?usage: engine.sh GEOM [BIN]}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${2:-$root/tests/bin/model-logits}
[ -x "$bin" ] || make -s -C "$root" tests/bin/model-logits || exit 1
B=${BATCH:-128} P=${PROMPT:-1024} G=${GEN:-1024}
GB=${GEN_BIG:-$G} RGB=${REF_GEN_BIG:-$GB}
tmp=$(mktemp -d /tmp/engine-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

gpu=$(nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.max.memory \
	--format=csv,noheader 2>/dev/null | head -1)
echo "engine.sh $geom: GPU $gpu; P $P, G $G (batch 1), G $GB (batch $B)"
list="1:$G,$B:$GB"
[ "${WORKLOADS:-both}" = big ] && list="$B:$GB"
[ "${WORKLOADS:-both}" = one ] && list="1:$G"
timeout "${T_OURS:-200}" "$bin" bench cuda bf16 "$geom" "$list" "$P" "$G" eval | tee "$tmp/ours"
# the batch ours could fit, for the reference too
BB=$(awk '/^decode-forward/ && $4 != 1 { b = $4 } END { print b }' "$tmp/ours")
BB=${BB:-$B} rb="1,$BB" rg="$G,$RGB"
[ "${WORKLOADS:-both}" = big ] && rb=$BB rg=$RGB
[ "${WORKLOADS:-both}" = one ] && rb=1 rg=$G
: >"$tmp/ref"
[ "${REF:-1}" = 0 ] || timeout "${T_REF:-200}" python3 "$root/bench/engine-ref.py" --geom "$geom" \
	--batches "$rb" --prompt "$P" --gen "$rg" | tee "$tmp/ref"

awk -v gpu="$gpu" -v geom="$geom" '
	function seen(b) { if (!(b in have)) { have[b] = 1; ob[++no] = b } }
	function field(line, before, after) { sub(".*" before, "", line); sub(after ".*", "", line); return line }
	/^copy bandwidth/ { bw = $(NF - 1) }
	/^decode-forward/ { b = $4; seen(b); dfw[b] = $(NF - 1) }
	/^engine-decode/ { dec = $5 }
	/^engine / { b = $6; seen(b); o_ms[b] = field($0, "forwards, ", " ms/forward")
		o_tps[b] = field($0, "forwards/token, ", " tokens/s"); fl = field($0, "floor ", " ms, ")
		o_g[b] = $12; sub(/:/, "", o_g[b]) }
	/^ref torch/ { b = $6; seen(b); r_ms[b] = field($0, "forwards, ", " ms/forward")
		r_tps[b] = field($0, "forwards/token, ", " tokens/s"); r_g[b] = $10; sub(/:/, "", r_g[b]) }
	END {
		printf "\n| %s, %s bf16, prompt 1024, static top-k 1, block 4, steps 4 | batch | new tokens | ms/forward | tokens/s | floor ms (%s GB/s copy, read+write) | floor / ms |\n", gpu, geom, bw
		printf "|---|---|---|---|---|---|---|\n"
		for (i = 1; i <= no; i++) { b = ob[i]
			if (b in o_ms)
				printf "| dice (ours) | %s | %s | %s | %s | %s | %.1f%% |\n", b, o_g[b], o_ms[b], o_tps[b], fl, 100 * fl / o_ms[b]
			else
				printf "| dice (ours) | %s | did not finish in time | decode forward alone %s ms | | | |\n", b, dfw[b]
			if (b in r_ms)
				printf "| PyTorch reference (bench/engine-ref.py) | %s | %s | %s | %s | %s | %.1f%% |\n", b, r_g[b], r_ms[b], r_tps[b], fl, 100 * fl / r_ms[b]
			else if (ref)
				printf "| PyTorch reference | %s | did not finish in time | | | | |\n", b
			if (b == 1 && dec != "")
				printf "| dice (ours), the decoding forwards alone (prefill excluded) | 1 | %s | %s | | %s | %.1f%% |\n", o_g[b], dec, fl, 100 * fl / dec
			if ((b in o_ms) && (b in r_ms))
				printf "| ratio ours / reference, tokens/s | %s | | | %.2fx | | |\n", b, o_tps[b] / r_tps[b]
		}
	}' ref="${REF:-1}" "$tmp/ours" "$tmp/ref"
