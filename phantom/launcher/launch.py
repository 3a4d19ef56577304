"""Start the rank process for a run and pass its exit code through."""
from __future__ import annotations

import os
import subprocess
import sys

from phantom.launcher.config import ENV_VAR, RunConfig


def launch(config: RunConfig) -> int:
    env = dict(os.environ)
    env[ENV_VAR] = config.to_json()
    env["PHANTOM_DEVICE_COUNT"] = str(max(config.nproc_per_node, 1))
    cmd = [sys.executable, "-m", "phantom.launcher.bootstrap"]
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 130
