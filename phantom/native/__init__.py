"""The native preload library: a fake CUDA device guard and CUDA hooks for CPU-only torch.

`load_fake_cuda()` compiles `fake_cuda.cpp` against the installed torch (once, cached) and
loads it with RTLD_GLOBAL. It must run before `import torch`.
"""
from phantom.native.build import NativeBuildError, library_path, load_fake_cuda, storage_address_setter

__all__ = ["NativeBuildError", "load_fake_cuda", "library_path", "storage_address_setter"]
