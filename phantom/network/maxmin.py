"""Weighted max-min fair rates by progressive filling.

Each entity (a flow, or a coflow whose flows all advance at one rate) uses links with a weight:
the bytes it puts on that link per byte of its own progress (how many of its flows cross the
link, divided by the protocol's wire efficiency). All unfrozen entities rise at the same rate
until a link fills or an entity reaches its own cap; the entities on a full link freeze there,
and the rest go on rising.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

_REL_TOL = 1e-9


def max_min_rates(weights: Sequence[Mapping[Hashable, float]],
                  capacity: Mapping[Hashable, float],
                  max_rate: Sequence[float] | None = None) -> list[float]:
    """Max-min fair rate per entity.

    weights[i][link]: load entity i puts on `link` per unit of its rate; capacity[link]: what
    the link can carry; max_rate[i]: entity i's own ceiling (inf when None). An entity on no
    link gets its ceiling.
    """
    n = len(weights)
    caps = [float("inf")] * n if max_rate is None else [float(m) for m in max_rate]
    if len(caps) != n:
        raise ValueError("max_rate needs one entry per entity")
    rate = [0.0] * n
    frozen = [False] * n
    remaining = {l: max(0.0, float(c)) for l, c in capacity.items()}
    users: dict[Hashable, list[tuple[int, float]]] = {}
    for i, w in enumerate(weights):
        for link, wt in w.items():
            if wt > 0:
                if link not in remaining:
                    raise KeyError(f"entity {i} uses link {link!r} that has no capacity")
                users.setdefault(link, []).append((i, wt))
    for i in range(n):
        if caps[i] <= 0:
            frozen[i] = True
    level = 0.0  # common rate of all unfrozen entities
    while not all(frozen):
        # Largest common increase before some link fills or some entity hits its ceiling.
        load: dict[Hashable, float] = {}
        step = min((caps[i] - level for i in range(n) if not frozen[i]), default=float("inf"))
        for link, us in users.items():
            s = sum(wt for i, wt in us if not frozen[i])
            if s > 0:
                load[link] = s
                step = min(step, remaining[link] / s)
        if step == float("inf"):
            for i in range(n):
                if not frozen[i]:
                    rate[i] = float("inf")
                    frozen[i] = True
            break
        step = max(step, 0.0)
        level += step
        for link, s in load.items():
            remaining[link] -= step * s
        for i in range(n):
            if not frozen[i]:
                rate[i] = level
                if level >= caps[i] * (1 - _REL_TOL):
                    rate[i] = caps[i]
                    frozen[i] = True
        for link, s in load.items():
            if remaining[link] <= _REL_TOL * max(1.0, capacity[link]):
                for i, _ in users[link]:
                    frozen[i] = True
    return rate
