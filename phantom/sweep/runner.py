"""Running a sweep's points: each one a `phantom run`, several at once, cached, pruned.

Note [Sweep host time]
~~~~~~~~~~~~~~~~~~~~~~
Several points run at once and a resumed sweep must agree with the first one, so a point's
host time must not move with this machine's load once it is known. With the default
`--host-time counted`, a point's first run measures the script's Python (measured host time
reads thread CPU time, converted to the node's speed: docs/host-time.md) and saves it, segment
by segment, in OUT/points/<id>/host-profile/; that run's result is the point's. Any later run
of the point (a changed phantom, `--rerun`) replays that profile (`phantom run --host-time
counted`), to the nanosecond. Each layout is charged its own Python: one profile shared by all
points would charge a layout whose Python differs (FSDP's hooks against DDP's, activation
checkpointing's recompute) the other layout's segments. `--host-profile DIR` replays one saved
profile for every point instead (the same on any machine, at that cost); `--host-time off`
compares GPU time alone.

Note [Sweep cache]
~~~~~~~~~~~~~~~~~~
Each point keeps OUT/points/<id>/result.json with a key over what its result depends on: the
`phantom run` arguments and environment, the contents of the config copies and of every file
the command names (the script, a cluster TOML, a kernel database), the host profile, and
phantom's own code and data (a hash of the installed package). A module run with `-m` is named,
not hashed: after editing one, run with --rerun. A re-run sweep reads every point whose key
still matches and runs the rest, so it resumes after Ctrl-C (an interrupted point is not kept)
and reruns what a changed spec, script or phantom would change. A point's saved host profile
is kept with the command it was measured for, and measured again for another command.
"""
from __future__ import annotations

import concurrent.futures as futures
import hashlib
import json
import os
import shlex
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import phantom
from phantom.sweep import expr
from phantom.sweep.executors import Executor, LocalPoints, PointCall, PointOutput, Stopped
from phantom.sweep.results import PointResult, SweepOutcome, rank, result_from_report, size_text
from phantom.sweep.spec import (Point, PointRun, SweepSpec, cluster_names, point_run, points,
                                value_text)


@dataclass
class SweepOptions:
    """How `phantom sweep` runs the points (its command-line options)."""

    out_dir: Path
    """Where the points' runs, the cache, sweep.json and sweep.html go."""
    jobs: int = 1
    """Points simulated at once (local executor) or in flight (Ray)."""
    executor: str = "local"
    """`local`: subprocesses here; `ray`: Ray tasks on a Ray cluster."""
    ray_address: str | None = None
    host_time: str = "counted"
    """counted (Note [Sweep host time]) or off."""
    host_profile: Path | None = None
    """A saved host profile every point replays; None: each point's own."""
    prune_factor: float = 1.5
    """Stop a point once an iteration after its first is this much slower than the best
    point so far would be (0: never)."""
    rerun: bool = False
    """Ignore cached results."""


class SweepRunError(RuntimeError):
    """A sweep that cannot go on (no point passes the constraints, no Ray, say)."""


def code_fingerprint() -> str:
    """A hash of phantom's installed code and data: a cached result is reused only by the
    phantom that made it."""
    root = Path(phantom.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".json", ".toml", ".cpp") and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def directory_fingerprint(path: Path | None) -> str:
    if path is None or not path.is_dir():
        return "none"
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


# -- one point ---------------------------------------------------------------------------------
@dataclass
class PointJob:
    """One point, ready to run."""
    id: str
    point: Point
    run: PointRun
    command_key: str
    """Its command, environment and the files they name (Note [Sweep cache])."""
    key: str
    """command_key with the host-time setting and phantom's code: its result's cache key."""
    dir: Path
    tokens: float | None
    replay: list[str]
    """The host-time options that charge this point again as the sweep did."""

    @property
    def profile_dir(self) -> Path:
        return self.dir / "host-profile"

    def own_profile(self) -> bool:
        """A saved host profile of this very command (Note [Sweep cache])."""
        key_file = self.profile_dir / "command.key"
        return (self.profile_dir / "rank0.npz").exists() and key_file.exists() \
            and key_file.read_text().strip() == self.command_key

    def command(self) -> str:
        """The point as a `phantom run` command line (Note [Sweep host time])."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.run.env.items())
        return (env + " " if env else "") + "phantom run " + shlex.join(self.replay + self.run.run_args)


def files_fingerprint(tokens: list[str], skip: set[str]) -> str:
    """A hash of the contents of the files the command names (the script, a cluster TOML, a
    kernel database), by the tokens that are paths of files here."""
    h = hashlib.sha256()
    for token in tokens:
        for text in (token, token.split("=", 1)[-1]):
            path = Path(text)
            if text and text not in skip and path.is_file():
                h.update(text.encode())
                h.update(path.read_bytes())
                break
    return h.hexdigest()[:16]


class Runner:
    """Runs a spec's points and collects their results (Notes [Sweep host time], [Sweep cache])."""

    def __init__(self, spec: SweepSpec, options: SweepOptions,
                 progress: Callable[[str], None] | None = None) -> None:
        self.spec, self.options = spec, options
        self.out_dir = options.out_dir.resolve()
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.points_dir = self.out_dir / "points"
        self.metric = "tokens_per_s_per_gpu" if spec.tokens_per_iteration else "iteration_ms"
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._best: PointResult | None = None
        self._done = 0
        self._run_walls: list[float] = []

    # -- set-up ----------------------------------------------------------------------------
    def host_args(self, job: PointJob) -> list[str]:
        """Note [Sweep host time]: replay a profile where there is one, else measure and save."""
        if self.options.host_time == "off":
            return ["--host-time", "off"]
        if self.options.host_profile is not None:
            return ["--host-time", "counted", "--host-profile", str(self.options.host_profile)]
        if job.own_profile():
            return ["--host-time", "counted", "--host-profile", str(job.profile_dir)]
        return ["--host-time", "measured", "--save-host-profile", str(job.profile_dir)]

    def host_key(self) -> str:
        if self.options.host_time == "off":
            return "off"
        if self.options.host_profile is not None:
            return directory_fingerprint(self.options.host_profile)
        return "own"

    def jobs(self, valid: list[Point]) -> list[PointJob]:
        code, host = code_fingerprint(), self.host_key()
        tokens_tree = expr.parse(str(self.spec.tokens_per_iteration)) \
            if self.spec.tokens_per_iteration else None
        ranks = ["--ranks", "auto"] if self.spec.world_size > 1 and not any(
            t.split("=")[0] == "--ranks" for t in self.spec.run_options) else []
        out = []
        for point in valid:
            pid = hashlib.sha256(point.label().encode()).hexdigest()[:10]
            pdir = self.points_dir / pid
            run = point_run(self.spec, point, pdir)
            run.run_args = ranks + run.run_args  # representative ranks (docs/distributed.md)
            named = files_fingerprint(run.run_args, skip=set(run.files))
            command_key = hashlib.sha256(f"{run.key()}|{named}".encode()).hexdigest()[:16]
            key = hashlib.sha256(f"{command_key}|{host}|{code}".encode()).hexdigest()[:16]
            tokens = None
            if tokens_tree is not None:
                tokens = float(expr.evaluate(tokens_tree, cluster_names(self.spec) | point.as_dict()))
            job = PointJob(pid, point, run, command_key, key, pdir, tokens, [])
            replay = self.host_args(job)
            if replay[1] == "measured":
                replay = ["--host-time", "counted", "--host-profile", replay[-1]]
            job.replay = replay
            out.append(job)
        return out

    # -- running ---------------------------------------------------------------------------
    def cached(self, job: PointJob) -> PointResult | None:
        if self.options.rerun:
            return None
        try:
            data = json.loads((job.dir / "result.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        if data.get("key") != job.key:
            return None
        result = PointResult.from_json(data)
        if result.status == "stopped" and self.options.prune_factor <= 0:
            return None  # it would run to its end now
        result.cached = True
        return result

    def bound_ms(self, job: PointJob) -> float | None:
        """--stop-above-ms for a point: the iteration time at which it would be prune_factor
        times slower than the best point so far."""
        best, factor = self._best, self.options.prune_factor
        if best is None or factor <= 0:
            return None
        if self.metric == "tokens_per_s_per_gpu":
            if not best.tokens_per_s_per_gpu or not job.tokens:
                return None
            at_best_ms = job.tokens / (best.tokens_per_s_per_gpu * self.spec.world_size) * 1e3
            return factor * at_best_ms
        return factor * best.iteration_ms if best.iteration_ms else None

    def run_one(self, job: PointJob, execute: Executor) -> PointResult | None:
        """Run one point; None when the sweep is stopping (an interrupted point is not kept)."""
        if self._stopping.is_set():
            return None
        host = self.host_args(job)
        args = ["--quiet", *host, *job.run.run_args]
        bound = self.bound_ms(job)
        if bound is not None:
            args = ["--stop-above-ms", f"{bound:.3f}", *args]
        job.dir.mkdir(parents=True, exist_ok=True)
        replayed = {}
        if "--host-profile" in host:
            profile = Path(host[host.index("--host-profile") + 1])
            replayed = {str(f): f.read_bytes() for f in sorted(profile.iterdir())}
        call = PointCall(args, job.run.env, job.run.files, str(job.dir / "report.json"),
                         os.getcwd(), ship=replayed,
                         bring_back=str(job.profile_dir) if "--save-host-profile" in host else None)
        start = time.monotonic()
        try:
            output = execute(call)
        except Stopped:
            return None
        if self._stopping.is_set() or output.exit_code < 0:
            return None  # killed: Ctrl-C, or from outside
        result = self._result(job, output, round(time.monotonic() - start, 2))
        self._note_best(result)  # before this worker takes its next point, which it bounds
        self._keep_profile(job, host, result)
        (job.dir / "result.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
        return result

    def _result(self, job: PointJob, output: PointOutput, wall: float) -> PointResult:
        (job.dir / "stdout.txt").write_text(output.stdout)
        (job.dir / "stderr.txt").write_text(output.stderr)
        try:
            report = json.loads(output.report) if output.report else None
            if output.report:
                (job.dir / "report.json").write_text(output.report)
            result = result_from_report(job.id, job.point.as_dict(), job.command(), report,
                                        output.stdout, output.stderr, output.exit_code, job.tokens,
                                        self.spec.world_size, self.spec.mfu_pattern,
                                        self.spec.tflops_pattern, self.spec.gpu_bf16_tflops)
        except (ValueError, KeyError, TypeError) as e:  # a report cut short, say
            result = PointResult(job.id, job.point.as_dict(), "failed", job.command(),
                                 message=f"its run report could not be read: {e}")
        result.key, result.wall_s = job.key, wall
        return result

    def _keep_profile(self, job: PointJob, host: list[str], result: PointResult) -> None:
        """A profile saved by a run that did not get through its iterations is not replayed."""
        if "--save-host-profile" not in host:
            return
        if result.status in ("ok", "stopped") and (job.profile_dir / "rank0.npz").exists():
            (job.profile_dir / "command.key").write_text(job.command_key + "\n")
        else:
            shutil.rmtree(job.profile_dir, ignore_errors=True)

    def _note_best(self, result: PointResult) -> None:
        with self._lock:
            if result.status == "ok" and (self._best is None
                                          or rank([self._best, result], self.metric)[0] is result):
                self._best = result

    def record(self, result: PointResult, total: int, started: float) -> None:
        """Count a finished point and print its progress line."""
        if result.cached:
            self._note_best(result)
        with self._lock:
            self._done += 1
            if not result.cached:
                self._run_walls.append(result.wall_s)
            self.progress(self._progress_line(result, total, started))

    def _progress_line(self, r: PointResult, total: int, started: float) -> str:
        if r.status == "ok":
            what = (f"{r.tokens_per_s_per_gpu:,.0f} tok/s/GPU" if r.tokens_per_s_per_gpu
                    else f"{r.iteration_ms:,.1f} ms/iteration")
            if r.peak_reserved_bytes is not None:
                what += f", peak {r.peak_reserved_bytes / 2**30:.1f} GiB"
        elif r.status == "oom":
            what = f"out of memory (short >= {size_text(r.shortfall_bytes or 0)})"
        elif r.status == "stopped":
            what = "stopped: clearly slower than the best"
        else:
            what = "failed: " + (r.message or "").splitlines()[-1][:120] if r.message else "failed"
        how = "cached" if r.cached else f"{r.wall_s:.0f} s"
        line = f"[{self._done}/{total}] {self._axes_label(r)}: {what} ({how})"
        if self._best is not None:
            b = self._best
            best = (f"{b.tokens_per_s_per_gpu:,.0f} tok/s/GPU" if b.tokens_per_s_per_gpu
                    else f"{b.iteration_ms:,.1f} ms")
            line += f" | best {best} ({self._axes_label(b)})"
        left = total - self._done
        if left and self._run_walls:
            eta = left * (sum(self._run_walls) / len(self._run_walls)) / max(1, self.options.jobs)
            line += f" | ETA {_duration(eta)}"
        return line

    def _axes_label(self, r: PointResult) -> str:
        return " ".join(f"{a.name}={value_text(r.values[a.name])}" for a in self.spec.axes())

    def run(self) -> SweepOutcome:
        valid, skipped = points(self.spec)
        if not valid:
            raise SweepRunError(f"{self.spec.source}: no point passes the constraints "
                                f"({len(skipped)} combinations ruled out; `phantom sweep --list` "
                                f"shows why)")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        jobs = self.jobs(valid)
        started = time.monotonic()
        results: list[PointResult] = []
        todo = []
        for job in jobs:
            cached = self.cached(job)
            if cached is None:
                todo.append(job)
            else:
                results.append(cached)
                self.record(cached, len(jobs), started)
        execute = self._executor()
        pool = futures.ThreadPoolExecutor(max_workers=max(1, self.options.jobs))
        pending: set[futures.Future] = set()
        try:
            pending = {pool.submit(self.run_one, job, execute) for job in todo}
            for done in futures.as_completed(pending):
                result = done.result()
                if result is not None:
                    results.append(result)
                    self.record(result, len(jobs), started)
        except BaseException:  # Ctrl-C: no new points, and the running ones end now
            self._stopping.set()
            for f in pending:
                f.cancel()
            execute.stop()
            raise
        finally:
            pool.shutdown(wait=True)
        return SweepOutcome(header=self.header(), results=rank(results, self.metric),
                            metric=self.metric,
                            skipped=[{"values": s.values, "reason": s.reason} for s in skipped])

    def _executor(self) -> Executor:
        if self.options.executor == "ray":
            from phantom.sweep.ray_tasks import RayPoints

            return RayPoints(self.options.ray_address)
        return LocalPoints()

    def header(self) -> dict:
        spec = self.spec
        return {
            "name": spec.name, "source": spec.source,
            "gpu": {"name": spec.gpu, "memory_bytes": spec.gpu_memory_bytes},
            "world_size": spec.world_size, "nnodes": spec.nnodes,
            "nproc_per_node": spec.nproc_per_node,
            "axes": [{"name": p.name, "values": p.values} for p in spec.axes()],
            "derived": [{"name": p.name, "expr": p.expr} for p in spec.parameters if p.derived],
            "constraints": spec.constraints,
            "tokens_per_iteration": spec.tokens_per_iteration,
            "host_time": {"mode": self.options.host_time,
                          "profile": str(self.options.host_profile or "each point's own")
                          if self.options.host_time == "counted" else None},
        }


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds < 3600 else \
        f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
