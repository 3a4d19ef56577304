"""The torchrun target of `bench/suites/torchtitan.py real`: torchtitan 0.3.0's own trainer on real GPUs.

    torchrun --standalone --nproc-per-node 2 bench/suites/torchtitan_entry.py [--patches FILE] --module examples.torchtitan --config llama3_8b ...

What runs is `python -m torchtitan.train ARGS`, unchanged, after two things:
1. phantom's torch-version patches for torchtitan 0.3.0 on torch 2.11-2.13
   (`phantom.adapters.torchtitan.install_compat`: no simulation, only APIs that torch version
   lacks; each is documented there). The simulated run applies the same ones.
2. Where the machine lacks them (the lent GPU machines have no network to install them), light
   stand-ins for two libraries torchtitan imports but this benchmark does not use for anything
   that touches the GPU: Hugging Face `datasets` (the benchmark's dataset is a local JSONL file:
   a reader with the same row order, contiguous per-rank shards and re-loop shuffle API) and
   TensorBoard (imported by torchtitan's metrics module, disabled in the presets). The real
   libraries are used when installed.
`--patches FILE` (first) runs FILE before the trainer, as phantom runs it when FILE is the script
(bench/suites/torchtitan_2024.py: the 2024 model code of the published rows).
"""
from __future__ import annotations

import json
import random
import importlib.util
import runpy
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class _Dataset:
    """The part of `datasets.Dataset` torchtitan's HuggingFaceTextDataset uses."""

    def __init__(self, rows: list[dict]) -> None:
        self._rows = rows

    @property
    def num_rows(self) -> int:
        return len(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self):
        return iter(self._rows)

    def skip(self, n: int) -> "_Dataset":
        return _Dataset(self._rows[n:])

    def shuffle(self, seed: int | None = None) -> "_Dataset":
        rows = list(self._rows)
        random.Random(seed).shuffle(rows)
        return _Dataset(rows)

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> "_Dataset":
        # datasets.Dataset.shard(contiguous=True): the first len % n shards get one more row
        div, mod = divmod(len(self._rows), num_shards)
        start = div * index + min(index, mod)
        end = start + div + (1 if index < mod else 0)
        return _Dataset(self._rows[start:end])


def _load_dataset(path: str, split: str = "train", **kwargs) -> _Dataset:
    files = sorted(p for p in Path(path).iterdir() if p.suffix in (".jsonl", ".json"))
    if not files:
        raise FileNotFoundError(f"no .jsonl/.json files in {path}")
    rows = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    return _Dataset(rows)


def _split_dataset_by_node(dataset: _Dataset, rank: int, world_size: int) -> _Dataset:
    return dataset.shard(num_shards=world_size, index=rank, contiguous=True)


def _install_standins() -> list[str]:
    installed = []
    try:
        import datasets  # noqa: F401
    except ImportError:
        mod = types.ModuleType("datasets")
        mod.Dataset, mod.load_dataset = _Dataset, _load_dataset
        dist = types.ModuleType("datasets.distributed")
        dist.split_dataset_by_node = _split_dataset_by_node
        mod.distributed = dist
        sys.modules["datasets"], sys.modules["datasets.distributed"] = mod, dist
        installed.append("datasets")
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        mod = types.ModuleType("torch.utils.tensorboard")

        class SummaryWriter:
            def __init__(self, *args, **kwargs):
                raise ImportError("TensorBoard is not installed (bench/suites/torchtitan_entry.py)")

        mod.SummaryWriter = SummaryWriter
        sys.modules["torch.utils.tensorboard"] = mod
        installed.append("tensorboard")
    return installed


def main() -> None:
    # bench/suites/ is sys.path[0] for this script, and bench/suites/torchtitan.py would shadow the package.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(REPO))  # phantom (its compat patches) and examples.torchtitan
    from phantom.adapters.torchtitan import install_compat

    install_compat()
    standins = _install_standins()
    if standins:
        print(f"torchtitan_entry: stand-ins for {', '.join(standins)} (not installed)", flush=True)
    args = sys.argv[1:]
    if args[:1] == ["--patches"]:
        # a module of its own name in sys.modules, not "__main__" (patches only): torch.compile's
        # guards look a compiled function's globals up by its module's name
        spec = importlib.util.spec_from_file_location("torchtitan_patches", args[1])
        module = importlib.util.module_from_spec(spec)
        sys.modules["torchtitan_patches"] = module
        spec.loader.exec_module(module)
        args = module.take_own_flags(args[2:]) if hasattr(module, "take_own_flags") else args[2:]
    sys.argv = ["torchtitan.train", *args]
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
