"""Hugging Face transformers under simulation.

Policy (README, "Frameworks"): phantom's fake CUDA tensors stand for real eager tensors, so
transformers must take its eager code paths, and a padding mask is assumed to mask nothing
(every training token valid; the usual case for packed pre-training batches).
"""
from __future__ import annotations

from types import ModuleType

from torch._subclasses.fake_tensor import FakeTensor


def _is_phantom_tensor(x: object) -> bool:
    return isinstance(x, FakeTensor) and x.device.type == "cuda"


def patch_import_utils(module: ModuleType) -> None:
    """transformers/utils/import_utils.py `is_fake_tensor` makes `is_tracing(t)` true for any
    FakeTensor, which switches masking_utils to its export path: it materialises a 4-D
    float attention mask and SDPA then runs the memory-efficient kernel instead of the
    flash/cuDNN kernel a real run uses. phantom's fakes are not tracing."""
    original = module.is_fake_tensor

    def is_fake_tensor(x) -> bool:
        return False if _is_phantom_tensor(x) else original(x)

    module.is_fake_tensor = is_fake_tensor


def patch_masking_utils(module: ModuleType) -> None:
    """transformers/masking_utils.py `fast_all(padding_mask)` reads the mask's values to decide
    whether SDPA can use `is_causal` instead of an explicit mask. A simulated mask has no
    values; under the documented no-padding assumption the answer is True."""
    original = module.fast_all

    def fast_all(tensor):
        return True if _is_phantom_tensor(tensor) else original(tensor)

    module.fast_all = fast_all
