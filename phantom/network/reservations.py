"""Per-link bandwidth already promised to scheduled collectives, as a step function of time.

The coordinator hands a collective's end time back to the ranks as soon as it is placed, so a
placement is never revised: a later collective gets whatever capacity the earlier ones leave,
at each instant (first come, first served over time).
"""
from __future__ import annotations

import bisect
import math


class LinkProfile:
    """Reserved load on one link: `load[i]` holds on [times[i], times[i+1])."""

    __slots__ = ("times", "load")

    def __init__(self) -> None:
        self.times: list[float] = [-math.inf]
        self.load: list[float] = [0.0]

    def _split(self, t: float) -> int:
        """Index of the segment starting exactly at t, creating the breakpoint if needed."""
        i = bisect.bisect_right(self.times, t) - 1
        if self.times[i] == t:
            return i
        self.times.insert(i + 1, t)
        self.load.insert(i + 1, self.load[i])
        return i + 1

    def add(self, t0: float, t1: float, amount: float) -> None:
        if t1 <= t0 or amount == 0:
            return
        i0 = self._split(t0)
        i1 = self._split(t1)
        for i in range(i0, i1):
            self.load[i] += amount

    def load_at(self, t: float) -> float:
        return self.load[bisect.bisect_right(self.times, t) - 1]

    def next_change(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t)
        return self.times[i] if i < len(self.times) else math.inf

    def forget_before(self, t: float) -> None:
        i = bisect.bisect_right(self.times, t) - 1
        if i > 0:
            del self.times[:i]
            del self.load[:i]
            self.times[0] = -math.inf

    def idle(self) -> bool:
        return len(self.times) == 1 and self.load[0] == 0.0


class ReservationBook:
    """LinkProfiles by link id, created on first use."""

    def __init__(self) -> None:
        self._profiles: dict[int, LinkProfile] = {}

    def profile(self, link: int) -> LinkProfile | None:
        return self._profiles.get(link)

    def load_at(self, link: int, t: float) -> float:
        p = self._profiles.get(link)
        return 0.0 if p is None else p.load_at(t)

    def next_change(self, link: int, t: float) -> float:
        p = self._profiles.get(link)
        return math.inf if p is None else p.next_change(t)

    def add(self, link: int, t0: float, t1: float, amount: float) -> None:
        p = self._profiles.get(link)
        if p is None:
            p = self._profiles[link] = LinkProfile()
        p.add(t0, t1, amount)

    def forget_before(self, t: float) -> None:
        for link in list(self._profiles):
            p = self._profiles[link]
            p.forget_before(t)
            if p.idle() or (len(p.times) == 1 and abs(p.load[0]) < 1e-12):
                del self._profiles[link]

    def __len__(self) -> int:
        return sum(len(p.times) for p in self._profiles.values())
