"""Built-in axis sets: `phantom sweep --framework NAME -- <the usual command>` with no spec file.

Each set reads what the user's command fixes (the model, the global batch, the sequence
length) and varies what a layout search varies for that framework, keeping the global batch
fixed so that every point trains the same tokens per iteration:

- torchtitan: TP and PP degrees (FSDP takes the remaining ranks), activation checkpointing;
  the job's config is read with torchtitan's own ConfigManager.
- Megatron-Core (Megatron-LM's flags): TP (with sequence parallelism), PP, micro-batch size and
  recompute granularity.
- DeepSpeed: the ZeRO stage and the micro-batch size, edited into copies of the JSON config;
  gradient accumulation keeps the global batch.
"""
from __future__ import annotations

import logging
import warnings
from typing import Any

from phantom.sweep.spec import Parameter, SweepSpec, SweepSpecError

FRAMEWORKS = ("torchtitan", "megatron", "deepspeed")
DEGREES = (1, 2, 4, 8)


def arg_value(target: list[str], *flags: str) -> str | None:
    """The value the command gives the first of `flags` it has (`--f V` or `--f=V`)."""
    for flag in flags:
        for i, t in enumerate(target):
            if t == flag and i + 1 < len(target):
                return target[i + 1]
            if t.startswith(flag + "="):
                return t.split("=", 1)[1]
    return None


def _int_arg(target: list[str], default: int | None, *flags: str) -> int | None:
    text = arg_value(target, *flags)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise SweepSpecError(f"the command's {flags[0]} is {text!r}, not a whole number") from None


def apply(framework: str, spec: SweepSpec) -> None:
    """Add `framework`'s axes, derived parameters, constraints and metrics to `spec` (whose
    target, run options and cluster are resolved)."""
    {"torchtitan": _torchtitan, "megatron": _megatron, "deepspeed": _deepspeed}[framework](spec)


def _degrees(limit: int) -> list[int]:
    return [d for d in DEGREES if d <= limit]


# -- torchtitan ---------------------------------------------------------------------------------
def _torchtitan_job(target: list[str]) -> Any:
    """The job config the command describes, as torchtitan's trainer would parse it."""
    import os
    import sys

    from phantom import adapters

    if os.getcwd() not in sys.path:  # `--module` names a package here, as `python -m` finds it
        sys.path.insert(0, os.getcwd())
    adapters.install()  # torchtitan's modules import triton, which a CPU machine lacks
    from torchtitan.config import ConfigManager

    args = target[2:] if target[:2] == ["-m", "torchtitan.train"] else None
    if args is None:
        raise SweepSpecError("--framework torchtitan sweeps `-m torchtitan.train --module M "
                             "--config C [...]`; the command is " + " ".join(target[:3]))
    args = [a for a in args if not a.startswith("activation-checkpoint:")]
    logging.disable(logging.WARNING)  # torchtitan's and torchao's import-time notes, once per point later
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ConfigManager().parse_args(args)
    except (ValueError, ImportError) as e:
        raise SweepSpecError(f"torchtitan could not read the job's config: {e}") from None
    finally:
        logging.disable(logging.NOTSET)


def _torchtitan(spec: SweepSpec) -> None:
    job = _torchtitan_job(spec.target)
    world, node = spec.world_size, spec.nproc_per_node
    par, training = job.parallelism, job.training
    layers = len(getattr(job.model_spec.model, "layers", []) or []) or None
    fixed_dp = world // max(1, par.tensor_parallel_degree * par.pipeline_parallel_degree
                            * par.context_parallel_degree)
    batch = training.global_batch_size if training.global_batch_size > 0 \
        else training.local_batch_size * fixed_dp
    micro = training.local_batch_size
    cp = par.context_parallel_degree
    pp_values = [p for p in _degrees(world) if layers is None or layers % p == 0]
    spec.parameters += [
        Parameter("tp", values=[t for t in _degrees(node) if node % t == 0],
                  arg="--parallelism.tensor_parallel_degree"),
        Parameter("pp", values=pp_values[:3], arg="--parallelism.pipeline_parallel_degree"),
        Parameter("ac", values=["selective", "full", "none"], append="activation-checkpoint:{}"),
        Parameter("dp_shard", expr=f"world_size // (tp * pp * {cp})",
                  arg="--parallelism.data_parallel_shard_degree"),
        # A pipeline splits its local batch into micro-batches itself; without one, each rank
        # runs micro-batches of the job's size and accumulates gradients up to the global batch.
        Parameter("local_batch", expr=f"{batch} // dp_shard if pp > 1 else min({micro}, {batch} // dp_shard)",
                  arg="--training.local_batch_size"),
        Parameter("global_batch", expr=str(batch), arg="--training.global_batch_size"),
    ]
    spec.constraints += [f"world_size % (tp * pp * {cp}) == 0", f"{batch} % dp_shard == 0",
                         "local_batch >= 1", "global_batch % (local_batch * dp_shard) == 0"]
    spec.tokens_per_iteration = f"global_batch * {training.seq_len}"
    spec.mfu_pattern = r"mfu: *([\d.]+)%"
    spec.target = _with(spec.target, "--training.steps", str(min(training.steps, 3)))


# -- Megatron-Core ------------------------------------------------------------------------------
MEGATRON_TP = ("--tensor-model-parallel-size", "--tp")
MEGATRON_PP = ("--pipeline-model-parallel-size", "--pp")


def _megatron(spec: SweepSpec) -> None:
    target, world, node = spec.target, spec.world_size, spec.nproc_per_node
    tp0 = _int_arg(target, 1, *MEGATRON_TP)
    pp0 = _int_arg(target, 1, *MEGATRON_PP)
    micro = _int_arg(target, 1, "--micro-batch-size")
    cp = _int_arg(target, 1, "--context-parallel-size")
    batch = _int_arg(target, None, "--global-batch-size") or micro * (world // (tp0 * pp0 * cp))
    layers = _int_arg(target, None, "--num-layers")
    seq = _int_arg(target, None, "--seq-length")
    target = _without(target, MEGATRON_TP[1], MEGATRON_PP[1], "--sequence-parallel",
                      "--recompute-method", "--recompute-num-layers")
    spec.target = _with(target, "--global-batch-size", str(batch))
    spec.parameters += [
        Parameter("tp", values=[t for t in _degrees(node) if node % t == 0],
                  arg=MEGATRON_TP[0]),
        Parameter("pp", values=[p for p in _degrees(min(world, 4))
                                if layers is None or layers % p == 0], arg=MEGATRON_PP[0]),
        Parameter("micro_batch", values=sorted({1, 2, micro}), arg="--micro-batch-size"),
        Parameter("recompute", values=["none", "selective", "full"],
                  arg="--recompute-granularity", omit="none"),
        # full recompute needs a method and a layer count (Megatron's TransformerConfig checks)
        Parameter("recompute_method", expr="'uniform' if recompute == 'full' else 'none'",
                  arg="--recompute-method", omit="none"),
        Parameter("recompute_num_layers", expr="1 if recompute == 'full' else 0",
                  arg="--recompute-num-layers", omit=0),
        Parameter("sequence_parallel", expr="tp > 1", arg="--sequence-parallel"),
        Parameter("dp", expr=f"world_size // (tp * pp * {cp})"),
    ]
    spec.constraints += [f"world_size % (tp * pp * {cp}) == 0", f"{batch} % (micro_batch * dp) == 0"]
    if seq is not None:
        spec.tokens_per_iteration = f"{batch} * {seq}"
    spec.tflops_pattern = r"throughput per GPU \(TFLOP/s/GPU\): *([\d.]+)"


# -- DeepSpeed ----------------------------------------------------------------------------------
DEEPSPEED_CONFIG = ("--deepspeed_config", "--deepspeed-config", "--deepspeed")


def _deepspeed(spec: SweepSpec) -> None:
    import json
    from pathlib import Path

    target, world = spec.target, spec.world_size
    path = arg_value(target, *DEEPSPEED_CONFIG)
    if path is None or not path.endswith(".json"):
        raise SweepSpecError("--framework deepspeed varies the ZeRO stage in the JSON config the "
                             "command names: give it as --deepspeed_config FILE.json")
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SweepSpecError(f"the command's DeepSpeed config {path}: {e}") from None
    micro = _config_int(path, config, "train_micro_batch_size_per_gpu", 1)
    accum = _config_int(path, config, "gradient_accumulation_steps", 1)
    batch = _config_int(path, config, "train_batch_size", micro * accum * world)
    # the script's own overrides (examples/deepspeed/train.py) would win over the JSON's values
    spec.target = _without(target, "--micro-batch", "--grad-accum")
    spec.parameters += [
        Parameter("zero", values=[1, 2, 3], config=f"{path}:zero_optimization.stage"),
        Parameter("micro_batch", values=sorted({1, 2, 4, micro}),
                  config=f"{path}:train_micro_batch_size_per_gpu"),
        Parameter("grad_accum", expr=f"{batch} // (micro_batch * world_size)",
                  config=f"{path}:gradient_accumulation_steps"),
    ]
    if "train_batch_size" in config:
        spec.parameters.append(Parameter("train_batch", expr=str(batch),
                                         config=f"{path}:train_batch_size"))
    spec.constraints += [f"{batch} % (micro_batch * world_size) == 0"]
    seq = _int_arg(target, None, "--seq-len", "--seq-length", "--max-seq-length", "--max_seq_length")
    if seq is not None:
        spec.tokens_per_iteration = f"{batch} * {seq}"


def _config_int(path: str, config: dict, key: str, default: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SweepSpecError(f"{path}: {key} is {value!r}; the DeepSpeed set keeps the global "
                             f"batch fixed, so the config must give it as a number (not \"auto\")")
    return value


def _with(target: list[str], flag: str, value: str) -> list[str]:
    return _without(target, flag) + [flag, value]


def _without(target: list[str], *flags: str) -> list[str]:
    out, i = [], 0
    while i < len(target):
        t = target[i]
        if t in flags:
            takes = i + 1 < len(target) and not target[i + 1].startswith("-")
            i += 2 if takes else 1
            continue
        if not any(t.startswith(f + "=") for f in flags):
            out.append(t)
        i += 1
    return out
