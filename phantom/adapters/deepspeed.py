"""DeepSpeed 0.19 under simulation: `phantom run --nproc-per-node N script.py --deepspeed_config ...`.

A DeepSpeed training script runs unchanged; these patches, applied by the import hook in
phantom/adapters/__init__.py only when DeepSpeed's modules are imported, fix the places where
DeepSpeed cannot run on a simulated GPU. Each names the DeepSpeed code it works around.

Simulation policy (docs/frameworks.md, "DeepSpeed"):
- Op builders: DeepSpeed compiles its CUDA extensions (FusedAdam, FusedLamb, ...) with nvcc
  when first used (`OpBuilder.load` -> `jit_load`). A CPU machine cannot build them, and a
  built kernel could not run on a fake tensor anyway. The fused optimizers are simulated
  instead, each launching the kernels the real extension launches:
  - FusedAdam's `multi_tensor_adam` is charged as the fused multi-tensor AdamW kernel
    (`aten._fused_adamw_` / `_fused_adam_`), the same memory-bound one-pass update over
    (grad, param, exp_avg, exp_avg_sq) chunks, priced from the measured torch fused-AdamW rows;
  - FusedLion's `multi_tensor_lion`: one memory-bound kernel per multi_tensor_apply launch
    (adapters/multi_tensor.py);
  - FusedLamb's `lamb`: its three kernels per parameter (`fused_lamb_module`).
  Any other CUDA op builder is a clear error naming the op, never a silent swap for a
  different optimizer.
- One phantom iteration per DeepSpeed engine step (`patch_engine`).
- The pipeline engine's shape messages between stages carry real values (`patch_pipe_engine`).
- `phantom deepspeed` (launcher arguments, phantom/launcher/deepspeed_cli.py) gets the
  launcher's `--local_rank=N` script argument (`patch_package`).
- A script started without ranks (no launcher environment) gets a clear error instead of
  DeepSpeed's MPI discovery (`patch_comm`).
"""
from __future__ import annotations

import os
import sys
import warnings
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from phantom.adapters.multi_tensor import StepCounters, multi_tensor_adam, multi_tensor_lion
from phantom.config import LOCAL_RANK_ARG_ENV
from phantom.errors import SimulationError
from phantom.interception.cuda_api import extension_kernel, node_call

# DeepSpeed op name (OpBuilder.NAME) -> factory of the simulated extension module.
SIMULATED_OPS: dict[str, str] = {"fused_adam": "fused_adam_module", "fused_lion": "fused_lion_module",
                                 "fused_lamb": "fused_lamb_module"}

# Host cost of one call into the extension on the node, beyond its kernel launches (each charged
# HOST_KERNEL_LAUNCH_NS): pybind's conversion of the arguments, the checks, the allocations.
# Measured on an H200 host by bench/kernels/deepspeed_optimizers.py (host rows; data in
# bench/kernels/results/deepspeed_optimizers_H200.json): `multi_tensor_lion` on lists of 1 / 64 / 512
# tensors took 9.28 / 37.7 / 243.6 us (1 / 2 / 11 launches): 4.9 us + 0.38 us a parameter (its
# three list entries) + the launches; one `lamb` call (three launches) 27.3 us.
LION_CALL_NS = 4_900.0
LION_CALL_PER_TENSOR_NS = 127.0  # per tensor of the three lists
LAMB_CALL_NS = 15_300.0
# FusedLamb's kernels (deepspeed/ops/csrc/lamb/fused_lamb_cuda_kernel.cu): at most 512 blocks of
# 512 threads, each reducing into one slot of two 512-element partial-sum buffers.
LAMB_THREADS = 512
LAMB_MAX_BLOCKS = 512
# Their arithmetic per element, far below what the bytes take: part 1 updates both moments and
# squares the parameter and the update, part 3 recomputes the update and applies it.
LAMB_PART1_FLOPS = 14.0
LAMB_PART3_FLOPS = 8.0


def _is_phantom_tensor(x: object) -> bool:
    return isinstance(x, FakeTensor) and x.device.type == "cuda"


def _warn(message: str) -> None:
    warnings.warn(f"phantom: {message}", stacklevel=3)


# -- simulated CUDA extensions ----------------------------------------------------------------

def fused_adam_module() -> Any:
    """DeepSpeed's FusedAdam extension (csrc/adam/multi_tensor_adam.cu, Apex's kernel)."""
    steps = StepCounters()

    def op(*args: Any, **kwargs: Any) -> None:
        multi_tensor_adam(*args, steps=steps, **kwargs)

    return SimpleNamespace(multi_tensor_adam=op, __name__="phantom_simulated_fused_adam")


def fused_lion_module() -> Any:
    """DeepSpeed's FusedLion extension (csrc/lion/multi_tensor_lion.cu)."""
    def call_ns(chunk_size: int, noop_flag: Any, tensor_lists: list, *args: Any) -> float:
        return LION_CALL_NS + LION_CALL_PER_TENSOR_NS * sum(len(lst) for lst in tensor_lists)

    op = node_call("deepspeed.multi_tensor_lion", call_ns)(multi_tensor_lion)
    return SimpleNamespace(multi_tensor_lion=op, __name__="phantom_simulated_fused_lion")


def lamb(p: torch.Tensor, p_copy: torch.Tensor, m: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
         lr: float, beta1: float, beta2: float, max_coeff: float, min_coeff: float, eps: float,
         grad_scale: float, step: int, mode: int, bias_correction: int, decay: float) -> torch.Tensor:
    """csrc/lamb/fused_lamb_cuda.cpp `lamb`: three kernels on one parameter.
    Part 1 reads the gradient, the parameter and both moments, writes the moments back and
    leaves each block's partial sums of |p|^2 and |update|^2; part 2 (one block) reduces them;
    part 3 reads the parameter and moments again and writes the parameter, and its fp16 copy
    where the gradients are fp16 (with fp32 ones the kernel passes no copy). Returns the trust
    ratio as a one-element device tensor, as the real op does."""
    _check_lamb_args(p, p_copy, m, v, g)
    acc_dtype = torch.float32 if g.dtype == torch.float16 else g.dtype
    partial_w = torch.empty(LAMB_THREADS, dtype=acc_dtype, device=p.device)
    partial_u = torch.empty(LAMB_THREADS, dtype=acc_dtype, device=p.device)
    coeff = torch.empty(1, dtype=acc_dtype, device=p.device)
    n, state, acc = p.numel(), p.element_size(), partial_w.element_size()  # p, m and v: one type
    copy = g.element_size() if g.dtype == torch.float16 and p_copy.numel() else 0
    blocks = min(LAMB_MAX_BLOCKS, -(-n // LAMB_THREADS))
    part1 = n * (g.element_size() + 5 * state) + 2 * blocks * acc
    part2 = 2 * LAMB_THREADS * acc + 2 * acc
    part3 = n * (4 * state + copy) + 2 * acc
    extension_kernel("lamb_cuda_kernel_part1", part1, LAMB_PART1_FLOPS * n, blocks)
    extension_kernel("lamb_cuda_kernel_part2", part2, 2 * LAMB_THREADS, 1)
    extension_kernel("lamb_cuda_kernel_part3", part3, LAMB_PART3_FLOPS * n, blocks)
    return coeff


def _check_lamb_args(p: torch.Tensor, p_copy: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
                     g: torch.Tensor) -> None:
    """The real op's asserts and type dispatch, as clear errors: equal sizes; fp16 gradients
    with fp32 state, or one floating type throughout (no bfloat16: AT_DISPATCH_FLOATING_TYPES)."""
    n = p.numel()
    if any(t.numel() != n for t in (m, v, g)) or p_copy.numel() not in (0, n):
        raise SimulationError(
            f"phantom: FusedLamb's lamb: sizes p {n}, m {m.numel()}, v {v.numel()}, g {g.numel()}, "
            f"p_copy {p_copy.numel()} (the CUDA op asserts they are equal, p_copy may be empty)")
    state = torch.float32 if g.dtype == torch.float16 else g.dtype
    if g.dtype not in (torch.float16, torch.float32, torch.float64) or \
            any(t.dtype != state for t in (p, m, v)):
        raise SimulationError(
            f"phantom: FusedLamb's lamb: gradient {g.dtype} with parameter {p.dtype}, moments "
            f"{m.dtype}/{v.dtype}; DeepSpeed's kernel takes fp16 gradients with fp32 state, or "
            "fp32 (fp64) throughout (no bfloat16)")


def fused_lamb_module() -> Any:
    """DeepSpeed's FusedLamb extension (csrc/lamb/fused_lamb_cuda.cpp)."""
    op = node_call("deepspeed.fused_lamb", LAMB_CALL_NS)(lamb)
    return SimpleNamespace(lamb=op, __name__="phantom_simulated_fused_lamb")


# -- patches -----------------------------------------------------------------------------------

def patch_op_builder(module: ModuleType) -> None:
    """deepspeed/ops/op_builder/builder.py `OpBuilder.load()` imports a prebuilt extension or
    JIT-compiles it with nvcc (`jit_load`). Under simulation there is no CUDA toolkit to build
    with and no GPU to run on: a simulated op comes back for the ops in SIMULATED_OPS, a clear
    error for any other CUDA op. CPU-only builders (e.g. CPUAdam for ZeRO-Offload) would need
    a real CPU kernel on fake GPU tensors' host copies: also an error."""
    cls = module.OpBuilder

    def load(self, verbose: bool = False):
        name = getattr(self, "name", None) or getattr(self, "NAME", "?")
        factory = SIMULATED_OPS.get(name)
        if factory is None:
            raise SimulationError(
                f"phantom: DeepSpeed op '{name}' ({type(self).__name__}) is a CUDA/C++ extension "
                f"that is not simulated; simulated ops: {', '.join(SIMULATED_OPS)} (docs/frameworks.md, "
                "'DeepSpeed').")
        loaded = cls._loaded_ops
        if name not in loaded:
            loaded[name] = globals()[factory]()
        return loaded[name]

    cls.load = load


def patch_comm(module: ModuleType) -> None:
    """deepspeed/comm/comm.py `init_distributed` falls back to `mpi_discovery` (mpi4py's
    COMM_WORLD) when the launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...) are missing,
    as in `phantom run script.py` without `--nproc-per-node`. A simulated run has no MPI job
    to discover, and without mpi4py the script would end in an ImportError deep inside
    DeepSpeed: say instead how to launch it."""
    def mpi_discovery(*args: Any, **kwargs: Any) -> None:
        raise SimulationError(
            "phantom: deepspeed.init_distributed() found no launcher environment (RANK, WORLD_SIZE, "
            "MASTER_ADDR, MASTER_PORT, LOCAL_RANK) and would look for an MPI job. Launch DeepSpeed "
            "scripts as ranks: `phantom run --nproc-per-node N script.py ...` or `phantom deepspeed "
            "--num_gpus N script.py ...` (N = 1 for one GPU).")

    module.mpi_discovery = mpi_discovery


def patch_package(module: ModuleType) -> None:
    """deepspeed/launcher/launch.py starts each rank as `python -u SCRIPT --local_rank=N ARGS`,
    and DeepSpeed scripts commonly read `args.local_rank` (torchrun instead sets only the
    LOCAL_RANK variable). `phantom deepspeed` (phantom/launcher/deepspeed_cli.py) runs every
    rank with one command line, so the argument is put in this rank's sys.argv, at the same
    place, when the script imports deepspeed (scripts import it before parsing arguments).
    Off with the launcher's --no_local_rank, and under plain `phantom run` (torchrun's
    behaviour)."""
    if os.environ.get(LOCAL_RANK_ARG_ENV) != "1" or "LOCAL_RANK" not in os.environ:
        return
    if any(a.startswith("--local_rank") for a in sys.argv[1:]):
        return
    sys.argv.insert(1, f"--local_rank={os.environ['LOCAL_RANK']}")


def patch_engine(module: ModuleType) -> None:
    """deepspeed/runtime/engine.py `DeepSpeedEngine._take_model_step` runs one optimizer step
    at a gradient-accumulation boundary. phantom marks an iteration at the end of each
    outermost torch optimizer step (interception/patches.py), but DeepSpeed's ZeRO optimizers
    are not torch.optim.Optimizer subclasses, and ZeRO-3 steps its inner FusedAdam once per
    parameter sub-group (`sub_group_size`): a 70B model on 16 ranks would count 5 iterations
    per step. Running phantom's own global optimizer-step hooks around `_take_model_step`
    makes it the outermost step, so each engine step marks exactly one iteration. Only
    phantom's (tagged `phantom_iteration_hook`): a script's own global hooks see the inner
    optimizer's steps alone, as on a GPU."""
    from torch.optim import optimizer as torch_optimizer

    engine = module.DeepSpeedEngine
    original = engine._take_model_step

    def phantoms(hooks: dict) -> list:
        return [h for h in list(hooks.values()) if getattr(h, "phantom_iteration_hook", False)]

    def _take_model_step(self, *args, **kwargs):
        inner = self.basic_optimizer if self.basic_optimizer is not None else self.optimizer
        for hook in phantoms(torch_optimizer._global_optimizer_pre_hooks):
            hook(inner, (), {})
        try:
            return original(self, *args, **kwargs)
        finally:
            for hook in phantoms(torch_optimizer._global_optimizer_post_hooks):
                hook(inner, (), {})

    engine._take_model_step = _take_model_step


def patch_pipe_engine(module: ModuleType) -> None:
    """deepspeed/runtime/pipe/engine.py `PipelineEngine._send_tensor_meta` /
    `_recv_tensor_meta`: before the first activation (and gradient) transfer, stages send each
    other the shapes and dtypes as a 256-element int32 GPU tensor, written with a slice
    `copy_` into a `torch.empty` buffer and read back with `.item()`/`.tolist()` on slices.
    phantom carries real values through a collective only for tensors whose values it knows as
    a whole (a CPU tensor copied to the GPU), and a slice write into an uninitialised buffer is
    not one. The same message (one 256 x int32 send/recv pair) is built from a whole CPU
    tensor and received into a known buffer, read back with one `.tolist()`; the parsing is
    DeepSpeed's. Values of real shapes, never data: no placeholder can leak into a shape."""
    engine = module.PipelineEngine
    size = module.TENSOR_META_SIZE
    p2p = module.p2p

    def meta_list(self, buffer) -> list[int]:
        if isinstance(buffer, torch.Tensor):
            return [0, self.DTYPE_TO_ID[buffer.dtype], len(buffer.size()), *buffer.size()]
        if isinstance(buffer, tuple):
            out = [2, len(buffer)]
            for t in buffer:
                out += [self.DTYPE_TO_ID[t.dtype], len(t.size()), *t.size()]
            return out
        raise NotImplementedError(f"Could not send meta type {type(buffer)}")

    def _send_tensor_meta(self, buffer, recv_stage):
        values = meta_list(self, buffer)
        assert len(values) <= size, f"Buffer for metadata is too small: {size} < {len(values)}"
        meta = torch.tensor(values + [0] * (size - len(values)), dtype=torch.int32).to(self.device)
        p2p.send(meta, recv_stage)

    def _recv_tensor_meta(self, send_stage):
        buffer = torch.zeros(size, dtype=torch.int32).to(self.device)
        p2p.recv(buffer, send_stage)
        meta = buffer.tolist()
        if meta[0] == 0:
            ndims = meta[2]
            return self._allocate_or_extend_buffers(0, meta[3:3 + ndims], self.ID_TO_DTYPE[meta[1]])
        if meta[0] in (1, 2):
            buffers, offset = [], 2
            for idx in range(meta[1]):
                dtype, ndims = self.ID_TO_DTYPE[meta[offset]], meta[offset + 1]
                shape = meta[offset + 2:offset + 2 + ndims]
                offset += 2 + ndims
                buffers.append(self._allocate_or_extend_buffers(idx, shape, dtype))
            return tuple(buffers) if meta[0] == 2 else buffers
        raise SimulationError(f"phantom: DeepSpeed pipeline metadata of unknown type {meta[0]} "
                              "(the sending stage's values did not arrive)")

    engine._send_tensor_meta = _send_tensor_meta
    engine._recv_tensor_meta = _recv_tensor_meta
