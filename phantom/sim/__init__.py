"""The simulation of one rank: streams, storage, graphs and fused code over the engine, the
cost model, the allocator model and the host-time account. `Simulation` is the front object."""
from phantom.sim.options import SimOptions
from phantom.sim.simulation import Iteration, OpStats, Simulation

__all__ = ["Iteration", "OpStats", "SimOptions", "Simulation"]
