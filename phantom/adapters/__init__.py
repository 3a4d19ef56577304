"""Framework adapters: one module per framework, applied only when that framework is imported.

Each adapter patches the few places where a framework's code cannot tell a simulated tensor
from a real one, with a comment naming the framework code it works around and why. The
import hook below runs an adapter's `apply()` right after the module it targets finishes
importing, so a script that never imports the framework pays nothing. A few compiled CUDA
extensions that frameworks import from the cluster's software stack (Apex's, say) are
simulated modules here, importable only where the real one is not installed.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

# module name -> (adapter module, function applied to the imported module)
ADAPTERS: dict[str, str] = {
    "transformers.utils.import_utils": "phantom.adapters.transformers:patch_import_utils",
    "transformers.masking_utils": "phantom.adapters.transformers:patch_masking_utils",
    **{name: "phantom.adapters.deepspeed:" + func
       for name, func in {
           "deepspeed": "patch_package",
           "deepspeed.comm.comm": "patch_comm",
           "deepspeed.ops.op_builder.builder": "patch_op_builder",
           "deepspeed.runtime.engine": "patch_engine",
           "deepspeed.runtime.pipe.engine": "patch_pipe_engine",
       }.items()},
    **{name: "phantom.adapters.torchtitan:" + func
       for name, func in {
           "torchtitan": "compat_torchtitan",
           "torchtitan.config.configs": "patch_configs",
           "torchtitan.trainer": "patch_trainer",
           "torchtitan.distributed.utils": "compat_distributed_utils",
           "torchtitan.distributed.pipeline_parallel": "compat_pipeline_parallel",
           "torchtitan.components.tokenizer": "patch_tokenizer",
           "torchtitan.hf_datasets.text_datasets": "patch_text_datasets",
           "torchtitan.models.common.attention": "patch_attention",
           "torchtitan.models.common.token_dispatcher": "patch_token_dispatcher",
           "torchtitan.distributed.compile": "patch_compile",
           "torchtitan.components.quantization": "patch_quantization",
       }.items()},
    **{name: "phantom.adapters.megatron:" + func
       for name, func in {
           "megatron.core.utils": "patch_utils",
           "megatron.core.optimizer.clip_grads": "patch_clip_grads",
           "megatron.core.transformer.moe.moe_utils": "patch_moe_utils",
           "megatron.core.transformer.moe.token_dispatcher": "patch_token_dispatcher",
       }.items()},
}
# module name -> context manager (a function of no arguments) entered while that module's
# own code runs: for a module whose import needs a stand-in under simulation.
AROUND_IMPORT: dict[str, str] = {
    **{name: "phantom.adapters.torchtitan:triton_stand_in"
       for name in ("torchtitan.distributed.minimal_async_ep.kernels",
                    "torchtitan.overrides.fused_swiglu", "torchtitan.overrides.fused_mla")},
    "torchtitan.models.common.attention": "phantom.adapters.torchtitan:quiet_module_compile",
    "torchvision._meta_registrations": "phantom.adapters.torchvision:skip_missing_op_rules",
}
# module name -> factory (a function of no arguments that returns the module) for a compiled
# CUDA extension that a GPU cluster's software stack has and this machine cannot build: the
# simulated module is imported in its place, only where the real one is not installed.
SIMULATED_MODULES: dict[str, str] = {
    "fused_weight_gradient_mlp_cuda": "phantom.adapters.megatron:wgrad_accumulation_extension",
}
# top-level package name -> directory holding phantom's simulated version of that package
# (a whole library a GPU cluster has and this machine cannot install), found only where the
# real one is not installed. Transformer Engine: te_standin/__init__.py.
SIMULATED_PACKAGES: dict[str, Path] = {
    "transformer_engine": Path(__file__).resolve().parent / "te_standin",
}
# "simulated" offers the simulated Transformer Engine (phantom run --transformer-engine
# simulated sets it); otherwise the script runs as on a GPU machine without TE.
SIMULATED_TE_ENV = "PHANTOM_TRANSFORMER_ENGINE"


def _resolve(target: str) -> Callable[[ModuleType], None]:
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, patch: str | None,
                 around: str | None) -> None:
        self._loader = loader
        self._patch = patch
        self._around = around

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if self._around is not None:
            with _resolve(self._around)():
                self._loader.exec_module(module)
        else:
            self._loader.exec_module(module)
        if self._patch is not None:
            _resolve(self._patch)(module)


class _SimulatedModuleLoader(importlib.abc.Loader):
    def __init__(self, factory: str) -> None:
        self._factory = factory

    def create_module(self, spec):
        module = _resolve(self._factory)()
        module.__spec__ = spec
        return module

    def exec_module(self, module: ModuleType) -> None:
        pass  # the factory built it


class _AdapterFinder(importlib.abc.MetaPathFinder):
    def __init__(self, patches: dict[str, str], around: dict[str, str],
                 simulated: dict[str, str]) -> None:
        self._patches = patches
        self._around = around
        self._simulated = simulated

    def find_spec(self, fullname, path, target=None):
        if fullname in SIMULATED_PACKAGES:
            return self._simulated_package(fullname)
        patch = self._patches.get(fullname)
        around = self._around.get(fullname)
        factory = self._simulated.get(fullname)
        if patch is None and around is None and factory is None:
            return None
        spec = self._real_spec(fullname)
        if spec is None and factory is not None:
            return importlib.util.spec_from_loader(fullname, _SimulatedModuleLoader(factory))
        if spec is None or spec.loader is None or (patch is None and around is None):
            return None
        spec.loader = _PatchingLoader(spec.loader, patch, around)
        return spec

    def _simulated_package(self, fullname: str):
        """The simulated package's spec, where the real package is not installed (its
        submodules are then found through its __path__, inside the simulated one)."""
        if fullname == "transformer_engine" and os.environ.get(SIMULATED_TE_ENV) != "simulated":
            return None
        if self._real_spec(fullname) is not None:
            return None  # the real one
        return importlib.machinery.PathFinder.find_spec(fullname, [str(SIMULATED_PACKAGES[fullname])])

    def _real_spec(self, fullname: str):
        """The spec the other finders give `fullname`, without recursing into this one."""
        sys.meta_path.remove(self)
        try:
            return importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)


def install(patches: dict[str, str] | None = None, around: dict[str, str] | None = None,
            simulated: dict[str, str] | None = None) -> None:
    """Apply the adapters (by default all of them) to modules imported from now on, and make
    the simulated extension modules importable."""
    patches = ADAPTERS if patches is None else patches
    around = AROUND_IMPORT if around is None else around
    simulated = SIMULATED_MODULES if simulated is None else simulated
    for name, patch in patches.items():  # already imported (e.g. by a sitecustomize)
        if name in sys.modules:
            _resolve(patch)(sys.modules[name])
    sys.meta_path.insert(0, _AdapterFinder(patches, around, simulated))
