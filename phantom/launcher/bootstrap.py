"""Entry point of a simulated rank process: `python -m phantom.launcher.bootstrap`.

Order matters: the fake CUDA library must be loaded before torch is imported, and the
simulation must be installed before the user's script imports anything.
"""
from __future__ import annotations

import _io
import atexit
import faulthandler
import gc
import os
from pathlib import Path
import re
import runpy
import signal
import sys
import threading
import time
import traceback
from typing import NoReturn

from phantom.adapters import SIMULATED_TE_ENV  # imports no torch
from phantom.config import ENV_VAR, RunConfig
from phantom.errors import RunStopped
from phantom.launcher.lifetime import die_with_starter


def _run_target(config: RunConfig) -> None:
    if config.module:
        sys.argv = [config.module, *config.args]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(config.module, run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(config.script)
        sys.argv = [config.script, *config.args]
        sys.path.insert(0, os.path.dirname(script))
        runpy.run_path(script, run_name="__main__")


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_user_traceback(exc: BaseException) -> None:
    """Print the traceback as `python script.py` would: without phantom's own frames."""
    tb = exc.__traceback__
    while tb is not None and _is_launcher_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


def _needs_torchrun_env(exc: BaseException) -> bool:
    """torch.distributed's env:// rendezvous found no RANK / WORLD_SIZE / MASTER_* variable
    (torch/distributed/rendezvous.py, `_env_error`)."""
    return isinstance(exc, ValueError) and "env:// rendezvous" in str(exc) \
        and "expected, but not set" in str(exc)


# Megatron-Core's words when it needs TE: "Transformer Engine is not installed. Please install
# it with `pip install transformer-engine`", "apply_rope_fusion is not available. Please install
# TE >= 1.4", ...
_TE_MISSING = re.compile(r"install (it with `pip install )?(transformer[-_ ]engine|TE\b)",
                         re.IGNORECASE)


def _needs_transformer_engine(exc: BaseException) -> bool:
    """The script (or Megatron-Core) needed NVIDIA Transformer Engine, which phantom offers
    only when asked."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("transformer_engine"):
            return True
        if _TE_MISSING.search(str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _is_launcher_frame(filename: str) -> bool:
    return "runpy" in filename or filename.endswith(os.path.join("launcher", "bootstrap.py"))


def _install_distributed(sim, config: RunConfig, rank: int) -> None:
    """This process is one rank of a torchrun-style run: connect it to the coordinator and
    make the 'nccl' backend phantom's simulated process group."""
    from phantom.distributed import process_group
    from phantom.distributed.client import CoordinatorClient
    from phantom.distributed.comm import RankComm

    client = CoordinatorClient(rank) if config.world_size > 1 else None
    sim.comm = RankComm(sim, rank, config.world_size, client)
    sim.host.set_world(min(config.world_size, max(config.nproc_per_node, 1)))
    # config.ranks is "auto" or the list of running ranks (the CLI expands "all" to a list).
    listed = config.ranks.split(",") if config.ranks not in ("auto", "all") else None
    all_run = config.ranks == "all" or (listed is not None and len(listed) == config.world_size)
    process_group.install(sim.comm, every_rank_runs=all_run, representatives=not all_run)
    # With --ranks auto each class runs one rank: nobody to share host gaps with.
    sim.comm.shares_host_gaps = client is not None and config.ranks != "auto"


def _finish_distributed(sim, exit_code: int) -> int:
    """Resolve what is still in flight, then tell the coordinator this rank is done."""
    from phantom.errors import SimulationError

    if exit_code == 0:
        try:
            sim.comm.flush()
        except SimulationError as e:
            print(e, file=sys.stderr)
            exit_code = 1
    if exit_code == 0 and sim.comm.client is not None:
        sim.comm.client.finished()
    return exit_code


_prepared = False


def prepare_process(quiet: bool) -> None:
    """The rank-independent start: the fake CUDA library, then torch (in that order). The
    fork server (forkserver.py) does this once for all the ranks it forks."""
    global _prepared
    if _prepared:
        return
    from phantom.native import load_fake_cuda

    load_fake_cuda(quiet=quiet)
    import torch  # noqa: F401  (after the fake CUDA library, on purpose)

    import phantom.sim  # noqa: F401
    import phantom.interception  # noqa: F401
    import phantom.report  # noqa: F401

    _prepared = True


def main() -> int:
    die_with_starter()
    config = RunConfig.from_json(os.environ[ENV_VAR])
    # `kill -USR1 <pid>` prints where a rank is, for a run that seems stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    real_clock = time.perf_counter  # the simulation replaces time.perf_counter below
    wall_start = real_clock()
    prepare_process(config.quiet)
    # read by phantom.adapters' import hook (and by this rank's subprocesses, if any)
    os.environ[SIMULATED_TE_ENV] = config.transformer_engine

    from phantom import adapters, interception
    from phantom.sim import SimOptions, Simulation
    from phantom.hardware import get_gpu
    from phantom.host.costs import HostCostTableError
    from phantom.host.profile import HostProfileError
    from phantom.report import build_report, print_summary, write_report

    gpu = get_gpu(config.gpu)
    if config.vram_gib is not None:
        gpu = gpu.with_memory_gib(config.vram_gib)
    if config.power_limit_w is not None:
        gpu = gpu.with_power_limit(config.power_limit_w)
    rank = int(os.environ.get("RANK", "0")) if config.distributed else 0
    try:
        sim = Simulation(SimOptions.for_run(config, gpu, rank), rank)
    except (HostProfileError, HostCostTableError) as e:
        print(f"phantom: {e}", file=sys.stderr)
        return 2
    if config.distributed:
        _install_distributed(sim, config, rank)
    # The adapters' import hook first: a framework module imported from here on is patched as it
    # loads. One a sitecustomize imported already is patched now, before torch.cuda is
    # simulated, so an adapter's patch function must only rebind the framework's code, never
    # call into CUDA.
    adapters.install()
    interception.install(sim)
    if config.records:  # --out / --trace: after phantom's own start-up, which is not the script's
        from phantom.report.recorder import Recorder, TraceOptions

        Recorder(sim, rank, TraceOptions(enabled=True, ranks=config.trace_ranks,
                                         iterations=tuple(config.trace_iters)
                                         if config.trace_iters else None)).attach()

    exit_code = 0
    try:
        _run_target(config)
    except SystemExit as e:
        exit_code = _exit_code(e)
    except KeyboardInterrupt:
        exit_code = 130
    except RunStopped as e:  # the launcher reports why; here only where this rank was
        print(e, file=sys.stderr)
        exit_code = 1
    except BaseException as e:  # the script's own error: show it as Python would
        _print_user_traceback(e)
        if not config.distributed and _needs_torchrun_env(e):
            print("phantom: the script initialises torch.distributed from torchrun's "
                  "environment (RANK, WORLD_SIZE, MASTER_ADDR), which phantom sets only for a "
                  "launch like torchrun's: run it as `phantom run --nproc-per-node N ...` "
                  "(N simulated GPUs; 1 for one rank).", file=sys.stderr)
        if config.transformer_engine != "simulated" and _needs_transformer_engine(e):
            print("phantom: NVIDIA Transformer Engine is not installed here (it needs a GPU "
                  "to build); phantom simulates it: rerun with `phantom run "
                  "--transformer-engine simulated ...` (docs/frameworks.md, 'Megatron-Core').", file=sys.stderr)
        exit_code = 1
    sys.stdout.flush()
    # The script is done: the interpreter's exit-time collections are not the script's time,
    # and a hook into the simulation must not run while the interpreter tears itself down.
    interception.uninstall_gc_hook(sim)
    if sim.comm is not None:
        exit_code = _finish_distributed(sim, exit_code)
    if sim.recorder is not None:
        sim.recorder.finish()
    report = build_report(sim, config, exit_code=exit_code,
                          wall_seconds=real_clock() - wall_start)
    if not config.quiet and rank == 0:
        print_summary(report, file=sys.stderr)
    if config.report_path and rank == 0:
        write_report(report, config.report_path)
    if config.records:
        from phantom.report.rundir import write_rank_outputs

        write_rank_outputs(config, rank, report, sim.recorder, gpu.name)
    if config.save_host_profile:
        sim.host.save_profile(Path(config.save_host_profile), rank)
    if config.record_path:
        from phantom.cost.profile.record import write_records

        write_records(sim, config.record_path, rank)
    return exit_code


def exit_process(code: int) -> NoReturn:
    """End this rank process as the interpreter's own exit would, less its teardown.

    A finished run's interpreter teardown aborted now and then after a backward pass on the
    fake CUDA device: `terminate called without an active exception`, SIGABRT, exit code 250,
    after everything was printed (7 of 50 single-GPU runs, two at a time on a 2-core VM; 0 of
    50 this way). The likely cause: the autograd engine's device thread is still freeing the
    graph's saved tensors, whose fake storages' finalizers call into Python, and CPython 3.11
    ends a thread that asks for the GIL during finalization with `pthread_exit`, which unwinds
    through a noexcept C++ deleter. So the interpreter is not torn down: what a script can rely
    on at exit is done here, in the interpreter's order (threading's exit hooks and the joins
    of non-daemon threads, atexit handlers, open files flushed), and the process ends with
    os._exit."""
    try:
        try:
            threading._shutdown()  # what Py_FinalizeEx runs first (private, stable since 3.4)
        except Exception:
            pass
        atexit._run_exitfuncs()
        # Unclosed files a script still holds are flushed by their finalizers in a normal exit.
        # (type(), not isinstance: a dead weakref.proxy raises on its __class__; and the C
        # base of every built-in file class, not the io.IOBase ABC, whose check took 0.5 s
        # over the ~480k objects of a process with Megatron and DeepSpeed imported, 0.13 s so.)
        for obj in gc.get_objects():
            if issubclass(type(obj), _io._IOBase):
                try:
                    if not obj.closed:
                        obj.flush()
                except Exception:
                    pass
    finally:
        os._exit(code)


if __name__ == "__main__":
    exit_process(main())
