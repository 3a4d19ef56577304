"""Representative ranks: which ranks run as processes, and whom the others copy.

A data-, FSDP-, tensor- or context-parallel rank of an SPMD program does the same work as its
peers, so one process can stand in for all of them (`phantom run --ranks auto`). This module
decides who stands in for whom, from two things the coordinator sees:

* the process-group structure: every rank calls `new_group`/`split_group` for every group,
  member or not, so a running rank reports all of them. Groups with the same shape (member
  offsets from the first member) form a *family*: the DP groups {0,8,..}, {1,9,..}, ...; the
  TP groups {0..7}, {8..15}, ... A collective that one group of a family runs, its siblings
  run at the same moment on their own members.
* point-to-point traffic: a pipeline stage sends to the next stage, which does different
  work. A send to a rank that is not running makes that rank a process of its own (the
  coordinator asks the launcher to start it), and the group family it went through becomes a
  *boundary*: ranks that share a group of a boundary family are in different classes.

Classes are the connected components of "shares a group of a non-boundary family whose groups
never hold two ranks of one boundary group". Every class has (at most) one running rank, its
representative; a rank that is not running copies its representative: same calls, same sizes,
same times, same values. The assumption (docs/distributed.md): no stragglers and no
data-dependent asymmetry between ranks of a class. Before any point-to-point traffic, every
rank is in one class.
"""
from __future__ import annotations

from collections.abc import Iterable


def family_key(members: tuple[int, ...]) -> tuple[int, ...]:
    """Offsets of the members from the first one: equal for the groups of one family."""
    first = members[0]
    return tuple(m - first for m in members)


class RankClasses:
    def __init__(self, world_size: int, running: Iterable[int]) -> None:
        self.world_size = world_size
        self.running: set[int] = set(running)
        self._families: dict[tuple, list[tuple[int, ...]]] = {}
        self._groups: set[tuple[int, ...]] = set()
        self._p2p_families: set[tuple] = set()
        self._p2p_pairs: set[tuple[int, int]] = set()  # boundaries of world-group transfers
        self._dirty = True
        self._component: list[int] = []
        self._rep: dict[int, int] = {}  # component id -> its lowest running rank
        self._siblings: dict[tuple, list[tuple[int, ...]]] = {}
        self.add_groups([tuple(range(world_size))])

    # -- what the coordinator reports -------------------------------------------------------
    def add_groups(self, groups: Iterable[Iterable[int]]) -> None:
        for g in groups:
            members = tuple(g)
            if not members or members in self._groups:
                continue
            self._groups.add(members)
            self._families.setdefault(family_key(members), []).append(members)
            self._dirty = True

    def add_running(self, rank: int) -> None:
        if rank not in self.running:
            self.running.add(rank)
            self._dirty = True

    def saw_p2p(self, members: tuple[int, ...], pair: tuple[int, int] | None = None) -> None:
        """Point-to-point traffic between `pair` inside the group `members`: the group's
        family is a boundary. A group alone in its family (the world group) would put every
        rank on one boundary; there the pair itself is the boundary."""
        key = family_key(members)
        if len(self._families.get(key, ())) < 2 and pair is not None:
            if tuple(pair) not in self._p2p_pairs:
                self._p2p_pairs.add(tuple(pair))
                self._dirty = True
            return
        if key not in self._p2p_families:
            self._p2p_families.add(key)
            self._dirty = True

    # -- answers ----------------------------------------------------------------------------
    def component(self, rank: int) -> int:
        self._update()
        return self._component[rank]

    def representative(self, rank: int) -> int | None:
        """The running rank that `rank` copies (itself if it runs), or None if its class
        has no running rank yet."""
        if rank in self.running:
            return rank
        self._update()
        return self._rep.get(self._component[rank])

    def leader(self, rank: int) -> int:
        """The lowest running rank of `rank`'s class: the one whose host gaps its running
        classmates charge (more than one runs with --ranks all or a list)."""
        self._update()
        return self._rep.get(self._component[rank], rank)

    def siblings(self, members: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The other groups of `members`' family that run its collectives at the same time:
        those with no running rank, all of whose ranks copy a class present in `members`."""
        if len(self.running) == self.world_size:
            return []
        self._update()
        cached = self._siblings.get(members)
        if cached is not None:
            return cached
        family = self._families.get(family_key(members), [])
        mine = {self._component[m] for m in members}
        out = []
        for g in family:
            if g == members or any(m in self.running for m in g):
                continue
            if all(self._component[m] in mine for m in g):
                out.append(g)
        self._siblings[members] = out
        return out

    def classes(self) -> dict[int, list[int]]:
        """Running rank -> the ranks it stands for (itself included)."""
        self._update()
        out: dict[int, list[int]] = {r: [] for r in sorted(self.running)}
        for rank in range(self.world_size):
            rep = self.representative(rank)
            if rep is not None:
                out[rep].append(rank)
        return out

    # -- union-find over the non-boundary families --------------------------------------------
    def _update(self) -> None:
        if not self._dirty:
            return
        parent = list(range(self.world_size))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        # Which boundary groups each rank is in: two ranks sharing one are different classes.
        boundary_of: dict[int, set[int]] = {}
        boundary_id = 0
        boundaries = [g for key in self._p2p_families for g in self._families.get(key, [])]
        for g in [*boundaries, *self._p2p_pairs]:
            for m in g:
                boundary_of.setdefault(m, set()).add(boundary_id)
            boundary_id += 1
        for key, groups in self._families.items():
            if key in self._p2p_families or not all(_within_class(g, boundary_of) for g in groups):
                continue
            for g in groups:
                root = find(g[0])
                for m in g[1:]:
                    parent[find(m)] = root
        self._component = [find(r) for r in range(self.world_size)]
        self._siblings = {}
        self._rep = {}
        for r in sorted(self.running):
            self._rep.setdefault(self._component[r], r)
        self._dirty = False


def translate(rank: int, group: tuple[int, ...], sibling: tuple[int, ...]) -> int:
    """The rank that plays `rank`'s part in `sibling` (same position in the group)."""
    return sibling[group.index(rank)]


def _within_class(group: tuple[int, ...], boundary_of: dict[int, set[int]]) -> bool:
    """True if no two members of `group` share a boundary group."""
    seen: set[int] = set()
    for m in group:
        ids = boundary_of.get(m)
        if ids:
            if seen & ids:
                return False
            seen |= ids
    return True


def parse_ranks(spec: str, world_size: int) -> list[int] | None:
    """`--ranks`: 'all' -> every rank, 'auto' -> None (decided at run time), or '0,8,16'."""
    spec = spec.strip()
    if spec == "all":
        return list(range(world_size))
    if spec == "auto":
        return None
    try:
        ranks = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--ranks {spec!r}: expected 'auto', 'all' or a comma-separated list "
                         "of ranks such as 0,8,16") from None
    if not ranks:
        raise ValueError("--ranks: the list of ranks is empty")
    bad = [r for r in ranks if not 0 <= r < world_size]
    if bad:
        raise ValueError(f"--ranks: rank(s) {bad} outside the world of {world_size} ranks "
                         f"(0..{world_size - 1})")
    return ranks
