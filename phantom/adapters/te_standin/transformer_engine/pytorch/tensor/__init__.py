"""transformer_engine/pytorch/tensor: TE's quantized tensor classes.

Megatron tests parameters with `isinstance(p, QuantizedTensor)` to find FP8 weights. No
simulated module makes one (FP8 is refused), so the classes exist for those tests to answer
False.
"""
import torch


class QuantizedTensor(torch.Tensor):
    """Base of TE's FP8/FP4 tensors; never instantiated under phantom."""


class Float8Tensor(QuantizedTensor):
    pass
