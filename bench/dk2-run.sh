#!/bin/sh
# dk2-run.sh: one device call for attention_kv's unit kernel 2 (dv_kernel, issue 6), run as
# `cd .hw/dk2 && sh run.sh` (a copy of this file beside bins.tar.xz, made by bench/dk2-pack.sh)
# with $OUT set; at most ~105 s (every step under `timeout`, each given what is left of the
# budget). Logs into $OUT (5 files), a summary at the end; exits 0 also when the
# binaries are missing.
cd "$(dirname "$0")" || exit 0
export LD_LIBRARY_PATH=$PWD/../../.devlib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/dk2-out}
mkdir -p "$OUT"
BUDGET=${DK2_BUDGET:-105}
t0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
S="$OUT/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }

if [ ! -f bins.tar.xz ] || ! { mkdir -p bin && tar xJf bins.tar.xz -C bin; }; then
	say "dk2: no binaries (bins.tar.xz); nothing run"
	exit 0
fi
command -v nvidia-smi >/dev/null &&
	nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem \
	           --format=csv,noheader | tee -a "$S"

# run LOG CAP [VAR=VALUE ...] PROGRAM ARGS: under timeout min(CAP, left - 2) s, its output
# appended to $OUT/LOG; skipped when less than 5 s are left or PROGRAM is missing
run() {
	log=$1; cap=$2; shift 2
	l=$(( $(left) - 2 ))
	t=$(( cap < l ? cap : l ))
	prog=
	for x in "$@"; do
		case $x in *=*) ;; *) prog=$x; break ;; esac
	done
	if [ "$t" -lt 5 ] || [ ! -x "$prog" ]; then
		say "== $log: $* skipped ($t s left, or no $prog)"
		return 0
	fi
	s=$(date +%s)
	echo "== $*" >> "$OUT/$log"
	timeout -k 2 "$t" env "$@" >> "$OUT/$log" 2>&1
	rc=$?
	say "== $log [$t s] $* : rc=$rc in $(( $(date +%s) - s )) s"
}

tests() {   # LOG: counts of ok / not ok in it, the first failures
	f="$OUT/$1"
	[ -f "$f" ] || return 0
	say "   $1: $(grep -c '^ok' "$f") ok, $(grep -c '^not ok' "$f") not ok"
	grep '^not ok' "$f" | head -5 | tee -a "$S"
}

# 1. the op alone: cluster / unit1 (du_kernel) / unit2 (dv_kernel) / default, 1K and 4K keys
# (each line also says whether the four outputs are the same bits)
run opbench.log 12 bin/bench-attention-kv 9 1,16,32,128 1024
run opbench.log 10 bin/bench-attention-kv 5 1,16,32,128 4096

# 2. the 4b batch-128 decode forward: the default (unit kernel 2 at batch 128), then unit
# kernel 1 (main's default)
run logits.log 18 bin/model-logits bench cuda bf16 4b 128:4 1024 4 eval
run logits.log 18 DICE_DK_UNIT_V=1 bin/model-logits bench cuda bf16 4b 128:4 1024 4 eval

# 3. tests with unit kernel 2 forced (DICE_DK_UNIT=1: every 16-bit HD-128 attention_kv call
# on it; test_decode and test_model_batch also compare both unit kernels with the cluster
# kernel explicitly), then with the default choice, as long as time is left
run tests-forced.log 25 DICE_DK_UNIT=1 bin/gpu_decode
run tests-forced.log 8 DICE_DK_UNIT=1 bin/gpu_model_batch
run tests-forced.log 7 DICE_DK_UNIT=1 bin/gpu_model_graph
run tests-default.log 7 bin/gpu_model_batch
run tests-default.log 7 bin/gpu_model_graph
run tests-default.log 25 bin/gpu_decode
tests tests-forced.log
tests tests-default.log

say "== summary ($(( $(date +%s) - t0 )) s)"
[ -f "$OUT/opbench.log" ] && grep -E '^==|^copy|^batch|^ *[0-9]+ ' "$OUT/opbench.log" | tee -a "$S"
[ -f "$OUT/logits.log" ] && grep -E '^== |^decode-forward' "$OUT/logits.log" | tee -a "$S"
exit 0
