#!/usr/bin/env python3
"""rl-parity: one dice-rl TraceRL micro-batch against PyTorch (loss and every weight gradient).

    dice-sft --init tests/dice-sft/data/tiny.json -o /tmp/m
    dice-rl -m /tmp/m -o /tmp/rl -r 'cmd:sh tests/dice-rl/data/reward.sh' -p 4 -G 8 -x 8 \\
        -l 1e-2 -u 16 -M 4 -X /tmp/rlbatch.safetensors tests/dice-rl/data/tasks.jsonl
    python3 tests/gpu/rl-parity.py /tmp/rl /tmp/rlbatch.safetensors [--native] [--device cuda]

The batch file (format dice-rl-batch) holds the rows [noisy | clean] of each sample (ids,
positions, noisy flags, targets), the advantage and log pi_old of every row, eps, beta and
scale, the loss and the gradient of every weight as dice-rl computed them in fp32, and the
weights it computed them with ("w.<name>": the dump is taken before the step's last update,
so the checkpoint saved afterwards holds other weights; model_dir gives only config.json). This script runs the rows through transformers'
Qwen3ForCausalLM (eager attention, fp32; --native: a plain torch Qwen3) with SDAR's
noisy/clean attention as an explicit mask, takes logp = log softmax at each target, computes
    rho = exp(clamp(logp - logp_old, -10, 10))
    loss = sum(-min(rho A, clip(rho, 1-eps, 1+eps) A) + beta (exp(-d) - 1 + d)) * scale,
    d = logp - logp_old (or logp_ref when present)
back-propagates and compares: relative error of the loss and, per tensor, of the gradient
(norm of the difference over the norm), all under 1e-4. Exit 0 when everything passes. The
model code and the mask come from sft-parity.py (imported, not copied).
"""
import argparse
import importlib.util
import json
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("sft_parity", os.path.join(here, "sft-parity.py"))
sp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", help="config.json (and weights when the dump has none)")
    ap.add_argument("batch")
    ap.add_argument("--native", action="store_true", help="plain torch Qwen3, no transformers")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    cfg = json.load(open(a.model_dir + "/config.json"))
    b, meta = sp.read_safetensors(a.batch)
    if meta.get("dice_format") != "dice-rl-batch":
        sys.exit("rl-parity: %s is not a dice-rl --dump-batch file" % a.batch)
    weights = {k[2:]: v.float() for k, v in b.items() if k.startswith("w.")}
    if not weights:
        weights, _ = sp.read_safetensors(a.model_dir + "/model.safetensors")
        weights = {k: v.float() for k, v in weights.items()}
    block = int(meta["block"])
    ids, pos, noisy, target = b["ids"].long(), b["pos"].long(), b["noisy"], b["target"].long()
    mask = sp.sft_mask(pos, noisy, b["start"], b["len"], block)
    rows = (target >= 0).nonzero().flatten()
    dev = a.device

    if a.native:
        params = {k: v.to(dev).requires_grad_(True) for k, v in weights.items()}
        logits = sp.native_logits(params, cfg, ids.to(dev), pos.to(dev), mask.to(dev))
        grads = lambda name: params[name].grad
    else:
        model = sp.hf_model(cfg, weights, dev)
        out = model(input_ids=ids[None].to(dev), position_ids=pos[None].to(dev),
                    attention_mask=mask.to(dev), use_cache=False)
        logits = out.logits[0]
        named = dict(model.named_parameters())
        grads = lambda name: named[name].grad
    r = rows.to(dev)
    logp = -F.cross_entropy(logits[r], target[rows].to(dev), reduction="none")
    old = b["logp_old"][rows].to(dev)
    ref = b["logp_ref"][rows].to(dev) if "logp_ref" in b else old
    A = b["adv"][rows].to(dev)
    eps, beta, scale = b["eps"].item(), b["beta"].item(), b["scale"].item()
    rho = torch.exp(torch.clamp(logp - old, -10, 10))
    surr = torch.min(rho * A, torch.clamp(rho, 1 - eps, 1 + eps) * A)
    d = logp - ref
    loss = ((-surr + beta * (torch.exp(-d) - 1 + d)) * scale).sum()
    loss.backward()

    clipped = ((rho - 1).abs() > eps).float().mean().item()
    ok = sp.compare("dice-rl", float(meta["loss"]), loss, b, grads, a.tol,
                    "targets %d, clipped %.2f; " % (rows.numel(), clipped))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
