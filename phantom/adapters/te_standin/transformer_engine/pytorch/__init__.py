"""transformer_engine.pytorch, simulated (phantom/adapters/te_standin/__init__.py)."""
from transformer_engine.pytorch import distributed, ops, optimizers  # noqa: F401
from transformer_engine.pytorch.attention import DotProductAttention  # noqa: F401
from transformer_engine.pytorch.distributed import checkpoint  # noqa: F401
from transformer_engine.pytorch.fp8 import (  # noqa: F401
    autocast,
    fp8_autocast,
    fp8_model_init,
    quantized_model_init,
)
from transformer_engine.pytorch.module import (  # noqa: F401
    GroupedLinear,
    LayerNorm,
    LayerNormLinear,
    Linear,
    RMSNorm,
)
