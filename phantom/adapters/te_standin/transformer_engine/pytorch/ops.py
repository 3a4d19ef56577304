"""transformer_engine/pytorch/ops: TE's operation-fuser API.

Megatron names these classes in annotations at import time and builds them only with
`use_te_op_fuser` / `use_te_activation_func`; they are not simulated and refuse to be built.
"""
import torch

from transformer_engine.pytorch.module.base import refuse


class FusibleOperation(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        refuse(f"TE's operation-fuser API (te.pytorch.ops.{type(self).__name__}; Megatron's "
               "use_te_op_fuser / use_te_activation_func) is not simulated")


class Sequential(FusibleOperation):
    pass


for _name in ("BasicLinear", "Bias", "LayerNorm", "RMSNorm", "GELU", "GEGLU", "SiLU", "SwiGLU",
              "ReLU", "ReGLU", "AllReduce", "ReduceScatter", "AllGather"):
    globals()[_name] = type(_name, (FusibleOperation,), {})
