"""transformer_engine/pytorch/attention/dot_product_attention.py: `DotProductAttention`.

TE runs one fused attention kernel each way (FlashAttention or cuDNN's fused attention),
reading q, k, v in the layout they come in (Megatron's is `sbhd`) and writing the output as
`[s, b, heads * dim]`. Here: torch's `scaled_dot_product_attention` on `[b, h, s, d]` views of
the same tensors (phantom's SDPA backend choice, attention.py, picks the flash or cuDNN kernel
and prices it), grouped-query attention included. Context parallelism, `thd` (packed) inputs,
sliding windows and attention biases are refused, not approximated.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from transformer_engine.pytorch.module.base import TransformerEngineBaseModule, refuse

_CAUSAL = {"causal", "causal_bottom_right", "padding_causal", "padding_causal_bottom_right"}


class DotProductAttention(TransformerEngineBaseModule):
    def __init__(self, num_attention_heads: int, kv_channels: int | tuple[int, int],
                 num_gqa_groups: int | None = None, attention_dropout: float = 0.0,
                 qkv_format: str = "sbhd", attn_mask_type: str = "causal",
                 window_size: tuple[int, int] | None = None, sequence_parallel: bool = False,
                 tp_size: int = 1, get_rng_state_tracker: Callable | None = None,
                 tp_group: Any = None, layer_number: int | None = None,
                 attention_type: str = "self", cp_group: Any = None, cp_global_ranks: Any = None,
                 cp_stream: Any = None, cp_comm_type: str = "p2p", softmax_scale: float | None = None,
                 softmax_type: str = "vanilla", return_max_logit: bool = False, **unused: Any) -> None:
        super().__init__(tp_group=tp_group, tp_size=tp_size, sequence_parallel=sequence_parallel,
                         get_rng_state_tracker=get_rng_state_tracker)
        if cp_group is not None and torch.distributed.get_world_size(cp_group) > 1:
            refuse("context parallelism in DotProductAttention is not simulated")
        if softmax_type != "vanilla" or return_max_logit:
            refuse(f"DotProductAttention(softmax_type={softmax_type!r}, return_max_logit="
                   f"{return_max_logit}) is not simulated")
        self._check_window(window_size)
        tp = self.tp_size
        self.num_heads = num_attention_heads // tp
        self.num_gqa_groups = (num_gqa_groups or num_attention_heads) // tp
        k_dim = kv_channels[0] if isinstance(kv_channels, tuple) else kv_channels
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(k_dim)
        self.attention_dropout = attention_dropout
        self.qkv_format, self.attn_mask_type = qkv_format, attn_mask_type
        self.attention_type, self.layer_number = attention_type, layer_number

    @staticmethod
    def _check_window(window_size: Any) -> None:
        if window_size is not None and tuple(window_size) not in ((-1, -1), (-1, 0)):
            refuse(f"sliding-window attention (window_size={window_size}) is not simulated")

    def set_context_parallel_group(self, cp_group: Any, *args: Any, **kwargs: Any) -> None:
        if cp_group is not None and torch.distributed.get_world_size(cp_group) > 1:
            refuse("context parallelism in DotProductAttention is not simulated")

    def forward(self, query_layer: torch.Tensor, key_layer: torch.Tensor, value_layer: torch.Tensor,
                attention_mask: torch.Tensor | None = None, qkv_format: str | None = None,
                cu_seqlens_q: Any = None, cu_seqlens_kv: Any = None, max_seqlen_q: Any = None,
                max_seqlen_kv: Any = None, attn_mask_type: str | None = None,
                window_size: Any = None, checkpoint_core_attention: bool = False,
                core_attention_bias_type: str = "no_bias", core_attention_bias: Any = None,
                alibi_slopes: Any = None, fast_zero_fill: bool = True, **unused: Any) -> torch.Tensor:
        fmt = qkv_format or self.qkv_format
        mask_type = attn_mask_type or self.attn_mask_type
        if fmt not in ("sbhd", "bshd"):
            refuse(f"DotProductAttention with qkv_format={fmt!r} (packed sequences) is not simulated")
        if core_attention_bias_type != "no_bias" or alibi_slopes is not None:
            refuse("attention biases and ALiBi in DotProductAttention are not simulated")
        self._check_window(window_size)
        seq_first = fmt == "sbhd"
        # [s, b, h, d] / [b, s, h, d] -> [b, h, s, d] views; no copies
        q, k, v = (t.permute(1, 2, 0, 3) if seq_first else t.transpose(1, 2)
                   for t in (query_layer, key_layer, value_layer))
        mask = None
        if mask_type not in _CAUSAL and mask_type != "no_mask" and attention_mask is not None:
            mask = ~attention_mask  # TE's masks are True where attention is NOT allowed
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.attention_dropout if self.training else 0.0,
            is_causal=mask_type in _CAUSAL and mask is None, scale=self.softmax_scale,
            enable_gqa=q.shape[1] != k.shape[1])
        out = out.permute(2, 0, 1, 3) if seq_first else out.transpose(1, 2)
        return out.reshape(*out.shape[:2], -1)
