"""Keep measured host time steady while the simulating machine changes speed.

The script's own Python time between CUDA ops is measured on the machine running the
simulation. Shared and frequency-scaled CPUs change speed during a run: the development VMs
of this project switch between two speeds a factor ~2 apart, in spells of a few to a few
hundred milliseconds, and between states that last minutes. Measured time is scaled to the
fastest this machine has been seen to run (remembered across runs in phantom's cache
directory), by its speed now:

- where the launcher starts a pace process beside the ranks (`phantom run --host-pace process`,
  and by default where the machine has a core for it: launcher.launch.pace_mode), the reference
  step's time in that process (engine.pace), against the fastest this machine ran it at
  start-up;
- otherwise (or if that process gives no reading), a ~0.5 ms pure-Python probe, re-run every
  few thousand ops, against the fastest it ran, damped towards this machine's usual speed.
"""
from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

_CLOCK_NS = time.perf_counter_ns  # bound before the simulation patches time
# The clock the script's host time is measured with: this process's CPU time (Simulation).
HOST_CLOCK_NS = time.process_time_ns
PROBE_N = 2_000
# Probe samples averaged into the current speed. The machine's fast and slow spells are about
# as long as the stretch between two samples, so one sample says little about the stretch
# that follows it; the mean time of the last few tracks the share of slow spells (and the mean
# of the times, not of their inverses, is what converts a stretch's measured time).
SPEED_WINDOW = 8
SLOW_STATE = 1.3  # a sample this many times the best counts as the machine's slow state
# How much of the probe's swing around this machine's usual speed reaches the measured time:
# measured time is scaled by best / (recent ** PROBE_STRENGTH * usual ** (1 - PROBE_STRENGTH)).
# The probe over-corrects: repeated runs of one script on the development VM spread their
# charged host time by 31 / 30 / 9% (coefficient of variation; gpt2-124m, hf-llama-tiny,
# Megatron's host-bound 1.7B rank) with the full correction (1.0), by 28 / 12 / 17% with none,
# and by 18 / 17 / 9% at 0.5, with the same mean charge (bench/probe_scaling.py, Session 29
# in bench/README.md). A machine's usual speed is what its level is set by, so the level is
# kept; only the run-to-run and spell-to-spell swing is halved (in logarithm). Only for a run
# of one process: see HostSpeedNormalizer.strength. PHANTOM_PROBE_STRENGTH overrides it (a
# diagnostic, for bench/probe_scaling.py and A/B runs).
PROBE_STRENGTH = 0.5


def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for n <= 1), by numerical integration."""
    if n <= 1:
        return 0.0
    steps, lo, hi = 4000, -8.0, 8.0
    dx = (hi - lo) / steps
    total = 0.0
    for i in range(steps):
        x = lo + (i + 0.5) * dx
        pdf = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        total += x * n * pdf * cdf ** (n - 1) * dx
    return total


def straggler_pace(ranks: int, spread: float) -> float:
    """How much longer the slowest of `ranks` ranks sharing a host takes for the same host work
    than a typical rank, their host times lognormal with sigma `spread`
    (GPUSpec.host_rank_spread).

    Ranks synchronise through their collectives, so a step's host-bound part ends when the
    slowest rank's does. phantom's ranks all charge one leader's measured gaps (SteadyGaps:
    ranks doing the same work must not differ by this machine's noise), which is a typical
    rank; the pace puts the slowest one's back. Every rank runs at it, in lockstep: which
    rank is the slow one is not predictable, and a `--ranks auto` process stands for many.
    The spread was measured among the ranks of one host (two); ranks on other hosts are left
    out (`Simulation.set_world`): how far apart separate hosts run was not measured, and the
    order statistics of many lognormal draws would be an extrapolation."""
    return math.exp(spread * expected_max_normal(ranks)) if ranks > 1 and spread > 0 else 1.0


class _Box:
    def __init__(self, v: int) -> None:
        self.v = v

    def step(self, d: dict) -> int:
        d[self.v & 63] = self.v
        return self.v + len(d)


def _probe_ns(clock=_CLOCK_NS, n: int = PROBE_N) -> int:
    """Nanoseconds for a fixed pure-Python workload (object creation, calls, dicts)."""
    t0 = clock()
    d: dict = {}
    total = 0
    for i in range(n):
        total += _Box(i).step(d)
    return clock() - t0


# The cached best step (timed on one intra-op thread since this key; older ones are dropped).
_STEP_KEY = "best_step_1thread_ns"
_RUNS_KEY = "run_probe_ns"  # recent runs' median probe times: the machine's usual speed
# Calibrations kept per code fingerprint (the cache's keys below); a run charges the median of
# the last HISTORY measurements.
HISTORY = 15
# While a code version has fewer measurements than this here (its first runs on a machine,
# after an install or upgrade), the dispatch-overhead calibration takes FIRST_RUNS_PAIR_FACTOR
# times as many pairs: one measurement of 15 pairs spreads by ~1.3 us per entry on the
# development VM (10.9-15.6 us in 12 runs back to back), of 45 pairs by ~0.7 us (10.0-12.3),
# for 1.6 s more; later runs charge the median of the history, which is steadier anyway.
FIRST_RUNS = 5
FIRST_RUNS_PAIR_FACTOR = 3
# Pairs of blocks a run's start-up calibration measures once the history has FIRST_RUNS
# measurements. The calibration is most of a short run's start-up: 5.0 s with 15 pairs on the
# development VM (2026-11-27; 15.8 s with 45), against ~3 s for everything else, and the test
# suite starts a few hundred runs. What a run charges is the median of the last HISTORY
# measurements, so 8 pairs' wider spread (~1.4x one measurement's) narrows again there.
CALIBRATION_PAIRS = 8
# Once a code version has HISTORY measurements here, one run in REMEASURE_EVERY measures again
# and the others charge the history's median (Simulation._recent_calibration).
REMEASURE_EVERY = 4
KEPT_VERSIONS = 4  # code versions whose histories the cache keeps (the most recent)
# The training step's shape in the dispatch-overhead calibration (batch, width). The overhead is
# the fake step's gaps minus the same step on CPU tensors, per handler entry: every microsecond
# the CPU kernels spend computing is taken off that difference, so it came out short by it, and
# each gap of a run kept it. At the reference step's 16x64 the CPU step's arithmetic is ~110 of
# its ~670 us on the development VM (1x8: ~560 us), ~1.7 us per entry (2026-11-28). The fake side
# does no arithmetic at any shape (its handler's time is not in the gaps).
CALIBRATION_SHAPE = (1, 8)
DISPATCH_OVERHEAD = "dispatch_overhead_ns"
WAKE_PENALTY = "wake_penalty_ns"
LIST_INPUT = "list_input_ns"  # per tensor of a list argument (Simulation._measure_list_costs)
LIST_OUTPUT = "list_output_ns"  # per tensor of a returned list
RELEASE = "release_ns"  # per storage freed (Simulation._measure_release_cost)
API_CALL = "api_call_ns"  # per simulated runtime call (Simulation._measure_api_overhead)
_HISTORY_KEYS = (DISPATCH_OVERHEAD, WAKE_PENALTY, LIST_INPUT, LIST_OUTPUT, RELEASE, API_CALL)


def code_fingerprint() -> str:
    """Python, torch and phantom's own code: what the dispatch overhead and wake-up cost of
    this machine depend on besides its speed (the cached measurements of another version do
    not count)."""
    import hashlib

    import torch

    digest = hashlib.sha1(f"{sys.version}|{torch.__version__}".encode())
    for path in sorted(Path(__file__).resolve().parent.parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _with_newest(by_code: dict[str, list], fingerprint: str, values: list[float]) -> dict[str, list]:
    """One kind's histories by code version with `fingerprint`'s set to the last HISTORY of
    `values` and made the newest version. A few versions are kept: one machine may alternate
    between two torch installs (CI's CPU and CUDA builds), and each would otherwise restart the
    other's."""
    others = [(code, kept) for code, kept in by_code.items() if code != fingerprint]
    return dict(others[-(KEPT_VERSIONS - 1):] + [(fingerprint, values[-HISTORY:])])


class HostSpeedNormalizer:
    """`factor` converts this machine's measured ns into ns at its best observed speed."""

    def __init__(self, cache_dir: Path | None, clock=_CLOCK_NS,
                 pace: Callable[[], float | None] | None = None) -> None:
        self._clock = clock  # the clock host time is measured with (wall or CPU time)
        # The pace process's reading (engine.pace.read_pace: the reference step's ns now, or
        # None): where there is one, it sets the factor, and the probe only reports.
        self._pace = pace
        self._pace_samples: list[float] = []
        # Keyed by CPU model as well as host name: cloud VMs often share a host name ("vm"),
        # and a best speed remembered from a faster CPU would make this one look that fast.
        self._cache = cache_dir / f"host-probe-{platform.node()}-{_cpu_tag()}.json" if cache_dir else None
        self.best_ns, self.best_step_ns, self._histories, self._runs = self._load_best()
        self._settled: list[tuple[str, str, float]] = []  # this process's measurements: saved
        # The ranks of a multi-process run (the launcher's run id) share this machine's cores,
        # and the probe then reads their contention as well: the published Megatron 1.7B row
        # (48 ranks, `--ranks auto`) took 557 and 596 ms an iteration with the full correction
        # and 716 and 700 damped, interleaved (Session 30 in bench/README.md). So such a run
        # takes the correction in full, and stays out of the usual speed of lone runs.
        self._alone = not os.environ.get("TORCHELASTIC_RUN_ID", "").startswith("phantom-")
        self.strength = float(os.environ.get("PHANTOM_PROBE_STRENGTH",
                                             PROBE_STRENGTH if self._alone else 1.0))
        self._run_key = f"{os.getpid()}-{time.time_ns()}"  # this run's entry in _runs
        self.factor = 1.0
        self.paced = False  # whether the last sample's factor came from the pace process
        self._samples: list[float] = []  # every sample of the run: the speed, variation()
        _probe_ns(clock)  # warm the code path
        self.sample()

    def sample(self) -> float:
        # The mean of three probes against the fastest single probe: gaps are scaled to this
        # machine's best speed, its usual slowness taken out in full and its swings around
        # that in part (strength; flickers of a fraction of a millisecond included); the
        # node's typical slowdown is put back by the host speed (GPUSpec.host_mean_slowdown),
        # not this machine's. Saved at each sample: a run can end at any point.
        probes = [_probe_ns(self._clock) for _ in range(3)]
        current = sum(probes) / 3
        self.best_ns = min(probes) if self.best_ns is None else min(self.best_ns, min(probes))
        self._samples.append(current)
        self._runs[self._run_key] = statistics.median(self._samples)
        self._save_best()
        pace = self._read_pace()
        if pace is not None:
            self.factor = self.best_step_ns / pace
        else:
            recent = self._samples[-SPEED_WINDOW:]
            self.factor = self._factor(sum(recent) / len(recent))
        return self.factor

    def sample_now(self) -> float:
        """Sample, and return this sample's factor alone (not the probe window's)."""
        self.sample()
        if self.paced:
            return self.factor
        return self._factor(self._samples[-1])

    def drop_pace(self) -> None:
        """Set the factor by the probe for the rest of the run (the pace process gave no
        reading by the calibration, which must convert as the run's gaps do)."""
        self._pace = None
        self.paced = False

    def _read_pace(self) -> float | None:
        """The pace process's reading now, where there is one and a best step to set it
        against; None: the probe sets the factor."""
        pace = self._pace() if self._pace is not None and self.best_step_ns is not None else None
        self.paced = pace is not None
        if self.paced:
            self._pace_samples.append(pace)
        return pace

    def usual_ns(self) -> float:
        """This machine's usual probe time: the median over the recent runs here (this one's
        median so far among them)."""
        return statistics.median(list(self._runs.values())[-HISTORY:])

    def _factor(self, probe_ns: float) -> float:
        """The scale of time measured while the probe took `probe_ns`, damped towards the
        machine's usual speed (strength)."""
        usual = self.usual_ns()
        return self.best_ns / (probe_ns ** self.strength * usual ** (1 - self.strength))

    def variation(self) -> dict:
        """How far from its best speed this machine ran over the run's probe samples: the
        honest size of the uncertainty in measured host time (see bench/README.md)."""
        slowdowns = [t / self.best_ns for t in self._samples]
        return {"samples": len(slowdowns),
                "mean_slowdown": sum(slowdowns) / len(slowdowns),
                "max_slowdown": max(slowdowns),
                "slow_share": sum(x > SLOW_STATE for x in slowdowns) / len(slowdowns),
                **self._pace_variation()}

    def _pace_variation(self) -> dict:
        """The pace process's readings against this machine's best reference step: how slow
        it ran PyTorch's host path over the run (what the factor took out)."""
        if not self._pace_samples or self.best_step_ns is None:
            return {"pace_samples": 0}
        slowdowns = [t / self.best_step_ns for t in self._pace_samples]
        return {"pace_samples": len(slowdowns), "pace_mean_slowdown": sum(slowdowns) / len(slowdowns),
                "pace_max_slowdown": max(slowdowns)}

    def record_step(self, step_ns: float) -> float:
        """Fold in a timing of `training_step` on CPU; returns the fastest seen on this machine
        (its best speed). Not normalised by the probe: the probe's best is a single extreme
        value, and a step scaled by it came out 3x too fast on a loaded machine (tried)."""
        if self.best_step_ns is None or step_ns < self.best_step_ns:
            self.best_step_ns = step_ns
            self._save_best()
        return self.best_step_ns

    def settle(self, kind: str, fingerprint: str, value_ns: float) -> float:
        """Fold a measurement of `kind` (DISPATCH_OVERHEAD: per handler entry; WAKE_PENALTY:
        per wake-up; ns at this machine's best speed) into the last HISTORY ones of the same
        code here, and return their median. One dispatch-overhead measurement spreads by
        +-1.5 us from run to run (13-18 us seen), a few ms a step in a host-bound run; the
        median of the recent ones is the same quantity measured more times, and runs that
        compare two settings compare like with like."""
        # what other processes settled since this one started, then this measurement
        self._histories.update(self._saved_histories(self._read_cache()))
        self._settled.append((kind, fingerprint, value_ns))
        self._histories[kind] = _with_newest(self._histories.get(kind, {}), fingerprint,
                                             self._kept(kind, fingerprint) + [value_ns])
        self._save_best()
        return statistics.median(self._histories[kind][fingerprint])

    def recent(self, kind: str, fingerprint: str) -> float | None:
        """The median of this machine's last HISTORY measurements of `kind` for this code
        version, or None while it holds fewer."""
        kept = self._kept(kind, fingerprint)[-HISTORY:]
        return statistics.median(kept) if len(kept) >= HISTORY else None

    def _kept(self, kind: str, fingerprint: str) -> list[float]:
        """The usable measurements of `kind` for this code version, oldest first."""
        return [v for v in self._histories.get(kind, {}).get(fingerprint, [])
                if isinstance(v, (int, float)) and math.isfinite(v)]

    def known(self, kind: str, fingerprint: str) -> int:
        """How many measurements of `kind` this machine holds for this code version."""
        return len(self._histories.get(kind, {}).get(fingerprint, []))

    def _read_cache(self) -> dict:
        try:
            saved = json.loads(self._cache.read_text()) if self._cache else {}
        except (OSError, ValueError):
            return {}
        return saved if isinstance(saved, dict) else {}

    def _load_best(self) -> tuple[int | None, float | None, dict[str, dict], dict[str, float]]:
        saved = self._read_cache()
        probe, step = saved.get("best_probe_ns"), saved.get(_STEP_KEY)
        return (int(probe) if _positive(probe) else None, float(step) if _positive(step) else None,
                self._saved_histories(saved), self._saved_runs(saved))

    @staticmethod
    def _saved_histories(saved: dict) -> dict[str, dict]:
        histories = {}
        for kind in _HISTORY_KEYS:
            by_code = saved.get(kind)
            if isinstance(by_code, dict):
                histories[kind] = {k: v for k, v in by_code.items() if isinstance(v, list)}
        return histories

    @staticmethod
    def _saved_runs(saved: dict) -> dict[str, float]:
        runs = saved.get(_RUNS_KEY)
        if not isinstance(runs, dict):
            return {}
        return {k: float(v) for k, v in list(runs.items())[-HISTORY:] if _positive(v)}

    def _save_best(self) -> None:
        if self._cache is None:
            return
        try:
            self._cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._cache.with_suffix(f".{os.getpid()}.tmp")
            # Other runs side by side (and the other ranks of this one) add theirs meanwhile:
            # keep them. A history is written back only where this process settled a
            # measurement: every rank saves at each speed sample, and the ranks that did not
            # measure wrote back the histories they had read at start-up, which dropped the
            # measuring rank's new value (a 2-rank run's calibration was never kept).
            saved = self._read_cache()
            runs = {**self._saved_runs(saved), **self._runs}
            histories = self._saved_histories(saved)
            for kind, fingerprint, value in self._settled:  # ... unless already there
                by_code = histories.get(kind, {})
                values = by_code.get(fingerprint, [])
                histories[kind] = _with_newest(by_code, fingerprint,
                                               values if value in values else values + [value])
            best = saved.get("best_probe_ns")
            if _positive(best) and (self.best_ns is None or best < self.best_ns):
                self.best_ns = int(best)
            best_step = saved.get(_STEP_KEY)
            if _positive(best_step) and (self.best_step_ns is None or best_step < self.best_step_ns):
                self.best_step_ns = float(best_step)
            runs[self._run_key] = runs.pop(self._run_key)  # this run last: the newest
            self._runs = dict(list(runs.items())[-HISTORY:])
            saved_runs = self._runs if self._alone else \
                {k: v for k, v in self._runs.items() if k != self._run_key}
            tmp.write_text(json.dumps({"best_probe_ns": self.best_ns, "probe_n": PROBE_N,
                                       _STEP_KEY: self.best_step_ns, **histories,
                                       _RUNS_KEY: saved_runs}))
            os.replace(tmp, self._cache)
        except OSError:
            pass  # a read-only cache only costs the memory across runs


class SteadyGaps:
    """Host gaps of a training loop's steady state: the mean of the same point of the last
    few iterations.

    A training loop runs the same host code every iteration, so the gap that ends in the n-th
    call of op X within an iteration is the same work each time; what changes between
    iterations is this machine: spells at half speed the speed probe misses, other processes
    on the same cores (`--ranks all` runs many ranks on few cores), page faults. One gap
    measured once carries all of that; the mean of its last WINDOW sightings (each already
    scaled by the speed probe) has the same expectation and a fraction of the spread. A gap
    far above that mean (GUARD_RATIO and GUARD_NS) is new work at the site (a log line, a
    checkpoint): it is charged as measured and not remembered, unless the site's last sighting
    was far above too; one far below it, or two far above it in a row, mean the earlier
    sightings were not this site's usual work, and the site starts afresh.

    The mean is over *earlier* iterations only: a sighting is folded in when its iteration
    ends (`new_iteration`). So what an iteration charges at each steady site is fixed when it
    begins (`means`), and ranks that do the same work can all charge what one of them
    measured (`use_shared`): with every rank a process on a few shared cores, each rank's
    own gaps carry its own share of the contention, and every collective waits for the
    slowest of them (`--ranks all` came out up to 22% slower than one process per class).

    The mean, not the median or the fastest: the dispatch overhead taken off every gap is
    measured over whole blocks of ops, jitter included, so the gaps must keep theirs. Gaps
    are mostly that overhead, and the script's own time is what is left after taking it off:
    per-site minimums (medians) came out 20-30% (10-20%) under the means before the
    subtraction, and a host-bound step 1.3x (2x) faster than with means after it (tried).

    Sites are counted per iteration, so an op inserted in one iteration shifts only the
    later calls of that same op. Without iterations (no optimizer step) every site is new:
    gaps are charged as measured.
    """

    WINDOW = 5
    GUARD_RATIO = 4.0  # the slow spells seen here and on the GPU hosts stay under 2.6x
    GUARD_NS = 200_000.0  # shorter extras are noise or too small to matter
    # ... for a rank charging its leader's gaps (use_shared). It runs on the cores left over by
    # the leaders, several ranks to a core, where a gap now and then takes milliseconds more
    # CPU time than its usual (cache refills after a switch, and the hypervisor's steal time,
    # which a guest counts as its process's CPU time: 0.3-4.4 ms seen, tensor-parallel steps,
    # 8 ranks on 2 cores). At 200 us every rank "found new work" a few times an iteration and
    # each collective waited for the unluckiest. Work that every rank of the class does shows
    # on the leader, whom the collectives wait for anyway; only work this rank alone does
    # needs its own detection, and below this it cannot be told from this machine's noise.
    SHARED_GUARD_NS = 20_000_000.0
    MAX_SITES = 1 << 20  # memory bound for runs that never mark an iteration

    def __init__(self) -> None:
        self._recent: dict[tuple, list[float]] = {}  # site key -> sightings of past iterations
        self._staged: list[tuple[tuple, float | None]] = []  # this iteration's (key, gap or restart)
        self._count: dict[object, int] = {}
        self._shared: dict[tuple, float] | None = None  # another rank's means, by site name
        self._names: dict[object, str] = {}
        self._above: set[tuple] = set()  # sites charged as new work this iteration
        self._above_before: set[tuple] = set()  # ... and in the last one
        self.steady = 0  # gaps charged at their site's recent mean
        self.measured = 0  # gaps charged as measured (first sighting, or new work)
        self.new_work = 0  # of those, sightings far above their site's mean
        self.new_work_ns = 0.0  # and what they were charged
        self._first_folded = False  # whether the first iteration has ended (new_iteration)

    def new_iteration(self) -> None:
        """An iteration ended: fold its sightings into the windows.

        The first iteration's are dropped: it runs from the script's start, so its n-th call
        of an op may be set-up work (moving the model to the device, a framework's first-call
        paths) where later iterations have the loop's own. Remembered, a set-up gap a few
        times a loop gap was charged as the site's "steady" mean in the next iterations (a
        Lightning DDP step came out 1.4 s long once, against ~40 ms before and after)."""
        if not self._first_folded:
            self._first_folded = True
            self._staged.clear()
        for key, gap in self._staged:
            recent = self._recent.get(key)
            if recent is None:
                if len(self._recent) >= self.MAX_SITES:
                    continue
                recent = self._recent[key] = []
            if gap is None:  # the site restarts (see typical)
                recent.clear()
                continue
            recent.append(gap)
            if len(recent) > self.WINDOW:
                del recent[0]
        self._staged.clear()
        self._count.clear()
        self._shared = None
        self._above_before, self._above = self._above, set()

    def means(self) -> dict[tuple[str, int], float]:
        """What the coming iteration charges at each steady site, by (site name, n): a form
        another process running the same code can look its own sites up in."""
        return {(self._name(site), n): sum(r) / len(r) for (site, n), r in self._recent.items() if r}

    def use_shared(self, means: dict[tuple[str, int], float]) -> None:
        """Charge this iteration's steady sites at `means` (another rank's `means()`) instead of
        this process's own; this process's sightings, against its own earlier ones, still
        decide what is new work (charged as the leader's mean plus the excess)."""
        self._shared = means

    def typical(self, site: object, gap: float) -> float:
        """The gap to charge at `site`, given this sighting's `gap` (same units)."""
        n = self._count.get(site, 0)
        self._count[site] = n + 1
        key = (site, n)
        own = self._own_mean(key)
        mean = own if self._shared is None else self._shared.get((self._name(site), n))
        if mean is None:
            self._stage(key, gap)
            self.measured += 1
            return gap
        # This process's sighting is judged against its own past ones; charged, a sighting
        # out of line keeps its distance from them: `mean + (gap - ref)` is the sighting
        # itself when the means are this process's own.
        ref = mean if own is None else own
        out_of_line = mean + (gap - ref)
        guard_ns = self.GUARD_NS if self._shared is None else self.SHARED_GUARD_NS
        if gap > ref * self.GUARD_RATIO and gap - ref > guard_ns:
            self.measured += 1
            if key in self._above_before:
                # far above twice running: not new work but a site whose earlier sightings
                # were something else (the count before the first iteration mark includes
                # set-up calls); kept, it charged every later sighting as measured
                self._stage(key, None)
                self._stage(key, gap)
                return out_of_line
            self._above.add(key)
            self.new_work += 1
            self.new_work_ns += out_of_line
            return out_of_line
        if ref > gap * self.GUARD_RATIO and ref - gap > self.GUARD_NS:
            # the earlier sightings held one-off work (lazy initialisation in the first
            # iteration, a checkpoint): averaged in, it spread over the next iterations and
            # made ZeRO-3's steps 5x slow (seen); start the site afresh
            self._stage(key, None)
            self._stage(key, gap)
            self.measured += 1
            return max(0.0, out_of_line)
        self._stage(key, gap)
        self.steady += 1
        return mean

    def _stage(self, key: tuple, gap: float | None) -> None:
        if len(self._staged) < self.MAX_SITES:  # a run that never ends an iteration
            self._staged.append((key, gap))

    def _own_mean(self, key: tuple) -> float | None:
        recent = self._recent.get(key)
        return sum(recent) / len(recent) if recent else None

    def _name(self, site: object) -> str:
        name = self._names.get(site)
        if name is None:
            name = self._names[site] = str(site)
        return name

    def share(self) -> float | None:
        total = self.steady + self.measured
        return self.steady / total if total else None


def training_step(device: str, batch: int = 16, width: int = 64) -> Callable[[], None]:
    """A tiny training step on `device` (linear, layer norm, GELU, loss, backward, foreach
    AdamW on `batch` x `width` tensors): framework overhead with little arithmetic. On CPU
    tensors at the default 16x64 it is the reference step (`reference_step_ns`), which measures
    how fast a machine runs PyTorch's Python and C++ host path (the GPU presets' `host_step_ns`
    were timed at that shape: keep it); phantom also runs it on fake CUDA tensors, against the
    CPU one, to measure its own dispatch overhead (Simulation._measure_host_calibration, at
    CALIBRATION_SHAPE)."""
    import torch
    import torch.nn.functional as F

    lin1 = torch.nn.Linear(width, width, device=device)
    lin2 = torch.nn.Linear(width, width, device=device)
    norm = torch.nn.LayerNorm(width, device=device)
    params = [*lin1.parameters(), *lin2.parameters(), *norm.parameters()]
    opt = torch.optim.AdamW(params, foreach=True)

    def step() -> None:
        x = torch.randn(batch, width, device=device)
        loss = lin2(F.gelu(norm(lin1(x)))).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def time_steps(step: Callable[[], None], repeats: int = 5, steps: int = 4, clock=_CLOCK_NS) -> float:
    """Nanoseconds per call of `step`: the fastest of `repeats` runs of `steps` calls
    (interruptions only make a run slower)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        for _ in range(steps):
            step()
        best = min(best, (clock() - t0) / steps)
    return best


# The other process of `wake_penalty_ns`: on the same core, each time it is woken it walks
# ~2 MB of Python objects (12,000 lists of 8), about a server core's private L2, as another
# rank or the coordinator does while a rank waits on its collective. What it evicts sets the
# penalty: walking ~0.6 MB gave 1.7 us on the development VM, ~2 MB 5 us, ~7 MB 26 us and
# ~25 MB 68 us (session 18). A rank of a real 2-rank run under phantom measured 9-21 us on
# session 12's VM and 6-9 us on session 18's, where this gave 4-6 us: this size takes off
# most of the cost, not more than all of it (bench/collective_wake_cost.py).
_WAKE_PARTNER = r"""
import os, sys
core = int(sys.argv[1])
if core >= 0 and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {core})
rows = [[i] * 8 for i in range(60_000)]
read, write = sys.stdin.buffer.read, sys.stdout.buffer
while read(1) == b"x":
    total = 0
    for row in rows[::5]:
        total += row[0]
    write.write(b"y")
    write.flush()
"""


def _collective_call_path() -> Callable[[], None]:
    """The host code a script runs around a collective (torch.distributed's argument checks
    and options on a tensor): what a rank runs right after its coordinator round trip."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    t = torch.ones(1024)

    def path() -> None:
        c10d._check_single_tensor(t, "tensor")
        c10d._rank_not_in_group(None)
        t.is_complex(), t.is_contiguous(), t.numel(), t.dtype, t.device
        opts = c10d.AllreduceOptions()
        opts.reduceOp = c10d.ReduceOp.SUM
        opts.timeout = c10d.default_pg_timeout

    return path


def wake_penalty_ns(clock=_CLOCK_NS, samples: int = 120, reply_timeout_s: float = 2.0) -> float | None:
    """How much longer, in this machine's ns, a rank's host code runs right after the rank
    slept in a blocking wait while another process ran on its core, than the same code in
    a steady loop: the median over `samples` of each, on one core with a partner process
    that walks memory while this one waits. None where it cannot be measured (no CPU
    affinity control, as on macOS; a partner that fails, or does not answer within
    `reply_timeout_s`).

    Under phantom every collective blocks the rank process in its coordinator round trip;
    a real GPU host never sleeps there (the NCCL enqueue returns at once), so the first run
    of each code path after the wait, slow on cold caches, is phantom's cost, not the
    script's. Measured on this VM in session 12 (`bench/collective_wake_cost.py`): 9-21 us
    for torch's code around a collective call, against 1-3 us for plain arithmetic; paid
    once per wake-up, not per repetition of the code."""
    import select
    import subprocess

    if not hasattr(os, "sched_getaffinity"):
        return None  # without pinning, the partner may run elsewhere: another quantity
    try:
        path = _collective_call_path()
        path()
        affinity = os.sched_getaffinity(0)
        core = min(affinity)
        # -I -S: no user site or sitecustomize in the partner; its errors are not the run's
        partner = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WAKE_PARTNER, str(core)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
    except Exception:  # noqa: BLE001 (no correction rather than a failed run)
        return None
    try:
        os.sched_setaffinity(0, {core})
        steady, woken = [], []
        for _ in range(samples):
            path()
            t0 = clock()
            path()
            steady.append(clock() - t0)
            partner.stdin.write(b"x")
            partner.stdin.flush()
            ready, _, _ = select.select([partner.stdout], [], [], reply_timeout_s)
            if not ready or os.read(partner.stdout.fileno(), 1) != b"y":
                return None
            t0 = clock()
            path()
            woken.append(clock() - t0)
        return max(0.0, statistics.median(woken) - statistics.median(steady))
    except Exception:  # noqa: BLE001
        return None
    finally:
        _stop(partner)
        try:
            os.sched_setaffinity(0, affinity)
        except OSError:
            pass


def _stop(partner) -> None:
    """End `wake_penalty_ns`'s partner process and close its pipes, whatever state it is in."""
    try:
        partner.stdin.write(b"q")
        partner.stdin.flush()
    except Exception:  # noqa: BLE001 (it may have died)
        pass
    for pipe in (partner.stdin, partner.stdout):
        try:
            pipe.close()
        except Exception:  # noqa: BLE001
            pass
    try:
        partner.wait(timeout=5)
    except Exception:  # noqa: BLE001
        partner.kill()
        partner.wait()


# Calibrations measured while other processes competed for this machine's CPUs are kept in a
# history of their own (the fingerprint with this suffix). On the 2-vCPU development VM one busy
# process beside the calibration lowered its per-entry overhead from 14.5-15.7 to 10.1-11.0 us
# (2026-11-28, three runs each): the history of the code version before it held such values
# (median 8.2 us, measured by test-suite runs on both cores and by ranks calibrating while their
# peers still started up), and every later run charged that median: op-dense layer code came out
# ~1.5-2x its real host time (bench/README.md, Megatron, Session 42).
CONTENDED_SUFFIX = "+contended"
PACED_SUFFIX = "+paced"  # ... and those converted by the pace process (engine.pace), likewise


def other_runnable_tasks(samples: int = 7, interval_s: float = 0.002) -> int | None:
    """How many tasks besides this one are runnable on the machine: the median over `samples`
    reads of /proc/loadavg's running count (which counts the reader); None where there is no
    /proc/loadavg."""
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            return None
        if i + 1 < samples:
            time.sleep(interval_s)
    return int(statistics.median(counts))


def cpu_contended(others: int | None = None) -> bool:
    """Whether other runnable tasks hold at least half of the CPUs this process may run on (at
    least one): a host-path calibration measured now would not be this machine's alone."""
    if others is None:
        others = other_runnable_tasks()
    if others is None:
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return others >= max(1, cpus // 2)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform says elsewhere."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    # Arm: no model name line; the implementer and part numbers identify the core
    arm = [line.split(":", 1)[1].strip() for line in lines
           if line.startswith(("CPU implementer", "CPU part"))][:2]
    if arm:
        return "arm " + " ".join(arm)
    return platform.processor() or "unknown"


def _cpu_tag() -> str:
    import hashlib

    return hashlib.sha1(cpu_model().encode()).hexdigest()[:8]


def reference_step_ns(rounds: int = 15, clock=_CLOCK_NS) -> float:
    """This machine's time for the CPU `training_step`: the fastest of `rounds` timings, on
    one intra-op thread as on the GPU hosts (the caller's setting is restored)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        step = training_step("cpu")
        step()
        return min(time_steps(step, clock=clock) for _ in range(rounds))
    finally:
        torch.set_num_threads(threads)


def measure_reference(rounds: int = 15) -> dict:
    """The numbers a GPU preset's `host_step_ns` comes from: the CPU training step's time and
    the pure-Python probe, fastest of `rounds` (run on the GPU machine's host, idle)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as reference_step_ns times it
    try:
        step = training_step("cpu")
        step()
        steps = [time_steps(step) for _ in range(rounds)]
    finally:
        torch.set_num_threads(threads)
    probes = [_probe_ns() for _ in range(rounds)]
    return {"host_step_ns": round(min(steps)), "host_step_ns_median": round(sorted(steps)[len(steps) // 2]),
            "probe_ns": min(probes), "cpu": cpu_model(), "python": platform.python_version(),
            "torch": torch.__version__, "node": platform.node()}


if __name__ == "__main__":  # python -m phantom.engine.host: this machine's reference numbers
    print(json.dumps(measure_reference(), indent=1))
