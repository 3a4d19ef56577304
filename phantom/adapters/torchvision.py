"""torchvision under phantom.

torchvision's wheels on PyPI are built against a CUDA build of torch: on torch's CPU build
their C++ extension (`torchvision/_C.so`, which links libtorch_cuda/libc10_cuda) does not
load. torchvision notices (`extension._has_ops()` is False) and guards every registration of
its C++ ops on that, except the two fake-tensor rules for `torchvision::nms` and
`torchvision::qnms` in `torchvision/_meta_registrations.py` (0.26-0.29), which then fail with
"operator torchvision::nms does not exist" and make `import torchvision` itself fail.

Around that module's import we skip the fake rules of ops that do not exist, so the pure
Python parts (models, transforms, datasets) work on the CPU build. Calling one of the C++
ops there (nms, roi_align, deform_conv2d, image decoding) still raises torchvision's own
clear "Couldn't load custom C++ ops" error. On a CUDA build nothing here changes anything.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

import torch


def _op_exists(qualname: str) -> bool:
    namespace, _, name = qualname.partition("::")
    try:
        torch._C._dispatch_find_schema_or_throw(qualname, "")
        return True
    except RuntimeError:
        return False


@contextlib.contextmanager
def skip_missing_op_rules() -> Iterator[None]:
    """While `torchvision._meta_registrations` runs: `register_fake` of an op torchvision's
    extension did not define becomes a no-op decorator."""
    real = torch.library.register_fake
    warned = []

    def register_fake(op: Any, *args: Any, **kwargs: Any):
        if isinstance(op, str) and op.startswith("torchvision::") and not _op_exists(op):
            if not warned:
                warned.append(op)
                warnings.warn(
                    "torchvision's C++ ops are not available with this torch build (its PyPI "
                    "wheel needs a CUDA build of torch); models and transforms work, "
                    "torchvision.ops such as nms do not", stacklevel=2)
            if args and callable(args[0]):
                return args[0]
            return lambda fn: fn
        return real(op, *args, **kwargs)

    torch.library.register_fake = register_fake
    try:
        yield
    finally:
        torch.library.register_fake = real
