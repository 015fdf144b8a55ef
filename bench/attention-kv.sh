#!/bin/sh
# attention-kv.sh [REPS [BATCHES [LEN]]]: the decode attention alone at SDAR-4B's shape,
# the cluster kernel against the unit kernel per batch size, against the memory floor
# (bench/attention-kv.cu says how), built and run by bench/gpu-ops.sh (BENCH_BIN names a
# built program instead); needs a GPU.
BENCH=attention-kv exec sh "$(dirname "$0")/gpu-ops.sh" "$@"
