"""TorchTitan 0.3.0 under simulation: `phantom run ... -m torchtitan.train <torchtitan flags>`.

torchtitan's trainer runs unchanged; these patches, applied by the import hook in
phantom/adapters/__init__.py only when torchtitan's modules are imported, fix the places
where it cannot run on a simulated GPU. Each names the torchtitan code it works around.

Simulation policy (docs/frameworks.md, "TorchTitan"):
- Attention: each training row is one document, so torchtitan's block-causal FlexAttention
  mask is the causal mask; the compiled FlexAttention kernel is timed as FlashAttention-2.
- MoE: experts are load-balanced (uniform routing); the expert-parallel all-to-all is sized
  by an analytic uniform dispatch instead of token counts read from simulated router logits.
- CUDA graphs (on by default in 0.3.0) capture collectives, which phantom does not simulate
  inside a graph: the step runs eagerly unless graphs are asked for explicitly, which is an
  error. `--compile.enable` is simulated as Inductor runs it (interception/compiled.py).
  Float8LinearConverter runs through torchao; the grouped-expert float8, MX and NVFP4
  converters, DeepEP/HybridEP/MinimalAsyncEP dispatchers and async TP are clear errors.
- Offline: missing tokenizer paths fall back to phantom's byte-level tokenizer, and the C4
  datasets to a tiny local dataset (assets/torchtitan/, see make_assets.py).

torch version compatibility: torchtitan 0.3.0 targets a newer torch than 2.11-2.13. The
`compat_*` patches (spmd backend default, `dist.set_timeout`, pre-split pipeline
microbatches) are needed on a real GPU with those versions too; `install_compat()` applies
only them (bench/suites/torchtitan.py real).
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensor

from phantom.errors import SimulationError

ASSETS = Path(__file__).resolve().parent / "assets" / "torchtitan"
TOKENIZER = ASSETS / "tokenizer"
DATASET = ASSETS / "c4_tiny"

# Patches a real (non-simulated) run on torch 2.11-2.13 needs too: module -> function here.
COMPAT_PATCHES = {
    "torchtitan": "compat_torchtitan",
    "torchtitan.models.common.attention": "compat_attention",
    "torchtitan.config.configs": "compat_configs",
    "torchtitan.distributed.utils": "compat_distributed_utils",
    "torchtitan.distributed.pipeline_parallel": "compat_pipeline_parallel",
}


def install_compat() -> None:
    """Apply only the torch-version patches (for a real run of torchtitan 0.3.0 on torch
    2.11-2.13: bench/suites/torchtitan.py real)."""
    from phantom import adapters

    adapters.install(patches={m: f"{__name__}:{f}" for m, f in COMPAT_PATCHES.items()},
                     around={})


def _warn(message: str) -> None:
    warnings.warn(f"phantom: {message}", stacklevel=3)


def _is_phantom_tensor(x: object) -> bool:
    return isinstance(x, FakeTensor) and x.device.type == "cuda"


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def _refuse_init(cls: type, why: str) -> None:
    def __init__(self, *args, **kwargs):
        raise SimulationError(f"phantom: {why} (docs/frameworks.md, 'TorchTitan').")

    cls.__init__ = __init__


# -- import-time: Triton ----------------------------------------------------------------------

class _Anything:
    """Stands for any attribute of the missing `triton` package at import time: callable,
    subscriptable, usable as a decorator and in annotations (`tl.constexpr`,
    `tl.pointer_type(tl.int64)`, `@triton.jit(do_not_specialize=[...])`)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> "_Anything":
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(f"{self._name}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:  # @triton.jit
            return _TritonKernel(args[0])
        return _Anything(f"{self._name}(...)")

    def __getitem__(self, item: Any) -> "_Anything":
        return self

    def __repr__(self) -> str:
        return f"<phantom stand-in for {self._name}>"


class _TritonKernel:
    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            raise NotImplementedError(
                f"phantom: torchtitan launched the Triton kernel {self.__name__}; Triton "
                "kernels are not simulated (this path needs a real GPU).")

        return launch


class _TritonModule(ModuleType):
    def __getattr__(self, name: str) -> _Anything:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(f"{self.__name__}.{name}")


@contextlib.contextmanager
def triton_stand_in() -> Iterator[None]:
    """torchtitan/distributed/minimal_async_ep/kernels.py (reached from every model through
    models/common/token_dispatcher.py) and torchtitan/overrides/fused_{swiglu,mla}.py
    `import triton` at module level to define @triton.jit kernels. A CPU-only torch has no
    Triton. While such a module executes, `triton` and `triton.language` are stand-ins
    whose kernels raise if launched (those paths need a real GPU); they are taken out of
    sys.modules again afterwards, so torch's own optional-Triton checks still see none."""
    if importlib.util.find_spec("triton") is not None or "triton" in sys.modules:
        yield
        return
    # torch caches its "is Triton installed" answer: make sure it is computed without us.
    from torch.utils._triton import has_triton_package

    has_triton_package()
    names = ("triton", "triton.language")
    for name in names:
        module = _TritonModule(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
    sys.modules["triton"].language = sys.modules["triton.language"]
    try:
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)


@contextlib.contextmanager
def quiet_module_compile() -> Iterator[None]:
    """torchtitan/models/common/attention.py compiles `flex_attention` and
    `create_block_mask` at import (class and module attributes). Both are replaced under
    simulation (`patch_attention`), so phantom's "torch.compile is not simulated" warning
    would be misleading there: while that module executes, torch.compile is a silent
    identity (as phantom's own torch.compile is, less the warning)."""
    patched = torch.compile

    def compile(model: Any = None, **kwargs: Any) -> Any:
        return (lambda fn: fn) if model is None else model

    torch.compile = compile
    try:
        yield
    finally:
        torch.compile = patched


# -- configuration and trainer ----------------------------------------------------------------

def patch_configs(module: ModuleType) -> None:
    """torchtitan/config/configs.py `TrainingConfig.disable_cuda_graphs` defaults to False:
    the trainer captures forward+backward in a CUDA graph (distributed/cudagraph.py) and
    replays it. That graph holds the step's FSDP/TP collectives, and phantom does not simulate
    collectives inside a captured graph (engine/graphs.py: a replay would have to meet its
    peers' replays at the coordinator), so under simulation the default becomes True: the step
    runs eagerly, with the same kernels and eager launch overhead on the host (documented
    fallback, docs/frameworks.md, "TorchTitan").
    Asking for graphs explicitly (`--training.no-disable-cuda-graphs`) is an error below."""
    defaults = module.TrainingConfig.__init__.__kwdefaults__
    defaults["disable_cuda_graphs"] = True
    compat_configs(module)

    # `parallelism.enable_fsdp_symm_mem` makes FSDP2 communicate through symmetric memory
    # (torch.distributed._symmetric_memory), which has no simulated counterpart; the
    # spmd_types and full_dtensor backends fail on torch < 2.14 (see compat_configs).
    original_post_init = module.ParallelismConfig.__post_init__

    def __post_init__(self):
        if self.enable_fsdp_symm_mem:
            raise SimulationError("phantom: --parallelism.enable_fsdp_symm_mem (symmetric-"
                                  "memory FSDP) is not simulated (docs/frameworks.md, 'TorchTitan').")
        if self.spmd_backend != "partial_dtensor" and _torch_version() < (2, 14):
            raise SimulationError(
                f"phantom: --parallelism.spmd_backend {self.spmd_backend} needs torch >= 2.14 "
                f"(FSDP2 over a full SPMD mesh); this is torch {torch.__version__}. Use "
                "partial_dtensor (the default under phantom) (docs/frameworks.md, 'TorchTitan').")
        original_post_init(self)

    module.ParallelismConfig.__post_init__ = __post_init__


def compat_configs(module: ModuleType) -> None:
    """torchtitan/config/configs.py `ParallelismConfig.spmd_backend` defaults to
    "spmd_types", whose FSDP path (models/llama3/parallelize.py -> fully_shard(...,
    dp_mesh_dims=...)) needs a newer torch: torch 2.11-2.13's fully_shard then requires
    every parameter to be a DTensor on the full mesh and fails ("When dp_mesh_dims is
    provided, all parameters must be DTensors"). "partial_dtensor" is torchtitan's classic
    path (DTensor for TP/CP only, FSDP2 on plain parameters) and works on these versions."""
    if _torch_version() < (2, 14):
        defaults = module.ParallelismConfig.__init__.__kwdefaults__
        defaults["spmd_backend"] = "partial_dtensor"


def patch_trainer(module: ModuleType) -> None:
    """torchtitan/trainer.py wraps the step with `wrap_with_cuda_graph` unless
    `training.disable_cuda_graphs`: a clear error instead of a failing graph capture."""

    def wrap_with_cuda_graph(fwd_bwd_fn):
        raise SimulationError(
            "phantom: torchtitan's CUDA graph capture (training.disable_cuda_graphs=False) "
            "is not simulated. Leave out --training.no-disable-cuda-graphs: under phantom "
            "the step runs eagerly by default (docs/frameworks.md, 'TorchTitan').")

    module.wrap_with_cuda_graph = wrap_with_cuda_graph


def patch_compile(module: ModuleType) -> None:
    """torchtitan/distributed/compile.py `apply_compile` (`--compile.enable`) compiles each
    transformer block, which phantom simulates as Inductor runs it (interception/compiled.py).
    Async TP (`--compile.enable_async_tensor_parallel`) needs symmetric memory and Inductor's
    micro-pipelined TP kernels, which it does not: a clear error."""
    original = module.apply_compile

    def apply_compile(model, *, compile_config, parallel_dims, **kwargs):
        if getattr(compile_config, "enable_async_tensor_parallel", False):
            raise SimulationError(
                "phantom: torchtitan's async tensor parallelism "
                "(--compile.enable_async_tensor_parallel) is not simulated (docs/frameworks.md, "
                "'TorchTitan').")
        return original(model, compile_config=compile_config, parallel_dims=parallel_dims,
                        **kwargs)

    module.apply_compile = apply_compile


def patch_quantization(module: ModuleType) -> None:
    """torchtitan/components/quantization: the converters swap Linear/GroupedExperts for
    torchao low-precision modules. Float8LinearConverter (torchao's Float8Linear: scaled
    float8 GEMMs fed by amax and casting kernels) is left to run as torchao runs it, its GEMMs
    timed from the measured float8 rows (tensorwise and rowwise) and its casts by the
    generated-kernel model (docs/float8.md). The grouped-experts float8 GEMMs, MXFP8
    and NVFP4 (the latter two need Blackwell) have no calibration: building one is a clear
    error."""
    for name in ("Float8GroupedExpertsConverter", "MXFP8LinearConverter",
                 "MXFP8GroupedExpertsConverter", "NVFP4LinearConverter"):
        cls = getattr(module, name, None)
        if cls is not None:
            _refuse_init(cls, f"torchtitan's {name} (grouped-expert float8, MX and NVFP4 "
                              "training) is not simulated; run the bf16 model, or "
                              "Float8LinearConverter for the dense layers")


# -- offline assets ----------------------------------------------------------------------------

def patch_tokenizer(module: ModuleType) -> None:
    """torchtitan/components/tokenizer.py `HuggingFaceTokenizer(tokenizer_path=
    config.hf_assets_path)` needs tokenizer files downloaded from the Hub
    (scripts/download_hf_assets.py); the shipped configs point at ./assets/hf/<model> or
    ./tests/assets/tokenizer. Under simulation only token ids below the model's vocabulary
    size matter, so a missing path falls back to phantom's offline byte-level tokenizer
    (phantom/adapters/assets/torchtitan/make_assets.py)."""
    cls = module.HuggingFaceTokenizer
    original_init = cls.__init__

    def __init__(self, config=None, *, tokenizer_path: str):
        if not os.path.exists(tokenizer_path):
            _warn(f"tokenizer path {tokenizer_path!r} does not exist; using phantom's offline "
                  f"tokenizer {TOKENIZER}")
            tokenizer_path = str(TOKENIZER)
        original_init(self, config, tokenizer_path=tokenizer_path)

    cls.__init__ = __init__


def patch_text_datasets(module: ModuleType) -> None:
    """torchtitan/hf_datasets/text_datasets.py `DATASETS`: "c4" and "c4_validation" stream
    allenai/c4 from the Hugging Face Hub and "c4_test" reads ./tests/assets/c4_test of a
    torchtitan checkout. Under simulation the text only sets host time (tokenising), so
    these load phantom's offline tiny dataset instead (same JSON "text" rows), unless
    `--dataloader.dataset_path` names a local one.

    `split_dataset_by_node` gives each data-parallel rank a contiguous shard; with more
    ranks than the tiny dataset has documents a shard would be empty and torchtitan's
    infinite loader would loop without yielding. Then every rank reads the whole dataset."""
    config_cls = type(module.DATASETS["c4_test"])

    def load_local(path: str):
        from datasets import load_dataset

        return load_dataset(path, split="train")

    for name in ("c4", "c4_validation", "c4_test"):
        entry = module.DATASETS.get(name)
        if entry is None or os.path.exists(entry.path):
            continue
        module.DATASETS[name] = config_cls(path=str(DATASET), loader=load_local,
                                           sample_processor=entry.sample_processor)

    original_split = module.split_dataset_by_node

    def split_dataset_by_node(dataset, rank: int, world_size: int):
        n = getattr(dataset, "num_rows", None)
        if isinstance(n, int) and n < world_size:
            return dataset
        return original_split(dataset, rank, world_size)

    module.split_dataset_by_node = split_dataset_by_node


# -- MoE: uniform expert load ------------------------------------------------------------------

def uniform_splits(rows: int, ranks: int, rank: int) -> tuple[list[int], list[int]]:
    """All-to-all splits of `rows` routed token copies over `ranks` expert-parallel ranks when
    every expert receives the same number of tokens: this rank sends rows/ranks to each rank
    and, every rank routing the same number of tokens, receives as much from each."""
    base, extra = divmod(rows, ranks)
    send = [base + (1 if r < extra else 0) for r in range(ranks)]
    receive = [base + (1 if rank < extra else 0)] * ranks
    return send, receive


def patch_token_dispatcher(module: ModuleType) -> None:
    """torchtitan/models/common/token_dispatcher.py, expert parallelism.

    Assumption (docs/frameworks.md, "TorchTitan"): experts are load-balanced, every expert receives the
    same number of tokens. The router runs as usual (its GEMM, softmax and top-k are timed),
    but its choices come from simulated logits with no values, so the per-expert token counts
    have none either. `AllToAllTokenDispatcher._sync_token_count_exchange` copies them to the
    host (`.tolist()`) to size the dispatch all-to-all; the copies stay (they are a real
    device-to-host sync), and the split lists they return are replaced by the uniform
    dispatch (`uniform_splits`). Without EP no count is read: the grouped GEMMs' per-expert
    sizes are already taken as uniform by phantom's cost model.

    DeepEP, HybridEP and MinimalAsyncEP need their own CUDA/Triton kernels and libraries:
    building one of those dispatchers under simulation is a clear error."""
    a2a = module.AllToAllTokenDispatcher
    original_dispatch = a2a.dispatch
    original_sync = a2a._sync_token_count_exchange

    def dispatch(self, x_TD, topk_scores_TK, topk_expert_ids_TK,
                 num_local_tokens_per_expert_E):
        self._phantom_routed_rows = topk_expert_ids_TK.numel()
        return original_dispatch(self, x_TD, topk_scores_TK, topk_expert_ids_TK,
                                 num_local_tokens_per_expert_E)

    def _sync_token_count_exchange(self, num_local_tokens_per_expert_E,
                                   num_global_tokens_per_local_expert_EP_e, ep_size):
        out = original_sync(self, num_local_tokens_per_expert_E,
                            num_global_tokens_per_local_expert_EP_e, ep_size)
        rows = getattr(self, "_phantom_routed_rows", None)
        if rows is None or not _is_phantom_tensor(num_local_tokens_per_expert_E):
            return out
        send, receive = uniform_splits(rows, ep_size, self.ep_mesh.get_local_rank())
        return out[0], send, receive

    a2a.dispatch = dispatch
    a2a._sync_token_count_exchange = _sync_token_count_exchange

    for name in ("DeepEPTokenDispatcher", "HybridEPTokenDispatcher",
                 "MinimalAsyncEPTokenDispatcher"):
        cls = getattr(module, name, None)
        if cls is not None:
            _refuse_init(cls, f"torchtitan's {name} (its own CUDA/Triton kernels) is not "
                              "simulated; use the default all-to-all dispatcher "
                              "(moe_comm_backend='standard')")


# -- torch version compatibility (needed on a real GPU as well: bench/suites/torchtitan.py real) --

def apply_torch_compat() -> None:
    """torch APIs torchtitan 0.3.0 uses that torch 2.11-2.13 lack, found by running it on
    2.13 and by checking its imports and `torch.*` references against torch 2.11's sources:

    - torchtitan/distributed/fsdp.py and full_dtensor.py import
      `torch.distributed.fsdp.DataParallelMeshDims` at module level (torch >= 2.12); it is
      only passed to fully_shard on the spmd_types/full_dtensor backends, so on older torch
      a stand-in class lets the modules import (the partial_dtensor backend never uses it).
    - torchtitan/distributed/utils.py `set_pg_timeouts` calls `torch.distributed.set_timeout`,
      which torch <= 2.13 only has as the private `_set_pg_timeout` (same signature).
    - models/common/token_dispatcher.py (expert parallelism) calls
      `torch.compiler._is_non_strict_tracing()` (torch >= 2.12): never tracing here."""
    import torch.distributed as dist

    if not hasattr(dist, "set_timeout"):
        from torch.distributed.distributed_c10d import _set_pg_timeout

        dist.set_timeout = _set_pg_timeout
    import torch.distributed.fsdp as fsdp

    if not hasattr(fsdp, "DataParallelMeshDims"):
        class DataParallelMeshDims:  # noqa: D401 - a name to import, never instantiated here
            """Stand-in for torch >= 2.12's fully_shard mesh-dimension spec."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise SimulationError("phantom: DataParallelMeshDims needs torch >= 2.12; "
                                      "use --parallelism.spmd_backend partial_dtensor")

        fsdp.DataParallelMeshDims = DataParallelMeshDims
    if not hasattr(torch.compiler, "_is_non_strict_tracing"):
        torch.compiler._is_non_strict_tracing = lambda: False


def compat_torchtitan(module: ModuleType) -> None:
    """The torchtitan package: runs before any of its submodules imports torch APIs."""
    apply_torch_compat()


def compat_attention(module: ModuleType) -> None:
    """torchtitan/models/common/decoder.py builds FlexAttention masks with
    `create_attention_mask(..., separate_full_blocks=True)`; torch 2.11's create_block_mask
    has no such argument (it always separates full blocks, the same mask). Dropped there."""
    from torch.nn.attention.flex_attention import create_block_mask

    if "separate_full_blocks" in inspect.signature(create_block_mask).parameters:
        return
    original = module.create_attention_mask

    def create_attention_mask(*args, separate_full_blocks=True, **kwargs):
        return original(*args, **kwargs)

    module.create_attention_mask = create_attention_mask


def compat_distributed_utils(module: ModuleType) -> None:
    apply_torch_compat()


def compat_pipeline_step() -> None:
    """torchtitan/trainer.py `pp_forward_backward_step` splits the batch into microbatches
    itself and calls `pp_schedule.step(arg_mbs=..., kwarg_mbs=..., target_mbs=...,
    losses=..., loss_kwargs=..., return_outputs=False)`, an API of a newer torch. torch
    2.11-2.13's `step(*args, target=..., **kwargs)` takes the whole batch and would treat
    those names as model kwargs ("Expecting 8 arg_mbs but got 1"). Pre-split microbatches
    are passed to the schedule's own `_step_microbatches`, with the per-step stage set-up
    `step` does first; torch 2.11's `_step_microbatches` has no `loss_kwargs` either, so
    there they are bound to the loss function for the step."""
    from torch.distributed.pipelining import schedules

    if "arg_mbs" in inspect.signature(schedules.PipelineScheduleSingle.step).parameters:
        return
    for cls in (schedules.PipelineScheduleSingle, schedules.PipelineScheduleMulti):
        if getattr(cls.step, "_phantom_compat", False):
            continue
        cls.step = _microbatch_step(cls.step)


def _microbatch_step(original):
    def step(self, *args, arg_mbs=None, kwarg_mbs=None, target_mbs=None, **kwargs):
        if arg_mbs is None and kwarg_mbs is None and target_mbs is None:
            return original(self, *args, **kwargs)
        losses = kwargs.pop("losses", None)
        return_outputs = kwargs.pop("return_outputs", True)
        loss_kwargs = kwargs.pop("loss_kwargs", None)
        stages = getattr(self, "_stages", None) or [self._stage]
        for stage in stages:
            stage.has_backward = self._has_backward
            stage.clear_runtime_states()
        if "loss_kwargs" in inspect.signature(self._step_microbatches).parameters:
            self._step_microbatches(arg_mbs, kwarg_mbs, target_mbs, losses, return_outputs,
                                    loss_kwargs=loss_kwargs)
        else:  # torch 2.11: no loss_kwargs; bind them to the loss function for this step
            loss_fn = self._loss_fn
            self._loss_fn = lambda output, target: loss_fn(output, target, **(loss_kwargs or {}))
            try:
                self._step_microbatches(arg_mbs, kwarg_mbs, target_mbs, losses, return_outputs)
            finally:
                self._loss_fn = loss_fn
        for stage in stages:
            if stage.is_last and return_outputs:
                return self._merge_outputs(stage.output_chunks)
        return None

    step._phantom_compat = True
    return step


def compat_pipeline_parallel(module: ModuleType) -> None:
    compat_pipeline_step()


# -- attention -----------------------------------------------------------------------------

def causal_block_mask(mask_mod, batch: int, seq_q: int, seq_kv: int, device,
                      block_size: int | tuple[int, int] = 128,
                      separate_full_blocks: bool = True):
    """The BlockMask `create_block_mask` builds for a causal mask, from its block structure:
    query block i has the diagonal block partial and blocks 0..i-1 full (with
    `separate_full_blocks`), or blocks 0..i all partial. A few small tensors instead of
    evaluating `mask_mod` over the whole B x S x S grid."""
    bq, bkv = (block_size, block_size) if isinstance(block_size, int) else block_size
    nq, nkv = -(-seq_q // bq), -(-seq_kv // bkv)
    rows = torch.arange(nq, device=device, dtype=torch.int32)
    cols = torch.arange(nkv, device=device, dtype=torch.int32)
    # kv block of the diagonal for each query block (bottom-right aligned if seq_kv > seq_q)
    diag = ((rows + 1) * bq + (seq_kv - seq_q) - 1) // bkv
    diag = diag.clamp(max=nkv - 1)
    if separate_full_blocks:
        kv_num = torch.ones(nq, device=device, dtype=torch.int32)
        kv_idx = torch.where(cols[None, :] == 0, diag[:, None], cols[None, :].expand(nq, nkv))
        full_num = diag
        full_idx = cols[None, :].expand(nq, nkv)
    else:
        kv_num = diag + 1
        kv_idx = cols[None, :].expand(nq, nkv)
        full_num = full_idx = None

    def expand(t):
        return None if t is None else t.reshape(1, 1, *t.shape).expand(batch, 1, *t.shape) \
            .contiguous()

    from torch.nn.attention.flex_attention import BlockMask

    return BlockMask.from_kv_blocks(expand(kv_num), expand(kv_idx), expand(full_num),
                                    expand(full_idx), BLOCK_SIZE=(bq, bkv), mask_mod=mask_mod,
                                    seq_lengths=(seq_q, seq_kv))


def flex_attention_as_flash(q, k, v, *, score_mod=None, block_mask=None, scale=None,
                            enable_gqa=False, return_aux=None, kernel_options=None):
    """FlexAttention's compiled kernel under simulation, timed as the fused causal kernel.

    Assumption (docs/frameworks.md, "TorchTitan"): every row holds one document, so torchtitan's
    block-causal (per-document) mask is the causal mask. The BlockMask's values are not
    known (they come from the data), so its sparsity cannot be read. The kernel is charged
    as FlashAttention-2 (`_scaled_dot_product_flash_attention`, GQA native), whose fitted
    H100 curve is close to compiled FlexAttention on Hopper (FlexAttention reaches about
    90% of FA2 forward and 85% backward, PyTorch's FlexAttention blog).

    With context parallelism torchtitan gives each rank S/cp queries and all-gathered keys
    (distributed/context_parallel/api.py); head-tail and PTRR load balancing give every rank
    1/cp of the causal work, S*S/(2cp) query-key pairs: charged as the same kernel over
    S/cp queries and the first S/2 keys without a mask."""
    sq, skv = q.shape[-2], k.shape[-2]
    if sq == skv:
        causal = True
    else:
        causal = False
        half = max(skv // 2, 1)
        k, v = k.narrow(-2, 0, half), v.narrow(-2, 0, half)
    from torch.nn.attention.flex_attention import AuxOutput

    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, causal, False, scale=scale)[:2]
    want_lse = return_aux is not None and getattr(return_aux, "lse", False)
    return out, AuxOutput(lse=lse if want_lse else None)


def patch_attention(module: ModuleType) -> None:
    compat_attention(module)
    _simulated_attention(module)


def _simulated_attention(module: ModuleType) -> None:
    """torchtitan/models/common/attention.py: the Llama3/Qwen3 attention is FlexAttention
    with a block-causal mask, both run through torch.compile on a real GPU.

    - `create_attention_mask` (compiled `create_block_mask`) evaluates the mask function
      over a B x S x S grid; eagerly on fake tensors that is ~S*S elements of simulated
      kernels and memory a real run does not spend. Replaced by `causal_block_mask`.
    - `FlexAttention._compiled_flex_attn` (torch.compile(flex_attention)) runs eagerly under
      phantom: flex's eager path materialises the S x S score matrix (time and memory of
      the unfused math). Replaced by `flex_attention_as_flash`."""
    original_mask = module.create_attention_mask
    original_flex = module.FlexAttention._compiled_flex_attn

    def create_attention_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None, BLOCK_SIZE=128,
                              separate_full_blocks=True, **kwargs):
        if device is None or torch.device(device).type != "cuda":
            return original_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=device,
                                 BLOCK_SIZE=BLOCK_SIZE,
                                 separate_full_blocks=separate_full_blocks, **kwargs)
        return causal_block_mask(mask_mod, B or 1, Q_LEN, KV_LEN, device, BLOCK_SIZE,
                                 separate_full_blocks)

    def compiled_flex_attn(q, k, v, **kwargs):
        if not _is_phantom_tensor(q):
            return original_flex(q, k, v, **kwargs)
        return flex_attention_as_flash(q, k, v, **kwargs)

    module.create_attention_mask = create_attention_mask
    module.FlexAttention._compiled_flex_attn = compiled_flex_attn
