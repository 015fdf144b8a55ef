#!/bin/sh
# bench/deceive-check.sh [N] [RUNS]: deceive-check throughput on N generated kernel records
# (4-8 KB of kernel each, with their reference; bench/deceive-gen.py writes them), one core.
# Prints one table: records, bytes, median wall and CPU seconds of RUNS runs, records/s and
# MB/s per CPU second (user + system: one core's throughput, whatever else runs), for
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

# "median-wall median-cpu" seconds of $runs runs of "$@" (input on stdin, output discarded);
# cpu = user + system time, which other load on the machine does not inflate
median() {
	i=0
	: >"$tmp/times"
	while [ $i -lt "$runs" ]; do
		/usr/bin/time -f '%e %U %S' -o "$tmp/t" taskset -c 0 "$@" <"$tmp/in.jsonl" >/dev/null
		awk '{ print $1, $2 + $3 }' "$tmp/t" >>"$tmp/times"
		i=$((i + 1))
	done
	w=$(awk '{ print $1 }' "$tmp/times" | sort -n | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }')
	c=$(awk '{ print $2 }' "$tmp/times" | sort -n | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }')
	echo "$w $c"
}

row() { # name "wall cpu"
	set -- "$1" $2
	awk -v name="$1" -v w="$2" -v c="$3" -v n="$n" -v b="$bytes" 'BEGIN {
		if (c < 0.01) {
			printf "%-30s %8d %11d %8.2f %8.2f %10s %8s\n", name, n, b, w, c, "-", "-"
			exit
		}
		printf "%-30s %8d %11d %8.2f %8.2f %10.0f %8.1f\n", name, n, b, w, c, n / c, b / c / 1e6 }'
}

printf '%-30s %8s %11s %8s %8s %10s %8s\n' program records bytes wall-s cpu-s records/s MB/s
row "deceive-check" "$(median "$root/bin/deceive-check")"
row "deceive-check --drop" "$(median "$root/bin/deceive-check" --drop)"
row "cat (I/O floor)" "$(median cat)"
row "python3 json pass-through" "$(median python3 -c 'import sys, json
for l in sys.stdin: sys.stdout.write(json.dumps(json.loads(l)) + "\n")')"
echo
echo "command: bench/deceive-check.sh $n $runs   (median of $runs runs, pinned to CPU 0; records/s and MB/s per CPU second)"
echo "records: bench/deceive-gen.py $n 1 (kernel 4-8 KB + reference each)"
