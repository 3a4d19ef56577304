"""Which host time a training loop's steady state charges: the same point of earlier
iterations (`SteadyGaps`), and the pace of a node's slowest rank (`straggler_pace`)."""
from __future__ import annotations

import math

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
    out (`HostAccount.set_world`): how far apart separate hosts run was not measured, and the
    order statistics of many lognormal draws would be an extrapolation."""
    return math.exp(spread * expected_max_normal(ranks)) if ranks > 1 and spread > 0 else 1.0


def _typical(sightings: list[float]) -> float:
    """A site's typical gap, robust to one-sided noise (SteadyGaps)."""
    ordered = sorted(sightings)
    return ordered[1] if len(ordered) >= 3 else ordered[0]


class SteadyGaps:
    """Host gaps of a training loop's steady state: a low order statistic of the same point
    of the last few iterations.

    A training loop runs the same host code every iteration, so the gap that ends in the n-th
    call of op X within an iteration is the same work each time; what changes between
    iterations is this machine: slow spells, other processes on the same cores (`--ranks all`
    runs many ranks on few cores), page faults. One gap measured once carries all of that; a
    low order statistic of its last WINDOW sightings (`_typical`) carries little of it. A gap
    far above that (GUARD_RATIO and GUARD_NS) is new work at the site (a log line, a
    checkpoint): it is charged as measured and not remembered, unless the site's last sighting
    was far above too; one far below it, or two far above it in a row, mean the earlier
    sightings were not this site's usual work, and the site starts afresh.

    The statistic is over *earlier* iterations only: a sighting is folded in when its iteration
    ends (`new_iteration`). So what an iteration charges at each steady site is fixed when it
    begins (`means`), and ranks that do the same work can all charge what one of them
    measured (`use_shared`): with every rank a process on a few shared cores, each rank's
    own gaps carry its own share of the contention, and every collective waits for the
    slowest of them (`--ranks all` came out up to 22% slower than one process per class).

    Not the mean: this machine's noise is one-sided (a stall, another process, a cache refill
    only ever add time), so a site is charged at a low order statistic of its sightings
    (`_typical`: the second fastest of the window, the fastest while it holds fewer than three),
    which one slow sighting cannot move.

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
        return {(self._name(site), n): _typical(r) for (site, n), r in self._recent.items() if r}

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
        return _typical(recent) if recent else None

    def _name(self, site: object) -> str:
        name = self._names.get(site)
        if name is None:
            name = self._names[site] = str(site)
        return name

    def share(self) -> float | None:
        total = self.steady + self.measured
        return self.steady / total if total else None


