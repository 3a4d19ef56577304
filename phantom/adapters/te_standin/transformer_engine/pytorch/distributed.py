"""transformer_engine/pytorch/distributed.py: the RNG tracker and activation checkpointing."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
import torch.utils.checkpoint


class CudaRNGStatesTracker:
    """Named CUDA RNG states, forked into for dropout in tensor-parallel regions (TE's
    tracker, the same contract as Megatron's own)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.states_: dict[str, torch.Tensor] = {}
        self.seeds_: set[int] = set()

    def get_states(self) -> dict[str, torch.Tensor]:
        return dict(self.states_)

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self.states_ = dict(states)

    def add(self, name: str, seed: int) -> None:
        if seed in self.seeds_:
            raise Exception(f"seed {seed} already exists")
        if name in self.states_:
            raise Exception(f"cuda rng state {name} already exists")
        self.seeds_.add(seed)
        saved = torch.cuda.get_rng_state()
        torch.cuda.manual_seed(seed)
        self.states_[name] = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(saved)

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
        if name not in self.states_:
            raise Exception(f"cuda rng state {name} is not added")
        saved = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.cuda.get_rng_state()
            torch.cuda.set_rng_state(saved)


def checkpoint(function: Callable, *args: Any, distribute_saved_activations: bool = False,
               get_rng_state_tracker: Callable | None = None, tp_group: Any = None,
               use_reentrant: bool = True, **kwargs: Any) -> Any:
    """Activation recompute: the forward runs without keeping its activations and runs again
    in the backward. TE's own implementation differs in bookkeeping (it can also shard the
    saved input across TP, `distribute_saved_activations`, not simulated: refused), not in
    the GPU work, which is the forward twice."""
    if distribute_saved_activations:
        from phantom.errors import SimulationError

        raise SimulationError("phantom: Transformer Engine's checkpoint(distribute_saved_"
                              "activations=True) is not simulated; turn it off "
                              "(Megatron: --distribute-saved-activations).")
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False, **kwargs)


def is_fp8_activation_recompute_enabled() -> bool:
    return False


def get_all_rng_states() -> dict:
    return {}


@contextlib.contextmanager
def activation_recompute_forward(activation_recompute: bool = False,
                                 recompute_phase: bool = False) -> Iterator[None]:
    """TE marks the forward of a recomputed region so its FP8 modules reuse their scaling
    factors; with FP8 off (always, here) it changes nothing."""
    yield
