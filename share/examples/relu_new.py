import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

ext = load_inline(name="relu_ext", cpp_sources=cpp_source, cuda_sources=source,
                  functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = getattr(ext, "relu_cuda")

    def forward(self, x):
        return self.fn(x)
