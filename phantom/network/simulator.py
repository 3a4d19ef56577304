"""NetworkSimulator: times collectives on the cluster, in the order the coordinator places them.

A collective's time is NCCL's modelled latency for the chosen algorithm and protocol (launch,
per-step hardware latencies) followed by its data movement through the flow model: its
entities share the links max-min fairly, on whatever capacity the collectives placed earlier
left at each instant. Its own link use is then reserved, so later placements see it.

With representative ranks, a collective may come with *siblings*: the same collective run at
the same moment by groups whose ranks are not simulated as processes. A sibling whose links
are disjoint from the collective's cannot change its timing and is only counted; the ones
that share a link run in one max-min flow phase with it (fair sharing, not first come).
"""
from __future__ import annotations

import math

from collections.abc import Sequence

from phantom.network import nccl_model as nm
from phantom.network.cluster import ClusterSpec
from phantom.network.collectives import CollectiveOp, ScheduledCollective, validate_op
from phantom.network.maxmin import max_min_rates
from phantom.network.measured import MeasuredTable, load_tables, measured_size
from phantom.network.reservations import ReservationBook
from phantom.network.topology import Topology
from phantom.network.traffic import (Entity, nvls_entity, p2p_entities, ring_entity,
                                     tree_entity)

_US = 1000.0  # ns per microsecond
# Payload left below this fraction of an entity's volume counts as delivered (float dust).
_DONE_FRACTION = 1e-9


class NetworkSimulator:
    def __init__(self, cluster: ClusterSpec, measured: list[MeasuredTable] | None = None) -> None:
        self.cluster = cluster
        self.topology = Topology(cluster)
        self._book = ReservationBook()
        self._measured = load_tables() if measured is None else measured
        self._idle_cache: dict[tuple, float] = {}
        self._plan_cache: dict[tuple, tuple] = {}
        self.sibling_ops = 0         # sibling collectives seen
        self.sibling_ops_shared = 0  # ... of which shared a link with their collective
        # phantom.network.usage.LinkUsage, set by a run that reports link utilisation
        self.link_usage = None

    # --- public API --------------------------------------------------------------------------

    def schedule(self, op: CollectiveOp, start_ns: float,
                 siblings: Sequence[CollectiveOp] = ()) -> ScheduledCollective:
        """Place `op`, whose members are all ready at `start_ns`, and return its timing.
        `siblings` run the same collective on other ranks at the same time."""
        if siblings:
            return self._place_with_siblings(op, siblings, float(start_ns))
        return self._place(op, float(start_ns), self._book, commit=True)

    def estimate(self, op: CollectiveOp) -> ScheduledCollective:
        """The same on an idle network, committing nothing (start_ns = 0)."""
        return self._place(op, 0.0, ReservationBook(), commit=False)

    def forget_before(self, ns: float) -> None:
        """Drop reservations that end before `ns` (no later than every rank's clock)."""
        self._book.forget_before(float(ns))

    # --- planning ----------------------------------------------------------------------------

    def _plan(self, op: CollectiveOp) -> tuple[str, str, int, float, list[Entity]]:
        """(algorithm, protocol, channels, latency_ns, entities) for `op`."""
        c, topo = self.cluster, self.topology
        ranks = tuple(op.ranks)
        n = len(ranks)
        kind = op.kind
        if kind in ("all_to_all", "gather", "scatter", "send_recv"):
            return self._plan_p2p(op)
        if n == 1:
            return "ring", "Simple", 1, 0.0, []
        nbytes = op.nbytes
        if kind == "barrier":
            kind, nbytes = "all_reduce", max(op.nbytes, op.dtype_bytes)
        m = nm.comm_model(c, ranks)
        choice = nm.choose(c, m, kind, nbytes)
        p = choice.protocol
        eff = nm.PROTOCOL_EFFICIENCY[p]
        lat_ns = choice.latency_us * _US
        proto = nm.PROTOCOLS[p]
        if nbytes == 0:
            return choice.algorithm, proto, choice.channels, lat_ns, []
        nc = choice.channels
        # What one channel (one CUDA block) carries by NCCL's model; LL also caps the total.
        per_channel = min(choice.channel_bw, choice.total_bw / nc)
        if choice.algorithm == "nvls":
            return "nvls", proto, nc, lat_ns, [
                nvls_entity(topo, ranks, nbytes, nm.NVLS_EFFICIENCY[m.cc_index])]
        if choice.algorithm == "tree":
            # A tree channel moves the buffer up and down at once: half its bus bandwidth each.
            rate = 0.5 * per_channel * nm.tree_correction(p, nbytes)
            return "tree", proto, nc, lat_ns, [tree_entity(topo, ranks, nc, nbytes, eff, rate)]
        if kind == "all_reduce":
            hop = 2 * (n - 1) / n * nbytes
        elif kind in ("all_gather", "reduce_scatter"):
            hop = (n - 1) / n * nbytes
        else:  # broadcast / reduce: a chain from / to the root
            hop = float(nbytes)
        drop_into = op.root if kind == "broadcast" else None
        drop_out_of = op.root if kind == "reduce" else None
        e = ring_entity(topo, ranks, nc, hop, eff, per_channel,
                        drop_into=drop_into, drop_out_of=drop_out_of)
        return "ring", proto, nc, lat_ns, [e]

    def _plan_p2p(self, op: CollectiveOp) -> tuple[str, str, int, float, list[Entity]]:
        c = self.cluster
        ranks = tuple(op.ranks)
        n = len(ranks)
        if op.transfers:
            transfers = [(s, d, float(b)) for s, d, b in op.transfers]
        elif op.kind == "all_to_all":
            chunk = op.nbytes / n
            transfers = [(s, d, chunk) for s in ranks for d in ranks if s != d]
        elif op.kind == "gather":
            chunk = op.nbytes / n
            transfers = [(s, op.root, chunk) for s in ranks if s != op.root]
        else:  # scatter
            chunk = op.nbytes / n
            transfers = [(op.root, d, chunk) for d in ranks if d != op.root]
        transfers = [t for t in transfers if t[0] != t[1] and t[2] > 0]
        if not transfers:
            return "p2p", "Simple", 1, 0.0, []
        m = nm.comm_model(c, ranks)
        peers_out: dict[int, int] = {}
        peers_in: dict[int, int] = {}
        for s, d, _ in transfers:
            peers_out[s] = peers_out.get(s, 0) + 1
            peers_in[d] = peers_in.get(d, 0) + 1
        peers = max(max(peers_out.values()), max(peers_in.values()))
        flows, lat_us, channels, biggest = [], 0.0, 0, (-1.0, "Simple")
        p2p_total = min(nm.MAX_CHANNELS, nm._pow2_up(m.comm_channels))
        for s, d, b in transfers:
            remote = c.node_of(s) != c.node_of(d)
            per_peer = nm.p2p_channels_per_peer(c, m, remote)
            # enqueue.cc: LL for transfers up to P2P_LL_THRESHOLD bytes per channel.
            p = nm.LL if b <= per_peer * nm.P2P_LL_THRESHOLD else nm.SIMPLE
            flows.append((s, d, b, nm.PROTOCOL_EFFICIENCY[p]))
            lat_us = max(lat_us, nm.p2p_latency_us(m, p, remote, peers))
            channels = max(channels, per_peer)
            if b > biggest[0]:
                biggest = (b, nm.PROTOCOLS[p])
        channels = min(p2p_total, channels * min(peers, nm.P2P_PER_BATCH))
        return "p2p", biggest[1], channels, lat_us * _US, p2p_entities(self.topology, flows)

    # --- flow phase --------------------------------------------------------------------------

    def _place(self, op: CollectiveOp, start: float, book: ReservationBook,
               commit: bool) -> ScheduledCollective:
        validate_op(op, self.cluster.world_size)
        algorithm, protocol, channels, lat_ns, entities = self._plan(op)
        data_start = start + lat_ns
        end = max(self._flow(entities, data_start, book, commit), default=data_start)
        scale = self._measured_scale(op)
        if scale is not None:
            # Link reservations keep the model's timing; only the end moves.
            end = start + (end - start) * scale
        return ScheduledCollective(start, end, algorithm, protocol, channels)

    def _measured_scale(self, op: CollectiveOp) -> float | None:
        """measured / modelled time on an idle network, if a measured table covers `op`."""
        size = measured_size(op)
        if size is None or not self._measured:
            return None
        table = next((t for t in self._measured if t.matches(self.cluster, op)), None)
        if table is None:
            return None
        key = (op.kind, len(op.ranks), op.nbytes, op.transfers, op.root)
        idle = self._idle_cache.get(key)
        if idle is None:
            _, _, _, lat_ns, entities = self._plan(op)
            book = ReservationBook()
            idle = max(self._flow(entities, lat_ns, book, False), default=lat_ns)
            self._idle_cache[key] = idle
        return table.time_ns(op.kind, size) / idle if idle > 0 else None

    def _place_with_siblings(self, op: CollectiveOp, siblings: Sequence[CollectiveOp],
                             start: float) -> ScheduledCollective:
        validate_op(op, self.cluster.world_size)
        algorithm, protocol, channels, lat_ns, entities = self._plan(op)
        links = {l for e in entities for l in e.weights}
        joint = list(entities)
        for sib in siblings:
            self.sibling_ops += 1
            sib_entities, sib_links = self._cached_plan(sib)
            if links & sib_links:
                self.sibling_ops_shared += 1
                joint.extend(sib_entities)
        if len(joint) == len(entities):  # nothing shared: the siblings cannot matter
            return self._place(op, start, self._book, commit=True)
        data_start = start + lat_ns
        finish = self._flow(joint, data_start, self._book, commit=True)
        end = max(finish[:len(entities)], default=data_start)
        scale = self._measured_scale(op)
        if scale is not None:
            end = start + (end - start) * scale
        return ScheduledCollective(start, end, algorithm, protocol, channels)

    def _cached_plan(self, op: CollectiveOp) -> tuple[list[Entity], set[int]]:
        key = (op.kind, op.ranks, op.nbytes, op.root, op.transfers, op.dtype_bytes)
        hit = self._plan_cache.get(key)
        if hit is None:
            if len(self._plan_cache) > 4096:
                self._plan_cache.clear()
            validate_op(op, self.cluster.world_size)
            entities = self._plan(op)[4]
            hit = self._plan_cache[key] = (entities, {l for e in entities for l in e.weights})
        return hit

    def _flow(self, entities: list[Entity], t: float, book: ReservationBook,
              commit: bool) -> list[float]:
        """Run the entities from time t on the capacity `book` leaves; return when each is done."""
        cap = self.topology.capacity
        finish = [t] * len(entities)
        remaining = [e.volume for e in entities]
        active = [i for i, e in enumerate(entities) if e.volume > 0]
        links = sorted({l for e in entities for l in e.weights})
        segments: list[tuple[float, float, dict[int, float]]] = []
        while active:
            residual = {l: max(0.0, cap(l) - book.load_at(l, t)) for l in links}
            rates = max_min_rates([entities[i].weights for i in active], residual,
                                  [entities[i].max_rate for i in active])
            t_next = min((book.next_change(l, t) for l in links), default=math.inf)
            for i, r in zip(active, rates):
                if r > 0:
                    t_next = min(t_next, t + remaining[i] / r)
            if t_next == math.inf:
                raise RuntimeError("network simulation stalled: no capacity and no release ahead")
            dt = t_next - t
            load: dict[int, float] = {}
            still = []
            for i, r in zip(active, rates):
                if r == math.inf:  # no link in its way: a local copy
                    remaining[i] = 0.0
                    finish[i] = t
                    continue
                finishes = r > 0 and t + remaining[i] / r <= t_next
                # A flow whose finish set t_next is done; subtracting r * dt instead can leave
                # a residue below the float resolution of t, and the loop would never end.
                remaining[i] = 0.0 if finishes else remaining[i] - r * dt
                for l, w in entities[i].weights.items():
                    load[l] = load.get(l, 0.0) + w * r
                if remaining[i] > _DONE_FRACTION * entities[i].volume:
                    still.append(i)
                else:
                    finish[i] = t_next
            if dt > 0 and load:
                segments.append((t, t_next, load))
            active = still
            t = t_next
        if commit:
            for t0, t1, load in segments:
                for l, amount in load.items():
                    book.add(l, t0, t1, amount)
            if self.link_usage is not None:
                self.link_usage.add(segments)
        return finish
