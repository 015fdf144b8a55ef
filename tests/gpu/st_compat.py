#!/usr/bin/env python3
"""st_compat: do the Python `safetensors` package and transformers read what lib/safetensors.c
and lib/checkpoint.c write, and does our reader read what they write? Run by hand on a
machine that has torch, safetensors and transformers (the device machine):

  here:    for each fixture, tests/bin/test_checkpoint mktiny build/compat/NAME SEED SHARDS DTYPE
           and tests/bin/test_checkpoint sums build/compat/NAME > build/compat/NAME.sums
  there:   python3 tests/gpu/st_compat.py check build/compat      (our files -> Python)
           python3 tests/gpu/st_compat.py make $OUT/py            (Python files + .sums)
  here:    tests/bin/test_checkpoint sums DIR | diff against DIR.sums   (Python -> us)

A .sums file has one line per tensor, "name DTYPE [shape] sum" (sum of the values in
float64), then "__metadata__ key=value" lines; both sides print the same format.
"""
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def weight_files(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            return sorted({os.path.join(d, v) for v in json.load(f)["weight_map"].values()})
    return [os.path.join(d, "model.safetensors")]


def sums_lines(files):
    lines, meta = [], {}
    for i, path in enumerate(files):
        load_file(path)  # the package's own strict validation
        with safe_open(path, framework="pt") as f:
            if i == 0:
                meta = f.metadata() or {}
            for k in f.keys():
                t = f.get_tensor(k)
                shape = ",".join(str(s) for s in t.shape)
                lines.append((k, "%s %s [%s] %.17g" % (k, NAMES[t.dtype], shape,
                                                      t.double().sum().item())))
    out = [l for _, l in sorted(lines)]
    out += ["__metadata__ %s=%s" % (k, v) for k, v in sorted(meta.items())]
    return out


def same(a, b):
    """Lines equal, sums within 1e-9 relative (summation order differs)."""
    a, b = sorted(a), sorted(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        xs, ys = x.rsplit(" ", 1), y.rsplit(" ", 1)
        if xs[0] != ys[0]:
            return False
        u, v = float(xs[1]), float(ys[1])
        if abs(u - v) > 1e-9 * max(1.0, abs(u), abs(v)):
            return False
    return True


def check(root):
    from transformers import AutoModelForCausalLM
    bad = 0
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isdir(d):
            continue
        with open(d + ".sums") as f:
            ours = f.read().splitlines()
        theirs = sums_lines(weight_files(d))
        ok = same(ours, theirs)
        print("%s %s - safetensors reads our %s" % ("ok" if ok else "not ok", name, name))
        bad += not ok
        # transformers: our SDAR layout is Qwen3ForCausalLM with the SDAR extras
        tmp = tempfile.mkdtemp()
        for f in os.listdir(d):
            shutil.copy(os.path.join(d, f), tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            cfg = json.load(f)
        cfg["model_type"], cfg["architectures"] = "qwen3", ["Qwen3ForCausalLM"]
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        model, info = AutoModelForCausalLM.from_pretrained(tmp, output_loading_info=True)
        missing = [k for key in ("missing_keys", "unexpected_keys", "mismatched_keys")
                   for k in info.get(key, [])]
        state = {}
        for path in weight_files(d):
            state.update(load_file(path))
        equal = all(torch.equal(p.detach().cpu(), state[k].to(p.dtype))
                    for k, p in model.state_dict().items() if k in state)
        ids = torch.arange(8).unsqueeze(0) % cfg["vocab_size"]
        finite = bool(torch.isfinite(model(ids).logits).all())
        ok = not missing and equal and finite
        print("%s %s - transformers loads our %s (missing/unexpected %s, equal %s, "
              "finite %s)" % ("ok" if ok else "not ok", name, name, missing, equal, finite))
        bad += not ok
        shutil.rmtree(tmp)
    return bad


def make(out):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1)
    cfg = Qwen3Config(vocab_size=320, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, intermediate_size=128,
                      tie_word_embeddings=False, rope_theta=1e6, rms_norm_eps=1e-6)
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():   # norms away from 1 so a mix-up shows
        for k, p in model.named_parameters():
            if "norm" in k:
                p.add_(torch.randn_like(p) * 0.1)
    for name, shard in (("hf_single", "10GB"), ("hf_sharded", "100KB")):
        d = os.path.join(out, name)
        model.save_pretrained(d, max_shard_size=shard)
        with open(d + ".sums", "w") as f:
            f.write("\n".join(sums_lines(weight_files(d))) + "\n")
    # a plain file with every dtype and our format metadata
    d = os.path.join(out, "plain.safetensors")
    t = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16),
         "c": torch.randn(2, 3).to(torch.float16), "d": torch.tensor(2.5)}
    save_file(t, d, metadata={"dice_format": "dice-test", "dice_format_version": "1"})
    with open(d + ".sums", "w") as f:
        f.write("\n".join(sums_lines([d])) + "\n")
    print("ok - wrote", out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "make"):
        print("usage: st_compat.py check DIR | make DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(1 if (check if sys.argv[1] == "check" else make)(sys.argv[2]) else 0)
