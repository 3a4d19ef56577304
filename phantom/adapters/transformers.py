"""Hugging Face transformers under simulation.

Policy (docs/frameworks.md): phantom's fake CUDA tensors stand for real eager tensors, so
transformers must take its eager code paths; a padding mask is assumed to mask nothing (every
training token valid) and position ids to describe one sequence per row (no packed
sequences). Both are the usual pre-training case, and both decide whether SDPA gets an
explicit mask (memory-efficient kernel) or `is_causal` (flash/cuDNN kernel).
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
    _patch_packed_sequence_detection(module)


def _patch_packed_sequence_detection(module: ModuleType) -> None:
    """transformers/masking_utils.py `find_packed_sequence_indices(position_ids)` reads
    `(mask[:, -1] == 0).all()` to detect several sequences packed in one row. A simulated
    read cannot answer; under the documented one-sequence-per-row assumption it is None."""
    original = getattr(module, "find_packed_sequence_indices", None)
    if original is None:  # older transformers: no packed-sequence detection
        return

    def find_packed_sequence_indices(position_ids):
        return None if _is_phantom_tensor(position_ids) else original(position_ids)

    module.find_packed_sequence_indices = find_packed_sequence_indices
