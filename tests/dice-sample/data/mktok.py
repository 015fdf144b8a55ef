#!/usr/bin/env python3
"""mktok.py: writes tokenizer.json + tokenizer_config.json of a tiny byte-level BPE tokenizer
for the dice-sample tests: the 256 byte tokens (ids 0..255, in GPT-2's byte-to-unicode
stand-ins), a handful of merges, and Qwen3's special tokens at ids 256.. (mask 259)."""
import json

def byte_chars():
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out

bc = byte_chars()
vocab = {bc[b]: b for b in range(256)}
merges = []
for a, b in [("d", "e"), ("Ġ", "x"), ("r", "e"), ("i", "n"), ("de", "f")]:
    merges.append(f"{a} {b}")
    vocab[a + b] = len(vocab) + 4     # after the 4 added tokens below
added = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"]
tok = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": s != "<|MASK|>"}
                     for i, s in enumerate(added)],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex":
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": False, "vocab": vocab, "merges": merges},
}
with open("tokenizer.json", "w") as f:
    json.dump(tok, f, ensure_ascii=False)
with open("tokenizer_config.json", "w") as f:
    json.dump({"add_bos_token": False, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
               "bos_token": None}, f)
