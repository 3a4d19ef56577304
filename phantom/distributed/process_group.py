"""`PhantomProcessGroup`: what `init_process_group("nccl")` gets instead of ProcessGroupNCCL.

c10d builds the "nccl" backend through a hard-wired branch (`ProcessGroupNCCL(store, rank,
size, options)`), not through the plugin registry, so phantom answers for that class name.
The group is a Python subclass of `ProcessGroup`; c10d keeps such a group as it is, and its
Python methods are what `torch.distributed` calls (DDP's C++ reducer reaches them through
pybind's trampoline). Every collective becomes an `Op` for the rank's `RankComm`.

Data: CUDA tensors are fake, so nothing is moved. Real CPU tensors (object collectives,
CPU metadata exchange) carry their values: each member sends its payload through the
coordinator, every member gets all payloads and computes its own result here, with torch.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import io
import operator
import pickle
from functools import reduce as _fold
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, ReduceOp, Work
from torch._subclasses.fake_tensor import FakeTensor

from phantom.distributed.comm import Completed, GroupInfo, Op
from phantom.sim.values import HINT_ATTR, set_shadow, shadow_of
from phantom.distributed.wire import pack_tensor, unpack_tensor

if TYPE_CHECKING:
    from phantom.distributed.comm import RankComm

_COMM: "RankComm | None" = None  # set by install(); the rank's one RankComm


class _Options:
    """The attributes c10d and frameworks set on `ProcessGroupNCCL.Options`."""

    def __init__(self, backend: str = "nccl") -> None:
        self.backend = backend
        self.is_high_priority_stream = False
        self._timeout = None
        self.split_from = None
        self.split_color = 0
        self.global_ranks_in_group: list[int] = []
        self.group_name = ""
        self.config = _NCCLConfig()


class _NCCLConfig:
    def __init__(self) -> None:
        self.blocking = 1
        self.cga_cluster_size = 4
        self.min_ctas = 1
        self.max_ctas = 32
        self.net_name = ""
        self.split_share = 0


class _BackendView:
    """What c10d asks of `pg._get_backend(device)`: capability flags, no splitting."""

    supports_splitting = True  # split_group: PhantomProcessGroup.split_group
    supports_coalescing = True
    supports_time_estimate = False
    supports_tensor_alloc = False

    def __init__(self, pg: "PhantomProcessGroup") -> None:
        self._pg = pg
        self.options = pg.options

    def _get_sequence_number_for_group(self) -> int:
        return 0

    def _set_sequence_number_for_group(self) -> None:
        pass

    def eager_connect_single_device(self, device) -> None:
        pass

    def comm_split_count(self) -> int:
        return 0

    def perform_nocolor_split(self, device) -> None:
        """c10d `_new_process_group_helper`: a rank outside a new group still joins NCCL's
        communicator split, with no color (DeepSpeed's pipeline engine creates one group per
        stage pair on every rank). Nothing to simulate: the new group is not created here."""

    def name(self) -> str:
        return "nccl"


# -- work -------------------------------------------------------------------------------
class SimWork(Work):
    """A collective's handle. `wait()` makes the current stream wait for its end, as
    ProcessGroupNCCL's work does; completion follows the simulated clock."""

    def __init__(self, comm: "RankComm", resolve: Callable[[], Completed],
                 outputs: list | None = None, blocks_host: bool = False) -> None:
        super().__init__()
        self._comm = comm
        self._resolve = resolve
        self._outputs = outputs or []
        self._blocks_host = blocks_host  # barrier: the host waits for the end as well
        self._waited = False

    def _end_ns(self) -> float:
        return self._resolve().end_ns

    def wait(self, timeout=None) -> bool:
        end = self._end_ns()
        if not self._waited:
            self._waited = True
            self._comm.unwaited.discard(self)
            self._comm.stream_waits_until(end)
            if self._blocks_host:
                self._comm.host_waits_until(end)
        return True

    def block_current_stream(self) -> None:
        self.wait()

    def synchronize(self) -> None:
        self.wait()

    def is_completed(self) -> bool:
        return self._comm.host_reached(self._end_ns())

    def is_success(self) -> bool:
        return True

    def exception(self):
        return None

    def source_rank(self) -> int:
        return -1

    def result(self) -> list:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        # DDP's C++ reducer waits on this future in C++, which phantom cannot see: the
        # stream wait happens where the reducer's wait is (end of backward, see comm).
        self._comm.unwaited.add(self)
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut

    def _get_duration(self) -> float:
        c = self._resolve()
        return (c.result.end_ns - c.result.start_ns) / 1e6


# -- helpers ----------------------------------------------------------------------------
def _is_real(t: torch.Tensor) -> bool:
    return not isinstance(t, FakeTensor) and t.device.type == "cpu"


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _sig(tensors, *extra) -> tuple:
    """What every member's call must agree on: element counts and dtypes, not shapes. NCCL
    sees flat buffers, so a 0-d tensor sent into a (1,)-shaped receive works on a GPU (torch
    2.11's pipelining does this for its loss), and phantom must not call it a mismatch. (Only
    TORCH_DISTRIBUTED_DEBUG=DETAIL's shape check on a real GPU would report it.)"""
    return (tuple((t.numel(), str(t.dtype).removeprefix("torch.")) for t in tensors), *extra)


def _op_name(op) -> str:
    op = getattr(op, "op", op)
    return str(op).rsplit(".", 1)[-1]


# Reduce ops: (on Python numbers, i.e. value hints; on real CPU tensors). Bitwise ops have no
# number form: hints are kept only when every member agrees.
_REDUCERS = {
    "SUM": (operator.add, torch.add), "PREMUL_SUM": (operator.add, torch.add),
    "AVG": (operator.add, torch.add), "PRODUCT": (operator.mul, torch.mul),
    "MIN": (min, torch.minimum), "MAX": (max, torch.maximum),
    "BAND": (None, torch.bitwise_and), "BOR": (None, torch.bitwise_or),
    "BXOR": (None, torch.bitwise_xor),
}


def _combine(op_name: str, values: list):
    """Reduce the members' values: real CPU tensors, or Python numbers (value hints)."""
    if op_name not in _REDUCERS:
        raise ValueError(f"unsupported reduce op {op_name}")
    on_numbers, on_tensors = _REDUCERS[op_name]
    # NCCL reduces flat buffers: members may hold the same count in different shapes
    # (`_sig`), which must not broadcast into a larger result. The caller reshapes.
    values = [v.reshape(-1) if isinstance(v, torch.Tensor) else v for v in values]
    numbers = all(isinstance(v, (int, float, bool)) for v in values)
    if numbers and on_numbers is None:
        return values[0] if len(set(values)) == 1 else None
    out = _fold(on_numbers if numbers else on_tensors, values)
    if op_name != "AVG":
        return out
    if numbers or out.is_floating_point():
        return out / len(values)
    return out // len(values)


def _payload(tensors) -> list | None:
    """What a member contributes: real CPU data, or the known uniform values of fake CUDA
    tensors (e.g. a pipeline stage's vote, a flag made by torch.tensor([1], device=...));
    None when the values are unknown."""
    if not tensors:
        return None
    if all(_is_real(t) for t in tensors):
        return [pack_tensor(t) for t in tensors]
    shadows = [shadow_of(t) for t in tensors]
    if all(v is not None for v in shadows):
        return [pack_tensor(v) for v in shadows]
    hints = [getattr(t, HINT_ATTR, None) for t in tensors]
    if all(h is not None for h in hints):
        return [("hint", h) for h in hints]
    return None


def _everyone_sent(done: Completed, pg: "PhantomProcessGroup") -> bool:
    return all(r in done.result.payloads for r in pg.info.members)


def _value(packed):
    """A payload entry as a real tensor, or a Python number for a value hint."""
    if isinstance(packed, tuple) and packed and packed[0] == "hint":
        return packed[1]
    return unpack_tensor(packed)


def _concat(values: list):
    if all(isinstance(v, (int, float, bool)) for v in values):
        return values[0] if len(set(values)) == 1 else None
    return torch.cat([v.reshape(-1) for v in values])


def _chunk(value, n: int, i: int):
    return value if isinstance(value, (int, float, bool)) else value.reshape(-1).chunk(n)[i]


def _copy_into(dst: torch.Tensor, src) -> None:
    if src is None:
        return
    if isinstance(src, (int, float, bool)):
        if _is_real(dst):
            with torch.no_grad():
                dst.fill_(src)
        else:
            setattr(dst, HINT_ATTR, src)
        return
    if _is_real(dst):
        with torch.no_grad():
            dst.copy_(src.reshape(dst.shape).to(dst.dtype))
    else:
        set_shadow(dst, src)


def _phantom_time(method):
    """The collective's Python here is phantom's work, not the script's host time (a real
    ProcessGroupNCCL does it in C++, charged as COLLECTIVE_HOST_NS)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        _COMM.enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            _COMM.leave()

    return wrapper


# -- the process group ------------------------------------------------------------------
class PhantomProcessGroup(ProcessGroup):
    Options = _Options

    def __init__(self, store, rank: int, size: int, options: _Options | None = None) -> None:
        super().__init__(rank, size)
        self._store = store
        self.options = options or _Options()
        ranks = list(self.options.global_ranks_in_group or range(size))
        self.info = GroupInfo(self.options.group_name or "default_pg", tuple(ranks))
        self._coalescing: list[tuple[Op, Callable | None]] | None = None

    # identity -------------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 (pybind trampoline name)
        return "nccl"

    def name(self) -> str:
        return "nccl"

    def _get_backend_name(self) -> str:
        return "nccl"

    def _get_backend(self, device=None) -> _BackendView:
        return _BackendView(self)

    @property
    def _device_types(self) -> list[torch.device]:
        # "cpu" among them sends object collectives through real CPU tensors, whose values
        # this group carries; CUDA tensors would be fake and lose them.
        return [torch.device("cpu"), torch.device("cuda")]

    def _set_sequence_number_for_group(self) -> None:
        pass

    def _get_sequence_number_for_group(self) -> int:
        return 0

    # The C++ base reads names from its backends, which this group has none of; pybind's
    # trampoline routes these four virtuals here.
    def getGroupName(self) -> str:  # noqa: N802
        return self.info.name

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self.info.name = name

    def getGroupDesc(self) -> str:  # noqa: N802
        return self.info.desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self.info.desc = desc

    def abort(self) -> None:
        pass

    def get_group_store(self):
        return self._store

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None,
                    device_types=None):
        """`dist.split_group` (ncclCommSplit): a child group of some of this group's ranks."""
        me = self.rank()
        if me not in ranks:
            return None
        options = opts if isinstance(opts, _Options) else _Options()
        options.global_ranks_in_group = [self.info.members[r] for r in ranks]
        options.group_name = group_name or ""
        child = PhantomProcessGroup(self._store, list(ranks).index(me), len(ranks), options)
        child.info.desc = group_desc or ""
        return child

    def shutdown(self) -> None:
        pass

    def _wait_for_pending_works(self) -> None:
        pass

    def _has_hooks(self) -> bool:
        return False

    # issuing ----------------------------------------------------------------------------
    def _member(self, group_rank: int) -> int:
        return self.info.members[group_rank]

    def _issue(self, op: Op, finish: Callable[[Completed], None] | None = None,
               outputs: list | None = None, blocks_host: bool = False) -> SimWork:
        comm = _COMM
        if self._coalescing is not None:
            self._coalescing.append((op, finish))
            return SimWork(comm, lambda: self._coalesced_result, outputs)
        if op.kind == "send_recv":
            handle = comm.defer(self.info, op, finish)
            return SimWork(comm, handle.resolve, outputs)
        done = comm.issue(self.info, [op], [finish])
        return SimWork(comm, lambda: done, outputs, blocks_host)

    def _start_coalescing(self, device=None) -> None:
        self._coalescing = []

    @_phantom_time
    def _end_coalescing(self, device=None) -> SimWork:
        ops, self._coalescing = self._coalescing or [], None
        comm = _COMM
        if not ops:
            done = Completed(comm.sim.timeline.host_ns, None)
            return SimWork(comm, lambda: done)
        done = comm.issue(self.info, [o for o, _ in ops], [f for _, f in ops])
        self._coalesced_result = done
        return SimWork(comm, lambda: done)

    # collectives ------------------------------------------------------------------------
    @_phantom_time
    def allreduce(self, tensors, opts=None):
        if not isinstance(tensors, (list, tuple)):
            tensors = [tensors]
        op_name = _op_name(opts.reduceOp if opts is not None else ReduceOp.SUM)
        payload = _payload(tensors)

        def finish(done: Completed) -> None:
            if payload is not None and _everyone_sent(done, self):
                members = done.result.payloads
                for i, t in enumerate(tensors):
                    _copy_into(t, _combine(op_name, [_value(members[r][i]) for r in sorted(members)]))

        return self._issue(Op("all_reduce", sum(map(_nbytes, tensors)), _sig(tensors, op_name),
                              payload=payload, dtype_bytes=tensors[0].element_size()),
                           finish, list(tensors))

    allreduce_coalesced = allreduce

    @_phantom_time
    def broadcast(self, tensors, opts=None):
        if not isinstance(tensors, (list, tuple)):
            tensors = [tensors]
        root = self._member(opts.rootRank if opts is not None else 0)
        me = dist.get_rank()
        payload = _payload(tensors) if me == root else None

        def finish(done: Completed) -> None:
            sent = done.result.payloads.get(root)
            if sent is not None and me != root:
                for t, p in zip(tensors, sent):
                    _copy_into(t, _value(p))

        return self._issue(Op("broadcast", sum(map(_nbytes, tensors)), _sig(tensors), root=root,
                              payload=payload), finish, list(tensors))

    @_phantom_time
    def reduce(self, tensors, opts=None):
        root = self._member(opts.rootRank)
        op_name = _op_name(opts.reduceOp)
        payload = _payload(tensors)
        me = dist.get_rank()

        def finish(done: Completed) -> None:
            if payload is not None and me == root and _everyone_sent(done, self):
                members = done.result.payloads
                for i, t in enumerate(tensors):
                    _copy_into(t, _combine(op_name, [_value(members[r][i]) for r in sorted(members)]))

        return self._issue(Op("reduce", sum(map(_nbytes, tensors)), _sig(tensors, op_name),
                              root=root, payload=payload), finish, list(tensors))

    @_phantom_time
    def allgather(self, output_tensors, input_tensors, opts=None):
        outs = output_tensors[0]
        payload = _payload(input_tensors)

        def finish(done: Completed) -> None:
            if payload is not None and _everyone_sent(done, self):
                for out, r in zip(outs, self.info.members):
                    _copy_into(out, _value(done.result.payloads[r][0]))

        nbytes = _nbytes(input_tensors[0]) * self.size()
        return self._issue(Op("all_gather", nbytes, _sig(input_tensors), payload=payload),
                           finish, [outs])

    def all_gather_single(self, output, input, opts=None):
        return self.all_gather_single_coalesced([output], [input], opts)

    _allgather_base = all_gather_single

    @_phantom_time
    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        payload = _payload(inputs)

        def finish(done: Completed) -> None:
            if payload is not None and _everyone_sent(done, self):
                for i, out in enumerate(outputs):
                    parts = [_value(done.result.payloads[r][i]) for r in self.info.members]
                    _copy_into(out, _concat(parts))

        nbytes = sum(map(_nbytes, outputs))
        return self._issue(Op("all_gather", nbytes, _sig(inputs), payload=payload), finish,
                           list(outputs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self.allgather([sum(output_lists, [])], input_list, opts)

    @_phantom_time
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op_name = _op_name(opts.reduceOp if opts is not None else ReduceOp.SUM)
        inputs = input_tensors[0]
        payload = _payload(inputs)
        me = self.rank()

        def finish(done: Completed) -> None:
            if payload is not None and _everyone_sent(done, self):
                mine = [_value(done.result.payloads[r][me]) for r in self.info.members]
                _copy_into(output_tensors[0], _combine(op_name, mine))

        return self._issue(Op("reduce_scatter", sum(map(_nbytes, inputs)), _sig(inputs, op_name),
                              payload=payload), finish, list(output_tensors))

    def reduce_scatter_single(self, output, input, opts=None):
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    _reduce_scatter_base = reduce_scatter_single

    @_phantom_time
    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        op_name = _op_name(opts.reduceOp if opts is not None else ReduceOp.SUM)
        payload = _payload(inputs)
        me, n = self.rank(), self.size()

        def finish(done: Completed) -> None:
            if payload is not None and _everyone_sent(done, self):
                for i, out in enumerate(outputs):
                    full = [_value(done.result.payloads[r][i]) for r in self.info.members]
                    _copy_into(out, _combine(op_name, [_chunk(f, n, me) for f in full]))

        return self._issue(Op("reduce_scatter", sum(map(_nbytes, inputs)), _sig(inputs, op_name),
                              payload=payload), finish, list(outputs))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    @_phantom_time
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        n, me = self.size(), self.rank()
        row = _nbytes(input) // max(input.shape[0], 1) if input.dim() else _nbytes(input)
        # Split sizes may be any sequence c10d accepts, numpy arrays included (Megatron's MoE
        # dispatcher passes them): test for emptiness by length, not truth value.
        splits = ([int(s) for s in input_split_sizes]
                  if input_split_sizes is not None and len(input_split_sizes)
                  else [input.shape[0] // n] * n)
        transfers = tuple((dist.get_rank(), peer, int(s) * row)
                          for peer, s in zip(self.info.members, splits) if peer != dist.get_rank())
        payload = _payload([input])
        if payload is not None:
            payload.append(splits)

        def finish(done: Completed) -> None:
            if payload is not None and _everyone_sent(done, self):
                chunks = []
                for r in self.info.members:
                    data, their_splits = done.result.payloads[r]
                    t = _value(data)
                    chunks.append(t if isinstance(t, (int, float, bool))
                                  else t.split([int(s) for s in their_splits])[me])
                _copy_into(output, _concat(chunks))

        return self._issue(Op("all_to_all", _nbytes(input), _sig([], str(input.dtype)),
                              transfers=transfers, payload=payload), finish, [output])

    alltoall_base = all_to_all_single

    @_phantom_time
    def alltoall(self, output_tensors, input_tensors, opts=None):
        transfers = tuple((dist.get_rank(), peer, _nbytes(t))
                          for peer, t in zip(self.info.members, input_tensors) if peer != dist.get_rank())
        payload = _payload(input_tensors)
        me = self.rank()

        def finish(done: Completed) -> None:
            if payload is not None and _everyone_sent(done, self):
                for out, r in zip(output_tensors, self.info.members):
                    _copy_into(out, _value(done.result.payloads[r][me]))

        return self._issue(Op("all_to_all", sum(map(_nbytes, input_tensors)), _sig([]),
                              transfers=transfers, payload=payload), finish, list(output_tensors))

    @_phantom_time
    def gather(self, output_tensors, input_tensors, opts=None):
        root = self._member(opts.rootRank)
        payload = _payload(input_tensors)
        me = dist.get_rank()

        def finish(done: Completed) -> None:
            if payload is not None and me == root and _everyone_sent(done, self):
                for out, r in zip(output_tensors[0], self.info.members):
                    _copy_into(out, _value(done.result.payloads[r][0]))

        return self._issue(Op("gather", _nbytes(input_tensors[0]) * self.size(), _sig(input_tensors),
                              root=root, payload=payload), finish,
                           [output_tensors[0] if output_tensors else []])

    @_phantom_time
    def scatter(self, output_tensors, input_tensors, opts=None):
        root = self._member(opts.rootRank)
        me = dist.get_rank()
        payload = _payload(input_tensors[0]) if me == root and input_tensors else None
        my_index = self.rank()

        def finish(done: Completed) -> None:
            sent = done.result.payloads.get(root)
            if sent is not None:
                _copy_into(output_tensors[0], _value(sent[my_index]))

        nbytes = _nbytes(output_tensors[0]) * self.size()
        return self._issue(Op("scatter", nbytes, _sig(output_tensors), root=root, payload=payload),
                           finish, list(output_tensors))

    @_phantom_time
    def barrier(self, opts=None):
        # ProcessGroupNCCL runs a barrier as a one-element all-reduce and blocks the host.
        return self._issue(Op("all_reduce", 4, ("barrier",)), None, [], blocks_host=True)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        self.barrier().wait()

    # point to point ----------------------------------------------------------------------
    @_phantom_time
    def send(self, tensors, dst: int, tag: int = 0):
        peer = self._member(dst)
        op = Op("send_recv", sum(map(_nbytes, tensors)), _sig(tensors, tag), peer=peer,
                is_send=True, payload=_payload(tensors))
        return self._issue(op, None, list(tensors))

    @_phantom_time
    def recv(self, tensors, src: int, tag: int = 0):
        peer = self._member(src)
        real = _payload(tensors) is not None

        def finish(done: Completed) -> None:
            sent = done.result.payloads.get(peer)
            if real and sent is not None:
                for t, p in zip(tensors, sent):
                    _copy_into(t, _value(p))

        op = Op("send_recv", sum(map(_nbytes, tensors)), _sig(tensors, tag), peer=peer)
        return self._issue(op, finish, list(tensors))

    def recv_anysource(self, tensors, tag: int = 0):
        from phantom.errors import SimulationError

        raise SimulationError("phantom: recv from any source is not supported by NCCL, and "
                              "not simulated; name the source rank.")


def install(comm: "RankComm", every_rank_runs: bool = True,
            representatives: bool = False) -> None:
    """Make `init_process_group("nccl")` (and the default backend on CUDA) build phantom's group.
    `every_rank_runs` is False with representative ranks (--ranks auto or a list);
    `representatives` is True when some ranks do not run as processes."""
    global _COMM
    _COMM = comm
    c10d = dist.distributed_c10d
    c10d.ProcessGroupNCCL = PhantomProcessGroup
    c10d._NCCL_AVAILABLE = True
    dist.ProcessGroupNCCL = PhantomProcessGroup
    dist.is_nccl_available = c10d.is_nccl_available = lambda: True
    _keep_bound_device(c10d)
    # A CUDA build sets NCCL's default timeout (10 min, as for other backends); without it
    # c10d warns that NCCL is not compiled in.
    c10d.default_pg_nccl_timeout = c10d.default_pg_timeout
    _real_payloads_for_object_collectives(c10d)
    _report_group_structure(c10d, comm)
    if not every_rank_runs:
        _store_without_waiting_for_workers()
    if representatives:
        _refuse_gloo_groups(c10d)
    _wait_for_reducer_buckets(comm)
    dist._verify_params_across_processes = _verify_params_across_processes
    dist.Logger = _ddp_logger_class(dist.Logger)


def _refuse_gloo_groups(c10d) -> None:
    """With representative ranks, a `new_group(backend="gloo")` would build a real
    ProcessGroupGloo, whose rendezvous waits for every member: the ranks that do not run never
    come, and the run would hang. Say so instead (Megatron creates gloo groups unless told
    not to: `--disable-gloo-process-groups`)."""
    real_new_group = c10d.new_group

    @functools.wraps(real_new_group)
    def new_group(*args, **kwargs):
        backend = kwargs.get("backend", args[2] if len(args) > 2 else None)
        if backend is not None and "gloo" in str(backend).lower():
            from phantom.errors import SimulationError

            raise SimulationError(
                "phantom: new_group(backend='gloo') is a real gloo group, which needs every "
                "member running; with --ranks auto (or a list) only representatives run. Use "
                "--ranks all, or create no gloo groups (Megatron: --disable-gloo-process-groups).")
        return real_new_group(*args, **kwargs)

    c10d.new_group = dist.new_group = new_group


def _ddp_logger_class(real_logger: type) -> type:
    """DDP's C++ logger samples the reducer's CUDA timer, which only a CUDA build of torch
    registers (reducer_cuda.cpp): on a CPU build the runtime-stats call asserts. Those
    stats only feed DDP's own usage logging, so that one call is skipped."""

    class Logger:
        def __init__(self, reducer) -> None:
            self._real = real_logger(reducer)

        def set_runtime_stats_and_log(self) -> None:
            pass

        def __getattr__(self, name: str):
            return getattr(self._real, name)

    return Logger


def _verify_params_across_processes(process_group, tensors, logger=None) -> None:
    """DDP's start-up check that every rank has the same parameters. The C++ original
    all-gathers the shapes in CUDA tensors, whose values are fake here; the same check on
    real CPU payloads (object all-gather of the shapes)."""
    shapes = [tuple(t.shape) for t in tensors]
    everyone: list = [None] * dist.get_world_size(process_group)
    dist.all_gather_object(everyone, shapes, group=process_group)
    for rank, theirs in enumerate(everyone):
        if len(theirs) != len(shapes):
            raise RuntimeError(f"DDP expects same model across all ranks, but Rank "
                               f"{dist.get_rank(process_group)} has {len(shapes)} params, while "
                               f"rank {rank} has inconsistent {len(theirs)} params.")
        for i, (a, b) in enumerate(zip(shapes, theirs)):
            if a != b:
                raise RuntimeError(f"DDP expects same model across all ranks, but parameter "
                                   f"{i} has shape {list(a)} here and {list(b)} on rank {rank}.")


def _keep_bound_device(c10d) -> None:
    """`init_process_group(device_id=...)` binds the device on the ProcessGroup c10d built
    first, which the nccl branch then replaces with phantom's group; carry it over
    (`split_group` and eager init need it)."""
    real_init = c10d.init_process_group

    @functools.wraps(real_init)
    def init_process_group(*args, **kwargs):
        result = real_init(*args, **kwargs)
        device_id = kwargs.get("device_id")
        if device_id is not None:
            if isinstance(device_id, int):
                device_id = torch.device("cuda", device_id)
            c10d._get_default_group().bound_device_id = device_id
        return result

    c10d.init_process_group = dist.init_process_group = init_process_group


def _real_payloads_for_object_collectives(c10d) -> None:
    """Object collectives pickle into a CPU byte tensor (the group reports a "cpu" device
    for them); building it from a storage must happen outside the fake mode, or the
    storage is fake and the bytes are lost."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    # *rest: torch 2.14 added a `weights_only` argument to both (torch.save / torch.load in
    # place of pickle). phantom pickles at both ends itself, with fake tensors as their
    # metadata, so the flag does not apply: the bytes never leave the simulation.
    def object_to_tensor(obj, device, group, *rest, **kwargs):
        buffer = io.BytesIO()
        with unset_fake_temporarily():  # real CPU tensors in `obj` keep their bytes
            _FakeTensorPickler(buffer).dump(obj)
            # cloned: a tensor over a bytearray cannot be resized, and all_gather_object /
            # gather_object resize every rank's bytes to the largest rank's size
            data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8).clone().to(device)
            return data, torch.tensor([data.numel()], dtype=torch.long).to(device)

    def tensor_to_object(tensor, tensor_size, group, *rest, **kwargs):
        with unset_fake_temporarily() as mode:
            raw = tensor.cpu().numpy().tobytes()[:tensor_size]
            return _FakeTensorUnpickler(io.BytesIO(raw), mode).load()

    c10d._object_to_tensor, c10d._tensor_to_object = object_to_tensor, tensor_to_object
    # Callers may name a CUDA device for the pickled bytes (pipelining does); the bytes
    # must stay real, so they always travel in CPU tensors.
    for name in ("send_object_list", "recv_object_list", "broadcast_object_list"):
        wrapped = _on_cpu(getattr(c10d, name))
        setattr(c10d, name, wrapped)
        setattr(dist, name, wrapped)


class _FakeTensorPickler(pickle.Pickler):
    """Pickles fake tensors inside objects as their metadata; everything else (real CPU
    tensors included) as pickle does. torch 2.11's pipelining sends its stages' outputs as
    meta tensors (`_shape_inference`), which are FakeTensors here and would take their fake
    mode (unpicklable) with them; a fake CUDA tensor's values are arbitrary anyway."""

    def reducer_override(self, obj):
        if not isinstance(obj, FakeTensor):
            return NotImplemented
        if obj.layout != torch.strided:
            from phantom.errors import SimulationError

            raise SimulationError(f"phantom: a {obj.layout} fake tensor cannot travel in an object "
                                  "collective (only strided ones are simulated there)")
        return _rebuild_fake, (tuple(obj.shape), tuple(obj.stride()), obj.dtype, str(obj.device),
                               obj.requires_grad, isinstance(obj, torch.nn.Parameter))


def _rebuild_fake(shape, stride, dtype, device, requires_grad, is_param, mode=None):
    """A meta tensor stays a plain meta tensor (what the sender had on a GPU); a CUDA one is
    made fake again under the receiving rank's `mode`. Storage sharing and offsets between
    the sent tensors are not kept (each arrives with storage of its own)."""
    on_meta = torch.device(device).type == "meta"
    with mode if mode is not None and not on_meta else contextlib.nullcontext():
        t = torch.empty_strided(shape, stride, dtype=dtype, device=device)
        return torch.nn.Parameter(t, requires_grad) if is_param else t.requires_grad_(requires_grad)


class _FakeTensorUnpickler(pickle.Unpickler):
    def __init__(self, file, mode) -> None:
        super().__init__(file)
        self._mode = mode

    def find_class(self, module, name):
        if module == __name__ and name == _rebuild_fake.__name__:
            return functools.partial(_rebuild_fake, mode=self._mode)
        return super().find_class(module, name)


def _report_group_structure(c10d, comm: "RankComm") -> None:
    """Tell the coordinator every group created, this rank a member or not: with
    representative ranks, the groups nobody runs are found from it (distributed/ranks.py).
    `new_group` names every group through `_process_group_name` on every rank;
    `split_group` (DeviceMesh's path when the default group has a bound device) gets all the
    splits at once, but DeviceMesh imported it by name, so both references are wrapped."""
    if comm.client is None:
        return
    real_name, real_split = c10d._process_group_name, c10d.split_group

    def process_group_name(ranks, use_hashed_name):
        if ranks:
            comm.client.report_groups([sorted(ranks)])
        return real_name(ranks, use_hashed_name)

    @functools.wraps(real_split)
    def split_group(parent_pg=None, split_ranks=None, *args, **kwargs):
        if split_ranks:
            parent = parent_pg if parent_pg is not None else c10d._get_default_group()
            members = c10d.get_process_group_ranks(parent)
            comm.client.report_groups([sorted(members[r] for r in g) for g in split_ranks])
        return real_split(parent_pg, split_ranks, *args, **kwargs)

    c10d._process_group_name = process_group_name
    c10d.split_group = dist.split_group = split_group
    from torch.distributed import device_mesh

    if hasattr(device_mesh, "split_group"):
        device_mesh.split_group = split_group


def _store_without_waiting_for_workers() -> None:
    """The env:// and tcp:// rendezvous make rank 0 host a TCPStore that waits until all
    `world_size` ranks have connected (rendezvous._create_c10d_store). With representative
    ranks most never start, so rank 0's store does not wait; ranks that do start connect to
    it as usual."""
    import importlib
    from datetime import timedelta

    # `torch.distributed.rendezvous` the attribute is a function; the module is wanted.
    rendezvous = importlib.import_module("torch.distributed.rendezvous")
    real = rendezvous._create_c10d_store

    @functools.wraps(real)
    def create_store(hostname, port, rank, world_size, timeout: timedelta, use_libuv=True):
        if rank != 0 or rendezvous._torchelastic_use_agent_store():
            return real(hostname, port, rank, world_size, timeout, use_libuv)
        return dist.TCPStore(host_name=hostname, port=port, world_size=world_size,
                             is_master=True, timeout=timeout, multi_tenant=True,
                             use_libuv=use_libuv, wait_for_workers=False)

    rendezvous._create_c10d_store = create_store


def _on_cpu(fn):
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.arguments["device"] = torch.device("cpu")
        return fn(*bound.args, **bound.kwargs)

    return wrapper


def _wait_for_reducer_buckets(comm: "RankComm") -> None:
    """DDP's C++ reducer waits for its bucket all-reduces (CUDA futures) when backward
    finishes, which makes the compute stream wait for them. Those waits are invisible here,
    so they happen when `backward()` returns, and before an optimizer step at the latest."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    real_backward = torch.autograd.backward

    def backward(*args, **kwargs):
        result = real_backward(*args, **kwargs)
        if comm.unwaited:
            comm.wait_unwaited()
        return result

    torch.autograd.backward = backward
    register_optimizer_step_pre_hook(
        lambda optimizer, args, kwargs: comm.wait_unwaited() if comm.unwaited else None)
