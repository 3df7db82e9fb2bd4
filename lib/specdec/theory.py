"""The analytical model of speculative decoding (Leviathan et al., 2023), fitted to measurements.

With per-token acceptance probability ``alpha`` (each draft token accepted
independently with probability alpha, until the first rejection) and ``K``
draft tokens per step, one target forward pass emits on average

    E(alpha, K) = (1 - alpha**(K+1)) / (1 - alpha)        (K+1 when alpha = 1)

tokens (the bonus token included). If one draft step costs ``c`` target decode
steps and verifying K+1 tokens costs ``v`` decode steps, the walltime speedup
over plain decoding is

    S = E(alpha, K) / (c*K + v)

Leviathan et al. take ``v = 1`` (verification as cheap as one decode step, true
when decoding is memory-bound). ``v > 1`` absorbs what the paper leaves out:
the extra cost of verifying K+1 tokens and the speculative machinery's fixed
overhead (for n-gram/suffix proposers ``c ≈ 0`` and this overhead is all the
cost there is). A per-token verification cost ``v1*K`` cannot be told apart
from ``c*K`` using speedups alone, so the fitted ``cost_ratio`` is the total
per-draft-token cost (draft step plus marginal verification), relative to one
target decode step.

Units: alpha and rates are fractions in [0, 1]; E is tokens per target step;
costs are in target decode steps; speedups are ratios of throughputs.

Everything returned by :func:`expected_tokens_per_step`,
:func:`walltime_speedup`, :func:`optimal_k`, :func:`what_if` and the
``predicted_*`` columns of :func:`fit` is a **model prediction**, not a
measurement. ``alpha_per_token`` and ``alpha_rate`` are **estimates from
measured counters**; ``cost_ratio``/``verify_intercept`` are **fitted** to
measured speedups.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import scipy.optimize

from .profiles import BASELINE

#: Parameters of the cost are fitted separately for each of these groups by default:
#: a draft's cost relative to the target depends on the method, batch size and compilation.
FIT_GROUP = ("profile", "method", "batch_size", "compilation")
MODELS = ("leviathan", "overhead")


def _check_alpha(alpha) -> np.ndarray:
    a = np.asarray(alpha, dtype=float)
    if np.any((a < 0) | (a > 1)):
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
    return a


def _check_k(k) -> np.ndarray:
    kk = np.asarray(k)
    if np.any(kk < 0) or not np.all(np.asarray(kk, dtype=float) == np.floor(kk)):
        raise ValueError(f"k (num_speculative_tokens) must be a non-negative integer, got {k!r}")
    return kk.astype(int)


def _scalar(x):
    return float(x) if np.ndim(x) == 0 else x


def expected_tokens_per_step(alpha, k):
    """Expected tokens per target forward pass, E = (1 - alpha**(k+1)) / (1 - alpha).

    ``alpha``: per-token acceptance probability in [0, 1] (scalar or array);
    ``k``: draft tokens per step (>= 0). Returns tokens per step (float or
    array); the alpha = 1 limit is k + 1, alpha = 0 gives 1. A prediction.
    """
    a, kk = _check_alpha(alpha), _check_k(k)
    near_one = np.isclose(a, 1.0, rtol=0, atol=1e-12)
    safe = np.where(near_one, 0.5, a)
    e = np.where(near_one, kk + 1.0, (1 - safe ** (kk + 1)) / (1 - safe))
    return _scalar(e)


def walltime_speedup(alpha, k, cost_ratio, verify_intercept: float = 1.0):
    """Predicted walltime speedup S = E(alpha, k) / (cost_ratio*k + verify_intercept).

    ``cost_ratio``: cost of one draft step in target decode steps (c);
    ``verify_intercept``: cost of a verification pass in decode steps (v; 1 in
    Leviathan et al.). Scalars or broadcastable arrays. A prediction.
    """
    c = np.asarray(cost_ratio, dtype=float)
    if np.any(c < 0) or verify_intercept <= 0:
        raise ValueError("cost_ratio must be >= 0 and verify_intercept > 0")
    e = np.asarray(expected_tokens_per_step(alpha, k))
    return _scalar(e / (c * np.asarray(k) + verify_intercept))


def optimal_k(alpha: float, cost_ratio: float, k_max: int = 16,
              verify_intercept: float = 1.0) -> int:
    """The K in 1..k_max with the highest predicted speedup; 0 if none beats plain decoding.

    A prediction from :func:`walltime_speedup`. Returns 0 ("do not speculate")
    when the best speedup is <= 1.
    """
    ks = np.arange(1, int(k_max) + 1)
    s = walltime_speedup(alpha, ks, cost_ratio, verify_intercept)
    best = int(np.argmax(s))
    return int(ks[best]) if s[best] > 1 else 0


def alpha_from_acceptance(mean_acceptance_length, k):
    """Per-token acceptance alpha solving E(alpha, k) = mean_acceptance_length (brentq).

    ``mean_acceptance_length``: measured tokens per target step (1 + accepted /
    drafts), scalar or array; ``k``: draft tokens per step, scalar or array of
    the same shape. E is increasing in alpha from 1 (alpha=0) to k+1 (alpha=1),
    so the root is unique; lengths at or below 1 give 0, at or above k+1 give 1,
    NaN gives NaN. An estimate from measurement (assumes i.i.d. acceptance).
    """
    lengths = np.asarray(mean_acceptance_length, dtype=float)
    ks = np.broadcast_to(np.asarray(k), lengths.shape)
    out = np.full(lengths.shape, np.nan)
    for idx in np.ndindex(lengths.shape):
        length, kk = lengths[idx], int(ks[idx])
        if not np.isfinite(length) or kk <= 0:
            continue
        if length <= 1:
            out[idx] = 0.0
        elif length >= kk + 1:
            out[idx] = 1.0
        else:
            out[idx] = scipy.optimize.brentq(
                lambda a: expected_tokens_per_step(a, kk) - length, 0.0, 1.0, xtol=1e-12)
    return _scalar(out)


def alpha_from_rate(acceptance_rate, k):
    """Per-token alpha from vLLM's acceptance rate (accepted/draft tokens) at K = ``k``.

    Uses mean_acceptance_length = 1 + k * rate, then :func:`alpha_from_acceptance`.
    Use it to put a rate quoted elsewhere (e.g. the article's) on the alpha axis.
    """
    rate = np.asarray(acceptance_rate, dtype=float)
    return alpha_from_acceptance(1 + np.asarray(k) * rate, k)


def add_alpha(summary_df: pd.DataFrame) -> pd.DataFrame:
    """Add ``alpha_per_token`` (from mean_acceptance_length via brentq) and ``alpha_rate``
    (= acceptance_rate, accepted/draft tokens) to :func:`metrics.summarize` rows.

    Both are estimates from measured counters; NaN where the cell drafted nothing.
    """
    df = summary_df.copy()
    spec = df["method"] != BASELINE
    lengths = np.where(spec, df["mean_acceptance_length"].astype(float), np.nan)
    ks = df["num_speculative_tokens"].astype(int).to_numpy()
    df["alpha_per_token"] = np.atleast_1d(alpha_from_acceptance(lengths, ks)) if len(df) else []
    df["alpha_rate"] = df["acceptance_rate"].astype(float)
    return df


@dataclass(frozen=True)
class FitResult:
    """What :func:`fit` returns.

    params: one row per fit group: the group columns, ``model``, ``alpha_source``,
      ``cost_ratio`` (fitted, target decode steps per draft token),
      ``verify_intercept`` (fitted for model "overhead", 1 for "leviathan"),
      ``n_train``.
    predictions: the eligible cells (speculative, ``speedup_status == "ok"``,
      acceptance measured) with ``alpha``, ``predicted_expected_tokens``,
      ``predicted_speedup`` (predictions), the measured ``speedup``,
      ``relative_error`` = (predicted - measured) / measured, ``abs_pct_error``
      (percent), ``split`` ("train" or "test") and ``fit_status``.
    error: one row per split: ``n`` (cells with a prediction), ``median_abs_pct``,
      ``max_abs_pct`` (percent), ``n_unpredicted`` (cells whose group had no
      training cell).
    """

    params: pd.DataFrame
    predictions: pd.DataFrame
    error: pd.DataFrame

    def error_of(self, split: str = "test") -> dict:
        """The error row of one split as a dict (NaNs where the split is empty)."""
        row = self.error[self.error["split"] == split]
        return row.iloc[0].to_dict() if len(row) else {"split": split, "n": 0}


def fit(summary_df: pd.DataFrame, train_mask, model: str = "leviathan",
        alpha_source: str = "per_token", by: Sequence[str] = FIT_GROUP) -> FitResult:
    """Fit the cost term to measured speedups on a training subset, predict the rest.

    ``summary_df``: :func:`metrics.with_speedup` output. ``train_mask``: booleans
    aligned with ``summary_df`` (Series with the same index, or a sequence of the
    same length); True marks training cells. ``model``: ``"leviathan"``
    (S = E/(c*K + 1), one parameter c per group) or ``"overhead"``
    (S = E/(c*K + v), parameters c >= 0 and v > 0 per group). ``alpha_source``:
    ``"per_token"`` (alpha solving E = measured mean acceptance length, so E
    equals the measured tokens per step) or ``"rate"`` (alpha = accepted/draft
    tokens, which also tests the i.i.d.-acceptance assumption). ``by``: columns
    whose groups get their own cost parameters.

    Parameters minimise the squared relative error (predicted/measured - 1)
    over the group's training cells (``scipy.optimize.least_squares``).
    Returns a :class:`FitResult`.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    if alpha_source not in ("per_token", "rate"):
        raise ValueError(f"alpha_source must be 'per_token' or 'rate', got {alpha_source!r}")
    by = list(by)
    need = by + ["method", "num_speculative_tokens", "speedup", "speedup_status",
                 "mean_acceptance_length", "acceptance_rate"]
    missing = [c for c in need if c not in summary_df.columns]
    if missing:
        raise ValueError(f"fit: input lacks column(s) {', '.join(missing)}")
    mask = pd.Series(np.asarray(train_mask, dtype=bool), index=summary_df.index) \
        if not isinstance(train_mask, pd.Series) else train_mask.reindex(summary_df.index)
    if mask.isna().any():
        raise ValueError("fit: train_mask does not cover every row of summary_df")

    df = add_alpha(summary_df)
    df["split"] = np.where(mask.astype(bool), "train", "test")
    df = df[(df["method"] != BASELINE) & (df["speedup_status"] == "ok")]
    df["alpha"] = df["alpha_per_token"] if alpha_source == "per_token" else df["alpha_rate"]
    df = df[np.isfinite(df["alpha"].astype(float))].copy()
    df["predicted_expected_tokens"] = (
        [expected_tokens_per_step(a, k) for a, k in zip(df["alpha"], df["num_speculative_tokens"])]
        if len(df) else [])

    param_rows, parts = [], []
    for key, g in df.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        g = g.copy()
        train = g[g["split"] == "train"]
        c, v = np.nan, (1.0 if model == "leviathan" else np.nan)
        if len(train):
            e = train["predicted_expected_tokens"].to_numpy(float)
            kk = train["num_speculative_tokens"].to_numpy(float)
            s = train["speedup"].to_numpy(float)

            def residual(p):
                cc, vv = (p[0], 1.0) if model == "leviathan" else (p[0], p[1])
                return e / (cc * kk + vv) / s - 1

            x0, lb = ([0.1], [0.0]) if model == "leviathan" else ([0.1, 1.0], [0.0, 1e-6])
            sol = scipy.optimize.least_squares(residual, x0, bounds=(lb, np.inf))
            c = float(sol.x[0])
            v = 1.0 if model == "leviathan" else float(sol.x[1])
        param_rows.append({**dict(zip(by, key)), "model": model, "alpha_source": alpha_source,
                           "cost_ratio": c, "verify_intercept": v, "n_train": len(train)})
        g["cost_ratio"], g["verify_intercept"] = c, v
        g["predicted_speedup"] = (g["predicted_expected_tokens"]
                                  / (c * g["num_speculative_tokens"] + v))
        g["fit_status"] = "ok" if len(train) else "no training cell in group"
        parts.append(g)

    pred = pd.concat(parts) if parts else df.assign(cost_ratio=[], verify_intercept=[],
                                                    predicted_speedup=[], fit_status=[])
    pred["relative_error"] = (pred["predicted_speedup"] - pred["speedup"]) / pred["speedup"]
    pred["abs_pct_error"] = 100 * pred["relative_error"].abs()
    pred["kind"] = "prediction"
    err_rows = []
    for split in ("train", "test"):
        p = pred[pred["split"] == split]
        done = p[p["predicted_speedup"].notna()]
        err_rows.append({"split": split, "n": len(done),
                         "median_abs_pct": float(done["abs_pct_error"].median())
                         if len(done) else np.nan,
                         "max_abs_pct": float(done["abs_pct_error"].max())
                         if len(done) else np.nan,
                         "n_unpredicted": int(p["predicted_speedup"].isna().sum())})
    params = pd.DataFrame(param_rows, columns=by + ["model", "alpha_source", "cost_ratio",
                                                   "verify_intercept", "n_train"])
    return FitResult(params=params, predictions=pred.sort_index(),
                     error=pd.DataFrame(err_rows))


def what_if(cost_ratio: float, ks: Sequence[int] = (1, 2, 3, 4, 5, 8),
            alphas=None, verify_intercept: float = 1.0) -> pd.DataFrame:
    """Predicted speedup as a function of acceptance, for measured (fitted) costs.

    ``cost_ratio``/``verify_intercept``: as in :func:`walltime_speedup`, e.g.
    from :func:`fit`'s ``params``; ``ks``: K values; ``alphas``: per-token
    acceptance grid (default 0..1 in 101 steps). Returns a tidy DataFrame with
    columns ``alpha``, ``num_speculative_tokens``, ``acceptance_rate`` (the
    accepted/draft rate vLLM would report at that alpha), ``expected_tokens``,
    ``predicted_speedup``, ``cost_ratio``, ``verify_intercept`` and
    ``kind == "prediction"``. Every value is a model prediction.
    """
    grid = np.linspace(0, 1, 101) if alphas is None else np.asarray(alphas, dtype=float)
    rows = []
    for k in ks:
        e = np.atleast_1d(expected_tokens_per_step(grid, k))
        rows.append(pd.DataFrame({
            "alpha": grid, "num_speculative_tokens": int(k),
            "acceptance_rate": (e - 1) / k if k > 0 else np.nan,
            "expected_tokens": e,
            "predicted_speedup": e / (cost_ratio * k + verify_intercept),
            "cost_ratio": float(cost_ratio), "verify_intercept": float(verify_intercept),
            "kind": "prediction"}))
    return pd.concat(rows, ignore_index=True)


def break_even_alpha(cost_ratio: float, k_max: int = 16, verify_intercept: float = 1.0,
                     tol: float = 1e-6) -> float:
    """The smallest per-token acceptance alpha at which some K in 1..k_max beats plain decoding.

    A prediction from :func:`walltime_speedup` (speedup rises with alpha at every K, so the
    answer is found by bisection). Returns 1.0 when no alpha < 1 pays (e.g. a draft as costly
    as the target with verification at least one decode step).
    """
    def pays(alpha: float) -> bool:
        ks = np.arange(1, int(k_max) + 1)
        return bool(np.max(walltime_speedup(alpha, ks, cost_ratio, verify_intercept)) > 1.0)

    lo, hi = 0.0, 1.0 - 1e-9
    if pays(lo):
        return 0.0
    if not pays(hi):
        return 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if pays(mid) else (mid, hi)
    return hi


def article_implied(k, acceptance_rate, speedup) -> pd.DataFrame:
    """What a published K table's own numbers imply under the model (the article's C11-C13).

    ``k``, ``acceptance_rate`` (accepted / draft tokens) and ``speedup``: equal-length
    sequences, as the table states them. Returns, per row, ``k_times_acceptance`` (the
    accepted draft tokens per step), ``implied_tokens_per_step`` (one more: the target adds
    a token at every step), ``implied_alpha`` (:func:`alpha_from_rate`) and
    ``implied_cost_ratio``, the draft cost c that S = E / (c*K + 1) needs to turn those
    tokens per step into the stated speedup. Arithmetic on the table's numbers, not ours.
    """
    k = np.asarray(k, dtype=float)
    rate = np.asarray(acceptance_rate, dtype=float)
    speedup = np.asarray(speedup, dtype=float)
    accepted = k * rate
    tokens = 1 + accepted
    return pd.DataFrame({
        "k_times_acceptance": accepted,
        "implied_tokens_per_step": tokens,
        "implied_alpha": np.atleast_1d(alpha_from_rate(rate, k.astype(int))),
        "implied_cost_ratio": (tokens / speedup - 1) / k,
    })


def optimal_k_table(summary_df: pd.DataFrame, params: pd.DataFrame, k_max: int = 16,
                    by: Sequence[str] = FIT_GROUP) -> pd.DataFrame:
    """The fitted costs of each group and the K the model calls optimal at its median alpha.

    ``summary_df``: measured cells (:func:`metrics.with_speedup` rows); ``params``:
    :attr:`FitResult.params` of a fit grouped by ``by``. Adds ``median_alpha`` (median
    per-token alpha of the group's speculative cells, an estimate from counters) and
    ``optimal_k`` (:func:`optimal_k` at that alpha and the fitted ``cost_ratio`` and
    ``verify_intercept``; None where either is missing; 0 = no K beats plain decoding).
    """
    by = list(by)
    cells = add_alpha(summary_df)
    cells = cells[cells["method"] != BASELINE]
    alphas = (cells.groupby(by, dropna=False)["alpha_per_token"].median()
              .rename("median_alpha").reset_index())
    table = params.merge(alphas, on=by, how="left")
    table["optimal_k"] = [
        optimal_k(a, c, k_max=k_max, verify_intercept=v) if pd.notna(a) and pd.notna(c) else None
        for a, c, v in zip(table["median_alpha"], table["cost_ratio"], table["verify_intercept"])]
    return table


def prediction_grid(cost_ratios: Sequence[float], alpha: float, k_max: int = 16,
                    verify_intercept: float = 1.0) -> pd.DataFrame:
    """For each draft cost c: the break-even alpha, and the best K and its speedup at ``alpha``.

    Columns ``cost_ratio``, ``break_even_alpha`` (:func:`break_even_alpha`), ``best_k``
    (:func:`optimal_k`, 0 = do not speculate) and ``predicted_speedup`` (at ``best_k``;
    1.0, plain decoding, where ``best_k`` is 0). Every value is a model prediction.
    """
    rows = []
    for c in cost_ratios:
        k = optimal_k(alpha, c, k_max=k_max, verify_intercept=verify_intercept)
        rows.append({"cost_ratio": float(c),
                     "break_even_alpha": break_even_alpha(c, k_max=k_max,
                                                          verify_intercept=verify_intercept),
                     "best_k": k,
                     "predicted_speedup": float(walltime_speedup(alpha, k, c, verify_intercept))
                     if k else 1.0})
    return pd.DataFrame(rows, columns=["cost_ratio", "break_even_alpha", "best_k",
                                       "predicted_speedup"])


def decode_bound_steps_per_s(bandwidth_gb_s: float, weight_bytes: float) -> float:
    """The memory-bandwidth roofline of plain decoding: a step reads every weight once, so
    at most ``bandwidth / weight bytes`` steps per second (tokens per second of one request
    decoded alone). ``bandwidth_gb_s`` in GB/s (10^9 bytes). A bound, not a measurement."""
    if bandwidth_gb_s <= 0 or weight_bytes <= 0:
        raise ValueError("bandwidth_gb_s and weight_bytes must be positive")
    return float(bandwidth_gb_s) * 1e9 / float(weight_bytes)
