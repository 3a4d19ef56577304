"""This machine's speed: the probe, the pace reading, and the cache of measurements.

Keeps measured host time steady while the simulating machine changes speed.

The script's own Python time between CUDA ops is measured on the machine running the
simulation. Shared and frequency-scaled CPUs change speed during a run: a cloud VM can switch
between two speeds a factor ~2 apart, in spells of a few to a few hundred milliseconds, and
between states that last minutes. Measured time is scaled to the
fastest this machine has been seen to run (remembered across runs in phantom's cache
directory), by its speed now:

- where the launcher starts a pace process beside the ranks (`phantom run --host-pace process`,
  and by default where the machine has a core for it: launcher.launch.pace_mode), the reference
  step's time in that process (host.pace), against the fastest this machine ran it at
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

from phantom.host.machine import CLOCK_NS, PROBE_N, cpu_tag, probe_ns

# Probe samples averaged into the current speed. The machine's fast and slow spells are about
# as long as the stretch between two samples, so one sample says little about the stretch
# that follows it; the mean time of the last few tracks the share of slow spells (and the mean
# of the times, not of their inverses, is what converts a stretch's measured time).
SPEED_WINDOW = 8
SLOW_STATE = 1.3  # a sample this many times the best counts as the machine's slow state
# How much of the probe's swing around this machine's usual speed reaches the measured time:
# measured time is scaled by best / (recent ** PROBE_STRENGTH * usual ** (1 - PROBE_STRENGTH)).
# The probe over-corrects: repeated runs of one script on a 2-core VM spread their
# charged host time by 31 / 30 / 9% (coefficient of variation; gpt2-124m, hf-llama-tiny,
# Megatron's host-bound 1.7B rank) with the full correction (1.0), by 28 / 12 / 17% with none,
# and by 18 / 17 / 9% at 0.5, with the same mean charge (bench/probes/probe_scaling.py).
# A machine's usual speed is what its level is set by, so the level is
# kept; only the run-to-run and spell-to-spell swing is halved (in logarithm). Only for a run
# of one process: see HostSpeedNormalizer.strength. PHANTOM_PROBE_STRENGTH overrides it (a
# diagnostic, for bench/probes/probe_scaling.py and A/B runs).
PROBE_STRENGTH = 0.5


# The cached best step (timed on one intra-op thread since this key; older ones are dropped).
_STEP_KEY = "best_step_1thread_ns"
_RUNS_KEY = "run_probe_ns"  # recent runs' median probe times: the machine's usual speed
# Calibrations kept per code fingerprint (the cache's keys below); a run charges the median of
# the last HISTORY measurements.
HISTORY = 15
KEPT_VERSIONS = 4  # code versions whose histories the cache keeps (the most recent)
DISPATCH_OVERHEAD = "dispatch_overhead_ns"
WAKE_PENALTY = "wake_penalty_ns"
LIST_INPUT = "list_input_ns"  # per tensor of a list argument (calibration._measure_list_costs)
LIST_OUTPUT = "list_output_ns"  # per tensor of a returned list
RELEASE = "release_ns"  # per storage freed (calibration._measure_release_cost)
API_CALL = "api_call_ns"  # per simulated runtime call (calibration._measure_api_overhead)
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

    def __init__(self, cache_dir: Path | None, clock=CLOCK_NS,
                 pace: Callable[[], float | None] | None = None) -> None:
        self._clock = clock  # the clock host time is measured with (wall or CPU time)
        # The pace process's reading (host.pace.read_pace: the reference step's ns now, or
        # None): where there is one, it sets the factor, and the probe only reports.
        self._pace = pace
        self._pace_samples: list[float] = []
        # Keyed by CPU model as well as host name: cloud VMs often share a host name ("vm"),
        # and a best speed remembered from a faster CPU would make this one look that fast.
        self._cache = cache_dir / f"host-probe-{platform.node()}-{cpu_tag()}.json" if cache_dir else None
        self.best_ns, self.best_step_ns, self._histories, self._runs = self._load_best()
        self._settled: list[tuple[str, str, float]] = []  # this process's measurements: saved
        # The ranks of a multi-process run (the launcher's run id) share this machine's cores,
        # and the probe then reads their contention as well: the published Megatron 1.7B row
        # (48 ranks, `--ranks auto`) took 557 and 596 ms an iteration with the full correction
        # and 716 and 700 damped, interleaved. So such a run
        # takes the correction in full, and stays out of the usual speed of lone runs.
        self._alone = not os.environ.get("TORCHELASTIC_RUN_ID", "").startswith("phantom-")
        self.strength = float(os.environ.get("PHANTOM_PROBE_STRENGTH",
                                             PROBE_STRENGTH if self._alone else 1.0))
        self._run_key = f"{os.getpid()}-{time.time_ns()}"  # this run's entry in _runs
        self.factor = 1.0
        self.paced = False  # whether the last sample's factor came from the pace process
        self._samples: list[float] = []  # every sample of the run: the speed, variation()
        probe_ns(clock)  # warm the code path
        self.sample()

    def sample(self) -> float:
        # The mean of three probes against the fastest single probe: gaps are scaled to this
        # machine's best speed, its usual slowness taken out in full and its swings around
        # that in part (strength; flickers of a fraction of a millisecond included); the
        # node's typical slowdown is put back by the host speed (GPUSpec.host_mean_slowdown),
        # not this machine's. Saved at each sample: a run can end at any point.
        probes = [probe_ns(self._clock) for _ in range(3)]
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
        honest size of the uncertainty in measured host time (docs/host-time.md)."""
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


