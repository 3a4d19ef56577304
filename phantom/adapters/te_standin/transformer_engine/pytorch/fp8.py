"""transformer_engine/pytorch/fp8.py (quantization.py in newer TE): the FP8 state.

phantom simulates TE's high-precision (bf16/fp16/fp32) execution. FP8 GEMMs, their scaling
factors and amax reductions are not simulated, so an autocast that turns FP8 on is refused
with a message, instead of a run that silently prices bf16 kernels as FP8 ones.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator



class FP8GlobalStateManager:
    """TE's global FP8 state, always 'FP8 off' here (FP8 is refused on entry)."""

    @classmethod
    def is_fp8_enabled(cls) -> bool:
        return False

    @classmethod
    def is_fp8_calibration(cls) -> bool:
        return False

    @classmethod
    def with_fp8_parameters(cls) -> bool:
        return False

    @classmethod
    def is_first_fp8_module(cls) -> bool:
        return False

    @classmethod
    def get_fp8_recipe(cls) -> None:
        return None

    @classmethod
    def get_fp8_group(cls) -> None:
        return None

    @classmethod
    def get_autocast_state(cls) -> tuple:
        return (False, False, None, None, False)

    @classmethod
    def set_skip_fp8_weight_update_tensor(cls, skip: bool) -> None:
        pass

    @classmethod
    def reduce_and_update_fp8_tensors(cls, forward: bool = True) -> None:
        pass

    @classmethod
    def is_fp8_available(cls) -> tuple[bool, str]:
        return False, "phantom simulates Transformer Engine without FP8"

    @classmethod
    def is_mxfp8_available(cls) -> tuple[bool, str]:
        return False, "phantom simulates Transformer Engine without FP8"

    @classmethod
    def is_fp8_block_scaling_available(cls) -> tuple[bool, str]:
        return False, "phantom simulates Transformer Engine without FP8"


def check_fp8_enabled(enabled: bool) -> None:
    if enabled:
        from transformer_engine.pytorch.module.base import refuse

        refuse("FP8 execution is not simulated (its modules run in bf16/fp16); run without "
               "--fp8 / fp8_autocast(enabled=True)")


@contextlib.contextmanager
def fp8_autocast(enabled: bool = True, calibrating: bool = False, fp8_recipe: Any = None,
                 fp8_group: Any = None, _graph: bool = False) -> Iterator[None]:
    check_fp8_enabled(enabled or calibrating)
    yield


@contextlib.contextmanager
def autocast(enabled: bool = True, calibrating: bool = False, recipe: Any = None,
             amax_reduction_group: Any = None, _graph: bool = False) -> Iterator[None]:
    check_fp8_enabled(enabled or calibrating)
    yield


@contextlib.contextmanager
def fp8_model_init(enabled: bool = True, recipe: Any = None, **_: Any) -> Iterator[None]:
    check_fp8_enabled(enabled)
    yield


quantized_model_init = fp8_model_init
