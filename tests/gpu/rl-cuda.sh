#!/bin/sh
# rl-cuda.sh: a real dice-rl run on the GPU, for make check-gpu. A tiny random SDAR model
# (byte-level tokenizer of share/examples/tiny, geometry in rl-cuda-data.py) is fine-tuned
# with dice-sft --device cuda on four inline-CUDA ModelNew programs (elementwise relu,
# double, add one, square), then trained with dice-rl --device cuda on the four matching
# KernelBench-style problems, the reward being kbench-eval in CUDA mode (one correctness
# trial, no timing, its compile pool overlapped with the rollout). Prints TAP lines and a
# per-step table of where the time goes: rollout, reward (overlapped / waited for), compile
# and execute seconds summed over kbench-eval's workers, update. Logs, metrics and the
# reward records go to ${OUT:-/tmp}/rl-cuda.
#
# Knobs (environment): RL_SFT_DIR (a fine-tuned checkpoint to start from: skips the SFT),
# SFT_TRY (the SFT lengths tried, "200 300 450 700"), RL_STEPS (3), RL_GROUP (4), RL_LR (1e-4),
# RL_KB_ARGS (more kbench-eval options, e.g. -g 0,0,0,0: four run workers on GPU 0),
# RL_ARGS (more dice-rl options, e.g. --no-overlap); for a dry run of the script without a
# GPU: RL_DEVICE=cpu RL_REWARD=cmd:PROGRAM. Needs bin/dice-sft, bin/dice-rl,
# bin/dice-sample, bin/kbench-eval, nvcc and a Python with CUDA torch ($DICE_PYTHON or
# python3).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp}/rl-cuda
mkdir -p "$out"
PATH="$root/bin:$PATH"
DICE_SHARE="$root/share"
export PATH DICE_SHARE
py=${DICE_PYTHON:-python3}
dev=${RL_DEVICE:-cuda}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
echo "1..4"
for b in dice-sft dice-rl dice-sample kbench-eval; do
	[ -x "$root/bin/$b" ] || { echo "ok 1 # SKIP no bin/$b (make)"; exit 0; }
done
[ "$dev" = cpu ] || "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null ||
	{ echo "ok 1 # SKIP no CUDA torch"; exit 0; }
"$py" "$root/tests/gpu/rl-cuda-data.py" "$t" || { echo "not ok 1 - data"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
	2>/dev/null | sed 's/^/# gpu: /'
echo "# cpus: $(nproc), ninja: $(command -v ninja || echo none), nvcc: $(command -v nvcc || echo none)"

# 1. SFT (or a given checkpoint). A model that reproduces every program earns reward 1 on
# every sample, so every group is skipped and nothing is learnt: fresh fine-tunes of
# increasing length are probed (8 rl-preset samples per prompt, the share of programs
# reproduced exactly) until one gets between a quarter and three quarters right, else
# the one nearest a half is taken.
probe() { # checkpoint -> "exact total" on stdout
	sed 's/, "response".*/}/' "$t/sft.jsonl" | dice-sample -m "$1" -d "$dev" -t fp32 --preset rl \
		-N 8 -b 32 -n 768 2>"$out/probe.err" >"$t/probe.jsonl" ||
		echo "# dice-sample failed in the probe: $(grep -v '^dice-sample: [0-9]' "$out/probe.err" |
			head -1)" >&2
	"$py" - "$t/sft.jsonl" "$t/probe.jsonl" <<'PY'
import json, sys
want = {}
for l in open(sys.argv[1]):
    w = json.loads(l)
    want[w["prompt"]] = w["response"]
n = k = 0
for l in open(sys.argv[2]):
    g = json.loads(l)
    n += 1
    k += want.get(g.get("prompt"), "\0") in g.get("completion", "")
print(k, n)
PY
}
if [ -n "${RL_SFT_DIR:-}" ]; then
	sft=$RL_SFT_DIR
	echo "ok 1 - SFT checkpoint given: $sft ($(probe "$sft" | sed 's| |/|') samples exact)"
else
	dice-sft --init "$t/config.json" -t "$root/share/examples/tiny" -o "$t/init" 2>&1 |
		sed 's/^/# /'
	sft= best=
	for n in ${SFT_TRY:-200 300 450 700}; do
		s0=$(date +%s)
		dice-sft -q -d "$dev" -m "$t/init" -o "$t/sft-$n" -n "$n" -e 1000000 -l 3e-3 \
			-S cosine -w 0.05 -g "$out/sft-$n.jsonl" "$t/sft.jsonl" 2>"$out/sft.err" ||
			{ echo "not ok 1 - dice-sft $dev (see $out/sft.err)"; exit 1; }
		s1=$(date +%s)
		set -- $(probe "$t/sft-$n")
		loss=$(tail -n 1 "$out/sft-$n.jsonl" | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
		echo "# dice-sft $dev, $n steps (cosine, lr 3e-3): loss $loss, $((s1 - s0)) s; rl samples exact $1/$2"
		d=$(( 2 * $1 - $2 )); d=${d#-}
		if [ -z "$best" ] || [ "$d" -lt "$best" ]; then
			best=$d sft="$t/sft-$n"
		fi
		[ $((4 * $1)) -ge "$2" ] && [ $((4 * $1)) -le $((3 * $2)) ] && break
	done
	echo "ok 1 - dice-sft $dev: starting RL from $(basename "$sft")"
fi

# 2. RL: kbench-eval in CUDA mode as the reward, sandboxed as a user runs it (its workers in
# their namespaces, the build cache narrowed to each one's entry; RL_KB_ARGS=-N turns that
# off); its records are kept (tee) for the table
r0=$(date +%s)
dice-rl -d "$dev" -m "$sft" -o "$t/rl" -n "${RL_STEPS:-3}" -p 4 -G "${RL_GROUP:-4}" -x 768 -b 16 \
	-l "${RL_LR:-1e-4}" -u 64 -M 8 -g "$out/rl.jsonl" ${RL_ARGS:-} \
	-r "${RL_REWARD:-kbench:-d cuda -k $t/kb -c $t/cache -j $(nproc) -t 60 ${RL_KB_ARGS:-} | tee -a $out/rewards.jsonl}" \
	"$t/tasks.jsonl" 2>"$out/rl.err"
st=$? r1=$(date +%s)
sed 's/^/# /' "$out/rl.err"
steps=$(wc -l < "$out/rl.jsonl" 2>/dev/null || echo 0)
[ "$st" -eq 0 ] && [ "$steps" -eq "${RL_STEPS:-3}" ] &&
	echo "ok 2 - dice-rl $dev: $steps steps in $((r1 - r0)) s" ||
	echo "not ok 2 - dice-rl $dev: status $st, $steps steps (see $out/rl.err)"
"$py" - "$out/rl.jsonl" "$out/rewards.jsonl" <<'PY'
import collections, json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
recs = []
try:
    recs = [json.loads(l) for l in open(sys.argv[2])]
except OSError:
    pass
cols = ["reward_mean", "skipped", "rollout_s", "tokens_per_s", "reward_s", "overlap_s",
        "reward_wait_s", "compile_s", "execute_s", "update_s", "step_s"]
print("# step " + " ".join("%12s" % c for c in cols))
for m in log:
    print("# %4d " % m["step"] + " ".join("%12.3f" % m.get(c, float("nan")) for c in cols))
tot = {c: sum(m.get(c, 0) for m in log) for c in cols}
if tot["step_s"] > 0:
    s = tot["step_s"]
    print("# where the step time goes (wall, all steps): rollout %.1f%%, reward not hidden "
          "%.1f%%, update %.1f%%; reward hidden behind the rollout: %.1f s of %.1f s" % (
              100 * tot["rollout_s"] / s, 100 * tot["reward_wait_s"] / s,
              100 * tot["update_s"] / s, tot["overlap_s"], tot["reward_s"]))
    print("# kbench-eval worker seconds (summed over parallel workers): compile %.1f, "
          "execute %.1f" % (tot["compile_s"], tot["execute_s"]))
kinds = collections.Counter()
cached = 0
for r in recs:
    ev = r.get("eval", {})
    kinds["correct" if ev.get("correct") else (ev.get("error") or "?")] += 1
    cached += bool(ev.get("cached"))
print("# reward records: %d, %s; build cache hits %d" % (
    len(recs), ", ".join("%s %d" % kv for kv in sorted(kinds.items())), cached))
keys = ("rollout_s", "reward_s", "overlap_s", "reward_wait_s", "compile_s", "execute_s",
        "update_s", "step_s", "tokens_per_s")
ok = log and all(all(k in m for k in keys) for m in log) and \
    any(m["compile_s"] > 0 for m in log) and all(m["rollout_s"] > 0 for m in log)
print(("ok" if ok else "not ok") + " 3 - every step logs its timings (compile time in some step)")
earned = any(m["reward_mean"] > 0 for m in log)
print(("ok" if earned else "not ok") + " 4 - a reward is earned (mean reward > 0 in a step)")
upd = sum(m.get("updates", 0) for m in log)
print("# optimizer updates %d (groups with unequal rewards: %s)" % (
    upd, ", ".join("%.2f" % (1 - m["skipped"]) for m in log)))
PY
