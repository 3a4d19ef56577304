"""What a rank's simulation is asked to do: the options one `Simulation` is built from.

Every field but `gpu` comes from the run's configuration, whose defaults and documentation
are in phantom/config.py (`RunConfig`); `SimOptions.for_run` is the one place that maps one to
the other, so no default is written twice.
"""
from __future__ import annotations

from dataclasses import dataclass

from phantom.config import RunConfig
from phantom.hardware import GPUSpec


@dataclass
class SimOptions:
    gpu: GPUSpec
    """The simulated GPU (a preset from phantom.hardware, with --vram-gib and --power-limit
    applied)."""

    device_count: int
    """CUDA devices the script sees (`torch.cuda.device_count()`): the ranks per node."""

    on_data_read: str
    """RunConfig.on_data_read: "placeholder" or "error" for a device value phantom does not know."""

    host_time: str
    """RunConfig.host_time: "measured", "counted" or "off" (host.account.HostAccount)."""

    host_profile: str | None
    """RunConfig.host_profile: the saved profile a counted run charges the script's Python from."""

    save_host_profile: str | None
    """RunConfig.save_host_profile: where to save this run's measured segments."""

    quiet: bool
    """No progress lines on stderr (`--quiet`, and every rank but rank 0)."""

    rank_spread: float | None
    """RunConfig.rank_spread: sigma of the ranks' host times; None: the GPU preset's."""

    db_paths: list[str]
    """RunConfig.db_paths: kernel databases added to the shipped one for this GPU."""

    record_ops: bool
    """Record every op signature (`phantom profile`)."""

    shipped_db: bool
    """RunConfig.shipped_db: use the kernel database shipped for this GPU."""

    stop_above_ms: float | None
    """RunConfig.stop_above_ms: end the run after a later iteration slower than this."""

    @classmethod
    def for_run(cls, config: RunConfig, gpu: GPUSpec, rank: int = 0) -> SimOptions:
        """The options of rank `rank` of the run `config` describes, on `gpu`."""
        return cls(gpu=gpu, device_count=max(config.nproc_per_node, 1),
                   on_data_read=config.on_data_read, host_time=config.host_time,
                   host_profile=config.host_profile, save_host_profile=config.save_host_profile,
                   quiet=config.quiet or rank != 0,
                   rank_spread=config.rank_spread, db_paths=config.db_paths,
                   record_ops=config.record_path is not None, shipped_db=config.shipped_db,
                   stop_above_ms=config.stop_above_ms if rank == 0 else None)
