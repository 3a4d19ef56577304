"""Compile and load the fake CUDA preload library without importing torch.

The library must be loaded before `import torch` (libtorch caches its CUDA hooks while it
is imported), so this module finds torch's headers and libraries through importlib's
metadata instead of importing it. Builds are cached per torch version and source hash under
$PHANTOM_CACHE_DIR (default ~/.cache/phantom).

Two builds of torch are supported, told apart by `torch.version.cuda` (read from
torch/version.py, since torch must not be imported yet):
  * the CPU build (`cuda = None`): the library gives torch a CUDA device it lacks;
  * a CUDA build (`cuda = '13.0'`, say) on a machine with no GPU or driver: its own CUDA
    guard and hooks would fail, so libtorch_cuda.so is loaded first and the library,
    compiled with -DPHANTOM_CUDA_BUILD, replaces both (fake_cuda.cpp says how).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

SOURCE = Path(__file__).with_name("fake_cuda.cpp")


class NativeBuildError(RuntimeError):
    pass


def _torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise NativeBuildError(
            "torch is not installed in this Python environment; install it with "
            "`pip install torch==2.13.0` (the CPU build)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _torch_version(torch_dir: Path) -> str:
    version_file = torch_dir / "version.py"
    for line in version_file.read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("'\"")
    return "unknown"


def torch_cuda_version(torch_dir: Path | None = None) -> str | None:
    """`torch.version.cuda` of the installed torch, without importing it: None for the CPU
    build, the CUDA version string ('13.0') for a CUDA build."""
    torch_dir = torch_dir or _torch_dir()
    for line in (torch_dir / "version.py").read_text().splitlines():
        if line.startswith("cuda"):
            value = line.split("=", 1)[1].strip()
            return None if value == "None" else value.strip("'\"")
    return None


def _cuda_build(torch_dir: Path) -> bool:
    return torch_cuda_version(torch_dir) is not None and (torch_dir / "lib" / "libtorch_cuda.so").exists()


def _cxx11_abi(torch_dir: Path) -> int:
    # Wheels built with the new libstdc++ ABI export symbols tagged [abi:cxx11].
    lib = torch_dir / "lib" / "libc10.so"
    try:
        out = subprocess.run(["nm", "-D", str(lib)], capture_output=True, text=True, check=True)
        return 1 if "B5cxx11" in out.stdout else 0
    except (OSError, subprocess.CalledProcessError):
        return 1


def cache_dir() -> Path:
    root = os.environ.get("PHANTOM_CACHE_DIR") or Path.home() / ".cache" / "phantom"
    return Path(root)


def library_path(cache: Path | None = None) -> Path:
    """Where the build for the installed torch lives in `cache` (default: cache_dir())."""
    torch_dir = _torch_dir()
    digest = hashlib.sha256(SOURCE.read_bytes() + str(torch_dir).encode()).hexdigest()[:12]
    name = f"libphantom_fake_cuda-{_torch_version(torch_dir)}-{digest}.so"
    return (cache or cache_dir()) / name


def _has_fake_device_slot(torch_dir: Path) -> bool:
    """Whether c10 has TensorImpl::set_fake_device (torch 2.13 and 2.14 do): without it a
    fake tensor's device stays answered in Python (fake_device_functions returns None)."""
    header = torch_dir / "include" / "c10" / "core" / "TensorImpl.h"
    try:
        return "void set_fake_device(" in header.read_text()
    except OSError:
        return False


def _compile(target: Path) -> None:
    torch_dir = _torch_dir()
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise NativeBuildError(
            "no C++ compiler found: phantom builds a small native library on first use; "
            "install g++ (e.g. `apt-get install g++`) or set CXX"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    cmd = [
        compiler, "-O2", "-shared", "-fPIC", "-std=c++20", "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={_cxx11_abi(torch_dir)}",
        f"-I{torch_dir / 'include'}",
        *(["-DPHANTOM_CUDA_BUILD"] if _cuda_build(torch_dir) else []),
        *(["-DPHANTOM_FAKE_DEVICE_SLOT"] if _has_fake_device_slot(torch_dir) else []),
        str(SOURCE), "-o", str(tmp),
        f"-L{torch_dir / 'lib'}", "-Wl,--no-as-needed", "-lc10", "-ltorch_cpu",
        f"-Wl,-rpath,{torch_dir / 'lib'}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise NativeBuildError(
            "building phantom's fake CUDA library failed:\n"
            + " ".join(cmd) + "\n" + result.stderr[-4000:]
        )
    os.replace(tmp, target)  # atomic: concurrent builds (several ranks) never see a partial file


def build_fake_cuda(quiet: bool = True) -> Path:
    target = library_path()
    if not target.exists():
        if not quiet:
            print("phantom: building the fake CUDA library (first run only)...", file=sys.stderr)
        _compile(target)
    return target


def load_fake_cuda(quiet: bool = True) -> Path:
    """Build if needed and load the library; must be called before `import torch`."""
    if "torch" in sys.modules:
        raise NativeBuildError(
            "torch was imported before phantom could install its fake CUDA device; "
            "run the script through `phantom run` instead of importing phantom inside it"
        )
    path = build_fake_cuda(quiet=quiet)
    torch_dir = _torch_dir()
    if _cuda_build(torch_dir):
        # A CUDA build: its real guard and hooks must be registered before ours replace
        # them. torch's own import loads the same libraries later (already loaded: no-op).
        _load_torch_cuda(torch_dir)
    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    return path


@functools.cache
def _loaded_library() -> ctypes.PyDLL | None:
    """The fake CUDA library as this process loaded it; None where it is not loaded (a
    Simulation built in a plain process, as unit tests do). Looked up once per process; its
    functions are kept out of the Simulation: a ctypes function there cannot be deep-copied
    or pickled."""
    path = library_path()
    if not path.exists():
        return None
    try:
        # dlopen of a loaded library returns the same handle; RTLD_NOLOAD keeps a library
        # that this process never loaded (torch imported without phantom run) out.
        # PyDLL: a call keeps the GIL (a few pointer writes need no release and re-acquire)
        return ctypes.PyDLL(str(path), mode=ctypes.RTLD_GLOBAL | os.RTLD_NOLOAD)
    except OSError:
        return None


@functools.cache
def storage_address_setter() -> Callable[[int, int], int] | None:
    """`set(storage._cdata, address)`: give a fake storage a simulated device address
    (fake_cuda.cpp, phantom_set_storage_address); None where the library is not loaded."""
    lib = _loaded_library()
    if lib is None:
        return None
    setter = lib.phantom_set_storage_address
    setter.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    setter.restype = ctypes.c_int
    return setter


@functools.cache
def fake_device_functions() -> tuple[Callable[[int, int, int], int], Callable[[int], None]] | None:
    """`(set_fake_device(tensor._cdata, device_type, index), exclude_fake_key(on))`
    (fake_cuda.cpp): a fake tensor's device answered in C++; None where the library is not
    loaded."""
    lib = _loaded_library()
    if lib is None or not hasattr(lib, "phantom_set_fake_device"):
        return None  # not loaded, or built against a torch without the slot
    set_device, exclude = lib.phantom_set_fake_device, lib.phantom_exclude_fake_key
    set_device.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    set_device.restype = ctypes.c_int
    exclude.argtypes = [ctypes.c_int]
    exclude.restype = None
    return set_device, exclude


def _load_torch_cuda(torch_dir: Path) -> None:
    lib = torch_dir / "lib"
    try:
        # libtorch_global_deps first, as torch/__init__.py does: it pulls in the CUDA
        # runtime libraries (nvidia-* wheels) that libtorch_cuda links against.
        if (lib / "libtorch_global_deps.so").exists():
            ctypes.CDLL(str(lib / "libtorch_global_deps.so"), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(str(lib / "libtorch_cuda.so"), mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise NativeBuildError(
            f"this torch is a CUDA build (torch.version.cuda = {torch_cuda_version(torch_dir)}) "
            f"but its CUDA library could not be loaded: {e}. Reinstall torch, or use the CPU "
            "build (`pip install torch==2.13.0`)"
        ) from e
