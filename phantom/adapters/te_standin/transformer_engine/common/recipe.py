"""transformer_engine/common/recipe.py: quantization recipes.

Configuration objects only. They can be built (Megatron builds one whenever `--fp8` is set);
running a module under an enabled FP8 autocast is refused (transformer_engine.pytorch.fp8).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class _FormatHelper:
    def __init__(self, max_fwd: float, max_bwd: float) -> None:
        self.max_fwd, self.max_bwd = max_fwd, max_bwd


class Format(enum.Enum):
    E4M3 = _FormatHelper(448, 448)
    E5M2 = _FormatHelper(57344, 57344)
    HYBRID = _FormatHelper(448, 57344)


class Recipe:
    """Base of the recipes (TE's `Recipe`)."""

    def delayed(self) -> bool:
        return isinstance(self, DelayedScaling)

    def float8_current_scaling(self) -> bool:
        return isinstance(self, Float8CurrentScaling)

    def mxfp8(self) -> bool:
        return isinstance(self, MXFP8BlockScaling)

    def float8_block_scaling(self) -> bool:
        return isinstance(self, Float8BlockScaling)

    def nvfp4(self) -> bool:
        return isinstance(self, NVFP4BlockScaling)

    def float8_per_tensor_scaling(self) -> bool:
        return self.delayed() or self.float8_current_scaling()


@dataclass
class DelayedScaling(Recipe):
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    scaling_factor_compute_algo: object = None
    override_linear_precision: tuple = (False, False, False)
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False
    interval: int = 1


@dataclass
class Float8CurrentScaling(Recipe):
    fp8_format: Format = Format.HYBRID
    fp8_dpa: bool = False
    fp8_mha: bool = False


@dataclass
class MXFP8BlockScaling(Recipe):
    margin: int = 0
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False


@dataclass
class Float8BlockScaling(Recipe):
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False


@dataclass
class NVFP4BlockScaling(Recipe):
    fp4_format: object = None
    fp8_dpa: bool = False
    fp8_mha: bool = False
    extra: dict = field(default_factory=dict)


@dataclass
class CustomRecipe(Recipe):
    qfactory: object = None
