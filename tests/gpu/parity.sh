#!/bin/sh
# parity.sh: the training objectives against PyTorch. dice-sft and dice-rl each export one
# micro-batch (tokens, positions, mask, targets, their loss and every weight gradient, fp32)
# from a tiny random SDAR-geometry checkpoint, computed on the CPU and, when a GPU is there,
# on CUDA; tests/gpu/sft-parity.py and rl-parity.py recompute the loss and gradients with
# transformers' Qwen3 modules and the SDAR masks and require 1e-4 relative. One TAP line per
# (objective, device); needs python3 with torch and transformers (else SKIP).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
devs=cpu
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null &&
	devs="cpu cuda"
n=0
for d in $devs; do n=$((n + 2)); done
echo "1..$n"
if [ ! -x bin/dice-sft ] || [ ! -x bin/dice-rl ] ||
   ! python3 -c 'import torch, transformers' 2>/dev/null; then
	i=0
	while [ $i -lt $n ]; do i=$((i + 1)); echo "ok $i # SKIP no bin/ or no torch/transformers"; done
	exit 0
fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
tdev=cpu
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && tdev=cuda
i=0
report() { # status description log
	i=$((i + 1))
	sed 's/^/# /' "$3"
	if [ "$1" -eq 0 ]; then echo "ok $i - $2"; else echo "not ok $i - $2"; fi
}
bin/dice-sft --init tests/dice-sft/data/tiny.json -o "$t/m" 2>"$t/init.log" ||
	{ cat "$t/init.log"; echo "Bail out! dice-sft --init"; exit 1; }
for d in $devs; do
	bin/dice-sft -q -d $d -m "$t/m" -x "$t/sft-$d.st" tests/dice-sft/data/train.jsonl \
		>"$t/log" 2>&1 &&
		python3 tests/gpu/sft-parity.py --device $tdev "$t/m" "$t/sft-$d.st" >>"$t/log" 2>&1
	report $? "dice-sft -d $d: loss and every gradient of one batch = PyTorch (1e-4)" "$t/log"
	bin/dice-rl -q -d $d -m "$t/m" -o "$t/rl-$d" -r "cmd:sh tests/dice-rl/data/reward.sh" \
		-p 4 -G 8 -x 8 -l 1e-2 -u 16 -M 4 -X "$t/rl-$d.st" tests/dice-rl/data/tasks.jsonl \
		>"$t/log" 2>&1 &&
		python3 tests/gpu/rl-parity.py --device $tdev "$t/rl-$d" "$t/rl-$d.st" >>"$t/log" 2>&1
	report $? "dice-rl -d $d: TraceRL loss and every gradient of one batch = PyTorch (1e-4)" "$t/log"
done
