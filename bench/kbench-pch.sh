#!/bin/sh
# kbench-pch.sh [N] [JOBS]: what the precompiled torch/extension.h (worker.py, ext_pch;
# kbench-eval --no-pch turns it off) and, with a GPU, the lean CUDA builds (ext_lean;
# --no-lean) buy kbench-eval's builds, in one run: N distinct extension candidates (C++ on
# the CPU, CUDA with a GPU: DICE_DEVICE=cuda) evaluated by one kbench-eval -j JOBS (one
# correctness trial, no timing) in these modes, each with a cold build cache of its own but
# the last: with a GPU, (0) --no-pch --no-lean, every source built as written; (1) --no-pch;
# (2) the header on, none made yet (the first build to finish makes it: what a first run
# pays); (3) the header on, made by (2), N new candidates in (2)'s cache (every later run).
# Prints wall seconds, candidates a minute, the build seconds the workers report (sum and
# median) and the records built lean, with the ratio to the first mode.
N_DEFAULT=8 TMP_NAME=kbench-pch
. "$(dirname "$0")/kbench-env.sh"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
kb="$root/tests/fixtures/kernelbench"
ext=$root/tests/fixtures/kbench-candidates/cpp_relu_ok.py
[ "$dev" = cuda ] && ext=$root/tests/fixtures/kbench-candidates/cuda/relu_cuda_ok.py
py=${DICE_PYTHON:-python3}
mk() { # FIRST COUNT: records of distinct sources (no build shared between them)
	"$py" - "$ext" "$1" "$2" <<'PY'
import json, sys
src = open(sys.argv[1]).read()
for i in range(int(sys.argv[2]), int(sys.argv[2]) + int(sys.argv[3])):
    print(json.dumps({"id": "ext%d" % i, "problem": "level1/1_ReLU.py",
                      "kernel": src + "\n# variant %d\n" % i}))
PY
}
mk 0 "$n" >"$tmp/a.jsonl"
mk "$n" "$n" >"$tmp/b.jsonl"
now() { date +%s.%N; }
run() { # NAME CACHE INPUT [OPTIONS]
	name=$1 cache=$2 in=$3
	shift 3
	s=$(now)
	kbench-eval -d "$dev" -k "$kb" -c "$cache" -j "$jobs" -n 1 -P 0 ${KB_ARGS:-} "$@" "$in" \
		>"$tmp/$name.jsonl" 2>"$tmp/$name.err"
	echo "$name $(now) $s" >>"$tmp/times"
}
[ "$dev" = cuda ] && run written "$tmp/c0" "$tmp/a.jsonl" --no-pch --no-lean
run nopch "$tmp/c1" "$tmp/a.jsonl" --no-pch
run cold "$tmp/c2" "$tmp/a.jsonl"
run made "$tmp/c2" "$tmp/b.jsonl"
gch=$(ls "$tmp"/c2/pch/*/torch/extension.h.gch/*.gch 2>/dev/null | wc -l)
sz=$(du -sm "$tmp/c2/pch" 2>/dev/null | cut -f1)
echo "# kbench-eval's builds with and without the precompiled torch/extension.h (their C++ halves)"
echo "# and the lean CUDA builds (torch/extension.h read as torch/types.h in their CUDA halves):"
echo "# $n extension candidates a mode, device $dev, $(nproc) CPUs, -j $jobs;" \
	"headers made: $gch ($sz MB)"
echo "# command: bench/kbench-pch.sh $n $jobs${KB_ARGS:+ (KB_ARGS=$KB_ARGS)}"
"$py" - "$tmp" "$n" <<'PY'
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
t = {l.split()[0]: float(l.split()[1]) - float(l.split()[2]) for l in open(tmp + "/times")}
rows = [("written", "--no-pch --no-lean, cold"), ("nopch", "--no-pch, cold cache"),
        ("cold", "header on, none made yet"), ("made", "header on, made")]
print("%-26s %8s %9s %10s %9s %9s %6s %8s" % ("mode", "wall_s", "cand/min", "build_sum",
                                            "build_med", "correct", "lean", "ratio"))
base = None
for key, label in rows:
    if key not in t:
        continue
    ev = [json.loads(l)["eval"] for l in open("%s/%s.jsonl" % (tmp, key))]
    b = sorted(e.get("build_s") or 0 for e in ev)
    med = (b[(len(b) - 1) // 2] + b[len(b) // 2]) / 2 if b else 0
    ok = sum(1 for e in ev if e.get("correct"))
    lean = sum(1 for e in ev if e.get("lean"))
    base = base or t[key]
    print("%-26s %8.1f %9.2f %10.1f %9.1f %6d/%-2d %6d %7.2fx" % (label, t[key], n * 60 / t[key],
          sum(b), med, ok, len(ev), lean, base / t[key]))
PY
