"""Chapter helpers: the tables and sentences of one chapter, computed from rows and data.

A notebook is a chapter: parameters, one call here (or into :mod:`metrics`, :mod:`theory`,
:mod:`findings`) per experiment, figures, glue. What used to be code in a notebook lives
here, tested (``tests/test_chapters.py``): the article's K table and what its numbers imply
(``k_sweep``), the measured best K and the model's optimal K beside it, the H200's K sweep read
from cost and on one host (``k_sweep``), the H200's surface along the batch, the
memory-bandwidth roofline and the memory table (``batch_scaling``), the vocabulary check and
the drafts' sizes (``draft_selection``), the prediction grid over draft costs and the measured
break-even acceptance on the H200 (``conclusions``).

Facts come from data, never from this code: bandwidth from a profile's ``hardware``
(``memory_bandwidth_gb_s``), model sizes and vocabularies from ``data/model_configs``
(:mod:`specdec.model_configs`), the article's numbers from the claims ledger.

Column names with spaces are the page's labels; everything else is snake_case.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from . import book, comparability, findings, metrics, model_configs, stats, store, surface, theory
from .profiles import ProfileError, load_profile, measure_version


# --------------------------------------------------------------------------- #
# k_sweep
# --------------------------------------------------------------------------- #
def article_k_table(claimed: pd.DataFrame) -> pd.DataFrame:
    """The article's K table (``claimed``: :func:`book.article_claims` rows of C11-C13) with
    what its own numbers imply under the model (:func:`theory.article_implied`)."""
    implied = theory.article_implied(claimed["k"], claimed["acceptance"], claimed["speedup"])
    return pd.DataFrame({
        "claim": claimed["claim"].to_numpy(),
        "K": claimed["k"].to_numpy(),
        "acceptance (article says)": claimed["acceptance"].to_numpy(),
        "effective tokens/step (article says)": claimed["tokens_per_step"].to_numpy(),
        "speedup (article says)": claimed["speedup"].to_numpy(),
        "K × acceptance": implied["k_times_acceptance"].to_numpy(),
        "tokens/step implied (1 + K × acceptance)": implied["implied_tokens_per_step"].to_numpy(),
        "per-token α implied": implied["implied_alpha"].to_numpy(),
        "draft cost c implied": implied["implied_cost_ratio"].to_numpy(),
    })


def article_k_falls(table: pd.DataFrame) -> str:
    """Where the article's speedup falls from one K to the next while its accepted tokens per
    step rise (``table``: :func:`article_k_table`)."""
    k, s, t = (table[c].tolist() for c in ("K", "speedup (article says)", "K × acceptance"))
    falls = [f"K = {int(k[i])} to K = {int(k[i + 1])}" for i in range(len(k) - 1)
             if s[i + 1] < s[i] and t[i + 1] > t[i]]
    return " and ".join(falls) or "one K to the next (it never does)"


def article_k_rule(rule: Mapping) -> str:
    """The article's K rule (C14's ledger fields ``k_fast``, ``bandwidth_gb_s``, ``k``) in words."""
    return (f"K = {int(rule['k_fast'])} when memory bandwidth exceeds "
            f"{int(rule['bandwidth_gb_s'])} GB/s, else {int(rule['k'])}")


#: The measured best-K table's columns, renamed for the page.
BEST_K_COLUMNS = {"profile": "profile", "method": "method", "workload": "workload",
                  "batch_size": "batch_size", "num_speculative_tokens": "best K",
                  "speedup": "speedup", "speedup_ci_low": "speedup_ci_low",
                  "speedup_ci_high": "speedup_ci_high", "acceptance_rate": "acceptance_rate",
                  "mean_acceptance_length": "mean_acceptance_length", "unstable": "unstable"}


def best_k_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The measured best K per campaign, method, workload and batch size
    (:func:`metrics.best_k_cells`), K in a column ``best K``."""
    best = metrics.best_k_cells(summary)
    return best[list(BEST_K_COLUMNS)].rename(columns=BEST_K_COLUMNS).reset_index(drop=True)


def best_k_phrase(k: int, speedup: float, overlaps: Sequence[int] = ()) -> str:
    """A best K in a sentence, with the K it ties with inside its interval:
    ``*K* = 2 (1.38×, a tie with *K* = 1)`` (the K sweep's and the conclusions' one-host
    readings)."""
    tie = f", a tie with *K* = {', '.join(map(str, overlaps))}" if len(overlaps) else ""
    return f"*K* = {k} ({speedup:.2f}×{tie})"


def best_k_summary(best_k: pd.DataFrame) -> str:
    """The fastest configuration of :func:`best_k_table` with its interval, in words."""
    if best_k.empty:
        return book.NOT_MEASURED
    top = best_k.sort_values("speedup", ascending=False).iloc[0]
    return (f"{top['method']} on `{top['profile']}` at K = {int(top['best K'])}: "
            f"{book.fmt(top['speedup'], '.2f', '×')} "
            f"(interval {book.fmt(top['speedup_ci_low'], '.2f')}–"
            f"{book.fmt(top['speedup_ci_high'], '.2f')})")


def optimal_k_table(summary: pd.DataFrame, fit: theory.FitResult, best_k: pd.DataFrame | None,
                    k_max: int = 16) -> pd.DataFrame:
    """The fitted costs per group, the model's optimal K at the group's median alpha
    (:func:`theory.optimal_k_table`) and, where measured, the measured best K beside it."""
    table = theory.optimal_k_table(summary, fit.params, k_max=k_max)
    if best_k is not None and len(best_k):
        measured = best_k[["profile", "method", "batch_size", "best K"]].rename(
            columns={"best K": "measured_best_k"})
        table = table.merge(measured, on=["profile", "method", "batch_size"], how="left")
    return table


def best_k_view(best: pd.DataFrame) -> pd.DataFrame:
    """:func:`surface.best_k` as the k_sweep chapter's table: a row per method and batch, a
    column per set α, each cell the best K and the K it ties with: inside its interval (≈), or
    read in another lease within the method's spread between panels (~)."""
    if not len(best):
        return pd.DataFrame()

    def cell(r):
        ties = ([f"≈ {', '.join(map(str, r['overlaps']))}"] if r["overlaps"] else []) + (
            [f"~ {', '.join(map(str, r['within_spread']))}"] if r["within_spread"] else [])
        return f"{r['best_k']}" + (f" ({'; '.join(ties)})" if ties else "")

    view = (best.assign(cell=best.apply(cell, axis=1))
            .pivot(index=["method", "batch_size"], columns="acceptance_alpha", values="cell"))
    view.columns = [f"α = {a:g}" for a in view.columns]
    view.index = view.index.set_names(["method", "batch"])
    return view.fillna("–")


def gpu_k_sweep(table: pd.DataFrame, surface_k: int, panel_cells: pd.DataFrame | None,
                runs: pd.DataFrame, spread: pd.Series | None
                ) -> tuple[pd.DataFrame, pd.DataFrame | None, dict[str, str]]:
    """The K sweep of a protocol-2 campaign read from cost (``table``: :func:`surface_table`
    rows): each method and batch size measured at three K or more, at the set α the sweep
    measured at another K than the surface's ``surface_k``, as lines
    (:func:`protocol.sweep_own_panel`: ``other_lease`` on a cell of another lease) with the same
    configuration as the control panel of the line's own lease measured it (``own``; None where
    nothing is swept). ``panel_cells``: :func:`protocol.cells` of the panels, a panel cell on
    another runner than the panel's baseline (the 1B draft, V1) read against the baseline of the
    campaign's ``runs``; ``spread``: :func:`protocol.method_spread`. The sentences, by glue
    name: what was swept (``sweep_methods``), the cells of another lease beside their panel
    (``sweep_k4``), each swept method's spread (``sweep_spread``) and how the step's cost grows
    from one measured K to the next at the largest set α, within the line's own lease
    (``sweep_steps``)."""
    from . import protocol

    spec = table[(table["method"] != "baseline") & table["acceptance_alpha"].notna()]
    n_k = spec.groupby(["method", "batch_size"])["num_speculative_tokens"].nunique()
    sweep = spec.merge(n_k[n_k >= 3].reset_index()[["method", "batch_size"]], on=["method", "batch_size"])
    # the set alphas the sweep measured at other K than the surface's (not the surface's whole grid)
    sweep = sweep[sweep["acceptance_alpha"].isin(
        sweep.loc[sweep["num_speculative_tokens"] != surface_k, "acceptance_alpha"].unique())]
    in_lease = (protocol.panel_speedups(panel_cells, protocol.cells(runs))
                if panel_cells is not None else None)
    lines, own = protocol.sweep_own_panel(sweep, in_lease) if len(sweep) else (sweep, None)
    pairs = [f"{m} at batch {int(b)}, α = {a:g}: {g['other_speedup'].iloc[0]:.2f}× in the surface's "
             f"lease, {', '.join(f'{v:.2f}×' for v in g['speedup_cost'])} in the sweep's "
             f"({' and '.join(g['panel_phase'])} panel)"
             for (m, b, a), g in (own.groupby(["method", "batch_size", "acceptance_alpha"])
                                  if own is not None else [])]
    # ms per K from one measured K to the next, within the line's own lease (a host-bound
    # step moves between leases)
    grow = []
    home = lines[~lines["other_lease"]] if "other_lease" in lines else lines
    for (m, b), g in home[home["acceptance_alpha"] == home["acceptance_alpha"].max()].groupby(
            ["method", "batch_size"]):
        s = g.groupby("num_speculative_tokens")["step_ms"].median().sort_index()
        per_k = (s.diff() / s.index.to_series().diff()).dropna()
        if len(per_k) > 1:
            top = per_k.idxmax()
            prev = s.index[s.index.get_loc(top) - 1]
            grow.append(f"{m} at batch {int(b)}: {per_k.min():.2f} to {per_k.max():.2f} ms per K, "
                        f"the most from K = {int(prev)} to {int(top)}")
    return lines, own, {
        "sweep_methods": "; ".join(
            f"{m} (K = {', '.join(str(int(k)) for k in sorted(g.num_speculative_tokens.unique()))}; "
            f"batch {', '.join(str(int(b)) for b in sorted(g.batch_size.unique()))})"
            for m, g in sweep.groupby("method")) or "none yet",
        "sweep_k4": "; ".join(pairs) if pairs else "no configuration measured in both yet",
        "sweep_spread": "; ".join(
            f"{m} ±{spread[m] / 2:.0%}" for m in sorted(set(sweep["method"]))
            if spread is not None and pd.notna(spread.get(m))) or "no panel yet",
        "sweep_steps": "; ".join(grow) or "not measured yet"}


def one_host_sentences(norm: pd.DataFrame, panel: pd.DataFrame | None,
                       spread: pd.Series | None) -> dict[str, str]:
    """The sentences of a K sweep read as on one host (``norm``: :func:`protocol.one_host` of
    :func:`gpu_k_sweep`'s lines; ``panel``: :func:`protocol.panel_table`; ``spread``:
    :func:`protocol.method_spread`), by glue name: the protocol's bounds on the panel
    (``panel_bounds``), the batch sizes the panel measures (``panel_batches``), the methods so
    read with their spread (``norm_methods``), each line's fastest K on one host
    (``norm_best``, a sweep of five K or more, :func:`surface.best_k`) and per method
    (``norm_summary``), the range of the host factors (``norm_factors``) and how far the panel
    moved within a lease (``norm_drift``)."""
    from . import protocol

    texts = {"panel_bounds": f"within {protocol.PANEL_MEDIAN:.0%} over the panel, "
                             f"{protocol.PANEL_WORST:.0%} in its worst cell",
             "panel_batches": (", ".join(str(int(b)) for b in sorted(panel["batch_size"].unique()))
                               if panel is not None else "none"),
             "norm_methods": ", ".join(f"{m} (±{spread[m] / 2:.0%})"
                                       for m in (sorted(set(norm["method"])) if len(norm) else []))
             or "none"}
    if not len(norm):
        return texts | dict.fromkeys(("norm_best", "norm_factors", "norm_drift", "norm_summary"),
                                     book.NOT_MEASURED)
    best = surface.best_k(norm, min_ks=5)
    factors = norm.groupby(["method", "lease_id"])["host_factor"].agg(["min", "max"])
    by = best.groupby("method")["best_k"].agg(
        lambda k: f"{k.min()}–{k.max()}" if k.min() != k.max() else f"{k.min()}")
    return texts | {
        "norm_best": "; ".join(
            f"{r.method} at batch {r.batch_size}, α = {r.acceptance_alpha:g}: "
            + best_k_phrase(r.best_k, r.best_speedup, r.overlaps)
            for r in best.itertuples()) or "no sweep of five *K* or more",
        "norm_factors": f"{factors['min'].min():.2f} to {factors['max'].max():.2f}",
        "norm_summary": "; ".join(f"{m}: *K* = {r}" for m, r in by.items()) or book.NOT_MEASURED,
        "norm_drift": "; ".join(f"{m} up to {g['panel_drift'].max():.0%}" for m, g in norm.groupby("method"))}


# --------------------------------------------------------------------------- #
# batch_scaling
# --------------------------------------------------------------------------- #
def article_batch_table(claimed: pd.DataFrame) -> pd.DataFrame:
    """The article's batch table (``claimed``: :func:`book.article_claims` rows of C18-C20)
    with the baseline throughput per request its own numbers give."""
    table = pd.DataFrame({
        "claim": claimed["claim"].to_numpy(),
        "batch": claimed["batch"].to_numpy(),
        "baseline tok/s (article says)": claimed["baseline_tok_s"].to_numpy(),
        "speculative speedup (article says)": claimed["speedup"].to_numpy(),
        "memory GB (article says)": claimed["memory_gb"].to_numpy(),
    })
    table["baseline tok/s per request (from its numbers)"] = (
        table["baseline tok/s (article says)"] / table["batch"])
    return table


def bandwidth_gb_s(profile: str) -> float:
    """The published memory bandwidth of a profile's device (``hardware.memory_bandwidth_gb_s``)."""
    bw = load_profile(profile).hardware.memory_bandwidth_gb_s
    if bw is None:
        raise ProfileError(f"profiles/{profile}.yaml: hardware.memory_bandwidth_gb_s: "
                           "not given, so no roofline can be drawn for it")
    return bw


def decode_bound(profile: str, weights_config: str, dtype: str | None = None) -> float:
    """Steps per second a profile's device allows a model of config ``weights_config``
    (:func:`theory.decode_bound_steps_per_s` on the profile's bandwidth and
    :func:`model_configs.weight_bytes`). A bound, not a measurement."""
    return theory.decode_bound_steps_per_s(bandwidth_gb_s(profile),
                                           model_configs.weight_bytes(weights_config, dtype))


def roofline_table(summary: pd.DataFrame, profiles: Sequence[str], weights_config: str,
                   dtype: str | None = None) -> pd.DataFrame:
    """Per profile: its published bandwidth, the decode bound for ``weights_config`` and the
    measured baseline throughput at batch 1 (median over its cells; NaN where not measured)."""
    rows = []
    for p in profiles:
        bound = decode_bound(p, weights_config, dtype)
        base1 = summary[(summary["profile"] == p) & (summary["method"] == "baseline")
                        & (summary["batch_size"] == 1)]["tok_s_median"] if len(summary) else []
        measured = float(pd.Series(base1, dtype=float).median()) if len(base1) else float("nan")
        rows.append({"campaign": p, "bandwidth GB/s (published)": bandwidth_gb_s(p),
                     "bound tok/s at batch 1 (computed)": bound,
                     "baseline tok/s at batch 1 (measured)": measured,
                     "share of bound": measured / bound})
    return pd.DataFrame(rows, columns=["campaign", "bandwidth GB/s (published)",
                                       "bound tok/s at batch 1 (computed)",
                                       "baseline tok/s at batch 1 (measured)", "share of bound"])


def roofline_sentence(roof: pd.DataFrame) -> str:
    """The first measured profile's baseline at batch 1 as a share of its bound."""
    measured = roof.dropna(subset=["share of bound"]) if len(roof) else roof
    if measured.empty:
        return "not measured yet"
    first = measured.iloc[0]
    return f"{100 * first['share of bound']:.0f} % of the bound on `{first['campaign']}`"


def memory_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Peak memory and KV cache per cell, in GiB, ordered by campaign, method and batch."""
    mem = summary.sort_values(["profile", "method", "batch_size"])
    return pd.DataFrame({"campaign": mem["profile"], "method": mem["method"],
                         "K": mem["num_speculative_tokens"], "batch": mem["batch_size"],
                         "peak memory GiB": mem["peak_memory_bytes"] / 2**30,
                         "KV cache GiB": mem["kv_cache_bytes"] / 2**30})


def crossover_sentence(summary: pd.DataFrame,
                       spread: Mapping[str, float] | None = None) -> tuple[str, list[str]]:
    """(the sentence to glue, its clauses) for where speculation stops paying
    (:func:`metrics.crossover_batch`, :func:`findings.crossover_sentences`). ``spread``: the
    methods whose step moves with the host, with their control panel's largest move between
    leases (:func:`protocol.moved_spread`); such a method's configuration whose speedup lies
    within half that move of 1 at some batch gets no verdict: its range instead."""
    cross = metrics.crossover_batch(summary)
    spread = dict(spread or {})
    parts = []
    for r, clause in zip(cross.itertuples(), findings.crossover_sentences(cross)):
        half = spread.get(r.method, 0.0) / 2
        if half and any(abs(v - 1) <= half for v in r.speedups):
            clause = (f"{r.method} (K = {r.num_speculative_tokens}, {r.workload}) on "
                      f"`{r.profile}` ran at " + ", ".join(f"{v:.2f}×" for v in r.speedups)
                      + " at batch " + ", ".join(map(str, r.batch_sizes)) + f": within its "
                      f"host spread (±{half:.0%}) of no speculation, so where it stops paying "
                      f"depends on the host")
        parts.append(clause)
    return ("; ".join(parts) if parts else findings.NO_CROSSOVER), parts


def gpu_batch_section(table: pd.DataFrame, k: int, alphas: Sequence[float], spread: pd.Series | None
                      ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """A protocol-2 surface (``table``: :func:`surface_table` rows) cut along the batch at ``k``:
    the throughput figure's rows (the baseline and each method at the last of ``alphas``,
    ``tok_s`` as ``tok_s_median``), the speedup figures' rows at every α of ``alphas`` with
    ``unstable`` where the step time's CV exceeds :data:`stats.CV_THRESHOLD` (a speedup read from
    cost is as steady as the step it reads; the throughput's CV also carries the synthetic
    draw), and the sentences, by glue name: where speculation stops paying at the last α
    (``gpu_crossover``, :func:`crossover_sentence`), the caveat on its methods that move with
    the host (``gpu_caveat``, :func:`protocol.host_caveat`; ``spread``:
    :func:`protocol.panel_spread`), the batch's effect at each α (``gpu_trend``,
    ``gpu_trend_short``) and that α (``gpu_alpha``)."""
    from . import protocol

    at_k = table[(table["num_speculative_tokens"] == k) & table["acceptance_alpha"].isin(alphas)]
    last = at_k[at_k["acceptance_alpha"] == alphas[-1]]
    shown = pd.concat([table[table["method"] == "baseline"], last], ignore_index=True)
    cross, clauses = crossover_sentence(last, protocol.moved_spread(spread))
    at_gpu_k = table[table["num_speculative_tokens"] == k]
    return (shown.rename(columns={"tok_s": "tok_s_median"}),
            at_k.assign(unstable=at_k["step_ms_cv"] > stats.CV_THRESHOLD) if len(at_k) else at_k, {
                "gpu_crossover": cross if clauses else book.NOT_MEASURED,
                "gpu_caveat": protocol.host_caveat(sorted(at_k["method"].unique()), spread),
                "gpu_trend": "; ".join(findings.batch_trend_at_set(at_gpu_k, a) for a in alphas),
                "gpu_trend_short": "; ".join(findings.batch_trend_at_set(at_gpu_k, a, detail=False)
                                             for a in alphas),
                "gpu_alpha": f"{alphas[-1]:g}"})


# --------------------------------------------------------------------------- #
# draft_selection
# --------------------------------------------------------------------------- #
def vocabulary_table(drafts: Mapping[str, str], target_config: str) -> pd.DataFrame:
    """Whether each draft shares the target's vocabulary, read from the published configs.

    ``drafts``: display name -> ``data/model_configs`` folder; ``target_config``: the
    target's folder. vLLM refuses a draft whose vocabulary size differs from the target's.
    """
    target = model_configs.vocab_size(target_config)
    sizes = [model_configs.vocab_size(c) for c in drafts.values()]
    return pd.DataFrame({"draft": list(drafts), "draft vocab_size": sizes,
                         "target vocab_size": target,
                         "usable as a draft": [s == target for s in sizes]})


def usable_drafts(vocab: pd.DataFrame) -> str:
    """How many drafts of :func:`vocabulary_table` are usable, in words ("None", "1 of 3")."""
    n = int(vocab["usable as a draft"].sum())
    return "None" if n == 0 else f"{n} of {len(vocab)}"


def draft_params(profile: str, method: str) -> str | None:
    """The stated size (``params``) of a method's draft model; None for a method without a
    draft or a profile not in this checkout."""
    try:
        prof = load_profile(profile)
        m = prof.method(method)
    except (ProfileError, KeyError):
        return None
    return prof.model(m.draft).params if m.draft else None


def draft_cost_table(table: pd.DataFrame | None, drafts: Sequence[str], k: int,
                     rates: Mapping[str, float]) -> pd.DataFrame:
    """Per draft model and batch size of a protocol-2 surface (:func:`surface_table`): its stated
    size, what its speculative step costs in baseline steps (at the lowest set α measured), its
    break-even acceptance (:func:`specdec.protocol.break_even`) and the speedup read from cost
    at each acceptance rate of ``rates`` (a label -> vLLM's acceptance rate, put on the α axis
    at K = ``k`` by :func:`theory.alpha_from_rate`; NaN where no measured α brackets it)."""
    from . import protocol

    columns = ["method", "params", "runner", "batch", "step in baseline steps", "break-even α",
               *rates]
    if table is None or table.empty:
        return pd.DataFrame(columns=columns)
    d = table[table["method"].isin(drafts) & (table["num_speculative_tokens"] == k)
              & table["acceptance_alpha"].notna()]
    if d.empty:
        return pd.DataFrame(columns=columns)
    be = {(r.method, r.batch_size): r.break_even_alpha
          for r in protocol.break_even(d, k).itertuples()}
    rows = []
    for (m, b), g in d.groupby(["method", "batch_size"]):
        low = g.sort_values("acceptance_alpha").iloc[0]
        row = {"method": m, "params": draft_params(low["profile"], m), "runner": low["runner"],
               "batch": int(b), "step in baseline steps": low["step_ms"] / low["baseline_step_ms"],
               "break-even α": be.get((m, b), float("nan"))}
        for label, rate in rates.items():
            read = protocol.read_at(g, m, float(theory.alpha_from_rate(rate, k)), k, int(b))
            row[label] = read["speedup_cost"] if read else float("nan")
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def draft_cost_sentences(cost: pd.DataFrame, article: pd.DataFrame, k: int = 4) -> dict[str, str]:
    """The sentences of :func:`draft_cost_table` at its smallest batch, by glue name: each
    draft's step in baseline steps (``gpu_draft_cost``), its break-even acceptance
    (``gpu_draft_be``), its speedup at the highest acceptance the article claims for a draft
    (``gpu_draft_at``; ``article``: the claims' rows with ``claim``, ``draft`` and ``acceptance
    (article says)``, labelled as :func:`draft_cost_table`'s rates) and the batch
    (``gpu_draft_batch``); :data:`book.NOT_MEASURED` each where nothing is measured."""
    keys = ("gpu_draft_cost", "gpu_draft_be", "gpu_draft_at", "gpu_draft_batch")
    if cost.empty:
        return dict.fromkeys(keys, book.NOT_MEASURED)
    b1 = cost[cost["batch"] == cost["batch"].min()]
    top = article.loc[article["acceptance (article says)"].idxmax()]
    rate = top["acceptance (article says)"]
    pct = f"{100 * rate:.0f} % acceptance rate"
    best = f"at {top['claim']} ({top['draft']}, {pct})"
    return {
        "gpu_draft_cost": "; ".join(f"{r['method']} ({r['params']}) {r['step in baseline steps']:.2f}"
                                    for _, r in b1.iterrows()),
        "gpu_draft_be": "; ".join(
            f"{r['method']} α ≈ {r['break-even α']:.2f}" if pd.notna(r["break-even α"])
            else f"{r['method']} does not break even within the measured α"
            for _, r in b1.iterrows()),
        "gpu_draft_at": "; ".join(f"{r['method']} {r[best]:.2f}×" for _, r in b1.iterrows()
                                  if pd.notna(r[best]))
        + f" ({top['claim']}, {top['draft']}'s {pct}, per-token α ≈ "
          f"{float(theory.alpha_from_rate(rate, k)):.2f} at K = {k})",
        "gpu_draft_batch": f"{int(cost['batch'].min())}"}


def acceptance_range(cells: pd.DataFrame) -> str:
    """From the lowest to the highest measured acceptance among speculative ``cells``, each
    with its method, campaign and speedup."""
    cells = cells.dropna(subset=["acceptance_rate"]) if len(cells) else cells
    if cells.empty:
        return book.NOT_MEASURED

    def one(r) -> str:
        return (f"{book.fmt(100 * r['acceptance_rate'], '.1f', ' %')} ({r['method']} on "
                f"`{r['profile']}`, speedup {book.fmt(r['speedup'], '.2f', '×')})")

    hi = cells.loc[cells["acceptance_rate"].idxmax()]
    lo = cells.loc[cells["acceptance_rate"].idxmin()]
    return f"from {one(lo)} to {one(hi)}"


def what_if_draft(params: pd.DataFrame, candidates: Mapping[str, str]) -> tuple[str, str, float] | None:
    """(profile, method, fitted cost ratio) of the first ``candidates`` entry (profile ->
    draft method) whose cost :func:`theory.fit` could fit (``params``); None if none."""
    for profile, method in candidates.items():
        row = params[(params["profile"] == profile) & (params["method"] == method)]
        if len(row) and pd.notna(row["cost_ratio"].iloc[0]):
            return profile, method, float(row["cost_ratio"].iloc[0])
    return None


# --------------------------------------------------------------------------- #
# conclusions
# --------------------------------------------------------------------------- #
def best_per_method(summary: pd.DataFrame) -> pd.DataFrame:
    """The fastest greedy speculative cell of each campaign, method and workload, ordered by
    campaign, workload and speedup (fastest first), with where its acceptance comes from
    (``acceptance_origin``: reached, set, or random weights)."""
    spec = summary[(summary["method"] != "baseline") & summary["speedup"].notna()
                   & (summary["temperature"] == 0)]
    best = metrics.best_k_cells(spec, by=["profile", "method", "workload"])
    # Say where each acceptance comes from: random weights make it an artefact, not a result.
    best = best.assign(acceptance_origin=comparability.acceptance_origins(best))
    return best.sort_values(["profile", "workload", "speedup"], ascending=[True, True, False])


def prediction_grid_table(cost_ratios: Sequence[float], alpha: float,
                          k_max: int = 16) -> pd.DataFrame:
    """:func:`theory.prediction_grid` with the page's labels (``alpha`` named in them)."""
    grid = theory.prediction_grid(cost_ratios, alpha, k_max=k_max)
    return grid.rename(columns={
        "cost_ratio": "draft cost c (target steps)",
        "break_even_alpha": "break-even acceptance α (prediction)",
        "best_k": f"best K at α = {alpha:g} (prediction)",
        "predicted_speedup": f"speedup at α = {alpha:g}, best K (prediction)"})


def surface_table(profile: str, results_root: Path | str | None) -> pd.DataFrame | None:
    """:func:`surface.table` of every stored row of a surface profile (of a protocol-2 one,
    :func:`specdec.protocol.surface_table`: what users run, the speedup read from cost, each
    method against the baseline of its own runner); None without rows."""
    if measure_version(load_profile(profile)) >= 2:
        from . import protocol

        return protocol.surface_table(profile, Path(results_root) if results_root else None)
    runs = store.load_runs(profile, root=Path(results_root) if results_root else None)
    if runs.empty:
        return None
    return surface.table(metrics.with_speedup(metrics.summarize(runs)))


def break_even_table(profile: str, k: int = 4,
                     results_root: Path | str | None = None) -> pd.DataFrame | None:
    """Each method's break-even acceptance per batch at ``k`` on a stored surface, long form:
    a protocol-2 campaign's read from cost on the runner users get
    (:func:`specdec.protocol.break_even`), else :func:`surface.break_even`; None without rows."""
    if measure_version(load_profile(profile)) >= 2:
        from . import protocol

        users = protocol.users_speedups(profile, Path(results_root) if results_root else None)
        return protocol.break_even(users[0], k) if users is not None else None
    table = surface_table(profile, results_root)
    return (surface.break_even(table[table["num_speculative_tokens"].isin([0, k])])
            if table is not None else None)


def measured_break_even(profile: str = "h200-surface-v2", k: int = 4,
                        results_root: Path | str | None = None) -> tuple[str, pd.DataFrame]:
    """The set acceptance at which each method starts to pay at ``k``, read off a stored
    speedup surface (:func:`surface.break_even`): (a sentence, a method x batch table).

    A campaign of measuring protocol 2 (issue 19) is read from cost, each method on the
    runner users get (:func:`specdec.protocol.break_even`). The sentence orders the methods
    from the least demanding to the most; the table is empty where the profile has no rows.
    """
    be = break_even_table(profile, k, results_root)
    if be is None:
        return f"No rows of `{profile}` are stored yet.", pd.DataFrame()
    if be.empty:
        return f"No rows of `{profile}` at K = {k} give a break-even acceptance yet.", \
            pd.DataFrame()
    by_method = be.groupby("method")["break_even_alpha"].agg(["min", "max"]).sort_values("min")
    sentence = ("From the least demanding method to the most: "
                + "; ".join(f"{m} α ≈ {r['min']:.2f}" + (f" to {r['max']:.2f}" if r["max"] > r["min"]
                                                          else "")
                            for m, r in by_method.iterrows())
                + " (over the batch sizes measured; measured cost at a set acceptance).")
    if measure_version(load_profile(profile)) >= 2:  # a method whose step moves with the host
        from . import protocol

        caveat = protocol.host_caveat(list(by_method.index), protocol.panel_spread(profile))
        sentence += f" {caveat}" if caveat else ""
    pivot = be.pivot_table(index="method", columns="batch_size", values="break_even_alpha")
    pivot.columns = [f"batch {int(b)}" for b in pivot.columns]
    return sentence, pivot


def dynamic_k_sentence(profile: str = "h200-surface-v2", results_root: Path | str | None = None,
                       default_method: str = "eagle3-dynk") -> str:
    """The conclusions' line on vLLM's dynamic K: the surface chapter's summary line
    (:func:`dynamic_k_section`'s ``sum_dyn``) over every stored row of ``profile``."""
    table = surface_table(profile, results_root)
    return dynamic_k_section(pd.DataFrame() if table is None else table, profile, default_method,
                             results_root=results_root)[1]["sum_dyn"]


def dynamic_k_section(table: pd.DataFrame, profile: str, default_method: str,
                      upstream: str = "", results_root: Path | str | None = None
                      ) -> tuple[pd.DataFrame, dict[str, str]]:
    """The surface chapter's dynamic-K section: the dynamic cells beside fixed K
    (:func:`surface.dynamic_vs_fixed` on ``table``, every stored row of the campaign) and its
    sentences: ``dyn_failed`` (``default_method``, the schedule on its default runner, did not
    start: :func:`failure_sentence`), ``dyn_text`` (the measured paragraph, or one sentence
    saying that nothing is measured yet) and ``sum_dyn`` (the summary line). The cells carry
    ``one_host`` where :func:`one_host_ratios` reads them on one host."""
    prof = load_profile(profile)
    failed = failures(profile, [default_method], results_root)
    text = {"dyn_failed": failure_sentence(
        failed, "EAGLE-3 with a dynamic-*K* schedule on its default runner (V2)", upstream)}
    pairs = surface.dynamic_k_methods(prof)
    dyn = surface.dynamic_vs_fixed(table, pairs)

    def pending(methods):
        return ", ".join(f"`{e.name}`" for e in prof.experiments if set(e.methods) & methods)

    if not len(dyn):
        text["dyn_text"] = (
            f"No dynamic-*K* cell is measured yet under this protocol: the experiments that "
            f"measure the schedule on the V1 runner beside fixed *K* "
            f"({pending(set(pairs) - {default_method}) or 'none planned'}) are listed at the end "
            f"of this chapter.")
        text["sum_dyn"] = (
            f"With a dynamic-*K* schedule EAGLE-3 does not start on its default runner in vLLM "
            f"{failed['vllm_version'].iloc[0]} (`{failed['exception'].iloc[0]}`); on the V1 "
            f"runner, the pin that lets it start, dynamic *K* is not measured yet."
            if len(failed) else "vLLM's dynamic *K* is not measured yet under this protocol.")
        return dyn.assign(one_host=np.nan), text
    runner_of = (table.drop_duplicates("method").set_index("method")["runner"]
                 if "runner" in table else pd.Series(dtype=object))
    modes = "; ".join(
        f"`{m}` ({runner_of.get(m, '?')}): "
        f"{', '.join(sorted(set(g['cudagraph_mode'].dropna()))) or 'not recorded'}"
        for m, g in dyn.groupby("method"))
    fixed_modes = ", ".join(sorted(set(dyn["fixed_cudagraph_mode"].dropna()))) or "not recorded"
    from . import protocol
    measured = set(dyn["method"])
    pinned_e3 = {m for m, f in pairs.items() if m != default_method and f == pairs.get(default_method)}
    # each dynamic method read on its own: their fixed sides run on different runners
    by_method = {m: g for m, g in dyn.groupby("method")}
    # the dynamic step against the fixed step at the same K, and the runner alone beside it
    step_ratios = [f"{protocol.span(g['step_ms'] / g['fixed_step_ms'], '.2f', '×')} for `{m}`"
                   for m, g in by_method.items() if g["fixed_step_ms"].notna().any()]
    if step_ratios:  # "1.81×-2.29× the fixed step for `a` and 1.1× for `b`"
        step_ratios[0] = step_ratios[0].replace(" for `", " the fixed step for `", 1)
    steps = ""
    if step_ratios:
        steps = f" At the same *K* the dynamic step took {' and '.join(step_ratios)}"
        alone = protocol.runner_step_ratio(store.load_runs(profile, Path(results_root) if results_root else None))
        if len(alone) and pinned_e3 & measured:
            steps += (f", while the V1 runner alone, with full graphs (the runner control: EAGLE-3 "
                      f"at *K* = 4 on V1 over V2, α = 0.8), takes {protocol.span(alone, '.2f', '×')} "
                      f"at batch {' and '.join(str(b) for b in alone.index)}: what is left goes "
                      f"with the schedule and the piecewise graphs V1 sets for it, which these "
                      f"cells do not tell apart")
        steps += "."
    panel = protocol.stored_panel(profile)
    spread = protocol.method_spread(panel) if panel is not None else pd.Series(dtype=float)
    host = one_host_ratios(dyn, panel, spread)
    medians = pd.Series({m: g["dynamic_over_fixed"].median() for m, g in by_method.items()})
    ratio = medians.max()
    worst = max(ratio, host["one_host"].max()) if len(host) else ratio
    verdict = ("switching the schedule on costs more on every step than it gains, so where the "
               "batch size of a deployment is stable, the best fixed *K* for that batch is the "
               "faster choice" if ratio < 0.97 else
               "the schedule itself costs nothing measurable beside the same fixed *K*; what it "
               "can gain is bounded by the best fixed *K* at each batch")
    if len(host):
        verdict = (verdict if worst < 0.97 else "the host's spread decides nothing here: read on "
                   "one host, the schedule's cost is not told apart from the fixed *K*'s")
        fixed = sorted(set(host["fixed_method"]))
        verdict += (
            ". The step of " + " and ".join(f"`{m}`" for m in fixed) + " moves between hosts "
            "(their control-panel cells by up to "
            + " and ".join(f"±{spread[m] / 2:.0%}" for m in fixed if m in spread)
            + "), and the dynamic and the fixed cells come from different leases ("
            + ", ".join(sorted(set(host["lease_id"]) | set(host["fixed_lease"])))
            + "); read on one host (each ratio times the two leases' panel steps of the fixed "
            "method at that batch), the ratios at batch "
            + " and ".join(str(b) for b in sorted(set(host["batch_size"])))
            + f", the batches the panel measures, are {protocol.span(host['one_host'], '.2f', '×')}")
    crossed = any(len(set(g["runner"].dropna()) | set(g["fixed_runner"].dropna())) > 1
                  for g in by_method.values())
    runners = ("Where the fixed side runs on another runner, the ratio carries the runner too."
               if crossed else f"Dynamic and fixed cells ran on the same runner "
               f"({dynamic_runners(dyn)[0]}).")
    if pinned_e3 & measured:
        pinned = ("So the schedule is measured with EAGLE-3 pinned to the V1 runner "
                  "(`VLLM_USE_V2_MODEL_RUNNER=0`), on which the study's first protocol ran it; "
                  "the 1B draft runs on V1 by default.")
    else:
        pinned = ("EAGLE-3 pinned to the V1 runner (`VLLM_USE_V2_MODEL_RUNNER=0`), the pin that "
                  f"lets its schedule start, is not measured yet ({pending(pinned_e3)}, listed at "
                  "the end of this chapter); what follows is "
                  + ", ".join(f"`{m}`" for m in sorted(measured)) + ", on the V1 runner.")
    others = set(pairs) - {default_method} - pinned_e3 - measured
    if others:
        pinned += f" Not measured yet: {pending(others)} (listed at the end of this chapter)."
    def read(m, g):
        c = g["dynamic_over_fixed"].dropna()
        on, beside = dynamic_runners(g)
        return (f"`{m}` (on {on}, beside fixed *K* on {beside}) at a median {c.median():.2f}× "
                f"({protocol.span(c, '.2f', '×')}, {len(c)} of {len(g)} cells) of the speed of "
                f"the same fixed *K* and at {g['dynamic_over_best'].median():.2f}× of the best "
                f"fixed *K*")

    text["dyn_text"] = (
        f"{pinned} V1 turns full CUDA graphs off when a schedule is set (its log "
        "says \"for reliability\"). A user who switches the schedule on in this version therefore "
        "changes the graph mode with it (for EAGLE-3 the runner too), and the ratios below are "
        f"that whole change, set beside fixed *K* on the runner vLLM picks. {runners}\n\n"
        + ("Over the cells whose *K* was also measured fixed, the dynamic schedule ran: "
           + "; ".join(read(m, g) for m, g in by_method.items() if g["dynamic_over_fixed"].notna().any())
           + f". {verdict[0].upper()}{verdict[1:]}." if medians.notna().any() else
           "No fixed *K* is measured yet at the *K* the schedule chose: the ratio is not read.")
        + " The rows record the CUDA graph mode of each dynamic "
        f"engine ({modes}) against {fixed_modes} for the fixed ones.{steps} What a schedule is "
        f"worth under a changing batch (an online server) is not measured here.")
    text["sum_dyn"] = ("vLLM's dynamic *K* ran at " + "; ".join(
        f"{medians[m]:.2f}× of the same fixed *K* for `{m}` (median over "
        f"{g['dynamic_over_fixed'].notna().sum()} cells{runner_note(g)})"
        for m, g in by_method.items() if pd.notna(medians[m]))
        + (f"; {protocol.span(host['one_host'], '.2f', '×')} read on one host"
           if len(host) else "") + ".") if medians.notna().any() else (
        "vLLM's dynamic *K* is measured, but no fixed *K* yet at the *K* its schedule chose: "
        "the ratio is not read.")
    key = ["method", "batch_size", "acceptance_alpha"]
    return dyn.merge(host[key + ["one_host"]], on=key, how="left"), text


def one_host_ratios(dyn: pd.DataFrame, panel: pd.DataFrame | None,
                    spread: pd.Series | None = None) -> pd.DataFrame:
    """:func:`surface.dynamic_vs_fixed`'s cells whose fixed method moves between hosts
    (:func:`protocol.moved_methods`) and whose dynamic and fixed cells come from leases with a
    panel cell of the fixed method at that batch: ``one_host``, the ratio times the fixed
    method's panel step in the dynamic cell's lease over that in the fixed cell's (the geometric
    mean of a lease's start and end panels, :func:`protocol.lease_panel_steps`). ``spread``:
    :func:`protocol.method_spread` of ``panel``, computed where not given."""
    from . import protocol
    cols = ["method", "fixed_method", "batch_size", "acceptance_alpha", "dynamic_over_fixed",
            "lease_id", "fixed_lease", "one_host"]
    if panel is None or panel.empty or dyn.empty or "fixed_lease" not in dyn:
        return pd.DataFrame(columns=cols)
    moved = protocol.moved_methods(protocol.method_spread(panel) if spread is None else spread)
    steps = protocol.lease_panel_steps(panel)
    d = dyn[dyn["fixed_method"].isin(moved) & dyn["dynamic_over_fixed"].notna()]

    def ms(lease, r):
        return steps.get((lease, r["fixed_method"], r["batch_size"]), np.nan)

    one = [r["dynamic_over_fixed"] * ms(r["lease_id"], r) / ms(r["fixed_lease"], r)
           for _, r in d.iterrows()]
    return d.assign(one_host=one).dropna(subset=["one_host"])[cols].reset_index(drop=True)


def dynamic_runners(dyn: pd.DataFrame) -> tuple[str, str]:
    """The runners of :func:`surface.dynamic_vs_fixed`'s dynamic cells and of the fixed cells
    beside them (``"V1"``, ``"V2"``; ``"?"`` where not recorded)."""
    return tuple(", ".join(sorted(set(dyn[c].dropna()))) or "?" if c in dyn else "?"
                 for c in ("runner", "fixed_runner"))


def runner_note(dyn: pd.DataFrame) -> str:
    """``"; the schedule on V1, fixed K on V2"`` where the dynamic and fixed cells ran on
    different runners (:func:`dynamic_runners`: the ratio then carries the runner's cost too);
    empty where they share one or a side is not recorded."""
    ran, fixed = dynamic_runners(dyn)
    if "?" in (ran, fixed) or ran == fixed:
        return ""
    return f"; the schedule on {ran}, fixed K on {fixed}"


_VLLM_FRAME = re.compile(r'File "[^"]*?/(vllm/[^"]+)", line \d+, in (\w+)')
_EXCEPTION = re.compile(r"^(?:\([^)\n]*\)\s*)?((?:\w+\.)*[A-Z]\w*(?:Error|Exception)): (.+)$",
                        re.M)


def failures(profile: str, methods: Sequence[str] | None = None,
             results_root: Path | str | None = None) -> pd.DataFrame:
    """The failed cells of a profile (``status == "failed"`` rows), one row each: method, batch,
    α, lease, vLLM version, ``exception`` (the first exception line of the stored error tail:
    the root cause, which an engine core prints before the error it raises in the caller),
    ``where`` (the two innermost frames of vLLM's code above it) and ``at_start`` (the engine
    never started)."""
    runs = store.load_runs(profile, root=Path(results_root) if results_root else None)
    bad = runs[runs["status"] == "failed"] if len(runs) else runs
    if methods is not None:
        bad = bad[bad["method"].isin(list(methods))]
    rows = []
    for r in bad.itertuples():
        err = r.error or ""
        exc = _EXCEPTION.search(err)
        frames = _VLLM_FRAME.findall(err[:exc.start()] if exc else err)[-2:]
        rows.append({"method": r.method, "batch_size": r.batch_size,
                     "acceptance_alpha": r.acceptance_alpha, "lease_id": r.lease_id,
                     "vllm_version": r.vllm_version,
                     "exception": f"{exc.group(1)}: {exc.group(2).strip()}" if exc else None,
                     "where": ", called from ".join(f"`{fn}` (`{path}`)" for path, fn in reversed(frames)),
                     "at_start": "initialization failed" in err})
    return pd.DataFrame(rows, columns=["method", "batch_size", "acceptance_alpha", "lease_id",
                                       "vllm_version", "exception", "where", "at_start"])


def failure_sentence(failed: pd.DataFrame, what: str, upstream: str = "") -> str:
    """One method's :func:`failures` in a sentence: ``what`` (e.g. "EAGLE-3 with a dynamic-K
    schedule on its default runner") did not start, in which lease, with which exception where;
    ``upstream`` (markdown, the notebook's citation) appended. Says so where nothing failed."""
    if failed.empty:
        return f"{what}: no failed cell is stored."
    versions = ", ".join(sorted(set(failed["vllm_version"].dropna()))) or "(version not recorded)"
    leases = ", ".join(sorted(set(failed["lease_id"].dropna()))) or "a lease not recorded"
    excs = sorted(set(failed["exception"].dropna()))
    when = "at engine start" if failed["at_start"].all() else "while running"
    cause = (f" with `{excs[0]}` in {failed['where'].iloc[0]}" if len(excs) == 1
             else f" ({len(excs)} different errors)" if excs else "")
    return (f"In vLLM {versions}, {what} did not run: {len(failed)} cell(s) of it failed "
            f"{when} (lease {leases}){cause}.{' ' + upstream if upstream else ''}")


def answer_section(profile: str, k: int = 4, alpha: float = 0.8,
                   results_root: Path | str | None = None, batches: Sequence[int] = (1, 16, 64),
                   draft: str = "draft-1b", head: str = "eagle3"
                   ) -> tuple[pd.DataFrame | None, dict[str, str]]:
    """The conclusions' opening answer from a protocol-2 campaign: its answer table
    (:func:`protocol.answer`, None where nothing is stored) and the sentences glued around it:
    ``answer_k_note`` (where the table reads the best K), ``answer_head`` and ``answer_1b`` (the
    head's and the separate draft's speedups at set ``alpha``, best measured K where swept),
    ``answer_1b_hosts`` (the draft's control-panel cell from host to host), ``answer_1b_norm``
    and ``answer_1b_norm_verdict`` (its K sweep read as on one host, :func:`protocol.one_host`)."""
    from . import protocol
    from .claims import published

    root = Path(results_root) if results_root else None
    runs = store.load_runs(profile, root)
    panel_runs = protocol.load_panels(profile)
    panel_cells = protocol.cells(panel_runs) if len(panel_runs) else None
    panel = protocol.panel_table(panel_cells) if panel_cells is not None else None
    users = protocol.users_speedups(profile, root, runs=runs, panel_runs=panel_runs)
    table = protocol.answer(profile, published.table(), users=users, panel=panel)
    swept = table is not None and table.astype(str).apply(
        lambda col: col.str.contains("at K =")).any().any()
    glue = {"answer_k_note": (
        "Where *K* was swept, the speedup is at the best measured *K* (the cell names it); "
        f"elsewhere at *K* = {k}." if swept else
        f"At *K* = {k}: the best *K* under this protocol is not measured yet (its *K* sweep is "
        "pending).")}

    def reads(rows, method):
        got = [(b, protocol.best_read(rows, method, alpha, b, k)) for b in batches]
        got = [(b, r) for b, r in got if r is not None]
        if not got:
            return "is not measured yet"
        return ("ran at " + " / ".join(f"{r['speedup_cost']:.2f}×" for _, r in got)
                + f" the speed of no speculation at set α = {alpha:g} (batch "
                + " / ".join(str(b) for b, _ in got)
                + (", best measured *K*" if any(r["swept"] for _, r in got) else f", *K* = {k}")
                + ")")

    glue["answer_head"] = reads(users[0], head) if users is not None else "is not measured yet"
    glue["answer_1b"] = reads(users[0], draft) if users is not None else "is not measured yet"
    # the same panel cell in every lease's control panel: what it gave from host to host
    rng = (protocol.panel_range(protocol.panel_speedups(panel_cells, protocol.cells(runs)), draft)
           if panel_cells is not None and len(runs) else None)
    glue["answer_1b_hosts"] = "not measured yet" if rng is None or rng.empty else (
        "; ".join(f"{r.low:.2f}× to {r.high:.2f}× at batch {r.batch_size}"
                  for r in rng.itertuples())
        + f" (its control-panel cell, *K* = {k}, set α = {alpha:g}, in "
        f"{int(rng['panels'].max())} panels of {int(rng['leases'].max())} leases on "
        f"{int(rng['gpus'].max())} GPUs)")
    # the draft's K sweep read as on the median panel host: the table's "on one host" row
    one = protocol.one_host(users[0], panel, users[1]) if users is not None else None
    mine = (one[(one["method"] == draft) & (one["acceptance_alpha"] == alpha)]
            if one is not None and len(one) else pd.DataFrame())
    norm = [(b, r) for b in (sorted(set(mine["batch_size"])) if len(mine) else [])
            if (r := protocol.best_read(one, draft, alpha, b, k)) is not None]
    glue["answer_1b_norm"] = "; ".join(
        f"at batch {b}, " + best_k_phrase(r["num_speculative_tokens"], r["speedup_cost"],
                                          r["overlaps"]) for b, r in norm) or "not measured yet"
    # the K whose whole interval, on one host, lies above no speculation
    above = {int(b): sorted(int(x) for x in g.loc[g["speedup_cost_ci_low"] > 1,
                                                  "num_speculative_tokens"])
             for b, g in mine.groupby("batch_size")} if len(mine) else {}
    glue["answer_1b_norm_verdict"] = "" if not above else (
        "On one host its interval lay wholly above no speculation " + "; ".join(
            f"at batch {b} for *K* = {', '.join(map(str, ks))}" if ks else
            f"at batch {b} for no *K*" for b, ks in above.items()) + ".")
    glue["answer_alpha"] = f"{alpha:g}"
    return table, glue


# --------------------------------------------------------------------------- #
# surface: the article's method table at a published acceptance
# --------------------------------------------------------------------------- #
def published_speedups(surface_df: pd.DataFrame, k: int,
                       entries: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each published acceptance (:mod:`specdec.claims.published`) at the measured surface's cost
    at ``k`` and every measured batch size (:func:`surface.speedup_from_cost`, the tokens per
    step of the implied α at ``k``): a measured cost at a stated acceptance."""
    from .claims import published

    pub = published.table() if entries is None else entries
    rows = []
    for e in pub.itertuples():
        batches = surface_df.loc[surface_df["method"] == e.method, "batch_size"].unique()
        for b in sorted(int(x) for x in batches):
            # tokens per step from the implied α at this K; the step's cost from the surface
            tokens = float(theory.expected_tokens_per_step(e.implied_alpha, k))
            r = surface.speedup_from_cost(surface_df, e.method, e.implied_alpha, k, b, tokens)
            rows.append({"method": e.method, "checkpoint": e.checkpoint, "dataset": e.dataset,
                         "published_length": e.mean_acceptance_length, "published_k": e.k,
                         "implied_alpha": e.implied_alpha, "batch_size": b,
                         "speedup": r["speedup"], "alpha_low": r["alpha_low"],
                         "alpha_high": r["alpha_high"]})
    return pd.DataFrame(rows, columns=["method", "checkpoint", "dataset", "published_length",
                                       "published_k", "implied_alpha", "batch_size", "speedup",
                                       "alpha_low", "alpha_high"])


def published_sentence(speedups: pd.DataFrame) -> str:
    """Per method and dataset: the implied α and the speedup at the smallest and largest batch."""
    done = speedups.dropna(subset=["speedup"])
    if done.empty:
        return "no published acceptance lies inside the measured surface yet"
    parts = []
    for (m, ds), g in done.groupby(["method", "dataset"], sort=False):
        first, at = g.iloc[0], surface.speedups_over_batch(g)
        parts.append(f"{m} on {ds} (mean acceptance length {first['published_length']:g} at "
                     f"K = {int(first['published_k'])}, so α ≈ {first['implied_alpha']:.2f}): {at}")
    return "; ".join(parts)
