#!/bin/sh
# sft-cuda.sh: dice-sft on the CUDA backend against the CPU backend (the specification), end
# to end, for make check-gpu. A tiny random model (tests/dice-sft/data/tiny.json): the first
# micro-batch's loss and every weight gradient (--dump-batch) must agree within 1e-4 relative
# (gradient: |g_cuda - g_cpu| / |g_cpu| per tensor), and the losses of the first 10 optimizer
# steps (AdamW, clipping) within 1e-2 relative (Adam's sign-like first steps amplify
# rounding). TAP lines; needs bin/dice-sft and python3 (no torch).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
sft=bin/dice-sft
data=tests/dice-sft/data
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
echo "1..3"
[ -x "$sft" ] || { echo "ok 1 # SKIP no $sft (make)"; exit 0; }
"$sft" --init $data/tiny.json -o "$t/m" 2>/dev/null || { echo "not ok 1 - init"; exit 1; }
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
mg, tg = load(t + "/cuda.st")
lc, lg = float(mc["loss"]), float(mg["loss"])
rel = abs(lg - lc) / abs(lc)
print("# loss cpu %.9g cuda %.9g rel %.3g" % (lc, lg, rel))
ok1 = rel < 1e-4
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
    if not r < 1e-4:
        bad.append("%s (%.3g)" % (k, r))
    worst = max(worst, r)
print("# gradients: worst relative error %.3g" % worst)
for b in bad:
    print("#   bad: " + b)
print(("ok" if ok1 else "not ok") + " 1 - dice-sft cuda: first micro-batch loss matches cpu")
print(("ok" if not bad else "not ok") + " 2 - dice-sft cuda: every weight gradient matches cpu")

def losses(p):
    try:
        return [json.loads(l)["loss"] for l in open(p)]
    except OSError:
        return []
a, b = losses(t + "/log-cpu.jsonl"), losses(t + "/log-cuda.jsonl")
ok3 = len(a) == 10 and len(b) == 10
for i, (x, y) in enumerate(zip(a, b)):
    r = abs(x - y) / abs(x)
    print("# step %d loss cpu %.7g cuda %.7g rel %.2g" % (i + 1, x, y, r))
    ok3 = ok3 and r < 1e-2
print(("ok" if ok3 else "not ok") + " 3 - dice-sft cuda: 10 AdamW steps follow the cpu losses")
PY
