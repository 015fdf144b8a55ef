#!/bin/sh
# bench/dice-sample.sh [DEVICE...]: dice-sample throughput on a small random checkpoint.
#
# Makes a random SDAR-shaped checkpoint (C 128, 2 layers, 4/2 heads of 32, I 384, the 265-id
# fixture tokenizer of tests/dice-sample/data) and 8 records of 32 prompt ids, then decodes
# 64 new tokens for each, --stop none, with the eval preset (static, top-k 1) and the rl
# preset (dynamic 0.9), at --batch 1 and --batch 8, three runs each, and prints the median:
# wall seconds, generated tokens/s, forwards per token (per sequence), and the speed-up of the
# batch over batch 1 measured in the same run. DEVICE: cpu (default) and/or cuda.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
PATH="$root/bin:$PATH"
[ -x "$root/bin/dice-sample" ] || { echo "dice-sample.sh: build bin/ first (make)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/dice-sample-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
dice-sft --init "$root/tests/fixtures/tiny-sdar.json" -o "$tmp/m" -t "$root/tests/dice-sample/data" 2>/dev/null
awk 'BEGIN { for (r = 0; r < 8; r++) { printf "{\"id\":\"r%d\",\"prompt_ids\":[", r
	for (i = 0; i < 32; i++) printf "%s%d", i ? "," : "", (r * 31 + i * 7) % 250; print "]}" } }' \
	>"$tmp/in.jsonl"

# run NAME ARGS...: median wall time of 3 runs; $tmp/NAME.out holds the last output
run() {
	name=$1; shift
	for i in 1 2 3; do
		s=$(date +%s.%N)
		dice-sample -m "$tmp/m" -n 64 -S none "$@" "$tmp/in.jsonl" >"$tmp/$name.out"
		e=$(date +%s.%N)
		echo "$s $e" | awk '{ printf "%.4f\n", $2 - $1 }'
	done | sort -n | sed -n 2p
}
# tokens and forwards summed over the records of an output
counts() {
	sed 's/.*"tokens":\([0-9]*\).*"forwards":\([0-9]*\).*/\1 \2/' "$1" |
		awk '{ t += $1; f += $2 } END { print t, f }'
}

printf '%-6s %-5s %5s %9s %9s %10s %8s\n' device mode batch seconds tokens/s fwd/token vs-b1
for dev in ${*:-cpu}; do
	for mode in eval rl; do
		b1=""
		for b in 1 8; do
			sec=$(run "$dev-$mode-$b" -d "$dev" -p "$mode" -b "$b")
			set -- $(counts "$tmp/$dev-$mode-$b.out")
			[ -z "$b1" ] && b1=$sec
			echo "$dev $mode $b $sec $1 $2 $b1" | awk '{ printf "%-6s %-5s %5d %9.3f %9.1f %10.3f %7.2fx\n",
				$1, $2, $3, $4, $5 / $4, $6 / $5, $7 / $4 }'
		done
	done
done
