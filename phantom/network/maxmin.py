"""Weighted max-min fair rates by progressive filling.

Each entity (a flow, or a coflow whose flows all advance at one rate) uses links with a weight:
the bytes it puts on that link per byte of its own progress (how many of its flows cross the
link, divided by the protocol's wire efficiency). All unfrozen entities rise at the same rate
until a link fills or an entity reaches its own cap; the entities on a full link freeze there,
and the rest go on rising.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

_REL_TOL = 1e-9
# From this many entities on, the numpy version (same algorithm, one pass over all
# (entity, link) pairs per filling level) beats the dict-based one.
VECTOR_FROM = 64


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
    if n >= VECTOR_FROM:
        return _max_min_numpy(weights, capacity, caps)
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


def _max_min_numpy(weights: Sequence[Mapping[Hashable, float]], capacity: Mapping[Hashable, float],
                   caps: list[float]) -> list[float]:
    """Progressive filling over flat (entity, link, weight) arrays: each level costs one
    bincount over the pairs, and there are as many levels as distinct bottlenecks (few, when
    many groups run the same collective on links of the same capacity)."""
    link_ids: dict[Hashable, int] = {}
    ent, lnk, wts = [], [], []
    for i, w in enumerate(weights):
        for link, wt in w.items():
            if wt > 0:
                if link not in capacity:
                    raise KeyError(f"entity {i} uses link {link!r} that has no capacity")
                ent.append(i)
                lnk.append(link_ids.setdefault(link, len(link_ids)))
                wts.append(wt)
    n, m = len(weights), len(link_ids)
    ent_a, lnk_a, w_a = np.array(ent, dtype=np.int64), np.array(lnk, dtype=np.int64), np.array(wts)
    cap_links = np.zeros(m)
    for link, j in link_ids.items():
        cap_links[j] = max(0.0, float(capacity[link]))
    remaining = cap_links.copy()
    caps_a = np.array(caps, dtype=float)
    frozen = caps_a <= 0
    rate = np.zeros(n)
    on_link = np.bincount(ent_a, minlength=n) > 0
    # An entity on no link rises to its own ceiling (inf for a local copy).
    lone = ~on_link & ~frozen
    rate[lone] = caps_a[lone]
    frozen |= lone
    level = 0.0
    while not frozen.all():
        active_pairs = ~frozen[ent_a]
        load = np.bincount(lnk_a, weights=w_a * active_pairs, minlength=m)
        used = load > 0
        step = np.min(caps_a[~frozen]) - level
        if used.any():
            step = min(step, float(np.min(remaining[used] / load[used])))
        if step == np.inf:  # pragma: no cover - every active entity is on some link
            rate[~frozen] = np.inf
            break
        step = max(step, 0.0)
        level += step
        remaining -= step * load
        rate[~frozen] = level
        at_cap = ~frozen & (level >= caps_a * (1 - _REL_TOL))
        rate[at_cap] = caps_a[at_cap]
        full = used & (remaining <= _REL_TOL * np.maximum(1.0, cap_links))
        newly = at_cap.copy()
        if full.any():
            newly[ent_a[full[lnk_a]]] = True
        frozen |= newly
    return rate.tolist()
