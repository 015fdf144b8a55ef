#!/bin/sh
# bench/deceive-check.sh [N] [RUNS]: deceive-check throughput on N generated kernel records
# (4-8 KB of kernel each, with their reference; bench/deceive-gen.py writes them), one core.
# Prints one table: records, bytes, median seconds of RUNS runs, records/s, MB/s, for
# deceive-check and, measured in the same run, two references: `cat` (the I/O floor) and a
# Python json.loads/json.dumps pass-through (what parsing the records alone costs in Python).
# Target: at least 2,000 kernels/s.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-5000}
runs=${2:-3}
tmp=$(mktemp -d /tmp/deceive-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
[ -x "$root/bin/deceive-check" ] || make -C "$root" bin/deceive-check >/dev/null
python3 "$root/bench/deceive-gen.py" "$n" 1 >"$tmp/in.jsonl"
bytes=$(wc -c <"$tmp/in.jsonl")

# median wall-clock seconds of $runs runs of "$@" (input on stdin, output discarded)
median() {
	i=0
	: >"$tmp/times"
	while [ $i -lt "$runs" ]; do
		s=$(date +%s.%N)
		taskset -c 0 "$@" <"$tmp/in.jsonl" >/dev/null
		e=$(date +%s.%N)
		echo "$e - $s" | bc -l >>"$tmp/times"
		i=$((i + 1))
	done
	sort -n "$tmp/times" | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }'
}

row() { # name seconds
	awk -v name="$1" -v s="$2" -v n="$n" -v b="$bytes" 'BEGIN {
		printf "%-34s %8d %11d %9.3f %10.0f %8.1f\n", name, n, b, s, n / s, b / s / 1e6 }'
}

printf '%-34s %8s %11s %9s %10s %8s\n' program records bytes seconds records/s MB/s
row "deceive-check" "$(median "$root/bin/deceive-check")"
row "deceive-check --drop" "$(median "$root/bin/deceive-check" --drop)"
row "cat (I/O floor)" "$(median cat)"
row "python3 json pass-through" "$(median python3 -c 'import sys, json
for l in sys.stdin: sys.stdout.write(json.dumps(json.loads(l)) + "\n")')"
echo
echo "command: bench/deceive-check.sh $n $runs   (median of $runs runs, pinned to CPU 0; $(uname -m), $(nproc) cores)"
echo "records: bench/deceive-gen.py $n 1 (kernel 4-8 KB + reference each)"
