"""The `phantom` command: `phantom run` and its siblings (USAGE lists them).

`phantom run`'s command line is parsed by phantom/launcher/args.py.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from phantom.hardware.gpus import list_gpus
from phantom.launcher import launch
from phantom.launcher.lifetime import die_with_starter
from phantom.launcher.args import RUN_OPTIONS_WITH_VALUE, UsageError, parse_run_args, run_parser


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
  run       run a PyTorch training script on a simulated GPU
  sweep     run a script at many parallel layouts and rank them (docs/sweep.md)
  calibrate measure this machine once for measured host time (docs/host-time.md)
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


def cmd_calibrate(argv: list[str]) -> int:
    """`phantom calibrate [--force] [--out FILE]`: measure this machine once for measured host
    time (phantom/host/machine.py); runs only read the file."""
    import argparse
    import subprocess

    from phantom.host.machine import calibration_path, cpu_contended, other_runnable_tasks

    parser = argparse.ArgumentParser(prog="phantom calibrate", description=(
        "Measure how fast this machine runs the script's own Python, once, for "
        "`phantom run --host-time measured` (docs/host-time.md)."))
    parser.add_argument("--force", action="store_true",
                        help="calibrate even while other processes keep the CPUs busy")
    parser.add_argument("--out", type=Path, default=calibration_path(),
                        help="where to write it (default: %(default)s, which runs read)")
    args = parser.parse_args(argv)
    others = other_runnable_tasks()
    if cpu_contended(others) and not args.force:
        print(f"phantom calibrate: {others} other processes are running on this machine's CPUs; "
              "a calibration now would measure them too. Run it on an idle machine, or give "
              "--force.", file=sys.stderr)
        return 1
    target = Path(__file__).with_name("launcher") / "calibrate_target.py"
    code = subprocess.call([sys.executable, "-m", "phantom.cli", "run", "--quiet", "--host-time", "off",
                            str(target), str(args.out)])
    if code == 0:
        print(f"phantom calibrate: wrote {args.out}")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    die_with_starter()  # a `phantom sweep` point ends with the sweep (or Ray worker) that started it
    try:
        if command == "run":
            if rest and rest[0] in ("-h", "--help"):
                run_parser().print_help()
                return 0
            return launch(parse_run_args(rest))
        if command == "sweep":
            from phantom.sweep.cli import main as sweep_main

            return sweep_main(rest)
        if command == "deepspeed":
            return _deepspeed(rest)
        if command == "calibrate":
            return cmd_calibrate(rest)
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
