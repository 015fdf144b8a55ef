#!/usr/bin/env python3
"""engine-ref: the PyTorch reference sampler of bench/engine.sh (issue 6, workload (c)).

SDAR block-diffusion decoding the way it is run in plain Python, without JetEngine:
transformers' Qwen3 modules (random weights of the geometry, bf16, on the GPU), the SDAR
block-causal prefill mask, a static KV cache (one preallocated (B, NKV, len, HD) tensor per
layer and K/V), and the static top-k 1 sampler with block 4, steps 4: per step the current
block is forwarded against the cache (no mask needed: it sees the whole cache and all of its
own block), logits of its 4 rows, top-k 1 filter + softmax, the drawn token and its
probability per masked position, the quota (1) most confident committed (ties to the lowest
position, by a stable sort); a finished block is stored by one more forward (the reference
count: 5 forwards per block, none needed after the last). All sequences share the prompt length,
so the batch moves in lockstep. The layer step is written here from the modules' parts
(q/k/v/o projections, q/k norms, transformers' rotary embedding and apply_rotary_pos_emb, the
MLP, the norms) so that the cache is not concatenated at every step.

usage: engine-ref.py --geom 1.7b [--batches 1,128] [--prompt 1024] [--gen 1024[,G2...]]
Prints one "ref" line per batch: seconds, forwards, ms/forward, tokens/s.
"""
import argparse
import time

import torch
import torch.nn.functional as F
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (Qwen3DecoderLayer, Qwen3RMSNorm,
                                                      Qwen3RotaryEmbedding, apply_rotary_pos_emb)

GEOM = {  # hidden, layers, heads, kv heads, intermediate
    "0.6b": (1024, 28, 16, 8, 3072),
    "1.7b": (2048, 28, 16, 8, 6144),
    "4b": (2560, 36, 32, 8, 9728),
    "8b": (4096, 36, 32, 8, 12288),
}
V, MASK, BLOCK, STEPS = 151936, 151669, 4, 4


class Ref(torch.nn.Module):
    def __init__(self, geom):
        super().__init__()
        C, L, NH, NKV, I = GEOM[geom]
        cfg = Qwen3Config(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L,
                          num_attention_heads=NH, num_key_value_heads=NKV, head_dim=128,
                          rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=32768,
                          tie_word_embeddings=False, attention_bias=False,
                          use_sliding_window=False)
        if getattr(cfg, "rope_parameters", None) is not None:   # transformers 5
            cfg.rope_parameters = {"rope_type": "default", "rope_theta": 1e6}
        cfg._attn_implementation = "sdpa"
        self.cfg = cfg
        self.embed = torch.nn.Embedding(V, C)
        self.layers = torch.nn.ModuleList(Qwen3DecoderLayer(cfg, i) for i in range(L))
        self.norm = Qwen3RMSNorm(C, eps=1e-6)
        self.lm_head = torch.nn.Linear(C, V, bias=False)
        self.rotary = Qwen3RotaryEmbedding(cfg)
        self.NH, self.NKV, self.HD = NH, NKV, 128

    def weight_bytes(self):
        return sum(p.numel() * p.element_size() for n, p in self.named_parameters()
                   if not n.startswith("embed"))

    def new_cache(self, B, n):
        shape = (B, self.NKV, n, self.HD)
        return [(torch.empty(shape, dtype=torch.bfloat16, device="cuda"),
                 torch.empty(shape, dtype=torch.bfloat16, device="cuda")) for _ in self.layers]

    @torch.no_grad()
    def forward(self, ids, start, cache, mask=None, logits=True):
        """ids (B, T) at positions start..start+T-1; K/V written to cache[start:start+T]
        (committed by the caller moving start); logits (B, T, V) fp32 or None"""
        B, T = ids.shape
        pos = torch.arange(start, start + T, device="cuda")[None].expand(B, T)
        x = self.embed(ids)
        cos, sin = self.rotary(x, pos)
        for layer, (kc, vc) in zip(self.layers, cache):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_norm(a.q_proj(h).view(B, T, self.NH, self.HD)).transpose(1, 2)
            k = a.k_norm(a.k_proj(h).view(B, T, self.NKV, self.HD)).transpose(1, 2)
            v = a.v_proj(h).view(B, T, self.NKV, self.HD).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            kc[:, :, start:start + T] = k
            vc[:, :, start:start + T] = v
            o = F.scaled_dot_product_attention(q, kc[:, :, :start + T], vc[:, :, :start + T],
                                               attn_mask=mask, enable_gqa=True)
            x = x + a.o_proj(o.transpose(1, 2).reshape(B, T, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        if not logits:
            return None
        return self.lm_head(self.norm(x)).float()


def block_causal(n):
    """(n, n) bool: query i sees key j when block(j) <= block(i) (SDAR prefill)"""
    b = torch.arange(n, device="cuda") // BLOCK
    return b[None, :] <= b[:, None]


@torch.no_grad()
def generate(model, prompt, G, top_k=1):
    """static decoding, block 4, steps 4; prompt (B, P) with P a multiple of the block"""
    B, P = prompt.shape
    nb = (P + G + BLOCK - 1) // BLOCK
    cache = model.new_cache(B, nb * BLOCK)
    forwards = 0
    for b0 in range(0, B, 16):      # prefill in slices of 16 sequences (activation memory)
        sl = [(kc[b0:b0 + 16], vc[b0:b0 + 16]) for kc, vc in cache]
        model(prompt[b0:b0 + 16], 0, sl, mask=block_causal(P), logits=False)
    forwards += 1
    out = []
    arange = torch.arange(BLOCK, device="cuda")
    for b in range(P // BLOCK, nb):
        x = torch.full((B, BLOCK), MASK, dtype=torch.long, device="cuda")
        masked = torch.ones(B, BLOCK, dtype=torch.bool, device="cuda")
        for s in range(STEPS):
            lg = model(x, b * BLOCK, cache)
            forwards += 1
            if top_k:
                kth = torch.topk(lg, top_k, dim=-1).values[..., -1:]
                lg = lg.masked_fill(lg < kth, float("-inf"))
            p = torch.softmax(lg, dim=-1)
            conf, tok = p.max(dim=-1)                                  # greedy draw
            conf = torch.where(masked, conf, torch.tensor(-1.0, device="cuda"))
            quota = BLOCK // STEPS + (s < BLOCK % STEPS)
            order = torch.sort(conf, dim=-1, descending=True, stable=True).indices[:, :quota]
            commit = torch.zeros_like(masked).scatter_(1, order, True) & masked
            x = torch.where(commit, tok, x)
            masked &= ~commit
        out.append(x)
        if b + 1 < nb:
            model(x, b * BLOCK, cache, logits=False)                  # store the block
            forwards += 1
    torch.cuda.synchronize()
    return torch.cat(out, 1)[:, :G], forwards


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--geom", default="1.7b", choices=list(GEOM))
    ap.add_argument("--batches", default="1,128")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--gen", default="1024", help="new tokens, one for all or one per batch")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Ref(a.geom).eval()
        for p in model.parameters():
            torch.nn.init.normal_(p, 0.0, 0.02)
    print(f"ref {torch.cuda.get_device_name()} torch {torch.__version__} {a.geom} bf16: "
          f"weights {model.weight_bytes() / 1e9:.3f} GB", flush=True)
    batches = [int(b) for b in a.batches.split(",")]
    gens = [int(g) for g in a.gen.split(",")]
    gens += [gens[-1]] * (len(batches) - len(gens))
    for B, G in zip(batches, gens):
        prompt = ((torch.arange(a.prompt, device="cuda") * 7919 + 13) % (V - 300))[None].repeat(B, 1)
        generate(model, prompt[:, :8], 8)                              # warm-up
        t = time.perf_counter()
        ids, fw = generate(model, prompt, G)
        t = time.perf_counter() - t
        n = ids.numel()
        print(f"ref torch bf16 {a.geom} batch {B} P {a.prompt} G {G}: {t:.3f} s, {fw} forwards, "
              f"{t * 1e3 / fw:.3f} ms/forward, {fw * B / n:.3f} forwards/token, "
              f"{n / t:.1f} tokens/s", flush=True)
        del ids
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
