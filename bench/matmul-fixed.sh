#!/bin/sh
# matmul-fixed.sh [REPS [GEOMS [NS [sweep]]]]: the batch-invariant tiled product against
# cuBLAS's bf16 GEMM on the engine's shapes (bench/matmul-fixed.cu says how). Builds
# lib/libdice.a and the bench program unless BENCH_BIN names a built one; needs a GPU.
# Prints one line a shape: ms and TFLOP/s of cuBLAS, of the matmul op, of matmul_fixed's tiled
# path, its share of cuBLAS's speed and the tile shape it took (with sweep, every tile shape).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${BENCH_BIN:-tests/bin/bench-matmul-fixed}
if [ -z "${BENCH_BIN:-}" ]; then
	make -s lib/libdice.a
	mkdir -p tests/bin
	vars=$(make -s -f config.mk -f - print <<'MK'
print:
	@echo 'nvcc="$(NVCC) $(NVCCFLAGS)" libs="$(CUDA_LIBS)"'
MK
)
	eval "$vars"
	$nvcc -Ilib -o "$bin" bench/matmul-fixed.cu lib/libdice.a $libs
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | sed 's/^/# /'
"$bin" "$@"
