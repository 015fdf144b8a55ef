#!/usr/bin/env python3
"""deceive-gen.py N [SEED]: write N KernelBench-style kernel records (JSONL, 4-8 KB of kernel
each) for bench/deceive-check.sh. Each record has id, ref and kernel; the kernels vary in op,
names, number of CUDA kernels and helpers, and about one in five carries a deception."""
import json
import random
import sys

OPS = [("relu", "fmaxf(v, 0.0f)", "torch.relu(x)"),
       ("gelu", "0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)))", "F.gelu(x)"),
       ("sigmoid", "1.0f / (1.0f + expf(-v))", "torch.sigmoid(x)"),
       ("swish", "v / (1.0f + expf(-v))", "x * torch.sigmoid(x)"),
       ("softplus", "log1pf(expf(v))", "F.softplus(x)"),
       ("scale_shift", "v * 1.5f + 0.25f", "x * 1.5 + 0.25")]


def kernel_src(rng, name, expr, k):
    lines = ["#include <torch/extension.h>", "#include <cuda_runtime.h>", ""]
    for j in range(k):
        bs = rng.choice([128, 256, 512])
        lines += [
            f"// stage {j} of {name}: a grid-stride loop, {bs} threads per block",
            f"__global__ void {name}_kernel_{j}(const float* __restrict__ x, float* __restrict__ y, long n) {{",
            "    long stride = (long)blockDim.x * gridDim.x;",
            "    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {",
            "        float v = x[i];",
            f"        y[i] = {expr};",
            "    }",
            "}",
            "",
        ]
    lines += [f"torch::Tensor {name}_cuda(torch::Tensor x) {{",
              "    TORCH_CHECK(x.is_cuda(), \"x must be a CUDA tensor\");",
              "    TORCH_CHECK(x.scalar_type() == torch::kFloat32, \"x must be float32\");",
              "    auto xc = x.contiguous();",
              "    auto y = torch::empty_like(xc);",
              "    long n = xc.numel();",
              "    int threads = 256;",
              "    int blocks = (int)((n + threads - 1) / threads);",
              "    if (blocks > 65535) blocks = 65535;"]
    for j in range(k):
        src = "xc" if j == 0 else "y"
        lines.append(f"    {name}_kernel_{j}<<<blocks, threads>>>({src}.data_ptr<float>(), y.data_ptr<float>(), n);")
    lines += ["    cudaError_t err = cudaGetLastError();",
              "    TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));",
              "    return y;", "}"]
    return "\n".join(lines)


def record(rng, i):
    name, expr, ref_expr = rng.choice(OPS)
    k = rng.randint(4, 8)
    src = kernel_src(rng, name, expr, k)
    helpers = []
    for h in range(rng.randint(3, 6)):
        helpers.append(f'''

def _check_{h}(t):
    """Validate an input tensor (helper {h})."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("expected a tensor, got %s" % type(t).__name__)
    if t.dtype != torch.float32:
        raise TypeError(f"expected float32, got {{t.dtype}}")
    return t.contiguous()
''')
    deception = rng.random() < 0.2
    fwd = f"        return _run(_check_0(x))"
    if deception:
        fwd = rng.choice([f"        return {ref_expr}",
                          f"        try:\n            return _run(x)\n        except Exception:\n            return {ref_expr}"])
    kernel = f'''import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# Custom CUDA implementation of {name}: {k} fused stages, float32 only.
cuda_source = r"""
{src}
"""

cpp_source = "torch::Tensor {name}_cuda(torch::Tensor x);"

_ext = load_inline(
    name="{name}_ext_{i}",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["{name}_cuda"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)
{"".join(helpers)}

def _run(x):
    return _ext.{name}_cuda(x)


class ModelNew(nn.Module):
    """{name} through the custom kernel (record {i})."""

    def __init__(self, *args):
        super().__init__()
        self.args = args

    def forward(self, x):
{fwd}
'''
    ref = f'''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {ref_expr}


def get_inputs():
    return [torch.rand(16, 16384)]


def get_init_inputs():
    return []
'''
    return {"id": f"bench/{i}_{name}", "level": 1, "ref": ref, "kernel": kernel}


def main():
    n = int(sys.argv[1])
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    out = sys.stdout
    for i in range(n):
        out.write(json.dumps(record(rng, i)) + "\n")


main()
