"""Metrics computed from stored rows: one row per cell, speedups, losslessness.

Input is what :func:`specdec.store.load_runs` / :func:`specdec.store.load_tokens`
return (schemas in :mod:`specdec.store`). Nothing here measures anything: every
number is computed from stored engine counters and timings.

Definitions (all from vLLM's ``spec_decode`` counters, summed over a cell's
successful repeats):

- acceptance rate = accepted tokens / draft tokens (fraction, 0..1);
- mean acceptance length = 1 + accepted tokens / drafts (tokens emitted per
  target forward pass, bonus token included; 1 means nothing accepted);
- per-position acceptance rate = accepted at draft position i / drafts.

Throughput is ``output_tokens_per_s`` (generated tokens per wall-clock second
of the whole batched ``generate`` call), summarised by its median over repeats
with the interval and guard of :mod:`specdec.stats`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import stats
from .profiles import BASELINE

#: Columns that identify one cell (one stored runs file).
CELL_KEYS = ["profile", "cell_id", "config_hash", "method", "draft", "num_speculative_tokens",
             "batch_size", "workload", "temperature", "max_tokens", "compilation",
             "acceptance_alpha"]
#: A speculative cell is compared with the baseline cell that agrees on these.
#: Greedy outputs and speed legitimately differ across compilation modes, so
#: ``compilation`` is part of the key.
BASELINE_KEYS = ["profile", "batch_size", "workload", "temperature", "compilation"]
#: Provenance carried into summaries (distinct values joined with ", ").
PROVENANCE_SUMMARY = ["vllm_version", "device_name", "git_commit"]

SUMMARY_COLUMNS = CELL_KEYS + [
    "experiment_tags", "n_repeats", "n_failed", "complete", "unstable",
    "tok_s_median", "tok_s_ci_low", "tok_s_ci_high", "ci_method", "tok_s_mad", "tok_s_cv",
    "tpot_ms_median", "wall_s_median", "num_output_tokens",
    "spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens",
    "acceptance_rate", "mean_acceptance_length", "accepted_per_pos_rate",
    "peak_memory_bytes", "kv_cache_bytes", "engine_start_s",
    "model_weight_bytes", "draft_weight_bytes", "kv_cache_tokens", "model_runner",
    "cudagraph_mode", "engine_core", "draft_sha256",
] + PROVENANCE_SUMMARY + ["timestamp_utc"]

SPEEDUP_COLUMNS = ["baseline_cell_id", "baseline_tok_s", "baseline_tok_s_ci_low",
                   "baseline_tok_s_ci_high", "baseline_unstable", "speedup", "speedup_ci_low",
                   "speedup_ci_high", "speedup_status"]


def _require(df: pd.DataFrame, columns, where: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{where}: input lacks column(s) {', '.join(missing)}")


def _groups(df: pd.DataFrame, keys):
    """groupby over identity keys, keeping null keys (``draft`` is null for the baseline)."""
    return df.groupby(keys, dropna=False, sort=True)


def _joined(values: pd.Series) -> str | None:
    distinct = sorted({str(v) for v in values if pd.notna(v)})
    return ", ".join(distinct) if distinct else None


def _total(values: pd.Series) -> float:
    """Sum of a counter over repeats; NaN where no repeat recorded it (e.g. the baseline)."""
    v = pd.to_numeric(values, errors="coerce")
    return float(v.sum()) if v.notna().any() else float("nan")


def _per_position_sum(lists: pd.Series) -> np.ndarray | None:
    arrays = [np.asarray(x, dtype=float) for x in lists
              if x is not None and not (np.isscalar(x) and pd.isna(x)) and len(x)]
    if not arrays:
        return None
    out = np.zeros(max(len(a) for a in arrays))
    for a in arrays:
        out[: len(a)] += a
    return out


def last_attempt(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok rows of each cell's last attempt: under measuring protocol 2 a cell whose repeats
    varied too much is measured again and its rows keep both attempts; the second replaces
    the first. Rows without the column (protocol 1) count as attempt 0. A control panel's rows
    are a cell per lease and phase."""
    ok = runs[runs["status"] == "ok"].copy()
    if ok.empty:
        return ok
    attempt = ok["attempt"].fillna(0) if "attempt" in ok else pd.Series(0, index=ok.index)
    ok["attempt"] = attempt.astype(int)
    keys = [c for c in ("cell_id", "lease_id", "panel_phase") if c in ok]
    last = ok.groupby(keys, dropna=False)["attempt"].transform("max")
    return ok[ok["attempt"] == last]


def summarize(runs_df: pd.DataFrame, cv_threshold: float = stats.CV_THRESHOLD) -> pd.DataFrame:
    """One row per cell from run rows; only ``status == "ok"`` repeats count.

    Input: run rows (``store.RUNS_SCHEMA``), any number of profiles. Cells with
    no successful repeat are left out (see :func:`failures`).

    Output columns (:data:`SUMMARY_COLUMNS`): the identity :data:`CELL_KEYS`;
    ``experiment_tags`` (union); ``n_repeats`` (ok repeats), ``n_failed``;
    ``complete`` (``n_repeats >= stats.MIN_REPEATS``; incomplete cells get no
    speedup); ``unstable`` (throughput CV > ``cv_threshold``); ``tok_s_median``,
    ``tok_s_ci_low``/``high`` (interval of the median, output tokens/s, method in
    ``ci_method``), ``tok_s_mad`` (tokens/s), ``tok_s_cv`` (fraction);
    ``tpot_ms_median`` (ms per output token of one request), ``wall_s_median`` (s),
    ``num_output_tokens`` (median per call); the summed counters
    ``spec_num_drafts``, ``spec_num_draft_tokens``, ``spec_num_accepted_tokens``;
    ``acceptance_rate``, ``mean_acceptance_length`` (tokens per target step),
    ``accepted_per_pos_rate`` (list, one rate per draft position; None without
    drafts); ``peak_memory_bytes`` and ``kv_cache_bytes`` (max over repeats),
    ``engine_start_s``; provenance ``vllm_version``, ``device_name``,
    ``git_commit`` (distinct values joined) and the latest ``timestamp_utc``.
    Acceptance columns are NaN where no draft was proposed (the baseline).
    """
    _require(runs_df, CELL_KEYS + ["status", "output_tokens_per_s", "tpot_ms",
                                   "spec_num_drafts", "spec_num_draft_tokens",
                                   "spec_num_accepted_tokens", "spec_accepted_per_pos"],
             "summarize")
    failed_counts = (runs_df[runs_df["status"] != "ok"].groupby("cell_id").size()
                     if len(runs_df) else pd.Series(dtype=int))
    ok = last_attempt(runs_df)  # a cell measured again counts with its last attempt only
    rows = []
    for key, g in _groups(ok, CELL_KEYS):
        row = dict(zip(CELL_KEYS, key))
        d = stats.describe(g["output_tokens_per_s"], cv_threshold=cv_threshold)
        drafts = _total(g["spec_num_drafts"])
        draft_tokens = _total(g["spec_num_draft_tokens"])
        accepted = _total(g["spec_num_accepted_tokens"])
        per_pos = _per_position_sum(g["spec_accepted_per_pos"])
        has_drafts = np.isfinite(drafts) and drafts > 0
        tags = sorted({t for ts in g["experiment_tags"] if ts is not None for t in ts}) \
            if "experiment_tags" in g else []
        row.update(
            experiment_tags=tags,
            n_repeats=d["n"],
            n_failed=int(failed_counts.get(row["cell_id"], 0)),
            complete=d["complete"],
            unstable=d["unstable"],
            tok_s_median=d["median"],
            tok_s_ci_low=d["ci_low"],
            tok_s_ci_high=d["ci_high"],
            ci_method=d["ci_method"],
            tok_s_mad=d["mad"],
            tok_s_cv=d["cv"],
            tpot_ms_median=stats.median(g["tpot_ms"]),
            wall_s_median=stats.median(g["wall_s"]) if "wall_s" in g else float("nan"),
            num_output_tokens=stats.median(g["num_output_tokens"])
            if "num_output_tokens" in g else float("nan"),
            spec_num_drafts=drafts,
            spec_num_draft_tokens=draft_tokens,
            spec_num_accepted_tokens=accepted,
            acceptance_rate=accepted / draft_tokens
            if np.isfinite(draft_tokens) and draft_tokens > 0 else float("nan"),
            mean_acceptance_length=1 + accepted / drafts if has_drafts else float("nan"),
            accepted_per_pos_rate=list(per_pos / drafts)
            if has_drafts and per_pos is not None else None,
        )
        for col, fn in (("peak_memory_bytes", "max"), ("kv_cache_bytes", "max"),
                        ("engine_start_s", "median"), ("model_weight_bytes", "max"),
                        ("draft_weight_bytes", "max"), ("kv_cache_tokens", "max")):
            v = pd.to_numeric(g[col], errors="coerce") if col in g else pd.Series(dtype=float)
            row[col] = float(getattr(v, fn)()) if v.notna().any() else float("nan")
        for col in ("model_runner", "cudagraph_mode", "engine_core", "draft_sha256"):
            row[col] = _joined(g[col]) if col in g else None
        for col in PROVENANCE_SUMMARY:
            row[col] = _joined(g[col]) if col in g else None
        row["timestamp_utc"] = g["timestamp_utc"].max() if "timestamp_utc" in g else None
        rows.append(row)
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def failures(runs_df: pd.DataFrame) -> pd.DataFrame:
    """Cells with at least one failed repeat, one row each.

    Columns: :data:`CELL_KEYS`, ``n_failed``, ``n_ok`` (repeats that did
    succeed), ``error`` (the first distinct error text) and ``n_distinct_errors``.
    """
    _require(runs_df, CELL_KEYS + ["status", "error"], "failures")
    columns = CELL_KEYS + ["n_failed", "n_ok", "error", "n_distinct_errors"]
    rows = []
    for key, g in _groups(runs_df, CELL_KEYS):
        bad = g[g["status"] != "ok"]
        if bad.empty:
            continue
        errors = [e for e in dict.fromkeys(bad["error"]) if pd.notna(e)]
        rows.append({**dict(zip(CELL_KEYS, key)), "n_failed": len(bad),
                     "n_ok": int((g["status"] == "ok").sum()),
                     "error": errors[0] if errors else None,
                     "n_distinct_errors": len(errors)})
    return pd.DataFrame(rows, columns=columns)


def _baseline_index(df: pd.DataFrame, where: str) -> dict[tuple, pd.Series]:
    """Baseline rows keyed by :data:`BASELINE_KEYS`; two baselines for one key is an error."""
    out: dict[tuple, pd.Series] = {}
    for _, r in df[df["method"] == BASELINE].iterrows():
        key = tuple(r[k] for k in BASELINE_KEYS)
        if key in out:
            raise ValueError(
                f"{where}: two baseline cells for {dict(zip(BASELINE_KEYS, key))}: "
                f"{out[key]['cell_id']} and {r['cell_id']} (stale results from an older "
                f"configuration? keep one)")
        out[key] = r
    return out


#: A speedup status: the cell's whole speedup interval lies above its tokens per target step.
ABOVE_TOKENS_PER_STEP = "above tokens per step"
#: A speedup status: another cell's speedup over the same baseline is above its tokens per step.
BASELINE_SUSPECT = "baseline suspect"


def with_speedup(summary_df: pd.DataFrame) -> pd.DataFrame:
    """Add each cell's speedup over its baseline (same :data:`BASELINE_KEYS`).

    Input: :func:`summarize` output. Output: the same rows plus
    :data:`SPEEDUP_COLUMNS`: ``baseline_cell_id``, ``baseline_tok_s`` (+ CI,
    tokens/s), ``baseline_unstable``, ``speedup`` = tok_s_median /
    baseline_tok_s (ratio of medians, dimensionless), ``speedup_ci_low`` =
    cell ci_low / baseline ci_high and ``speedup_ci_high`` = cell ci_high /
    baseline ci_low.

    The speedup interval is interval arithmetic on the two medians' intervals:
    whenever both intervals cover their true medians, the ratio interval covers
    the true ratio, so its coverage is at least that of both together (with the
    min–max interval at n=3, 0.75² ≈ 56 % if independent; wider intervals give
    more). It is conservative in width, not a calibrated 95 % interval.

    ``speedup_status``: ``"ok"``; ``"baseline"`` (the baseline row itself,
    speedup 1); ``"incomplete"`` (the cell has < ``stats.MIN_REPEATS`` ok
    repeats); ``"no baseline"``; ``"baseline incomplete"``; ``"above tokens per
    step"`` (:data:`ABOVE_TOKENS_PER_STEP`: the whole speedup interval lies above
    the cell's tokens per target step, ``mean_acceptance_length``, so a
    speculative step would have cost less than a plain one: the two engines ran
    at different host speeds, and the ratio measures the host, not speculation);
    ``"baseline suspect"`` (:data:`BASELINE_SUSPECT`: another cell's speedup over
    the same baseline is above its tokens per step, so the baseline itself ran slow
    and every ratio over it is inflated). Speedup is NaN for every status but ``ok``
    and ``baseline``. Unstable cells keep their speedup (flagged by ``unstable`` /
    ``baseline_unstable``).
    """
    _require(summary_df, SUMMARY_COLUMNS, "with_speedup")
    df = summary_df.copy()
    base = _baseline_index(df, "with_speedup")
    extra = {c: [] for c in SPEEDUP_COLUMNS}
    nan = float("nan")
    for _, r in df.iterrows():
        b = base.get(tuple(r[k] for k in BASELINE_KEYS))
        vals = dict.fromkeys(SPEEDUP_COLUMNS, nan)
        vals.update(baseline_cell_id=None, baseline_unstable=None)
        if b is not None:
            vals.update(baseline_cell_id=b["cell_id"], baseline_tok_s=b["tok_s_median"],
                        baseline_tok_s_ci_low=b["tok_s_ci_low"],
                        baseline_tok_s_ci_high=b["tok_s_ci_high"],
                        baseline_unstable=bool(b["unstable"]))
        if r["method"] == BASELINE:
            status = "baseline" if r["complete"] else "incomplete"
        elif not r["complete"]:
            status = "incomplete"
        elif b is None:
            status = "no baseline"
        elif not b["complete"]:
            status = "baseline incomplete"
        else:
            status = "ok"
        vals["speedup_status"] = status
        if status == "baseline":
            vals["speedup"] = 1.0
        elif status == "ok" and r["tok_s_ci_low"] / b["tok_s_ci_high"] > (
                r["mean_acceptance_length"] if pd.notna(r["mean_acceptance_length"]) else np.inf):
            vals["speedup_status"] = ABOVE_TOKENS_PER_STEP
        elif status == "ok":
            vals["speedup"] = r["tok_s_median"] / b["tok_s_median"]
            vals["speedup_ci_low"] = r["tok_s_ci_low"] / b["tok_s_ci_high"]
            vals["speedup_ci_high"] = r["tok_s_ci_high"] / b["tok_s_ci_low"]
        for c in SPEEDUP_COLUMNS:
            extra[c].append(vals[c])
    for c in SPEEDUP_COLUMNS:
        df[c] = pd.Series(extra[c], index=df.index, dtype=object if c in (
            "baseline_cell_id", "baseline_unstable", "speedup_status") else float)
    # a baseline that one cell outran beyond its tokens per step ran slow: no speedup over it
    slow = set(df.loc[df["speedup_status"] == ABOVE_TOKENS_PER_STEP, "baseline_cell_id"])
    over_slow = (df["speedup_status"] == "ok") & df["baseline_cell_id"].isin(slow)
    df.loc[over_slow, "speedup_status"] = BASELINE_SUSPECT
    df.loc[over_slow, ["speedup", "speedup_ci_low", "speedup_ci_high"]] = np.nan
    return df


#: A realised per-position rate further than this many binomial standard errors (plus
#: ``ACCEPTANCE_SLACK``) from the set one flags the cell.
ACCEPTANCE_Z = 4.0
ACCEPTANCE_SLACK = 0.01
ACCEPTANCE_CHECK_COLUMNS = ["set_acceptance_rate", "realised_acceptance_rate",
                            "acceptance_max_z", "acceptance_follows_set"]


def acceptance_check(summary_df: pd.DataFrame) -> pd.DataFrame:
    """Does each set-acceptance cell realise the acceptance it was set to?

    Input: :func:`summarize` output (or anything with its columns). For a cell with
    ``acceptance_alpha`` = a and K draft positions, position i (0-based) should be
    accepted in a fraction a**(i+1) of drafts (the rates the worker set). Output: the
    same rows plus ``set_acceptance_rate`` (mean over positions of a**(i+1), the
    expected accepted / draft tokens), ``realised_acceptance_rate`` (the counters'
    acceptance rate), ``acceptance_max_z`` (largest |realised - set| / binomial standard
    error over positions; inf where a rate set to 0 or 1 was missed) and
    ``acceptance_follows_set`` (True / False; None for natural-acceptance cells and cells
    without drafts). Where every draft had the same length L < K (vLLM's dynamic K at a
    fixed batch), the first L positions are checked and the set rate is their mean. A False means the rates did not take effect as set and the cell's
    speed is not the speed at that alpha.
    """
    _require(summary_df, ["acceptance_alpha", "num_speculative_tokens", "spec_num_drafts",
                          "accepted_per_pos_rate", "acceptance_rate"], "acceptance_check")
    df = summary_df.copy()
    cols = {c: [] for c in ACCEPTANCE_CHECK_COLUMNS}
    for _, r in df.iterrows():
        a, k, n = r["acceptance_alpha"], int(r["num_speculative_tokens"]), r["spec_num_drafts"]
        rates = r["accepted_per_pos_rate"]
        if a is None or pd.isna(a) or k <= 0:
            vals = [float("nan"), r["acceptance_rate"], float("nan"), None]
        elif rates is None or not (np.isfinite(n) and n > 0):
            vals = [float(np.mean([a ** (i + 1) for i in range(k)])), float("nan"),
                    float("nan"), None]
        else:
            # vLLM's dynamic K drafts fewer than the grid's K at larger batches; at a fixed
            # batch every draft then has the same, smaller length: check the positions drafted.
            used = r.get("spec_num_draft_tokens", float("nan")) / n
            if np.isfinite(used) and abs(used - round(used)) < 0.01 and 0 < round(used) < k:
                k = int(round(used))
            zs = []
            for i in range(k):
                want = a ** (i + 1)
                got = rates[i] if i < len(rates) else 0.0
                se = np.sqrt(want * (1 - want) / n)
                gap = abs(got - want)
                zs.append(0.0 if gap <= ACCEPTANCE_SLACK else (gap - ACCEPTANCE_SLACK) / se
                          if se > 0 else float("inf"))
            z = float(max(zs))
            vals = [float(np.mean([a ** (i + 1) for i in range(k)])), r["acceptance_rate"],
                    z, bool(z <= ACCEPTANCE_Z)]
        for c, v in zip(ACCEPTANCE_CHECK_COLUMNS, vals):
            cols[c].append(v)
    for c in ACCEPTANCE_CHECK_COLUMNS:
        df[c] = pd.Series(cols[c], index=df.index,
                          dtype=object if c == "acceptance_follows_set" else float)
    return df


def crossover_batch(speedup_df: pd.DataFrame) -> pd.DataFrame:
    """Batch size beyond which speculation stops paying, per speculative configuration.

    Input: :func:`with_speedup` output. Rows with ``speedup_status == "ok"`` are
    grouped by profile, method, K, workload, temperature and compilation and
    ordered by batch size. Output columns: those keys, ``batch_sizes`` (list of
    measured sizes), ``last_paying_batch`` (largest batch size before the first
    speedup ≤ 1; NaN if even the smallest does not pay), ``crossover_batch``
    (first batch size with speedup ≤ 1; NaN if speculation pays at every
    measured size), ``crossover_ci_below_1`` (the speedup interval at the
    crossover lies wholly below 1), ``speedups`` (by batch) and ``recovers`` (a
    larger batch pays again after the crossover: no single batch where it stops).
    Computed from measurements; no interpolation.
    """
    keys = ["profile", "method", "num_speculative_tokens", "workload", "temperature",
            "compilation", "acceptance_alpha"]
    columns = keys + ["batch_sizes", "last_paying_batch", "crossover_batch",
                      "crossover_ci_below_1", "speedups", "recovers"]
    _require(speedup_df, keys + ["batch_size", "speedup", "speedup_ci_high", "speedup_status"],
             "crossover_batch")
    ok = speedup_df[(speedup_df["speedup_status"] == "ok") & (speedup_df["method"] != BASELINE)]
    rows = []
    for key, g in _groups(ok, keys):
        g = g.sort_values("batch_size")
        losing = g[g["speedup"] <= 1]
        first = losing.iloc[0] if len(losing) else None
        paying = g[g["batch_size"] < first["batch_size"]] if first is not None else g
        rows.append({**dict(zip(keys, key)),
                     "batch_sizes": [int(b) for b in g["batch_size"]],
                     "last_paying_batch": float(paying["batch_size"].max())
                     if len(paying) else float("nan"),
                     "crossover_batch": float(first["batch_size"]) if first is not None
                     else float("nan"),
                     "crossover_ci_below_1": bool(first["speedup_ci_high"] < 1)
                     if first is not None else None,
                     "speedups": [float(v) for v in g["speedup"]],
                     "recovers": bool(first is not None and (
                         g.loc[g["batch_size"] > first["batch_size"], "speedup"] > 1).any())})
    return pd.DataFrame(rows, columns=columns)


#: The groups within which :func:`best_k_cells` picks the fastest K.
BEST_K_GROUP = ["profile", "method", "workload", "batch_size"]


def best_k_cells(speedup_df: pd.DataFrame, by=BEST_K_GROUP) -> pd.DataFrame:
    """The speculative cell with the highest measured speedup in each group of ``by``.

    Input: :func:`with_speedup` output; cells without a speedup are left out. Its
    ``num_speculative_tokens`` is the group's measured best K. No interpolation: the best
    of the K values measured.
    """
    by = list(by)
    _require(speedup_df, by + ["num_speculative_tokens", "speedup"], "best_k_cells")
    spec = speedup_df[(speedup_df["method"] != BASELINE) & speedup_df["speedup"].notna()]
    if spec.empty:
        return spec.copy()
    return spec.loc[spec.groupby(by)["speedup"].idxmax()]


# --------------------------------------------------------------------------- #
# Losslessness: greedy speculative outputs against the baseline's
# --------------------------------------------------------------------------- #
TOKEN_KEYS = ["profile", "cell_id", "method", "num_speculative_tokens", "batch_size",
              "workload", "temperature", "compilation"]


def _first_divergence(a, b) -> int | None:
    """Index of the first differing token (or the shorter length); None if identical."""
    a, b = np.asarray(a), np.asarray(b)
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    if diff.size:
        return int(diff[0])
    return None if len(a) == len(b) else n


def compare_requests(tokens_df: pd.DataFrame) -> pd.DataFrame:
    """Per request: is a speculative cell's greedy output identical to the baseline's?

    Input: token rows (``store.TOKENS_SCHEMA``). Only temperature 0 is compared
    (sampled outputs are not expected to match). A request is matched with the
    baseline request of the same :data:`BASELINE_KEYS`, ``prompt_id`` and
    ``request_index``. Output columns: :data:`TOKEN_KEYS`, ``prompt_id``,
    ``request_index``, ``baseline_cell_id``, ``output_len`` and
    ``baseline_len`` (tokens), ``identical`` (bool; None where the baseline has
    no such request) and ``first_divergence`` (0-based token index of the first
    difference, or the shorter length if one output is a prefix of the other;
    ``<NA>`` when identical or unmatched; nullable Int64 column).
    """
    _require(tokens_df, TOKEN_KEYS + ["prompt_id", "request_index", "output_token_ids"],
             "compare_requests")
    columns = TOKEN_KEYS + ["prompt_id", "request_index", "baseline_cell_id", "output_len",
                            "baseline_len", "identical", "first_divergence"]
    greedy = tokens_df[tokens_df["temperature"] == 0]
    if "acceptance_alpha" in greedy:
        # Set acceptance accepts draft tokens the target would not emit: not lossless by design.
        greedy = greedy[greedy["acceptance_alpha"].isna()]
    base_cells = _baseline_index(greedy.drop_duplicates("cell_id"), "compare_requests")
    base_out = {(r["cell_id"], r["prompt_id"], int(r["request_index"])): r["output_token_ids"]
                for _, r in greedy[greedy["method"] == BASELINE].iterrows()}
    rows = []
    for _, r in greedy[greedy["method"] != BASELINE].iterrows():
        b = base_cells.get(tuple(r[k] for k in BASELINE_KEYS))
        base_id = b["cell_id"] if b is not None else None
        ref = base_out.get((base_id, r["prompt_id"], int(r["request_index"])))
        div = _first_divergence(r["output_token_ids"], ref) if ref is not None else None
        rows.append({**{k: r[k] for k in TOKEN_KEYS}, "prompt_id": r["prompt_id"],
                     "request_index": int(r["request_index"]), "baseline_cell_id": base_id,
                     "output_len": len(r["output_token_ids"]),
                     "baseline_len": len(ref) if ref is not None else None,
                     "identical": (div is None) if ref is not None else None,
                     "first_divergence": div})
    out = pd.DataFrame(rows, columns=columns)
    out["first_divergence"] = out["first_divergence"].astype("Int64")
    return out


def losslessness(tokens_df: pd.DataFrame) -> pd.DataFrame:
    """Per speculative cell at temperature 0: does it reproduce the baseline token for token?

    Input: token rows. Output columns: :data:`TOKEN_KEYS`, ``baseline_cell_id``,
    ``requests`` (the cell's requests), ``compared`` (those with a baseline
    request to compare with), ``identical_requests``, ``identical_fraction``
    (identical / compared), ``identical_to_baseline`` (True only if every
    request was compared and all are identical), ``first_divergence`` (earliest
    token index at which any request differs; ``<NA>`` if none does, Int64) with its
    ``first_divergence_prompt_id``, and ``status`` (``"compared"``,
    ``"no baseline"``, or ``"baseline lacks requests"``).
    """
    per_request = compare_requests(tokens_df)
    columns = TOKEN_KEYS + ["baseline_cell_id", "requests", "compared", "identical_requests",
                            "identical_fraction", "identical_to_baseline", "first_divergence",
                            "first_divergence_prompt_id", "status"]
    rows = []
    for key, g in _groups(per_request, TOKEN_KEYS):
        matched = g[g["identical"].notna()]
        n_identical = int(matched["identical"].astype(bool).sum())
        diverged = matched[matched["first_divergence"].notna()]
        first = diverged.loc[diverged["first_divergence"].astype("int64").idxmin()] \
            if len(diverged) else None
        base_id = g["baseline_cell_id"].iloc[0]
        if base_id is None or pd.isna(base_id):
            status = "no baseline"
        elif len(matched) < len(g):
            status = "baseline lacks requests"
        else:
            status = "compared"
        rows.append({**dict(zip(TOKEN_KEYS, key)), "baseline_cell_id": base_id,
                     "requests": len(g), "compared": len(matched),
                     "identical_requests": n_identical,
                     "identical_fraction": n_identical / len(matched) if len(matched)
                     else float("nan"),
                     "identical_to_baseline": bool(len(matched) == len(g) and len(g) > 0
                                                   and n_identical == len(g)),
                     "first_divergence": int(first["first_divergence"]) if first is not None
                     else None,
                     "first_divergence_prompt_id": first["prompt_id"] if first is not None
                     else None,
                     "status": status})
    out = pd.DataFrame(rows, columns=columns)
    out["first_divergence"] = out["first_divergence"].astype("Int64")
    return out
