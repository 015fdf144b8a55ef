cpp_src = "torch::Tensor pairwise_add(torch::Tensor x, torch::Tensor y);"

pairwise_add_ext = load_inline(
    name="pairwise_add_ext",
    cpp_sources=cpp_src,
    cuda_sources=source,
    functions=["pairwise_add"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Model with the addition done by a custom CUDA kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.ext = pairwise_add_ext

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.ext.pairwise_add(a, b)
