"""The `phantom` command: `phantom run`, `phantom gpus`, `phantom clusters`."""
from __future__ import annotations

import argparse
import math
import os
import re
import sys

from phantom.hardware.gpus import UnknownGPUError, get_gpu, list_gpus
from phantom.launcher import RunConfig, launch


class UsageError(Exception):
    pass


# Above this many ranks, `phantom run` runs one process per class of equivalent ranks.
AUTO_RANKS_ABOVE = 8
HOST_PACES = ("auto", "probe", "process")  # --host-pace (launcher.launch.pace_mode)
HOST_PACE_ENV = "PHANTOM_HOST_PACE"  # its default where the option is not given


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="phantom run",
        description="Run a PyTorch script as if on the chosen GPU; its own logs print "
                    "simulated times and memory.",
        usage="phantom run [options] [--] SCRIPT.py [ARGS...]\n"
              "       phantom run [options] -m MODULE [ARGS...]",
    )
    p.add_argument("--gpu", default=None,
                   help="GPU preset (see `phantom gpus`); default: the cluster's GPU, else H100")
    p.add_argument("--vram-gib", type=float, default=None,
                   help="override the GPU's memory size in GiB (e.g. to test an OOM)")
    p.add_argument("--power-limit", type=float, default=None, metavar="WATTS",
                   help="the GPUs' power limit in W (default: the preset's, e.g. 700 for H100); "
                        "modelled for Hopper GPUs, whose draw was measured")
    p.add_argument("--report", metavar="PATH", help="write the run report as JSON to PATH")
    p.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")
    p.add_argument("--on-data-read", choices=("placeholder", "error"), default="placeholder",
                   help="what reading a CUDA tensor's value does (default: placeholder value)")
    p.add_argument("--nproc-per-node", type=int, default=None,
                   help="ranks (GPUs) per node, as torchrun; default: the cluster's, else 1")
    p.add_argument("--nnodes", type=int, default=None,
                   help="number of nodes, as torchrun; default: the cluster's, else 1")
    p.add_argument("--cluster", metavar="PRESET|FILE.toml", default=None,
                   help="the simulated cluster (see `phantom clusters`; docs/clusters.md); "
                        "default: one node with NVLink")
    p.add_argument("--tee", choices=("0", "all"), default="0",
                   help="whose output to show: rank 0's (default) or every rank's, prefixed")
    p.add_argument("--log-dir", metavar="DIR", default=None,
                   help="also write each rank's output to DIR/rank<N>.log")
    p.add_argument("--ranks", default=None, metavar="auto|all|R,R,...",
                   help="which ranks run as processes: 'all', 'auto' (one per class of "
                        "equivalent ranks, e.g. one per pipeline stage; the others copy it), "
                        f"or a list such as 0,8,16; default: all up to {AUTO_RANKS_ABOVE} "
                        "ranks, auto above")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where rank processes run: this machine (default) or a Ray cluster")
    p.add_argument("--ray-address", metavar="ADDR", default=None,
                   help="with --executor ray: the cluster to join (as ray.init(address=...)); "
                        "default: RAY_ADDRESS, or a local Ray instance started for the run")
    p.add_argument("--host-speed", type=float, default=None,
                   help="how many times as fast as the simulated node's host CPU this machine "
                        "runs the script's Python and PyTorch host code (default: measured at "
                        "start-up against the GPU preset's host)")
    p.add_argument("--host-gaps", choices=("steady", "measured"), default="steady",
                   help="steady (default): from the second iteration on, the script's host time "
                        "between two ops is the mean of that point of the last few iterations; "
                        "measured: every gap as measured on this machine (README, host time policy)")
    p.add_argument("--host-pace", choices=HOST_PACES, default=None,
                   help="how this machine's speed now is read, to convert measured host time: "
                        "process: the reference CPU step timed by a process beside the ranks, "
                        "which also follows slow states of PyTorch's own code; probe: a "
                        "pure-Python probe in each rank; auto (default): the process where this "
                        "machine has a CPU more than the run's rank processes, else the probe "
                        f"(README, host time policy); the default can be set with {HOST_PACE_ENV}")
    p.add_argument("--rank-spread", type=float, default=None, metavar="SIGMA",
                   help="how far apart the ranks of a multi-GPU run go on the host (sigma of a "
                        "lognormal host time; default: the GPU preset's, measured on real "
                        "2-GPU hosts): every rank's host time is charged at the pace of the "
                        "slowest of its node's ranks. 0: at a typical rank's pace")
    p.add_argument("--transformer-engine", choices=("off", "simulated"), default="off",
                   help="off (default): the script runs as on a GPU machine without NVIDIA "
                        "Transformer Engine; simulated: phantom's simulated TE is importable "
                        "(Megatron's TE layer spec, TE's FusedAdam; bf16, no FP8; README "
                        "'Megatron-Core')")
    p.add_argument("--no-db", action="store_true",
                   help="leave out the shipped kernel database: fallback (roofline) times only, "
                        "plus any --db")
    p.add_argument("--db", metavar="PATH", action="append", default=[],
                   help="a kernel database (phantom profile) to use besides the shipped one for "
                        "the GPU; repeatable, later files win")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="keep a run directory: report.json, trace.json, config.json, logs/ "
                        "(render it with `phantom report DIR`)")
    p.add_argument("--trace", metavar="PATH", default=None,
                   help="write a Chrome/Perfetto trace (trace-event JSON) to PATH")
    p.add_argument("--trace-ranks", metavar="LIST", default=None,
                   help="ranks that record trace events, e.g. 0,2-3 (default: all)")
    p.add_argument("--trace-iters", metavar="RANGE", default=None,
                   help="iterations (optimizer steps, from 0) traced: N, A:B (B excluded) or A: "
                        "(default: all)")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module like `python -m`")
    return p


# phantom run's options that take a value (the rest are flags)
RUN_OPTIONS_WITH_VALUE = {"--gpu", "--vram-gib", "--power-limit", "--report", "--on-data-read", "--nproc-per-node",
                          "--host-speed", "--host-gaps", "--host-pace", "--rank-spread", "-m", "--nnodes", "--cluster", "--tee", "--log-dir", "--db",
                          "--ranks", "--executor", "--ray-address", "--transformer-engine",
                          "--out", "--trace", "--trace-ranks", "--trace-iters"}


def _split_target(argv: list[str]) -> tuple[list[str], list[str]]:
    """Options before the script belong to phantom; the script and what follows to the script."""
    options: list[str] = []
    i = 0
    takes_value = RUN_OPTIONS_WITH_VALUE
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return options, argv[i + 1:]
        if arg in takes_value:
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
    try:
        gpu = get_gpu(gpu_name)
    except UnknownGPUError:
        return  # --gpu reports it
    if gpu.power is None:
        raise UsageError(f"--power-limit: the power draw of {gpu.name} was never measured, so its limit "
                         f"is not modelled (modelled: "
                         f"{', '.join(g.name for g in list_gpus() if g.power is not None)})")


def parse_run_args(argv: list[str]) -> RunConfig:
    options, target = _split_target(argv)
    args = _run_parser().parse_args(options)
    if args.gpu is not None:
        try:
            get_gpu(args.gpu)
        except UnknownGPUError as e:
            raise UsageError(str(e)) from None
    if args.vram_gib is not None and not (0 < args.vram_gib <= 4096):
        raise UsageError(f"--vram-gib must be a positive number of GiB (at most 4096), "
                         f"got {args.vram_gib:g}")
    if args.power_limit is not None:
        _check_power_limit(args.power_limit, args.gpu or "H100")
    if args.host_speed is not None and not (math.isfinite(args.host_speed) and args.host_speed > 0):
        raise UsageError(f"--host-speed must be a positive number, got {args.host_speed:g}")
    if args.rank_spread is not None and not (math.isfinite(args.rank_spread) and 0 <= args.rank_spread <= 1):
        raise UsageError(f"--rank-spread must be a number from 0 to 1, got {args.rank_spread:g}")
    host_pace = args.host_pace or os.environ.get(HOST_PACE_ENV) or "auto"
    if host_pace not in HOST_PACES:
        raise UsageError(f"{HOST_PACE_ENV} must be one of {', '.join(HOST_PACES)}, got {host_pace!r}")
    config = RunConfig(gpu=args.gpu or "H100", vram_gib=args.vram_gib, power_limit_w=args.power_limit,
                       report_path=args.report,
                       quiet=args.quiet, on_data_read=args.on_data_read,
                       host_speed=args.host_speed, host_gaps=args.host_gaps, host_pace=host_pace,
                       rank_spread=args.rank_spread,
                       transformer_engine=args.transformer_engine,
                       tee=args.tee, log_dir=args.log_dir,
                       db_paths=_check_dbs(args.db, args.gpu or "H100"),
                       shipped_db=not args.no_db)
    if args.nnodes is not None or args.nproc_per_node is not None or args.cluster is not None:
        _configure_cluster(config, args)
    if args.executor == "ray" or args.ray_address:
        if not config.distributed:
            raise UsageError("--executor ray needs a distributed run (--nproc-per-node, "
                             "--nnodes or --cluster)")
        try:
            import ray  # noqa: F401
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install 'phantom-sim[ray]'") from None
        config.executor, config.ray_address = "ray", args.ray_address
    _configure_ranks(config, args.ranks)
    _configure_outputs(config, args)
    if args.module:
        config.module, config.args = args.module, target
        return config
    if not target:
        raise UsageError("no script given: phantom run [options] [--] SCRIPT.py [ARGS...]")
    script = target[0]
    if not os.path.isfile(script):
        if re.fullmatch(r"python[\d.]*", os.path.basename(script)) and len(target) > 1:
            # `phantom run -- python train.py` is the commonest slip: torchrun takes the script itself.
            rest = " ".join(target[1:])
            fixed = f"phantom run [options] {rest}" if target[1] == "-m" else f"phantom run [options] -- {rest}"
            raise UsageError(f"phantom run takes the script itself, as torchrun does: drop '{script}' "
                             f"and run `{fixed}`")
        raise UsageError(f"script not found: {script}")
    config.script, config.args = script, target[1:]
    if args.report:
        report_dir = os.path.dirname(os.path.abspath(args.report))
        if not os.path.isdir(report_dir):
            raise UsageError(f"--report: directory does not exist: {report_dir}")
    return config


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


def _configure_outputs(config: RunConfig, args: argparse.Namespace) -> None:
    """--out / --trace and the trace limits; the run directory is made at launch."""
    if (args.trace_ranks or args.trace_iters) and not (args.out or args.trace):
        raise UsageError("--trace-ranks and --trace-iters limit a trace: add --trace PATH or --out DIR")
    if args.trace:
        parent = os.path.dirname(os.path.abspath(args.trace))
        if not os.path.isdir(parent):
            raise UsageError(f"--trace: directory does not exist: {parent}")
        config.trace_path = os.path.abspath(args.trace)
    if args.out:
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise UsageError(f"--out: not a directory: {args.out}")
        config.out_dir = os.path.abspath(args.out)
    if args.trace_ranks:
        config.trace_ranks = parse_ranks(args.trace_ranks)
        bad = [r for r in config.trace_ranks if r >= config.world_size]
        if bad:
            raise UsageError(f"--trace-ranks: rank(s) {bad} outside the run's 0..{config.world_size - 1}")
    if args.trace_iters:
        config.trace_iters = parse_iters(args.trace_iters)


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


def _configure_cluster(config: RunConfig, args: argparse.Namespace) -> None:
    """A distributed run: resolve the cluster now, so that bad input fails before launch."""
    from phantom.network import ClusterConfigError, load_cluster

    for flag, value in (("--nnodes", args.nnodes), ("--nproc-per-node", args.nproc_per_node)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    try:
        cluster = load_cluster(args.cluster, nnodes=args.nnodes,
                               nproc_per_node=args.nproc_per_node, gpu=args.gpu)
    except ClusterConfigError as e:
        raise UsageError(str(e)) from None
    config.distributed = True
    config.cluster = args.cluster
    config.nnodes = cluster.nodes
    config.nproc_per_node = cluster.gpus_per_node
    config.gpu = cluster.gpu
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)


def _configure_ranks(config: RunConfig, spec: str | None) -> None:
    """--ranks: which ranks run as processes (phantom.distributed.ranks)."""
    from phantom.distributed.ranks import parse_ranks

    if spec is None:
        spec = "auto" if config.world_size > AUTO_RANKS_ABOVE else "all"
        cores = os.cpu_count() or 1
        if spec == "all" and config.world_size > cores and config.executor == "local" \
                and not config.quiet:
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


def cmd_clusters() -> int:
    from phantom.network import list_presets

    print(f"{'name':<14} description")
    print("-" * 72)
    for name, description in list_presets():
        print(f"{name:<14} {description}")
    print("\nUse one with `phantom run --cluster NAME`, or describe your own in a TOML file "
          "(docs/clusters.md).")
    return 0


def cmd_gpus() -> int:
    header = (f"{'name':<10} {'device name':<24} {'memory':>9} {'bf16':>7} {'fp16':>7} "
              f"{'fp32':>6} {'tf32':>6} {'fp8':>7} {'HBM GB/s':>9} {'SMs':>4} {'cc':>4} "
              f"{'NVLink GB/s':>11}")
    print(header)
    print("-" * len(header))
    for g in list_gpus():
        fp8 = f"{g.fp8_tflops:.0f}" if g.fp8_tflops else "-"
        print(f"{g.name:<10} {g.device_name:<24} {g.memory_gib:>6.1f}GiB {g.bf16_tflops:>7.0f} "
              f"{g.fp16_tflops:>7.0f} {g.fp32_tflops:>6.1f} {g.tf32_tflops:>6.0f} {fp8:>7} "
              f"{g.hbm_gbps:>9.0f} {g.sm_count:>4} {g.compute_capability[0]}.{g.compute_capability[1]:<2} "
              f"{g.nvlink_gbps:>11.0f}")
    print("\nTFLOP/s are dense peaks; NVLink is per GPU per direction.")
    return 0


USAGE = """usage: phantom <command> [options]

commands:
  run     run a PyTorch training script on a simulated GPU
  deepspeed run a DeepSpeed script with the `deepspeed` launcher's arguments (--num_gpus, --hostfile)
  gpus      list the GPU presets and their specs
  clusters  list the cluster presets (--cluster)
  profile   time a script's ops (or the standard grid) on this machine's real GPU into a kernel database
  db        show or merge kernel databases
  report    render a run directory (phantom run --out DIR) as HTML; two: compare them

`phantom <command> --help` for a command's options."""


def _deepspeed(argv: list[str]) -> int:
    """`phantom deepspeed`: the deepspeed launcher's arguments (phantom/launcher/deepspeed_cli.py)."""
    from phantom.launcher.deepspeed_cli import LauncherArgsError, to_run_args

    if argv and argv[0] in ("-h", "--help"):
        import phantom.launcher.deepspeed_cli as ds

        print(ds.__doc__)
        return 0
    try:
        run_argv, env = to_run_args(argv, RUN_OPTIONS_WITH_VALUE)
    except LauncherArgsError as e:
        raise UsageError(str(e)) from None
    os.environ.update(env)  # inherited by the rank processes
    return launch(parse_run_args(run_argv))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "run":
            if rest and rest[0] in ("-h", "--help"):
                _run_parser().print_help()
                return 0
            return launch(parse_run_args(rest))
        if command == "deepspeed":
            return _deepspeed(rest)
        if command == "gpus":
            return cmd_gpus()
        if command == "clusters":
            return cmd_clusters()
        if command == "profile":
            from phantom.cost.profile.cli import main as profile_main

            return profile_main(rest)
        if command == "db":
            from phantom.cost.dbcli import main as db_main

            return db_main(rest)
        if command == "report":
            from phantom.report.cli import main as report_main

            return report_main(rest)
    except UsageError as e:
        print(f"phantom: error: {e}", file=sys.stderr)
        return 2
    print(f"phantom: error: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
