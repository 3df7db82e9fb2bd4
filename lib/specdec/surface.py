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
  engine was given (measured on the engine, not computed from configs);
- :func:`best_k` reads the best measured K per method, batch and alpha from a K sweep, beside
  a rule's K; :func:`dynamic_vs_fixed` sets vLLM's dynamic K beside fixed K at the same
  batch and alpha.
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
    ``c`` per curve; the cells at other alphas are the test split. A curve with no cell at
    ``train_alphas`` (vLLM's dynamic K, measured at two other alphas) has nothing to fit and
    is left out rather than predicted as NaN.
    """
    by = ["profile", "method", "num_speculative_tokens", "batch_size", "compilation"]
    spec = surface_df[(surface_df["method"] != BASELINE)
                      & surface_df["acceptance_alpha"].notna()].copy()
    train = spec["acceptance_alpha"].isin(list(train_alphas))
    fitted = train.groupby([spec[c] for c in by if c in spec], dropna=False).transform("any")
    spec, train = spec[fitted], train[fitted]
    return theory.fit(spec, train, model="leviathan", alpha_source="per_token", by=tuple(by))


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


def ties(best: float, best_low: float, best_leases, others, spread: float | None = None
         ) -> tuple[list[int], list[int]]:
    """The K a best reading ties with: ``overlaps``, the other K whose reading lies inside the
    best one's interval (reading >= ``best_low``); ``within_spread``, the other K read in other
    leases than the best one whose reading is within the method's ``spread`` between control
    panels of it (reading x (1 + spread) >= best): two hosts may differ by that much, so the
    difference is not a finding. ``others``: (K, reading, leases) of the other K; leases are
    sets (a reading may come from two cells)."""
    overlaps = sorted(int(k) for k, v, _ in others if v >= best_low)
    within = sorted(int(k) for k, v, leases in others
                    if spread is not None and pd.notna(spread) and int(k) not in overlaps
                    and set(leases) != set(best_leases) and v * (1 + spread) >= best)
    return overlaps, within


def best_k(surface_df: pd.DataFrame, rule_k: int | None = None, min_ks: int = 5,
           spread: pd.Series | None = None) -> pd.DataFrame:
    """The measured best K per method, batch and set alpha, over a K sweep.

    Only (method, batch) curves with at least ``min_ks`` measured K values count as a sweep.
    Columns: ``method``, ``batch_size``, ``acceptance_alpha``, ``ks`` (the K values
    measured), ``best_k`` and ``best_speedup`` (the largest measured median speedup),
    ``runner_up_speedup`` (the second largest), ``overlaps`` (the other K whose median lies
    inside the best one's interval) and ``within_spread`` (the other K measured in another
    lease within the method's ``spread`` between control panels of it; :func:`ties`): where
    either is non-empty, the "best" K is a tie (``tie``).
    Where ``rule_k`` is given (a rule's K, e.g. the article's C14): ``rule_speedup`` (measured
    at that K) and ``rule_loss`` (1 - rule/best).
    """
    df = surface_df[(surface_df["method"] != BASELINE) & surface_df["acceptance_alpha"].notna()
                    & surface_df["speedup"].notna()]
    rows = []
    for (method, batch, alpha), g in df.groupby(["method", "batch_size", "acceptance_alpha"]):
        ks = sorted(int(k) for k in g["num_speculative_tokens"].unique())
        if len(ks) < min_ks:
            continue
        g = g.sort_values("speedup", ascending=False)
        top, rest = g.iloc[0], g.iloc[1:]
        low = float(top.get("speedup_ci_low", np.nan))
        lease = (lambda r: {r["lease_id"]}) if "lease_id" in g else (lambda r: set())
        overlaps, within = ties(float(top["speedup"]), low, lease(top),
                                [(r["num_speculative_tokens"], r["speedup"], lease(r))
                                 for _, r in rest.iterrows()],
                                spread.get(method) if spread is not None else None)
        row = {"method": method, "batch_size": int(batch), "acceptance_alpha": float(alpha),
               "ks": ks, "best_k": int(top["num_speculative_tokens"]),
               "best_speedup": float(top["speedup"]), "best_ci_low": low,
               "runner_up_speedup": float(rest.iloc[0]["speedup"]) if len(rest) else np.nan,
               "overlaps": overlaps, "within_spread": within, "tie": bool(overlaps or within)}
        if rule_k is not None:
            at = g[g["num_speculative_tokens"] == rule_k]["speedup"]
            row["rule_k"] = rule_k
            row["rule_speedup"] = float(at.iloc[0]) if len(at) else np.nan
            row["rule_loss"] = 1 - row["rule_speedup"] / row["best_speedup"]
        rows.append(row)
    cols = ["method", "batch_size", "acceptance_alpha", "ks", "best_k", "best_speedup",
            "best_ci_low", "runner_up_speedup", "overlaps", "within_spread", "tie"] + (
        ["rule_k", "rule_speedup", "rule_loss"] if rule_k is not None else [])
    return pd.DataFrame(rows, columns=cols)


def dynamic_k_methods(profile) -> dict[str, str]:
    """Methods with vLLM's dynamic K (``num_speculative_tokens_per_batch_size``) -> the
    method of the same profile with the same draft and proposer at a fixed K."""
    out = {}
    for m in profile.methods:
        spec = m.speculative or {}
        if "num_speculative_tokens_per_batch_size" not in spec:
            continue
        for f in profile.methods:
            fs = f.speculative or {}
            if (f.draft == m.draft and fs.get("method") == spec.get("method")
                    and "num_speculative_tokens_per_batch_size" not in fs):
                out[m.name] = f.name
                break
    return out


def dynamic_vs_fixed(surface_df: pd.DataFrame, pairs: dict[str, str]) -> pd.DataFrame:
    """vLLM's dynamic K beside fixed K, cell by cell (same batch, same set alpha).

    ``pairs``: :func:`dynamic_k_methods`. For each dynamic cell: ``k_used`` (draft tokens per
    draft, from the engine's counters: the K the schedule chose at that batch), its
    ``speedup`` and ``cudagraph_mode``; ``fixed_same_k`` (the fixed method's speedup at that
    K) and ``dynamic_over_fixed`` (their ratio: what the mechanism itself costs); the best
    fixed K measured at that batch and alpha (``best_fixed_k``, ``best_fixed``) and
    ``dynamic_over_best`` (what a schedule can gain at most is that best fixed K per batch);
    ``step_ms`` and ``fixed_step_ms`` (the fixed cell's at that K) where the table has them;
    ``runner`` and ``fixed_runner`` where the table has them (in vLLM 0.26 EAGLE-3's schedule
    runs only on V1, its fixed K on V2 by default: the ratio then carries the runner too), and
    ``lease_id`` and ``fixed_lease`` (the fixed cell's at that K), where it has them.
    """
    df = (surface_df[surface_df["acceptance_alpha"].notna() & surface_df["speedup"].notna()]
          if len(surface_df) else pd.DataFrame(columns=["method"]))  # no rows: no cells
    rows = []
    for dyn, fixed in pairs.items():
        fx = df[df["method"] == fixed]
        for _, r in df[df["method"] == dyn].iterrows():
            k_used = float(r["spec_num_draft_tokens"]) / float(r["spec_num_drafts"]) \
                if r["spec_num_drafts"] else np.nan
            same = fx[(fx["batch_size"] == r["batch_size"])
                      & (fx["acceptance_alpha"] == r["acceptance_alpha"])]
            if "profile" in fx:  # a campaign's dynamic cell beside its own fixed ones
                same = same[same["profile"] == r["profile"]]
            at_k = same[same["num_speculative_tokens"] == round(k_used)] \
                if np.isfinite(k_used) else same.iloc[0:0]
            best = same.loc[same["speedup"].idxmax()] if len(same) else None
            rows.append({
                "method": dyn, "fixed_method": fixed, "batch_size": int(r["batch_size"]),
                "acceptance_alpha": float(r["acceptance_alpha"]), "k_used": k_used,
                "runner": r.get("runner"),
                "fixed_runner": same["runner"].iloc[0] if len(same) and "runner" in same else None,
                "cudagraph_mode": r.get("cudagraph_mode"), "speedup": float(r["speedup"]),
                "step_ms": r.get("step_ms"),
                "fixed_step_ms": float(at_k["step_ms"].iloc[0]) if len(at_k) and "step_ms" in at_k else np.nan,
                "fixed_same_k": float(at_k["speedup"].iloc[0]) if len(at_k) else np.nan,
                "fixed_cudagraph_mode": at_k["cudagraph_mode"].iloc[0]
                if len(at_k) and "cudagraph_mode" in at_k else None,
                "best_fixed_k": int(best["num_speculative_tokens"]) if best is not None else None,
                "best_fixed": float(best["speedup"]) if best is not None else np.nan,
                "fixed_ks": sorted(int(k) for k in same["num_speculative_tokens"].unique()),
                "lease_id": r.get("lease_id"),
                "fixed_lease": at_k["lease_id"].iloc[0] if len(at_k) and "lease_id" in at_k else None,
                **{c: r.get(c) for c in ("profile", "device_name", "vllm_version")},
            })
    out = pd.DataFrame(rows, columns=[
        "method", "fixed_method", "batch_size", "acceptance_alpha", "k_used", "runner",
        "fixed_runner", "cudagraph_mode",
        "speedup", "step_ms", "fixed_step_ms", "fixed_same_k", "fixed_cudagraph_mode", "best_fixed_k", "best_fixed",
        "fixed_ks", "lease_id", "fixed_lease", "profile", "device_name", "vllm_version"])
    out["dynamic_over_fixed"] = out["speedup"] / out["fixed_same_k"]
    out["dynamic_over_best"] = out["speedup"] / out["best_fixed"]
    return out


def _read_between(curve: pd.Series, alpha: float) -> tuple[float, float, float] | None:
    """``curve`` (indexed by measured set α, sorted) read linearly at ``alpha``, with the two
    measured α around it: (value, alpha_low, alpha_high); None outside the measured range."""
    a, v = curve.index.to_numpy(dtype=float), curve.to_numpy(dtype=float)
    if not len(a) or not a[0] <= alpha <= a[-1]:
        return None
    hi = int(np.searchsorted(a, alpha))  # the first measured α at or above alpha
    lo = hi if a[hi] == alpha else hi - 1
    return float(np.interp(alpha, a, v)), float(a[lo]), float(a[hi])


def speedup_at(surface_df: pd.DataFrame, method: str, alpha: float, k: int,
               batch_size: int) -> dict:
    """The measured speedup of ``method`` at set acceptance ``alpha``, read off the surface
    between the two measured set α around it (linear; exact where α itself was measured).

    Returns ``speedup`` (NaN where α lies outside the measured range) and the bracketing
    ``alpha_low``/``alpha_high``: a measured cost at a stated acceptance.
    """
    cells = surface_df[(surface_df["method"] == method)
                       & (surface_df["num_speculative_tokens"] == k)
                       & (surface_df["batch_size"] == batch_size)
                       & surface_df["acceptance_alpha"].notna() & surface_df["speedup"].notna()]
    out = {"method": method, "k": k, "batch_size": batch_size, "alpha": alpha,
           "speedup": float("nan"), "alpha_low": float("nan"), "alpha_high": float("nan")}
    read = _read_between(cells.groupby("acceptance_alpha")["speedup"].median().sort_index(), alpha)
    if read is not None:
        out.update(speedup=read[0], alpha_low=read[1], alpha_high=read[2])
    return out


def speedup_from_cost(surface_df: pd.DataFrame, method: str, alpha: float, k: int,
                      batch_size: int, tokens_per_step: float) -> dict:
    """The speedup of ``method`` that emits ``tokens_per_step`` (a measured acceptance, reached
    elsewhere) at the measured cost of its steps: baseline ms per token x tokens per step /
    ms per speculative step (:func:`table`'s ``step_ms``), the step's cost read between the two
    measured set α around ``alpha``.

    Unlike :func:`speedup_at`, the acceptance is not interpolated: speedup is convex in α (tokens
    per step grow as α + α² + …), so a straight line between α = 0 and 0.5 overstates it in
    between; the cost of a step hardly depends on α, so interpolating that loses little. Returns
    ``speedup`` (NaN where α lies outside the measured range or no baseline was measured at the
    batch), ``step_ms``, ``baseline_step_ms`` and the bracketing ``alpha_low``/``alpha_high``."""
    cells = surface_df[(surface_df["method"] == method)
                       & (surface_df["num_speculative_tokens"] == k)
                       & (surface_df["batch_size"] == batch_size)
                       & surface_df["acceptance_alpha"].notna() & surface_df["step_ms"].notna()]
    out = {"method": method, "k": k, "batch_size": batch_size, "alpha": alpha,
           "tokens_per_step": tokens_per_step, "speedup": float("nan"), "step_ms": float("nan"),
           "baseline_step_ms": float("nan"), "alpha_low": float("nan"), "alpha_high": float("nan")}
    if cells.empty:
        return out
    workload = cells["workload"].mode().iloc[0]  # the baseline of the same prompts
    cells = cells[cells["workload"] == workload]
    # a protocol-2 table names each cell's own baseline (the same runner's); else the baseline
    base = (cells["baseline_step_ms"].dropna() if "baseline_step_ms" in cells else pd.Series(dtype=float))
    if base.empty:
        base = surface_df[(surface_df["method"] == BASELINE) & (surface_df["batch_size"] == batch_size)
                          & (surface_df["workload"] == workload)]["step_ms"].dropna()
    read = _read_between(cells.groupby("acceptance_alpha")["step_ms"].median().sort_index(), alpha)
    if base.empty or read is None:
        return out
    step, base_ms = read[0], float(base.median())
    out.update(speedup=base_ms * tokens_per_step / step, step_ms=step, baseline_step_ms=base_ms,
               alpha_low=read[1], alpha_high=read[2])
    return out


def speedups_over_batch(readings: pd.DataFrame) -> str:
    """"S× at batch b" at the smallest and the largest batch of :func:`speedup_at` readings of
    one method (one reading: one clause)."""
    g = readings.sort_values("batch_size")
    first, last = g.iloc[0], g.iloc[-1]
    text = f"{first['speedup']:.2f}× at batch {int(first['batch_size'])}"
    if len(g) > 1:
        text += f", {last['speedup']:.2f}× at batch {int(last['batch_size'])}"
    return text


def proposed_share(checks: pd.DataFrame, method: str = "ngram") -> pd.Series:
    """The share of target steps in which ``method`` proposed a draft at all (``draft_share``),
    over its set-acceptance cells of ``checks`` (:func:`table` of the engine's counters): each
    cell is selected on its own row's acceptance, whatever the frame's index."""
    sel = checks[(checks["method"] == method) & checks["acceptance_alpha"].notna()]
    return sel["draft_share"].dropna()
