#!/bin/sh
# sft-load.sh: a checkpoint written by dice-sft loads in transformers' Qwen3ForCausalLM and
# gives the engine's logits. dice-sft trains a tiny random model (tests/dice-sft/data/tiny.json)
# for 2 fp32 steps on the CPU at a large learning rate (so the weights are not the init's),
# then tests/gpu/run-model.sh --ckpt compares the prefill and decode logits of dice-sample's
# engine (tests/bin/model-logits; cpu fp32, and cuda fp32 when a GPU is there) with
# transformers' on that checkpoint: 1e-4 relative, greedy tokens equal. One TAP line; needs
# python3 with torch and transformers (else SKIP).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
echo "1..1"
[ -x bin/dice-sft ] || { echo "ok 1 # SKIP no bin/dice-sft (make)"; exit 0; }
python3 -c 'import torch, transformers' 2>/dev/null ||
	{ echo "ok 1 # SKIP no torch/transformers"; exit 0; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
data=tests/dice-sft/data
bin/dice-sft --init $data/tiny.json -o "$t/m" 2>/dev/null &&
	bin/dice-sft -q -m "$t/m" -o "$t/o" -n 2 -e 100 -l 1e-2 -w 0 -b 1000 $data/train.jsonl ||
	{ echo "not ok 1 - dice-sft training run"; exit 1; }
runs=cpu:fp32
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' &&
	runs="$runs cuda:fp32"
if tests/gpu/run-model.sh --ckpt "$t/o" $runs | sed 's/^/# /' | tee "$t/out" &&
   grep -q '^# ok 1' "$t/out"; then
	echo "ok 1 - a dice-sft checkpoint loads in transformers' Qwen3 with the engine's logits"
else
	echo "not ok 1 - a dice-sft checkpoint loads in transformers' Qwen3 with the engine's logits"
fi
