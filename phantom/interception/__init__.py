"""Interception: turns a real PyTorch program into calls on the simulation.

It owns the fake-tensor dispatch mode, the `torch.cuda` API answered by the simulation,
the patched Python clocks, and the few patches torch itself needs. `install(sim)` puts all
of them in place; afterwards every CUDA op of the script reaches `sim.on_op`.
"""
from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phantom.sim import Simulation


def install(sim: "Simulation"):
    """Install every interception layer and enter the fake mode; returns the mode."""
    from phantom.interception import attention, boundary, clock, cuda_api, patches, serialization
    from phantom.interception.mode import PhantomMode, disable_fake_tensor_torch_function

    # Constructing the mode imports torch._dynamo, which builds a map of torch's functions
    # once: it must see the originals, before the CUDA API is replaced.
    mode = PhantomMode(sim)
    cuda_api.install(sim)
    patches.install(sim)
    serialization.install()
    patches.install_hint_sources()
    attention.install()
    disable_fake_tensor_torch_function()
    mode.__enter__()
    gc.callbacks.append(sim.host.on_gc)
    if sim.options.host_time == "measured":
        sim.set_machine(boundary.machine_speed(sim))
    boundary.install(sim.host)
    clock.install(sim)
    sim.forget_work()  # what phantom's own start-up ran is not the script's
    return mode


def current_simulation() -> "Simulation | None":
    """The simulation this process runs under, None outside `phantom run`: for probes and tools
    that run under phantom and inspect it (bench/probes/)."""
    from phantom.interception import cuda_api

    return cuda_api._SIM


def uninstall_gc_hook(sim: "Simulation") -> None:
    """Stop excluding garbage collections from host time (the script has finished)."""
    if sim.host.on_gc in gc.callbacks:
        gc.callbacks.remove(sim.host.on_gc)
