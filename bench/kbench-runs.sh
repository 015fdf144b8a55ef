#!/bin/sh
# kbench-runs.sh [N] [JOBS]: what spare workers and more run workers on one device buy
# kbench-eval's run phase, and what they cost its timings. N pure-PyTorch candidates (nothing
# to build: the run workers alone) of three fixture problems, evaluated by kbench-eval -j
# JOBS with the protocol's defaults (5 correctness trials, 3 warm-ups, 100 timed trials) once
# for each mode R:S in MODES (default "1:1 1:3 2:3 4:3"): R run workers (on cuda GPU 0
# listed R times, -g 0,0,...; on the CPU -w R), each keeping S spares started (--spares S).
# Prints wall seconds, candidates a minute and the ratio to the first mode, and how far each
# mode's speedups stray from the first mode's (median and largest exp|log(s / s1)| - 1 over
# the candidates; the first mode's row compares a second run of it, run last: the noise
# floor) and how many candidates were correct.
# KB_ARGS: more kbench-eval options. DICE_DEVICE=cuda for a GPU.
N_DEFAULT=32 TMP_NAME=kbench-runs
. "$(dirname "$0")/kbench-env.sh"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
kb="$root/tests/fixtures/kernelbench"
cands="$root/tests/fixtures/kbench-candidates"
py=${DICE_PYTHON:-python3}
runs=${MODES:-1:1 1:3 2:3 4:3}
"$py" - "$cands" "$n" >"$tmp/in.jsonl" <<'PY'
import json, sys
cands, n = sys.argv[1], int(sys.argv[2])
pairs = [("level1/1_ReLU.py", "relu_ok.py"), ("level1/2_Scale_Add.py", "scale_add_ok.py"),
         ("level3/1_Tiny_MLP.py", "mlp_ok.py")]
src = {f: open("%s/%s" % (cands, f)).read() for _, f in pairs}
for i in range(n):
    prob, f = pairs[i % len(pairs)]
    print(json.dumps({"id": "c%d" % i, "problem": prob, "kernel": src[f] + "\n# variant %d\n" % i}))
PY
now() { date +%s.%N; }
workers() { # R:S: the options that give kbench-eval R run workers of S spares each
	r=${1%:*}
	if [ "$dev" = cuda ]; then
		g=0 k=1
		while [ $k -lt "$r" ]; do g="$g,0"; k=$((k + 1)); done
		echo "-g $g --spares ${1#*:}"
	else
		echo "-w $r --spares ${1#*:}"
	fi
}
first=${runs%% *}
for r in $runs base2; do
	w=$r
	[ "$r" = base2 ] && w=$first
	s=$(now)
	kbench-eval -d "$dev" -k "$kb" -c "$tmp/cache" -j "$jobs" $(workers "$w") ${KB_ARGS:-} \
		"$tmp/in.jsonl" >"$tmp/r$r.jsonl" 2>"$tmp/r$r.err"
	echo "$r $(now) $s" >>"$tmp/times"
done
echo "# kbench-eval run workers:spares on one device: $n pure-PyTorch candidates (3 problems),"
echo "# device $dev, $(nproc) CPUs, -j $jobs, trials 5, perf trials 100; mode $first again last (noise)"
echo "# command: ${MODES:+MODES=\"$MODES\" }bench/kbench-runs.sh $n $jobs${KB_ARGS:+ (KB_ARGS=$KB_ARGS)}"
"$py" - "$tmp" "$runs" "$first" <<'PY'
import json, math, sys
tmp, runs, first = sys.argv[1], sys.argv[2].split(), sys.argv[3]
t = {l.split()[0]: float(l.split()[1]) - float(l.split()[2]) for l in open(tmp + "/times")}
def load(r):
    return {json.loads(l)["id"]: json.loads(l)["eval"] for l in open("%s/r%s.jsonl" % (tmp, r))}
base = load(first)
def stray(a, b):   # exp|log(s / s1)| - 1: the same both ways
    d = sorted(math.exp(abs(math.log(a[k]["speedup"] / b[k]["speedup"]))) - 1 for k in a
               if k in b and a[k].get("speedup") and b[k].get("speedup"))
    if not d:
        return "-", "-"
    return "%.1f%%" % (100 * d[(len(d) - 1) // 2]), "%.1f%%" % (100 * d[-1])
print("%-18s %8s %9s %7s %14s %14s %8s" % ("workers:spares", "wall_s", "cand/min", "ratio",
                                          "median stray", "largest stray", "correct"))
for r in runs + ["base2"]:
    ev = load(r)
    med, big = stray(ev, base if r != first else load("base2"))
    label = r if r != "base2" else first + " (again)"
    ok = sum(1 for e in ev.values() if e.get("correct"))
    print("%-18s %8.1f %9.2f %6.2fx %14s %14s %5d/%-3d" % (label, t[r], len(ev) * 60 / t[r],
          t[first] / t[r], med, big, ok, len(ev)))
PY
