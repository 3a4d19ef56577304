"""`phantom run`'s command line: from argv to the RunConfig the launcher starts.

The options are declared once, as fields of RunConfig (phantom/config.py); this module builds
the parser from them, checks their values and resolves the defaults that depend on other
options (`resolve_defaults`). `phantom run`, `phantom deepspeed` and `phantom profile` parse
with it.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
import os
import re
import sys

from phantom.config import (AUTO_RANKS_ABOVE, RunConfig, add_options, default_text, field_docs,
                            flag_of, option_fields, options_with_value)
from phantom.hardware.gpus import UnknownGPUError, get_gpu, list_gpus


class UsageError(Exception):
    pass


def run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="phantom run",
        description="Run a PyTorch script as if on the chosen GPU; its own logs print "
                    "simulated times and memory.",
        usage="phantom run [options] [--] SCRIPT.py [ARGS...]\n"
              "       phantom run [options] -m MODULE [ARGS...]",
    )
    add_options(p)
    return p


def options_markdown() -> str:
    """`phantom run`'s options as the Markdown table of docs/configuration.md (tests/test_cli.py
    checks that the committed table is this one)."""
    docs = field_docs()
    by_flag = {f.metadata["flag"]: f for f in option_fields()}
    rows = ["| option | default | what it does |", "|---|---|---|"]
    for action in run_parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue
        f = by_flag[action.option_strings[0]]
        usage = action.option_strings[0]
        if action.choices:
            usage += " {" + ",".join(action.choices) + "}"
        elif action.nargs != 0:
            usage += f" {action.metavar or action.dest.upper()}"
        cells = [f"`{usage}`", default_text(f) or "", docs[f.name]]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


# The first argument that is neither one of phantom's options nor the value of one starts the
# script's command line.
RUN_OPTIONS_WITH_VALUE = options_with_value(run_parser())


def _split_target(argv: list[str]) -> tuple[list[str], list[str]]:
    """Options before the script belong to phantom; the script and what follows to the script."""
    options: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return options, argv[i + 1:]
        if arg in RUN_OPTIONS_WITH_VALUE:
            options += argv[i:i + 2]
            if arg == "-m":
                return options, argv[i + 2:]
            i += 2
            continue
        if arg.startswith("-"):
            options.append(arg)
            i += 1
            continue
        return options, argv[i:]
    return options, []


def _check_power_limit(watts: float, gpu_name: str) -> None:
    if not (math.isfinite(watts) and 100 <= watts <= 2000):
        raise UsageError(f"--power-limit must be a power in W between 100 and 2000, got {watts:g}")
    gpu = get_gpu(gpu_name)
    if gpu.power is None:
        raise UsageError(f"--power-limit: the power draw of {gpu.name} was never measured, so its limit "
                         f"is not modelled (modelled: "
                         f"{', '.join(g.name for g in list_gpus() if g.power is not None)})")


def _check_values(given: dict) -> None:
    """The given options' values that argparse's types and choices do not check."""
    if "gpu" in given:
        try:
            get_gpu(given["gpu"])
        except UnknownGPUError as e:
            # a path is the likeliest slip: GPUs are presets, described in no file
            hint = "; --gpu takes a preset's name, not a file" if os.path.exists(given["gpu"]) else ""
            raise UsageError(f"--gpu: {e}{hint}") from None
    vram = given.get("vram_gib")
    if vram is not None and not (0 < vram <= 4096):
        raise UsageError(f"--vram-gib must be a positive number of GiB (at most 4096), got {vram:g}")
    mode, profile = given.get("host_time", "measured"), given.get("host_profile")
    if mode == "counted" and profile is None:
        raise UsageError("--host-time counted charges the script's Python from a saved profile: "
                         "give --host-profile DIR (save one with --host-time measured "
                         "--save-host-profile DIR)")
    if profile is not None and mode != "counted":
        raise UsageError("--host-profile is read only with --host-time counted")
    if profile is not None and not Path(profile).is_dir():
        raise UsageError(f"--host-profile {profile}: no such directory")
    if given.get("save_host_profile") is not None and mode != "measured":
        raise UsageError("--save-host-profile saves what a --host-time measured run measures")
    spread = given.get("rank_spread")
    if spread is not None and not (math.isfinite(spread) and 0 <= spread <= 1):
        raise UsageError(f"--rank-spread must be a number from 0 to 1, got {spread:g}")


def parse_run_args(argv: list[str]) -> RunConfig:
    options, target = _split_target(argv)
    given = {name: value for name, value in vars(run_parser().parse_args(options)).items()
             if value is not None}
    # Text here; the config holds them parsed, once the run's size is known (_configure_outputs).
    trace_ranks, trace_iters = given.pop("trace_ranks", None), given.pop("trace_iters", None)
    _check_values(given)
    config = RunConfig(**given)
    resolve_defaults(config, given)
    if config.power_limit_w is not None:
        _check_power_limit(config.power_limit_w, config.gpu)
    config.db_paths = _check_dbs(config.db_paths, get_gpu(config.gpu).name)
    _configure_outputs(config, trace_ranks, trace_iters)
    _configure_target(config, target)
    return config


def resolve_defaults(config: RunConfig, given: dict) -> None:
    """Set the options that were not given and whose default depends on the others (`given`:
    the options given, by field name), in this order:

    - --nproc-per-node, --nnodes or --cluster make the run distributed; the cluster (the preset
      or TOML file of --cluster, else one node with NVLink) resolves the ranks per node, the
      nodes, and without --gpu the GPU;
    - --ray-address implies --executor ray;
    - --ranks: `all` up to AUTO_RANKS_ABOVE ranks, `auto` above.
    Each step fails with a UsageError on input it cannot use, so that bad input fails before
    launch."""
    if given.keys() & {"nnodes", "nproc_per_node", "cluster"}:
        _resolve_cluster(config, given)
    if config.ray_address:
        config.executor = "ray"
    if config.executor == "ray":
        if not config.distributed:
            raise UsageError("--executor ray needs a distributed run (--nproc-per-node, "
                             "--nnodes or --cluster)")
        try:
            import ray  # noqa: F401
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install 'phantom-sim[ray]'") from None
    _resolve_ranks(config, given.get("ranks"))


def _resolve_cluster(config: RunConfig, given: dict) -> None:
    from phantom.network import ClusterConfigError, load_cluster

    for name in ("nnodes", "nproc_per_node"):
        if given.get(name, 1) < 1:
            raise UsageError(f"{flag_of(name)} must be >= 1, got {given[name]}")
    try:
        cluster = load_cluster(config.cluster, nnodes=given.get("nnodes"),
                               nproc_per_node=given.get("nproc_per_node"), gpu=given.get("gpu"))
    except ClusterConfigError as e:
        raise UsageError(str(e)) from None
    config.distributed = True
    config.nnodes = cluster.nodes
    config.nproc_per_node = cluster.gpus_per_node
    config.gpu = cluster.gpu


def _resolve_ranks(config: RunConfig, spec: str | None) -> None:
    """--ranks: which ranks run as processes (phantom.distributed.ranks)."""
    from phantom.distributed.ranks import parse_ranks

    if spec is None:
        spec = "auto" if config.world_size > AUTO_RANKS_ABOVE else "all"
        cores = os.cpu_count() or 1
        # Only measured host time reads the CPU time the ranks share the cores for.
        if spec == "all" and config.world_size > cores and config.executor == "local" \
                and config.host_time == "measured" and not config.quiet:
            print(f"phantom: {config.world_size} rank processes on {cores} CPU cores: each "
                  "rank's measured host time carries this machine's contention; "
                  "`--ranks auto` runs one process per class of equivalent ranks.",
                  file=sys.stderr)
    elif not config.distributed:
        raise UsageError("--ranks needs a distributed run (--nproc-per-node, --nnodes or --cluster)")
    try:
        ranks = parse_ranks(spec, config.world_size)
    except ValueError as e:
        raise UsageError(str(e)) from None
    config.ranks = "auto" if ranks is None else ",".join(map(str, ranks))
    if ranks is not None and 0 not in ranks:
        raise UsageError("--ranks: rank 0 must run (it prints the script's output)")


def _configure_target(config: RunConfig, target: list[str]) -> None:
    """The script (or -m's module) and its arguments."""
    if config.module:
        config.args = target
    elif not target:
        raise UsageError("no script given: phantom run [options] [--] SCRIPT.py [ARGS...]")
    else:
        script = target[0]
        if not os.path.isfile(script):
            if re.fullmatch(r"python[\d.]*", os.path.basename(script)) and len(target) > 1:
                # `phantom run -- python train.py` is the commonest slip: torchrun takes the
                # script itself.
                rest = " ".join(target[1:])
                fixed = (f"phantom run [options] {rest}" if target[1] == "-m"
                         else f"phantom run [options] -- {rest}")
                raise UsageError(f"phantom run takes the script itself, as torchrun does: drop "
                                 f"'{script}' and run `{fixed}`")
            raise UsageError(f"script not found: {script}")
        config.script, config.args = script, target[1:]
    if config.report_path:
        report_dir = os.path.dirname(os.path.abspath(config.report_path))
        if not os.path.isdir(report_dir):
            raise UsageError(f"--report: directory does not exist: {report_dir}")


def parse_ranks(text: str) -> list[int]:
    """'0,2-3' -> [0, 2, 3]."""
    ranks: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                a, b = part.split("-", 1)
                if int(b) < int(a):
                    raise ValueError
                ranks.update(range(int(a), int(b) + 1))
            elif part:
                ranks.add(int(part))
    except ValueError:
        raise UsageError(f"--trace-ranks: expected ranks like 0,2-3, got {text!r}") from None
    if not ranks or min(ranks) < 0:
        raise UsageError(f"--trace-ranks: expected ranks like 0,2-3, got {text!r}")
    return sorted(ranks)


def parse_iters(text: str) -> list:
    """'N' -> [N, N+1]; 'A:B' -> [A, B]; 'A:' -> [A, None]; ':B' -> [0, B]."""
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            start, stop = int(a) if a.strip() else 0, int(b) if b.strip() else None
        else:
            start = int(text)
            stop = start + 1
    except ValueError:
        raise UsageError(f"--trace-iters: expected N, A:B or A:, got {text!r}") from None
    if start < 0 or (stop is not None and stop <= start):
        raise UsageError(f"--trace-iters: expected a non-empty range of iterations from 0, got {text!r}")
    return [start, stop]


def _configure_outputs(config: RunConfig, trace_ranks: str | None, trace_iters: str | None) -> None:
    """--out / --trace and the trace limits; the run directory is made at launch."""
    if (trace_ranks or trace_iters) and not (config.out_dir or config.trace_path):
        raise UsageError("--trace-ranks and --trace-iters limit a trace: add --trace PATH or --out DIR")
    if config.trace_path:
        parent = os.path.dirname(os.path.abspath(config.trace_path))
        if not os.path.isdir(parent):
            raise UsageError(f"--trace: directory does not exist: {parent}")
        config.trace_path = os.path.abspath(config.trace_path)
    if config.out_dir:
        if os.path.exists(config.out_dir) and not os.path.isdir(config.out_dir):
            raise UsageError(f"--out: not a directory: {config.out_dir}")
        config.out_dir = os.path.abspath(config.out_dir)
    if trace_ranks:
        config.trace_ranks = parse_ranks(trace_ranks)
        bad = [r for r in config.trace_ranks if r >= config.world_size]
        if bad:
            raise UsageError(f"--trace-ranks: rank(s) {bad} outside the run's 0..{config.world_size - 1}")
    if trace_iters:
        config.trace_iters = parse_iters(trace_iters)


def _check_dbs(paths: list[str], gpu: str) -> list[str]:
    """Fail before launch on a --db file that is missing, malformed or for another GPU."""
    if not paths:
        return []  # importing phantom.cost imports torch: 2-3 s the launcher need not spend
    from phantom.cost.db import KernelDBError, load_db

    for path in paths:
        try:
            db = load_db(path)
        except KernelDBError as e:
            raise UsageError(f"--db: {e}") from None
        if db.gpu != gpu:
            raise UsageError(f"--db: {path}: header.gpu is {db.gpu!r}, expected {gpu!r} (the --gpu "
                             f"simulated); measure that GPU with `phantom profile`")
    return [os.path.abspath(p) for p in paths]
