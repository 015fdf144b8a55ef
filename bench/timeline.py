#!/usr/bin/env python3
"""timeline.py: where a batch-1 decode forward's time goes between and inside its products.

Reads the block lines that model-logits writes with BENCH_TIMELINE=FILE (a build with
-DDICE_TIMELINE, config.mk's NVCCEXTRA): "in out start waited end", one per block of the
streaming and staged product kernels ((in, out): the product's shape) and of the small kernels
and the attention between them ((code, 0): 1 attention_kv, 2 qkv_prep, 3 add_rmsnorm, 4
swiglu_cat; lib/cuda/common.cuh), times in ns of the GPU's global timer. A launch is a run of
blocks of one kind in start order (a layer's kernels alternate, so two launches of one kind
are never next to each other). For each kind, its launches' most common block count and,
averaged over its launches:
  run   the last block's wait released -> the last block's end (the kernel once its input
        is there; a product's weight bytes over that time, GB/s)
  early the first block's start -> the last block's release (its blocks resident and their
        first weights asked for before the kernel before it was done: PDL)
  gap   the launch before's last end -> this one's first release (the kernel boundary)
  spread the first block's release -> the last block's (blocks made resident late, as the
        blocks of the kernel before retire, are released late: in neither run nor gap)
  tail  the median block's end -> the last block's end
and a layer's sums (the layers: the products' most common launch count).
usage: timeline.py FILE [WEIGHT_BYTES_PER_ELEMENT (2)]
A FILE that cannot be read or holds no block, or a line that is not 5 numbers: a one-line
error ("timeline.py: FILE: ...", "timeline.py: FILE:LINE: ...") and exit status 1.
"""
import statistics
import sys

SMALL = {1: "attention_kv", 2: "qkv_prep", 3: "add_rmsnorm", 4: "swiglu_cat"}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    es = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    blocks = []
    try:
        f = open(sys.argv[1])
    except OSError as e:
        sys.exit("timeline.py: %s: %s" % (sys.argv[1], e.strerror))
    with f:
        for n, line in enumerate(f, 1):
            p = line.split()
            if len(p) != 5 or not all(v.isdigit() for v in p):
                sys.exit("timeline.py: %s:%d: want 5 numbers (in out start waited end)"
                         % (sys.argv[1], n))
            blocks.append(tuple(int(v) for v in p))
    if not blocks:
        sys.exit("timeline.py: %s: no blocks" % sys.argv[1])
    blocks.sort(key=lambda b: b[2])
    launches = []
    for b in blocks:
        if launches and launches[-1][0][:2] == b[:2]:
            launches[-1].append(b)
        else:
            launches.append([b])
    per = {}
    prev_end = None
    for ln in launches:
        start = min(b[2] for b in ln)
        rel0, rel1 = min(b[3] for b in ln), max(b[3] for b in ln)
        ends = sorted(b[4] for b in ln)
        end = ends[-1]
        r = per.setdefault(ln[0][:2], {"run": [], "early": [], "gap": [], "tail": [],
                                       "spread": [], "blocks": []})
        r["spread"].append(rel1 - rel0)
        r["blocks"].append(len(ln))
        r["run"].append(end - rel1)
        r["early"].append(rel1 - start)
        if prev_end is not None:
            r["gap"].append(rel0 - prev_end)
        r["tail"].append(end - ends[len(ends) // 2])
        prev_end = end
    span = (max(b[4] for b in blocks) - blocks[0][2]) / 1e3
    print("%-14s %6s %7s %8s %9s %8s %8s %9s %8s" % ("kernel", "runs", "blocks", "run us",
                                                      "run GB/s", "early us", "gap us",
                                                      "spread us", "tail us"))
    for (k, o), r in sorted(per.items(), key=lambda kv: -sum(kv[1]["run"])):
        run = statistics.mean(r["run"]) / 1e3
        gap = statistics.mean(r["gap"]) / 1e3 if r["gap"] else float("nan")
        name = SMALL.get(k, "%dx%d" % (k, o)) if o == 0 else "%dx%d" % (k, o)
        gbs = "%9.0f" % (k * o * es / run / 1e3) if o and run > 0 else "%9s" % "-"
        print("%-14s %6d %7d %8.2f %s %8.2f %8.2f %9.2f %8.2f" % (
            name, len(r["run"]), statistics.mode(r["blocks"]), run, gbs,
            statistics.mean(r["early"]) / 1e3, gap, statistics.mean(r["spread"]) / 1e3,
            statistics.mean(r["tail"]) / 1e3))
    prod = [r for (k, o), r in per.items() if o]
    print("the products' runs: %.1f us of a %.1f us span (%d launches)" % (
        sum(sum(r["run"]) for r in prod) / 1e3, span, len(launches)))
    # a layer: L = the products' most common launch count (the layers), over the kinds
    # launched at least L times (not lm_head, once a forward)
    L = statistics.mode([len(r["run"]) for r in prod]) if prod else 0
    if L > 1:
        def tot(rs, key):
            return sum(sum(r[key]) for r in rs) / L / 1e3
        per = {k: r for k, r in per.items() if len(r["run"]) >= L}
        prod = [r for (k, o), r in per.items() if o]
        small = [r for (k, o), r in per.items() if not o]
        print("a layer (of %d; lm_head aside): product runs %.1f us, other kernels' runs "
              "%.1f, gaps %.1f, release spreads %.1f; the span / layers %.1f" % (
                  L, tot(prod, "run"), tot(small, "run"), tot(list(per.values()), "gap"),
                  tot(list(per.values()), "spread"), span / L))


if __name__ == "__main__":
    main()
