"""The run configuration handed from the CLI to each rank process (as JSON)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

ENV_VAR = "PHANTOM_RUN_CONFIG"


@dataclass
class RunConfig:
    gpu: str = "H100"
    vram_gib: float | None = None
    script: str | None = None  # path of the script, or None with `module`
    module: str | None = None
    args: list[str] = field(default_factory=list)
    report_path: str | None = None
    quiet: bool = False
    on_data_read: str = "placeholder"
    nproc_per_node: int = 1
    host_speed: float = 1.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        return cls(**json.loads(text))
