"""The claims ledger: every claim C1..C36 of the article, checked against the real vLLM.

Two halves:

- **API checks** (:func:`run_checks`): each API-shaped claim is *executed* against the
  installed vLLM (construct ``SpeculativeConfig`` / ``SamplingParams`` / ``EngineArgs``,
  import names, look for executables, read vLLM's own source). No weights and no
  engine are needed: models are ``config.json`` files under ``data/model_configs/``.
  One row per check, with the exception type and message verbatim, the real API
  that does the job and provenance; stored as
  ``data/claims/api_checks-<vllm_package>-<version>.parquet``. The same module runs on
  a GPU host (``python -m specdec.claims --out DIR``): it needs only the standard
  library, vLLM, pandas/pyarrow and PyYAML (a vLLM dependency).
- **The ledger** (``data/claims/ledger.yaml``, versioned): the article's own words
  (Chinese, verbatim), an English rendering, the kind of claim, the verdict and its
  evidence. API claims name the checks they rest on and the outcome recorded for the
  reference vLLM (tests re-run the checks and fail if vLLM changes). Numeric claims
  name a derivation rule and the article's setting; their verdict comes from measured
  rows in that setting only (:mod:`specdec.comparability`), rows in another setting give
  ``our-figure-in-our-setting``, and no rows ``pending-measurement``.
  No number is ever written into the ledger as ours.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.metadata
import inspect
import io
import json
import os
import re
import shutil
import sys
import typing
from pathlib import Path
from typing import Any, Callable

from . import comparability, paths
from .profiles import config_hash
from .provenance import collect as collect_provenance

CLAIMS_DIR = paths.DATA_DIR / "claims"
LEDGER_PATH = CLAIMS_DIR / "ledger.yaml"

#: Rows exist, but none in the article's setting (:mod:`specdec.comparability`): our figure
#: is shown in our setting. Not a verdict on the claim: never counted as reproduced or
#: contradicted.
OUR_FIGURE = "our-figure-in-our-setting"
VERDICTS = ("reproduced", "contradicted", OUR_FIGURE, "api-does-not-exist",
            "exists-differently", "not-testable-here", "pending-measurement")
#: The verdicts that judge a claim: on a numeric claim, from comparable rows only.
JUDGED = ("reproduced", "contradicted")
KINDS = ("api", "numeric", "advice", "mechanism")
#: Outcomes of one check. "ignored": vLLM accepts the value but discards it.
OUTCOMES = ("accepted", "rejected", "ignored", "present", "missing")

#: The article's target and drafts (C3, C7-C9), as config-only models.
TARGET_CONFIG = "llama-3-8b"
ARTICLE_DRAFT_CONFIGS = ("tinyllama-1.1b", "phi-2", "gpt2-medium")
#: The article's error codes (C22).
ARTICLE_ERROR_CODES = ("CUDA_OOM", "ACCEPT_RATE_LOW", "TOKEN_MISMATCH", "K_TOO_LARGE")

CHECK_COLUMNS = ["check_id", "claim_ids", "description", "call", "outcome",
                 "exception_type", "exception_message", "error_summary", "observed",
                 "real_api", "vllm_source", "config_hash"]


# --------------------------------------------------------------------------- #
# Check registry
# --------------------------------------------------------------------------- #
@dataclasses.dataclass(frozen=True)
class Check:
    id: str
    claims: tuple[str, ...]
    description: str
    call: str  # the call as a reader would type it
    real_api: str  # what does the job in real vLLM
    fn: Callable[["Context"], "Result"]

    def spec(self) -> dict[str, Any]:
        """What the check is (hashed into ``config_hash``): change the call, change the hash."""
        return {"id": self.id, "claims": list(self.claims), "call": self.call,
                "source": inspect.getsource(self.fn)}


@dataclasses.dataclass
class Result:
    outcome: str
    exception_type: str | None = None
    exception_message: str | None = None
    error_summary: str | None = None
    observed: dict[str, Any] = dataclasses.field(default_factory=dict)
    vllm_source: str | None = None


CHECKS: list[Check] = []


def check(id: str, claims: str, description: str, call: str, real_api: str = ""):
    def deco(fn):
        CHECKS.append(Check(id, tuple(claims.split()), description, call, real_api, fn))
        return fn
    return deco


def _exc_type(e: BaseException) -> str:
    t = type(e)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _error_summary(e: BaseException) -> str:
    """A short, machine-independent summary (pydantic errors: field + message per error)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            return "; ".join(f"{'.'.join(map(str, err.get('loc', ()))) or '<root>'}: "
                             f"{err.get('msg')}" for err in errors())
        except Exception:  # noqa: BLE001 - not a pydantic error after all
            pass
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def attempt(fn: Callable[[], Any], observe: Callable[[Any], dict] | None = None,
            source: str | None = None) -> Result:
    """Run ``fn``; "accepted" with what ``observe`` reads off the result, or "rejected"."""
    try:
        value = fn()
    except Exception as e:  # noqa: BLE001 - recording the exception is the point
        return Result("rejected", _exc_type(e), str(e), _error_summary(e), vllm_source=source)
    return Result("accepted", observed=observe(value) if observe else {}, vllm_source=source)


class Context:
    """What the checks share: the vLLM under test and the config-only models."""

    def __init__(self, model_configs: Path):
        import vllm

        self.vllm = vllm
        self.vllm_dir = Path(vllm.__file__).parent
        self.model_configs = Path(model_configs)
        self._target = None
        self._sources: dict[Path, str] | None = None

    def model_dir(self, name: str) -> str:
        d = self.model_configs / name
        if not (d / "config.json").is_file():
            raise FileNotFoundError(f"{d / 'config.json'} does not exist")
        return str(d)

    def vocab(self, name: str) -> int:
        cfg = json.loads((Path(self.model_dir(name)) / "config.json").read_text())
        return int(cfg.get("vocab_size") or cfg["text_config"]["vocab_size"])

    def target_model_config(self):
        """vLLM's ModelConfig of the Llama-3-8B target, from config.json only (no weights)."""
        if self._target is None:
            from vllm.config import ModelConfig

            self._target = ModelConfig(model=self.model_dir(TARGET_CONFIG),
                                       skip_tokenizer_init=True, max_model_len=2048)
        return self._target

    def spec(self, tp: int = 1, **kw):
        """SpeculativeConfig against the target at tensor parallel size ``tp``."""
        from vllm.config import ParallelConfig, SpeculativeConfig

        return SpeculativeConfig(target_model_config=self.target_model_config(),
                                 target_parallel_config=ParallelConfig(tensor_parallel_size=tp),
                                 **kw)

    def rel(self, obj_or_path) -> str:
        """Source path of a vLLM object (``vllm/...py:line``), as the pinned wheel has it."""
        if isinstance(obj_or_path, (str, Path)):
            p, line = Path(obj_or_path), None
        else:
            p = Path(inspect.getsourcefile(obj_or_path))
            try:
                line = inspect.getsourcelines(obj_or_path)[1]
            except (OSError, TypeError):
                line = None
        rel = "vllm/" + p.resolve().relative_to(self.vllm_dir.resolve()).as_posix()
        return f"{rel}:{line}" if line else rel

    def sources(self) -> dict[Path, str]:
        """vLLM's installed Python files and their text, read once (several checks grep them)."""
        if self._sources is None:
            self._sources = {f: f.read_text(errors="ignore")
                             for f in sorted(self.vllm_dir.rglob("*.py"))}
        return self._sources

    def grep(self, pattern: str) -> dict[str, int]:
        """``{vllm/relative/path.py: count}`` of a regex in vLLM's installed Python source."""
        rx = re.compile(pattern)
        hits: dict[str, int] = {}
        for f, text in self.sources().items():
            n = len(rx.findall(text))
            if n:
                hits[self.rel(f)] = n
        return hits


def spec_fields() -> list[str]:
    """Field names of the installed vLLM's ``SpeculativeConfig``."""
    from vllm.config import SpeculativeConfig

    try:
        return sorted(f.name for f in dataclasses.fields(SpeculativeConfig))
    except TypeError:  # not a (pydantic) dataclass in this version
        return sorted(getattr(SpeculativeConfig, "__pydantic_fields__", {}))


def literal_values(cls, field_name: str) -> list[str]:
    """Values of a ``Literal[...]`` field annotation (nested Literals flattened)."""
    pyd = getattr(cls, "__pydantic_fields__", {}).get(field_name)  # resolved by pydantic
    if pyd is not None:
        hint = pyd.annotation
    else:
        try:
            hint = typing.get_type_hints(cls).get(field_name)
        except Exception:  # noqa: BLE001 - unresolvable forward references
            hint = None

    def walk(tp):
        if typing.get_origin(tp) is typing.Literal:
            for a in typing.get_args(tp):
                yield from walk(a) if not isinstance(a, str) else [a]
        else:
            for a in typing.get_args(tp):
                yield from walk(a)
    return sorted(set(walk(hint))) if hint is not None else []


def _spec_cls():
    from vllm.config import SpeculativeConfig
    return SpeculativeConfig


def _membership(ctx: Context, key: str) -> Result:
    from vllm.config import SpeculativeConfig

    present = key in spec_fields()
    return Result("present" if present else "missing",
                  observed={"field": key, "in SpeculativeConfig fields": present},
                  vllm_source=ctx.rel(SpeculativeConfig))


# --------------------------------------------------------------------------- #
# The checks (ids are cited by data/claims/ledger.yaml)
# --------------------------------------------------------------------------- #
@check("speculative_config_fields", "C6",
       "The keys the installed vLLM's SpeculativeConfig accepts (pre-flight validates against them)",
       "dataclasses.fields(vllm.config.SpeculativeConfig)",
       "vllm.config.SpeculativeConfig")
def _c_fields(ctx):
    from vllm.config import SpeculativeConfig

    return Result("present", observed={"fields": spec_fields(),
                                       "methods": literal_values(SpeculativeConfig, "method")},
                  vllm_source=ctx.rel(SpeculativeConfig))


@check("spec_key_model", "C3 C6", "speculative_config key `model` (the draft)",
       'SpeculativeConfig(model="ngram", num_speculative_tokens=5)',
       "speculative_config={'model': <draft path>, 'num_speculative_tokens': K}")
def _c_model(ctx):
    from vllm.config import SpeculativeConfig

    return attempt(lambda: SpeculativeConfig(model="ngram", num_speculative_tokens=5),
                   lambda sc: {"method": sc.method}, ctx.rel(SpeculativeConfig))


@check("spec_key_num_speculative_tokens", "C2 C6", "speculative_config key `num_speculative_tokens`",
       'SpeculativeConfig(method="ngram", num_speculative_tokens=5)',
       "speculative_config={'num_speculative_tokens': K}")
def _c_k(ctx):
    from vllm.config import SpeculativeConfig

    return attempt(lambda: SpeculativeConfig(method="ngram", num_speculative_tokens=5),
                   lambda sc: {"num_speculative_tokens": sc.num_speculative_tokens},
                   ctx.rel(SpeculativeConfig))


@check("spec_key_draft_tensor_parallel_size", "C6 C15",
       "speculative_config key `draft_tensor_parallel_size`",
       'SpeculativeConfig(model=<llama-3-8b>, method="draft_model", num_speculative_tokens=5, '
       'draft_tensor_parallel_size=1, target=<llama-3-8b>)',
       "speculative_config={'draft_tensor_parallel_size': 1 or the target's TP}")
def _c_dtp(ctx):
    return attempt(lambda: ctx.spec(model=ctx.model_dir(TARGET_CONFIG), method="draft_model",
                                    num_speculative_tokens=5, draft_tensor_parallel_size=1),
                   lambda sc: {"draft_tensor_parallel_size": sc.draft_tensor_parallel_size},
                   ctx.rel(_spec_cls()))


def _unknown_key_check(key: str, value: Any, claims: str, real_api: str):
    @check(f"spec_key_{key}", claims, f"speculative_config key `{key}` (article: {value!r})",
           f'SpeculativeConfig(method="ngram", num_speculative_tokens=5, {key}={value!r})',
           real_api)
    def _c(ctx):
        return attempt(lambda: _spec_cls()(method="ngram", num_speculative_tokens=5,
                                           **{key: value}),
                       lambda sc: {key: repr(getattr(sc, key, None))}, ctx.rel(_spec_cls()))
    return _c


_unknown_key_check("draft_worker_use_ray", False, "C6 C10 C27",
                   "none: the draft runs inside the target's workers (vllm/v1/worker/"
                   "gpu_model_runner.py, self.drafter); Ray is chosen for the whole engine "
                   "with distributed_executor_backend='ray'")
_unknown_key_check("disable_bonus_tokens", False, "C6",
                   "none: the bonus token is always sampled when every draft is accepted "
                   "(vllm/v1/sample/rejection_sampler.py)")
_unknown_key_check("eagle_mode", "aggressive", "C32",
                   "speculative_config={'method': 'eagle' or 'eagle3', 'model': <EAGLE head>, "
                   "'num_speculative_tokens': K}")


@check("spec_key_draft_parallel_config", "C27",
       "speculative_config key `draft_parallel_config` with the article's dict",
       'SpeculativeConfig(model=<llama-3-8b>, method="draft_model", num_speculative_tokens=5, '
       'draft_parallel_config={"worker_placement": "uniform"}, target=<llama-3-8b>)',
       "none: draft_parallel_config is filled in by vLLM from draft_tensor_parallel_size")
def _c_dpc(ctx):
    user = {"worker_placement": "uniform"}
    r = attempt(lambda: ctx.spec(model=ctx.model_dir(TARGET_CONFIG), method="draft_model",
                                 num_speculative_tokens=5, draft_parallel_config=user),
                lambda sc: {"draft_parallel_config after construction":
                            type(sc.draft_parallel_config).__name__,
                            "user value kept": sc.draft_parallel_config == user},
                ctx.rel(_spec_cls()))
    if r.outcome == "accepted" and not r.observed["user value kept"]:
        r.outcome = "ignored"
    return r


@check("spec_draft_tp_rules", "C15",
       "Which draft_tensor_parallel_size vLLM accepts, per method, with a TP=8 target",
       'SpeculativeConfig(method=m, model=<draft or head config>, num_speculative_tokens=5, '
       'draft_tensor_parallel_size=d, target_parallel_config=ParallelConfig(tensor_parallel_size=8)) '
       'for m in (draft_model, eagle, eagle3, medusa, ngram), d in (1, 2, 8)',
       "draft_tensor_parallel_size must be 1 or the target's tensor_parallel_size "
       "(SpeculativeConfig._verify_and_get_draft_tp); ngram/suffix ignore it")
def _c_tp(ctx):
    table = {}
    rejected = None
    # A head needs only its shape here: the 1-layer Llama-3-8B config stands in for
    # an EAGLE / Medusa head (the TP rule does not look at the weights).
    head = ctx.model_dir("llama-3-8b-1layer" if (ctx.model_configs / "llama-3-8b-1layer"
                                                 / "config.json").is_file() else TARGET_CONFIG)
    methods = (("draft_model", ctx.model_dir(TARGET_CONFIG)), ("eagle", head), ("eagle3", head),
               ("medusa", head), ("ngram", None))
    for method, model in methods:
        for dtp in (1, 2, 8):
            r = attempt(lambda: ctx.spec(tp=8, model=model, method=method,
                                         num_speculative_tokens=5,
                                         draft_tensor_parallel_size=dtp),
                        lambda sc: {"draft parallel TP": getattr(sc.draft_parallel_config,
                                                                 "tensor_parallel_size", None)})
            table[f"{method} target_tp=8 draft_tp={dtp}"] = (
                r.outcome if r.outcome != "accepted" else
                f"accepted (draft runs at TP={r.observed['draft parallel TP']})")
            if method == "draft_model" and dtp == 2:
                rejected = r
    src = getattr(_spec_cls(), "_verify_and_get_draft_tp", None)
    return Result("rejected" if rejected and rejected.outcome == "rejected" else "accepted",
                  rejected.exception_type if rejected else None,
                  rejected.exception_message if rejected else None,
                  rejected.error_summary if rejected else None,
                  observed=table, vllm_source=ctx.rel(src) if src else ctx.rel(_spec_cls()))


def _vocab_check(draft: str, claims: str):
    @check(f"vocab_{draft}_vs_llama3", claims,
           f"The article's pair: {draft} draft for a Llama-3-8B target (vocab sizes from config.json)",
           f'SpeculativeConfig(model=<{draft}>, method="draft_model", num_speculative_tokens=5, '
           f"target=<llama-3-8b>)",
           "a draft that shares the target's tokenizer (e.g. Llama-3.2-1B for Llama-3-8B); "
           "vLLM 0.32 also offers use_heterogeneous_vocab=True (draft_model, greedy drafts)")
    def _c(ctx):
        r = attempt(lambda: ctx.spec(model=ctx.model_dir(draft), method="draft_model",
                                     num_speculative_tokens=5),
                    source=ctx.rel(getattr(_spec_cls(), "verify_equal_vocab_size_if_draft_model",
                                           _spec_cls())))
        r.observed.update({"target vocab_size": ctx.vocab(TARGET_CONFIG),
                           "draft vocab_size": ctx.vocab(draft)})
        return r
    return _c


_vocab_check("tinyllama-1.1b", "C3 C4 C7")
_vocab_check("phi-2", "C4 C8")
_vocab_check("gpt2-medium", "C4 C9")


@check("spec_heterogeneous_vocab", "C4",
       "Does this vLLM offer a mode for drafts with a different vocabulary?",
       "'use_heterogeneous_vocab' in dataclasses.fields(SpeculativeConfig)",
       "speculative_config={'method': 'draft_model', 'use_heterogeneous_vocab': True}")
def _c_hetero(ctx):
    return _membership(ctx, "use_heterogeneous_vocab")


@check("spec_k_zero", "C22",
       "K = 0 (the article's K_TOO_LARGE has no lower-bound twin; what does vLLM say?)",
       'SpeculativeConfig(method="ngram", num_speculative_tokens=0)',
       "num_speculative_tokens must be > 0")
def _c_k0(ctx):
    return attempt(lambda: _spec_cls()(method="ngram", num_speculative_tokens=0),
                   source=ctx.rel(_spec_cls()))


@check("spec_k_large", "C22",
       "Very large K (16, 32, 64): does vLLM refuse it (the article's K_TOO_LARGE)?",
       'SpeculativeConfig(method="ngram", num_speculative_tokens=k) for k in (16, 32, 64)',
       "no upper bound at configuration time; a large K only costs speed")
def _c_klarge(ctx):
    out, first_reject = {}, None
    for k in (16, 32, 64):
        r = attempt(lambda: _spec_cls()(method="ngram", num_speculative_tokens=k))
        out[f"K={k}"] = r.outcome
        if r.outcome == "rejected" and first_reject is None:
            first_reject = r
    if first_reject:
        first_reject.observed = out
        return first_reject
    return Result("accepted", observed=out, vllm_source=ctx.rel(_spec_cls()))


def _method_check(method: str, claims: str, description: str, real_api: str):
    @check(f"spec_method_{method}", claims, description,
           f"{method!r} in typing.get_args(SpeculativeConfig.method)", real_api)
    def _c(ctx):
        methods = literal_values(_spec_cls(), "method")
        return Result("present" if method in methods else "missing",
                      observed={"methods": methods}, vllm_source=ctx.rel(_spec_cls()))
    return _c


_method_check("medusa", "C29 C34", "Medusa as a speculative method",
              "speculative_config={'method': 'medusa', 'model': <Medusa heads>, "
              "'num_speculative_tokens': K}")
_method_check("eagle", "C30 C32 C33", "EAGLE as a speculative method",
              "speculative_config={'method': 'eagle', 'model': <EAGLE head>}")
_method_check("eagle3", "C30 C33", "EAGLE-3 as a speculative method",
              "speculative_config={'method': 'eagle3', 'model': <EAGLE-3 head>}")
_method_check("lookahead", "C31", "Lookahead decoding as a speculative method",
              "none; the nearest are 'ngram' (prompt lookup) and 'suffix' (suffix decoding)")
_method_check("ngram", "C31", "n-gram prompt lookup as a speculative method",
              "speculative_config={'method': 'ngram', 'prompt_lookup_max': 4}")


@check("engine_args_medusa", "C34", "The article's Medusa engine arguments",
       "EngineArgs(model=<llama-3-8b>, enable_medusa=True, medusa_num_heads=5, medusa_top_k=3)",
       "speculative_config={'method': 'medusa', 'model': <Medusa heads>, "
       "'num_speculative_tokens': 5}")
def _c_medusa_args(ctx):
    from vllm import EngineArgs

    return attempt(lambda: EngineArgs(model=ctx.model_dir(TARGET_CONFIG), enable_medusa=True,
                                      medusa_num_heads=5, medusa_top_k=3),
                   source=ctx.rel(EngineArgs))


@check("engine_args_block_size", "C16", "The engine argument behind `--block-size`",
       "'block_size' in dataclasses.fields(EngineArgs)", "EngineArgs(block_size=...)")
def _c_block(ctx):
    from vllm import EngineArgs

    present = "block_size" in {f.name for f in dataclasses.fields(EngineArgs)}
    return Result("present" if present else "missing", vllm_source=ctx.rel(EngineArgs))


@check("sampling_c21_as_written", "C21", "The article's high-throughput SamplingParams, as written",
       "SamplingParams(temperature=0.7, top_p=0.9, min_p=0.05, use_beam_search=False)",
       "SamplingParams(temperature=0.7, top_p=0.9); beam search is LLM.beam_search()")
def _c_sp21(ctx):
    from vllm import SamplingParams

    return attempt(lambda: SamplingParams(temperature=0.7, top_p=0.9, min_p=0.05,
                                          use_beam_search=False),
                   source=ctx.rel(SamplingParams))


def _spec_request_check(id: str, kwargs: dict, call: str):
    @check(id, "C21", f"SamplingParams({kwargs}) on an engine with speculation", call,
           "leave min_p and logit_bias unset with speculation")
    def _c(ctx):
        from vllm import SamplingParams

        sp = SamplingParams(**kwargs)
        validate = getattr(sp, "_validate_spec_decode", None)
        if validate is None:
            return Result("missing", observed={"note": "no SamplingParams._validate_spec_decode "
                                                       "in this vLLM"},
                          vllm_source=ctx.rel(SamplingParams))
        spec = _spec_cls()(method="ngram", num_speculative_tokens=5)
        return attempt(lambda: validate(spec), source=ctx.rel(validate))
    return _c


_spec_request_check("sampling_min_p_with_speculation", {"temperature": 0.7, "top_p": 0.9,
                                                         "min_p": 0.05},
                    "SamplingParams(temperature=0.7, top_p=0.9, min_p=0.05) checked by the engine "
                    "against speculative_config (SamplingParams._validate_spec_decode)")
_spec_request_check("sampling_logit_bias_with_speculation", {"logit_bias": {0: 1.0}},
                    "SamplingParams(logit_bias={0: 1.0}) checked by the engine against "
                    "speculative_config (SamplingParams._validate_spec_decode)")


@check("sampling_beam_search", "C21", "Where beam search lives now",
       "hasattr(LLM, 'beam_search')", "LLM.beam_search(prompts, BeamSearchParams(...))")
def _c_beam(ctx):
    from vllm import LLM

    fn = getattr(LLM, "beam_search", None)
    return Result("present" if fn else "missing", vllm_source=ctx.rel(fn) if fn else None)


@check("sampling_c26_fix", "C26", "The article's fix for falling acceptance",
       "SamplingParams(temperature=0.0, top_k=1, ignore_eos=False)",
       "SamplingParams(temperature=0.0); drafts already sample greedily "
       "(SpeculativeConfig.draft_sample_method default)")
def _c_sp26(ctx):
    from vllm import SamplingParams

    r = attempt(lambda: SamplingParams(temperature=0.0, top_k=1, ignore_eos=False),
                lambda sp: {"top_k after construction": sp.top_k,
                            "temperature": sp.temperature},
                ctx.rel(SamplingParams))
    default = next((f.default for f in dataclasses.fields(_spec_cls())
                    if f.name == "draft_sample_method"), None)
    r.observed["SpeculativeConfig.draft_sample_method default"] = default
    return r


@check("import_profiler", "C24", "The article's profiler", "from vllm import Profiler",
       "LLM.start_profile() / LLM.stop_profile() (torch profiler, ProfilerConfig)")
def _c_prof(ctx):
    def imp():
        from vllm import Profiler  # noqa: F401
    return attempt(imp, source=ctx.rel(Path(ctx.vllm.__file__)))


@check("llm_start_profile", "C24", "The real profiling entry point",
       "hasattr(LLM, 'start_profile') and hasattr(LLM, 'stop_profile')",
       "LLM(..., profiler_config=...).start_profile(); ...; llm.stop_profile()")
def _c_startprof(ctx):
    from vllm import LLM

    ok = hasattr(LLM, "start_profile") and hasattr(LLM, "stop_profile")
    return Result("present" if ok else "missing",
                  vllm_source=ctx.rel(LLM.start_profile) if ok else None)


@check("cli_vllm_monitor", "C23", "The article's monitoring command",
       'shutil.which("vllm-monitor"); console scripts of the vllm distribution',
       "LLM.get_metrics() (offline) or the server's /metrics: vllm:spec_decode_num_drafts, "
       "vllm:spec_decode_num_draft_tokens, vllm:spec_decode_num_accepted_tokens(_per_pos)")
def _c_monitor(ctx):
    scripts = sorted(ep.name for ep in importlib.metadata.entry_points(group="console_scripts")
                     if ep.value.startswith("vllm."))
    found = shutil.which("vllm-monitor")
    return Result("present" if found or "vllm-monitor" in scripts else "missing",
                  observed={"which vllm-monitor": found, "vllm console scripts": scripts})


@check("llm_get_metrics_spec_counters", "C23", "The real acceptance counters",
       "hasattr(LLM, 'get_metrics'); grep 'vllm:spec_decode_num_' in vllm/",
       "LLM(..., disable_log_stats=False).get_metrics()")
def _c_metrics(ctx):
    from vllm import LLM

    names = sorted({m for text in ctx.sources().values()
                    for m in re.findall(r"vllm:spec_decode_[a-z_]+", text)})
    ok = hasattr(LLM, "get_metrics") and bool(names)
    return Result("present" if ok else "missing", observed={"counters": names},
                  vllm_source=ctx.rel(LLM.get_metrics) if hasattr(LLM, "get_metrics") else None)


@check("error_codes", "C22", "The article's error codes anywhere in vLLM's source",
       "grep -rE 'CUDA_OOM|ACCEPT_RATE_LOW|TOKEN_MISMATCH|K_TOO_LARGE' vllm/",
       "Python exceptions: torch.OutOfMemoryError, ValueError / pydantic ValidationError "
       "from SpeculativeConfig, VLLMValidationError from SamplingParams")
def _c_codes(ctx):
    hits = {code: ctx.grep(rf"\b{code}\b") for code in ARTICLE_ERROR_CODES}
    return Result("present" if any(hits.values()) else "missing", observed=hits)


@check("rejection_sample_methods", "C35", "Verification strategies this vLLM offers",
       "typing.get_args(SpeculativeConfig.rejection_sample_method)",
       "rejection_sample_method='standard' (lossless rejection sampling); no typical acceptance")
def _c_rsm(ctx):
    values = literal_values(_spec_cls(), "rejection_sample_method")
    return Result("present" if "typical" in " ".join(values) else "missing",
                  observed={"rejection_sample_method": values,
                            "typical acceptance in source": ctx.grep(r"[Tt]ypical[_ ]?[Aa]ccept")},
                  vllm_source=ctx.rel(_spec_cls()))


@check("dynamic_k", "C17 C36", "Built-in dynamic K",
       "'num_speculative_tokens_per_batch_size' in dataclasses.fields(SpeculativeConfig)",
       "speculative_config={'num_speculative_tokens_per_batch_size': "
       "[(lo, hi, K), ...]} (K by batch size, not by recent acceptance)")
def _c_dyn(ctx):
    return _membership(ctx, "num_speculative_tokens_per_batch_size")


_C5_CLASSES = {
    "Draft Worker": ["vllm.v1.spec_decode.draft_model.DraftModelProposer",
                     "vllm.v1.spec_decode.eagle.EagleProposer",
                     "vllm.v1.spec_decode.medusa.MedusaProposer",
                     "vllm.v1.spec_decode.ngram_proposer.NgramProposer",
                     "vllm.v1.spec_decode.suffix_decoding.SuffixDecodingProposer",
                     "vllm.v1.worker.gpu_model_runner.GPUModelRunner"],
    "Verification Engine": ["vllm.v1.sample.rejection_sampler.RejectionSampler",
                            "vllm.v1.spec_decode.metadata.SpecDecodeMetadata"],
    "Token Manager": ["vllm.v1.core.sched.scheduler.Scheduler",
                      "vllm.v1.spec_decode.metrics.SpecDecodingStats"],
}


def _locate(dotted: str, ctx: Context) -> str | None:
    mod, _, name = dotted.rpartition(".")
    try:
        obj = getattr(importlib.import_module(mod), name)
    except Exception:  # noqa: BLE001 - absent in this version (or its deps are)
        return None
    return ctx.rel(obj)


@check("c5_components", "C5 C2", "The article's three components, mapped to real vLLM classes",
       "import each class; inspect.getsourcefile()",
       "proposers (vllm/v1/spec_decode/) run inside the model runner; RejectionSampler "
       "verifies; the Scheduler books accepted tokens")
def _c_c5(ctx):
    found = {role: {c: _locate(c, ctx) for c in classes} for role, classes in _C5_CLASSES.items()}
    named = {n: _locate(f"vllm.v1.spec_decode.{n}", ctx) for n in
             ("DraftWorker", "VerificationEngine", "TokenManager")}
    bonus = ctx.grep(r"bonus token")
    ok = all(v for role in found.values() for v in role.values())
    return Result("present" if ok else "missing",
                  observed={"classes": found, "article names as vLLM classes": named,
                            "'bonus token' in": {k: v for k, v in bonus.items()
                                                 if "rejection_sampler" in k}})


@check("tool_nsys", "C25", "Nsight Systems on this machine", 'shutil.which("nsys")',
       "nsys profile --stats=true python script.py (NVIDIA tool, not part of vLLM)")
def _c_nsys(ctx):
    p = shutil.which("nsys")
    return Result("present" if p else "missing", observed={"which nsys": p})


# --------------------------------------------------------------------------- #
# Running and storing the checks
# --------------------------------------------------------------------------- #
def run_checks(model_configs: Path | None = None, only: list[str] | None = None,
               quiet: bool = True) -> list[dict[str, Any]]:
    """Execute every check (or ``only`` those ids); one row per check, with provenance."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    ctx = Context(model_configs or paths.MODEL_CONFIGS_DIR)
    prov = collect_provenance()
    rows = []
    for c in CHECKS:
        if only and c.id not in only:
            continue
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext():
            try:
                r = c.fn(ctx)
            except Exception as e:  # noqa: BLE001 - a broken check is recorded, not hidden
                r = Result("error", _exc_type(e), str(e), _error_summary(e))
        if r.error_summary:  # keep machine paths out of what tests compare across hosts
            r.error_summary = r.error_summary.replace(str(ctx.vllm_dir.parent), "<site-packages>")
        rows.append({
            "check_id": c.id, "claim_ids": list(c.claims), "description": c.description,
            "call": c.call, "outcome": r.outcome, "exception_type": r.exception_type,
            "exception_message": r.exception_message, "error_summary": r.error_summary,
            "observed": json.dumps(r.observed, sort_keys=True, default=str),
            "real_api": c.real_api, "vllm_source": r.vllm_source,
            "config_hash": config_hash(c.spec()), **prov,
        })
    return rows


def checks_filename(vllm_package: str, version: str) -> str:
    return f"api_checks-{vllm_package}-{version}.parquet"


def write_checks(rows: list[dict[str, Any]], out_dir: Path | None = None) -> Path:
    """Store check rows atomically as ``api_checks-<pkg>-<version>.parquet``."""
    import pyarrow as pa

    from .store import atomic_write_table

    if not rows:
        raise ValueError("no check rows to write")
    pkg, ver = rows[0]["vllm_package"], rows[0]["vllm_version"]
    out = Path(out_dir or CLAIMS_DIR) / checks_filename(pkg, ver)
    atomic_write_table(pa.Table.from_pylist(rows), out)
    return out


def load_checks(claims_dir: Path | None = None):
    """All recorded check results (every vLLM version), one DataFrame."""
    import pandas as pd

    files = sorted(Path(claims_dir or CLAIMS_DIR).glob("api_checks-*.parquet"))
    if not files:
        return pd.DataFrame(columns=CHECK_COLUMNS + ["vllm_package", "vllm_version"])
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def recorded_spec_fields(claims_dir: Path | None = None) -> dict[str, list[str]]:
    """``{"<package> <version>": [fields]}`` from recorded checks (pre-flight's fallback)."""
    df = load_checks(claims_dir)
    df = df[df["check_id"] == "speculative_config_fields"]
    return {f"{r.vllm_package} {r.vllm_version}": json.loads(r.observed)["fields"]
            for r in df.itertuples()}


# --------------------------------------------------------------------------- #
# The ledger
# --------------------------------------------------------------------------- #
LEDGER_KEYS = {"id", "section", "kind", "zh", "en", "verdict", "observed", "evidence",
               "checks", "derive", "article", "setting"}


class LedgerError(ValueError):
    """The ledger file is malformed; the message names the claim and field."""


def load_ledger(path: Path | None = None) -> list[dict[str, Any]]:
    """The ledger, strictly checked: known keys, known kinds and verdicts, ids C1..C36."""
    import yaml

    data = yaml.safe_load(Path(path or LEDGER_PATH).read_text())
    claims = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, list):
        raise LedgerError("ledger: top-level 'claims' list is missing")
    check_ids = {c.id for c in CHECKS}
    for i, c in enumerate(claims):
        where = f"claims[{i}] ({c.get('id', '?')})"
        unknown = set(c) - LEDGER_KEYS
        if unknown:
            raise LedgerError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        for k in ("id", "section", "kind", "zh", "en", "verdict", "observed", "evidence"):
            if not c.get(k):
                raise LedgerError(f"{where}.{k}: required")
        if c["kind"] not in KINDS:
            raise LedgerError(f"{where}.kind: {c['kind']!r} is not one of {KINDS}")
        if c["verdict"] not in VERDICTS:
            raise LedgerError(f"{where}.verdict: {c['verdict']!r} is not one of {VERDICTS}")
        for cid, outcome in (c.get("checks") or {}).items():
            if cid not in check_ids:
                raise LedgerError(f"{where}.checks: no check named {cid!r}")
            if outcome not in OUTCOMES:
                raise LedgerError(f"{where}.checks.{cid}: {outcome!r} is not one of {OUTCOMES}")
        derive = c.get("derive")
        if derive:
            bad = set(derive) - {"rule", "profiles", "bound_methods", "experiments",
                                 "method_regex"}
            if bad:
                raise LedgerError(f"{where}.derive: unknown key {sorted(bad)[0]!r}")
            try:  # a rule compares with the article's setting: it must be stated
                comparability.ArticleSetting.from_claim(c)
            except comparability.SettingError as e:
                raise LedgerError(f"{where}: {e}") from None
            if derive.get("rule") not in DERIVATIONS:
                raise LedgerError(f"{where}.derive.rule: unknown rule {derive.get('rule')!r}")
            for k in ("profiles", "experiments"):
                if not isinstance(derive.get(k), list) or not derive[k]:
                    raise LedgerError(f"{where}.derive.{k}: a non-empty list is required")
    ids = [c["id"] for c in claims]
    expected = [f"C{i}" for i in range(1, 37)]
    if ids != expected:
        raise LedgerError(f"ledger: ids must be C1..C36 in order, got {ids}")
    return claims


# --------------------------------------------------------------------------- #
# Numeric verdicts from measured rows (never from typed numbers)
# --------------------------------------------------------------------------- #
#: Relative tolerance for "reproduced" when comparing our figure with the article's
#: (only ever on cells of the article's setting: :mod:`specdec.comparability`).
TOLERANCE = 0.2


def summary(profiles: list[str], root: Path | None = None):
    """Per-cell summary with speedups (:mod:`specdec.metrics`) of the profiles' ok rows, or None."""
    from . import metrics, store

    runs = store.load_runs(profiles, root=Path(root) if root is not None else None,
                           only_ok=True)
    if runs.empty:
        return None
    return metrics.with_speedup(metrics.summarize(runs))


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= TOLERANCE * abs(theirs)


#: The target used as its own draft must accept at least this share of its draft tokens.
SANITY_ACCEPTANCE = 0.95


def failed_sanity_bound(bound_rows, derive: dict) -> str | None:
    """Why the bound-method cells of the rule's experiments fail the sanity bound, or None.

    ``derive.bound_methods`` are drafts identical to the target (``draft-self``): any cell of
    them accepting less than :data:`SANITY_ACCEPTANCE` means the engine mis-samples there.
    """
    df = in_experiments(bound_rows, derive["experiments"])
    if df.empty:
        return None
    bad = df[df["acceptance_rate"] < SANITY_ACCEPTANCE]
    if bad.empty:
        return None
    return "; ".join(f"{r.method} at T={r.temperature:g}, K={r.num_speculative_tokens}: "
                     f"{r.acceptance_rate:.0%} accepted" for r in bad.itertuples())


def in_experiments(df, experiments):
    """Rows tagged with any of ``experiments``."""
    wanted = set(experiments)
    if df.empty:
        return df
    return df[df["experiment_tags"].apply(
        lambda tags: bool(wanted & set(list(tags) if tags is not None else [])))]


def _rows_for(summary, derive: dict):
    """Speculative cells of the rule's experiments (and method pattern) with a valid speedup."""
    df = in_experiments(summary, derive["experiments"])
    df = df[df["method"] != "baseline"]
    if "method_regex" in derive:
        df = df[df["method"].str.contains(derive["method_regex"], regex=True)]
    return df[df["speedup_status"] == "ok"]


def _fmt_cell(r) -> str:
    acc = "" if r.acceptance_rate != r.acceptance_rate else f", acceptance {r.acceptance_rate:.0%}"
    row = r._asdict() if hasattr(r, "_asdict") else r
    setting = comparability.cell_setting(row).describe()
    return (f"{r.profile}/{r.method} K={r.num_speculative_tokens} batch={r.batch_size} "
            f"[{setting}]: speedup {r.speedup:.2f}x{acc}")


def _best(df, derive, article):
    """Our best speedup against the article's (the caller passes comparable cells only)."""
    best = df.loc[df["speedup"].idxmax()]
    verdict = "reproduced" if _close(best.speedup, article["speedup"]) else "contradicted"
    return verdict, f"best of {len(df)} cell(s): {_fmt_cell(best)}", list(df["cell_id"])


def _at(key: str):
    """Our best speedup at the article's condition (K or batch size) vs the article's figure."""
    column = {"k": "num_speculative_tokens", "batch": "batch_size"}[key]

    def rule(summary, derive, article):
        df = _rows_for(summary, derive)
        df = df[df[column] == article[key]]
        return None if df.empty else _best(df, derive, article)
    return rule


def _derive_method(summary, derive, article):
    """Our speedup for the method family the article names, best over its cells."""
    df = _rows_for(summary, derive)
    return None if df.empty else _best(df, derive, article)


def _derive_best_k(summary, derive, article):
    """The K with the best speedup, per method that gains at all; the rule holds if that K
    is the article's. Methods that never beat the baseline have no best K (no verdict)."""
    df = _rows_for(summary, derive)
    if df.empty or df["num_speculative_tokens"].nunique() < 2:
        return None
    best = df.loc[df.groupby(["profile", "method"])["speedup"].idxmax()]
    parts = [f"{r.profile}/{r.method}: best K={r.num_speculative_tokens} ({r.speedup:.2f}x)"
             for r in best.itertuples()]
    paying = best[best["speedup"] > 1]
    if paying.empty:
        return None, "; ".join(parts) + "; speculation never beats the baseline here, so no K " \
                                        "is best", list(df["cell_id"])
    hits = (paying["num_speculative_tokens"] == article["k"]).mean()
    return ("reproduced" if hits > 0.5 else "contradicted"), "; ".join(parts), list(df["cell_id"])


def acceptance_by_temperature(summary, experiments=("temperature",)):
    """Acceptance rate per (profile, method) x temperature (speculative cells only)."""
    df = in_experiments(summary, experiments)
    df = df[(df["method"] != "baseline") & df["acceptance_rate"].notna()]
    return df.pivot_table(index=["profile", "method"], columns="temperature",
                          values="acceptance_rate", aggfunc="mean")


def _derive_temperature(summary, derive, article):
    """Acceptance at each temperature; the claim holds if it falls as temperature rises."""
    table = acceptance_by_temperature(summary, derive["experiments"])
    if table.empty or table.shape[1] < 2:
        return None
    parts = [f"{p}/{m}: " + ", ".join(f"T={t:g} {a:.0%}" for t, a in row.dropna().items())
             for (p, m), row in table.iterrows()]
    falls = [row.dropna().iloc[0] > row.dropna().iloc[-1] for _, row in table.iterrows()]
    cells = list(in_experiments(summary, derive["experiments"])["cell_id"])
    return ("reproduced" if all(falls) else "contradicted"), \
        "acceptance by temperature: " + "; ".join(parts), cells


DERIVATIONS: dict[str, Callable] = {
    "best_k": _derive_best_k,
    "speedup_at_k": _at("k"),
    "speedup_at_batch": _at("batch"),
    "method_speedup": _derive_method,
    "acceptance_vs_temperature": _derive_temperature,
}


def _article_text(article: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in article.items()) or "no figure"


def derive_verdict(claim: dict, root: Path | None = None) -> dict[str, Any]:
    """The claim's verdict now: derived from rows for claims with a rule, else the ledger's.

    Rows of ``derive.profiles`` are split by the comparability rule
    (:func:`specdec.comparability.compare` against the claim's ``setting``): only cells in
    the article's setting can decide; the others give *our figure in our setting*. Methods
    in ``derive.bound_methods`` (the target drafting for itself) are a sanity bound: if one
    accepts less than :data:`SANITY_ACCEPTANCE`, no row beside it is used.

    Returns ``{"verdict", "observed", "evidence", "basis", "cells"}``; ``basis`` is "rows",
    "ledger" or "pending" (a rule whose rows do not exist yet); ``cells`` are the cell ids a
    verdict from rows rests on (empty otherwise).
    """
    import pandas as pd

    derive = claim.get("derive")
    base = {"verdict": claim["verdict"], "observed": claim["observed"].strip(),
            "evidence": list(claim["evidence"]), "basis": "ledger", "cells": []}
    if not derive:
        return base
    article = claim.get("article") or {}
    setting = comparability.ArticleSetting.from_claim(claim)
    rule = DERIVATIONS[derive["rule"]]
    self_drafts = tuple(derive.get("bound_methods", []))
    summ = summary(list(derive["profiles"]), root)
    got = other = bound = None
    insane = None
    why_not = ""
    if summ is not None:
        is_self = summ["method"].isin(self_drafts)
        insane = failed_sanity_bound(summ[is_self], derive)
        comps = pd.Series(comparability.compare_rows(setting, summ, self_drafts),
                          index=summ.index, dtype=object)
        like = comps.map(lambda c: c.comparable).astype(bool)
        got = rule(summ[like], derive, article)
        other = rule(summ[~like & ~is_self], derive, article)
        bound = rule(summ[~like & is_self], derive, article)
        if other is not None:
            why_not = comparability.summarize(comps[summ["cell_id"].isin(other[2]) & ~like
                                                    & ~is_self])
    where = f"{', '.join(derive['profiles'])} experiment(s) {', '.join(derive['experiments'])}"
    text = base["observed"]
    ev = list(base["evidence"])
    if insane is not None:
        # The target as its own draft must accept ~everything; where it does not, the engine
        # itself is broken for those cells and nothing beside them can decide the claim.
        text += (f" Rows of {where} are not used: the sanity bound failed ({insane}), so they "
                 f"measure an engine fault, not the claim.")
        ev.append(f"rows: {where} (sanity bound failed)")
        verdict = base["verdict"]
        return {**base, "verdict": verdict, "observed": text, "evidence": ev,
                "basis": "pending" if verdict == "pending-measurement" else "ledger"}
    if got is None and other is None and bound is None:
        text += f" Measured figure: no measured rows yet for {where}."
    if got is not None:
        text += (f" Measured in the article's setting ({setting.describe()}): {got[1]} "
                 f"(article: {_article_text(article)}).")
        ev.append(f"rows: {where} ({len(got[2])} cells in the article's setting)")
    if other is not None:
        text += (f" Our figure in our setting, not comparable with the article's "
                 f"({why_not}): {other[1]}.")
        ev.append(f"rows: {where} ({len(other[2])} cells in our setting only)")
    if bound is not None:
        text += (f" The target as its own draft (a sanity bound, never a verdict): "
                 f"{bound[1]}.")
        ev.append(f"rows: {where} ({len(bound[2])} sanity-bound cells)")
    if claim["verdict"] != "pending-measurement":
        # The ledger verdict rests on an API check (e.g. the pair is refused); it stands.
        return {**base, "observed": text, "evidence": ev}
    if got is not None and got[0] in JUDGED:
        return {"verdict": got[0], "observed": text, "evidence": ev, "basis": "rows",
                "cells": list(got[2])}
    if got is None and (other is not None or bound is not None):
        return {**base, "verdict": OUR_FIGURE, "observed": text, "evidence": ev,
                "basis": "rows"}
    # No rows, or rows in the article's setting that decide nothing (e.g. no K pays).
    return {**base, "verdict": "pending-measurement", "observed": text, "evidence": ev,
            "basis": "pending"}


def judged_summary(table) -> str:
    """How many numeric claims our rows could judge, and why the others could not."""
    numeric = table[table["kind"] == "numeric"]
    judged = numeric[(numeric["basis"] == "rows") & numeric["verdict"].isin(JUDGED)]
    ours = int((table["verdict"] == OUR_FIGURE).sum())
    if judged.empty and ours == 0:
        return "no numeric claim could be judged from our rows yet"
    if judged.empty:
        return (f"no numeric claim could be judged from our rows: none is in the article's "
                f"setting ({ours} claim(s) show our figure in our setting only)")
    return (f"{len(judged)} numeric claim(s) are judged from rows in the article's setting "
            f"({', '.join(judged['id'])}); {ours} show our figure in our setting only")


def setting_table(table=None, path: Path | None = None):
    """The article's setting (:mod:`specdec.comparability`) of every claim with a derivation
    rule, with the verdict ``table`` (:func:`ledger_table`) shows for it."""
    import pandas as pd

    rows = []
    for c in load_ledger(path):
        if not c.get("derive"):
            continue
        s = comparability.ArticleSetting.from_claim(c)
        acc = s.acceptance if isinstance(s.acceptance, str) else f"{s.acceptance:.0%}"
        rows.append({"claim": c["id"], "model": s.model, "hardware": s.hardware,
                     "method": s.method, "acceptance": acc})
    out = pd.DataFrame(rows)
    if table is not None and len(out):
        out["verdict"] = out["claim"].map(table.set_index("id")["verdict"])
    return out


def ledger_table(root: Path | None = None, checks=None, path: Path | None = None):
    """The ledger as a DataFrame with current verdicts and each vLLM version's check outcomes."""
    import pandas as pd

    checks = load_checks() if checks is None else checks
    rows = []
    for c in load_ledger(path):
        d = derive_verdict(c, root)
        row = {"id": c["id"], "section": c["section"], "kind": c["kind"],
               "article (zh)": c["zh"].strip(), "article (en)": c["en"].strip(),
               "observed": d["observed"].strip(), "verdict": d["verdict"],
               "basis": d["basis"], "evidence": "; ".join(d["evidence"])}
        for (pkg, ver), g in checks.groupby(["vllm_package", "vllm_version"]):
            got = g.set_index("check_id")
            cells = [f"{cid}: {got.loc[cid, 'outcome']}" for cid in (c.get("checks") or {})
                     if cid in got.index]
            row[f"checks {pkg} {ver}"] = "; ".join(cells)
        rows.append(row)
    return pd.DataFrame(rows)


def ledger_display(table):
    """The ledger table for a page: HTML-escaped text (the article's code has ``<``, ``>``),
    the Chinese words and their English rendering in one cell, evidence one item per line."""
    import html

    def esc(v) -> str:
        return html.escape(str(v)) if v is not None else ""

    check_cols = [c for c in table.columns if c.startswith("checks ")]
    out = table[["id", "section", "kind"]].rename(columns={"id": "claim"}).copy()
    out["the article says (zh / en)"] = [f"{esc(z)}<br><em>{esc(e)}</em>"
                                         for z, e in zip(table["article (zh)"], table["article (en)"])]
    out["observed"] = table["observed"].map(esc)
    out["verdict"] = table["verdict"].map(lambda v: f"<strong>{esc(v)}</strong>")
    out["evidence"] = table["evidence"].map(lambda v: "<br>".join(esc(x) for x in v.split("; ")))
    for c in check_cols:
        out[c] = table[c].map(lambda v: "<br>".join(esc(x) for x in v.split("; ")) if v else "–")
    return out


def compare_with_ledger(rows: list[dict[str, Any]], path: Path | None = None) -> list[str]:
    """Differences between live check outcomes and the outcomes the ledger records."""
    got = {r["check_id"]: r["outcome"] for r in rows}
    diffs = []
    for c in load_ledger(path):
        for cid, expected in (c.get("checks") or {}).items():
            if cid in got and got[cid] != expected:
                diffs.append(f"{c['id']} {cid}: ledger says {expected!r}, vLLM now gives "
                             f"{got[cid]!r}")
    return diffs


# --------------------------------------------------------------------------- #
# CLI
# --------------------------------------------------------------------------- #
def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None,
                   help=f"folder for the parquet (default {CLAIMS_DIR})")
    p.add_argument("--model-configs", type=Path, default=None,
                   help=f"config-only models (default {paths.MODEL_CONFIGS_DIR})")
    p.add_argument("--only", nargs="*", default=None, help="run only these check ids")


def _run_cli(args) -> int:
    unknown = sorted(set(args.only or ()) - {c.id for c in CHECKS})
    if unknown:
        print(f"--only: no check named {unknown[0]!r} (known: {', '.join(c.id for c in CHECKS)})")
        return 2
    rows = run_checks(args.model_configs, args.only)
    # A subset never replaces the committed full record; it is written only where asked.
    out = write_checks(rows, args.out) if (args.out or not args.only) else None
    width = max(len(r["check_id"]) for r in rows)
    for r in rows:
        msg = f"  {r['exception_type']}: {r['error_summary']}" if r["exception_type"] else ""
        print(f"{r['check_id']:<{width}}  {r['outcome']:<9}{msg}")
    print(f"{len(rows)} checks, vLLM {rows[0]['vllm_package']} {rows[0]['vllm_version']} "
          f"-> {out or 'not stored (a subset: pass --out DIR to store it)'}")
    try:
        diffs = compare_with_ledger(rows)
    except Exception as e:  # noqa: BLE001 - no ledger on a bare GPU host is fine
        print(f"(ledger not compared: {e})")
        return 0
    for d in diffs:
        print("DIFFERS FROM LEDGER:", d)
    return 0


def register(subparsers) -> None:
    """Add ``specdec claims [--out DIR]``."""
    p = subparsers.add_parser("claims", help="run the article's API claims against the "
                                             "installed vLLM and store the results")
    _add_args(p)
    p.set_defaults(func=_run_cli)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specdec.claims", description=__doc__.split("\n")[0])
    _add_args(p)
    return _run_cli(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())


# --------------------------------------------------------------------------- #
# Failure cases (notebooks/failure_cases.ipynb): reproductions, no engine needed
# --------------------------------------------------------------------------- #
def demo_profile(draft: str = "llama-3.2-1b", speculative: dict | None = None,
                 sampling: dict | None = None, num_speculative_tokens=(4,)):
    """A one-method profile over the config-only Llama-3-8B target and ``draft``, built in
    code, to show what pre-flight says about a bad setting (it is never run)."""
    from .profiles import profile_from_dict

    return profile_from_dict({
        "name": "failure-demo", "description": "pre-flight demonstration (never run)",
        "hardware": {"kind": "cuda", "label": "any", "num_gpus": 1},
        "engine": {"package": "vllm", "version": "0.26.0", "load_format": "dummy",
                   "skip_tokenizer_init": True},
        "target": {"name": TARGET_CONFIG, "source": {"kind": "config", "config": TARGET_CONFIG}},
        "drafts": [{"name": draft, "source": {"kind": "config", "config": draft}}],
        "methods": [{"name": "baseline"},
                    {"name": "draft", "draft": draft,
                     "speculative": {"method": "draft_model", **(speculative or {})}}],
        "workloads": [{"name": "random", "source": "random-tokens"}],
        "sampling": sampling or {},
        "experiments": [{"name": "demo", "description": "demo", "methods": ["draft"],
                         "num_speculative_tokens": list(num_speculative_tokens),
                         "batch_sizes": [1], "workloads": ["random"]}],
        "reference_only": True,
    })


def preflight_message(profile) -> str:
    """What pre-flight says: the ValidationError / ProfileError text, or "accepted"."""
    from .validate import preflight

    try:
        preflight(profile)
    except ValueError as e:
        return f"{type(e).__name__}: {e}"
    return "accepted"


def recorded_check(check_id: str, checks=None):
    """One check's recorded outcome and verbatim error for every vLLM version, side by side."""
    checks = load_checks() if checks is None else checks
    df = checks[checks["check_id"] == check_id]
    cols = ["vllm_package", "vllm_version", "device_name", "outcome", "exception_type",
            "exception_message", "observed", "real_api", "vllm_source"]
    return df[cols].reset_index(drop=True)


def checks_side_by_side(checks=None):
    """Every check's outcome (and error summary) per vLLM version, one row per check."""
    import pandas as pd

    checks = load_checks() if checks is None else checks
    if checks.empty:
        return pd.DataFrame(columns=["check", "claims", "call", "real API"])
    checks = checks.assign(version=checks["vllm_package"] + " " + checks["vllm_version"])
    first = checks.drop_duplicates("check_id").set_index("check_id")
    out = pd.DataFrame({"claims": first["claim_ids"].apply(lambda c: " ".join(c)),
                        "call": first["call"], "real API": first["real_api"]})
    for version, g in checks.groupby("version"):
        g = g.set_index("check_id")
        out[version] = [
            (f"{g.loc[c, 'outcome']}: {g.loc[c, 'exception_type']}: {g.loc[c, 'error_summary']}"
             if isinstance(g.loc[c, "exception_type"], str) else g.loc[c, "outcome"])
            if c in g.index else "not run" for c in out.index]
    return out.rename_axis("check").reset_index()


def component_map(checks=None):
    """C5: the article's three components -> real vLLM classes and source lines, per version."""
    import pandas as pd

    checks = load_checks() if checks is None else checks
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for r in checks[checks["check_id"] == "c5_components"].itertuples():
        version = f"{r.vllm_package} {r.vllm_version}"
        for role, classes in json.loads(r.observed)["classes"].items():
            for cls, src in classes.items():
                rows.setdefault((role, cls), {})[version] = src or "absent"
    order = {role: i for i, role in enumerate(_C5_CLASSES)}
    return pd.DataFrame([{"article's component": role, "vLLM class": cls, **v}
                         for (role, cls), v in sorted(rows.items(),
                                                      key=lambda kv: order.get(kv[0][0], 99))])


def config_vocab_size(name: str) -> int:
    """``vocab_size`` of a published config under ``data/model_configs/<name>/``."""
    cfg = json.loads((paths.MODEL_CONFIGS_DIR / name / "config.json").read_text())
    return int(cfg.get("vocab_size") or cfg["text_config"]["vocab_size"])


def large_k_checked(checks=None) -> list[int]:
    """The K values check ``spec_k_large`` tried, read from its recorded results."""
    checks = load_checks() if checks is None else checks
    rows = checks[checks["check_id"] == "spec_k_large"]
    ks = {int(k.split("=")[1]) for obs in rows["observed"] for k in json.loads(obs)}
    return sorted(ks)


def k_bounds_sentence(checks=None) -> str:
    """What every recorded vLLM says to K = 0 and to the large K values (checks spec_k_zero,
    spec_k_large), e.g. "K = 0 is rejected, K = 16, 32 and 64 are accepted (vllm 0.26.0, ...)"."""
    checks = load_checks() if checks is None else checks

    def said(check_id):
        rows = checks[checks["check_id"] == check_id]
        return {f"{r.vllm_package} {r.vllm_version}": r for r in rows.itertuples()}

    zero, large = said("spec_k_zero"), said("spec_k_large")
    if not zero or not large:
        return "not recorded yet (run `python -m specdec.claims --only spec_k_zero spec_k_large`)"
    said_by: dict[str, list[str]] = {}  # statement -> versions that make it
    for version in sorted(set(zero) | set(large)):
        bits = []
        if version in zero:
            bits.append(f"K = 0 is {zero[version].outcome}")
        if version in large:
            by_outcome: dict[str, list[str]] = {}
            for k, outcome in json.loads(large[version].observed).items():
                by_outcome.setdefault(outcome, []).append(k.split("=")[1])
            for outcome, ks in by_outcome.items():
                listed = ", ".join(ks[:-1]) + f" and {ks[-1]}" if len(ks) > 1 else ks[0]
                bits.append(f"K = {listed} {'are' if len(ks) > 1 else 'is'} {outcome}")
        said_by.setdefault(", ".join(bits), []).append(version)
    return "; ".join(f"{text} by {' and '.join(versions)}" for text, versions in said_by.items())


def _speculative_summary(summ):
    return summ[(summ["method"] != "baseline") & (summ["speedup_status"] == "ok")]


_CASE_COLUMNS = ["profile", "method", "num_speculative_tokens", "batch_size", "workload",
                 "temperature", "acceptance_rate", "mean_acceptance_length", "speedup",
                 "speedup_ci_low", "speedup_ci_high", "tok_s_median", "tok_s_ci_low",
                 "tok_s_ci_high", "unstable"]


def grid_k_values(profile: str) -> list[int]:
    """Every K in a profile's experiment grids ([] for an unknown profile)."""
    from .profiles import ProfileError, load_profile

    try:
        prof = load_profile(profile)
    except ProfileError:
        return []
    return sorted({k for e in prof.experiments for k in e.num_speculative_tokens})


def large_k_cells(summ, min_k: int = 8):
    """Speculative cells with K >= ``min_k``: what a very large K does to acceptance and speed."""
    if summ is None:
        return None
    df = _speculative_summary(summ)
    df = df[df["num_speculative_tokens"] >= min_k]
    return df.sort_values(["profile", "method", "num_speculative_tokens"])[_CASE_COLUMNS]


def floor_cells(summ, max_acceptance: float = 0.1):
    """Speculative cells that accept almost nothing: the pure cost of drafting (the α≈0 floor)."""
    if summ is None:
        return None
    df = _speculative_summary(summ)
    df = df[df["acceptance_rate"] <= max_acceptance]
    return df.sort_values(["profile", "method", "num_speculative_tokens", "batch_size"])[
        _CASE_COLUMNS]


#: Error texts that mean the engine ran out of device memory.
OOM_PATTERN = (r"out of memory|OutOfMemory|CUDA OOM|not enough (KV cache|memory)|"
               r"No available memory|insufficient memory|exceeds the available")


def oom_failures(profiles: list[str], root: Path | None = None):
    """Failed cells whose error says the device ran out of memory, with the error verbatim."""
    from . import metrics, store

    runs = store.load_runs(profiles, root=Path(root) if root is not None else None)
    if runs.empty:
        return runs.iloc[:0]
    f = metrics.failures(runs)
    return f[f["error"].fillna("").str.contains(OOM_PATTERN, regex=True)].reset_index(drop=True)


def verdict_counts(table):
    """Number of claims per verdict (every verdict listed, zero included), in VERDICTS order."""
    return (table["verdict"].value_counts().reindex(list(VERDICTS), fill_value=0)
            .rename_axis("verdict").reset_index(name="claims"))
