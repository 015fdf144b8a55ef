# cuke-gen.awk: writes n synthetic dataset records of about 4 KB (bench/cuke-filter.sh input).
# Usage: awk -v n=100000 -v seed=1 -f bench/cuke-gen.awk > data.jsonl
BEGIN {
	if (n == "") n = 1000
	srand(seed == "" ? 1 : seed)
	ref = "import torch\\nimport torch.nn as nn\\n\\nclass Model(nn.Module):\\n    def __init__(self):\\n        super().__init__()\\n\\n    def forward(self, x):\\n        return torch.relu(x) * 2.0\\n\\nbatch = 4096\\ndim = 16384\\n\\ndef get_inputs():\\n    return [torch.rand(batch, dim)]\\n\\ndef get_init_inputs():\\n    return []\\n"
	body = ""
	for (i = 0; i < 40; i++)
		body = body "    out[idx + " i "] = fmaxf(in[idx + " i "], 0.0f) * 2.0f;  // unrolled step " i "\\n"
	for (k = 0; k < 400; k++) {
		kern[k] = "import torch\\nimport torch.nn as nn\\nfrom torch.utils.cpp_extension import load_inline\\n\\nsource = \\\"\\\"\\\"\\n#include <torch/extension.h>\\n__global__ void relu2_kernel_" k "(const float* in, float* out, int n) {\\n    int idx = blockIdx.x * blockDim.x + threadIdx.x;\\n    if (idx >= n) return;\\n" body "}\\ntorch::Tensor relu2(torch::Tensor x) {\\n    auto out = torch::empty_like(x);\\n    relu2_kernel_" k "<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());\\n    return out;\\n}\\n\\\"\\\"\\\"\\ncpp_src = \\\"torch::Tensor relu2(torch::Tensor x);\\\"\\nmod = load_inline(name=\\\"relu2\\\", cpp_sources=cpp_src, cuda_sources=source, functions=[\\\"relu2\\\"])\\n\\nclass ModelNew(nn.Module):\\n    def forward(self, x):\\n        return mod.relu2(x)\\n"
	}
	for (i = 0; i < n; i++) {
		s = int(rand() * 400) / 100.0
		c = rand() < 0.8 ? "true" : "false"
		printf "{\"id\":\"gen-%d\",\"level\":1,\"problem\":\"level1/19_ReLU.py\",\"ref\":\"%s\",\"kernel\":\"%s\",\"speedup\":%s,\"correct\":%s,\"eval\":{\"compiled\":true,\"correct\":%s,\"ref_ms\":6.96,\"kernel_ms\":%.3f}}\n", i, ref, kern[i % 400], s, c, c, (s > 0 ? 6.96 / s : 9.9)
	}
}
