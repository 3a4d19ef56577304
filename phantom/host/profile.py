"""The script's measured host time, saved per segment, to be charged again exactly.

A `--host-time measured` run with `--save-host-profile DIR` writes, for each rank it simulates,
the node-ns it charged for every segment of the script's own Python, in order, with the name
of the call that ended it (`rank<N>.npz`). A `--host-time counted` run with `--host-profile DIR`
charges the same segments instead of measuring: together with the shipped table's prices for
torch's work, its host time does not depend on this machine at all.

Segments are matched iteration by iteration (the segment that ends at the optimizer step's
"iteration" mark closes one), by the call that ended them and their order among that call's
segments in the iteration: the n-th segment ending at `Tensor.backward` in iteration k is
charged what the saved run's n-th one there took. An identical script charges exactly the
saved sequence; a run whose sequence departs (other arguments, another layout in a sweep)
stays aligned at each iteration, and a segment the saved iteration has no counterpart for is
charged the median of that call's segments in the saved steady iterations (else the median of
all their segments); the report counts those. The counted run's k-th stretch between iteration
marks is matched against the saved run's k-th (the stretch after the last mark is the script's
end, so the same script charges its end exactly); stretches past the saved run's count are
matched against its last full iteration.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np


class HostProfileError(ValueError):
    """A saved host profile is missing or unreadable."""


def rank_file(directory: Path, rank: int) -> Path:
    return Path(directory) / f"rank{rank}.npz"


class ProfileWriter:
    """Collects one rank's charged script segments (`add`) and writes them (`save`)."""

    def __init__(self) -> None:
        self._names: dict[str, int] = {}
        self._sites: list[int] = []
        self._ns: list[float] = []

    def add(self, site: str, ns: float) -> None:
        index = self._names.setdefault(site, len(self._names))
        self._sites.append(index)
        self._ns.append(ns)

    def save(self, directory: Path, rank: int) -> Path:
        path = rank_file(directory, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, names=np.array(list(self._names), dtype=str),
                            sites=np.array(self._sites, dtype=np.int32),
                            ns=np.array(self._ns, dtype=np.float64))
        return path


ITERATION_SITE = "iteration"
"""The site of the segment that ends an iteration (Simulation.mark_iteration)."""


class ProfileReader:
    """One rank's saved segments, charged iteration by iteration (`next`; module docstring)."""

    def __init__(self, directory: Path, rank: int) -> None:
        path = rank_file(directory, rank)
        if not path.exists():
            path = rank_file(directory, 0)  # a rank the saving run did not simulate itself
        try:
            with np.load(path) as data:
                names = [str(n) for n in data["names"]]
                sites = [names[i] for i in data["sites"].tolist()]
                ns = data["ns"].tolist()
        except FileNotFoundError:
            raise HostProfileError(f"--host-profile {directory}: no {path.name} there; save one with "
                                   f"--host-time measured --save-host-profile {directory}") from None
        except (OSError, ValueError, KeyError) as e:
            raise HostProfileError(f"--host-profile {directory}: {path.name} is not a host profile "
                                   f"({type(e).__name__}: {e})") from None
        self.path = path
        self.segments = len(sites)
        # regions[k]: site -> the ns of its segments in order, for the k-th stretch between
        # iteration marks (0: start-up and the first iteration; the last: after the last mark)
        self._regions: list[dict[str, list[float]]] = [{}]
        for site, value in zip(sites, ns):
            self._regions[-1].setdefault(site, []).append(value)
            if site == ITERATION_SITE:
                self._regions.append({})
        full = max(1, len(self._regions) - 1)  # regions that end at an iteration mark
        steady = self._regions[1:full] or self._regions[:full]
        self._median = _site_medians(steady)
        # A call the steady iterations never ended at is charged a typical steady segment, not
        # its start-up sightings (`torch.device` once, with the model's build behind it).
        every = [v for region in steady for values in region.values() for v in values]
        self._typical = statistics.median(every) if every else 0.0
        self.rewind()

    def rewind(self) -> None:
        """Charge from the first saved segment again (the script starts now)."""
        self._region = 0
        self._seen: dict[str, int] = {}
        self.matched = self.departed = 0

    def next(self, site: str) -> float:
        marks = len(self._regions) - 1
        region = self._region if self._region <= marks else max(0, marks - 1)
        saved = self._regions[region].get(site, ())
        n = self._seen.get(site, 0)
        self._seen[site] = n + 1
        if n < len(saved):
            self.matched += 1
            ns = saved[n]
        else:
            self.departed += 1
            ns = self._median.get(site, self._typical)
        if site == ITERATION_SITE:
            self._region += 1
            self._seen = {}
        return ns

    def report(self) -> dict:
        return {"file": str(self.path), "segments": self.segments, "matched": self.matched,
                "departed": self.departed}


def _site_medians(regions: list[dict[str, list[float]]]) -> dict[str, float]:
    by_site: dict[str, list[float]] = {}
    for region in regions:
        for site, values in region.items():
            by_site.setdefault(site, []).extend(values)
    return {site: statistics.median(v) for site, v in by_site.items()}
