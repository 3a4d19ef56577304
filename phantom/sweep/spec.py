"""A sweep's specification: the script, the cluster, the parameters to vary, and the points.

A spec comes from a TOML file (`load_spec`), from `phantom sweep`'s command line, or from a
framework's built-in axis set (phantom/sweep/frameworks.py); all three build a `SweepSpec`.
Each point is one combination of the axes' values that passes the constraints, with the
derived parameters computed from it; `point_run` turns it into the `phantom run` command line
that runs it. docs/sweep.md describes the file with examples.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phantom.sweep import expr


class SweepSpecError(ValueError):
    """A spec that cannot be run: the message names the file, the field and what was expected."""


@dataclass
class Parameter:
    """One thing a sweep sets per point: an axis (its `values` are tried) or a derived
    parameter (its `expr` is computed from the axes). Exactly one of `arg`, `append`,
    `config`, `env` and `option` says where the value goes; none leaves it to constraints
    and expressions only."""

    name: str
    """The name used in expressions, in the table and in the JSON."""
    values: list[Any] | None = None
    """The values to try (an axis)."""
    expr: str | None = None
    """A derived parameter's expression over the axes, the parameters derived before it and
    `world_size`, `nnodes`, `nproc_per_node` (phantom/sweep/expr.py)."""
    arg: str | None = None
    """The script option that takes the value, `--flag VALUE`, replacing the value the command
    gives it; for true/false values the flag alone, present when true."""
    append: str | None = None
    """A token appended to the script's arguments, `{}` standing for the value
    (`activation-checkpoint:{}`). Tokens that begin as the template does before `{}` are
    removed from the command first."""
    config: str | None = None
    """`FILE:dotted.key`: a key of a JSON config file that the command names; each point runs
    a copy of the file with the key set."""
    env: str | None = None
    """An environment variable of the run, set to the value."""
    option: str | None = None
    """A `phantom run` option that takes the value (`--gpu`, `--power-limit`)."""
    omit: Any = None
    """With `arg` or `option`: the value that leaves the flag out (`"none"` for Megatron's
    `--recompute-granularity`)."""

    @property
    def derived(self) -> bool:
        return self.expr is not None


PLACEMENTS = ("arg", "append", "config", "env", "option")


@dataclass
class SweepSpec:
    """What `phantom sweep` runs: every field but `parameters` and `constraints` is the same
    for all points."""

    target: list[str]
    """The script and its arguments (`train.py --steps 4`), or `-m MODULE ARGS`."""
    run_options: list[str] = field(default_factory=list)
    """`phantom run` options for every point (`--cluster h100-ib --nnodes 8`)."""
    parameters: list[Parameter] = field(default_factory=list)
    """The axes and derived parameters, in order: a derived one reads those above it."""
    constraints: list[str] = field(default_factory=list)
    """Expressions every point must satisfy (`world_size % (tp * pp) == 0`)."""
    tokens_per_iteration: str | None = None
    """An expression for the tokens one iteration trains (all ranks together), to rank points
    by tokens/s per GPU; without it points rank by iteration time."""
    mfu_pattern: str | None = None
    """A regular expression whose first group is the MFU in percent in the script's output
    (the last match counts)."""
    tflops_pattern: str | None = None
    """A regular expression whose first group is the TFLOP/s per GPU the script printed; the
    MFU is that over the GPU's dense bf16 peak."""
    name: str = "sweep"
    """A name for the table and the page."""
    source: str = "the command line"
    """Where the spec came from (the TOML file), for error messages."""
    world_size: int = 1
    """Ranks of the simulated run (from the run options; set by `resolve`)."""
    nnodes: int = 1
    nproc_per_node: int = 1
    gpu: str = "H100"
    """The simulated GPU's preset name (set by `resolve`)."""
    gpu_memory_bytes: int = 0
    gpu_bf16_tflops: float = 0.0

    def axes(self) -> list[Parameter]:
        return [p for p in self.parameters if not p.derived]

    def error(self, where: str, what: str) -> SweepSpecError:
        return SweepSpecError(f"{self.source}: {where}: {what}")


# -- points ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One combination of the axes' values, with the derived parameters."""

    values: tuple[tuple[str, Any], ...]

    def get(self, name: str) -> Any:
        return dict(self.values)[name]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def label(self) -> str:
        return " ".join(f"{k}={value_text(v)}" for k, v in self.values)


@dataclass
class Skipped:
    """A combination that is not a point, and why."""
    values: dict[str, Any]
    reason: str


def cluster_names(spec: SweepSpec) -> dict[str, Any]:
    return {"world_size": spec.world_size, "nnodes": spec.nnodes, "nproc_per_node": spec.nproc_per_node}


def points(spec: SweepSpec) -> tuple[list[Point], list[Skipped]]:
    """Every combination of the axes, in the order the axes and their values are given: the
    valid ones as Points, the others with the constraint or error that ruled them out."""
    axes = spec.axes()
    trees = {p.name: expr.parse(p.expr) for p in spec.parameters if p.derived}
    checks = [(c, expr.parse(c)) for c in spec.constraints]
    tokens = expr.parse(str(spec.tokens_per_iteration)) if spec.tokens_per_iteration else None
    valid, skipped = [], []
    for combo in itertools.product(*(a.values for a in axes)):
        env = cluster_names(spec) | dict(zip((a.name for a in axes), combo))
        reason = None
        for p in spec.parameters:
            if not p.derived:
                continue
            try:
                value = expr.evaluate(trees[p.name], env)
            except (ArithmeticError, TypeError, ValueError) as e:
                reason = f"{p.name} = {p.expr}: {e}"
                break
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            env[p.name] = value
        if reason is None:
            for text, tree in checks:
                try:
                    ok = expr.evaluate(tree, env)
                except (ArithmeticError, TypeError, ValueError) as e:
                    ok, text = False, f"{text} ({e})"
                if not ok:
                    reason = f"not {text}"
                    break
        if reason is None and tokens is not None:
            try:
                value = expr.evaluate(tokens, env)
                if not (isinstance(value, (int, float)) and value > 0):
                    reason = f"tokens_per_iteration = {value!r}, not a positive number"
            except (ArithmeticError, TypeError, ValueError) as e:
                reason = f"tokens_per_iteration: {e}"
        values = {p.name: env[p.name] for p in spec.parameters if p.name in env}
        if reason is None:
            valid.append(Point(tuple(values.items())))
        else:
            skipped.append(Skipped(values, reason))
    return valid, skipped


# -- a point's command ------------------------------------------------------------------------
@dataclass
class PointRun:
    """What runs one point: `phantom run` with these arguments, environment and files."""
    run_args: list[str]
    """`phantom run`'s arguments: options, then the target."""
    env: dict[str, str]
    files: dict[str, str]
    """Config files to write first, by path (in the point's directory), with their text."""

    def key(self) -> str:
        """Names the point's result in the cache: a different command, environment or config
        file is a different result."""
        blob = json.dumps([self.run_args, sorted(self.env.items()), sorted(self.files.items())])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def point_run(spec: SweepSpec, point: Point, point_dir: Path) -> PointRun:
    """The `phantom run` arguments, environment and config files of `point`; config copies
    are named under `point_dir`."""
    target = list(spec.target)
    options = list(spec.run_options)
    env: dict[str, str] = {}
    configs: dict[str, dict] = {}
    appended: list[str] = []  # last, after every option: torchtitan reads them as subcommands
    for p in spec.parameters:
        value = point.get(p.name)
        if p.omit is not None and value == p.omit and (p.arg or p.option):
            if p.arg:
                target = _remove_arg(target, p.arg)
            else:
                options = _remove_arg(options, p.option)
        elif p.arg:
            target = _set_arg(target, p.arg, value)
        elif p.append:
            prefix = p.append.split("{}")[0]
            if prefix:
                target = [t for t in target if not t.startswith(prefix)]
            appended.append(p.append.replace("{}", value_text(value)))
        elif p.option:
            options = _set_arg(options, p.option, value)
        elif p.env:
            env[p.env] = value_text(value)
        elif p.config:
            file, key = p.config.rsplit(":", 1)
            if file not in configs:
                configs[file] = _read_json_config(spec, p, file)
            _set_key(configs[file], key, value)
    target += appended
    files = {}
    for file, data in configs.items():
        copy_path = str(point_dir / Path(file).name)
        files[copy_path] = json.dumps(data, indent=2) + "\n"
        target = [copy_path if t == file else
                  t[:-len(file)] + copy_path if t.endswith(f"={file}") else t for t in target]
    return PointRun(options + ["--"] * (target[:1] != ["-m"]) + target, env, files)


def value_text(value: Any) -> str:
    """A value as the command line and the tables write it (true/false, 2 for 2.0)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _remove_arg(tokens: list[str], flag: str, takes_value: bool = True) -> list[str]:
    """`tokens` without `flag` (`--flag V`, `--flag=V`, or the flag alone)."""
    out, i = [], 0
    while i < len(tokens):
        t = tokens[i]
        if t == flag:
            takes = takes_value and i + 1 < len(tokens) and not tokens[i + 1].startswith("--")
            i += 2 if takes else 1
            continue
        if not t.startswith(flag + "="):
            out.append(t)
        i += 1
    return out


def _set_arg(tokens: list[str], flag: str, value: Any) -> list[str]:
    """`tokens` with `flag`'s value set (`--flag V` or `--flag=V` replaced, else appended); a
    true/false value makes the flag present or absent."""
    out = _remove_arg(tokens, flag, takes_value=not isinstance(value, bool))
    if isinstance(value, bool):
        return out + [flag] if value else out
    return out + [flag, value_text(value)]


def _read_json_config(spec: SweepSpec, p: Parameter, file: str) -> dict:
    where = f"axis {p.name!r}, config"
    if file not in spec.target and not any(t.endswith(f"={file}") for t in spec.target):
        raise spec.error(where, f"{file} is not among the command's arguments, so a copy of it "
                                f"could not replace it (give the path as the command gives it)")
    try:
        data = json.loads(Path(file).read_text())
    except FileNotFoundError:
        raise spec.error(where, f"{file}: no such file") from None
    except ValueError as e:
        raise spec.error(where, f"{file} is not JSON ({e}); config axes edit JSON files "
                                f"(DeepSpeed's); for other formats vary a script option") from None
    if not isinstance(data, dict):
        raise spec.error(where, f"{file} does not hold a JSON object")
    return copy.deepcopy(data)


def _set_key(data: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


# -- the TOML file ----------------------------------------------------------------------------
SPEC_KEYS = {"name", "script", "module", "args", "options", "constraints", "tokens_per_iteration",
             "mfu_pattern", "tflops_pattern", "axis", "derived"}
PARAMETER_KEYS = {"name", "omit", *PLACEMENTS}


def load_spec(path: str | Path) -> SweepSpec:
    """Read a sweep spec from a TOML file (docs/sweep.md); SweepSpecError says what is wrong."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SweepSpecError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepSpecError(f"{path}: not valid TOML: {e}") from None
    src = str(path)

    def fail(where: str, what: str) -> SweepSpecError:
        return SweepSpecError(f"{src}: {where}: {what}")

    unknown = set(data) - SPEC_KEYS
    if unknown:
        raise fail(", ".join(sorted(unknown)), f"unknown key (known: {', '.join(sorted(SPEC_KEYS))})")
    if ("script" in data) == ("module" in data):
        raise fail("script/module", "give exactly one: `script = \"train.py\"` or "
                                    "`module = \"torchtitan.train\"`")
    args = _string_list(data.get("args", []), "args", fail)
    target = ["-m", _string(data["module"], "module", fail)] if "module" in data else \
        [_string(data["script"], "script", fail)]
    spec = SweepSpec(
        target=target + args,
        run_options=_string_list(data.get("options", []), "options", fail),
        constraints=_string_list(data.get("constraints", []), "constraints", fail),
        tokens_per_iteration=None if data.get("tokens_per_iteration") is None
        else str(data["tokens_per_iteration"]),
        mfu_pattern=_optional_pattern(data, "mfu_pattern", fail),
        tflops_pattern=_optional_pattern(data, "tflops_pattern", fail),
        name=str(data.get("name", path.stem)),
        source=src,
    )
    for i, table in enumerate(data.get("axis", [])):
        spec.parameters.append(_parameter(table, f"axis[{i}]", fail, derived=False))
    for i, table in enumerate(data.get("derived", [])):
        spec.parameters.append(_parameter(table, f"derived[{i}]", fail, derived=True))
    return spec


def _string(value: Any, where: str, fail) -> str:
    if not isinstance(value, str):
        raise fail(where, f"expected a string, got {value!r}")
    return value


def _optional_pattern(data: dict, key: str, fail) -> str | None:
    if key not in data:
        return None
    text = _string(data[key], key, fail)
    try:
        compiled = re.compile(text)
    except re.error as e:
        raise fail(key, f"not a regular expression: {e}") from None
    if compiled.groups < 1:
        raise fail(key, "the pattern needs a group around the number, e.g. 'mfu: ([\\d.]+)%'")
    return text


def _string_list(value: Any, where: str, fail) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise fail(where, f"expected a list of strings, got {value!r}")
    return [str(v) for v in value]


def _parameter(table: Any, where: str, fail, derived: bool) -> Parameter:
    if not isinstance(table, dict):
        raise fail(where, "expected a table")
    kind = "expr" if derived else "values"
    unknown = set(table) - PARAMETER_KEYS - {kind}
    if unknown:
        raise fail(where, f"unknown key {', '.join(sorted(unknown))} (known: "
                          f"{', '.join(sorted(PARAMETER_KEYS | {kind}))})")
    if "name" not in table:
        raise fail(where, "every parameter needs a `name`")
    name = _string(table["name"], f"{where}.name", fail)
    where = f"{where} ({name})"
    if kind not in table:
        raise fail(where, f"missing `{kind}`" + (" (an expression)" if derived else
                                                  " (a list of the values to try)"))
    if derived:
        values, text = None, _string(table["expr"], f"{where}.expr", fail)
    else:
        values, text = table["values"], None
        if not isinstance(values, list) or not values:
            raise fail(f"{where}.values", f"expected a non-empty list, got {values!r}")
    placed = [k for k in PLACEMENTS if k in table]
    if len(placed) > 1:
        raise fail(where, f"give at most one of {', '.join(PLACEMENTS)} (got {', '.join(placed)})")
    kwargs = {k: _string(table[k], f"{where}.{k}", fail) for k in placed}
    if "omit" in table:
        if not ({"arg", "option"} & set(placed)):
            raise fail(f"{where}.omit", "omit goes with arg or option (the flag it leaves out)")
        kwargs["omit"] = table["omit"]
    if "config" in kwargs and ":" not in kwargs["config"]:
        raise fail(f"{where}.config", f"expected FILE:dotted.key, got {kwargs['config']!r}")
    return Parameter(name=name, values=values, expr=text, **kwargs)


def resolve(spec: SweepSpec) -> None:
    """Fill in the cluster's size and GPU from the run options (`resolve_cluster`), then check
    the spec (`check`)."""
    resolve_cluster(spec)
    check(spec)


def resolve_cluster(spec: SweepSpec) -> None:
    """The cluster's size and GPU from the spec's run options, as `phantom run` reads them; the
    command must be one `phantom run` accepts."""
    from phantom.hardware import get_gpu
    from phantom.launcher.args import UsageError, parse_run_args

    try:
        config = parse_run_args(spec.run_options + ["--"] * (spec.target[:1] != ["-m"]) + spec.target)
    except UsageError as e:
        raise spec.error("options/script", f"phantom run refuses the command: {e}") from None
    except SystemExit:  # argparse printed what it refused
        raise spec.error("options", "phantom run refuses these options (above)") from None
    spec.world_size, spec.nnodes, spec.nproc_per_node = (config.world_size, config.nnodes,
                                                         config.nproc_per_node)
    gpu = get_gpu(config.gpu)
    if config.vram_gib is not None:
        gpu = gpu.with_memory_gib(config.vram_gib)
    spec.gpu, spec.gpu_memory_bytes, spec.gpu_bf16_tflops = gpu.name, gpu.memory_bytes, gpu.bf16_tflops


def check(spec: SweepSpec) -> None:
    """The checks a spec from any source gets: unique names, parseable expressions that read
    only known names, derived ones after what they read."""
    known = set(cluster_names(spec))
    for p in spec.parameters:
        where = f"{'derived' if p.derived else 'axis'} {p.name!r}"
        if not p.name.isidentifier():
            raise spec.error(where, "a name must be an identifier (letters, digits, _), to be "
                                    "usable in expressions")
        if p.name in known:
            raise spec.error(where, "the name is taken (by another parameter or by "
                                    "world_size, nnodes, nproc_per_node)")
        if p.derived:
            _check_expr(spec, p.expr, known, where)
        known.add(p.name)
    for c in spec.constraints:
        _check_expr(spec, c, known, f"constraint {c!r}")
    if spec.tokens_per_iteration is not None:
        _check_expr(spec, str(spec.tokens_per_iteration), known, "tokens_per_iteration")
    if not spec.axes():
        raise spec.error("axis", "a sweep needs at least one axis (a parameter with values)")
    for p in spec.axes():
        if not p.values:
            raise spec.error(f"axis {p.name!r}", "no values to try")


def _check_expr(spec: SweepSpec, text: str, known: set[str], where: str) -> None:
    try:
        unknown = expr.names(expr.parse(text)) - known
    except expr.ExprError as e:
        raise spec.error(where, str(e)) from None
    if unknown:
        raise spec.error(where, f"unknown name {', '.join(sorted(unknown))} (known here: "
                                f"{', '.join(sorted(known))})")
