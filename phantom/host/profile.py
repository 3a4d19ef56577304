"""The script's measured host time, saved per segment, to be charged again exactly.

A `--host-time measured` run with `--save-host-profile DIR` writes, for each rank it simulates,
the node-ns it charged for every segment of the script's own Python, in order, with the name
of the call that ended it (`rank<N>.npz`). A `--host-time counted` run with `--host-profile DIR`
charges the same sequence instead of measuring: together with the shipped table's prices for
torch's work, its host time does not depend on this machine at all. Where the counted run's
sequence departs from the saved one (another script, other arguments), a segment is charged at
the median of the saved segments that ended at the same call, else nothing, and the report
counts those.
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


class ProfileReader:
    """One rank's saved segments, charged in order (`next`)."""

    def __init__(self, directory: Path, rank: int) -> None:
        path = rank_file(directory, rank)
        if not path.exists():
            path = rank_file(directory, 0)  # a rank the saving run did not simulate itself
        try:
            with np.load(path) as data:
                names = [str(n) for n in data["names"]]
                self._sites = [names[i] for i in data["sites"].tolist()]
                self._ns = data["ns"].tolist()
        except FileNotFoundError:
            raise HostProfileError(f"--host-profile {directory}: no {path.name} there; save one with "
                                   f"--host-time measured --save-host-profile {directory}") from None
        except (OSError, ValueError, KeyError) as e:
            raise HostProfileError(f"--host-profile {directory}: {path.name} is not a host profile "
                                   f"({type(e).__name__}: {e})") from None
        self.path = path
        by_site: dict[str, list[float]] = {}
        for site, ns in zip(self._sites, self._ns):
            by_site.setdefault(site, []).append(ns)
        self._median = {site: statistics.median(v) for site, v in by_site.items()}
        self._next = 0
        self.matched = 0
        self.departed = 0

    def rewind(self) -> None:
        """Charge from the first saved segment again (the script starts now)."""
        self._next = self.matched = self.departed = 0

    def next(self, site: str) -> float:
        i = self._next
        if i < len(self._sites) and self._sites[i] == site:
            self._next = i + 1
            self.matched += 1
            return self._ns[i]
        self.departed += 1
        return self._median.get(site, 0.0)

    def report(self) -> dict:
        return {"file": str(self.path), "segments": len(self._sites), "matched": self.matched,
                "departed": self.departed}
