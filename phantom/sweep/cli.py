"""`phantom sweep`: its command line, from argv to a spec, a run and the outputs.

    phantom sweep SPEC.toml [sweep options]
    phantom sweep --framework torchtitan [sweep options] [phantom run options] -- COMMAND
    phantom sweep --vary ARG=V1,V2 [...] [sweep options] [phantom run options] -- COMMAND

docs/sweep.md describes all three with examples.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from phantom.launcher.launch import interrupts_raise, interrupted_status
from phantom.sweep import frameworks
from phantom.sweep.results import SweepOutcome, table
from phantom.sweep.runner import Runner, SweepOptions, SweepRunError
from phantom.sweep.spec import (Parameter, SweepSpec, SweepSpecError, load_spec, points, resolve,
                                resolve_cluster)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="phantom sweep",
        usage="phantom sweep SPEC.toml [options]\n"
              "       phantom sweep --framework {torchtitan,megatron,deepspeed} [options] "
              "[phantom run options] -- COMMAND\n"
              "       phantom sweep --vary ARG=V1,V2 [...] [options] [phantom run options] -- COMMAND",
        description="Run one training script at many layouts under simulation and rank them "
                    "(docs/sweep.md). Options phantom sweep does not know go to every point's "
                    "`phantom run` (--cluster, --nnodes, --gpu, ...).")
    p.add_argument("spec", nargs="?", help="a sweep spec (TOML); or give the command after --")
    p.add_argument("--framework", choices=frameworks.FRAMEWORKS,
                   help="vary the framework's built-in layout axes (docs/sweep.md)")
    p.add_argument("--vary", action="append", default=[], metavar="ARG=V1,V2",
                   help="vary the script option --ARG over these values (true/false: the flag "
                        "alone); repeatable")
    p.add_argument("--constraint", action="append", default=[], metavar="EXPR",
                   help="keep only points where EXPR holds, e.g. 'tp * pp <= 8'; repeatable")
    p.add_argument("--tokens-per-iteration", metavar="EXPR",
                   help="tokens one iteration trains, to rank by tokens/s per GPU")
    p.add_argument("--out", type=Path, help="where the points, sweep.json and sweep.html go "
                                            "(default: SPEC's name beside it, else ./phantom-sweep)")
    p.add_argument("--jobs", "-j", type=int, default=max(1, (os.cpu_count() or 1) // 2),
                   help="points simulated at once (default: half this machine's cores, "
                        "at least 1)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: here; ray: as Ray tasks (the script at the same path on "
                        "every node)")
    p.add_argument("--ray-address", help="the Ray cluster to join (implies --executor ray)")
    p.add_argument("--host-time", choices=("counted", "off"), default="counted",
                   help="counted (default): each point's host time measured on its first run "
                        "and replayed from then on; off: GPU time only")
    p.add_argument("--host-profile", type=Path, metavar="DIR",
                   help="replay this saved host profile for every point (default: each "
                        "point's own)")
    p.add_argument("--prune-factor", type=float, default=1.5, metavar="F",
                   help="stop a point once it is F times slower than the best so far "
                        "(default 1.5; 0 never)")
    p.add_argument("--rerun", action="store_true", help="ignore cached results")
    p.add_argument("--list", action="store_true",
                   help="list the points and the ruled-out combinations; run nothing")
    p.add_argument("--top", type=int, default=20, help="rows of the table to print (default 20)")
    return p


def split_command(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(phantom sweep's arguments, `phantom run` options for every point, the command after
    `--`)."""
    from phantom.launcher.args import RUN_OPTIONS_WITH_VALUE

    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    ours = {s: a.nargs != 0 for a in parser()._actions for s in a.option_strings}
    sweep, run, i = [], [], 0
    while i < len(argv):
        t = argv[i]
        flag = t.split("=", 1)[0]
        if flag[:2] in ours and len(flag) > 2 and not flag.startswith("--"):  # -j4
            flag, t = flag[:2], f"{flag[:2]}={flag[2:]}"
            argv = argv[:i] + [t] + argv[i + 1:]
        if flag in ours:
            n = 2 if ours[flag] and "=" not in t else 1
            sweep += argv[i:i + n]
        elif flag in RUN_OPTIONS_WITH_VALUE:
            n = 1 if "=" in t else 2
            run += argv[i:i + n]
        else:
            n = 1
            (run if t.startswith("-") else sweep).append(t)
        i += n
    return sweep, run, command


def build_spec(args: argparse.Namespace, run_options: list[str], command: list[str]) -> SweepSpec:
    if args.spec is not None:
        if command or args.framework or args.vary:
            raise SweepSpecError("give a spec file, or --framework/--vary with a command after "
                                 "--, not both")
        if not args.spec.endswith(".toml"):
            raise SweepSpecError(f"{args.spec} is not a sweep spec (a .toml file): to sweep a "
                                 f"script, give it after -- with --vary or --framework")
        spec = load_spec(args.spec)
        spec.run_options += run_options
    else:
        if not command:
            raise SweepSpecError("nothing to sweep: give SPEC.toml, or the command after -- with "
                                 "--framework or --vary")
        spec = SweepSpec(target=command, run_options=run_options,
                         name=args.framework or "sweep")
    spec.constraints += args.constraint
    if args.tokens_per_iteration:
        spec.tokens_per_iteration = args.tokens_per_iteration
    for text in args.vary:
        spec.parameters.append(_vary(text))
    if args.framework:  # its axes depend on the cluster's size
        resolve_cluster(spec)
        frameworks.apply(args.framework, spec)
    resolve(spec)
    return spec


def _vary(text: str) -> Parameter:
    if "=" not in text:
        raise SweepSpecError(f"--vary {text!r}: expected ARG=V1,V2 (e.g. batch-size=4,8)")
    flag, values = text.split("=", 1)
    flag = flag if flag.startswith("-") else "--" + flag
    name = flag.lstrip("-").replace("-", "_").replace(".", "_")
    return Parameter(name, values=[_value(v) for v in values.split(",") if v != ""], arg=flag)


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def default_out(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return args.out
    if args.spec is not None:
        return Path(args.spec).with_suffix(".sweep")
    return Path("phantom-sweep")


def list_points(spec: SweepSpec) -> None:
    valid, skipped = points(spec)
    print(f"{len(valid)} points ({spec.world_size} ranks on {spec.nnodes} node(s) of "
          f"{spec.nproc_per_node} {spec.gpu}):")
    for p in valid:
        print(f"  {p.label()}")
    if skipped:
        print(f"{len(skipped)} combinations ruled out:")
        for s in skipped:
            print(f"  {' '.join(f'{k}={v}' for k, v in s.values.items())}: {s.reason}")


def main(argv: list[str]) -> int:
    ours, run_options, command = split_command(argv)
    args = parser().parse_args(ours)
    if args.ray_address:
        args.executor = "ray"
    restore = interrupts_raise()  # Ctrl-C and `kill` end the sweep and its running points
    try:
        spec = build_spec(args, run_options, command)
        if args.list:
            list_points(spec)
            return 0
        if args.host_profile is not None and not (args.host_profile / "rank0.npz").exists():
            raise SweepSpecError(f"--host-profile {args.host_profile}: no rank0.npz there (save "
                                 f"one with phantom run --save-host-profile DIR)")
        options = SweepOptions(out_dir=default_out(args), jobs=args.jobs, executor=args.executor,
                               ray_address=args.ray_address, host_time=args.host_time,
                               host_profile=args.host_profile, prune_factor=args.prune_factor,
                               rerun=args.rerun)
        outcome = Runner(spec, options).run()
    except (SweepSpecError, SweepRunError) as e:
        print(f"phantom sweep: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print("phantom sweep: interrupted; finished points are kept and a rerun resumes",
              file=sys.stderr)
        return interrupted_status(e)
    finally:
        restore()
    return report(outcome, options.out_dir, args.top)


def report(outcome: SweepOutcome, out_dir: Path, top: int) -> int:
    from phantom.sweep.html import render_sweep_html

    doc = outcome.to_json()
    (out_dir / "sweep.json").write_text(json.dumps(doc, indent=1) + "\n")
    page = render_sweep_html(doc, out_dir / "sweep.html")
    print(table(outcome, limit=top))
    best = outcome.best
    if best is None:
        print("\nno point ran to its end: see the statuses above and each point's "
              f"{out_dir}/points/<id>/stderr.txt")
    else:
        print(f"\nbest: {best.label()}\n  {best.command}")
    print(f"\n{out_dir / 'sweep.json'}\n{page}")
    return 0 if best is not None else 1
