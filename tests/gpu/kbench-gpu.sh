#!/bin/sh
# kbench-gpu.sh: kbench-eval in CUDA mode on the fixtures, with real CUDA load_inline
# candidates (correct, wrong, illegal memory access followed by correct ones, side-stream
# and thread timing tricks, GPU work a pool queues between timed calls, an honest idling
# pool, pools whose threads end or start between timed calls, input mutation,
# uninitialised output, a reference slowed or changed by a rebound torch function or its
# output looked for in the worker's frames, timing's or the verdict's own functions rebound;
# lean builds, their fallback to the
# source as written, a syntax error, a name neither header has) and a few Python ones (one
# writing beside its directory, which the read-only file system refuses, one writing into
# every entry of the build cache, of which only its own takes it). Prints TAP lines,
# a timing table, and "N passed, N failed"; logs and records go to ${OUT:-/tmp}.
# Needs bin/kbench-eval (built here when missing) and a Python with CUDA torch
# ($DICE_PYTHON or python3).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp}/kbench-gpu
mkdir -p "$out"
PATH="$root/bin:$PATH"
DICE_SHARE="$root/share"
export PATH DICE_SHARE
[ -x "$root/bin/kbench-eval" ] || make -C "$root" bin/kbench-eval >"$out/build.log" 2>&1 ||
	{ echo "not ok 1 - build bin/kbench-eval (see $out/build.log)"; echo "0 passed, 1 failed"; exit 1; }
if [ -z "${DICE_PYTHON:-}" ]; then
	for p in python3 /usr/bin/python3; do
		if "$p" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
			DICE_PYTHON=$(command -v "$p")
			break
		fi
	done
	export DICE_PYTHON
fi
kb="$root/tests/fixtures/kernelbench"
cache="$out/cache"
mk="$root/tests/kbench-eval/mkrec.py"
py=${DICE_PYTHON:-python3}
pass=0 fail=0 n=0
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $1"; }

"$py" - >"$out/env.txt" 2>&1 <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda)
print("gpu", torch.cuda.get_device_name(0), "x", torch.cuda.device_count())
EOF
cat "$out/env.txt" | sed 's/^/# /'

# the candidates, in an order that puts correct ones after the illegal memory access
"$py" "$mk" level1/1_ReLU.py cuda/relu_cuda_ok.py cuda/relu_cuda_wrong.py \
	cuda/relu_cuda_illegal.py cuda/relu_cuda_ok.py relu_ok.py cuda/relu_cuda_sidestream.py \
	cuda/relu_cuda_thread.py cuda/relu_cuda_pool_gpu.py relu_pool_idle.py \
	cuda/relu_cuda_mutate.py cuda/relu_cuda_uninit.py relu_segv.py relu_hang.py \
	relu_stdout.py relu_sandbox.py level1/2_Scale_Add.py=scale_add_ok.py \
	level3/1_Tiny_MLP.py=mlp_ok.py level1/4_Tiny_Scale.py=tiny_zeros.py \
	cuda/relu_cuda_kmean.py cuda/relu_cuda_pybind.py cuda/relu_cuda_syntax.py \
	cuda/relu_cuda_undef.py relu_escape.py relu_poison.py >"$out/in.jsonl"
# a unique id per line (relu_cuda_ok appears twice)
"$py" -c '
import json, sys
seen = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    k = r["id"]
    seen[k] = seen.get(k, 0) + 1
    if seen[k] > 1:
        r["id"] = "%s#%d" % (k, seen[k])
    print(json.dumps(r))
' "$out/in.jsonl" >"$out/in2.jsonl"

netns=
# the workers' directories go in $out/tmp, where relu_escape tries to write beside its own
rm -rf "$out/tmp" && mkdir -p "$out/tmp"
TMPDIR=$out/tmp
export TMPDIR
t0=$(date +%s)
kbench-eval -d cuda -k "$kb" -c "$cache" -j 8 -t 60 -T 600 -P 100 "$out/in2.jsonl" \
	>"$out/eval.jsonl" 2>"$out/eval.err"
st=$?
t1=$(date +%s)
# if the namespace sandbox keeps CUDA from working on this system, say so and retry without
if ! grep -q '"id": "relu_cuda_ok", .*"correct":true' "$out/eval.jsonl"; then
	echo "# relu_cuda_ok failed with the network namespace; retrying with --no-netns"
	netns=--no-netns
	kbench-eval -d cuda -k "$kb" -c "$cache" -j 8 -t 60 -T 600 -P 100 $netns \
		"$out/in2.jsonl" >"$out/eval.jsonl" 2>"$out/eval.err"
	st=$?
	t1=$(date +%s)
fi
[ "$st" -eq 0 ] && ok "kbench-eval exit status 0 (cold run $((t1 - t0)) s)" ||
	notok "kbench-eval exit status $st (see $out/eval.err)"

recs=$out/eval.jsonl    # the records check reads
check() { # id python-expression-over-ev description
	if "$py" - "$recs" "$1" "$2" <<'EOF'
import json, sys
recs = {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        print("# stdout line is not JSON: %.60r" % line)
        sys.exit(1)
    recs[r.get("id")] = r
r = recs.get(sys.argv[2])
if r is None:
    print("# no record", sys.argv[2])
    sys.exit(1)
ev = r["eval"]
ok = eval(sys.argv[3], {"ev": ev})
if not ok:
    print("#   got:", json.dumps({k: v for k, v in ev.items() if k != "log"})[:400])
sys.exit(0 if ok else 1)
EOF
	then ok "$1: $3"; else notok "$1: $3"; fi
}

check relu_cuda_ok 'ev["correct"] and ev["device"] == "cuda" and ev["kernel_ms"] > 0' "correct, timed"
check relu_cuda_ok '(ev["gpu"]["name"] and ev["gpu"]["driver"] and ev["gpu"]["sm_mhz"] > 0 and
	ev["gpu"]["mem_mhz"] > 0)' "names the GPU that timed it (name, driver, maximum clocks)"
# lean builds: torch/extension.h read as torch/types.h; as written where that fails on a name
# (a mark in the build directory sends the run phase there) or the source needs pybind11
check relu_cuda_ok 'ev.get("lean") is True' "built with torch/types.h (lean)"
check relu_cuda_kmean 'ev["correct"] and ev.get("lean") is False and ev["run_s"] < 20' \
	"a name of torch/extension.h alone: lean build failed, built as written, correct, not rebuilt"
check relu_cuda_pybind 'ev["correct"] and ev.get("lean") is False' \
	"PYBIND11_MODULE in the CUDA source: built as written, correct"
check relu_cuda_syntax '(ev["error"] == "compile_error" and ev.get("lean") is True and
	"cuda.cu(" in ev["message"] and "error: expected a" in ev["message"])' \
	"a syntax error: compile_error, not tried again, the message nvcc's first error"
check relu_cuda_undef '(ev["error"] == "compile_error" and ev.get("lean") is True and
	"identifier \"CHECK_INPUT\" is undefined" in ev["message"])' \
	"a name torch/extension.h lacks too: compile_error, not tried again"
names=$(ls "$cache"/lean/*.names 2>/dev/null | wc -l)
kmean=$(grep -lx kMean "$cache"/lean/*.names 2>/dev/null | wc -l)
[ "$names" = 1 ] && [ "$kmean" = 1 ] &&
	ok "the names torch/extension.h adds, kept once (kMean among them)" ||
	notok "names files: $names, with kMean: $kmean"
marks=$(ls "$cache"/*/ext/*/*.kbench-lean-failed 2>/dev/null | sed 's|.*/||' | tr '\n' ' ')
[ "$marks" = "kbench_relu_cuda_kmean.kbench-lean-failed " ] &&
	ok "a lean-failed mark for the kmean build alone" || notok "lean-failed marks: '$marks'"
check relu_cuda_wrong 'ev["compiled"] and ev["error"] == "mismatch"' "mismatch"
check relu_cuda_illegal 'ev["error"] in ("cuda_error", "crash")' "illegal memory access: cuda_error or crash"
check 'relu_cuda_ok#2' 'ev["correct"] and ev["cached"]' "correct after the illegal access, from the cache"
check relu_ok 'ev["correct"]' "pure PyTorch candidate correct on CUDA"
check relu_cuda_sidestream 'ev["correct"] and not ev["excessive_speedup"] and ev["speedup"] < 1' \
	"side-stream kernel timed honestly (speedup < 1)"
check relu_cuda_thread 'ev["correct"] and ev["kernel_ms"] >= 5 and ev["speedup"] < 1' \
	"work a thread queues after the end event timed (kernel_ms >= 5)"
check relu_cuda_pool_gpu '(ev["error"] == "runtime_error" and not ev["correct"] and
	"of GPU work to the" in ev["message"] and ev.get("kernel_ms") is None)' \
	"GPU work a pool thread queues between timed calls: runtime_error, GPU work"
check relu_pool_idle 'ev["correct"] and 0 < ev["kernel_ms"] < 1' \
	"a pool idling in q.get(timeout=0.001), its work waited for: correct, timed"
check relu_cuda_mutate 'ev["error"] == "mismatch" and ev.get("inputs_mutated")' "input mutation caught"
check relu_cuda_uninit 'ev["error"] == "mismatch"' "uninitialised output caught"
check relu_segv 'ev["error"] == "crash"' "segfault: crash"
check relu_hang 'ev["error"] == "timeout"' "hang: timeout"
check relu_stdout 'ev["correct"] and "log" in ev' "stdout flood captured in eval.log"
check relu_sandbox 'ev["correct"]' "scrubbed environment and private temp dir"
check relu_escape 'ev["correct"]' "writes in its own directory"
if [ -n "$netns" ]; then
	notok "no read-only file system: the workers ran with --no-netns"
elif [ -e "$out/tmp/escaped.txt" ]; then
	notok "a write beside the worker's directory was made: the file system is not read-only"
else
	ok "a write beside the worker's directory refused (read-only file system)"
fi
poison=$(find "$cache" -name poison.txt | sed "s|^$cache/||" | tr '\n' ' ')
if [ -n "$netns" ]; then
	notok "no narrowed build cache: the workers ran with --no-netns"
elif echo "$poison" | grep -qx '[0-9a-f]\{16\}/poison.txt ' &&
     ! grep -q "each other's builds" "$out/eval.err"; then
	ok "relu_poison wrote its own cache entry alone (written: $poison)"
else
	notok "relu_poison's writes in the build cache: $poison"
fi
check scale_add_ok 'ev["correct"]' "init arguments, two inputs"
check mlp_ok 'ev["correct"]' "tuple output"
check tiny_zeros 'ev["correct"]' "near-zero reference: zeros pass atol"

# the same candidates again: every build from the cache
t2=$(date +%s)
kbench-eval -d cuda -k "$kb" -c "$cache" -j 8 -t 60 -P 100 $netns "$out/in2.jsonl" \
	>"$out/eval2.jsonl" 2>>"$out/eval.err"
t3=$(date +%s)
if "$py" -c '
import json, sys
a = [json.loads(l)["eval"] for l in open(sys.argv[1])]
b = [json.loads(l)["eval"] for l in open(sys.argv[2])]
same = all((x["correct"], x["error"]) == (y["correct"], y["error"]) for x, y in zip(a, b))
cached = all(y.get("cached") or y["build_s"] == 0 for y in b)
sys.exit(0 if same and cached and len(a) == len(b) else 1)
' "$out/eval.jsonl" "$out/eval2.jsonl"; then
	ok "warm run: same verdicts, no rebuild ($((t3 - t2)) s)"
else
	notok "warm run: same verdicts, no rebuild"
fi

# --rtol-only, --flush-l2
"$py" "$mk" level1/4_Tiny_Scale.py tiny_zeros.py | kbench-eval -d cuda -k "$kb" -c "$cache" \
	-P 0 --rtol-only $netns >"$out/rtol.jsonl" 2>>"$out/eval.err"
grep -q '"error":"mismatch"' "$out/rtol.jsonl" && ok "--rtol-only rejects zeros" ||
	notok "--rtol-only rejects zeros"
"$py" "$mk" level1/1_ReLU.py cuda/relu_cuda_ok.py | kbench-eval -d cuda -k "$kb" -c "$cache" \
	--flush-l2 $netns >"$out/flush.jsonl" 2>>"$out/eval.err"
grep -q '"correct":true' "$out/flush.jsonl" && ok "--flush-l2 run correct" || notok "--flush-l2 run correct"
# threads of the candidate's that work after the last timed call and end there, or are
# started there (the process's CPU clock less the worker's threads'): a runtime_error on
# cuda too, the CUDA runtime's threads not counted (relu_pool_idle above: timed)
"$py" "$mk" level1/1_ReLU.py relu_pool_exit.py relu_pool_spawn.py | kbench-eval -d cuda \
	-k "$kb" -c "$cache" -P 3 $netns >"$out/gone.jsonl" 2>>"$out/eval.err"
for id in relu_pool_exit relu_pool_spawn; do
	"$py" -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["id"] == sys.argv[2]][0]["eval"]
sys.exit(not (ev["error"] == "runtime_error" and "threads worked" in ev["message"]))
' "$out/gone.jsonl" $id 2>>"$out/eval.err" &&
		ok "$id: threads that work after the last timed call and end: runtime_error" ||
		notok "$id: threads that work after the last timed call and end: runtime_error"
done
# the reference runs whole before the candidate's code: a candidate that rebinds torch.relu
# (which the reference calls) to wait 2 ms does not slow the reference's timing, one that
# rebinds it to return zeros and returns zeros is a mismatch, and one that looks for the
# reference's output in the worker's frames finds none (the outputs are kept sealed)
# (relu_slowref, relu_falseref, relu_peek); timing calls the functions it had before the
# candidate's code ran: one that rebinds Event.elapsed_time to say a fiftieth (relu_event) or
# os.listdir to hide the thread it leaves 30 ms of work to (relu_hide) is timed right
"$py" "$mk" level1/1_ReLU.py relu_slowref.py relu_falseref.py relu_peek.py relu_event.py \
	relu_hide.py relu_late.py | kbench-eval -d cuda -k "$kb" -c "$cache" -P 20 $netns >"$out/first.jsonl" \
	2>>"$out/eval.err"
recs=$out/first.jsonl
check relu_event 'ev["correct"] and ev["speedup"] < 5' \
	"Event.elapsed_time rebound to say a fiftieth: timed with the real one (speedup < 5)"
check relu_hide 'ev["correct"] and ev["kernel_ms"] > 20' \
	"os.listdir rebound to hide the thread doing 30 ms of work: timed with it (kernel_ms > 20)"
check relu_late 'ev["error"] == "mismatch" and "for the timing" in ev["message"]' \
	"torch.randn rebound to draw 1 x 1 after the correctness trials: the timing's inputs checked"
check relu_slowref 'ev["correct"] and ev["ref_ms"] < 1' \
	"torch.relu rebound to wait 2 ms: the reference timed without it (ref_ms < 1)"
check relu_falseref 'ev["error"] == "mismatch"' "torch.relu rebound to return zeros: mismatch"
check relu_peek 'ev["error"] == "mismatch"' "the reference's output looked for in the frames: mismatch"
# the verdict's functions and tensor methods as imported: Tensor.__sub__ or Tensor.numel
# rebound with zeros returned under --rtol-only, torch.randn rebound (the inputs), Tensor.clone
# rebound to work in place on the worker's inputs: each a mismatch
"$py" "$mk" level1/1_ReLU.py relu_tsub.py relu_numel.py relu_randn.py relu_clone.py |
	kbench-eval -d cuda -k "$kb" -c "$cache" -P 0 --rtol-only $netns >"$out/kept.jsonl" \
	2>>"$out/eval.err"
recs=$out/kept.jsonl
for id in relu_tsub relu_numel relu_randn relu_clone; do
	check $id 'ev["error"] == "mismatch"' "a torch function or tensor method rebound: mismatch"
done
recs=$out/eval.jsonl
kbench-eval --report -k "$kb" -L 1 "$out/eval.jsonl" >"$out/report.txt" 2>>"$out/eval.err" &&
	ok "report" || notok "report"
sed 's/^/# /' "$out/report.txt"

echo "# timing (ms, mean of 100 trials; device sync before every end event)"
"$py" -c '
import json, sys
print("# %-22s %-8s %-14s %9s %9s %9s %7s %7s" % ("id", "correct", "error", "ref_ms", "kernel_ms", "speedup", "build_s", "run_s"))
for line in open(sys.argv[1]):
    r = json.loads(line)
    ev = r["eval"]
    f = lambda k: "-" if ev.get(k) is None else "%.4g" % ev[k]
    print("# %-22s %-8s %-14s %9s %9s %9s %7s %7s" % (r["id"], ev["correct"], ev["error"], f("ref_ms"), f("kernel_ms"), f("speedup"), f("build_s"), f("run_s")))
' "$out/eval.jsonl"
left=$(ps -eo args | grep -F "$root/share/kbench/worker.py" | grep -vc grep)
[ "$left" -eq 0 ] && ok "no worker left behind" || notok "$left workers left behind"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
