"""The checks: one per API-shaped claim of the article, each executed against the installed
vLLM (ids are cited by ``data/claims/ledger.yaml``), and :func:`run_checks`, which runs them.

``specdec claims`` runs them and stores one row per check (:mod:`specdec.claims.checkio`);
on a GPU host ``python -m specdec.cli claims --out DIR`` needs only the standard library,
vLLM, pandas/pyarrow and PyYAML (a vLLM dependency).

A check's ``config_hash`` covers its source text (:meth:`Check.spec`): edit a check and its
recorded results no longer match (tests/test_claims.py), so rerun it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from .. import paths
from ..profiles import config_hash
from ..provenance import collect as collect_provenance
from .registry import (CHECKS, TARGET_CONFIG, Context, Result, _error_summary, _exc_type,
                       _membership, _spec_cls, attempt, check, literal_values, spec_fields)

#: The article's error codes (C22).
ARTICLE_ERROR_CODES = ("CUDA_OOM", "ACCEPT_RATE_LOW", "TOKEN_MISMATCH", "K_TOO_LARGE")


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


#: The article's three components (C5), in the order the book lists them.
C5_ROLES = tuple(_C5_CLASSES)


# --------------------------------------------------------------------------- #
# Running the checks (stored by specdec.claims.checkio)
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
