"""transformer_engine/pytorch/router.py: TE's fused MoE router kernels.

Megatron imports these at module load whenever TE >= 2.7 is present and calls them only with
`moe_router_fusion=True`; they are not simulated, and that option is refused here with a
message (Megatron's unfused router, the default, is simulated).
"""
from transformer_engine.pytorch.module.base import refuse


def _refused(*args, **kwargs):
    refuse("TE's fused MoE router kernels (Megatron's --moe-router-fusion) are not simulated; "
           "run without it")


fused_topk_with_score_function = _refused
fused_compute_score_for_moe_aux_loss = _refused
fused_moe_aux_loss = _refused
