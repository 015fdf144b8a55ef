#!/bin/sh
# run-model.sh: the model-vs-transformers check of make check-gpu (tests/gpu/model-parity.py).
# Builds tests/bin/model-logits from tests/gpu/model-logits.c against lib/libdice.a (unless it
# is there already, e.g. carried to a machine without build headers), then runs the parity
# script on cpu fp32, cuda fp32 and cuda bf16, and prints one TAP line.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
bin=tests/bin/model-logits
if [ ! -x "$bin" ]; then
	make -s lib/libdice.a || exit 1
	cuda=""
	ls lib/cuda/*.o >/dev/null 2>&1 && cuda="-DDICE_CUDA=1 -I${CUDA_HOME:-/usr/local/cuda}/include -L${CUDA_HOME:-/usr/local/cuda}/lib64 -lcublasLt -lcublas -lcudart -lstdc++"
	${CC:-cc} -Ilib -O2 -std=c11 -D_GNU_SOURCE -o "$bin" tests/gpu/model-logits.c lib/libdice.a \
		-ljansson -larchive -lpcre2-8 -lm $cuda || exit 1
fi
if PYTHONUNBUFFERED=1 python3 tests/gpu/model-parity.py --bin "$bin" "$@"; then
	echo "ok 1 - model logits and greedy tokens match transformers' Qwen3 with SDAR masks"
else
	echo "not ok 1 - model logits and greedy tokens match transformers' Qwen3 with SDAR masks"
fi
