"""What travels between a rank and the coordinator (pickled over a Unix socket).

Tensors travel as (dtype name, shape, raw bytes): plain bytes pickle without torch's
shared-memory reducers, and the coordinator never needs torch to pass them on.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

ENV_ADDRESS = "PHANTOM_COORDINATOR"
ENV_AUTHKEY = "PHANTOM_COORDINATOR_KEY"


@dataclass
class Request:
    """One rank's part of a collective (or of a point-to-point transfer)."""

    key: tuple                 # what must match across members: (group, seq) or (group, "p2p", src, dst, n)
    rank: int                  # global rank of the sender
    kind: str                  # CollectiveOp kind ("all_reduce", ..., "send_recv")
    members: tuple[int, ...]   # global ranks taking part, in group-rank order
    nbytes: int                # nccl-tests size convention (see phantom.network.CollectiveOp)
    signature: tuple           # must be equal on every member: shapes/dtypes/op details
    ready_ns: float            # when this rank's NCCL stream can start the collective
    host_ns: float             # this rank's host clock: no later request of it starts earlier
    site: str                  # the user's call site, for diagnostics
    group_desc: str = ""
    root: int | None = None
    transfers: tuple = ()      # (src, dst, bytes) for point-to-point traffic
    dtype_bytes: int = 2
    payload: Any = None        # real CPU data (object collectives, CPU tensors); None for CUDA
    group_members: tuple[int, ...] = ()  # send_recv: the whole group it goes through


@dataclass
class Result:
    start_ns: float
    end_ns: float
    payloads: dict = field(default_factory=dict)  # member global rank -> its payload
    algorithm: str = ""
    protocol: str = ""
    channels: int = 0


@dataclass
class Abort:
    """The run is over (another rank failed, a mismatch or a deadlock): stop with this message."""

    message: str


def pack_tensor(t) -> tuple[str, tuple[int, ...], bytes]:
    import torch

    t = t.detach().contiguous()
    # reshape(-1): a 0-dim tensor (a broadcast scalar, e.g. DeepSpeed's list-length check)
    # cannot be viewed as bytes of another element size
    raw = t.reshape(-1).view(torch.uint8) if t.numel() and t.element_size() > 0 else t.to(torch.uint8)
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), raw.numpy().tobytes()


def unpack_tensor(packed: tuple[str, tuple[int, ...], bytes]):
    import torch

    dtype_name, shape, raw = packed
    dtype = getattr(torch, dtype_name)
    if not raw:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return flat.view(dtype).reshape(shape)


def socket_path(run_dir: str) -> str:
    return os.path.join(run_dir, "coordinator.sock")
