#!/usr/bin/env python3
"""seed.py TARGET: write starting inputs for tests/fuzz/fuzz_TARGET.c into build/fuzz/TARGET
(run.sh calls it when that corpus is empty), made from the repository's fixtures: records of
tests/fixtures/cuke/dataset.jsonl, share/prompts/, tests/fixtures/kernelbench. Targets
without seeds here start from tests/fuzz/TARGET/ alone."""
import io
import json
import os
import re
import sys
import tarfile
import zipfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
target = sys.argv[1]
out = os.path.join(root, "build", "fuzz", target)
os.makedirs(out, exist_ok=True)


def rd(path, mode="r"):
    with open(os.path.join(root, path), mode) as f:
        return f.read()


def put(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


lines = [l for l in rd("tests/fixtures/cuke/dataset.jsonl").split("\n") if l]
recs = [json.loads(l) for l in lines]
kb = os.path.join(root, "tests", "fixtures", "kernelbench")

if target == "kbench":      # records with an eval object, then names, sets and specs
    probs = ["level1/19_ReLU.py", "level2/3", "KernelBench/level3/1_MLP.py", 7]
    for i, r in enumerate(recs[:8]):
        r = {k: v for k, v in r.items() if k not in ("ref", "kernel")}
        r["problem"], r["level"] = probs[i % 4], [1, 2, "level3", 1][i % 4]
        r["eval"] = {"compiled": True, "correct": i % 3 != 0, "error": None,
                     "speedup": [1.5, 0.3, None, 12.0][i % 4], "trials_passed": 5}
        wrong = dict(r, eval=dict(r["eval"], correct=False))
        put("rec%d" % i, json.dumps(r) + "\n" + json.dumps(wrong) + "\n")
    put("names", "level1/19_ReLU.py\n1-10,19\nexec=0.4,fast_1=0.1\n1,3\nlevel3/1_MLP\n")
elif target == "cuke":      # an options byte, then JSONL
    opts = [0, 1, 3, 4, 8, 16, 0x20, 0x40, 0x60, 0x80, 0x9f, 0x2d]
    for i, l in enumerate(lines):
        put("seed%02d" % i, bytes([opts[i % len(opts)]]) + l.encode() + b"\n")
    put("seedall", bytes([0x48]) + "\n".join(lines[:6]).encode() + b"\n")
elif target == "prompt":    # template NUL the file `a` NUL a record
    def sub(t):
        return re.sub(r"\{\{> *[^}]*\}\}", "{{> a}}", t)
    ex = rd("share/prompts/example_ref.py")
    seeds = [sub(rd("share/prompts/kernelbench.txt")) + "\0" + ex + "\0" + lines[0],
             sub(rd("share/prompts/infill.txt")) + "\0" + ex + "\0" +
             json.dumps({"ref": "x = 1\n", "prefix": "p", "suffix": "s"}),
             "Hello {{ name }} and {{x}} {{> a}} {{1, 2}} {{>t.txt}}\n\0inc\n\n\0" +
             json.dumps({"prompt": "hi", "system": "sys"}),
             "{{ref}}\0\0" + json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n",
             "x\0\0" + json.dumps({"prompt_ids": [1, 2, 3]})]
    for i, s in enumerate(seeds):
        put("seed%d" % i, s)
elif target == "kbtree":    # small archives of the fixture tree
    def tgz(names):
        b = io.BytesIO()
        with tarfile.open(fileobj=b, mode="w:gz") as t:
            for n in names:
                t.add(os.path.join(kb, n), arcname=n)
        return b.getvalue()
    put("l1.tar.gz", tgz(["level1"]))
    put("l2.tar.gz", tgz(["level2"]))
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        for d in ("level3", "level1"):
            for n in sorted(os.listdir(os.path.join(kb, d)))[:2]:
                z.write(os.path.join(kb, d, n), d + "/" + n)
    put("l3.zip", b.getvalue())
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.USTAR_FORMAT) as t:
        t.add(os.path.join(kb, "level1", "4_Tiny_Scale.py"), arcname="level1/4_Tiny_Scale.py")
    put("one.tar", b.getvalue()[:2048])     # header, data, end: no padding to 10 KB
elif target == "jsonl":
    put("dataset", "\n".join(lines) + "\n")
    put("completion", json.dumps({"completion": "Here:\n```python\nimport torch\n```\nok",
                                  "kernel": None}) + "\n" + json.dumps({"kernel": 5}) + "\n")
elif target == "deceive":
    d = os.path.join(root, "tests", "fixtures", "deceive")
    for n in sorted(os.listdir(d)):
        if n.endswith(".py"):
            put(n, rd(os.path.join("tests", "fixtures", "deceive", n), "rb"))
elif target == "sft":       # an options byte, then SFT records of every form
    sft = [json.dumps(r) for r in (
        {"prompt": "add a and b", "response": "out = a + b"},
        {"prompt": "p", "response": "<think>\nhm\n</think>\n\nok", "system": "be brief"},
        {"messages": [{"role": "system", "content": "be brief"},
                      {"role": "user", "content": "relu"},
                      {"role": "assistant", "content": "</think>\n\nmax(x, 0)"},
                      {"role": "user", "content": "again"},
                      {"role": "assistant", "content": "max(x, 0)"}]},
        {"prompt_ids": [1, 2, 3], "response_ids": [4, 5]},
        {"prompt_ids": [], "response_ids": [7], "messages": None},
        {"messages": None, "prompt": "x\u00e9\u0301", "response": "y", "system": ""},
        {"prompt": "k", "response": "r" * 70})]
    sft += [l for l in rd("tests/dice-sft/data/train.jsonl").split("\n") if l][:2]
    for i, l in enumerate(sft):
        put("seed%d" % i, bytes([(i * 37) & 0xff]) + l.encode() + b"\n")
    put("seedall", bytes([0x41]) + "\n".join(sft).encode() + b"\n")
elif target == "rl":        # task records: levels, infilling tasks, prompts
    tl = [l for l in rd("tests/dice-rl/data/tasks.jsonl").split("\n") if l]
    more = [json.dumps(r) for r in (
        {"id": "a", "ref": "x = 1\n", "prefix": "p", "suffix": "s", "level": "level2"},
        {"id": "b", "ref": "y = 2\n", "prefix": "p", "level": 2.0},
        {"id": "c", "ref": "z\n", "suffix": 5, "cuke": {"level": "3"}},
        {"id": "d", "prompt": "hi", "level": None, "cuke": {"level": -1}},
        {"id": "e", "messages": [{"role": "user", "content": "u"}], "level": "x"},
        {"id": "f", "prompt_ids": [1, 2], "ref": "r", "prefix": None, "suffix": "s"},
        {"id": "g", "ref": "   ", "level": 2147483646})]
    put("tasks", "\n".join(tl) + "\n")
    put("mixed", "\n".join(more + tl[:3]) + "\nnot json\n")
    for i, l in enumerate(more):
        put("seed%d" % i, l + "\n" + lines[i] + "\n")
elif target == "state":     # patches of the saved trainer state's header (fuzz_state.c)
    patches = [{}, {"__metadata__": {"epoch": "1", "batch": "2"}},
               {"__metadata__": {"noise_rng": "1 2 3 4"}},
               {"__metadata__": {"step": "5", "save": "step 5"}},
               {"__metadata__": {"batch_tokens": "32", "lr": "0.5", "schedule": "cosine"}},
               {"__metadata__": {"seed": None, "dice_format_version": "2"}},
               {"exp_avg.model.norm.weight": {"dtype": "F32", "shape": [32],
                                              "data_offsets": [0, 128]}},
               {"exp_avg_sq.lm_head.weight": None}]
    for i, p in enumerate(patches):
        put("seed%d" % i, json.dumps(p))
    put("raw", "[\"__metadata__\"]")
