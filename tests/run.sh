#!/bin/sh
# run.sh [--gpu] [FILTER]: the test runner. Prints TAP lines and ends with "N passed, N failed".
#
# Library tests: tests/bin/test_* (built from tests/lib/test_*.c) print TAP lines themselves.
# CLI cases: one folder per case, tests/<prog>/<NNN-name>/, holding
#   args        the program's arguments (shell words), run in the case folder, or
#   cmd         a shell script run instead (bin/ is on PATH), for pipelines and generated input
#   input.jsonl stdin (default: /dev/null)
#   expected    exact stdout (not checked when absent)
#   error       exact stderr (not checked when absent)
#   status      expected exit status (default 0)
# --gpu runs tests/bin/gpu_* instead (make check-gpu). FILTER keeps the cases whose path
# contains it. A "not ok ... # TODO" line is a known failure: listed and counted apart, not
# as failed. VALGRIND="valgrind -q --error-exitcode=99" runs the programs under valgrind.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
PATH="$root/bin:$PATH"
DICE_SHARE="$root/share"
export PATH DICE_SHARE
unset DICE_MODEL DICE_DEVICE    # the cases name their checkpoints and devices themselves
out="$root/tests/out"
rm -rf "$out"
mkdir -p "$out"
pass=0 fail=0 skip=0 todo=0 n=0
gpu=0
[ "${1:-}" = "--gpu" ] && { gpu=1; shift; }
filter=${1:-}

ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $1"; }

run_tap() { # binary name
	log="$out/$2.log"
	"$1" >"$log" 2>&1
	st=$?
	p=$(grep -c '^ok ' "$log")
	t=$(grep -c '^not ok .*# TODO' "$log")      # a known failure, reported, not counted
	f=$(($(grep -c '^not ok ' "$log") - t))
	s=$(grep -c '^ok .*# SKIP' "$log")
	pass=$((pass + p - s)); fail=$((fail + f)); skip=$((skip + s)); todo=$((todo + t))
	n=$((n + p + f + t))
	grep -E '^(not ok|#)' "$log" | sed "s|^|$2: |"
	if [ "$st" -ne 0 ] && [ "$f" -eq 0 ]; then
		notok "$2 exited with status $st"
		tail -5 "$log"
	fi
	echo "# $2: $p ok, $f not ok"
}

if [ $gpu -eq 1 ]; then
	for t in "$root"/tests/bin/gpu_*; do
		[ -x "$t" ] || continue
		case "$t" in *"$filter"*) ;; *) continue ;; esac
		run_tap "$t" "$(basename "$t")"
	done
	[ -x "$root/tests/gpu/run-model.sh" ] && [ -z "$filter" ] && run_tap "$root/tests/gpu/run-model.sh" gpu_model
	case sft-cuda in *"$filter"*) [ -x "$root/tests/gpu/sft-cuda.sh" ] && {
		# head dims 8 (cuBLAS attention), 64 and 128 (the fused kernels, the norm/RoPE fusions)
		run_tap "$root/tests/gpu/sft-cuda.sh" gpu_sft
		for c in hd64 hd128; do
			SFT_CUDA_CONFIG=$root/tests/dice-sft/data/tiny-$c.json
			export SFT_CUDA_CONFIG
			run_tap "$root/tests/gpu/sft-cuda.sh" gpu_sft_$c
		done
		unset SFT_CUDA_CONFIG; } ;; esac
	case sample-gpu in *"$filter"*) [ -x "$root/tests/gpu/sample-gpu.sh" ] && run_tap "$root/tests/gpu/sample-gpu.sh" gpu_sample_e2e ;; esac
	case sample-mem in *"$filter"*) [ -x "$root/tests/gpu/sample-mem.sh" ] && run_tap "$root/tests/gpu/sample-mem.sh" gpu_sample_mem ;; esac
	case sft-load in *"$filter"*) [ -x "$root/tests/gpu/sft-load.sh" ] && run_tap "$root/tests/gpu/sft-load.sh" gpu_sft_load ;; esac
	case kbench-gpu in *"$filter"*) [ -x "$root/tests/gpu/kbench-gpu.sh" ] && run_tap "$root/tests/gpu/kbench-gpu.sh" gpu_kbench ;; esac
	case parity in *"$filter"*) [ -x "$root/tests/gpu/parity.sh" ] && run_tap "$root/tests/gpu/parity.sh" gpu_parity ;; esac
	case rl-cuda in *"$filter"*) [ -x "$root/tests/gpu/rl-cuda.sh" ] && run_tap "$root/tests/gpu/rl-cuda.sh" gpu_rl ;; esac
	echo "$pass passed, $fail failed$([ $todo -gt 0 ] && echo ", $todo todo (known failures)")"
	[ $fail -eq 0 ]
	exit
fi

# run.sh does not build: a binary older than the library or its source tests old code, so
# say so (make check builds them first)
for t in "$root"/bin/* "$root"/tests/bin/test_*; do
	[ -x "$t" ] && [ -f "$root/lib/libdice.a" ] || continue
	src="$root/tests/lib/$(basename "$t").c"
	if [ "$t" -ot "$root/lib/libdice.a" ] || { [ -f "$src" ] && [ "$t" -ot "$src" ]; }; then
		echo "run.sh: warning: ${t#$root/} is older than what it is built from: run make first" >&2
	fi
done

for t in "$root"/tests/bin/test_*; do
	[ -x "$t" ] || continue
	case "$t" in *"$filter"*) ;; *) continue ;; esac
	run_tap "$t" "$(basename "$t")"
done

for dir in "$root"/tests/*/*/; do
	dir=${dir%/}
	[ -f "$dir/args" ] || [ -f "$dir/cmd" ] || continue
	rel=${dir#$root/tests/}
	case "$rel" in *"$filter"*) ;; *) continue ;; esac
	prog=${rel%%/*}
	name=$(echo "$rel" | tr / _)
	o="$out/$name.out" e="$out/$name.err"
	in=/dev/null
	[ -f "$dir/input.jsonl" ] && in="$dir/input.jsonl"
	if [ -f "$dir/cmd" ]; then
		(cd "$dir" && sh ./cmd <"$in" >"$o" 2>"$e")
	else
		(cd "$dir" && eval "set -- $(cat args)" && ${VALGRIND:-} "$root/bin/$prog" "$@" <"$in" >"$o" 2>"$e")
	fi
	st=$?
	want=0
	[ -f "$dir/status" ] && want=$(cat "$dir/status")
	why=
	[ "$st" -eq "$want" ] || why="exit status $st, want $want"
	if [ -z "$why" ] && [ -f "$dir/expected" ] && ! cmp -s "$dir/expected" "$o"; then
		why="stdout differs"
	fi
	if [ -z "$why" ] && [ -f "$dir/error" ] && ! cmp -s "$dir/error" "$e"; then
		why="stderr differs"
	fi
	if [ -z "$why" ]; then
		ok "$rel"
	else
		notok "$rel: $why"
		if [ "$why" = "stderr differs" ]; then
			diff "$dir/error" "$e" | head -10 | sed 's/^/#   /'
		elif [ "$why" = "stdout differs" ]; then
			diff "$dir/expected" "$o" | head -10 | sed 's/^/#   /'
		else
			head -5 "$e" | sed 's/^/#   /'
		fi
	fi
done

if [ $skip -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
[ $fail -eq 0 ]
