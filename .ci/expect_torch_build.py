"""Fail unless the installed torch is the build a CI step asked for: `cpu` (torch==2.13.0 from
PyPI's CPU wheel, what the README installs) or `cuda` (a CUDA build on this GPU-less machine).

    python .ci/expect_torch_build.py cpu 2.13.0
"""
from __future__ import annotations

import sys

import torch


def main() -> None:
    build, version = sys.argv[1], sys.argv[2]
    got = "cuda" if torch.version.cuda else "cpu"
    release = torch.__version__.split("+")[0]
    if got != build or release != version:
        raise SystemExit(f"expect_torch_build: this step needs torch {version} ({build} build); "
                         f"pip installed {torch.__version__} ({got} build, CUDA {torch.version.cuda})")
    print(f"ci: torch {torch.__version__} ({got} build)")


if __name__ == "__main__":
    main()
