#!/bin/sh
# bench/cuke-filter.sh [N]: cuke-filter against jq on the same filter, in the same run.
#
# Makes N (default 50000) synthetic records of about 4 KB (bench/cuke-gen.awk), then times
#   jq -c 'select(.speedup >= 2 and .correct)'
#   cuke-filter --min-speedup 2 --require-correct             (raw-line fast path)
#   cuke-filter --min-speedup 2 --require-correct --parse-all (every record through jansson)
# three times each, and prints the median wall time, records/s, MB/s and the ratio to jq.
# Both tools must keep the same number of records, and the two cuke-filter runs the same bytes.
# Needs jq (/usr/bin/jq) and a built bin/.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-50000}
command -v jq >/dev/null || { echo "cuke-filter.sh: jq is required" >&2; exit 2; }
[ -x "$root/bin/cuke-filter" ] || { echo "cuke-filter.sh: build bin/cuke-filter first (make)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/cuke-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
awk -v n="$n" -v seed=1 -f "$root/bench/cuke-gen.awk" >"$tmp/data.jsonl"
bytes=$(wc -c <"$tmp/data.jsonl")

# median of 3 wall-clock runs, in seconds; the kept count goes to $tmp/<name>.n
time3() {
	name=$1; shift
	for i in 1 2 3; do
		s=$(date +%s.%N)
		"$@" <"$tmp/data.jsonl" >"$tmp/$name.out"
		e=$(date +%s.%N)
		echo "$s $e" | awk '{ printf "%.4f\n", $2 - $1 }'
	done | sort -n | sed -n 2p
	wc -l <"$tmp/$name.out" >"$tmp/$name.n"
}
tj=$(time3 jq jq -c 'select(.speedup >= 2 and .correct)')
tf=$(time3 fast "$root/bin/cuke-filter" --min-speedup 2 --require-correct)
tp=$(time3 parse "$root/bin/cuke-filter" --min-speedup 2 --require-correct --parse-all)
cmp -s "$tmp/fast.out" "$tmp/parse.out" || { echo "cuke-filter.sh: fast path and --parse-all differ" >&2; exit 1; }
for k in fast parse; do
	if [ "$(cat "$tmp/$k.n")" != "$(cat "$tmp/jq.n")" ]; then
		echo "cuke-filter.sh: $k kept $(cat "$tmp/$k.n") records, jq $(cat "$tmp/jq.n")" >&2
		exit 1
	fi
done
echo "# $n records, $bytes bytes ($(awk -v b="$bytes" -v n="$n" 'BEGIN{printf "%.0f", b/n}') B/record), kept $(cat "$tmp/jq.n"); median of 3 runs; $(nproc) CPUs"
printf '%-34s %9s %12s %9s %8s\n' tool seconds records/s MB/s "vs jq"
for row in "jq_select(.speedup>=2_and_.correct) $tj" "cuke-filter_-m2_-c $tf" "cuke-filter_-m2_-c_--parse-all $tp"; do
	set -- $row
	echo "$1 $2" | awk -v n="$n" -v b="$bytes" -v j="$tj" '{
		gsub(/_/, " ", $1)
		printf "%-34s %9.3f %12.0f %9.1f %7.1fx\n", $1, $2, n / $2, b / $2 / 1e6, j / $2 }'
done
