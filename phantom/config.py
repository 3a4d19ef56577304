"""The run configuration, and every `phantom run` option declared once.

`RunConfig` is what the launcher hands each rank process (as JSON, in PHANTOM_RUN_CONFIG). A
field that is a `phantom run` option says so with `option(...)`: its flag, and where argparse
needs more than the field's type and default, its metavar, choices or a default that words
cannot give as a value. The string under a field (an attribute docstring, PEP 257) is its
documentation: its first paragraph is the option's help, in `phantom run --help` and in the
option table of docs/configuration.md (built by `add_options` and phantom.launcher.args.options_markdown),
and a further paragraph is for readers of the code. Defaults that depend on other
options (the cluster's GPU, --ranks above AUTO_RANKS_ABOVE ranks) are resolved in one place,
phantom.launcher.args.resolve_defaults.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import json
import types
import typing
from dataclasses import MISSING, Field, asdict, dataclass, field, fields

ENV_VAR = "PHANTOM_RUN_CONFIG"
# `phantom deepspeed` sets it for its ranks (launcher/deepspeed_cli.py); the DeepSpeed adapter
# (adapters/deepspeed.py) then appends --local_rank to the script's argv, as DeepSpeed's launcher does.
LOCAL_RANK_ARG_ENV = "PHANTOM_DEEPSPEED_LOCAL_RANK_ARG"
# Above this many ranks, `phantom run` runs one process per class of equivalent ranks.
AUTO_RANKS_ABOVE = 8


def option(flag: str, default=None, *, metavar: str | None = None, choices: tuple | None = None,
           text: type | None = None, default_text: str | None = None, factory=None) -> Field:
    """A field that is the `phantom run` option `flag`.

    `text`: the type argparse converts the option's text to, where the field holds something
    else (the CLI parses it further); `default_text`: the default in words, where the field's
    default stands for a value resolved from other options."""
    metadata = {"flag": flag, "metavar": metavar, "choices": choices, "text": text,
                "default_text": default_text}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class RunConfig:
    # -- the simulated machine
    gpu: str = option("--gpu", "H100", metavar="NAME", default_text="the cluster's GPU, else H100")
    """GPU preset, case-insensitive (`phantom gpus` lists them)."""
    vram_gib: float | None = option("--vram-gib", metavar="GIB", default_text="the preset's")
    """Override the GPU's memory size in GiB (e.g. to test an out-of-memory error)."""
    power_limit_w: float | None = option("--power-limit", metavar="WATTS",
                                         default_text="the preset's, e.g. 700 for H100")
    """The GPUs' power limit in W; modelled for Hopper GPUs, whose draw was measured."""
    nproc_per_node: int = option("--nproc-per-node", 1, metavar="N", default_text="the cluster's, else 1")
    """Ranks (simulated GPUs) per node, as torchrun's. Any of --nproc-per-node, --nnodes and
    --cluster makes the run distributed: one process per rank, started with torchrun's
    environment (1 gives a single rank that environment, which torchtitan needs)."""
    nnodes: int = option("--nnodes", 1, metavar="N", default_text="the cluster's, else 1")
    """Number of nodes, as torchrun's."""
    cluster: str | None = option("--cluster", metavar="PRESET|FILE.toml",
                                 default_text="one node with NVLink")
    """The simulated cluster: a preset (`phantom clusters` lists them) or a TOML file
    (docs/clusters.md)."""
    ranks: str = option("--ranks", "all", metavar="auto|all|R,R,...",
                        default_text=f"all up to {AUTO_RANKS_ABOVE} ranks, auto above")
    """Which ranks run as processes: `all`; `auto`, one per class of equivalent ranks (e.g. one
    per pipeline stage; the others copy it); or a list such as 0,8,16, which must hold rank 0.

    "all", "auto" or the ranks that run, "0,8,16"; the CLI resolves "all" to the list."""
    executor: str = option("--executor", "local", choices=("local", "ray"))
    """Where rank processes run: `local`, this machine; `ray`, Ray actors on a Ray cluster (the
    script must be at the same path on every node)."""
    ray_address: str | None = option("--ray-address", metavar="ADDR",
                                     default_text="RAY_ADDRESS, or a local Ray instance started "
                                                  "for the run")
    """The Ray cluster to join (as `ray.init(address=...)`); implies --executor ray."""

    # -- host time (docs/host-time.md)
    host_time: str = option("--host-time", "measured", choices=("measured", "counted", "off"))
    """How the script's host time is charged. `measured`: the script's own Python as it runs
    here, converted to the node's speed, and torch's work at the shipped table's prices;
    `counted`: the table's prices and the script's Python from a saved profile
    (--host-profile), the same to the nanosecond on any machine; `off`: no host time, the
    GPU's time alone."""
    save_host_profile: str | None = option("--save-host-profile", metavar="DIR")
    """Save the script's measured host time, segment by segment, in DIR (one file per rank)
    for `--host-time counted --host-profile DIR`."""
    host_profile: str | None = option("--host-profile", metavar="DIR")
    """The saved host profile a `--host-time counted` run charges the script's Python from."""
    rank_spread: float | None = option("--rank-spread", metavar="SIGMA",
                                       default_text="the GPU preset's, measured on real 2-GPU "
                                                    "hosts")
    """How far apart the ranks of a multi-GPU run go on the host (sigma of a lognormal host
    time): every rank's host time is charged at the pace of the slowest of its node's ranks;
    0 charges a typical rank's pace."""

    # -- what the script meets
    on_data_read: str = option("--on-data-read", "placeholder", choices=("placeholder", "error"))
    """What reading a CUDA tensor's value does: `placeholder` returns a documented placeholder
    value, `error` raises, naming the source line."""
    transformer_engine: str = option("--transformer-engine", "off", choices=("off", "simulated"))
    """`off`: the script runs as on a GPU machine without NVIDIA Transformer Engine;
    `simulated`: phantom's simulated Transformer Engine is importable (Megatron's TE layer
    spec, TE's FusedAdam; bf16, no FP8)."""
    db_paths: list[str] = option("--db", metavar="PATH", factory=list)
    """A kernel database (`phantom profile` makes them) to use besides the shipped one for the
    GPU; repeatable, later files win.

    Held as absolute paths."""
    shipped_db: bool = option("--no-db", True)
    """Leave out the shipped kernel database: fallback (roofline) times only, plus any --db.

    True (no --no-db): the shipped database for the GPU is used."""

    stop_above_ms: float | None = option("--stop-above-ms", metavar="MS")
    """End the run once an iteration after the first takes longer than MS simulated ms
    (checked as its kernels are queued); the report's `simulation.stopped` says so (`phantom sweep` drops a clearly slower layout with
    it).

    Rank 0 checks it: its iterations are the run's."""

    # -- output
    quiet: bool = option("--quiet", False)
    """No progress lines or summary on stderr."""
    tee: str = option("--tee", "0", choices=("0", "all"))
    """Whose output to show: rank 0's (`0`) or every rank's, each line prefixed `[rankN]: `."""
    log_dir: str | None = option("--log-dir", metavar="DIR")
    """Also write each rank's output to `DIR/rank<N>.log`."""
    report_path: str | None = option("--report", metavar="PATH")
    """Write the run report as JSON to PATH (docs/report-schema.md)."""
    out_dir: str | None = option("--out", metavar="DIR")
    """Keep a run directory: report.json, trace.json, config.json, logs/ (render it with
    `phantom report DIR`; docs/reports.md).

    Held as an absolute path."""
    trace_path: str | None = option("--trace", metavar="PATH")
    """Write a Chrome/Perfetto trace (trace-event JSON) to PATH.

    Held as an absolute path."""
    trace_ranks: list[int] | None = option("--trace-ranks", metavar="LIST", text=str,
                                           default_text="all")
    """Ranks that record trace events, e.g. 0,2-3.

    Held parsed: [0, 2, 3]; None for all."""
    trace_iters: list | None = option("--trace-iters", metavar="RANGE", text=str,
                                      default_text="all")
    """Iterations (optimizer steps, from 0) that record trace events: N, A:B (B excluded) or
    A:.

    Held parsed: [start, stop], stop None for the end; None for all."""

    # -- what runs
    module: str | None = option("-m", metavar="MODULE")
    """Run a module like `python -m`; the arguments after it are the module's."""
    script: str | None = None
    """Path of the script (the first argument after phantom's options); None with `module`."""
    args: list[str] = field(default_factory=list)
    """The script's (or module's) arguments."""

    # -- set by the launcher, not options
    distributed: bool = False
    """Whether the run has ranks with torchrun's environment (--nproc-per-node, --nnodes or
    --cluster); a plain `phantom run` is one process, as `python` is."""
    record_path: str | None = None
    """phantom profile: write every op signature the script runs here (JSON)."""
    parts_dir: str | None = None
    """Where each rank writes its report and trace part (phantom.report.rundir.prepare_run)."""

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


# -- the options, for argparse and the documentation -------------------------------------------

def option_fields() -> list[Field]:
    """RunConfig's fields that are `phantom run` options, in declaration order."""
    return [f for f in fields(RunConfig) if "flag" in f.metadata]


def flag_of(name: str) -> str:
    return next(f.metadata["flag"] for f in option_fields() if f.name == name)


def field_docs() -> dict[str, str]:
    """Each RunConfig field's help: the first paragraph of its attribute docstring, on one line.
    Python keeps no such strings, so they are read from the class's source (as tyro does for
    torchtitan's JobConfig)."""
    body = ast.parse(inspect.getsource(RunConfig)).body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            first = inspect.cleandoc(after.value.value).split("\n\n")[0]
            docs[node.target.id] = " ".join(first.split())
    return docs


def _value_type(name: str) -> type:
    """The field's type without None: int for `int | None`, list for `list[str]`."""
    hint = typing.get_type_hints(RunConfig)[name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


def default_text(f: Field) -> str | None:
    """An option's default as its help says it; None where there is none to say (a flag)."""
    words = f.metadata["default_text"]
    if words is None and f.default not in (None, MISSING) and not isinstance(f.default, bool):
        words = str(f.default)
    return words


def add_options(parser: argparse.ArgumentParser, names: typing.Iterable[str] | None = None) -> None:
    """Add RunConfig's options (all, or those named) to `parser`, each with dest = the field's
    name and default None, so that the caller can tell which were given."""
    docs = field_docs()
    wanted = None if names is None else set(names)
    for f in option_fields():
        if wanted is not None and f.name not in wanted:
            continue
        meta = f.metadata
        default = default_text(f)
        text = docs[f.name] + (f" Default: {default}." if default else "")
        kwargs: dict = {"dest": f.name, "default": None, "help": text.replace("%", "%%")}
        kind = _value_type(f.name)
        if kind is bool:  # a flag; --no-X for a field that is True by default
            kwargs["action"] = "store_false" if f.default else "store_true"
        else:
            if kind is list and meta["text"] is None:
                kwargs["action"] = "append"
            elif (meta["text"] or kind) is not str:
                kwargs["type"] = meta["text"] or kind
            kwargs["metavar"] = meta["metavar"]
            kwargs["choices"] = meta["choices"]
        parser.add_argument(meta["flag"], **kwargs)


def options_with_value(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings of `parser` that take a value (argparse's actions know it); a
    command that passes the rest of its arguments through uses them to find where its own end."""
    return {s for action in parser._actions if action.nargs != 0 for s in action.option_strings}
