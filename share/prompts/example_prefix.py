import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The CUDA kernel and its host function, compiled when the module is imported.
