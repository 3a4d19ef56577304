"""`torch.save` and `torch.load` in a process whose CUDA tensors are fake.

torch's serialization asks whether a fake mode is active (`torch._guards.detect_fake_mode`,
torch/serialization.py) and, under phantom, where one always is, treats every load as the
tracing of a checkpoint: storages become meta, with no bytes read. A script's own data (a
tokenised dataset in a .pt file, a CPU checkpoint) then came back as meta tensors, whose
values cannot be read, and a fake CUDA tensor could not be saved at all (its fake mode does
not pickle).

- `torch.load` runs with the fake mode set aside, so every storage is read into real CPU
  memory; one whose destination (`map_location` applied to where it was saved) is the GPU
  becomes a fake CUDA tensor afterwards, by the host-to-device copy a real load makes of
  it (charged as such). Views of one storage stay views of one fake storage.
- `torch.save` writes fake tensors through torch's own support for them
  (`serialization.skip_data(materialize_fake_tensors=True)`): each fake storage is a record
  of its real size, left unwritten, and loads back onto its device. An object with no fake
  tensor is saved as torch saves it. In one that has both, torch's context also leaves the
  real CPU storages unwritten: their values load back as zeros (docs/simulation.md, "Checkpoints and
  data files").
"""
from __future__ import annotations

import functools
import io
import os
import threading
from typing import Any

import torch

# Per thread: `load`, the torch.load in progress (a _Load); `saving`, inside torch.save.
_state = threading.local()


def install() -> None:
    _patch_load()
    _patch_save()


# --- torch.load ---------------------------------------------------------------------------

def _patch_load() -> None:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    real_load = torch.load
    real_restore = torch._utils._restore_device_fake_mode

    @functools.wraps(real_load)
    def load(f, map_location=None, *args, **kwargs):
        if _meta_destination(map_location):
            return real_load(f, map_location, *args, **kwargs)  # torch's own lazy loading
        outer = getattr(_state, "load", None)
        with unset_fake_temporarily() as mode:
            _state.load = _Load(mode, map_location)
            try:
                return real_load(f, _state.load.keep_on_cpu, *args, **kwargs)
            finally:
                _state.load = outer

    def restore_device(tensor: torch.Tensor) -> torch.Tensor:
        # torch._utils._rebuild_tensor_v2 / _v3 call this on every tensor they rebuild
        current = getattr(_state, "load", None)
        if current is None or type(tensor) is not torch.Tensor:
            return real_restore(tensor)
        return current.to_destination(tensor)

    torch.load = load
    torch.serialization.load = load
    torch._utils._restore_device_fake_mode = restore_device


def _meta_destination(map_location) -> bool:
    return isinstance(map_location, (str, torch.device)) and torch.device(map_location).type == "meta"


class _Load:
    """One `torch.load`: where each storage read goes, and the fake storages made so far."""

    def __init__(self, mode, map_location) -> None:
        self.mode = mode
        self.map_location = map_location
        self.destination: dict[int, torch.device] = {}  # storage cdata -> its device
        self.moved: dict[int, torch.Tensor] = {}  # storage cdata -> its fake CUDA storage

    def keep_on_cpu(self, storage, location: str):
        """torch's `map_location` hook: every storage stays on the CPU with its bytes;
        the one going to the GPU is noted for `to_destination`."""
        device = self._destination(storage, location)
        if device.type == "cuda":
            self.destination[storage._cdata] = device
        return storage

    def _destination(self, storage, location: str) -> torch.device:
        where = self.map_location
        if callable(where) and not isinstance(where, torch.device):
            try:
                moved = where(storage, location)
            except Exception:  # noqa: BLE001 (a `storage.cuda(rank)` cannot run on the real CPU)
                return torch.device("cuda")
            where = moved.device if isinstance(moved, (torch.UntypedStorage, torch.TypedStorage)) else None
        elif isinstance(where, dict):
            where = where.get(location, location)
        if where is None:
            where = location
        device = torch.device(where)
        return torch.device("cpu") if device.type not in ("cuda", "cpu") else device

    def to_destination(self, tensor: torch.Tensor) -> torch.Tensor:
        """The rebuilt CPU `tensor`, moved to the GPU if its storage goes there: the whole
        storage once (one host-to-device copy, as torch's `storage.cuda()`), the tensor a
        view of it."""
        storage = tensor.untyped_storage()
        device = self.destination.get(storage._cdata)
        if device is None:
            return tensor
        flat = self.moved.get(storage._cdata)
        if flat is None:
            whole = torch.empty(0, dtype=tensor.dtype).set_(storage)
            with self.mode:
                flat = whole.to(device)
            self.moved[storage._cdata] = flat
        with self.mode:
            moved = flat.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset()).detach()
        return moved.requires_grad_(tensor.requires_grad)


# --- torch.save ---------------------------------------------------------------------------

class _FakeTensorMet(Exception):
    """A fake tensor reached torch's pickler outside `skip_data`: save again with it."""


def _patch_save() -> None:
    from torch._subclasses.fake_tensor import FakeTensor

    real_save = torch.save
    real_reduce = FakeTensor.__reduce_ex__

    def reduce_ex(self, proto):
        tls = torch.serialization._serialization_tls
        if getattr(_state, "saving", False) and not tls.skip_data:
            raise _FakeTensorMet()
        return real_reduce(self, proto)

    @functools.wraps(real_save)
    def save(obj, f, *args, **kwargs):
        start = f.tell() if _is_seekable(f) else None
        _state.saving = True
        try:
            return real_save(obj, f, *args, **kwargs)
        except _FakeTensorMet:
            pass
        finally:
            _state.saving = False
        if not isinstance(f, (str, os.PathLike)):
            if start is None:
                raise RuntimeError("phantom: torch.save of simulated CUDA tensors needs a file "
                                   "name or a seekable file object")
            f.seek(start)
            f.truncate()
        with torch.serialization.skip_data(materialize_fake_tensors=True):
            return real_save(obj, f, *args, **kwargs)

    FakeTensor.__reduce_ex__ = reduce_ex
    torch.save = save
    torch.serialization.save = save


def _is_seekable(f: Any) -> bool:
    if isinstance(f, (str, os.PathLike)):
        return False
    try:
        return bool(f.seekable())
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False

