"""What a rank's simulation is asked to do: the options one `Simulation` is built from."""
from __future__ import annotations

from dataclasses import dataclass, field

from phantom.hardware import GPUSpec


@dataclass
class SimOptions:
    gpu: GPUSpec
    """The simulated GPU (a preset from phantom.hardware, possibly with its memory or power
    limit overridden)."""

    device_count: int = 1
    """CUDA devices the script sees (`torch.cuda.device_count()`)."""

    on_data_read: str = "placeholder"
    """What reading a device value phantom does not know does: "placeholder" (a documented
    stand-in value) or "error" (raise, naming the script's line)."""

    host_speed: float | None = None
    """How many times as fast as the simulated node's host this machine runs the script's
    framework code. None: measured at start-up (the same tiny CPU training step here and, once,
    on the node's host: GPUSpec.host_step_ns)."""

    quiet: bool = False
    """No progress lines on stderr."""

    host_gaps: str = "steady"
    """"steady": from an iteration's second sighting on, a host gap is charged at the mean of
    the same point of the last few iterations (host.steady.SteadyGaps); "measured": every gap
    as measured here (scaled by the speed probe)."""

    rank_spread: float | None = None
    """Spread (sigma) of the ranks' host times in a multi-GPU step; None: the GPU preset's
    (GPUSpec.host_rank_spread). 0 runs every rank at a typical rank's pace."""

    db_paths: list[str] = field(default_factory=list)
    """Kernel databases added to the shipped one for this GPU (`phantom run --db`)."""

    record_ops: bool = False
    """Record every op signature (`phantom profile`)."""

    shipped_db: bool = True
    """Use the kernel database shipped for this GPU (`--no-db` turns it off)."""
