#!/bin/sh
# sample-gpu.sh: dice-sample on the CUDA backend, end to end, for make check-gpu. A tiny random
# SDAR-shaped checkpoint (dice-sft --init tests/fixtures/tiny-sdar.json, the fixture tokenizer
# of tests/dice-sample/data) and 8 records of 32 to 39 prompt ids, 48 new tokens, --stop none.
# The draws run on the GPU (the sample op); with greedy settings (-p eval) the tokens must be
# those of the CPU (fp32 weights) and batch 8 must give batch 1's tokens (bf16: the forward is
# batch-invariant on cuda: matmul_fixed, attention_kv); -p rl (full softmax) must run and give
# every record 48 tokens; 24 records at batch 24 (forwards of more than 16 sequences: no CUDA
# graphs, the logits of the masked rows only, the decode row cap) must give batch 1's tokens.
# With prompts of 64 to 148 ids and head dim 64 (the prefill attention,
# ops->attention_prefill) batch 3 (slots refilled: prefills in the same forwards as decode
# steps) must give batch 1's tokens too. TAP lines; needs bin/dice-sft and bin/dice-sample.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
echo "1..6"
[ -x bin/dice-sample ] && [ -x bin/dice-sft ] || { echo "ok 1 # SKIP no bin/dice-sample (make)"; exit 0; }
bin/dice-sft --init tests/fixtures/tiny-sdar.json -o "$t/m" -t tests/dice-sample/data 2>/dev/null ||
	{ echo "not ok 1 - init"; exit 1; }
# records N FILE: N records of 32 to 31 + N prompt ids
records() {
	awk -v n="$1" 'BEGIN { for (r = 0; r < n; r++) { printf "{\"id\":\"r%d\",\"prompt_ids\":[", r
		for (i = 0; i < 32 + r; i++) printf "%s%d", i ? "," : "", (r * 31 + i * 7) % 250
		print "]}" } }' >"$2"
}
records 8 "$t/in.jsonl"
records 24 "$t/in24.jsonl"
# run NAME ARGS...: the generated ids of every record (of $in), a line each
in=$t/in.jsonl
run() {
	name=$1; shift
	bin/dice-sample -m "$t/m" -n 48 -S none "$@" "$in" 2>"$t/$name.err" |
		grep -o '"ids":\[[^]]*\]' >"$t/$name"
}
if ! run cuda-eval -d cuda -t fp32 -p eval -b 1; then
	if grep -qi "no cuda device" "$t/cuda-eval.err"; then echo "ok 1 # SKIP no GPU"; exit 0; fi
	cat "$t/cuda-eval.err"; echo "not ok 1 - dice-sample on cuda"; exit 1
fi
run cpu-eval -d cpu -p eval -b 1
[ -s "$t/cpu-eval" ] && cmp -s "$t/cpu-eval" "$t/cuda-eval"
echo "$([ $? -eq 0 ] || echo 'not ')ok 1 - greedy (eval preset) tokens on cuda fp32 equal the cpu's"
run bf16-b1 -d cuda -t bf16 -p eval -b 1
run bf16-b8 -d cuda -t bf16 -p eval -b 8
[ -s "$t/bf16-b1" ] && cmp -s "$t/bf16-b1" "$t/bf16-b8"
echo "$([ $? -eq 0 ] || echo 'not ')ok 2 - greedy tokens on cuda bf16: batch 8 equals batch 1"
run rl -d cuda -t bf16 -p rl -b 8
n=$(awk -F, '{ if (NF == 48) n++ } END { print n + 0 }' "$t/rl")
echo "$([ "$n" -eq 8 ] || echo 'not ')ok 3 - rl preset (full softmax on the GPU): 8 records of 48 tokens ($n)"
in=$t/in24.jsonl
run b24-b1 -d cuda -t bf16 -p eval -b 1
run b24-b24 -d cuda -t bf16 -p eval -b 24
[ "$(wc -l <"$t/b24-b1")" -eq 24 ] && cmp -s "$t/b24-b1" "$t/b24-b24"
echo "$([ $? -eq 0 ] || echo 'not ')ok 4 - greedy tokens on cuda bf16: 24 records at batch 24 equal batch 1"
awk 'BEGIN { for (r = 0; r < 8; r++) { printf "{\"id\":\"p%d\",\"prompt_ids\":[", r
	for (i = 0; i < 64 + 12 * r; i++) printf "%s%d", i ? "," : "", (r * 17 + i * 11) % 250
	print "]}" } }' \
	>"$t/in.jsonl"
in=$t/in.jsonl
# (head dim 64: one the prefill attention takes)
sed 's/"head_dim": 32/"head_dim": 64/' tests/fixtures/tiny-sdar.json >"$t/hd64.json"
bin/dice-sft --init "$t/hd64.json" -o "$t/m64" -t tests/dice-sample/data 2>/dev/null &&
	rm -rf "$t/m" && mv "$t/m64" "$t/m"
run long-b1 -d cuda -t bf16 -p eval -b 1
run long-b3 -d cuda -t bf16 -p eval -b 3
[ -s "$t/long-b1" ] && [ "$(wc -l <"$t/long-b1")" -eq 8 ] && cmp -s "$t/long-b1" "$t/long-b3"
echo "$([ $? -eq 0 ] || echo 'not ')ok 5 - greedy tokens on cuda bf16, prompts of 64 to 148 ids" \
	"(prefill attention): batch 3 equals batch 1"
# full NAME ARGS...: the whole records (but the wall times)
full() {
	name=$1; shift
	bin/dice-sample -m "$t/m" -n 48 -x "$@" "$in" 2>"$t/$name.err" | sed 's/"ms":[0-9.eE+-]*//g' >"$t/$name"
}
full dev-s -d cuda -t bf16 -D static -k 0 -e 0.8 -b 3 -S none
full dev-q -d cuda -t bf16 -D sequential -k 0 -b 1 -S none
stop=$(head -1 "$t/long-b1" | tr -d '"ids:[]' | cut -d, -f10)      # (greedy, batch 1: above)
full dev-g -d cuda -t bf16 -p eval -b 3 -S "${stop:-1}"
export DICE_SAMPLER_DEVICE=0
full host-s -d cuda -t bf16 -D static -k 0 -e 0.8 -b 3 -S none
full host-q -d cuda -t bf16 -D sequential -k 0 -b 1 -S none
full host-g -d cuda -t bf16 -p eval -b 3 -S "${stop:-1}"
unset DICE_SAMPLER_DEVICE
ok=1
for c in s q g; do
	[ "$(wc -l <"$t/dev-$c")" -eq 8 ] && cmp -s "$t/dev-$c" "$t/host-$c" || ok=0
done
[ -n "$stop" ] && grep -q '"stopped":true' "$t/dev-g" || ok=0
echo "$([ $ok -eq 1 ] || echo 'not ')ok 6 - the draws and commits on the GPU equal the host's commits:" \
	"records with the trace, sampled static (batch 3), sequential, greedy with a stop id met"
