#!/bin/sh
# demo.sh: the toolkit at work on the sample data in share/examples/ (run by `make demo`).
# deceive-check: seven kernel records for two KernelBench-style problems (kernels.jsonl: the
# kernel as a field or inside a model response) and one solution file (relu_new.py).
# cuke-filter: the same records curated (speedup, correctness, deception) into SFT pairs.
# dice-sft + dice-sample: a tiny SDAR model (tiny/: config and a byte-level tokenizer) is
# created from random weights, fine-tuned with the block-diffusion objective on sft.jsonl,
# and sampled with block-diffusion decoding: the whole train -> sample loop on the CPU.
# The loop closed: the tiny model is asked for a kernel for a KernelBench-style problem
# (kernelbench/level1/1_ReLU.py), the answer goes through deceive-check and kbench-eval (CPU
# mode) and the per-level report. A tiny demo model does not write kernels (no_code):
# real use starts from an SDAR or DICE checkpoint.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PATH="$root/bin:$PATH"
tmp=$(mktemp -d /tmp/dice-demo.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$here"

echo "== deceive-check: static checks for kernels that bypass their own CUDA code"
echo "\$ deceive-check --explain kernels.jsonl relu_new.py > checked.jsonl"
deceive-check --explain kernels.jsonl relu_new.py >"$tmp/checked.jsonl" 2>"$tmp/explain.txt" || true
sed 's/^/  /' "$tmp/explain.txt"
echo
echo "verdicts (id, deceptive, rules found):"
sed -e 's/^{"id":"\([^"]*\)".*"deceive":{"deceptive":\([a-z]*\),"findings":\(.*\)}}$/\1 \2 \3/' \
    "$tmp/checked.jsonl" | while read -r id verdict findings; do
	rules=$(printf '%s\n' "$findings" | grep -o '"rule":"[^"]*"' | sed 's/"rule":"\(.*\)"/\1/' |
		sort -u | tr '\n' ' ')
	printf '  %-26s %-6s %s\n' "$id" "$verdict" "${rules:--}"
done
echo
echo "\$ deceive-check --drop kernels.jsonl | wc -l     # records kept for training"
deceive-check --drop kernels.jsonl | wc -l | sed 's/^ */  /'
echo "\$ deceive-check --strict relu_new.py > /dev/null && echo clean"
deceive-check --strict relu_new.py >/dev/null && echo "  clean"

echo
echo "== cuke-filter: curate the same records (speedup >= 1, correct, not deceptive)"
echo "\$ cuke-filter --min-speedup 1 --require-correct --drop-deceptive --classify --stats \\"
echo "      --rejects rejects.jsonl kernels.jsonl > kept.jsonl"
cuke-filter --min-speedup 1 --require-correct --drop-deceptive --classify --stats \
	--rejects "$tmp/rejects.jsonl" kernels.jsonl >"$tmp/kept.jsonl" 2>"$tmp/stats.txt"
sed 's/^/  /' "$tmp/stats.txt"
echo "rejected, with the reason cuke-filter recorded:"
grep -o '"id":"[^"]*"\|"rejected":"[^"]*"' "$tmp/rejects.jsonl" | paste - - |
	sed 's/"id":"\([^"]*\)"[[:space:]]*"rejected":"\([^"]*\)"/  \1: \2/'
echo "\$ cuke-filter --min-speedup 1 --require-correct --drop-deceptive --to-sft kernels.jsonl | head -c 300"
cuke-filter --min-speedup 1 --require-correct --drop-deceptive --to-sft kernels.jsonl | head -c 300 |
	sed 's/^/  /'
echo " ..."

echo
echo "== dice-sft + dice-sample: fine-tune a tiny SDAR model, then sample from it (CPU)"
echo "\$ dice-sft --init tiny/config.json --tokenizer tiny -o init"
dice-sft --init tiny/config.json --tokenizer tiny -o "$tmp/init" 2>&1 | sed "s|$tmp/||; s/^/  /"
echo "\$ dice-sft -q -m init -o ckpt --max-steps 600 --epochs 10000 --lr 3e-3 --schedule cosine \\"
echo "      --warmup 0.05 --seed 7 --log log.jsonl sft.jsonl"
dice-sft -q -m "$tmp/init" -o "$tmp/ckpt" --max-steps 600 --epochs 10000 --lr 3e-3 \
	--schedule cosine --warmup 0.05 --seed 7 --log "$tmp/log.jsonl" sft.jsonl
for step in 1 150 300 600; do
	sed -n "${step}p" "$tmp/log.jsonl" | sed 's/.*"step":\([0-9]*\).*"loss":\([0-9.e-]*\).*/  step \1  loss \2/'
done
echo "\$ echo '{\"prompt\": \"relu\"}' | dice-sample -m ckpt --device cpu --preset eval   # and the others"
sed 's/, "response".*/}/' sft.jsonl | dice-sample -m "$tmp/ckpt" --device cpu --preset eval \
	--max-tokens 40 2>/dev/null |
	sed 's/^{"prompt": *\("[^"]*"\).*"completion":\("[^"]*"\).*"forwards":\([0-9]*\).*/  \1 -> \2  (\3 forwards)/'

echo
echo "== the loop closed: problem -> dice-sample -> deceive-check -> kbench-eval -> report"
echo "\$ kbench-eval --list -k kernelbench | dice-sample -m ckpt --device cpu --preset eval \\"
echo "      --max-tokens 48 | deceive-check | kbench-eval --device cpu -k kernelbench > evaluated.jsonl"
kbench-eval --list -k kernelbench | dice-sample -m "$tmp/ckpt" --device cpu --preset eval \
	--max-tokens 48 2>/dev/null | deceive-check 2>/dev/null |
	kbench-eval --device cpu -k kernelbench >"$tmp/evaluated.jsonl" 2>/dev/null || true
grep -o '"id":"[^"]*"\|"error":"[^"]*","message":"[^"]*"' "$tmp/evaluated.jsonl" | paste - - |
	sed 's/^/  /'
echo "\$ kbench-eval --report -k kernelbench evaluated.jsonl"
kbench-eval --report -k kernelbench "$tmp/evaluated.jsonl" | sed 's/^/  /'
echo "(a tiny random-init model writes no kernel; real use starts from an SDAR or DICE checkpoint)"
