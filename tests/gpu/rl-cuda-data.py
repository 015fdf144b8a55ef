"""rl-cuda-data.py DIR: the data of tests/gpu/rl-cuda.sh, written into DIR.

  DIR/kb/level1/N_NAME.py  four KernelBench-style problems (Model, get_inputs,
                           get_init_inputs) on small random tensors
  DIR/sft.jsonl            {"prompt": NAME, "response": a fenced ModelNew program}: one
                           inline-CUDA elementwise kernel per problem
  DIR/tasks.jsonl          {"id", "problem", "prompt"}: the RL tasks (kbench-eval finds the
                           reference in DIR/kb by `problem`; the prompt is the short name, so a
                           byte-level tiny model keeps its prompts short)
  DIR/config.json          the tiny SDAR geometry (byte-level tokenizer of share/examples/tiny)
"""
import json
import os
import sys

# name, the PyTorch expression of the reference, the CUDA expression of the kernel
OPS = [
    ("relu", "torch.relu(x)", "fmaxf(x[i],0.f)"),
    ("double", "x * 2.0", "x[i]*2.f"),
    ("addone", "x + 1.0", "x[i]+1.f"),
    ("square", "x * x", "x[i]*x[i]"),
]

REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''

NEW = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
s = """
#include <torch/extension.h>
__global__ void k(const float*x,float*y,int n){{int i=blockIdx.x*blockDim.x+threadIdx.x;if(i<n)y[i]={cu};}}
torch::Tensor f(torch::Tensor x){{auto y=torch::empty_like(x);int n=x.numel();k<<<(n+255)/256,256>>>(x.data_ptr<float>(),y.data_ptr<float>(),n);return y;}}
"""
m = load_inline(name="{name}_k", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=s, functions=["f"])
class ModelNew(nn.Module):
    def forward(self, x):
        return m.f(x)
'''

CONFIG = {"model_type": "sdar", "vocab_size": 264, "hidden_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
          "intermediate_size": 256, "max_position_embeddings": 2048, "rope_theta": 10000.0,
          "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "block_size": 4,
          "mask_token_id": 261, "bos_token_id": 256, "eos_token_id": 256, "pad_token_id": 256,
          "torch_dtype": "float32"}


def main():
    d = sys.argv[1]
    os.makedirs(os.path.join(d, "kb", "level1"), exist_ok=True)
    with open(os.path.join(d, "sft.jsonl"), "w") as sft, \
            open(os.path.join(d, "tasks.jsonl"), "w") as tasks:
        for n, (name, expr, cu) in enumerate(OPS, 1):
            path = "level1/%d_%s.py" % (n, name.capitalize())
            with open(os.path.join(d, "kb", path), "w") as f:
                f.write(REF.format(expr=expr))
            prog = NEW.format(name=name, cu=cu)
            sft.write(json.dumps({"prompt": name, "response": "```python\n" + prog + "```"}) + "\n")
            tasks.write(json.dumps({"id": name, "problem": path, "prompt": name}) + "\n")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CONFIG, f)


main()
