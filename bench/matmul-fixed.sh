#!/bin/sh
# matmul-fixed.sh [REPS [GEOMS [NS [sweep]]]]: the batch-invariant tiled product against
# cuBLAS's bf16 GEMM on the engine's shapes (bench/matmul-fixed.cu says how), built and run
# by bench/gpu-ops.sh (BENCH_BIN names a built program instead); needs a GPU. Prints one line
# a shape: ms and TFLOP/s of cuBLAS, of the matmul op, of matmul_fixed's tiled path, its
# share of cuBLAS's speed and the tile shape it took (with sweep, every tile shape after).
BENCH=matmul-fixed exec sh "$(dirname "$0")/gpu-ops.sh" "$@"
