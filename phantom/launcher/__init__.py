"""The launcher: starts the simulated rank process(es) that run the user's script.

`phantom run` (cli.py) builds a `RunConfig` and calls `launch`, which starts
`python -m phantom.launcher.bootstrap` with the config in the environment. The bootstrap
loads the fake CUDA library before torch, installs the simulation, and runs the script as
`__main__` with the user's argv, cwd and exit code.
"""
from phantom.config import RunConfig
from phantom.launcher.launch import launch

__all__ = ["RunConfig", "launch"]
