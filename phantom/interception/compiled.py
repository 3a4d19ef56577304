"""torch.compile'd training under phantom: Dynamo and AOTAutograd trace, a phantom backend runs.

On a GPU, `torch.compile(model)` is Dynamo (Python bytecode to FX graphs, guards, graph
breaks), AOTAutograd (the joint forward/backward graph, split by the min-cut partitioner into a
forward graph that saves few tensors and a backward graph that recomputes cheap pointwise ops)
and Inductor (Triton kernels for the pointwise ops, reductions and norms; cuBLAS, FlashAttention
and NCCL for the rest). The first two are plain Python and run here unchanged on fake tensors:
phantom gets the same graphs, the same partition and the same decompositions Inductor asks for.
Only Inductor's code generation needs Triton and a device. `GraphRunner` stands in for it: it
runs a graph's ops on fake tensors (for their shapes) and launches, in their place, the kernels
Inductor would generate, each timed by the bytes it loads and stores on the elementwise memory
curve. GEMMs, attention and collectives stay their own kernels and split the runs of generated
code, as Inductor's extern calls do; which values are stored and which are recomputed in their
consumers follows Inductor's inlining rules.

Host time: Dynamo's guards and AOTAutograd's runtime wrappers are the same Python on the node
and here, and count as the script's host time. A graph runs on the node as Inductor's generated
wrapper, not as this machine's interpreter of it: it is charged the node's cost of that wrapper
plus a launch per kernel (cuda_api.node_call). Compiling, on the first call, counts as nothing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
import torch.fx
from torch._subclasses.fake_tensor import maybe_get_fake_mode
from torch.utils._pytree import tree_leaves

from phantom.cost.roofline import (
    GATHER_OPS,
    MISALIGNED_SPLIT_EFFICIENCY,
    OpInfo,
    classify,
    generated_math_flops,
    split_reduction_plan,
)
from phantom.engine.fusion import FUSABLE_CLASSES
from phantom.interception import mix_order
from phantom.interception.mode import PhantomMode

if TYPE_CHECKING:
    from phantom.sim import Simulation

# How a graph node takes part in kernel grouping.
NEUTRAL, FUSED, EXTERN = "neutral", "fused", "extern"
# Ops whose results Inductor stores even when only generated kernels read them: a reduction's
# result cannot be recomputed in its consumer, and random numbers must be the same everywhere.
STORED_CLASSES = frozenset({"reduction", "norm", "softmax", "random"})
# Inductor's limits for inlining a pointwise value into its consumers (torch/_inductor/config.py:
# realize_reads_threshold, realize_acc_reads_threshold, realize_opcount_threshold): past them
# the value is stored once and read back.
REALIZE_READS, REALIZE_ACC_READS, REALIZE_OPCOUNT = 4, 8, 30
REDUCING_CLASSES = frozenset({"reduction", "norm", "softmax"})
# Elements a row up to which Inductor keeps an inner reduction's row in registers (one pass).
PERSISTENT_REDUCTION_MAX = 1024
# Indexed loads: a generated kernel reads what it gathers, not the whole source.
GATHERING_OPS = GATHER_OPS | {"embedding"}


def _rng_hops() -> tuple[Any, Any]:
    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

    return run_and_save_rng_state, run_with_rng_state


def op_info(node: torch.fx.Node) -> OpInfo | None:
    """The cost model's class and name of an aten op node; None for anything else."""
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        return classify(node.target)
    return None


def node_role(node: torch.fx.Node, info: OpInfo | None) -> str:
    """FUSED: an op Inductor generates code for (pointwise, reductions, norms, copies, random);
    EXTERN: one it calls a library for, or an op it cannot fuse (GEMMs, attention, convolutions,
    collectives, scans, anything unknown); NEUTRAL: no kernel (views, tuple indexing)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return NEUTRAL
    if info is None:
        return EXTERN  # higher-order ops, Python functions: not fused across
    if info.op_class is None:
        return NEUTRAL
    return FUSED if info.op_class in FUSABLE_CLASSES else EXTERN


def _dtype(node: torch.fx.Node) -> torch.dtype | None:
    val = node.meta.get("val")
    return val.dtype if isinstance(val, torch.Tensor) else None


def _nbytes(value: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(value) if isinstance(t, torch.Tensor))


def _numel(value: Any) -> int:
    return max((t.numel() for t in tree_leaves(value) if isinstance(t, torch.Tensor)), default=0)


def _stored_bytes(node: torch.fx.Node, sizes: dict) -> int:
    """Bytes of a stored value: as it ran, or from the graph's metadata where it has not run
    yet (a store a mix-order kernel takes in from a later group)."""
    if node in sizes:
        return sizes[node][0]
    v = node.meta.get("val")
    return v.numel() * v.element_size() if isinstance(v, torch.Tensor) else 0


def _numel_of(node: torch.fx.Node, sizes: dict) -> int:
    return sizes[node][1] if node in sizes else mix_order.meta_numel(node)


@dataclasses.dataclass
class GeneratedKernel:
    """One kernel Inductor would generate: the values it stores, and the stored values (graph
    inputs, library outputs, other kernels' stores) it loads to compute them."""
    writes: list[torch.fx.Node]
    reads: set[torch.fx.Node]
    ops: list[str]
    computes: set[torch.fx.Node] = dataclasses.field(default_factory=set)  # nodes it evaluates
    looped: list[torch.fx.Node] = dataclasses.field(default_factory=list)  # its looped row reductions
    load_efficiency: float = 1.0  # share of the memory curve its loads reach


class GraphRunner:
    """Runs one AOTAutograd graph (forward, backward or inference) on the simulation, with
    Inductor's kernels in place of the graph's pointwise ops.

    The graph's nodes between two library calls form a group; a group's values that a library
    call or the graph's caller needs are stored, and so are reductions and random values other
    groups need. Everything else stays in registers: a later group that needs it recomputes it
    from what is stored, as Inductor inlines pointwise code into each consumer. Each group
    launches one kernel per iteration space among its stores (a weight cast and an activation
    cast are two kernels), which loads each stored input once and writes its stores. Values
    are dropped after their last use, as Inductor's wrapper does."""

    def __init__(self, gm: torch.fx.GraphModule, sim: "Simulation") -> None:
        self.gm = gm
        self.sim = sim
        self.nodes = list(gm.graph.nodes)
        self.info = {n: op_info(n) for n in self.nodes}
        self.roles = {n: node_role(n, self.info[n]) for n in self.nodes}
        position = {n: i for i, n in enumerate(self.nodes)}
        last_use: dict[torch.fx.Node, int] = {}
        for n in self.nodes:
            for inp in n.all_input_nodes:
                last_use[inp] = position[n]
        self.drop_after: dict[int, list[torch.fx.Node]] = {}
        for n, i in last_use.items():
            self.drop_after.setdefault(i, []).append(n)
        self.group_of = self._groups()
        self.stored, self.reads, self.computed_with = self._plan()
        self.in_registers = {n for n in self.group_of if n not in self.stored}
        self.group_writes = self._group_writes()
        # stores whose kernel iterates over their inputs (a reduction, an in-place copy), not
        # over themselves
        self.input_space = {w for ws in self.group_writes.values() for w in ws
                            if w.target is torch.ops.aten.copy_.default
                            or self.info[w].op_class in REDUCING_CLASSES}
        self.outer_reductions = {n for n in self.group_of if self._is_outer_reduction(n)}
        # Inductor's mix-order reductions (a norm backward's row and column sums in one kernel)
        # and the transposed stores of other groups that join them (interception/mix_order.py)
        self.mix_orders = mix_order.find_mix_orders(
            self.nodes, self.group_of, self.stored, self.reads, self.computed_with,
            lambda n: self.info.get(n) is not None and self.info[n].op_class in REDUCING_CLASSES,
            lambda n: self.roles.get(n) == EXTERN, self._ancestors)
        self.joining = (mix_order.assign_joining_stores(self.mix_orders, self.group_writes, self.reads,
                                                        self._ancestors, self._view_base)
                        if self.mix_orders else {})
        # how many times a kernel stores each value: once, or once per float8 GEMM reading it
        self.copies = {w: self._scaled_mm_readers(w) for ws in self.group_writes.values() for w in ws}
        self.rng_hops = _rng_hops()

    def _view_base(self, node: torch.fx.Node, stop_in_groups: bool = False) -> torch.fx.Node:
        """The value behind a chain of whole views and aliases (`alias(rsqrt)` is `rsqrt`; not
        a slice of it), or the first node of a group on the way (`stop_in_groups`)."""
        numel = mix_order.meta_numel(node)
        while (not (stop_in_groups and node in self.group_of) and node.op == "call_function"
               and self.roles.get(node) == NEUTRAL and node.args and isinstance(node.args[0], torch.fx.Node)
               and mix_order.meta_numel(node.args[0]) == numel):
            node = node.args[0]
        return node

    def _through_views(self, node: torch.fx.Node) -> torch.fx.Node:
        """The value a view outside every group shows (a transpose taken after a library call
        closed the group that computed it): generated code reads or recomputes that value."""
        base = self._view_base(node, stop_in_groups=True)
        return base if base in self.group_of else node

    def _readers(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """The nodes that read `node`, directly or through views."""
        found, seen, todo = [], set(), list(node.users)
        while todo:
            user = todo.pop()
            if user in seen:
                continue
            seen.add(user)
            if user.op == "call_function" and self.roles.get(user) == NEUTRAL:
                todo.extend(user.users)
            else:
                found.append(user)
        return found

    def _read_only_by_scaled_mm(self, node: torch.fx.Node) -> bool:
        """Whether every library call and graph output reading `node` (through views) is a
        float8 GEMM, and one at least is."""
        readers = self._readers(node)
        gemms = [u for u in readers if u.target is torch.ops.aten._scaled_mm.default]
        if not gemms or any(u.op == "output" or u.target is torch.ops.aten.copy_.default
                            or (self.roles.get(u) == EXTERN and u not in gemms) for u in readers):
            return False
        return self.info[node] is not None and self.info[node].op_class not in STORED_CLASSES

    def _scaled_mm_readers(self, node: torch.fx.Node) -> int:
        """1, or the number of `_scaled_mm` calls that read `node` (through views): Inductor
        gives each float8 GEMM its own copy of a generated operand, stored by the kernel that
        computes it (torch 2.11 on an H100: a norm output's float8 cast stored three times for
        the q, k and v projections' GEMMs in the forward, their transposed copies three times
        in the backward; bench/kernels/mix_order_probe.py's output code)."""
        return max(1, sum(u.target is torch.ops.aten._scaled_mm.default for u in self._readers(node)))

    def _ancestors(self, node: torch.fx.Node) -> set[torch.fx.Node]:
        """Every node `node` is computed from, directly or not."""
        seen: set[torch.fx.Node] = set()
        todo = list(node.all_input_nodes)
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(n.all_input_nodes)
        return seen

    def _groups(self) -> dict[torch.fx.Node, int]:
        """Group number of each node run between two library calls (EXTERN nodes)."""
        group_of: dict[torch.fx.Node, int] = {}
        group, is_open = 0, False
        for n in self.nodes:
            role = self.roles[n]
            if role == EXTERN or n.op != "call_function":
                is_open = False
            elif role == FUSED and not is_open:
                group, is_open = group + 1, True
            if is_open and role != EXTERN:
                group_of[n] = group
        return group_of

    def _plan(self) -> tuple[set[torch.fx.Node], dict[torch.fx.Node, frozenset], dict[torch.fx.Node, frozenset]]:
        """Which group values are stored, and the values in memory each group node is computed
        from, by Inductor's rules (torch/_inductor/graph.py, ir.py: a pointwise value is inlined
        into every consumer unless it must be stored, or inlining it would read too much)."""
        must = self._must_store()
        # stored only as float8 GEMM operands: each GEMM gets its own copy (_scaled_mm_readers),
        # and generated consumers compute the value again, as from a value not stored
        gemm_copies = {n for n in must if self._read_only_by_scaled_mm(n)}
        stored: set[torch.fx.Node] = set()
        reads: dict[torch.fx.Node, frozenset] = {}
        computed_with: dict[torch.fx.Node, frozenset] = {}  # the nodes a value is evaluated from
        ops: dict[torch.fx.Node, int] = {}
        for n in self.nodes:
            if n not in self.group_of:
                continue
            needs: set[torch.fx.Node] = set()
            evaluates: set[torch.fx.Node] = {n}
            size = 1 if self.roles[n] == FUSED else 0
            copy_into = n.target is torch.ops.aten.copy_.default
            info = self.info[n]
            gathers = info is not None and info.name in GATHERING_OPS
            for i in ([n.args[1]] if copy_into else n.all_input_nodes):  # copy_ overwrites args[0]
                if gathers and i is n.args[0]:
                    needs.add(n)  # an indexed load reads what it gathers (its own size), not the source
                    continue
                i = self._through_views(i)
                if i in self.group_of and (i not in stored or i in gemm_copies):
                    needs |= reads[i]  # inlined: computed again in registers here
                    evaluates |= computed_with[i]
                    size += ops[i]
                else:
                    needs.add(i)
            reads[n], ops[n], computed_with[n] = frozenset(needs), size, frozenset(evaluates)
            op_class = info.op_class if info is not None else None
            users = len(n.users)
            if (n in must or op_class in STORED_CLASSES
                    or len(needs) > REALIZE_ACC_READS
                    or (users > 1 and (len(needs) > REALIZE_READS or size > REALIZE_OPCOUNT))):
                stored.add(n)
        return stored, reads, computed_with

    def _must_store(self) -> set[torch.fx.Node]:
        """Group values a library call, the graph's caller or an in-place update needs in
        memory; a view that must be stored makes its base stored too."""
        must: set[torch.fx.Node] = set()
        for n in reversed(self.nodes):
            if n not in self.group_of:
                continue
            if n.target is torch.ops.aten.copy_.default or any(
                    u.op == "output" or self.roles[u] == EXTERN
                    or (u in must and self.roles[u] == NEUTRAL) for u in n.users):
                must.add(n)
        return must

    def _group_writes(self) -> dict[int, list[torch.fx.Node]]:
        """The stored values of each group that a kernel computes (stored views of values
        computed elsewhere are no work)."""
        writes: dict[int, list[torch.fx.Node]] = {}
        for n in self.nodes:
            if n in self.stored and self.roles[n] == FUSED:
                writes.setdefault(self.group_of[n], []).append(n)
        return writes

    def __call__(self, args: list) -> Any:
        if _traced_inputs(args):
            # Dynamo is propagating shapes through this graph while compiling another (DDP's
            # graph split runs each compiled piece on its own fake tensors): not a GPU run
            return self.gm(*args)
        env: dict[torch.fx.Node, Any] = {}
        sizes: dict[torch.fx.Node, tuple[int, int]] = {}  # bytes and elements of each value
        inputs = list(reversed(args))  # popped one by one: each input is the graph's alone
        args.clear()  # boxed calling convention: the graph owns its inputs from here
        load = functools.partial(torch.fx.node.map_arg, fn=lambda n: env[n])
        open_group = 0
        try:
            for i, node in enumerate(self.nodes):
                group = self.group_of.get(node, 0)
                if open_group and group != open_group:
                    self._launch_group(open_group, sizes)
                    self.sim.fusion.end_generated_code()
                    open_group = 0
                if node.op == "placeholder":
                    env[node] = inputs.pop() if inputs else None
                elif node.op == "get_attr":
                    env[node] = _fetch_attr(self.gm, node.target)
                elif node.op == "output":
                    return load(node.args[0])
                else:
                    if group and not open_group:
                        self.sim.fusion.begin_generated_code()
                        open_group = group
                    env[node] = self._run(node, load)
                if node in env:
                    sizes[node] = (_nbytes(env[node]), _numel(env[node]))
                for dead in self.drop_after.get(i, ()):
                    env.pop(dead, None)
        finally:
            if open_group:  # an op raised (out of memory, say) inside a generated kernel
                self.sim.fusion.end_generated_code()
        raise RuntimeError("phantom: a compiled graph ended without an output node")

    def _run(self, node: torch.fx.Node, load: Callable) -> Any:
        args, kwargs = load(node.args), load(node.kwargs)
        save_rng, with_rng = self.rng_hops
        if node.target is save_rng:  # (op, *args): the op, and the RNG state to replay it
            return torch.empty(0, dtype=torch.uint8), args[0](*args[1:], **kwargs)
        if node.target is with_rng:  # (state, op, *args): the op again, same random numbers
            return args[1](*args[2:], **kwargs)
        if node not in self.in_registers:
            return node.target(*args, **kwargs)
        self.sim.fusion.in_registers = True
        try:
            return node.target(*args, **kwargs)
        finally:
            self.sim.fusion.in_registers = False

    def _launch_group(self, group: int, sizes: dict) -> None:
        """Launch the group's kernels: one per iteration space of its stores and stage.

        A reduction Inductor splits (few outputs, each over many elements: an amax to one
        scale, as float8 training's casts need) runs as a partial pass over its input and a
        final pass over its outputs, and nothing that needs its result can share the partial
        pass: what reads it over the input's space runs as a later kernel, which loads that
        input again. Other reductions (a norm's rows) fuse with their consumers, as here."""
        kernels: dict[tuple[int, int], GeneratedKernel] = {}
        ready: dict[torch.fx.Node, int] = {}  # the stage from which a store can be read

        def kernel(space: int, stage: int) -> GeneratedKernel:
            return kernels.setdefault((space, stage), GeneratedKernel([], set(), []))

        for w in self.group_writes.get(group, ()):
            if w in self.joining:
                continue  # stored by a later mix-order kernel
            if w in self.input_space:
                space = max(sizes[i][1] for i in w.all_input_nodes)
            else:
                space = sizes[w][1]
            stage = max((ready[r] for r in self.reads[w] if r in ready), default=0)
            name = w.target.__name__
            split = self._split_reduction(w, space, sizes)
            if split is not None:
                partial = kernel(space, stage)
                partial.reads |= self.reads[w]
                partial.computes |= self.computed_with[w]
                partial.ops.append(name)
                partial.load_efficiency = min(partial.load_efficiency, split)
                final = kernel(sizes[w][1], stage + 1)
                final.writes.append(w)
                final.ops.append(name)
                ready[w] = stage + 1
                continue
            k = kernel(space, stage)
            k.writes.append(w)
            k.reads |= self.reads[w]
            k.computes |= self.computed_with[w]
            k.ops.append(name)
            if self._looped_row_reduction(w, space, sizes):
                k.looped.append(w)
            # an outer reduction (over rows, not along them) cannot hand its result to a
            # consumer over its input in the same loop: that consumer runs after it
            ready[w] = stage + 1 if w in self.outer_reductions else stage
        mix = self.mix_orders.get(group)
        mix_kernel = next((k for k in kernels.values() if mix.row_sum in k.writes), None) if mix else None
        if mix_kernel is not None:
            for t in mix.joining:
                mix_kernel.writes.append(t)
                mix_kernel.reads |= self.reads[t]
                mix_kernel.computes |= self.computed_with[t]
                mix_kernel.ops.append(t.target.__name__)
        for k in kernels.values():
            k.reads -= set(k.writes)  # what a kernel stores it does not load back
            nbytes = sum(_stored_bytes(w, sizes) * self.copies[w] for w in k.writes)
            nbytes += sum(sizes[r][0] for r in k.reads if r in sizes)
            extra_ns = 0.0
            if k is mix_kernel:
                transposed = sum(_numel_of(w, sizes) * self.copies[w] for w in k.writes
                                 if mix_order.is_transposed_store(w))
                gpu = self.sim.gpu
                extra_ns = mix_order.transposed_store_ns(transposed, gpu.sm_count, gpu.sm_clock_mhz)
            math = self._math(k.computes, sizes)
            if k.looped and len(k.writes) > len(k.looped):
                # a looped reduction's consumers in the same kernel run in a second loop over
                # the rows, which evaluates the inlined chain again
                math += self._math(set().union(*(self.computed_with[w] for w in k.looped)), sizes)
            self.sim.fusion.launch_generated_kernel("triton_" + "_".join(dict.fromkeys(k.ops))[:100], nbytes,
                                             math, k.load_efficiency, extra_ns)

    def _math(self, nodes: set[torch.fx.Node], sizes: dict) -> float:
        """FLOP-equivalents of evaluating `nodes` (cost.roofline.generated_math_flops)."""
        return sum(generated_math_flops(self.info[n].name, sizes[n][1], _dtype(n)) for n in nodes
                   if self.info[n] is not None and n in sizes)

    def _split_reduction(self, node: torch.fx.Node, input_numel: int, sizes: dict) -> float | None:
        """None where Inductor runs this reduction in one pass; where it splits it in two
        (torch/_inductor/choices.py, reduction_split_factor: fewer outputs than twice the SMs,
        each over more than 8,192 elements), the share of the memory curve its partial pass's
        loads reach (cost/roofline.py split_reduction_plan)."""
        info = self.info[node]
        if info is None or info.op_class != "reduction":
            return None
        outputs = max(sizes[node][1], 1)
        splits, aligned = split_reduction_plan(input_numel // outputs, outputs, self.sim.gpu.sm_count,
                                               self._itemsize(node, sizes))
        if splits <= 1:
            return None
        return 1.0 if aligned else MISALIGNED_SPLIT_EFFICIENCY

    def _looped_row_reduction(self, node: torch.fx.Node, input_numel: int, sizes: dict) -> bool:
        """A row reduction too long for one pass in registers (Inductor's persistent-reduction
        threshold for inner reductions, 1,024 elements, torch/_inductor/choices.py): its kernel
        loops over each row, and a consumer fused with it loops over the row again."""
        info = self.info[node]
        if info is None or info.op_class not in REDUCING_CLASSES or node in self.outer_reductions:
            return False
        return input_numel // max(sizes[node][1], 1) > PERSISTENT_REDUCTION_MAX

    def _is_outer_reduction(self, node: torch.fx.Node) -> bool:
        """A reduction that leaves the innermost dimension (amax over dim 0: the per-column
        scales of a rowwise float8 recipe's transposed operand). On the H100 its cast ran as a
        second kernel re-reading the input (475 us against 273 for the per-row version,
        bench/kernels/results/inductor_cast_H100.json)."""
        info = self.info[node]
        if info is None or info.op_class != "reduction" or len(node.args) < 2:
            return False
        source, dims = node.args[0], node.args[1]
        rank = len(source.meta["val"].shape) if isinstance(source, torch.fx.Node) and "val" in source.meta else None
        if not rank or not isinstance(dims, (list, tuple)) or not dims:
            return False
        return all(isinstance(d, int) for d in dims) and (rank - 1) not in {d % rank for d in dims}

    @staticmethod
    def _itemsize(node: torch.fx.Node, sizes: dict) -> int:
        known = [sizes[i] for i in node.all_input_nodes if i in sizes and sizes[i][1]]
        if not known:
            return 2
        nbytes, numel = max(known, key=lambda bn: bn[1])
        return max(1, nbytes // numel)


class CudaGraphTree:
    """A graph of a `torch.compile(mode="reduce-overhead")` program: Inductor's CUDA graph trees
    (torch/_inductor/cudagraph_trees.py) run its first call as plain kernels (warm-up), capture
    its kernels in a CUDA graph on the second, and replay that graph from then on. A replay
    costs the host the trees' bookkeeping and one graph launch, not a launch per kernel; inputs
    that are not static (parameters, or outputs of a graph of the same tree) are first copied
    into the graph's own buffers; its outputs live in the graph's memory pool. Here a replay
    runs the graph's ops for their outputs only (`Graphs.shadow_run`), then replays the
    kernels captured on the second call (engine/graphs.py)."""

    def __init__(self, run: Callable[[list], Any], sim: "Simulation", pool: int,
                 outputs: "weakref.WeakSet", call_ns: float) -> None:
        self.run, self.sim, self.pool = run, sim, pool
        self.call_ns = call_ns  # the node's host cost of the trees' bookkeeping per replay
        self.calls = 0
        self.graph = None
        self.lanes: list[int] = []
        self._tree_outputs = outputs  # storages of the tree's graphs' outputs (static inputs)

    def __call__(self, args: list) -> Any:
        if _traced_inputs(args):
            return self.run(args)
        self.calls += 1
        sim = self.sim
        if self.calls == 1:
            with _cublas_cleared(sim):
                return self.run(args)
        if self.graph is None:
            with _cublas_cleared(sim):
                out, self.graph, self.lanes = sim.graphs.record(lambda: self.run(args), self.pool)
            self._keep(out)
            return out
        sim.timeline.advance_host(sim.host.at_pace(self.call_ns))
        copies = [a for a in args if self._copied(a)]
        out = sim.graphs.shadow_run(lambda: self.run(args))
        for a in copies:
            nbytes = a.untyped_storage().nbytes()
            sim.fusion.launch_generated_kernel("cudagraph_input_copy", 2.0 * nbytes)
        sim.graphs.replay(self.graph, self.lanes)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == "cuda":
                sim.graphs.track_in_pool(t, self.pool)
        self._keep(out)
        return out

    def _copied(self, a: Any) -> bool:
        return (isinstance(a, torch.Tensor) and a.device.type == "cuda"
                and not isinstance(a, torch.nn.Parameter)
                and a.untyped_storage() not in self._tree_outputs)

    def _keep(self, out: Any) -> None:
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == "cuda":
                self._tree_outputs.add(t.untyped_storage())


@contextlib.contextmanager
def _cublas_cleared(sim: "Simulation") -> Iterator[None]:
    """cudagraph_trees.clear_cublas_manager: the trees free cuBLAS's workspaces before and
    after each warm-up and recording, so that a workspace allocated inside the graph's pool is
    not also in use outside it; a GEMM after them allocates its workspace again."""
    sim.storage.clear_cublas_workspaces()
    try:
        yield
    finally:
        sim.storage.clear_cublas_workspaces()


def _traced_inputs(args: list) -> bool:
    """Whether the graph is called on a tracer's fake tensors rather than the simulation's."""
    for a in args:
        if isinstance(a, torch.Tensor):
            mode = maybe_get_fake_mode(a)
            return mode is not None and not isinstance(mode, PhantomMode)
    return False


def _fetch_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


# phantom's own machinery: Dynamo must never trace it. A frame Dynamo gives up on runs eagerly
# with Dynamo's frame hook still set, so every Python frame it calls (the dispatch mode, the
# simulation) would otherwise be offered to Dynamo as user code. What user code may call inside
# a compiled region and Dynamo should see through (the SDPA choice, the framework adapters)
# stays traceable.
_INTERNALS = ("sim", "host", "engine", "cost", "memory", "distributed", "network", "report",
              "launcher", "hardware", "native", "interception/mode.py", "interception/cuda_api.py",
              "interception/patches.py", "interception/clock.py",
              "interception/compiled.py")


def hide_internals_from_dynamo() -> None:
    import os

    from torch._dynamo import trace_rules

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the phantom package
    trace_rules.SKIP_DIRS.extend(os.path.join(root, part) for part in _INTERNALS)
    trace_rules._recompile_re()


def _boxed(fn: Callable[[list], Any]) -> Callable[[list], Any]:
    """AOTAutograd's boxed calling convention: one list of inputs, which the callee may clear
    so that they can be freed early (functorch.compile.make_boxed_func)."""
    def call(args: list) -> Any:
        return fn(args)

    call._boxed_call = True  # type: ignore[attr-defined]
    return call


def exclude_compilation_time(sim: "Simulation") -> None:
    """Compiling (Dynamo's tracing, AOTAutograd's partition, a lazy backward compile) is not
    simulated host time: on a GPU it takes Inductor tens of seconds once, here it takes phantom
    its own time, and neither is a training step's. Dynamo's compile callbacks bracket it."""
    from torch._dynamo.callback import callback_handler

    from phantom.host.account import HOST_CLOCK_NS
    from phantom.interception.clock import simulated_thread

    entered = threading.local()

    def start(args: Any) -> None:
        now = HOST_CLOCK_NS()
        entered.flag = simulated_thread()
        if entered.flag:
            sim.host.api_enter("torch.compile (compiling)", now)

    def end(args: Any) -> None:
        if getattr(entered, "flag", False):
            entered.flag = False
            sim.host.api_exit(0.0)

    callback_handler.register_start_callback(start)
    callback_handler.register_end_callback(end)


def phantom_backend(sim: "Simulation", graph_node_ns: float, cuda_graphs: bool = False) -> Callable:
    """A Dynamo backend: AOTAutograd as Inductor configures it (its decompositions, the min-cut
    partitioner), with GraphRunner in place of Inductor's code generation. `cuda_graphs`:
    mode="reduce-overhead", each graph replayed as a CUDA graph (CudaGraphTree)."""
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch import config as functorch_config
    from torch._inductor.decomposition import select_decomp_table

    from phantom.interception.cuda_api import NODE_HOST_NS, new_pool_key, node_call

    # one pool and one set of static outputs per compiled program, as a tree has
    pool, tree_outputs = new_pool_key(), weakref.WeakSet()

    def graph_compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable:
        # a graph runs as Inductor's generated wrapper on the node: its fixed cost and a launch
        # per kernel, not this machine's time interpreting the graph
        if cuda_graphs:
            tree = CudaGraphTree(GraphRunner(gm, sim), sim, pool, tree_outputs,
                                 NODE_HOST_NS["cudagraph_tree_call"])
            return _boxed(node_call("torch.compile graph (CUDA graph)", 0.0)(tree))
        return _boxed(node_call("torch.compile graph", graph_node_ns)(GraphRunner(gm, sim)))

    aot = aot_autograd(
        fw_compiler=graph_compiler,
        bw_compiler=graph_compiler,
        inference_compiler=graph_compiler,
        decompositions=select_decomp_table(),
        partition_fn=functools.partial(min_cut_rematerialization_partition, compiler="inductor"),
        keep_inference_input_mutations=True,
    )

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable:
        # RNG ops under activation checkpointing (attention kernels count: they take a dropout
        # seed) are made CUDA-graph safe by default, with generator states of the real device
        # as graph inputs; the simulated device's generators cannot be. The plain way (save the
        # RNG state, replay it in the recompute) computes the same kernels.
        with functorch_config.patch(graphsafe_rng_functionalization=False):
            return aot(gm, example_inputs)

    return backend


def install(sim: "Simulation") -> None:
    """Replace `torch.compile`. It needs Triton and a real device to generate kernels; phantom
    keeps the rest of it: Dynamo and AOTAutograd trace the program as on a
    GPU, and phantom's backend runs the graphs with Inductor's kernel boundaries. A compiled
    *function* called where autograd records nothing (no_grad, or the forward/backward of a
    custom autograd.Function, which is how Megatron's `jit_fuser` functions run) is cheaper to
    take whole: its pointwise ops are charged as the one fused kernel Inductor makes of them
    (engine/fusion.py), without tracing, at the node's cost of a compiled call
    (cuda_api.NODE_HOST_NS). Otherwise Dynamo's guards and AOTAutograd's wrappers run here as
    on the node and count as the script's host time, while compiling (tracing) counts as none
    and running a graph costs the node's generated wrapper plus a launch per kernel. If
    phantom's backend fails on a program (one warning), it runs eagerly."""
    from phantom.interception.cuda_api import NODE_HOST_NS, node_call

    hide_internals_from_dynamo()
    exclude_compilation_time(sim)
    real_compile = torch.compile
    backend = phantom_backend(sim, NODE_HOST_NS["compiled_graph"])

    def fused(fn: Any) -> Any:
        @node_call("torch.compile", NODE_HOST_NS["compiled_call"])
        def region(*args: Any, **kwargs: Any) -> Any:
            # one call on the node: no Python runs between its kernels there, so the eager
            # ops' gaps here are phantom's (node_call), and its cost is the node's
            sim.fusion.begin_region()
            out = None
            try:
                out = fn(*args, **kwargs)
                return out
            finally:
                sim.fusion.end_region(out)

        return region

    def traced(dynamo_call: Any, eager_call: Any, name: str) -> Any:
        """A Dynamo entry point with phantom's backend; `eager_call` from the first time
        phantom's backend fails on it. Dynamo's guards and AOTAutograd's wrappers are the same
        Python on the node and here: their time is the script's, like any Python's. Dynamo
        runs without the torch-call boundary's mode (boundary.suspended)."""
        from phantom.interception import boundary

        state = {"eager": False}

        def call(*args: Any, **kwargs: Any) -> Any:
            if state["eager"]:
                return eager_call(*args, **kwargs)
            try:
                with boundary.suspended():
                    return dynamo_call(*args, **kwargs)
            except (torch._dynamo.exc.BackendCompilerFailed,
                    torch._dynamo.exc.InternalTorchDynamoError) as e:
                # phantom's backend failed (an op the runner cannot take), or Dynamo did on
                # the simulation's fake tensors (torch.compile of a DDP-wrapped model, whose
                # graph split re-traces them): not the user's program, which still runs,
                # eagerly, rather than ending the simulation
                state["eager"] = True
                cause = getattr(e, "inner_exception", None) or e
                warnings.warn(f"phantom: torch.compile could not be simulated for {name} "
                              f"({type(cause).__name__}: {str(cause)[:200]}); running it eagerly.",
                              stacklevel=2)
                return eager_call(*args, **kwargs)

        return call

    def backend_for(mode: str) -> Callable:
        if "reduce-overhead" in mode:
            return phantom_backend(sim, NODE_HOST_NS["compiled_graph"], cuda_graphs=True)
        return backend

    def compile_function(fn: Any, options: dict, mode: str = "") -> Any:
        name = getattr(fn, "__qualname__", repr(fn))
        graph_call = traced(real_compile(fn, backend=backend_for(mode), **options), fn, name)
        fused_call = fused(fn)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            if torch.is_grad_enabled() and any(
                    isinstance(a, torch.Tensor) and a.requires_grad
                    for a in (*args, *kwargs.values())):
                return graph_call(*args, **kwargs)
            return fused_call(*args, **kwargs)

        return run

    def compile_module(module: torch.nn.Module, options: dict, mode: str = "") -> torch.nn.Module:
        compiled = real_compile(module, backend=backend_for(mode), **options)
        # OptimizedModule's forward is Dynamo's entry; the module's hooks run outside it, as on
        # a GPU. Falling back, the original module runs in its place.
        attr = "_forward" if hasattr(compiled, "_forward") else "forward"
        setattr(compiled, attr, traced(getattr(compiled, attr), module, type(module).__name__))
        return compiled

    def compile(model: Any = None, **kwargs: Any) -> Any:
        if model is None:
            return functools.partial(compile, **kwargs)  # @torch.compile(mode=...): the decorator
        if kwargs.get("backend", "inductor") != "inductor":
            # another backend ("eager", "aot_eager", the user's own) runs its graphs' ops as
            # they are, which the simulation times op by op: Dynamo as it is
            return real_compile(model, **kwargs)
        mode = kwargs.get("mode") or ""
        # Inductor's other settings (autotuning, options) have no meaning without Inductor
        options = {k: v for k, v in kwargs.items() if k in ("fullgraph", "dynamic", "disable")}
        if isinstance(model, torch.nn.Module):
            return compile_module(model, options, mode)
        if not callable(model):
            return model
        return compile_function(model, options, mode)

    torch.compile = compile
