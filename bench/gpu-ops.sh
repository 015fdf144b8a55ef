#!/bin/sh
# gpu-ops.sh [REPS]: time every CUDA op against its roofline (bench/gpu-ops.cu says how).
# Builds lib/libdice.a and the bench program unless BENCH_BIN names a built one; needs a GPU.
# Prints the table on stdout: op, shape, median us, floor us, % of floor, GB/s, TFLOP/s.
# BENCH=NAME builds and runs bench/NAME.cu instead, with this script's arguments
# (bench/matmul-fixed.sh does so).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
name=${BENCH:-gpu-ops}
bin=${BENCH_BIN:-tests/bin/bench-$name}
if [ -z "${BENCH_BIN:-}" ]; then
	make -s lib/libdice.a
	mkdir -p tests/bin
	vars=$(make -s -f config.mk -f - print <<'MK'
print:
	@echo 'nvcc="$(NVCC) $(NVCCFLAGS)" libs="$(CUDA_LIBS)"'
MK
)
	eval "$vars"
	$nvcc -Ilib -o "$bin" "bench/$name.cu" lib/libdice.a $libs
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | sed 's/^/# /'
if [ "$name" = gpu-ops ]; then
	"$bin" "${1:-30}"
else
	"$bin" "$@"
fi
