"""The `phantom` command: `phantom run`, `phantom gpus`."""
from __future__ import annotations

import argparse
import os
import sys

from phantom.hardware.gpus import UnknownGPUError, get_gpu, list_gpus
from phantom.launcher import RunConfig, launch


class UsageError(Exception):
    pass


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="phantom run",
        description="Run a PyTorch script as if on the chosen GPU; its own logs print "
                    "simulated times and memory.",
        usage="phantom run [options] [--] SCRIPT.py [ARGS...]\n"
              "       phantom run [options] -m MODULE [ARGS...]",
    )
    p.add_argument("--gpu", default="H100", help="GPU preset (see `phantom gpus`); default H100")
    p.add_argument("--vram-gib", type=float, default=None,
                   help="override the GPU's memory size in GiB (e.g. to test an OOM)")
    p.add_argument("--report", metavar="PATH", help="write the run report as JSON to PATH")
    p.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")
    p.add_argument("--on-data-read", choices=("placeholder", "error"), default="placeholder",
                   help="what reading a CUDA tensor's value does (default: placeholder value)")
    p.add_argument("--nproc-per-node", type=int, default=1, help="ranks per node (1 for now)")
    p.add_argument("--host-speed", type=float, default=1.0,
                   help="how fast this machine runs the script's Python relative to the "
                        "simulated node's host CPU (default 1.0: as fast)")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module like `python -m`")
    return p


def _split_target(argv: list[str]) -> tuple[list[str], list[str]]:
    """Options before the script belong to phantom; the script and what follows to the script."""
    options: list[str] = []
    i = 0
    takes_value = {"--gpu", "--vram-gib", "--report", "--on-data-read", "--nproc-per-node",
                   "--host-speed", "-m"}
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


def parse_run_args(argv: list[str]) -> RunConfig:
    options, target = _split_target(argv)
    args = _run_parser().parse_args(options)
    try:
        get_gpu(args.gpu)
    except UnknownGPUError as e:
        raise UsageError(str(e)) from None
    if args.vram_gib is not None and not (0 < args.vram_gib <= 4096):
        raise UsageError(f"--vram-gib must be a positive number of GiB (at most 4096), "
                         f"got {args.vram_gib:g}")
    if args.nproc_per_node < 1:
        raise UsageError(f"--nproc-per-node must be >= 1, got {args.nproc_per_node}")
    if args.nproc_per_node > 1:
        raise UsageError("--nproc-per-node > 1 (multi-rank runs) is not implemented yet; "
                         "run with --nproc-per-node 1")
    if args.host_speed <= 0:
        raise UsageError(f"--host-speed must be a positive number, got {args.host_speed:g}")
    config = RunConfig(gpu=args.gpu, vram_gib=args.vram_gib, report_path=args.report,
                       quiet=args.quiet, on_data_read=args.on_data_read,
                       nproc_per_node=args.nproc_per_node, host_speed=args.host_speed)
    if args.module:
        config.module, config.args = args.module, target
        return config
    if not target:
        raise UsageError("no script given: phantom run [options] [--] SCRIPT.py [ARGS...]")
    script = target[0]
    if not os.path.isfile(script):
        raise UsageError(f"script not found: {script}")
    config.script, config.args = script, target[1:]
    if args.report:
        report_dir = os.path.dirname(os.path.abspath(args.report))
        if not os.path.isdir(report_dir):
            raise UsageError(f"--report: directory does not exist: {report_dir}")
    return config


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
  gpus    list the GPU presets and their specs

`phantom <command> --help` for a command's options."""


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
        if command == "gpus":
            return cmd_gpus()
    except UsageError as e:
        print(f"phantom: error: {e}", file=sys.stderr)
        return 2
    print(f"phantom: error: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
