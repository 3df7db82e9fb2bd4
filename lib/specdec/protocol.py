"""What measuring protocol 2 (issue 19) adds to the analysis: cells from their last attempt,
the speedup read from step cost, the control panel's drift, and the like-for-like pairs of
the runner and engine-core controls.

Input is :func:`specdec.store.load_runs` output (rows of ``measure_version`` 2 carry the
columns this module reads: ``attempt``, ``engine_steps``, ``step_ms``, ``tokens_per_step``,
``engine_core``, the ``gpu_*`` stamps, ``lease_id`` and ``panel_phase``). Nothing here
measures; every number comes from stored rows.

The speedup at a set acceptance alpha, K draft tokens (Leviathan's independent model, the
unconditional rate of draft position i being alpha**(i+1)) is read from cost::

    speedup_cost = E[tokens per step](alpha, K) * step_ms(baseline) / step_ms(method)

where ``E[tokens per step] = 1 + sum_i alpha**(i+1)`` is exact for the set rates and the step
times are the medians over the cell's repeats. The realised speedup (the throughput ratio)
carries the synthetic draw's noise on top; both are kept, side by side.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from . import leases, metrics, paths, stats, store, theory
from .surface import _read_between, dynamic_k_methods, ties

#: A cell is paired with the baseline measured on the same runner and engine core, at the
#: same batch size, workload and temperature.
PAIR_KEYS = ["profile", "batch_size", "workload", "temperature", "model_runner", "engine_core"]
#: The panels of two leases agree when their medians differ by at most this much (median
#: over the panel's cells) and no cell by more than :data:`PANEL_WORST`.
PANEL_MEDIAN = 0.03
PANEL_WORST = 0.05
#: The step-cost reading must fall this close to a measured speedup where it is checked.
PREDICTION_TOLERANCE = 0.03
#: The protocol's goal: at least this share of cells vary by at most ``stats.CV_THRESHOLD``
#: over their repeats (nineteen in twenty).
CV_GOAL = 0.95

RUNNER_NAMES = {"vllm.v1.worker.gpu.model_runner.GPUModelRunner": "V2",
                "vllm.v1.worker.gpu_model_runner.GPUModelRunner": "V1"}


def pct(x: float, digits: int = 0) -> str:
    """A share as the protocol chapter writes it: ``pct(0.034, 1)`` is "3.4 %"."""
    return f"{100 * x:.{digits}f} %"


def span(values, spec: str, suffix: str = "") -> str:
    """``"1.20× to 1.50×"`` of ``values``, or one value where the two ends print alike."""
    lo, hi = f"{min(values):{spec}}{suffix}", f"{max(values):{spec}}{suffix}"
    return lo if lo == hi else f"{lo} to {hi}"


def runner_label(model_runner) -> str | None:
    """"V1" or "V2" for vLLM's GPU model runners (module path), else the class as stored."""
    if model_runner is None or (isinstance(model_runner, float) and np.isnan(model_runner)):
        return None
    return RUNNER_NAMES.get(str(model_runner), str(model_runner).rsplit(".", 2)[-2]
                            if "." in str(model_runner) else str(model_runner))


def cells(runs: pd.DataFrame, drafted_k: Sequence[str] = ()) -> pd.DataFrame:
    """One row per measured cell (per lease and panel phase for panel rows): medians over the
    last attempt's repeats of throughput, step time and tokens per step, with CVs, intervals,
    the GPU stamps and what the engine ran on.

    ``expected_tokens_per_step`` is exact for the set rates at the cell's K; for the methods
    named in ``drafted_k`` (vLLM's dynamic K: the K changes with the batch) at the K the engine
    drafted at (its draft tokens per draft, where that is a whole number; else NaN, no exact
    expectation), kept as ``k_drafted``."""
    rows = []
    keys = ["profile", "cell_id", "method", "num_speculative_tokens", "batch_size", "workload",
            "temperature", "acceptance_alpha", "lease_id", "panel_phase"]
    data = metrics.last_attempt(runs)
    for c in keys:
        if c not in data:
            data[c] = None
    for key, g in data.groupby(keys, dropna=False, sort=True):
        row = dict(zip(keys, key))
        tok = stats.describe(g["output_tokens_per_s"])
        step = stats.describe(pd.to_numeric(g["step_ms"], errors="coerce").dropna())
        row.update(
            n_repeats=tok["n"], attempts=int(g["attempt"].max()) + 1,
            tok_s=tok["median"], tok_s_ci_low=tok["ci_low"], tok_s_ci_high=tok["ci_high"],
            tok_s_cv=tok["cv"], unstable=tok["unstable"],
            step_ms=step["median"], step_ms_ci_low=step["ci_low"], step_ms_ci_high=step["ci_high"],
            step_ms_cv=step["cv"],
            tokens_per_step=stats.median(pd.to_numeric(g["tokens_per_step"], errors="coerce").dropna()),
            output_tokens_per_request=float(g["num_output_tokens"].sum() / g["num_requests"].sum()),
            repeat_s=stats.median(g["wall_s"]), passes=int(g["passes"].max()),
            runner=runner_label(g["model_runner"].iloc[0]),
            model_runner=g["model_runner"].iloc[0],
            engine_core=g["engine_core"].iloc[0],
            cudagraph_mode=g["cudagraph_mode"].iloc[0],
            gpu_sm_clock_mhz=stats.median(pd.to_numeric(g["gpu_sm_clock_mhz"], errors="coerce").dropna()),
            gpu_sm_clock_min_mhz=pd.to_numeric(g["gpu_sm_clock_min_mhz"], errors="coerce").min(),
            gpu_power_w=stats.median(pd.to_numeric(g["gpu_power_w"], errors="coerce").dropna()),
            gpu_temp_c=stats.median(pd.to_numeric(g["gpu_temp_c"], errors="coerce").dropna()),
            gpu_uuid=metrics._joined(g["gpu_uuid"]) if "gpu_uuid" in g else None,
            hostname=metrics._joined(g["hostname"]) if "hostname" in g else None,
            cpu_model=metrics._joined(g["cpu_model"]) if "cpu_model" in g else None,
            git_commit=metrics._joined(g["git_commit"]) if "git_commit" in g else None,
            device_name=metrics._joined(g["device_name"]) if "device_name" in g else None,
            vllm_version=metrics._joined(g["vllm_version"]) if "vllm_version" in g else None,
            timestamp_utc=g["timestamp_utc"].max(),
            # the engine's draft counters over the repeats: their ratio is the K a dynamic-K
            # schedule chose (specdec.surface.dynamic_vs_fixed)
            spec_num_drafts=pd.to_numeric(g["spec_num_drafts"], errors="coerce").sum()
            if "spec_num_drafts" in g else np.nan,
            spec_num_draft_tokens=pd.to_numeric(g["spec_num_draft_tokens"], errors="coerce").sum()
            if "spec_num_draft_tokens" in g else np.nan,
        )
        a, k = row["acceptance_alpha"], row["num_speculative_tokens"]
        if row["method"] in drafted_k:
            per = row["spec_num_draft_tokens"] / row["spec_num_drafts"] if row["spec_num_drafts"] else np.nan
            k = round(per) if np.isfinite(per) and abs(per - round(per)) < 0.01 else None
        row["k_drafted"] = k
        row["expected_tokens_per_step"] = (float(theory.expected_tokens_per_step(a, k))
                                           if k is not None and a is not None and pd.notna(a)
                                           else float("nan"))
        rows.append(row)
    return pd.DataFrame(rows)


def speedups(cell_df: pd.DataFrame, panel_cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each speculative cell beside the baseline of the same runner and engine core (the
    non-speculative cell of the same :data:`PAIR_KEYS`, K=0): the realised speedup
    (throughput ratio of medians) and, at set acceptance, the speedup read from cost
    (module docstring), each with the interval arithmetic of the medians' intervals.

    The baseline is taken from the cell's own lease where that lease measured it (in the
    campaign, else in its control panel, ``panel_cells``, the start panel first): the plain
    target's step differs by a few percent between two H200s (lease 9), which a pair across
    leases would read as speedup. Else from any lease; ``baseline_lease`` says which."""
    df = cell_df[cell_df["panel_phase"].isna()] if "panel_phase" in cell_df else cell_df
    base = df[df["num_speculative_tokens"] == 0]
    extra = pd.DataFrame()
    if panel_cells is not None and len(panel_cells):
        extra = panel_cells[(panel_cells["num_speculative_tokens"] == 0)
                            & panel_cells["panel_phase"].notna()]
        extra = extra.assign(_o=extra["panel_phase"].map({"start": 0, "end": 1})).sort_values("_o")
    index = {tuple(b[k] for k in PAIR_KEYS): b for _, b in base[::-1].iterrows()}
    by_lease = {(*(b[k] for k in PAIR_KEYS), b.get("lease_id")): b
                for _, b in pd.concat([base, extra])[::-1].iterrows()}
    out = []
    for _, r in df[df["num_speculative_tokens"] > 0].iterrows():
        key = tuple(r[k] for k in PAIR_KEYS)
        b = by_lease.get((*key, r.get("lease_id"))) if pd.notna(r.get("lease_id")) else None
        b = b if b is not None else index.get(key)
        row = r.to_dict()
        row.update(baseline_method=None, baseline_lease=None, baseline_tok_s=np.nan,
                   baseline_step_ms=np.nan,
                   baseline_step_ms_ci_low=np.nan, baseline_step_ms_ci_high=np.nan,
                   speedup=np.nan, speedup_ci_low=np.nan, speedup_ci_high=np.nan,
                   speedup_cost=np.nan, speedup_cost_ci_low=np.nan, speedup_cost_ci_high=np.nan)
        if b is not None:
            row.update(baseline_method=b["method"], baseline_lease=b.get("lease_id"),
                       baseline_tok_s=b["tok_s"],
                       baseline_step_ms=b["step_ms"], baseline_step_ms_ci_low=b["step_ms_ci_low"],
                       baseline_step_ms_ci_high=b["step_ms_ci_high"],
                       speedup=r["tok_s"] / b["tok_s"],
                       speedup_ci_low=r["tok_s_ci_low"] / b["tok_s_ci_high"],
                       speedup_ci_high=r["tok_s_ci_high"] / b["tok_s_ci_low"])
            e = r["expected_tokens_per_step"]
            if pd.notna(e):
                row.update(speedup_cost=e * b["step_ms"] / r["step_ms"],
                           speedup_cost_ci_low=e * b["step_ms_ci_low"] / r["step_ms_ci_high"],
                           speedup_cost_ci_high=e * b["step_ms_ci_high"] / r["step_ms_ci_low"])
        out.append(row)
    return pd.DataFrame(out)


def cost_vs_realised(speedup_df: pd.DataFrame) -> pd.DataFrame:
    """How far the realised speedup lies from the one read from cost, per set-acceptance
    cell: the synthetic draw's noise (the realised tokens per step against the expected)."""
    d = speedup_df.dropna(subset=["speedup_cost", "speedup"]).copy()
    d["realised_over_cost"] = d["speedup"] / d["speedup_cost"] - 1.0
    d["draw_deviation"] = d["tokens_per_step"] / d["expected_tokens_per_step"] - 1.0
    return d[["method", "runner", "engine_core", "num_speculative_tokens", "batch_size",
              "acceptance_alpha", "speedup", "speedup_cost", "realised_over_cost",
              "tokens_per_step", "expected_tokens_per_step", "draw_deviation"]]


def predicted_between(speedup_df: pd.DataFrame, measured_alphas: Sequence[float],
                      check_alphas: Sequence[float]) -> pd.DataFrame:
    """The step-cost reading where it was not measured: at each alpha of ``check_alphas``,
    :func:`read_at` from the ``measured_alphas`` alone, beside the speedup measured there
    (read from its own step cost, and realised). ``within`` says whether the prediction lies
    within :data:`PREDICTION_TOLERANCE` of the one read from the cell's own step cost (the
    draw's noise left out)."""
    rows = []
    checked = speedup_df[speedup_df["acceptance_alpha"].isin(check_alphas)]
    for _, r in checked.iterrows():
        pred = read_at(speedup_df, r["method"], float(r["acceptance_alpha"]),
                       int(r["num_speculative_tokens"]), int(r["batch_size"]),
                       from_alphas=measured_alphas)
        if pred is None:
            continue
        error = pred["speedup_cost"] / r["speedup_cost"] - 1.0
        rows.append({"method": r["method"], "num_speculative_tokens": r["num_speculative_tokens"],
                     "batch_size": r["batch_size"], "workload": r["workload"],
                     "runner": r["runner"], "engine_core": r["engine_core"],
                     "acceptance_alpha": float(r["acceptance_alpha"]),
                     "predicted": pred["speedup_cost"], "measured_cost": r["speedup_cost"],
                     "measured_realised": r["speedup"], "error": error,
                     "error_realised": pred["speedup_cost"] / r["speedup"] - 1.0,
                     "within": abs(error) <= PREDICTION_TOLERANCE})
    return pd.DataFrame(rows)


def between_by_method(check: pd.DataFrame, spread: pd.Series) -> pd.DataFrame:
    """:func:`predicted_between` per method: how many checks fall within
    :data:`PREDICTION_TOLERANCE`, the largest error, and how many fall within the method's
    panel spread (:func:`method_spread`). The prediction reads cells of another lease, so for
    a method whose step moves with the host (the V1 draft) the spread, not the reading, bounds
    the error: a check outside the tolerance but inside the spread says nothing against it."""
    rows = []
    for method, g in check.groupby("method"):
        s = spread.get(method, np.nan)
        err = g["error"].abs()
        rows.append({"method": method, "runner": g["runner"].iloc[0], "checks": len(g),
                     "within_tolerance": int((err <= PREDICTION_TOLERANCE).sum()),
                     "largest_error": float(err.max()), "panel_spread": s,
                     "within_spread": int((err <= s).sum()) if pd.notna(s) else None})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- #
# The control panel
# --------------------------------------------------------------------------- #
def panels_root(root: Path | None = None) -> Path:
    """``data/panels``: one folder per lease and phase, ``<lease>-<phase>/<profile>/``."""
    return Path(root) if root else paths.DATA_DIR / "panels"


def load_panels(profile: str, root: Path | None = None) -> pd.DataFrame:
    """Every stored panel row of ``profile`` (all leases, both phases)."""
    return store.read_frame(panels_root(root).glob(f"*/{profile}/*.runs.parquet"),
                            store.RUNS_SCHEMA)


def load_surveys(root: Path | None = None) -> pd.DataFrame:
    """Every vCPU survey stored beside a panel (``data/panels/<lease>-<phase>/vcpus.json``,
    :func:`specdec.worker.vcpu_survey`): one row per lease, phase, vCPU and pass."""
    import json

    rows = []
    for f in sorted(panels_root(root).glob("*/vcpus.json")):
        lease, _, phase = f.parent.name.rpartition("-")
        doc = json.loads(f.read_text())
        for v in doc["vcpus"]:
            rows += [{"lease_id": lease, "panel_phase": phase, "vcpu": v["vcpu"], "pass": i,
                      "probe_us": us, "cpu_model": doc.get("cpu_model")}
                     for i, us in enumerate(v["probe_us"])]
    return pd.DataFrame(rows, columns=["lease_id", "panel_phase", "vcpu", "pass", "probe_us",
                                       "cpu_model"])


def two_speeds(survey: pd.DataFrame, slow: float = 1.3) -> dict:
    """What a vCPU survey says: the fast level (the median of the probe times below ``slow``
    times the fastest), the slow level (the median of the rest), the share of probes at the
    slow level, and on how many vCPUs both levels were seen."""
    if survey.empty:
        return {}
    cut = slow * survey["probe_us"].min()
    fast, slowv = survey[survey["probe_us"] < cut], survey[survey["probe_us"] >= cut]
    both = survey.assign(s=survey["probe_us"] >= cut).groupby(
        ["lease_id", "vcpu"])["s"].nunique()
    return {"fast_us": float(fast["probe_us"].median()),
            "slow_us": float(slowv["probe_us"].median()) if len(slowv) else float("nan"),
            "slow_share": float(len(slowv) / len(survey)),
            "vcpus_both": int((both == 2).sum()), "vcpus": int(len(both))}


def panel_table(panel_cells: pd.DataFrame) -> pd.DataFrame:
    """The panel per lease and phase: one row per (lease, phase, cell) with throughput, step
    time, CV and the SM clock, in time order."""
    cols = ["lease_id", "panel_phase", "method", "batch_size", "acceptance_alpha", "runner",
            "engine_core", "tok_s", "tok_s_cv", "step_ms", "step_ms_cv", "tokens_per_step",
            "gpu_sm_clock_mhz", "gpu_power_w", "gpu_uuid", "timestamp_utc", "cell_id"]
    d = panel_cells[panel_cells["panel_phase"].notna()]
    rank = {lease: i for i, lease in enumerate(sorted(d["lease_id"].dropna().unique(), key=leases.order))}
    d = d.assign(_lease=d["lease_id"].map(rank), _phase=d["panel_phase"].map({"start": 0, "end": 1}))
    return d.sort_values(["_lease", "_phase", "method", "batch_size"])[cols].reset_index(drop=True)


def panel_drift(table: pd.DataFrame, metric: str = "step_ms") -> pd.DataFrame:
    """How far each panel (lease, phase) lies from the first one, cell by cell, and in
    summary: the median and the worst relative difference of ``metric`` over the panel's
    cells; ``agrees`` where both are within :data:`PANEL_MEDIAN` and :data:`PANEL_WORST`."""
    if table.empty:
        return pd.DataFrame(columns=["lease_id", "panel_phase", "cells", "median_diff",
                                     "worst_diff", "agrees"])
    order = table.drop_duplicates(["lease_id", "panel_phase"])[["lease_id", "panel_phase"]]
    first = order.iloc[0]
    ref = table[(table["lease_id"] == first["lease_id"]) & (table["panel_phase"] == first["panel_phase"])]
    ref = ref.set_index("cell_id")[metric]
    rows = []
    for _, o in order.iterrows():
        g = table[(table["lease_id"] == o["lease_id"]) & (table["panel_phase"] == o["panel_phase"])]
        diff = (g.set_index("cell_id")[metric] / ref - 1.0).dropna()
        med = float(diff.median()) if len(diff) else np.nan
        worst = float(diff.abs().max()) if len(diff) else np.nan
        rows.append({"lease_id": o["lease_id"], "panel_phase": o["panel_phase"],
                     "cells": int(len(diff)), "median_diff": med, "worst_diff": worst,
                     "agrees": bool(abs(med) <= PANEL_MEDIAN and worst <= PANEL_WORST)})
    return pd.DataFrame(rows)


def remeasures(runs: pd.DataFrame, threshold: float = stats.CV_THRESHOLD) -> pd.DataFrame:
    """Per method, the cells measured a second time (campaign and panels alike) and how many
    of those came under ``threshold`` at the second attempt, with the median throughput CV of
    each attempt: whether measuring again helps (a host-bound variation stays)."""
    # a panel cell that is also a campaign cell is stored twice, measured once
    keys = [c for c in ("lease_id", "cell_id", "method") if c in runs]
    ok = runs[runs["status"] == "ok"].drop_duplicates(keys + ["attempt", "repeat",
                                                              "output_tokens_per_s"])
    cv = (ok.groupby(keys + ["attempt"], dropna=False)["output_tokens_per_s"]
          .agg(stats.cv)
          .unstack("attempt"))
    if 1 not in cv:
        return pd.DataFrame(columns=["method", "remeasured", "came_under", "cv_first", "cv_second"])
    again = cv[cv[1].notna()].reset_index()
    return (again.groupby("method")
            .apply(lambda d: pd.Series({"remeasured": len(d), "came_under": int((d[1] <= threshold).sum()),
                                        "cv_first": d[0].median(), "cv_second": d[1].median()}),
                   include_groups=False)
            .reset_index().astype({"remeasured": int, "came_under": int}))


def flagged(cell_df: pd.DataFrame, threshold: float = stats.CV_THRESHOLD) -> pd.DataFrame:
    """Cells whose throughput CV stayed above ``threshold`` after the protocol's second
    attempt: the book flags them."""
    return cell_df[cell_df["tok_s_cv"] > threshold]


def read_at(speedup_df: pd.DataFrame, method: str, alpha: float, k: int, batch: int,
            from_alphas: Sequence[float] | None = None) -> dict | None:
    """The speedup read from cost at any alpha: the method's step time (and its interval) read
    linearly between the measured alphas around ``alpha`` (:func:`specdec.surface._read_between`;
    a step's cost hardly moves with alpha), times the exact expected tokens per step, over the
    same-runner baseline's step time. ``from_alphas``: read from these measured alphas only.
    None where no measured alpha brackets ``alpha``. ``leases``: the leases of the two
    measured alphas it was read between."""
    g = speedup_df[(speedup_df["method"] == method) & (speedup_df["num_speculative_tokens"] == k)
                   & (speedup_df["batch_size"] == batch)].dropna(subset=["acceptance_alpha"])
    if from_alphas is not None:
        g = g[g["acceptance_alpha"].isin(from_alphas)]
    if g.empty:
        return None
    curves = g.set_index("acceptance_alpha").sort_index()
    read = [_read_between(curves[c], alpha) for c in ("step_ms", "step_ms_ci_low", "step_ms_ci_high")]
    if read[0] is None:
        return None
    (step, a_lo, a_hi), (lo, _, _), (hi, _, _) = read
    b = g.iloc[0]
    used = g[g["acceptance_alpha"].isin([a_lo, a_hi])]
    base, base_lo, base_hi = (b["baseline_step_ms"], b["baseline_step_ms_ci_low"],
                              b["baseline_step_ms_ci_high"])
    e = float(theory.expected_tokens_per_step(alpha, k))
    return {"method": method, "runner": b["runner"], "baseline_method": b["baseline_method"],
            "num_speculative_tokens": k, "batch_size": batch, "acceptance_alpha": alpha,
            "speedup_cost": e * base / step, "speedup_cost_ci_low": e * base_lo / hi,
            "speedup_cost_ci_high": e * base_hi / lo,
            "leases": sorted(set(used["lease_id"].dropna())) if "lease_id" in used else []}


def break_even(speedup_df: pd.DataFrame, k: int = 4, step: float = 0.01) -> pd.DataFrame:
    """Per method and batch: the least set acceptance at which the speedup read from cost
    (:func:`read_at`) reaches 1, on a grid of ``step``; ``alpha_low`` and ``alpha_high`` where
    the upper and the lower end of its interval reach 1 (NaN where it never does within the
    measured alphas). Where it pays from the lowest measured alpha, ``pays_from_lowest``."""
    d = speedup_df[(speedup_df["num_speculative_tokens"] == k)
                   & speedup_df["acceptance_alpha"].notna()]
    rows = []
    for (method, batch), g in d.groupby(["method", "batch_size"]):
        measured = sorted(g["acceptance_alpha"].unique())
        if len(measured) < 2:
            continue
        grid = np.arange(measured[0], measured[-1] + step / 2, step)
        reads = [read_at(g, method, float(a), k, int(batch)) for a in grid]

        def first(col):
            hit = [a for a, r in zip(grid, reads) if r is not None and r[col] >= 1.0]
            return float(hit[0]) if hit else np.nan

        a = first("speedup_cost")
        rows.append({"method": method, "runner": reads[0]["runner"], "batch_size": int(batch),
                     "break_even_alpha": a, "alpha_low": first("speedup_cost_ci_high"),
                     "alpha_high": first("speedup_cost_ci_low"),
                     "pays_from_lowest": bool(a == grid[0])})
    return pd.DataFrame(rows)


def within_lease(table: pd.DataFrame, metric: str = "step_ms") -> pd.DataFrame:
    """How far each panel cell moved within its lease, from the start panel to the end one
    (``move``: ``metric`` at the end over the start, less one), for the leases that have both
    panels, in time order (:func:`panel_table`'s); a lease with one panel has no such move."""
    cols = ["lease_id", "method", "batch_size", "cell_id", "start", "end", "move"]
    wide = table.pivot_table(index=["lease_id", "method", "batch_size", "cell_id"],
                             columns="panel_phase", values=metric, sort=False)
    if not {"start", "end"} <= set(wide.columns):
        return pd.DataFrame(columns=cols)
    wide = wide.dropna(subset=["start", "end"]).reset_index()
    return wide.assign(move=wide["end"] / wide["start"] - 1.0)[cols].reset_index(drop=True)


def method_spread(table: pd.DataFrame, metric: str = "step_ms") -> pd.Series:
    """Per method, the largest relative difference of ``metric`` between any two panel
    measurements of the same cell (leases and phases): how far a repeat of the method's
    figures may move, which no difference smaller than it may be read as a finding."""
    out = {}
    for method, g in table.groupby("method"):
        worst = 0.0
        for _, c in g.groupby("cell_id"):
            v = c[metric].to_numpy(dtype=float)
            if len(v) > 1:
                worst = max(worst, float(v.max() / v.min() - 1.0))
        out[method] = worst
    return pd.Series(out, name=f"{metric}_spread")


def best_read(speedup_df: pd.DataFrame, method: str, alpha: float, batch: int,
              k: int = 4, min_ks: int = 5, spread: float | None = None) -> dict | None:
    """:func:`read_at` at the best measured K where the method's K was swept at this batch
    (``swept`` True: at least ``min_ks`` K measured, :func:`specdec.surface.best_k`'s rule),
    else at ``k``; None where nothing brackets ``alpha``. ``overlaps``: the other K whose
    reading lies inside the best one's interval and ``within_spread`` the other K read in other
    leases within the method's panel ``spread`` of it (:func:`specdec.surface.ties`: the "best"
    K is a tie with them). ``leases``: the leases the readings come from."""
    mine = speedup_df[(speedup_df["method"] == method) & (speedup_df["batch_size"] == batch)]
    ks = sorted(int(x) for x in mine["num_speculative_tokens"].unique())
    reads = [r for kk in (ks if len(ks) >= min_ks else [k])
             if (r := read_at(speedup_df, method, alpha, kk, batch)) is not None]
    if not reads:
        return None
    best = max(reads, key=lambda x: x["speedup_cost"])
    overlaps, within_spread = ties(best["speedup_cost"], best["speedup_cost_ci_low"], best["leases"],
                                   [(r["num_speculative_tokens"], r["speedup_cost"], r["leases"])
                                    for r in reads if r is not best], spread)
    leases = sorted({lease for r in reads for lease in r["leases"]})
    return {**best, "swept": len(reads) > 1, "overlaps": overlaps,
            "within_spread": within_spread, "leases": leases}


ONE_HOST = "on one host (panel-normalised)"


def _answer_cell(r: dict) -> str:
    return (f"{r['speedup_cost']:.2f}× [{r['speedup_cost_ci_low']:.2f}, {r['speedup_cost_ci_high']:.2f}]"
            + (f" at K = {r['num_speculative_tokens']}" if r["swept"] else "")
            + (f" (K = {', '.join(map(str, r['overlaps']))} within the interval)"
               if r["overlaps"] else "")
            + (f" (K = {', '.join(map(str, r['within_spread']))} within the spread, in another lease)"
               if r["within_spread"] else ""))


def answer_table(speedup_df: pd.DataFrame, spread: pd.Series, published: pd.DataFrame,
                 k: int = 4, alpha: float = 0.8, batches: Sequence[int] = (1, 16, 64),
                 one_host_rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """What speculation buys on the H200, per method: the speedup read from cost at a set
    alpha and, where a published acceptance of the method's class exists, at the alpha it
    implies, for each batch size; with its interval and the method's panel spread. At the
    best measured K (named in the cell, with the K whose reading lies inside its interval, and
    the K read in another lease within the method's spread of it) where the method's K was
    swept at that batch, else at ``k``.

    ``one_host_rows`` (:func:`one_host`): for each method in them, a row more at the set
    alpha, read as on one host (:data:`ONE_HOST`): its cells normalised by the control panel
    of their lease, so that the best K is not decided by which host measured which K; its
    spread column says how far the panel moved within a lease, the uncertainty the reading
    keeps. A batch the panel does not measure has no such reading."""
    one = one_host_rows if one_host_rows is not None else speedup_df.iloc[0:0]
    rows = []
    for method in sorted(set(speedup_df["method"])):
        s = spread.get(method, np.nan)
        mine = one[one["method"] == method]
        # (label, alpha, read on one host): the one-host row reads ``mine`` with no spread
        alphas = [(f"set α = {alpha:g}", alpha, False)]
        if len(mine):
            alphas.append((f"set α = {alpha:g}, {ONE_HOST}", alpha, True))
        for _, p in published[published["method"] == method].iterrows():
            alphas.append((f"published ({p['dataset']}): α ≈ {p['implied_alpha']:.2f}",
                           float(p["implied_alpha"]), False))
        for label, a, on_one in alphas:
            row = {"method": method, "acceptance": label}
            for b in batches:
                r = (best_read(mine, method, a, b, k) if on_one else
                     best_read(speedup_df, method, a, b, k, spread=s))
                row[f"batch {b}"] = (_answer_cell(r) if r is not None else
                                     "no panel cell at this batch" if on_one else
                                     "not measured yet")
                if r is not None:
                    row["runner"] = r["runner"]
            row["panel spread"] = (f"within a lease: up to {mine['panel_drift'].max():.0%}"
                                   if on_one else
                                   f"±{s / 2:.1%}" if pd.notna(s) else
                                   "one panel" if method in spread.index else
                                   # a V1 method's step follows its vCPU's speed (lease 10):
                                   # unknown is not small
                                   "not in the panel (V1: moves with the host)"
                                   if row.get("runner") == "V1" else "not in the panel")
            rows.append(row)
    cols = ["method", "runner", "acceptance"] + [f"batch {b}" for b in batches] + ["panel spread"]
    return pd.DataFrame(rows).reindex(columns=cols)


def surface_workloads(prof) -> list[str]:
    """The workloads the surface is measured on: its control panel's (a campaign may measure
    other workloads for another purpose, e.g. the peer check's random prompts, and a curve
    over alpha must not mix them)."""
    name = prof.protocol.panel_experiment
    return list(prof.experiment(name).workloads) if name else [w.name for w in prof.workloads]


def users_speedups(profile: str, results_root: Path | None = None, panels: Path | None = None,
                   runs: pd.DataFrame | None = None,
                   panel_runs: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.Series] | None:
    """The :func:`speedups` of what users run in a protocol-2 campaign (the :data:`CONTROLS`,
    which pin a setting to show what it changes, are not an answer), from its stored
    rows and panels (or the ``runs`` and ``panel_runs`` a chapter has already read), with each
    method's panel spread (:func:`method_spread`); None where the campaign has no rows."""
    from .profiles import load_profile

    prof = load_profile(profile)
    runs = store.load_runs(profile, results_root) if runs is None else runs
    runs = runs[runs["workload"].isin(surface_workloads(prof))] if len(runs) else runs
    if runs.empty:
        return None
    # the controls (:data:`CONTROLS`) pin a setting to show what it changes; a pin a method
    # needs to run at all (EAGLE-3's dynamic K starts only on V1 in vLLM 0.26) is what users run
    runs = runs[~runs["method"].isin({m for pins in CONTROLS.values() for m in pins})]
    panel_runs = load_panels(profile, panels) if panel_runs is None else panel_runs
    panel_cells = cells(panel_runs) if len(panel_runs) else None
    spread = (method_spread(panel_table(panel_cells)) if panel_cells is not None
              else pd.Series(dtype=float))
    return speedups(cells(runs, drafted_k=list(dynamic_k_methods(prof))), panel_cells), spread


def as_surface(speedup_df: pd.DataFrame, baseline_cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`speedups` in the shape :func:`specdec.surface.table` gives a protocol-1 campaign,
    for the readers written for it (the surface figures, the K sweep, dynamic K, the analytical
    model, the published and the trained acceptance read off the cost): ``speedup`` (and its
    interval) is the speedup read from cost where there is one, else the realised one (a
    standard-sampler cell, a dynamic-K cell at no whole K), ``speedup_realised`` beside it,
    ``speedup_from`` says which; ``mean_acceptance_length`` is the tokens per step the speedup
    assumes, so that :func:`specdec.theory.fit` recovers the set alpha. Each speculative row
    keeps the step time of its own runner's baseline (``baseline_step_ms``); the
    ``baseline_cells`` (:func:`cells`), if given, are rows of their own, with a speedup of one."""
    cost = speedup_df["speedup_cost"].notna()
    length = speedup_df["expected_tokens_per_step"].where(cost, speedup_df["tokens_per_step"])
    spec = speedup_df.assign(
        speedup_realised=speedup_df["speedup"],
        speedup=speedup_df["speedup_cost"].where(cost, speedup_df["speedup"]),
        speedup_ci_low=speedup_df["speedup_cost_ci_low"].where(cost, speedup_df["speedup_ci_low"]),
        speedup_ci_high=speedup_df["speedup_cost_ci_high"].where(cost, speedup_df["speedup_ci_high"]),
        speedup_from=np.where(cost, "cost", "realised"), mean_acceptance_length=length,
        acceptance_rate=(length - 1) / speedup_df["k_drafted"].fillna(speedup_df["num_speculative_tokens"]))
    if baseline_cells is None or baseline_cells.empty:
        return spec
    base = baseline_cells.assign(speedup=1.0, speedup_ci_low=1.0, speedup_ci_high=1.0,
                                 tokens_per_step=1.0, mean_acceptance_length=1.0)
    return pd.concat([base, spec], ignore_index=True)


def surface_table(profile: str, results_root: Path | None = None) -> pd.DataFrame | None:
    """:func:`as_surface` of what users run in a protocol-2 campaign (:func:`users_speedups`),
    with the baselines they compare with, every stored cell; None where it has no rows."""
    from .profiles import load_profile

    prof = load_profile(profile)
    runs = store.load_runs(profile, results_root)
    users = users_speedups(profile, results_root, runs=runs)
    if users is None:
        return None
    runs = runs[runs["workload"].isin(surface_workloads(prof))]
    base = cells(runs[runs["method"].isin(set(users[0]["baseline_method"].dropna()))])
    out = as_surface(users[0], base[base["panel_phase"].isna()])
    compilation = runs.drop_duplicates("cell_id").set_index("cell_id")["compilation"]
    return out.assign(compilation=out["cell_id"].map(compilation),
                      speedup_status=np.where(out["speedup"].notna(), "ok", "no baseline"))


def standard_vs_synthetic(runs: pd.DataFrame, method: str = "draft-1layer",
                          experiment: str = "standard-vs-synthetic"
                          ) -> tuple[pd.DataFrame | None, str]:
    """``experiment``'s cells of ``method`` (:func:`cells`, one per lease): vLLM's standard
    rejection sampler beside the synthetic one at α = 1, paired per K, batch size and lease:
    a pair is read only from one lease (one host; the draft's V1 step moves between hosts by
    more than a sampler could). Returns the pairs and the sentence that reads them;
    ``(None, sentence)`` until a pair is stored, the sentence then claiming nothing."""
    mine = store.tagged(runs[runs["method"] == method], [experiment]) if len(runs) else runs
    c = cells(mine) if len(mine) else pd.DataFrame(columns=["acceptance_alpha"])
    std, syn = c[c["acceptance_alpha"].isna()], c[c["acceptance_alpha"] == 1.0]
    if std.empty or syn.empty:
        return None, (f"Not measured yet (experiment `{experiment}`, listed at the end of this "
                      f"chapter): until it is, whether the synthetic sampler itself costs or "
                      f"saves time beside vLLM's standard one is open.")
    key = ["num_speculative_tokens", "batch_size", "lease_id"]
    pairs = std.merge(syn, on=key, suffixes=("_std", "_syn")).dropna(subset=["lease_id"])
    if pairs.empty:
        return None, ("Both samplers are stored, but no pair was measured in one lease: the "
                      "draft's step moves between hosts by more than a sampler could, so they "
                      "are not read.")
    out = pd.DataFrame({"K": pairs["num_speculative_tokens"], "batch": pairs["batch_size"],
                        "lease": pairs["lease_id"],
                        "standard: tokens per step": pairs["tokens_per_step_std"],
                        "standard tok/s": pairs["tok_s_std"],
                        "synthetic α = 1 tok/s": pairs["tok_s_syn"]})
    out["synthetic / standard"] = out["synthetic α = 1 tok/s"] / out["standard tok/s"]
    ratio = out["synthetic / standard"]
    k = ", ".join(str(int(v)) for v in sorted(set(out["K"])))
    return out, (f"Measured in one lease each (K = {k}), synthetic throughput over standard "
                 f"throughput is {ratio.min():.3f} to {ratio.max():.3f} over {len(out)} "
                 f"batch sizes, while the standard sampler's steps yielded "
                 f"{out['standard: tokens per step'].min():.2f} tokens or more (K + 1 where "
                 f"everything is accepted, as at α = 1). The synthetic sampler draws one "
                 f"uniform number per draft token and skips the comparison with the target's "
                 f"choice; set-acceptance speedups are comparable with real ones to that "
                 f"precision.")


def answer(profile: str, published: pd.DataFrame, results_root: Path | None = None,
           panels: Path | None = None, runs: pd.DataFrame | None = None,
           panel_runs: pd.DataFrame | None = None, users: tuple | None = None,
           panel: pd.DataFrame | None = None, **table_args) -> pd.DataFrame | None:
    """:func:`answer_table` of a protocol-2 campaign (:func:`users_speedups`, or the ``users``
    a chapter has already computed) at the ``published`` acceptance
    (:func:`specdec.claims.published.table`), with the :func:`one_host` rows of the methods
    whose panels moved (read on ``panel``, the :func:`panel_table` a chapter already holds, else
    on the campaign's stored panels): the table the protocol chapter and the conclusions open
    with; None where the campaign has no rows."""
    from .profiles import load_profile

    users = users if users is not None else users_speedups(profile, results_root, panels, runs,
                                                           panel_runs)
    if users is None:
        return None
    # vLLM's dynamic K is a way to choose K, not a method of its own (the surface chapter)
    dynamic = set(dynamic_k_methods(load_profile(profile)))
    speedup_df = users[0][~users[0]["method"].isin(dynamic)]
    panel = panel if panel is not None else stored_panel(profile, panels, panel_runs)
    return answer_table(speedup_df, users[1], published,
                        one_host_rows=one_host(speedup_df, panel, users[1]), **table_args)


def host_evidence(runs: pd.DataFrame) -> dict:
    """What the GPU was doing while each runner measured: median power draw and the share of
    repeats at the highest SM clock seen, by runner and method, below batch 64; at batch 64
    the lowest SM clock and whether NVML reported the software power cap (reason bit 0x4)."""
    d = metrics.last_attempt(runs)
    d = d.assign(runner=[runner_label(m) for m in d["model_runner"]])
    top = d["gpu_sm_clock_mhz"].max()
    small = d[d["batch_size"] < 64]
    by = small.groupby(["method", "runner"])
    big = d[d["batch_size"] == 64]
    reasons = big["gpu_throttle_reasons"].dropna().astype(int)
    return {
        "power_w": by["gpu_power_w"].median().to_dict(),
        "at_top_clock": by["gpu_sm_clock_mhz"].apply(lambda v: float((v == top).mean())).to_dict(),
        "top_clock_mhz": float(top) if pd.notna(top) else np.nan,
        "b64_min_clock_mhz": float(big["gpu_sm_clock_min_mhz"].min()) if len(big) else np.nan,
        "b64_power_cap_share": float(((reasons & 0x4) > 0).mean()) if len(reasons) else np.nan,
        "b64_power_w": float(big["gpu_power_w"].max()) if len(big) else np.nan,
    }


def repeats(runs: pd.DataFrame, panel_runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every timed repeat of the campaign and its panels once (a panel cell measured in an
    engine for the profile is stored twice), with its runner and its step time relative to
    the median of its cell's attempt, and the engine's CPU seconds per second of the repeat
    (``engine_cpu_share``): the rows the host evidence reads."""
    d = pd.concat([runs, panel_runs], ignore_index=True) if panel_runs is not None else runs
    d = d[d["status"] == "ok"].drop_duplicates(["cell_id", "lease_id", "attempt", "repeat",
                                                "timestamp_utc"])
    cpu = d["engine_cpu_s"] if "engine_cpu_s" in d else pd.Series(np.nan, index=d.index)
    d = d.assign(runner=[runner_label(m) for m in d["model_runner"]],
                 step_ms=pd.to_numeric(d["step_ms"], errors="coerce"),
                 engine_cpu_share=pd.to_numeric(cpu, errors="coerce") / d["wall_s"])
    med = d.groupby(["cell_id", "lease_id", "panel_phase", "attempt"], dropna=False)["step_ms"]
    return d.assign(step_rel=d["step_ms"] / med.transform("median") - 1.0)


def host_bound(reps: pd.DataFrame) -> pd.DataFrame:
    """Is a method's step waiting on the host? Per method and runner, over the repeats that
    carry the host's stamps (lease 8 on): the median GPU utilisation, the spread of the step
    time within cells (median absolute deviation from the cell's median), and how the step
    time follows the GPU's idle share, the CPU probe beside the engine and the hypervisor's
    steal, and the engine's CPU seconds per second of the repeat (Pearson's r of the step
    time, relative to its cell, against each)."""
    d = reps.dropna(subset=["gpu_util_pct"])
    rows = []
    for (method, runner), g in d.groupby(["method", "runner"]):
        def r(col):
            if col not in g:
                return np.nan
            v = g[["step_rel", col]].dropna()
            if len(v) < 5 or v[col].std() == 0 or v["step_rel"].std() == 0:
                return np.nan
            return float(np.corrcoef(v["step_rel"], v[col])[0, 1])
        rows.append({"method": method, "runner": runner, "repeats": len(g),
                     "gpu_util_pct": stats.median(g["gpu_util_pct"]),
                     "gpu_util_min_pct": float(g["gpu_util_pct"].min()),
                     "step_spread": stats.median(g["step_rel"].abs()),
                     "step_range": float(g["step_rel"].max() - g["step_rel"].min()),
                     "r_gpu_util": r("gpu_util_pct"), "r_engine_cpu": r("engine_cpu_share"),
                     "r_probe": r("host_probe_us"), "r_engine_probe": r("engine_vcpu_probe_us"),
                     "r_steal": r("host_steal_pct"),
                     "steal_max_pct": float(g["host_steal_pct"].max()),
                     "engine_cpu_min": float(g["engine_cpu_share"].min()),
                     "engine_cpu_max": float(g["engine_cpu_share"].max()),
                     "busy_pct": stats.median(g["host_busy_pct"])})
    return pd.DataFrame(rows)


def slow_share(reps: pd.DataFrame, survey: pd.DataFrame) -> pd.DataFrame:
    """The repeats that carry the CPU probe on the engine's own vCPU (lease 10 on: every second
    sample, its mean over the repeat), each with its ``slow_share``: where that mean lies
    between the two speeds its lease's vCPU survey found (:func:`two_speeds`; 0 all fast, 1 all
    slow, clipped)."""
    if "engine_vcpu_probe_us" not in reps:
        return reps.iloc[0:0].assign(slow_share=[])
    d = reps.dropna(subset=["engine_vcpu_probe_us", "step_rel"])
    out = []
    for lease, g in d.groupby("lease_id"):
        two = two_speeds(survey[survey["lease_id"] == lease])
        if not two or not np.isfinite(two["slow_us"]):
            continue
        share = (g["engine_vcpu_probe_us"] - two["fast_us"]) / (two["slow_us"] - two["fast_us"])
        out.append(g.assign(slow_share=share.clip(0.0, 1.0)))
    return pd.concat(out) if out else d.iloc[0:0].assign(slow_share=[])


def vcpu_speed_fit(shared: pd.DataFrame) -> pd.DataFrame:
    """How a method's step time follows the speed of its engine's vCPU: per method and
    runner, over :func:`slow_share`'s repeats, a least-squares line of the step time relative
    to its cell's median against the repeat's slow share. ``slow_over_fast``: how much longer
    a step is on an all-slow vCPU than on an all-fast one, from the line's two ends
    (``rel_at_fast``, ``rel_at_slow``); Pearson's r; the share's range over the repeats."""
    cols = ["method", "runner", "repeats", "slow_share_min", "slow_share_max", "r",
            "rel_at_fast", "rel_at_slow", "slow_over_fast"]
    rows = []
    for (method, runner), g in shared.groupby(["method", "runner"]):
        if len(g) < 5 or g["slow_share"].std() == 0:
            continue
        slope, icpt = np.polyfit(g["slow_share"], g["step_rel"], 1)
        rows.append({"method": method, "runner": runner, "repeats": len(g),
                     "slow_share_min": float(g["slow_share"].min()),
                     "slow_share_max": float(g["slow_share"].max()),
                     "r": float(np.corrcoef(g["slow_share"], g["step_rel"])[0, 1]),
                     "rel_at_fast": float(icpt), "rel_at_slow": float(icpt + slope),
                     "slow_over_fast": float((1 + icpt + slope) / (1 + icpt))})
    return pd.DataFrame(rows, columns=cols)


def panel_probe_repeats(reps: pd.DataFrame) -> pd.DataFrame:
    """The control panels' repeats (:func:`repeats`: the baseline, and K = 4 at alpha 0.8)
    that carry the probe on the engine's own vCPU (lease 10 on)."""
    if "engine_vcpu_probe_us" not in reps:
        return reps.iloc[0:0]
    d = reps[reps["panel_phase"].notna()
             & ((reps["num_speculative_tokens"] == 0)
                | ((reps["num_speculative_tokens"] == 4) & (reps["acceptance_alpha"] == 0.8)))]
    return d.dropna(subset=["engine_vcpu_probe_us", "step_ms"])


def probe_across_leases(reps: pd.DataFrame) -> pd.DataFrame:
    """Does the engine's vCPU explain why a panel cell moves from lease to lease? Per method,
    runner and batch size, over the control panels' repeats (K = 4 and alpha 0.8, or the
    baseline) that carry the probe on the engine's own vCPU (lease 10 on): the least-squares
    line of the step time (ms) against that probe (ms; ``intercept_ms``, ``ms_per_probe_ms``),
    Pearson's r, and the step's coefficient of variation over every lease's repeats before
    (``cv``) and after (``cv_per_probe``) dividing each repeat's step by its probe, how much of
    the spread between leases the vCPU's speed accounts for. Unlike :func:`vcpu_speed_fit`
    (each repeat against its own cell's median), this compares absolute steps across leases."""
    cols = ["method", "runner", "batch_size", "repeats", "leases", "r", "intercept_ms",
            "ms_per_probe_ms", "cv", "cv_per_probe"]
    d = panel_probe_repeats(reps)
    rows = []
    if d.empty:
        return pd.DataFrame(rows, columns=cols)
    for (method, runner, b), g in d.groupby(["method", "runner", "batch_size"]):
        if len(g) < 5 or g["engine_vcpu_probe_us"].std() == 0:
            continue
        x, y = g["engine_vcpu_probe_us"].to_numpy(float) / 1000.0, g["step_ms"].to_numpy(float)
        slope, icpt = np.polyfit(x, y, 1)
        rows.append({"method": method, "runner": runner, "batch_size": int(b), "repeats": len(g),
                     "leases": int(g["lease_id"].nunique()), "r": float(np.corrcoef(x, y)[0, 1]),
                     "intercept_ms": float(icpt), "ms_per_probe_ms": float(slope),
                     "cv": float(y.std(ddof=1) / y.mean()),
                     "cv_per_probe": float((y / x).std(ddof=1) / (y / x).mean())})
    return pd.DataFrame(rows, columns=cols)


#: The controls of ``h200-surface-v2`` (issue 19), each beside the method as users run it:
#: EAGLE-3 on V2 (its default), pinned to V1, and on V1 with the in-process engine core; the
#: 1B draft (V1 by default) in-process, with vLLM's asynchronous scheduling on, and kept on
#: two vCPUs.
CONTROLS = {"eagle3": ["eagle3-v1", "eagle3-v1-inproc"],
            "draft-1b": ["draft-1b-inproc", "draft-1b-async", "draft-1b-pinned"]}


def panel_speedups(panel_cells: pd.DataFrame, baselines: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`speedups` of the control panels: each panel (lease, phase) paired within itself,
    its speculative cells beside its own baseline; ``panel_phase`` kept on the rows.

    The panel measures the baseline on the default runner only. A panel cell of a method on
    another runner (the 1B draft, V1) takes its baseline from ``baselines`` (the campaign's
    :func:`cells`; only its K = 0 cells are read), by :func:`speedups`' rule: the panel's own
    lease where it measured that baseline, else the first of the campaign's, the one the
    campaign's own cells of that method are read against. Without it such a cell has no
    speedup."""
    base = pd.DataFrame()
    if baselines is not None and len(baselines):
        base = baselines[baselines["num_speculative_tokens"] == 0]
        base = base[base["panel_phase"].isna()] if "panel_phase" in base else base
    out = []
    for (lease, phase), g in panel_cells.groupby(["lease_id", "panel_phase"]):
        s = speedups(pd.concat([g, base], ignore_index=True).assign(panel_phase=None))
        if len(s):
            out.append(s.assign(panel_phase=phase))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def panel_range(panel_sp: pd.DataFrame, method: str) -> pd.DataFrame:
    """Per batch size, the lowest and highest speedup read from cost that the control panels
    (:func:`panel_speedups` rows) measured for ``method``'s panel cell, over how many panels,
    leases and GPUs (``gpu_uuid``; a lease on an unrecorded GPU counts as one): what the same
    configuration gave from host to host."""
    d = panel_sp[(panel_sp["method"] == method)].dropna(subset=["speedup_cost"])
    rows = []
    for b, g in d.groupby("batch_size"):
        gpus = g["gpu_uuid"].fillna(g["lease_id"]) if "gpu_uuid" in g else g["lease_id"]
        rows.append({"batch_size": int(b), "low": float(g["speedup_cost"].min()),
                     "high": float(g["speedup_cost"].max()), "panels": len(g),
                     "leases": int(g["lease_id"].nunique()), "gpus": int(gpus.nunique())})
    return pd.DataFrame(rows, columns=["batch_size", "low", "high", "panels", "leases", "gpus"])


def sweep_own_panel(sweep: pd.DataFrame, panel_sp: pd.DataFrame | None
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A K sweep's lines (method, batch, set alpha; :func:`as_surface` rows) with the lease most
    of each line was measured in (``home_lease``) and ``other_lease`` True on a cell taken from
    another lease (K = 4 is the surface's); and, for each such cell, the same configuration as
    the control panel of the line's home lease measured it (:func:`panel_speedups` rows, the
    cell's own reading beside them as ``other_speedup``): the like-for-like of that cell."""
    line = ["method", "batch_size", "acceptance_alpha"]
    home = sweep.groupby(line)["lease_id"].agg(lambda v: v.mode().iloc[0]).rename("home_lease")
    lines = sweep.join(home, on=line)
    lines = lines.assign(other_lease=lines["lease_id"] != lines["home_lease"])
    if panel_sp is None or panel_sp.empty:
        return lines, pd.DataFrame(columns=line + ["num_speculative_tokens", "speedup_cost",
                                                   "other_speedup"])
    other = lines[lines["other_lease"]][line + ["num_speculative_tokens", "home_lease", "speedup"]]
    own = panel_sp.merge(other.rename(columns={"speedup": "other_speedup"}),
                         left_on=line + ["num_speculative_tokens", "lease_id"],
                         right_on=line + ["num_speculative_tokens", "home_lease"])
    if "panel_phase" in own:  # start, then end
        own = (own.assign(_p=own["panel_phase"].map({"start": 0, "end": 1}))
               .sort_values(line + ["_p"], kind="stable").drop(columns="_p").reset_index(drop=True))
    return lines, own


def moved_methods(spread: pd.Series) -> list[str]:
    """The methods whose control-panel cells moved between measurements by more than
    :data:`PANEL_WORST` (:func:`method_spread`): rows of theirs from two leases may not be read
    side by side unless normalised by the panel (:func:`one_host`)."""
    return sorted(m for m, s in spread.items() if pd.notna(s) and s > PANEL_WORST)


def stored_panel(profile: str, panels: Path | None = None,
                 panel_runs: pd.DataFrame | None = None) -> pd.DataFrame | None:
    """:func:`panel_table` of every stored control panel of ``profile`` (or of the
    ``panel_runs`` a chapter has already read); None where there is none."""
    runs = load_panels(profile, panels) if panel_runs is None else panel_runs
    return panel_table(cells(runs)) if len(runs) else None


def panel_spread(profile: str, panels: Path | None = None) -> pd.Series:
    """Each method's :func:`method_spread` over every control panel of ``profile`` (empty
    where none is stored): what a chapter needs to say how far a method moves between leases."""
    table = stored_panel(profile, panels)
    return method_spread(table) if table is not None else pd.Series(dtype=float)


def moved_spread(spread: pd.Series | None) -> dict[str, float]:
    """The spread of each of the :func:`moved_methods` only: what a figure shades and a
    sentence names (:func:`host_caveat`)."""
    return {m: float(spread[m]) for m in moved_methods(spread)} if spread is not None else {}


def host_caveat(methods: Sequence[str], spread: pd.Series | None) -> str:
    """The sentence a chapter adds where it reads ``methods`` from rows of several leases: each
    of them whose control-panel cells moved beyond :data:`PANEL_WORST` (:func:`moved_methods`)
    with its spread (± half the largest move, as the answer table gives it); "" where none
    did. A verdict of such a method nearer no speculation than its spread is not a finding."""
    every = moved_spread(spread)
    moved = [m for m in dict.fromkeys(methods) if m in every]
    if not moved:
        return ""
    each = ", ".join(f"{m} ±{every[m] / 2:.1%}" for m in moved)
    return (f"Between leases the control panel moved {each} (the protocol chapter says why): a "
            f"figure of {'theirs' if len(moved) > 1 else 'its'} nearer no speculation than that, "
            f"or a verdict resting on one, is not a finding.")


def lease_panel_steps(panel: pd.DataFrame) -> pd.Series:
    """``panel_ms`` by (lease, method, batch size): the geometric mean of a lease's start and
    end panel step times of the cell, the lease's host as the panel saw it."""
    return (panel.dropna(subset=["step_ms"]).groupby(["lease_id", "method", "batch_size"])["step_ms"]
            .agg(lambda v: float(np.exp(np.log(v.to_numpy(dtype=float)).mean()))).rename("panel_ms"))


def panel_normalised(rows: pd.DataFrame, panel: pd.DataFrame) -> pd.DataFrame:
    """Cells of several leases read as on one host: each cell of a method in the control panel,
    at a batch size the panel measures, with its step time (and interval) over the host factor
    of its lease and its speedups (and intervals) times it; ``host_factor`` = the lease's panel
    step time for the method at that batch (the geometric mean of its start and end panels) /
    the median of that panel cell over every lease. A cell's step is so read at the median
    panel host, on the assumption that a host moves the method's step alike at every K and set
    alpha of that batch (the panel measures K = 4, alpha 0.8); ``panel_drift`` (the lease's
    largest / smallest panel step - 1) says how far the host moved within the lease. Cells
    whose lease has no panel cell of the method at their batch are left out. The issue's rule:
    rows of leases whose panels disagree are normalised by the panel and labelled so.

    ``rows``: :func:`speedups` or :func:`as_surface` rows (``lease_id``, ``step_ms`` and the
    speedup columns); ``panel``: :func:`panel_table`."""
    key = ["method", "batch_size"]
    steps = panel.dropna(subset=["step_ms"])
    ref = steps.groupby(key)["step_ms"].median().rename("panel_median_ms")
    lease = pd.concat([lease_panel_steps(panel), steps.groupby(["lease_id"] + key)["step_ms"].agg(
        lambda v: float(v.max() / v.min() - 1.0)).rename("panel_drift")], axis=1)
    out = rows.merge(lease.reset_index(), on=["lease_id"] + key).join(ref, on=key)
    out["host_factor"] = out["panel_ms"] / out["panel_median_ms"]
    for c in ("step_ms", "step_ms_ci_low", "step_ms_ci_high"):
        if c in out:
            out[c] = out[c] / out["host_factor"]
    for c in out.columns:
        if c.startswith("speedup") and pd.api.types.is_numeric_dtype(out[c]):
            out[c] = out[c] * out["host_factor"]
    return out.reset_index(drop=True)


def one_host(rows: pd.DataFrame, panel: pd.DataFrame | None, spread: pd.Series | None
             ) -> pd.DataFrame:
    """The rows of the :func:`moved_methods` read as on one host (:func:`panel_normalised`):
    what the K sweep's one-host figure and the answer table's "on one host" rows read. Empty
    where no method moved or no panel was measured."""
    moved = moved_methods(spread) if spread is not None else []
    if panel is None or panel.empty or not moved or rows.empty:
        return rows.iloc[0:0]
    return panel_normalised(rows[rows["method"].isin(moved)], panel)


def controls(speedup_df: pd.DataFrame, k: int = 4, batches: Sequence[int] = (1, 16),
             panel: pd.DataFrame | None = None) -> pd.DataFrame:
    """What each pinned setting changes: each control beside the default, at the K, set
    acceptance and batch sizes the controls measured, each paired with the baseline of its own
    runner and core; the speedup from cost and the step time with its CV, and the lease.
    ``panel`` (:func:`panel_speedups`): the default's panel cells of the controls' leases join
    as the like-for-like of the same lease (a host-bound default moves between leases)."""
    order = [m for default, pins in CONTROLS.items() for m in (default, *pins)]
    pins = [m for p in CONTROLS.values() for m in p]
    d = speedup_df.assign(panel_phase=None) if "panel_phase" not in speedup_df else speedup_df
    if panel is not None and len(panel):
        leases = set(d[d["method"].isin(pins)]["lease_id"].dropna())
        same = panel[panel["method"].isin(CONTROLS) & panel["lease_id"].isin(leases)]
        d = pd.concat([d, same], ignore_index=True)
    d = d[d["method"].isin(order) & (d["num_speculative_tokens"] == k) & d["batch_size"].isin(batches)]
    keys = d[d["method"].isin(pins)][["acceptance_alpha", "batch_size"]].drop_duplicates()
    d = d.merge(keys, on=["acceptance_alpha", "batch_size"])
    cols = ["method", "runner", "engine_core", "batch_size", "acceptance_alpha", "baseline_method",
            "step_ms", "step_ms_cv", "speedup_cost", "speedup_cost_ci_low", "speedup_cost_ci_high",
            "lease_id", "panel_phase"]
    return (d.assign(_o=d["method"].map({m: i for i, m in enumerate(order)}),
                     _p=d["panel_phase"].map({"start": 0, "end": 1}).fillna(-1))
            .sort_values(["acceptance_alpha", "batch_size", "_o", "lease_id", "_p"])[cols]
            .reset_index(drop=True))


def runner_step_ratio(runs: pd.DataFrame, k: int = 4, alpha: float = 0.8,
                      batches: Sequence[int] = (1, 16)) -> pd.Series:
    """The runner control alone, per batch: EAGLE-3's step pinned to V1 over its step on V2
    (vLLM's default), both at ``k`` and set ``alpha`` with full CUDA graphs, each the median
    over the leases that measured it; empty where either side is not measured."""
    default, pin = "eagle3", CONTROLS["eagle3"][0]
    c = cells(runs[runs["method"].isin([default, pin])]) if len(runs) else pd.DataFrame()
    if c.empty:
        return pd.Series(dtype=float)
    c = c[(c["num_speculative_tokens"] == k) & (c["acceptance_alpha"] == alpha)
          & c["batch_size"].isin(batches) & c["panel_phase"].isna()]
    step = c.groupby(["batch_size", "method"])["step_ms"].median().unstack()
    if not {default, pin} <= set(step):
        return pd.Series(dtype=float)
    return (step[pin] / step[default]).dropna()


def controls_section(speedup_df: pd.DataFrame | None, cell_df: pd.DataFrame | None,
                     panel_cells: pd.DataFrame | None, panel: pd.DataFrame | None, k: int = 4
                     ) -> tuple[pd.DataFrame | None, pd.DataFrame, dict[str, str]]:
    """The protocol chapter's runner and engine-core controls at set alpha 0.8, batch 1 and 16:
    the :func:`controls` table (the 1B draft's panel cells of the controls' leases beside it,
    read against the campaign's V1 baseline; None where nothing is measured), the 1B draft's
    panel steps in the leases other than its in-process control's (:func:`lease_steps`), and
    the sentences, by glue name: EAGLE-3 on V2 against V1 (``ctrl_runner``), on V1 in process
    (``ctrl_core``), the median step CV per runner (``ctrl_cv``), and the 1B draft in process
    (``ctrl_draft``), in the other leases (``ctrl_draft_other``), with asynchronous scheduling
    (``ctrl_async``) and kept on two vCPUs (``ctrl_pinned``), each beside its lease's panel."""
    if speedup_df is None or not len(speedup_df):
        return None, pd.DataFrame(), dict.fromkeys(
            ("ctrl_runner", "ctrl_core", "ctrl_cv", "ctrl_draft", "ctrl_draft_other", "ctrl_async",
             "ctrl_pinned"), "not measured yet")
    panel_sp = panel_speedups(panel_cells, cell_df) if panel_cells is not None else None
    ctrl = controls(speedup_df, k=k, panel=panel_sp)
    alpha, batches = 0.8, (1, 16)

    def sp(method, b):
        v = ctrl[(ctrl["method"] == method) & (ctrl["batch_size"] == b)
                 & (ctrl["acceptance_alpha"] == alpha) & ctrl["panel_phase"].isna()]
        return float(v["speedup_cost"].iloc[0]) if len(v) else float("nan")

    # the 1B draft's controls of one lease beside its panel cells of the same lease
    def step_of(method, b, phase=None):
        v = ctrl[(ctrl["method"] == method) & (ctrl["batch_size"] == b) & (ctrl["acceptance_alpha"] == alpha)]
        v = v[v["panel_phase"] == phase] if phase else v[v["panel_phase"].isna()]
        if method == "draft-1b" and phase:
            v = v[v["lease_id"].isin(set(ctrl.loc[ctrl["method"] == "draft-1b-async", "lease_id"]))]
        return (float(v["step_ms"].iloc[0]), float(v["step_ms_cv"].iloc[0])) if len(v) else (float("nan"),) * 2

    def ms(x):
        return "not measured" if np.isnan(x[0]) else f"{x[0]:.1f} ms (CV {pct(x[1])})"

    def times(v):
        return "not measured" if np.isnan(v) else f"{v:.2f}×"

    cv = ctrl.groupby(["runner"])["step_ms_cv"].median()
    d1 = ctrl[(ctrl["method"] == "draft-1b-inproc") & (ctrl["acceptance_alpha"] == alpha)]
    lease = d1["lease_id"].iloc[0] if len(d1) else None
    same = panel[(panel["method"] == "draft-1b") & (panel["lease_id"] == lease)] if panel is not None else None
    other, other_range = (lease_steps(panel, "draft-1b", exclude_lease=lease)
                          if panel is not None else (pd.DataFrame(), "not measured"))
    return ctrl, other, {
        "ctrl_runner": ", ".join(f"{times(sp('eagle3', b))} on V2 against {times(sp('eagle3-v1', b))} "
                                 f"on V1 at batch {b}" for b in batches),
        "ctrl_core": ", ".join(f"{times(sp('eagle3-v1-inproc', b))} at batch {b}" for b in batches),
        "ctrl_cv": f"{pct(cv.get('V2', float('nan')), 1)} on V2 and {pct(cv.get('V1', float('nan')), 1)} on V1",
        "ctrl_async": "; ".join(
            f"batch {b}: {ms(step_of('draft-1b-async', b))} with it, against "
            f"{ms(step_of('draft-1b', b, 'start'))} and {ms(step_of('draft-1b', b, 'end'))} without "
            f"it in the panels of the same lease" for b in batches),
        "ctrl_pinned": "; ".join(f"batch {b}: {ms(step_of('draft-1b-pinned', b))}" for b in batches),
        "ctrl_draft": "; ".join(
            f"batch {b}: {d1.loc[d1['batch_size'] == b, 'step_ms'].iloc[0]:.1f} ms in process, "
            + ", ".join(f"{r.step_ms:.1f} ms" for r in same[same["batch_size"] == b].itertuples())
            + " with vLLM's core (the panel's start and end)"
            for b in sorted(d1["batch_size"])) if len(d1) and same is not None else "not measured yet",
        "ctrl_draft_other": other_range}


#: The protocol-2 method that measured each old method under each setting, back to vLLM's
#: defaults one at a time (the 1B draft runs on V1 whatever the user does).
OLD_SETTINGS = {"baseline": {"V1, in-process": "baseline-v1-inproc", "V1, default core": "baseline-v1",
                             "V2, default core": "baseline"},
                "eagle3": {"V1, in-process": "eagle3-v1-inproc", "V1, default core": "eagle3-v1",
                           "V2, default core": "eagle3"},
                "draft-1b": {"V1, in-process": "draft-1b-inproc", "V1, default core": "draft-1b"}}
#: The configurations of the superseded rows measured again under protocol 2: (old method,
#: {setting: protocol-2 method}, K, set alpha, batch).
OLD_CONFIGS = [(m, OLD_SETTINGS[m], k, a, b) for m, k, a, b in
               [("baseline", 0, None, 1), ("baseline", 0, None, 16), ("eagle3", 4, 0.8, 1),
                ("eagle3", 4, 0.8, 16), ("draft-1b", 4, 0.8, 1), ("draft-1b", 4, 0.8, 16)]]


def old_rows_explained(old_summary: pd.DataFrame, new_cells: pd.DataFrame,
                       configs: Sequence[tuple[str, dict[str, str], int, float | None, int]] = OLD_CONFIGS
                       ) -> pd.DataFrame:
    """The superseded figure of a configuration (``h200-surface``: V1 pinned, in-process core,
    128 output tokens) beside the same configuration measured under protocol 2 one setting at
    a time back to vLLM's defaults: with the old harness's runner and core (long cells only),
    then vLLM's engine core, then the default runner. ``configs``: (old method, {setting:
    protocol-2 method}, K, set alpha, batch) with settings "V1, in-process", "V1, default core",
    "V2, default core"."""
    new = new_cells[new_cells["panel_phase"].isna()]
    rows = []
    for old_method, steps, k, alpha, batch in configs:
        def pick(df, method, col):
            m = (df["method"] == method) & (df["num_speculative_tokens"] == k) & (df["batch_size"] == batch)
            m &= df["acceptance_alpha"].isna() if alpha is None else (df["acceptance_alpha"] == alpha)
            v = df[m & (df["workload"] == "repeat")][col]
            return float(v.iloc[0]) if len(v) else np.nan
        row = {"method": old_method, "K": k, "α": alpha, "batch": batch,
               "old rows": pick(old_summary, old_method, "tok_s_median")}
        for setting, method in steps.items():
            row[setting] = pick(new, method, "tok_s")
        rows.append(row)
    return pd.DataFrame(rows)


def old_rows_section(old_profile: str, runs: pd.DataFrame, cell_df: pd.DataFrame | None,
                     results_root: Path | None = None) -> tuple[pd.DataFrame | None, dict[str, str]]:
    """The protocol chapter's comparison with the superseded rows of ``old_profile``: the
    :func:`old_rows_explained` table of :data:`OLD_CONFIGS` (None where either side has no
    rows) and its sentences, by glue name: the old cells' length and repeats (``old_tokens``,
    ``old_repeats``), the baseline's largest move (``base_move``), EAGLE-3's throughput ratio
    at each step back to vLLM's defaults (``e3_length``, ``e3_core``, ``e3_runner``, all of
    them ``e3_all``), the power drawn on each runner (``power_v1``, ``power_v2``) and the
    clocks and power cap at batch 64 (:func:`host_evidence` of ``runs``)."""
    from .profiles import load_profile

    old_prof = load_profile(old_profile)
    old_runs = store.load_runs(old_profile, results_root)
    texts = {"old_tokens": str(old_prof.sampling.max_tokens), "old_repeats": str(old_prof.repeats)}
    if cell_df is None or not len(old_runs):
        return None, texts | dict.fromkeys(
            ("base_move", "e3_length", "e3_core", "e3_runner", "e3_all", "power_v1", "power_v2",
             "top_clock", "b64_clock", "b64_cap", "b64_power"), "not measured yet")
    explained = old_rows_explained(metrics.summarize(old_runs), cell_df)
    base = explained[explained["method"] == "baseline"]
    moves = base[["V1, in-process", "V1, default core", "V2, default core"]].div(base["old rows"], axis=0) - 1
    e3 = explained[explained["method"] == "eagle3"]

    def ratio(a, b):
        return span(e3[a] / e3[b], ".2f", "×")

    ev = host_evidence(runs)
    v1 = [v for (m, r), v in ev["power_w"].items() if r == "V1" and not m.startswith("baseline")]
    v2 = [v for (m, r), v in ev["power_w"].items() if r == "V2" and m != "baseline"]
    return explained, texts | {
        "base_move": pct(moves.abs().max().max(), 1),
        "e3_length": ratio("V1, in-process", "old rows"),
        "e3_core": ratio("V1, default core", "V1, in-process"),
        "e3_runner": ratio("V2, default core", "V1, default core"),
        "e3_all": ratio("V2, default core", "old rows"),
        "power_v1": f"{min(v1):.0f} W" if v1 else "—",
        "power_v2": f"{min(v2):.0f} W" if v2 else "—",
        "top_clock": f"{ev['top_clock_mhz']:.0f} MHz",
        "b64_clock": f"{ev['b64_min_clock_mhz']:.0f} MHz",
        "b64_cap": pct(ev["b64_power_cap_share"]),
        "b64_power": f"{ev['b64_power_w']:.0f} W"}


# --------------------------------------------------------------------------- #
# CLI: specdec panel
# --------------------------------------------------------------------------- #
def _cmd_panel(args) -> int:
    from .profiles import load_profile

    load_profile(args.profile)  # an unknown profile: ProfileError naming the known ones
    rows = load_panels(args.profile, args.panels_root)
    table = panel_table(cells(rows)) if len(rows) else rows
    if table.empty:
        print(f"{args.profile}: no control panel stored (specdec run {args.profile} --panel start|end)")
        return 1
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table[["lease_id", "panel_phase", "method", "batch_size", "runner", "tok_s",
                     "tok_s_cv", "step_ms", "step_ms_cv", "gpu_sm_clock_mhz"]].round(4).to_string(index=False))
        print()
        print("drift of the step time from the first panel (median and worst cell):")
        print(panel_drift(table).to_string(index=False))
        print()
        print("move of each panel cell's step time within its lease (end over start):")
        inside = within_lease(table)
        print(inside.round(4).to_string(index=False) if len(inside) else "  no lease with both panels")
        print()
        print("largest move of a panel cell's step time, per method:")
        print(method_spread(table).to_string())
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("panel", help="the control panel of a profile's leases: drift within "
                                            "and between leases (issue 19)")
    p.add_argument("profile")
    p.add_argument("--panels-root", type=Path, default=None, help="instead of data/panels")
    p.set_defaults(func=_cmd_panel)


# --------------------------------------------------------------------------- #
# The protocol chapter's summaries (a table a reader can take in, its sentence)
# --------------------------------------------------------------------------- #
def cost_vs_realised_summary(cvr: pd.DataFrame) -> pd.DataFrame:
    """:func:`cost_vs_realised` per method and runner: its cells, and the median and worst
    absolute deviation of the realised speedup from the one read from cost, and of the realised
    tokens per step from the expected (the synthetic draw)."""
    d = cvr.assign(gap=cvr["realised_over_cost"].abs(), draw=cvr["draw_deviation"].abs())
    out = d.groupby(["method", "runner"]).agg(
        cells=("gap", "size"), gap_median=("gap", "median"), gap_worst=("gap", "max"),
        draw_median=("draw", "median"), draw_worst=("draw", "max")).reset_index()
    return out.rename(columns={
        "gap_median": "realised vs cost: median |Δ|", "gap_worst": "realised vs cost: worst |Δ|",
        "draw_median": "tokens per step vs expected: median |Δ|",
        "draw_worst": "tokens per step vs expected: worst |Δ|"})


def lease_steps(panel: pd.DataFrame, method: str, exclude_lease: str | None = None
                ) -> tuple[pd.DataFrame, str]:
    """``method``'s panel step time (ms) per lease, a column per batch size and phase, leaving
    out ``exclude_lease``; and its range in a phrase ("X to Y ms over N panel cells of M
    leases"), ``"not measured"`` where there is none."""
    d = panel[(panel["method"] == method)]
    if exclude_lease is not None:
        d = d[d["lease_id"] != exclude_lease]
    if d.empty:
        return pd.DataFrame(), "not measured"
    view = d.pivot_table(index="lease_id", columns=["batch_size", "panel_phase"], values="step_ms",
                         sort=False)
    view.columns = [f"batch {b}, {ph}" for b, ph in view.columns]
    view.index.name = "lease"
    return view, (f"{d['step_ms'].min():.1f} to {d['step_ms'].max():.1f} ms per step over {len(d)} "
                  f"panel cells of {d['lease_id'].nunique()} other leases")


def panel_steps_and_core(reps: pd.DataFrame, method: str = "eagle3", batch: int = 16
                         ) -> tuple[pd.DataFrame, str]:
    """``method``'s panel cells at ``batch``, per lease and phase: the median step time and the
    median CPU seconds per second of its engine core (:func:`repeats`); and the phrase that
    spans them, from the fastest panel to the slowest."""
    cols = ["step_ms", "engine_cpu_share"]
    p = (reps[(reps["method"] == method) & (reps["batch_size"] == batch) & reps["panel_phase"].notna()]
         .dropna(subset=["engine_cpu_share"]).groupby(["lease_id", "panel_phase"], sort=False)[cols]
         .median())
    if p.empty:
        return p, "not measured yet"
    fast, slow = p.loc[p["step_ms"].idxmin()], p.loc[p["step_ms"].idxmax()]
    return p.reset_index().rename(columns={"lease_id": "lease", "panel_phase": "panel",
                                           "step_ms": "step (ms)",
                                           "engine_cpu_share": "engine core CPU s/s"}), (
        f"from {fast['step_ms']:.2f} ms at {fast['engine_cpu_share']:.2f} CPU seconds per second "
        f"to {slow['step_ms']:.2f} ms at {slow['engine_cpu_share']:.2f}, over {len(p)} panels")


def panel_sentences(panel: pd.DataFrame | None, panel_runs: pd.DataFrame) -> dict[str, str]:
    """The control panel's sentences, by glue name (``panel``: :func:`panel_table`, None where
    no panel is stored; ``panel_runs``: its rows, :func:`load_panels`): the methods whose step
    stayed within :data:`PANEL_MEDIAN` between panels and those that moved beyond
    :data:`PANEL_WORST` (``panel_sentence``), the leases (``n_leases``) and the GPUs by UUID with
    their leases in time order (``n_hosts``), the plain target's step between GPUs per batch
    (``base_host_gap``), EAGLE-3's move at batch 16 within each lease (``e3_16_moves``), each
    method's largest move per batch (``lease_sentence``) and the hypervisor's highest steal
    (``steal_sentence``)."""
    if panel is None:
        return {"panel_sentence": "No control panel is measured yet.", "n_leases": "0",
                **dict.fromkeys(("n_hosts", "base_host_gap", "e3_16_moves"), "not measured yet"),
                "lease_sentence": "no panel yet", "steal_sentence": ""}
    spread = method_spread(panel)
    stable = [m for m, v in spread.items() if v <= PANEL_MEDIAN]
    moving = moved_methods(spread)
    # the panel table is in time order: each GPU with its leases, by first use
    hosts = panel.dropna(subset=["gpu_uuid"]).groupby("gpu_uuid", sort=False)["lease_id"].agg(
        lambda v: list(dict.fromkeys(v)))
    # the plain target's step between the GPUs (hosts): lease medians, per batch size
    base = panel[panel["method"] == "baseline"].groupby(["batch_size", "lease_id"])["step_ms"].median()
    gap = base.groupby(level="batch_size").agg(lambda v: v.max() / v.min() - 1)
    e16 = panel[(panel["method"] == "eagle3") & (panel["batch_size"] == 16)]
    inside = within_lease(e16)  # leases with both panels, in time order
    one = [lease for lease in dict.fromkeys(e16["lease_id"]) if lease not in set(inside["lease_id"])]
    # every panel of every lease: the largest move of each cell, by method and batch size
    moves = panel.groupby(["method", "batch_size"])["step_ms"].agg(lambda v: v.max() / v.min() - 1)
    # the hypervisor's steal over each panel (rows that carry it: lease 8 on)
    steal = panel_runs.groupby(["lease_id", "panel_phase"])["host_steal_pct"].max().dropna()
    if len(steal):
        top = steal.idxmax()
        steal_sentence = (
            f"The hypervisor's steal reached {steal.max():.2f} % of the machine's CPU time in the "
            f"{top[1]} panel of {top[0]}"
            + (f", against at most {steal.drop(top).max():.2f} % in the other panels that record it."
               if len(steal) > 1 else ", the only panel that records it."))
    else:
        steal_sentence = "No panel records the hypervisor's steal yet."
    return {
        "panel_sentence": (
            f"Across every panel, the step time of {', '.join(f'`{m}`' for m in stable) or 'no method'} "
            f"stayed within {pct(PANEL_MEDIAN)} between the panels; "
            f"{', '.join(f'`{m}`' for m in moving) or 'no method'} moved by more than "
            f"{pct(PANEL_WORST)}."),
        "n_leases": str(panel["lease_id"].nunique()),
        "n_hosts": (f"{len(hosts)} GPUs named by their UUID ("
                    + "; ".join(f"`{u[:12]}…` in {', '.join(ls)}" for u, ls in hosts.items()) + ")"),
        "base_host_gap": " and ".join(f"{pct(v, 1)} at batch {b}" for b, v in gap.items()),
        "e3_16_moves": (", ".join(f"{pct(abs(r['move']), 1)} in {r['lease_id']}"
                                  for _, r in inside.iterrows())
                        + (f" ({', '.join(one)}: one panel only)" if one else "")),
        "lease_sentence": "; ".join(
            f"`{m}` " + ", ".join(f"{pct(v, 1)} at batch {b}" for (_, b), v in g.items())
            for m, g in moves.groupby(level="method")),
        "steal_sentence": steal_sentence}


def survey_sentences(survey: pd.DataFrame) -> dict[str, str]:
    """The vCPU survey's two speeds (:func:`two_speeds`, ``survey``: :func:`load_surveys`), by
    glue name: the fast and slow probe time (``sv_fast``, ``sv_slow``), their ratio
    (``sv_ratio``), the share of slow runs (``sv_share``), the vCPUs seen at both speeds
    (``sv_both``) and how many surveys in how many leases (``sv_surveys``)."""
    two = two_speeds(survey)
    if not two:
        return dict.fromkeys(("sv_fast", "sv_slow", "sv_ratio", "sv_share", "sv_both", "sv_surveys"),
                             "not measured yet")
    return {"sv_fast": f"{two['fast_us'] / 1000:.2f} ms",
            "sv_slow": f"{two['slow_us'] / 1000:.2f} ms",
            "sv_ratio": f"{two['slow_us'] / two['fast_us']:.1f}",
            "sv_share": pct(two["slow_share"]),
            "sv_both": f"{two['vcpus_both']} of {two['vcpus']} vCPUs (each lease's counted apart)",
            "sv_surveys": f"{survey.groupby(['lease_id', 'panel_phase']).ngroups} surveys "
                          f"in {survey['lease_id'].nunique()} leases"}


def vcpu_sentences(shared: pd.DataFrame, fit: pd.DataFrame, probe_fit: pd.DataFrame,
                   reps: pd.DataFrame) -> dict[str, str]:
    """Does the step follow the engine's own vCPU? By glue name: repeat by repeat
    (``shared``: :func:`slow_share`, ``fit``: :func:`vcpu_speed_fit`), the leases that carry
    the probe (``vf_leases``), how much longer the 1B draft's and Medusa's steps are on a slow
    vCPU (``vf_1b``, ``vf_medusa``) and the V2 paths' largest such move (``vf_v2``); between
    leases (``probe_fit``: :func:`probe_across_leases` of ``reps``), the 1B draft's r, line and
    CV per probe (``pl_1b``, ``pl_line``, ``pl_cv``) and how far each other line climbs over
    the probe's middle 80 % relative to its step there (``pl_v2``)."""
    vf = fit.set_index("method") if len(fit) else None

    def vf_text(method):
        if vf is None or method not in vf.index:
            return "not measured yet"
        f = vf.loc[method]
        return (f"{f['slow_over_fast']:.2f} times as long on a slow vCPU as on a fast one "
                f"(Pearson's r = {f['r']:.2f} over {f['repeats']} repeats)")

    v2 = fit[fit["runner"] == "V2"] if len(fit) else fit
    texts = {"vf_leases": ", ".join(sorted(shared["lease_id"].unique())) if len(shared) else "none yet",
             "vf_1b": vf_text("draft-1b"), "vf_medusa": vf_text("medusa"),
             "vf_v2": (f"{100 * (v2['slow_over_fast'] - 1).abs().max():.1f} %" if len(v2)
                       else "not measured yet")}
    pl = probe_fit
    one_b = pl[pl["method"] == "draft-1b"].sort_values("batch_size") if len(pl) else pl
    if len(one_b):
        texts |= {
            "pl_1b": " and ".join(f"r = {r.r:.2f} at batch {r.batch_size}" for r in one_b.itertuples())
            + f" over {int(one_b['repeats'].sum())} repeats in {int(one_b['leases'].max())} leases",
            "pl_line": "; ".join(f"{r.intercept_ms:.1f} ms + {r.ms_per_probe_ms:.1f} ms per ms of "
                                 f"probe at batch {r.batch_size}" for r in one_b.itertuples()),
            "pl_cv": "; ".join(f"{pct(r.cv_per_probe, 1)} instead of {pct(r.cv, 1)} at batch "
                               f"{r.batch_size}" for r in one_b.itertuples())}
    else:
        texts |= dict.fromkeys(("pl_1b", "pl_line", "pl_cv"), "not measured yet")
    flat = pl[pl["method"] != "draft-1b"] if len(pl) else pl
    # how much each other line climbs over the probe's middle 80 %, relative to its step there
    probe = reps["engine_vcpu_probe_us"].dropna() / 1000.0 if "engine_vcpu_probe_us" in reps else None
    if len(flat) and probe is not None and len(probe):
        lo, hi, mid = probe.quantile(0.1), probe.quantile(0.9), probe.median()
        texts["pl_v2"] = "; ".join(
            f"{r.method} at batch {r.batch_size}: r = {r.r:.2f}, the line moving "
            f"{(round(r.ms_per_probe_ms * (hi - lo) / (r.intercept_ms + r.ms_per_probe_ms * mid), 3) or 0.0):+.1%}"
            for r in flat.itertuples()) + " over the middle 80 % of the probe's range"
    else:
        texts["pl_v2"] = "not measured yet"
    return texts


def host_bound_sentences(hb: pd.DataFrame, reps: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """What the host stamps say (``hb``: :func:`host_bound` of ``reps``, :func:`repeats`):
    EAGLE-3's panel cells at batch 16 with its engine core's CPU time
    (:func:`panel_steps_and_core`, empty where nothing is stamped) and the sentences, by glue
    name: the lowest GPU utilisation of the V2 paths (``hb_util_v2``) and that of the V1
    speculative paths (``hb_util_v1``), how their step follows it (``hb_r_util``), the highest
    steal (``hb_steal``) and machine load (``hb_busy``), EAGLE-3 at batch 16 against its engine
    core's CPU time (``hb_e3_r``, ``hb_e3_cpu``, ``hb_e3_panels``), the V1 drafts' step against
    the measuring process's probe per lease (``hb_r_probe_leases``) and that probe's range
    (``hb_probe``)."""
    if not len(hb):
        return pd.DataFrame(), dict.fromkeys(
            ("hb_util_v2", "hb_util_v1", "hb_r_util", "hb_r_probe_leases", "hb_steal", "hb_busy",
             "hb_probe", "hb_e3_r", "hb_e3_cpu", "hb_e3_panels"), "not measured yet")
    v1 = hb[(hb["runner"] == "V1") & ~hb["method"].str.startswith("baseline")]
    v2 = hb[(hb["runner"] == "V2") | hb["method"].str.startswith("baseline")]
    # EAGLE-3 at batch 16 alone: does its step follow its engine core's CPU time?
    e3 = host_bound(reps[reps["batch_size"] == 16]).set_index("method").loc["eagle3"]
    p16, p16_range = panel_steps_and_core(reps, "eagle3", 16)
    # the probe in the measuring process (another vCPU) against the V1 drafts' steps, per lease
    rp = []
    for lease, g in sorted(reps.groupby("lease_id"), key=lambda x: x[1]["timestamp_utc"].min()):
        h = host_bound(g)
        if h.empty:  # a lease before the host's stamps
            continue
        h = h[(h["runner"] == "V1") & ~h["method"].str.startswith("baseline")]["r_probe"].dropna()
        if len(h):
            rp.append(f"{span(h, '.2f')} in {lease}")
    probe = reps["host_probe_us"].dropna() / 1000.0
    return p16, {
        "hb_util_v2": f"{v2['gpu_util_min_pct'].min():.0f} %",
        "hb_util_v1": (f"a median {v1['gpu_util_pct'].min():.0f}–{v1['gpu_util_pct'].max():.1f} % "
                       f"(as little as {v1['gpu_util_min_pct'].min():.0f} % in a repeat)"),
        "hb_r_util": f"{v1['r_gpu_util'].min():.2f} to {v1['r_gpu_util'].max():.2f}",
        "hb_steal": f"{v1['steal_max_pct'].max():.2g} %",
        "hb_busy": f"{hb['busy_pct'].max():.1f} %",
        "hb_e3_r": f"{e3['r_engine_cpu']:.2f} over {e3['repeats']} repeats",
        "hb_e3_cpu": f"{e3['engine_cpu_min']:.2f} to {e3['engine_cpu_max']:.2f}",
        "hb_e3_panels": p16_range,
        "hb_r_probe_leases": "; ".join(rp) or "not measured yet",
        "hb_probe": f"{probe.quantile(0.1):.2f} to {probe.quantile(0.9):.2f} ms"}
