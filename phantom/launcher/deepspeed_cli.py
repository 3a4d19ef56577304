"""`phantom deepspeed`: the `deepspeed` launcher's command line, mapped onto `phantom run`.

    deepspeed --num_gpus 8 --num_nodes 2 train.py --deepspeed_config ds.json
    phantom deepspeed --cluster h100-ib --num_gpus 8 --num_nodes 2 train.py --deepspeed_config ds.json

phantom's own `run` options (--gpu, --cluster, --report, ...) may come first; then the
launcher's (deepspeed/launcher/runner.py):

- `-H/--hostfile FILE`: the hosts (`name slots=N` lines); one simulated node per host, N ranks
  each (every host must have the same slots). `-i/--include` and `-e/--exclude` keep or drop
  whole hosts (`host1@host2`); per-GPU selections (`host:0,1`) are refused. Without a hostfile
  (DeepSpeed's default /job/hostfile is not read: no cluster is visible from here) the run is
  one node, or `--num_nodes` nodes of the simulated cluster.
- `--num_nodes N`, `--num_gpus/--num_accelerators N`: the first N hosts / N ranks per node.
- `--module`: run the target as a module; `--enable_each_rank_log DIR`: each rank's output to
  DIR (phantom's --log-dir).
- `--master_addr`, `--master_port`, `--node_rank`, `--launcher`, `--launcher_args`,
  `--ssh_port`, `--no_ssh_check`, `--force_multi`, `--save_pid`, `--bind_cores_to_rank`,
  `--bind_core_list`: accepted and ignored (they place real processes; phantom places its own).
- Like DeepSpeed's launcher, the script gets `--local_rank=<rank on its node>` appended to its
  arguments, unless `--no_local_rank` (phantom/adapters/deepspeed.py adds it when the script
  imports deepspeed, since every rank runs the same command line).
- `--no_python`, `--autotuning`, `--elastic_training`, `--min/max_elastic_nodes`: refused
  (no Python script to simulate / not simulated).
"""
from __future__ import annotations

import argparse
import os
from collections import OrderedDict

from phantom.config import LOCAL_RANK_ARG_ENV, flag_of, options_with_value

IGNORED_WITH_VALUE = ("--master_addr", "--master_port", "--node_rank", "--launcher", "--launcher_args",
                      "--ssh_port", "--bind_core_list", "--save_pid")
IGNORED_FLAGS = ("--no_ssh_check", "--force_multi", "--bind_cores_to_rank")
REFUSED = ("--no_python", "--autotuning", "--elastic_training", "--min_elastic_nodes",
           "--max_elastic_nodes")


class LauncherArgsError(ValueError):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="phantom deepspeed", add_help=False)
    p.add_argument("-H", "--hostfile")
    p.add_argument("-i", "--include", default="")
    p.add_argument("-e", "--exclude", default="")
    p.add_argument("--num_nodes", type=int, default=-1)
    p.add_argument("--num_gpus", "--num_accelerators", dest="num_gpus", type=int, default=-1)
    p.add_argument("--module", action="store_true")
    p.add_argument("--no_local_rank", action="store_true")
    p.add_argument("--enable_each_rank_log", default=None)
    for name in IGNORED_WITH_VALUE:
        p.add_argument(name)
    for name in IGNORED_FLAGS:
        p.add_argument(name, action="store_true")
    return p


def parse_hostfile(path: str) -> "OrderedDict[str, int]":
    """deepspeed/launcher/runner.py `fetch_hostfile`: `hostname slots=N` per line, # comments."""
    if not os.path.isfile(path):
        raise LauncherArgsError(f"hostfile not found: {path}")
    hosts: OrderedDict[str, int] = OrderedDict()
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].startswith("slots=") or not parts[1][6:].isdigit():
                raise LauncherArgsError(f"{path}:{lineno}: expected 'hostname slots=N', got {raw.strip()!r}")
            if parts[0] in hosts:
                raise LauncherArgsError(f"{path}:{lineno}: host {parts[0]!r} listed twice")
            hosts[parts[0]] = int(parts[1][6:])
    if not hosts:
        raise LauncherArgsError(f"{path}: no hosts")
    return hosts


def _select(hosts: "OrderedDict[str, int]", include: str, exclude: str) -> "OrderedDict[str, int]":
    if include and exclude:
        raise LauncherArgsError("--include and --exclude are mutually exclusive")
    spec = include or exclude
    if not spec:
        return hosts
    names = spec.split("@")
    if any(":" in n for n in names):
        raise LauncherArgsError(f"per-GPU selection ({spec!r}) is not simulated: select whole hosts, "
                                "or use --num_gpus")
    unknown = [n for n in names if n not in hosts]
    if unknown:
        raise LauncherArgsError(f"host(s) {unknown} not in the hostfile ({', '.join(hosts)})")
    keep = [h for h in hosts if (h in names) == bool(include)]
    return OrderedDict((h, hosts[h]) for h in keep)


def to_run_args(argv: list[str], run_options: set[str]) -> tuple[list[str], dict[str, str]]:
    """`phantom deepspeed` argv -> (`phantom run` argv, environment for the ranks).
    `run_options` are phantom run's options that take a value (they may come first)."""
    phantom_opts: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and not _is_launcher_opt(argv[i]):
        if argv[i] == "--":
            break
        take = 2 if argv[i] in run_options else 1
        phantom_opts += argv[i:i + take]
        i += take
    rest = argv[i:]
    for name in REFUSED:
        if any(a == name or a.startswith(name + "=") for a in _launcher_part(rest)):
            raise LauncherArgsError(f"deepspeed launcher option {name} is not simulated")
    launcher = _launcher_part(rest)
    args = _parser().parse_args(launcher)
    target = rest[len(launcher):]
    if target and target[0] == "--":
        target = target[1:]
    if not target:
        raise LauncherArgsError("no script given: phantom deepspeed [options] SCRIPT.py [ARGS...]")
    if any(a.startswith("-") for a in target[:1]):
        raise LauncherArgsError(f"unknown deepspeed launcher option {target[0]!r}")

    nnodes, nproc = None, None
    if args.hostfile:
        hosts = _select(parse_hostfile(args.hostfile), args.include, args.exclude)
        if args.num_nodes > 0:
            hosts = OrderedDict(list(hosts.items())[:args.num_nodes])
        slots = set(hosts.values())
        if len(slots) != 1:
            raise LauncherArgsError(f"hosts with different slot counts ({dict(hosts)}) are not simulated: "
                                    "every simulated node has the same GPUs")
        nnodes, nproc = len(hosts), slots.pop()
    elif args.include or args.exclude:
        raise LauncherArgsError("--include/--exclude need a --hostfile")
    elif args.num_nodes > 0:
        nnodes = args.num_nodes
    if args.num_gpus > 0:
        if nproc is not None and args.num_gpus > nproc:
            raise LauncherArgsError(f"--num_gpus {args.num_gpus} is more than the hostfile's {nproc} slots")
        nproc = args.num_gpus

    out = list(phantom_opts)
    if nnodes is not None:
        out += [flag_of("nnodes"), str(nnodes)]
    if nproc is not None:
        out += [flag_of("nproc_per_node"), str(nproc)]
    if args.enable_each_rank_log:
        out += [flag_of("log_dir"), args.enable_each_rank_log]
    out += [flag_of("module"), target[0], *target[1:]] if args.module else ["--", *target]
    env = {} if args.no_local_rank else {LOCAL_RANK_ARG_ENV: "1"}
    return out, env


_LAUNCHER_WITH_VALUE = options_with_value(_parser())
_LAUNCHER_OPTIONS = {s for a in _parser()._actions for s in a.option_strings} | set(REFUSED)


def _is_launcher_opt(arg: str) -> bool:
    return arg.split("=", 1)[0] in _LAUNCHER_OPTIONS


def _launcher_part(argv: list[str]) -> list[str]:
    """The leading launcher options (up to the script)."""
    i = 0
    while i < len(argv) and _is_launcher_opt(argv[i]):
        name = argv[i]
        i += 2 if name in _LAUNCHER_WITH_VALUE else 1
    return argv[:i]
