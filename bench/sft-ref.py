#!/usr/bin/env python3
"""sft-ref: the PyTorch reference step of bench/sft.sh: the block-diffusion SFT objective of
dice-sft on transformers' Qwen3 modules, timed on one GPU.

    python3 bench/sft-ref.py CONFIG.json [--tokens 4096] [--prompt 512] [--steps 5] [--accum 1]

Model: Qwen3ForCausalLM built from CONFIG.json (dice's SDAR config: geometry, untied
lm_head), random init (throughput does not depend on the values), fp32 parameters on the GPU,
torch.autocast bf16, SDPA attention with SDAR's SFT mask as a 4D boolean mask over the
2n rows [x_t | x_0] (positions 0..n-1 twice; noisy -> noisy same block, noisy -> clean
strictly earlier block, clean -> clean block-causal, clean -> noisy never). The loss is
dice-sft's: sum over the masked noisy rows of weight * CE(logits[row], clean token) with
weight 1/p (mask ratio p = 0.5 here), logits only for those rows (lm_head on the selected
hidden states), no shift. Optimizer: torch.optim.AdamW(fused=True). One sample of n tokens
per micro-batch, like dice-sft -b n, and --accum micro-batches (gradients summed) per
optimizer step, like dice-sft -a. Prints the median step time of --steps steps after 2 warm-up
steps, tokens/s (sample tokens, not doubled), peak memory and MFU with bench/sft.sh's
formula (--peak FLOP/s, default 989e12: H100 SXM / H200 dense bf16).
"""
import argparse
import importlib.util
import json
import os
import time

import torch
import torch.nn.functional as F

# transformers' Qwen3Config for a dice config: tests/gpu/sft-parity.py's (imported, not copied)
_spec = importlib.util.spec_from_file_location(
    "sft_parity", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu",
                               "sft-parity.py"))
parity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(parity)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--peak", type=float, default=989e12)
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--attn", default="sdpa", help="transformers attention implementation")
    a = ap.parse_args()
    from transformers import Qwen3ForCausalLM

    c = json.load(open(a.config))
    conf = parity.qwen3_config(c, a.tokens)
    conf._attn_implementation = a.attn
    dev = "cuda"
    torch.manual_seed(0)
    with torch.device(dev):
        model = Qwen3ForCausalLM(conf)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)

    n, block, V = a.tokens, c.get("block_size", 4), c["vocab_size"]
    mask_id = c.get("mask_token_id", V - 1)
    g = torch.Generator().manual_seed(1)
    x0 = torch.randint(0, V - 300, (n,), generator=g)
    masked = (torch.rand(n, generator=g) < 0.5) & (torch.arange(n) >= a.prompt)
    xt = torch.where(masked, torch.full_like(x0, mask_id), x0)
    ids = torch.cat([xt, x0])[None].to(dev)
    pos = torch.cat([torch.arange(n), torch.arange(n)])[None].to(dev)
    noisy = torch.cat([torch.ones(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)]).to(dev)
    b = pos[0] // block
    qb, kb, qn, kn = b[:, None], b[None, :], noisy[:, None], noisy[None, :]
    allowed = torch.where(qn & kn, qb == kb,
                          torch.where(qn & ~kn, kb < qb,
                                      torch.where(~qn & ~kn, kb <= qb, torch.zeros_like(qb == kb))))
    mask = allowed[None, None]
    rows = masked.nonzero().flatten().to(dev)            # noisy rows are 0..n-1
    target = x0.to(dev)[rows]
    weight = torch.full((rows.numel(),), 2.0, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        for _ in range(a.accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = model.model(input_ids=ids, position_ids=pos, attention_mask=mask,
                                use_cache=False).last_hidden_state[0]
                logits = model.lm_head(h[rows])
            ce = F.cross_entropy(logits.float(), target, reduction="none")
            loss = (ce * weight).sum()
            loss.backward()
        opt.step()
        return loss

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    med = sorted(ts)[len(ts) // 2]
    L, NH, HD = c["num_hidden_layers"], c["num_attention_heads"], c["head_dim"]
    C, I, NKV = c["hidden_size"], c["intermediate_size"], c["num_key_value_heads"]
    layer = (NH + NKV) * HD * C * 2 + 3 * I * C
    flops = (6.0 * layer * L * 2 * n + 12.0 * L * NH * HD * n * n) * a.accum
    print("ref: torch %s, %s attention, loss %.4f, median step %.4f s of %d, %.1f tokens/s, "
          "mfu %.1f%%, peak mem %.0f MiB, %s" % (torch.__version__, a.attn, loss.item(), med,
          a.steps, n * a.accum / med, 100 * flops / med / a.peak, torch.cuda.max_memory_allocated() / 2**20,
          torch.cuda.get_device_name()))


if __name__ == "__main__":
    main()
