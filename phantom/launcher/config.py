"""The run configuration handed from the CLI to each rank process (as JSON)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

ENV_VAR = "PHANTOM_RUN_CONFIG"


@dataclass
class RunConfig:
    gpu: str = "H100"
    vram_gib: float | None = None
    power_limit_w: float | None = None  # --power-limit (None: the preset's)
    script: str | None = None  # path of the script, or None with `module`
    module: str | None = None
    args: list[str] = field(default_factory=list)
    report_path: str | None = None
    quiet: bool = False
    on_data_read: str = "placeholder"
    nproc_per_node: int = 1
    host_speed: float | None = None  # None: measured (SimOptions.host_speed)
    host_gaps: str = "steady"  # --host-gaps (SimOptions.host_gaps)
    # --host-pace: "process" starts engine/pace.py's process, "probe" does not, "auto" decides
    # by the machine's cores (launch.pace_mode)
    host_pace: str = "auto"
    rank_spread: float | None = None  # --rank-spread (SimOptions.rank_spread); None: the GPU's
    transformer_engine: str = "off"  # --transformer-engine: "simulated" or "off" (adapters)
    # Distributed runs (torchrun semantics): set when --nnodes/--nproc-per-node are given.
    distributed: bool = False
    nnodes: int = 1
    cluster: str | None = None  # preset name or TOML path (phantom.network)
    tee: str = "0"  # "0": rank 0's output only; "all": every rank's, prefixed
    log_dir: str | None = None
    executor: str = "local"  # where rank processes run: "local" or "ray" (--executor)
    ray_address: str | None = None  # --ray-address: an existing Ray cluster; None: ray.init()'s default
    ranks: str = "all"  # which ranks run as processes: "all", "auto" or "0,8,16" (--ranks)
    db_paths: list[str] = field(default_factory=list)  # --db: kernel databases (phantom.cost.db)
    shipped_db: bool = True  # --no-db: leave the shipped database out (fallback model only)
    record_path: str | None = None  # phantom profile: write every op signature here (JSON)
    # Reports and traces (phantom.report): --out DIR, --trace PATH, and which ranks and
    # iterations ([start, stop), stop None: to the end) record trace events.
    out_dir: str | None = None
    trace_path: str | None = None
    trace_ranks: list[int] | None = None
    trace_iters: list | None = None
    parts_dir: str | None = None  # where each rank writes its report and trace part

    @property
    def records(self) -> bool:
        """Whether the ranks record for a trace or run directory."""
        return self.parts_dir is not None

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def initial_ranks(self) -> list[int]:
        """The ranks started at launch; with "auto", rank 0 (the others start on demand)."""
        if self.ranks == "all":
            return list(range(self.world_size))
        if self.ranks == "auto":
            return [0]
        return [int(r) for r in self.ranks.split(",")]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        return cls(**json.loads(text))
