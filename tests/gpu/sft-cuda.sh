#!/bin/sh
# sft-cuda.sh: dice-sft on the CUDA backend against the CPU backend (the specification), end
# to end, for make check-gpu. A tiny random model (tests/dice-sft/data/tiny.json): the first
# micro-batch's loss and every weight gradient (--dump-batch) must agree within 1e-4 relative
# (gradient: |g_cuda - g_cpu| / |g_cpu| per tensor), and the losses of the first 10 optimizer
# steps (AdamW, clipping) within 1e-2 relative (Adam's sign-like first steps amplify
# rounding). --dtype bf16 (bf16 GEMMs and tensor-core attention, fp32 master weights): the
# first micro-batch's loss within 1e-2 and every gradient within 5e-2 of the fp32 CPU ones,
# and 10 steps' losses within 5e-2. TAP lines; needs bin/dice-sft and python3 (no torch).
# SFT_CUDA_CONFIG=file picks another model config (tests/run.sh --gpu runs tiny-hd64.json and
# tiny-hd128.json too), e.g. tests/dice-sft/data/tiny-hd64.json
# (head dim 64: the bf16 run takes the fused attention kernels; tiny.json's 8 takes cuBLAS).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
sft=bin/dice-sft
data=tests/dice-sft/data
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
echo "1..5"
[ -x "$sft" ] || { echo "ok 1 # SKIP no $sft (make)"; exit 0; }
"$sft" --init "${SFT_CUDA_CONFIG:-$data/tiny.json}" -o "$t/m" 2>/dev/null || { echo "not ok 1 - init"; exit 1; }
"$sft" -q -m "$t/m" -o "$t/o1" -x "$t/cpu.st" $data/train.jsonl || { echo "not ok 1 - cpu dump"; exit 1; }
if ! "$sft" -q -d cuda -m "$t/m" -o "$t/o2" -x "$t/cuda.st" $data/train.jsonl 2>"$t/err"; then
	if grep -q "no device 'cuda'" "$t/err"; then
		echo "ok 1 # SKIP no GPU"; exit 0
	fi
	cat "$t/err"; echo "not ok 1 - cuda dump"; exit 1
fi
for d in cpu cuda; do
	"$sft" -q -d $d -m "$t/m" -o "$t/run-$d" -n 10 -e 1000 -l 3e-3 -b 1000 \
		-g "$t/log-$d.jsonl" $data/train.jsonl || echo "# $d run failed"
done
"$sft" -q -d cuda -D bf16 -m "$t/m" -o "$t/o3" -x "$t/bf16.st" $data/train.jsonl ||
	echo "# bf16 dump failed"
"$sft" -q -d cuda -D bf16 -m "$t/m" -o "$t/run-bf16" -n 10 -e 1000 -l 3e-3 -b 1000 \
	-g "$t/log-bf16.jsonl" $data/train.jsonl || echo "# bf16 run failed"
python3 - "$t" <<'PY'
import json, math, struct, sys
from array import array

def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        blob = f.read()
    meta = hdr.pop("__metadata__", {})
    ts = {}
    for k, v in hdr.items():
        a, b = v["data_offsets"]
        arr = array("f")
        arr.frombytes(blob[a:b])
        ts[k] = arr
    return meta, ts

t = sys.argv[1]
mc, tc = load(t + "/cpu.st")

def dump_check(name, ltol, gtol):
    """loss and per-tensor gradient errors of t/name.st against the cpu dump"""
    try:
        mg, tg = load(t + "/" + name + ".st")
    except OSError:
        print("# no %s dump" % name)
        return False, ["all"]
    lc, lg = float(mc["loss"]), float(mg["loss"])
    rel = abs(lg - lc) / abs(lc)
    print("# %s: loss cpu %.9g %s %.9g rel %.3g" % (name, lc, name, lg, rel))
    worst, bad = 0.0, []
    for k in sorted(tc):
        if not k.startswith("grad."):
            continue
        a, b = tc[k], tg.get(k)
        if b is None or len(a) != len(b):
            bad.append(k)
            continue
        num = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
        den = math.sqrt(sum(x * x for x in a)) or 1.0
        r = num / den
        if not r < gtol:
            bad.append("%s (%.3g)" % (k, r))
        worst = max(worst, r)
    print("# %s gradients: worst relative error %.3g" % (name, worst))
    for b in bad:
        print("#   bad: " + b)
    return rel < ltol, bad

def losses(p):
    try:
        return [json.loads(l)["loss"] for l in open(p)]
    except OSError:
        return []

def follow(name, tol):
    a, b = losses(t + "/log-cpu.jsonl"), losses(t + "/log-%s.jsonl" % name)
    ok = len(a) == 10 and len(b) == 10
    for i, (x, y) in enumerate(zip(a, b)):
        r = abs(x - y) / abs(x)
        print("# step %d loss cpu %.7g %s %.7g rel %.2g" % (i + 1, x, name, y, r))
        ok = ok and r < tol
    return ok

ok1, bad = dump_check("cuda", 1e-4, 1e-4)
print(("ok" if ok1 else "not ok") + " 1 - dice-sft cuda: first micro-batch loss matches cpu")
print(("ok" if not bad else "not ok") + " 2 - dice-sft cuda: every weight gradient matches cpu")
print(("ok" if follow("cuda", 1e-2) else "not ok") +
      " 3 - dice-sft cuda: 10 AdamW steps follow the cpu losses")
ok4, bad = dump_check("bf16", 1e-2, 5e-2)
print(("ok" if ok4 and not bad else "not ok") +
      " 4 - dice-sft cuda bf16: first micro-batch loss and gradients near the fp32 cpu ones")
print(("ok" if follow("bf16", 5e-2) else "not ok") +
      " 5 - dice-sft cuda bf16: 10 AdamW steps follow the fp32 cpu losses")
PY
