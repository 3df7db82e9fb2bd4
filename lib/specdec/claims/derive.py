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


def _set_cells_text(df) -> str:
    """Cells whose acceptance is set (synthetic rejection sampling), best per set α: a
    ceiling of that α, never a figure a draft reaches (the rule of C30)."""
    parts = []
    for alpha, g in df.groupby("acceptance_alpha", sort=True):
        b = g.loc[g["speedup"].idxmax()]
        parts.append(f"α {alpha:g}: {b.profile}/{b.method} K={b.num_speculative_tokens} "
                     f"batch={b.batch_size} {b.speedup:.2f}x")
    return (f"at set α, not reached ({_cells(df)}, the best at each α, a ceiling of that "
            f"α and no figure a draft reaches): " + "; ".join(parts))


def _best(df, derive, article):
    """Our best speedup against the article's (the caller passes comparable cells only).

    Only cells whose acceptance was reached take part in the best: the best of cells at a
    set acceptance is the ceiling of the largest α, so those are shown per α, labelled.
    """
    is_set = df["acceptance_alpha"].notna()
    reached, parts, verdict = df[~is_set], [], None
    if len(reached):
        best = reached.loc[reached["speedup"].idxmax()]
        verdict = "reproduced" if _close(best.speedup, article["speedup"]) else "contradicted"
        parts.append(f"best of {_cells(reached)}: {_fmt_cell(best)}")
    if is_set.any():
        parts.append(_set_cells_text(df[is_set]))
    return verdict, "; ".join(parts), list(df["cell_id"])


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
    whose best does not beat the baseline (its interval reaching 1), or that never tried the
    rule's K, decides nothing. Where the rule's K is not the best but its speedup lies inside
    the best's interval, it is named a tie (counted apart, never as a hit), as the K sweep
    chapter reads one."""
    import pandas as pd

    df = _rows_for(summary, derive)
    if df.empty or df["num_speculative_tokens"].nunique() < 2:
        return None
    keys = ["profile", "method", "workload", "batch_size", "acceptance_alpha"]
    parts, deciding, hits, ties = [], [], 0, 0
    for key, g in df.groupby(keys, dropna=False, sort=True):
        if g["num_speculative_tokens"].nunique() < 2:
            continue
        best = g.loc[g["speedup"].idxmax()]
        want = rule_k(article, key[0])
        alpha = "" if pd.isna(key[4]) else f", set α {key[4]:g}"
        label = f"{key[0]}/{key[1]} ({key[2]}, batch {int(key[3])}{alpha})"
        parts.append(f"{label}: best K={int(best.num_speculative_tokens)} "
                     f"({best.speedup:.2f}x; the rule: {want})")
        if best["speedup_ci_low"] > 1 and want in set(g["num_speculative_tokens"]):
            deciding.append(label)
            if best["num_speculative_tokens"] == want:
                hits += 1
            elif (g.loc[g["num_speculative_tokens"] == want, "speedup"]
                  >= best["speedup_ci_low"]).any():  # inside the best's interval, as the K sweep reads a tie
                ties += 1
    if not parts:
        return None
    cells = list(df["cell_id"])
    if not deciding:
        return None, "; ".join(parts) + "; no sweep both beats the baseline and tried the " \
                                        "rule's K, so none decides", cells
    n = len(deciding)
    text = (f"; {n} sweep{'s' if n > 1 else ''} beat{'' if n > 1 else 's'} the baseline and "
            f"tried the rule's K ({'; '.join(deciding)}): the rule's K is the best in {hits} "
            f"of {n}" + (f", within the best's interval in {ties} more" if ties else ""))
    return ("reproduced" if hits > n / 2 else "contradicted"), "; ".join(parts) + text, cells


def _speculative_in(summary, experiments):
    df = in_experiments(summary, experiments)
    return df[(df["method"] != "baseline") & df["acceptance_rate"].notna()]


def acceptance_by_temperature(summary, experiments=("temperature",)):
    """Acceptance rate per (profile, method) x temperature (speculative cells only), each
    mean over the (K, workload, batch size) measured at every temperature of that method:
    a K measured at one temperature only would move that temperature's mean."""
    import pandas as pd

    df = _speculative_in(summary, experiments)
    keys = ["profile", "method", "num_speculative_tokens", "workload", "batch_size"]
    paired = df.pivot_table(index=keys, columns="temperature", values="acceptance_rate",
                            aggfunc="mean")
    rows = {}
    for pm, g in paired.groupby(level=["profile", "method"], sort=True):
        # the temperatures this method has at all, then the cells measured at each of them
        rows[pm] = g.dropna(axis=1, how="all").dropna().mean()
    out = pd.DataFrame.from_dict(rows, orient="index").sort_index(axis=1)
    if len(out):
        out.index = pd.MultiIndex.from_tuples(out.index, names=["profile", "method"])
        out.columns.name = "temperature"
    return out


def _derive_temperature(summary, derive, article):
    """Acceptance at each temperature; the claim holds if it falls as temperature rises."""
    table = acceptance_by_temperature(summary, derive.experiments)
    if table.empty or table.shape[1] < 2:
        return None
    parts = [f"{p}/{m}: " + ", ".join(f"T={t:g} {a:.0%}" for t, a in row.dropna().items())
             for (p, m), row in table.iterrows()]
    falls = [row.dropna().iloc[0] > row.dropna().iloc[-1] for _, row in table.iterrows()]
    cells = list(_speculative_in(summary, derive.experiments)["cell_id"])
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


def _unmet(summ, derive, article, where: str) -> str:
    """Why the rule has no cell: no rows at all, or none at the article's condition."""
    rows = None if summ is None else _rows_for(summ, derive)
    if rows is None or rows.empty:
        return f"no measured rows yet for {where}"
    condition = {"speedup_at_k": ("k", "num_speculative_tokens", "K"),
                 "speedup_at_batch": ("batch", "batch_size", "batch")}.get(derive.rule)
    if condition is None:
        return f"no cell of {where} meets the rule {derive.rule}"
    key, column, name = condition
    measured = ", ".join(str(int(v)) for v in sorted(rows[column].unique()))
    return (f"no cell at the article's {name} {article[key]} in {where} "
            f"(measured at {name} {measured})")


def _cells(ids) -> str:
    return f"{len(ids)} cell{'s' if len(ids) != 1 else ''}"


def _article_text(article: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in article.items()) or "no figure"


def derive_verdict(claim: Claim, root: Path | None = None) -> dict[str, Any]:
    """The claim's verdict now: derived from rows for claims with a rule, else the ledger's.

    Rows of ``derive.profiles`` are split by the comparability rule
    (:func:`specdec.comparability.compare` against the claim's ``setting``): only cells in
    the article's setting can decide; the others give *our figure in our setting*. Methods
    in ``derive.bound_methods`` (the target drafting for itself) are a sanity bound: if one
    accepts less than :data:`SANITY_ACCEPTANCE`, no row of its campaign is used.

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
    where = f"{', '.join(derive.profiles)} experiment(s) {', '.join(derive.experiments)}"
    text = base["observed"]
    ev = list(base["evidence"])
    got = other = bound = None
    why_not = ""
    if summ is not None:
        # The target as its own draft must accept ~everything; where it does not, the engine
        # itself is broken for its campaign and no row of that campaign can decide the claim.
        insane = {p: why for p, g in summ[summ["method"].isin(self_drafts)].groupby("profile")
                  if (why := failed_sanity_bound(g, derive.experiments)) is not None}
        for p, why in insane.items():
            text += (f" Rows of {p} are not used: "
                     f"the sanity bound failed ({why}), so they measure an engine fault, not "
                     f"the claim.")
            ev.append(f"rows: {p} (sanity bound failed)")
        summ = summ[~summ["profile"].isin(insane)]
        if insane and in_experiments(summ, derive.experiments).empty:
            verdict = base["verdict"]
            return {**base, "verdict": verdict, "observed": text, "evidence": ev,
                    "basis": "pending" if verdict == "pending-measurement" else "ledger"}
        is_self = summ["method"].isin(self_drafts)
        comps = pd.Series(comparability.compare_rows(setting, summ, self_drafts),
                          index=summ.index, dtype=object)
        like = comps.map(lambda c: c.comparable).astype(bool)
        got = rule(summ[like], derive, article)
        other = rule(summ[~like & ~is_self], derive, article)
        bound = rule(summ[~like & is_self], derive, article)
        if other is not None:
            why_not = comparability.summarize(comps[summ["cell_id"].isin(other[2]) & ~like
                                                    & ~is_self])
    if got is None and other is None and bound is None:
        text += " Measured figure: " + _unmet(summ, derive, article, where) + "."
    if got is not None:
        text += (f" Measured in the article's setting ({setting.describe()}): {got[1]} "
                 f"(article: {_article_text(article)}).")
        ev.append(f"rows: {where} ({_cells(got[2])} in the article's setting)")
    if other is not None:
        text += (f" Our figure in our setting, not comparable with the article's "
                 f"({why_not}): {other[1]}.")
        ev.append(f"rows: {where} ({_cells(other[2])} in our setting only)")
    if bound is not None:
        text += (f" The target as its own draft (a sanity bound, never a verdict): "
                 f"{bound[1]}.")
        ev.append(f"rows: {where} ({_cells(bound[2])}, the sanity bound)")
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
