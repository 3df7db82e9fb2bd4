"""Numeric verdicts from measured rows, never from typed numbers.

A claim with a ``derive`` rule (:class:`specdec.claims.ledger.Derive`) gets its verdict from
the stored rows of its profiles and experiments. Only cells in the article's setting
(:mod:`specdec.comparability`) can decide it; cells in another setting give
``our-figure-in-our-setting``, and no rows ``pending-measurement``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from .. import comparability
from .ledger import JUDGED, OUR_FIGURE, Claim, Derive

#: Relative tolerance for "reproduced" when comparing our figure with the article's
#: (only ever on cells of the article's setting: :mod:`specdec.comparability`).
TOLERANCE = 0.2


def summary(profiles: list[str], root: Path | None = None):
    """Per-cell summary with speedups (:mod:`specdec.metrics`) of the profiles' ok rows, or None.

    A campaign of measuring protocol 2 keeps its cells' speedups as its chapters read them:
    from cost, against the baseline of the method's own runner
    (:func:`specdec.protocol.surface_table`), not from throughput against the plain baseline.
    """
    from .. import metrics, store

    root = Path(root) if root is not None else None
    runs = store.load_runs(profiles, root=root, only_ok=True)
    if runs.empty:
        return None
    return _read_from_cost(metrics.with_speedup(metrics.summarize(runs)), profiles, root)


_SPEEDUP = ["speedup", "speedup_ci_low", "speedup_ci_high", "speedup_status"]


def _read_from_cost(summ, profiles: list[str], root: Path | None):
    """``summ`` with the speedups of every protocol-2 profile's cells replaced by those read
    from cost (a cell the cost reading has no speedup for gets none)."""
    from .. import protocol
    from ..profiles import ProfileError, load_profile, measure_version

    for name in profiles:
        try:
            if measure_version(load_profile(name)) < 2:
                continue
        except ProfileError:
            continue
        table = protocol.surface_table(name, root)
        mine = summ["profile"] == name
        if table is None or not mine.any():
            continue
        cost = (table[table["panel_phase"].isna()].sort_values("timestamp_utc")
                .drop_duplicates("cell_id", keep="last").set_index("cell_id"))
        for col in _SPEEDUP:
            summ.loc[mine, col] = summ.loc[mine, "cell_id"].map(cost[col]).to_numpy()
        summ.loc[mine & summ["speedup_status"].isna(), "speedup_status"] = "no baseline"
    return summ


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= TOLERANCE * abs(theirs)


#: The target used as its own draft must accept at least this share of its draft tokens.
SANITY_ACCEPTANCE = 0.95


def failed_sanity_bound(bound_rows, experiments: Sequence[str]) -> str | None:
    """Why the bound-method cells of ``experiments`` fail the sanity bound, or None.

    Bound methods (``Derive.bound_methods``) are drafts identical to the target
    (``draft-self``): any cell of them accepting less than :data:`SANITY_ACCEPTANCE` means
    the engine mis-samples there.
    """
    df = in_experiments(bound_rows, experiments)
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


def _rows_for(summary, derive: Derive):
    """Speculative cells of the rule's experiments (and method pattern) with a valid speedup."""
    df = in_experiments(summary, derive.experiments)
    # a baseline drafts nothing (a campaign may have one per runner, e.g. baseline-v1)
    df = df[df["num_speculative_tokens"].fillna(0) > 0]
    if derive.method_regex is not None:
        df = df[df["method"].str.contains(derive.method_regex, regex=True)]
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


def rule_k(article: dict, profile: str) -> int:
    """The K the article's rule (C14) gives on ``profile``'s hardware: ``k_fast`` above its
    bandwidth threshold, else ``k`` (``k`` where the profile states no bandwidth)."""
    from ..profiles import ProfileError, load_profile

    try:
        bandwidth = load_profile(profile).hardware.memory_bandwidth_gb_s
    except ProfileError:
        bandwidth = None
    fast = "k_fast" in article and bandwidth is not None and bandwidth > article["bandwidth_gb_s"]
    return int(article["k_fast"] if fast else article["k"])


def _derive_best_k(summary, derive, article):
    """The K with the best speedup per sweep (profile, method, workload, batch size and set
    acceptance), among the sweeps that gain at all and measured the K the rule gives on their
    hardware (:func:`rule_k`); the rule holds if that K is the best in most of them. A sweep
    that never beats the baseline, or never tried the rule's K, decides nothing."""
    import pandas as pd

    df = _rows_for(summary, derive)
    if df.empty or df["num_speculative_tokens"].nunique() < 2:
        return None
    keys = ["profile", "method", "workload", "batch_size", "acceptance_alpha"]
    parts, decided, hits = [], 0, 0
    for key, g in df.groupby(keys, dropna=False, sort=True):
        if g["num_speculative_tokens"].nunique() < 2:
            continue
        best = g.loc[g["speedup"].idxmax()]
        want = rule_k(article, key[0])
        alpha = "" if pd.isna(key[4]) else f", set α {key[4]:g}"
        parts.append(f"{key[0]}/{key[1]} ({key[2]}, batch {int(key[3])}{alpha}): best K="
                     f"{int(best.num_speculative_tokens)} ({best.speedup:.2f}x; the rule: {want})")
        if best["speedup"] > 1 and want in set(g["num_speculative_tokens"]):
            decided += 1
            hits += int(best["num_speculative_tokens"] == want)
    if not parts:
        return None
    if not decided:
        return None, "; ".join(parts) + "; no sweep both beats the baseline and tried the " \
                                        "rule's K, so none decides", list(df["cell_id"])
    return (("reproduced" if hits > decided / 2 else "contradicted"),
            "; ".join(parts) + f"; the rule's K is the best in {hits} of {decided} sweeps "
            "that decide", list(df["cell_id"]))


def acceptance_by_temperature(summary, experiments=("temperature",)):
    """Acceptance rate per (profile, method) x temperature (speculative cells only)."""
    df = in_experiments(summary, experiments)
    df = df[(df["method"] != "baseline") & df["acceptance_rate"].notna()]
    return df.pivot_table(index=["profile", "method"], columns="temperature",
                          values="acceptance_rate", aggfunc="mean")


def _derive_temperature(summary, derive, article):
    """Acceptance at each temperature; the claim holds if it falls as temperature rises."""
    table = acceptance_by_temperature(summary, derive.experiments)
    if table.empty or table.shape[1] < 2:
        return None
    parts = [f"{p}/{m}: " + ", ".join(f"T={t:g} {a:.0%}" for t, a in row.dropna().items())
             for (p, m), row in table.iterrows()]
    falls = [row.dropna().iloc[0] > row.dropna().iloc[-1] for _, row in table.iterrows()]
    cells = list(in_experiments(summary, derive.experiments)["cell_id"])
    return ("reproduced" if all(falls) else "contradicted"), \
        "acceptance by temperature: " + "; ".join(parts), cells


#: The rules by name (the names a ledger may use are :data:`specdec.claims.ledger.RULES`).
DERIVATIONS: dict[str, Callable] = {
    "best_k": _derive_best_k,
    "speedup_at_k": _at("k"),
    "speedup_at_batch": _at("batch"),
    "method_speedup": _derive_method,
    "acceptance_vs_temperature": _derive_temperature,
}


def _article_text(article: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in article.items()) or "no figure"


def derive_verdict(claim: Claim, root: Path | None = None) -> dict[str, Any]:
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

    derive = claim.derive
    base = {"verdict": claim.verdict, "observed": claim.observed.strip(),
            "evidence": list(claim.evidence), "basis": "ledger", "cells": []}
    if derive is None:
        return base
    article = claim.article
    setting = claim.article_setting()
    rule = DERIVATIONS[derive.rule]
    self_drafts = tuple(derive.bound_methods)
    summ = summary(list(derive.profiles), root)
    got = other = bound = None
    insane = None
    why_not = ""
    if summ is not None:
        is_self = summ["method"].isin(self_drafts)
        insane = failed_sanity_bound(summ[is_self], derive.experiments)
        comps = pd.Series(comparability.compare_rows(setting, summ, self_drafts),
                          index=summ.index, dtype=object)
        like = comps.map(lambda c: c.comparable).astype(bool)
        got = rule(summ[like], derive, article)
        other = rule(summ[~like & ~is_self], derive, article)
        bound = rule(summ[~like & is_self], derive, article)
        if other is not None:
            why_not = comparability.summarize(comps[summ["cell_id"].isin(other[2]) & ~like
                                                    & ~is_self])
    where = f"{', '.join(derive.profiles)} experiment(s) {', '.join(derive.experiments)}"
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
    if claim.verdict != "pending-measurement":
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
