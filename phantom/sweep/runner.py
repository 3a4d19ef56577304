"""Running a sweep's points: each one a `phantom run`, several at once, cached, pruned.

Note [Sweep host time]
~~~~~~~~~~~~~~~~~~~~~~
Layouts are compared on host time that does not move with this machine's load, because
several points run at once and a resumed sweep must agree with the first one. By default
(`--host-time counted`) the sweep first runs its first point with measured host time and saves
that run's host profile in OUT/host-profile/; every point then runs counted against it
(docs/host-time.md): the script's Python is charged from the profile, torch's work from the
node's table. A layout whose call sequence departs from the profile's is charged each segment
at the median of the profile's segments that ended at the same call. The profile is kept, so a
resumed sweep charges exactly what the first one did; `--host-profile DIR` gives one saved
earlier, `--host-time off` leaves host time out.

Note [Sweep cache]
~~~~~~~~~~~~~~~~~~
Each point keeps OUT/points/<id>/result.json with a key over everything its result depends on:
the `phantom run` arguments, environment and config files, the host profile's files, and
phantom's own code and data (a hash of the installed package). A re-run sweep reads every
point whose key still matches and runs the rest, so it resumes after Ctrl-C and reruns what a
changed spec or a new phantom would change.
"""
from __future__ import annotations

import concurrent.futures as futures
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import phantom
from phantom.sweep import expr
from phantom.sweep.results import PointResult, SweepOutcome, rank, result_from_report, size_text
from phantom.sweep.spec import Point, PointRun, SweepSpec, cluster_names, point_run, points

PHANTOM_RUN = [sys.executable, "-m", "phantom.cli", "run"]


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
    """counted (Note [Sweep host time]), measured or off."""
    host_profile: Path | None = None
    """A saved host profile for counted host time; None: the sweep saves one."""
    prune_factor: float = 1.5
    """Stop a point once an iteration after its first is this much slower than the best
    point so far would be (0: never)."""
    rerun: bool = False
    """Ignore cached results."""


class SweepRunError(RuntimeError):
    """A sweep that cannot go on (the host-profile run failed, say)."""


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
    key: str
    dir: Path
    tokens: float | None

    def command(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.run.env.items())
        return (env + " " if env else "") + "phantom run " + shlex.join(self.run.run_args)


def run_point_process(run_args: list[str], env: dict[str, str], files: dict[str, str],
                      report_path: str) -> tuple[int, str, str, str | None]:
    """Run `phantom run run_args` to its end: (exit code, stdout, stderr, report text). The
    config files are written first. Its own process group, killed with it on Ctrl-C."""
    for path, text in files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    Path(report_path).parent.mkdir(parents=True, exist_ok=True)
    Path(report_path).unlink(missing_ok=True)
    proc = subprocess.Popen(PHANTOM_RUN + ["--report", report_path] + run_args,
                            env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    report = Path(report_path).read_text() if Path(report_path).exists() else None
    return proc.returncode, out, err, report


class Runner:
    """Runs a spec's points and collects their results (Notes [Sweep host time], [Sweep cache])."""

    def __init__(self, spec: SweepSpec, options: SweepOptions,
                 progress: Callable[[str], None] | None = None) -> None:
        self.spec, self.options = spec, options
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.points_dir = options.out_dir / "points"
        self.metric = "tokens_per_s_per_gpu" if spec.tokens_per_iteration else "iteration_ms"
        self._lock = threading.Lock()
        self._best: PointResult | None = None
        self._done = 0
        self._run_walls: list[float] = []

    # -- set-up ----------------------------------------------------------------------------
    def host_args(self) -> list[str]:
        mode = self.options.host_time
        if mode == "counted":
            return ["--host-time", "counted", "--host-profile", str(self.profile_dir())]
        return ["--host-time", mode]

    def profile_dir(self) -> Path:
        return self.options.host_profile or self.options.out_dir / "host-profile"

    def jobs(self, valid: list[Point]) -> list[PointJob]:
        code = code_fingerprint()
        profile = directory_fingerprint(self.profile_dir()) if self.options.host_time == "counted" \
            else self.options.host_time
        tokens_tree = expr.parse(str(self.spec.tokens_per_iteration)) \
            if self.spec.tokens_per_iteration else None
        out = []
        for point in valid:
            pid = hashlib.sha256(point.label().encode()).hexdigest()[:10]
            pdir = self.points_dir / pid
            run = point_run(self.spec, point, pdir)
            run.run_args = ["--quiet", *self.host_args(), *run.run_args]
            key = hashlib.sha256(f"{run.key()}|{profile}|{code}".encode()).hexdigest()[:16]
            tokens = None
            if tokens_tree is not None:
                tokens = float(expr.evaluate(tokens_tree, cluster_names(self.spec) | point.as_dict()))
            out.append(PointJob(pid, point, run, key, pdir, tokens))
        return out

    def ensure_host_profile(self, first: PointJob) -> None:
        """Note [Sweep host time]: save the profile the counted points replay, once."""
        if self.options.host_time != "counted" or self.options.host_profile is not None:
            return
        profile = self.profile_dir()
        if profile.is_dir() and any(profile.iterdir()):
            return
        self.progress(f"phantom sweep: measuring host time once, on {first.point.label()} "
                      f"(saved in {profile})")
        args = [a for a in first.run.run_args]
        i = args.index("--host-time")
        del args[i:i + 4]  # --host-time counted --host-profile DIR
        args = ["--host-time", "measured", "--save-host-profile", str(profile), *args]
        code, out, err, _ = run_point_process(args, first.run.env, first.run.files,
                                              str(first.dir / "host-profile-run.json"))
        if code != 0 or not profile.is_dir():
            raise SweepRunError(f"the run that measures host time ({first.point.label()}) failed "
                                f"(exit {code}):\n{err.strip()[-2000:]}\nFix the script or spec, or "
                                f"give --host-time off.")

    # -- running ---------------------------------------------------------------------------
    def cached(self, job: PointJob) -> PointResult | None:
        if self.options.rerun:
            return None
        path = job.dir / "result.json"
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        if data.get("key") != job.key:
            return None
        result = PointResult.from_json(data)
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

    def run_one(self, job: PointJob, execute) -> PointResult:
        args = list(job.run.run_args)
        bound = self.bound_ms(job)
        if bound is not None:
            args = ["--stop-above-ms", f"{bound:.3f}", *args]
        job.dir.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        code, out, err, report_text = execute(args, job.run.env, job.run.files,
                                              str(job.dir / "report.json"))
        wall = time.monotonic() - start
        (job.dir / "stdout.txt").write_text(out)
        (job.dir / "stderr.txt").write_text(err)
        report = json.loads(report_text) if report_text else None
        if report_text:
            (job.dir / "report.json").write_text(report_text)
        result = result_from_report(job.id, job.point.as_dict(), job.command(), report, out, err,
                                    code, job.tokens, self.spec.world_size, self.spec.mfu_pattern,
                                    self.spec.tflops_pattern, self.spec.gpu_bf16_tflops)
        result.key, result.wall_s = job.key, round(wall, 2)
        (job.dir / "result.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
        return result

    def record(self, result: PointResult, total: int, started: float) -> None:
        with self._lock:
            self._done += 1
            if not result.cached:
                self._run_walls.append(result.wall_s)
            if result.status == "ok" and (self._best is None or rank([self._best, result], self.metric)[0] is result):
                self._best = result
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
        return " ".join(f"{a.name}={r.values[a.name]}" for a in self.spec.axes())

    def run(self) -> SweepOutcome:
        valid, skipped = points(self.spec)
        if not valid:
            raise SweepRunError(f"{self.spec.source}: no point passes the constraints "
                                f"({len(skipped)} combinations ruled out; `phantom sweep --list` "
                                f"shows why)")
        self.options.out_dir.mkdir(parents=True, exist_ok=True)
        jobs = self.jobs(valid)
        if self.options.host_time == "counted":
            self.ensure_host_profile(jobs[0])
            jobs = self.jobs(valid)  # keys now name the profile's contents
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
        with futures.ThreadPoolExecutor(max_workers=max(1, self.options.jobs)) as pool:
            pending = {pool.submit(self.run_one, job, execute) for job in todo}
            try:
                for done in futures.as_completed(pending):
                    result = done.result()
                    results.append(result)
                    self.record(result, len(jobs), started)
            except BaseException:
                for f in pending:
                    f.cancel()
                raise
        return SweepOutcome(header=self.header(), results=rank(results, self.metric),
                            metric=self.metric,
                            skipped=[{"values": s.values, "reason": s.reason} for s in skipped])

    def _executor(self):
        if self.options.executor == "ray":
            from phantom.sweep.ray_tasks import RayPoints

            profile = self.profile_dir() if self.options.host_time == "counted" else None
            return RayPoints(self.options.ray_address, profile)
        return run_point_process

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
                          "profile": str(self.profile_dir())
                          if self.options.host_time == "counted" else None},
        }


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds < 3600 else \
        f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
