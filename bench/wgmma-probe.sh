#!/bin/sh
# wgmma-probe.sh [build]: does wgmma sum bitwise like matmul_fixed's mma.sync steps
# (bench/wgmma-probe.cu says what is compared)? Builds tests/bin/wgmma-probe for sm_90a with
# the nvcc of config.mk (with "build": only that; BENCH_BIN names a built program instead),
# then runs it: a line per case and K on stderr, the summary table on stdout. Needs a
# compute-capability-9.0 GPU to run.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${BENCH_BIN:-tests/bin/wgmma-probe}
if [ -z "${BENCH_BIN:-}" ]; then
	nvcc=$(make -s -f config.mk -f - print <<'MK'
print:
	@echo '$(NVCC)'
MK
)
	mkdir -p tests/bin
	"$nvcc" -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ilib -o "$bin" bench/wgmma-probe.cu
fi
[ "${1:-}" = build ] && exit 0
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | sed 's/^/# /'
exec "$bin"
