"""One fused kernel for the pointwise ops of a `torch.compile`d function.

On a GPU, Inductor compiles a function's chain of pointwise ops, reductions, casts and
concatenations into Triton kernels that read each input from memory once, keep the
intermediates in registers and write only what leaves the function: Megatron's `jit_fuser`
functions (bias + SwiGLU and its hand-written backward, bias + GeLU, bias-dropout-add) each run
as one kernel (`triton_poi_fused_add_cat_mul_rsub_sigmoid_silu_split_0` in a real Mixtral step's
profile). phantom has no Inductor: the function runs eagerly on fake tensors, and this class adds
up what its ops read from outside and write back, so the simulation can charge one memory-bound
kernel for them (`sim.fusion.Fusion.begin_region`). GEMMs, attention and collectives inside the
function stay separate kernels (Inductor calls cuBLAS and friends for them too) and split the
pointwise chain around them.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves

# Op classes Inductor generates code for and fuses with their neighbours.
FUSABLE_CLASSES = frozenset({"elementwise", "copy", "reduction", "norm", "softmax", "random"})


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _storage_key(t: torch.Tensor) -> int:
    return id(t.untyped_storage())


class FusedKernel:
    """Bytes and FLOPs of a run of fusable ops, from what it reads that was made before it and
    what of its own outlives it (`nbytes`).

    Each tensor the run makes remembers the earlier tensors (views) it was computed from. A
    generated kernel loads, for each tensor it writes, those inputs once, and for a `cat`, once
    per part: Inductor writes each part from its own expression, so an input two parts need is
    read twice (a real SwiGLU backward, `cat` of two products of the same inputs, reads ~410 MB
    where its distinct inputs and output hold 293 MB)."""

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id
        self.ops: list[str] = []
        self.flops = 0.0
        self.single_cost: Any = None  # the one op's own cost, when the run holds just one
        self._bytes: dict[tuple, int] = {}  # earlier views read, with their sizes
        self._deps: dict[int, frozenset] = {}  # storage made here -> earlier views it needs
        self._parts: dict[int, list[frozenset]] = {}  # storage made by a cat -> its parts' deps
        self._made: dict[int, torch.Tensor] = {}  # storages made here (kept alive: ids stay unique)
        self._in_place: dict[tuple, frozenset] = {}  # earlier views written in place -> deps

    def add(self, name: str, args: tuple, kwargs: dict, out: Any, cost: Any) -> None:
        self.ops.append(name)
        self.flops += cost.flops
        self.single_cost = cost if len(self.ops) == 1 else None
        outputs = list(_tensors(out))
        out_storages = {_storage_key(t) for t in outputs}
        deps: set[tuple] = set()
        for t in _tensors((args, kwargs)):
            deps |= self._needs(t)
        for t in _tensors((args, kwargs)):
            key = _storage_key(t)
            if key in out_storages and key not in self._made:  # an earlier tensor updated in place
                self._in_place[self._view(t)] = frozenset(deps)
        for t in outputs:
            key = _storage_key(t)
            if key in self._made or self._view(t) not in self._in_place:
                self._made[key] = t
                self._deps[key] = frozenset(deps)
        if name.startswith("cat") and args and isinstance(args[0], (list, tuple)) and outputs:
            self._parts[_storage_key(outputs[0])] = [frozenset(self._needs(t)) for t in args[0]]

    def nbytes(self, leaving: Any) -> float:
        """Bytes the kernel moves: the earlier views each tensor it writes needs, and those
        tensors: the ones `leaving` (what the function returns) holds, and in-place updates of
        earlier ones. `leaving` None (a GEMM or the like ends the run midway, or it raised):
        everything the run made is written."""
        pieces: list[frozenset] = list(self._in_place.values())
        written = float(sum(self._bytes[v] for v in self._in_place))
        if leaving is None:
            kept = list(self._made.values())
        else:
            kept = [t for t in _tensors(leaving) if _storage_key(t) in self._made]
        seen: set[tuple] = set()
        for t in kept:
            view = self._view(t)
            if view in seen:
                continue
            seen.add(view)
            written += _nbytes(t)
            key = _storage_key(t)
            pieces += self._parts.get(key, [self._deps[key]])
        return written + sum(self._bytes[v] for piece in pieces for v in piece)

    def _needs(self, t: torch.Tensor) -> set[tuple]:
        key = _storage_key(t)
        if key in self._made:
            return set(self._deps[key])
        view = self._view(t)
        self._bytes.setdefault(view, _nbytes(t))
        return {view}

    @staticmethod
    def _view(t: torch.Tensor) -> tuple:
        return (_storage_key(t), t.storage_offset(), tuple(t.shape), t.dtype)
