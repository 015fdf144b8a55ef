#!/usr/bin/env python3
"""model-parity: our SDAR forward and greedy sampler against transformers' Qwen3 (SPEC §9).

A tiny random checkpoint of SDAR geometry is written by our own writer (model-logits write).
The reference is transformers' Qwen3ForCausalLM (tie_word_embeddings false) with the SDAR
block-causal mask passed as a 4D additive mask and explicit position ids, in fp32. The
reference sampler is written here from SPEC §2 (static, top-k 1: left-to-right argmax, lowest
index on ties), recomputing the whole prefix at every step (no cache), so the engine's KV
cache path is checked too. For each backend/dtype given (default: cpu fp32, then cuda fp32
and cuda bf16 when a GPU is there) it prints the max abs and relative logit error for the
prefill and the decode steps, and whether the greedy tokens agree.

usage: model-parity.py [--bin tests/bin/model-logits] [--keep DIR] [--ckpt DIR] [DEVICE:DTYPE ...]
--ckpt DIR: use that checkpoint (e.g. one dice-sft trained, tests/gpu/sft-load.sh) instead of
writing a random one; its block_size must be 4.
Exit 0 when cpu fp32 is within 1e-4 relative and tokens agree; bf16 within 2e-2 relative.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import Qwen3Config, Qwen3ForCausalLM

BLOCK = 4


def load_reference(ck):
    with open(os.path.join(ck, "config.json")) as f:
        c = json.load(f)
    cfg = Qwen3Config(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"], num_key_value_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"], rope_theta=c["rope_theta"], rms_norm_eps=c["rms_norm_eps"],
        max_position_embeddings=c["max_position_embeddings"], tie_word_embeddings=False,
        attention_bias=False, use_sliding_window=False)
    if getattr(cfg, "rope_parameters", None) is not None:   # transformers 5
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": c["rope_theta"]}
    cfg._attn_implementation = "eager"
    m = Qwen3ForCausalLM(cfg)
    sd = load_file(os.path.join(ck, "model.safetensors"))
    missing, unexpected = m.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if "rotary" not in k]
    if missing or unexpected:
        sys.exit(f"model-parity: state dict mismatch: missing {missing} unexpected {unexpected}")
    m.eval()
    return m, c


def block_causal(n):
    """additive (1, 1, n, n) mask: query i sees key j when block(j) <= block(i)"""
    b = torch.arange(n) // BLOCK
    allowed = b[None, :] <= b[:, None]
    m = torch.zeros(n, n)
    m[~allowed] = torch.finfo(torch.float32).min
    return m[None, None]


@torch.no_grad()
def ref_logits(model, ids):
    x = torch.tensor(ids)[None]
    pos = torch.arange(len(ids))[None]
    return model(input_ids=x, attention_mask=block_causal(len(ids)), position_ids=pos).logits[0]


@torch.no_grad()
def ref_greedy(model, prompt, G, mask_id):
    """SPEC §2 with static decoding, top-k 1, 4 steps per block; logits of every step"""
    P = len(prompt)
    nb = (P + G + BLOCK - 1) // BLOCK
    x = list(prompt) + [mask_id] * (nb * BLOCK - P)
    masked = [False] * P + [True] * (nb * BLOCK - P)
    steps = []
    for b in range(P // BLOCK, nb):
        while any(masked[b * BLOCK:(b + 1) * BLOCK]):
            lg = ref_logits(model, x[:(b + 1) * BLOCK])[b * BLOCK:]
            steps.append(lg.numpy())
            j = next(j for j in range(BLOCK) if masked[b * BLOCK + j])  # all conf 1: leftmost
            row = lg[j]
            x[b * BLOCK + j] = int(torch.nonzero(row == row.max())[0, 0])  # lowest index on ties
            masked[b * BLOCK + j] = False
    return x[P:P + G], np.stack(steps)


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="tests/bin/model-logits")
    ap.add_argument("--keep")
    ap.add_argument("--ckpt")
    ap.add_argument("runs", nargs="*")
    a = ap.parse_args()
    runs = a.runs or ["cpu:fp32"] + (["cuda:fp32", "cuda:bf16"] if torch.cuda.is_available() else [])
    tmp = a.keep or tempfile.mkdtemp(prefix="parity.")
    os.makedirs(tmp, exist_ok=True)
    ck = a.ckpt or os.path.join(tmp, "ck")
    if not a.ckpt:
        subprocess.run([a.bin, "write", ck, "1"], check=True)
    model, c = load_reference(ck)
    if c.get("block_size", BLOCK) != BLOCK:
        sys.exit(f"model-parity: {ck}: block_size {c['block_size']}, not {BLOCK}")
    V, mask_id = c["vocab_size"], c["mask_token_id"]
    rng = np.random.default_rng(5)
    ok = True
    for P, G in ((10, 16), (8, 12), (3, 9), (100, 8)):   # 100: the prefill attention (cuda bf16)
        prompt = [int(t) for t in rng.integers(0, V - 2, P)]
        pre = ref_logits(model, prompt).numpy()
        gids, gsteps = ref_greedy(model, prompt, G, mask_id)
        for run in runs:
            dev, dt = run.split(":")
            out = os.path.join(tmp, f"{dev}-{dt}-{P}")
            os.makedirs(out, exist_ok=True)
            subprocess.run([a.bin, "run", ck, dev, dt, out, str(G)] + [str(t) for t in prompt],
                           check=True)
            ours_pre = np.fromfile(os.path.join(out, "prefill.f32"), np.float32).reshape(P, V)
            ours_steps = np.fromfile(os.path.join(out, "steps.f32"), np.float32).reshape(-1, BLOCK, V)
            with open(os.path.join(out, "ids.txt")) as f:
                oids = [int(t) for t in f.readline().split()]
            same = 0
            while same < min(len(oids), len(gids)) and oids[same] == gids[same]:
                same += 1
            # decode steps compare while both sampled the same tokens (step k sees tokens < k)
            n = min(len(ours_steps), len(gsteps), same + 1)
            # rows of masked positions carry the mask id on both sides; compare every row
            d_pre = float(np.abs(ours_pre - pre).max())
            d_st = float(np.abs(ours_steps[:n] - gsteps[:n]).max())
            r_pre, r_st = rel(ours_pre, pre), rel(ours_steps[:n], gsteps[:n])
            tol = 1e-4 if dt == "fp32" else 2e-2
            good = r_pre < tol and r_st < tol and (dt != "fp32" or same == G)
            ok &= good or dt == "fp16"
            print(f"{run:10s} P={P:2d} G={G:2d}  prefill max|d| {d_pre:.3e} rel {r_pre:.3e}  "
                  f"decode({n} steps) max|d| {d_st:.3e} rel {r_st:.3e}  "
                  f"greedy tokens equal {same}/{G}  {'ok' if good else 'FAIL'}", flush=True)
    print("model-parity:", "ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
