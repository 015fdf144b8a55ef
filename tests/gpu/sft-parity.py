#!/usr/bin/env python3
"""sft-parity: one dice-sft micro-batch against PyTorch (loss and every weight gradient).

    dice-sft --init tests/dice-sft/data/tiny.json -o /tmp/m
    dice-sft -m /tmp/m -x /tmp/batch.safetensors tests/dice-sft/data/train.jsonl
    python3 tests/gpu/sft-parity.py /tmp/m /tmp/batch.safetensors [--native] [--device cuda]

The batch file (dice-sft --dump-batch) holds the packed rows [x_t | x_0] of each sample
(ids, positions, noisy flags, targets, weights, sample starts/lengths), the loss and the
gradient of every weight as dice-sft computed them on the CPU in fp32. This script runs the
same rows through transformers' Qwen3ForCausalLM (eager attention, fp32) with SDAR's SFT
attention as an explicit 4D mask and explicit position ids, computes
sum(weight * CE(logits[row], target[row])) over the rows with a target (no logit shift), back-
propagates, and compares: relative error |a-b|/|b| of the loss and, per tensor, of the
gradient norm of the difference, all under 1e-4. --native uses a small Qwen3 written here in
plain torch instead of transformers (for machines without it). Exit 0 when everything passes.
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

DT = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    """(tensors by name, __metadata__) without the safetensors package."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    head = json.loads(blob[8:8 + hlen])
    meta = head.pop("__metadata__", {})
    base = 8 + hlen
    out = {}
    for name, d in head.items():
        b, e = d["data_offsets"]
        buf = bytearray(blob[base + b:base + e])
        t = torch.frombuffer(buf, dtype=DT[d["dtype"]]) if e > b else torch.zeros(0, dtype=DT[d["dtype"]])
        out[name] = t.reshape(d["shape"]).clone()
    return out, meta


def sft_mask(pos, noisy, start, length, block):
    """Additive (1, 1, N, N) mask: SDAR's SFT rule inside each sample, nothing across."""
    n = pos.numel()
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for s0, ln in zip(start.tolist(), length.tolist()):
        s0, ln = int(s0), int(ln)
        p = pos[s0:s0 + ln].long() // block
        z = noisy[s0:s0 + ln].bool()
        qb, kb = p[:, None], p[None, :]
        qn, kn = z[:, None], z[None, :]
        a = torch.where(qn & kn, qb == kb,
                        torch.where(qn & ~kn, kb < qb,
                                    torch.where(~qn & ~kn, kb <= qb, torch.zeros_like(qb == kb))))
        allowed[s0:s0 + ln, s0:s0 + ln] = a
    m = torch.zeros(n, n)
    m[~allowed] = torch.finfo(torch.float32).min
    return m[None, None]


# ---------------------------------------------------------------- a plain torch Qwen3

def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None, :], torch.cat([ang.sin()] * 2, -1)[:, None, :]
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def dice_dims(cfg):
    """(head_dim, num_key_value_heads, rope_theta) of a config.json as lib/config.c reads them:
    transformers' Qwen3Config defaults where absent (head_dim 128, not hidden_size /
    num_attention_heads; 32 key/value heads, null: one per attention head; rope_theta 10000),
    a rope_theta in rope_parameters or rope_scaling taken over the top-level one."""
    hd, nkv, theta = cfg.get("head_dim"), cfg.get("num_key_value_heads", 32), cfg.get("rope_theta")
    for key in ("rope_parameters", "rope_scaling"):
        d = cfg.get(key)
        if isinstance(d, dict) and d.get("rope_theta") is not None:
            theta = d["rope_theta"]
    return (128 if hd is None else hd, cfg["num_attention_heads"] if nkv is None else nkv,
            10000.0 if theta is None else theta)


def native_logits(p, cfg, ids, pos, mask):
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    HD, NKV, theta = dice_dims(cfg)
    eps = cfg.get("rms_norm_eps", 1e-6)
    N = ids.numel()
    x = p["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        L = lambda s: p["model.layers.%d.%s.weight" % (i, s)]
        h = rms(x, L("input_layernorm"), eps)
        q = (h @ L("self_attn.q_proj").T).view(N, NH, HD)
        k = (h @ L("self_attn.k_proj").T).view(N, NKV, HD)
        v = (h @ L("self_attn.v_proj").T).view(N, NKV, HD)
        q = rope(rms(q, L("self_attn.q_norm"), eps), pos, theta)
        k = rope(rms(k, L("self_attn.k_norm"), eps), pos, theta)
        g = NH // NKV
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(HD) + mask[0]
        a = torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(N, NH * HD)
        x = x + a @ L("self_attn.o_proj").T
        h = rms(x, L("post_attention_layernorm"), eps)
        x = x + (F.silu(h @ L("mlp.gate_proj").T) * (h @ L("mlp.up_proj").T)) @ L("mlp.down_proj").T
    head = p.get("lm_head.weight", p["model.embed_tokens.weight"])
    return rms(x, p["model.norm.weight"], eps) @ head.T


def qwen3_config(cfg, max_positions=0):
    """transformers' Qwen3Config for a dice config.json (bench/sft-ref.py uses it too)."""
    import inspect
    from transformers import Qwen3Config
    head_dim, nkv, theta = dice_dims(cfg)
    kw = dict(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
              intermediate_size=cfg["intermediate_size"],
              num_hidden_layers=cfg["num_hidden_layers"],
              num_attention_heads=cfg["num_attention_heads"],
              num_key_value_heads=nkv, head_dim=head_dim,
              rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
              max_position_embeddings=max(cfg.get("max_position_embeddings", 32768),
                                          max_positions),
              tie_word_embeddings=cfg.get("tie_word_embeddings", False),
              attention_bias=False, use_sliding_window=False, hidden_act="silu")
    if "rope_parameters" in inspect.signature(Qwen3Config.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    else:
        kw["rope_theta"] = theta
    return Qwen3Config(**kw)


def hf_model(cfg, weights, device):
    from transformers import Qwen3ForCausalLM
    conf = qwen3_config(cfg)
    conf._attn_implementation = "eager"
    model = Qwen3ForCausalLM(conf).to(torch.float32)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [m for m in missing if not (conf.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        sys.exit("sft-parity: weights do not match Qwen3: missing %s, unexpected %s" % (missing, unexpected))
    return model.to(device)


def compare(what, want, loss, b, grads, tol, extra=""):
    """The dumped loss and every grad.NAME tensor of the dump b against torch's loss and
    grads(NAME); prints the report and returns True when all are within tol (relative)."""
    ok = True
    rel = abs(loss.item() - want) / max(abs(loss.item()), 1e-30)
    print("%sloss: %s %.9g torch %.9g rel %.2e" % (extra, what, want, loss.item(), rel))
    ok &= rel < tol
    worst = 0.0
    for name, g in sorted(b.items()):
        if not name.startswith("grad."):
            continue
        ref = grads(name[5:])
        if ref is None:
            print("%s: no gradient in torch" % name)
            ok = False
            continue
        ref = ref.detach().float().cpu()
        err = (g - ref).norm().item() / max(ref.norm().item(), 1e-30)
        worst = max(worst, err)
        if err >= tol:
            print("%s: relative error %.2e" % (name, err))
            ok = False
    print("gradients: %d tensors, worst relative error %.2e (tolerance %.0e)"
          % (sum(n.startswith("grad.") for n in b), worst, tol))
    print("PASS" if ok else "FAIL")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("batch")
    ap.add_argument("--native", action="store_true", help="plain torch Qwen3, no transformers")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--time", type=int, default=0, metavar="N",
                    help="also time N forward+backward passes (median; for bench/)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    cfg = json.load(open(a.model_dir + "/config.json"))
    weights, _ = read_safetensors(a.model_dir + "/model.safetensors")
    weights = {k: v.float() for k, v in weights.items()}
    b, meta = read_safetensors(a.batch)
    if meta.get("dice_format") != "dice-sft-batch":
        sys.exit("sft-parity: %s is not a dice-sft --dump-batch file" % a.batch)
    block = int(meta["block"])
    ids, pos, noisy = b["ids"].long(), b["pos"].long(), b["noisy"]
    target, weight = b["target"].long(), b["weight"]
    mask = sft_mask(pos, noisy, b["start"], b["len"], block)
    rows = (target >= 0).nonzero().flatten()
    dev = a.device

    if a.native:
        params = {k: v.to(dev).requires_grad_(True) for k, v in weights.items()}
        run = lambda: native_logits(params, cfg, ids.to(dev), pos.to(dev), mask.to(dev))
        grads = lambda name: params[name].grad
        tensors = list(params.values())
    else:
        model = hf_model(cfg, weights, dev)
        run = lambda: model(input_ids=ids[None].to(dev), position_ids=pos[None].to(dev),
                            attention_mask=mask.to(dev), use_cache=False).logits[0]
        named = dict(model.named_parameters())
        grads = lambda name: named[name].grad
        tensors = list(named.values())

    def step():
        for t in tensors:
            t.grad = None
        logits = run()
        ce = F.cross_entropy(logits[rows.to(dev)], target[rows].to(dev), reduction="none")
        loss = (ce * weight[rows].to(dev)).sum()
        loss.backward()
        return loss

    loss = step()

    ok = compare("dice-sft", float(meta["loss"]), loss, b, grads, a.tol)
    if a.time:
        import time
        ts = []
        for _ in range(a.time):
            if dev == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            if dev == "cuda":
                torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        med = sorted(ts)[len(ts) // 2]
        print("time: median %.4f s of %d forward+backward, %.1f tokens/s (%d sample tokens, "
              "%d threads)" % (med, a.time, ids.numel() / 2 / med, ids.numel() // 2,
                              torch.get_num_threads()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
