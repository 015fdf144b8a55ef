#!/bin/sh
# run-model.sh: the model-vs-transformers check of make check-gpu (tests/gpu/model-parity.py).
# Builds tests/bin/model-logits (make; unless it is there already, e.g. carried to a machine
# without build headers), then runs the parity
# script on cpu fp32, cuda fp32 and cuda bf16, and prints one TAP line.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
bin=tests/bin/model-logits
[ -x "$bin" ] || make -s "$bin" || exit 1
if PYTHONUNBUFFERED=1 python3 tests/gpu/model-parity.py --bin "$bin" "$@"; then
	echo "ok 1 - model logits and greedy tokens match transformers' Qwen3 with SDAR masks"
else
	echo "not ok 1 - model logits and greedy tokens match transformers' Qwen3 with SDAR masks"
fi
