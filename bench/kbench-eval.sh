#!/bin/sh
# kbench-eval.sh [N] [JOBS]: candidates per minute of kbench-eval's pool (parallel builds in
# JOBS workers, apart from the run workers) against one-at-a-time evaluation (one
# kbench-eval -j 1 per candidate, as a serial KernelBench loop does), on the same candidates
# in the same run: N distinct extension candidates (C++ on the CPU, CUDA with a GPU) and N
# pure-PyTorch ones, each mode with a cold build cache of its own. Prints a table.
N_DEFAULT=4 TMP_NAME=kbench-bench
. "$(dirname "$0")/kbench-env.sh"
trap 'rm -rf "$tmp"' EXIT
kb="$root/tests/fixtures/kernelbench"
cands="$root/tests/fixtures/kbench-candidates"
ext=$cands/cpp_relu_ok.py
[ "$dev" = cuda ] && ext=$cands/cuda/relu_cuda_ok.py
py=${DICE_PYTHON:-python3}
"$py" - "$ext" "$cands" "$n" >"$tmp/in.jsonl" <<'PY'
import json, sys
ext, cands, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
src = open(ext).read()
py = [open("%s/%s" % (cands, f)).read() for f in ("relu_ok.py", "relu_wrong.py")]
for i in range(n):
    # a distinct source each: no build is shared between candidates
    print(json.dumps({"id": "ext%d" % i, "problem": "level1/1_ReLU.py",
                      "kernel": src + "\n# variant %d\n" % i}))
    print(json.dumps({"id": "py%d" % i, "problem": "level1/1_ReLU.py",
                      "kernel": py[i % 2] + "\n# variant %d\n" % i}))
PY
total=$((2 * n))
now() { date +%s.%N; }

t0=$(now)
i=0
while IFS= read -r line; do
	i=$((i + 1))
	printf '%s\n' "$line" | kbench-eval -d "$dev" -k "$kb" -c "$tmp/cache-serial" -j 1 -w 1 \
		-P 20 >>"$tmp/serial.jsonl" 2>>"$tmp/serial.err"
done <"$tmp/in.jsonl"
t1=$(now)
kbench-eval -d "$dev" -k "$kb" -c "$tmp/cache-pool" -j "$jobs" -P 20 "$tmp/in.jsonl" \
	>"$tmp/pool.jsonl" 2>"$tmp/pool.err"
t2=$(now)
kbench-eval -d "$dev" -k "$kb" -c "$tmp/cache-pool" -j "$jobs" -P 20 "$tmp/in.jsonl" \
	>"$tmp/warm.jsonl" 2>"$tmp/warm.err"
t3=$(now)

same=$("$py" -c '
import json, sys
v = lambda f: [(json.loads(l)["eval"]["correct"], json.loads(l)["eval"]["error"]) for l in open(f)]
print("yes" if v(sys.argv[1]) == v(sys.argv[2]) == v(sys.argv[3]) else "NO")
' "$tmp/serial.jsonl" "$tmp/pool.jsonl" "$tmp/warm.jsonl")
sums=$("$py" -c '
import json, sys
for f in sys.argv[1:]:
    ev = [json.loads(l)["eval"] for l in open(f)]
    print("%s: build_s %.1f run_s %.1f" % (f.rsplit("/", 1)[1][:-6], sum(e.get("build_s") or 0 for e in ev), sum(e.get("run_s") or 0 for e in ev)), end="; ")
' "$tmp/serial.jsonl" "$tmp/pool.jsonl" "$tmp/warm.jsonl")
echo "# kbench-eval pool vs one at a time: $total candidates ($n extension builds + $n PyTorch),"
echo "# device $dev, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); same verdicts: $same"
echo "# worker seconds: $sums"
echo "# command: bench/kbench-eval.sh $n $jobs"
awk -v s="$t0" -v a="$t1" -v b="$t2" -v c="$t3" -v n="$total" -v j="$jobs" 'BEGIN {
	printf "%-34s %8s %12s %8s\n", "mode", "wall_s", "cand/min", "ratio"
	printf "%-34s %8.1f %12.2f %8s\n", "one at a time (-j 1 per candidate)", a - s, n * 60 / (a - s), "1.00x"
	printf "%-34s %8.1f %12.2f %7.2fx\n", "pool -j " j ", cold cache", b - a, n * 60 / (b - a), (a - s) / (b - a)
	printf "%-34s %8.1f %12.2f %7.2fx\n", "pool -j " j ", warm cache", c - b, n * 60 / (c - b), (a - s) / (c - b)
}'
