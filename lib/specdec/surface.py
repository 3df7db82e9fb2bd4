"""The speedup surface: speedup over set acceptance, K and batch size (profile ``h200-surface``).

Input is :func:`metrics.with_speedup` output of cells measured with *set* acceptance
(``acceptance_alpha`` not null: vLLM's synthetic rejection sampling, see
:mod:`specdec.worker`). Everything here is computed from stored rows:

- :func:`table` adds what a reader of a surface needs per cell: the realised acceptance
  against the set one (:func:`metrics.acceptance_check`), the measured tokens per target
  step and the measured time per target step;
- :func:`break_even` reads, per method, K and batch, the smallest set alpha at which the
  measured speedup reaches 1 (linear interpolation between measured alphas: *interpolated*);
- :func:`model_check` fits the analytical model (:mod:`specdec.theory`) on the alpha = 0 and
  alpha = 1 cells of each (method, K, batch) and predicts the cells in between (*predicted*),
  reporting the error against the measured speedups;
- :func:`engine_holdings` is the memory side: draft or head bytes and the KV cache each
  engine was given (measured on the engine, not computed from configs).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import metrics, theory
from .profiles import BASELINE

#: One speedup curve over alpha: the cells that share these.
CURVE = ["profile", "method", "num_speculative_tokens", "batch_size", "workload",
         "temperature", "compilation"]


def table(speedup_df: pd.DataFrame) -> pd.DataFrame:
    """Set-acceptance cells (and the baselines they compare with), with derived columns.

    Adds :data:`metrics.ACCEPTANCE_CHECK_COLUMNS` and ``tokens_per_step`` (measured mean
    acceptance length: tokens emitted per target forward pass, 1 for the baseline),
    ``step_ms`` (median wall time of a pass divided by the target steps of one request:
    ms per target forward pass, drafting included) and ``draft_share`` (set acceptance
    cells only: how many of the target steps carried a draft; below 1 means the proposer
    sometimes proposed nothing, as n-gram lookup can).
    """
    df = speedup_df[(speedup_df["acceptance_alpha"].notna())
                    | (speedup_df["method"] == BASELINE)].copy()
    df = metrics.acceptance_check(df)
    length = df["mean_acceptance_length"].where(df["method"] != BASELINE, 1.0).astype(float)
    per_request = df["num_output_tokens"].astype(float) / df["batch_size"].astype(float)
    steps = per_request / length
    df["tokens_per_step"] = length
    df["step_ms"] = 1000 * df["wall_s_median"].astype(float) / steps
    drafts_per_pass = df["spec_num_drafts"].astype(float) / df["n_repeats"].astype(float)
    df["draft_share"] = np.where(df["method"] == BASELINE, np.nan,
                                 drafts_per_pass / (steps * df["batch_size"].astype(float)))
    return df.reset_index(drop=True)


def _crossing(alphas: np.ndarray, speedups: np.ndarray) -> tuple[float, str]:
    """Smallest alpha at which the piecewise-linear speedup curve reaches 1."""
    order = np.argsort(alphas)
    a, s = alphas[order], speedups[order]
    if s[0] >= 1:
        return float(a[0]), "pays at the smallest alpha measured"
    for i in range(1, len(a)):
        if s[i] >= 1:
            t = (1 - s[i - 1]) / (s[i] - s[i - 1])
            return float(a[i - 1] + t * (a[i] - a[i - 1])), "interpolated"
    return float("nan"), "never pays in the measured range"


def break_even(surface_df: pd.DataFrame) -> pd.DataFrame:
    """Per speedup curve: the set alpha at which speculation starts to pay.

    Output: :data:`CURVE` columns, ``break_even_alpha`` (interpolated between the two
    measured alphas around speedup 1; NaN if it never pays), ``how`` and ``alphas``
    (how many alphas were measured). A curve needs at least two measured alphas.
    """
    spec = surface_df[(surface_df["method"] != BASELINE)
                      & (surface_df["speedup_status"] == "ok")]
    rows = []
    for key, g in spec.groupby(CURVE, dropna=False, sort=True):
        if g["acceptance_alpha"].nunique() < 2:
            continue
        a, how = _crossing(g["acceptance_alpha"].to_numpy(float), g["speedup"].to_numpy(float))
        rows.append({**dict(zip(CURVE, key)), "break_even_alpha": a, "how": how,
                     "alphas": int(g["acceptance_alpha"].nunique())})
    return pd.DataFrame(rows, columns=CURVE + ["break_even_alpha", "how", "alphas"])


def model_check(surface_df: pd.DataFrame, train_alphas=(0.0, 1.0)) -> theory.FitResult:
    """Fit Leviathan's cost model per (method, K, batch) on ``train_alphas``, predict the rest.

    The fit uses :func:`theory.fit` with the model ``S = E(alpha, K) / (c K + 1)``, alpha
    from the measured acceptance length (so E is the measured tokens per step) and one cost
    ``c`` per curve; the cells at other alphas are the test split.
    """
    spec = surface_df[(surface_df["method"] != BASELINE)
                      & surface_df["acceptance_alpha"].notna()].copy()
    train = spec["acceptance_alpha"].isin(list(train_alphas))
    return theory.fit(spec, train, model="leviathan", alpha_source="per_token",
                      by=("profile", "method", "num_speculative_tokens", "batch_size",
                          "compilation"))


def engine_holdings(summary_df: pd.DataFrame) -> pd.DataFrame:
    """What each method's engine held: draft or head weights and the KV cache it was given.

    One row per (profile, method, K): ``draft_gib`` (bytes the draft or heads add beyond the
    target, shared tensors counted once, GiB), ``target_gib``, ``kv_cache_gib`` and
    ``kv_cache_tokens`` (median over the method's cells; the same engine settings give the
    same KV cache up to a few blocks). Measured on the engine.
    """
    cols = ["profile", "method", "num_speculative_tokens"]
    df = summary_df[summary_df["model_weight_bytes"].notna()
                    | summary_df["kv_cache_tokens"].notna()]
    out = df.groupby(cols, dropna=False, sort=True).agg(
        target_gib=("model_weight_bytes", "median"), draft_gib=("draft_weight_bytes", "median"),
        kv_cache_gib=("kv_cache_bytes", "median"), kv_cache_tokens=("kv_cache_tokens", "median"),
    ).reset_index()
    for c in ("target_gib", "draft_gib", "kv_cache_gib"):
        out[c] = out[c] / 2**30
    return out
