"""Sentences that data can overturn, generated from the rows and glued like numbers.

A chapter states a conclusion such as "prompt lookup is the method that paid here" only as
the output of a function over stored rows, so the sentence changes when new rows arrive.
Conclusions about methods read only cells whose acceptance a draft *reached* (trained
weights, standard rejection sampling: :mod:`specdec.comparability`): acceptance set by
synthetic rejection sampling prices a method, it does not show that the method pays.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from . import comparability, paths

#: Methods whose draft is the target itself: a sanity bound, not a method to deploy.
SELF_DRAFTS = ("draft-self",)
#: vLLM method -> the family named in prose.
FAMILIES = {"ngram": "prompt lookup", "suffix": "prompt lookup", "draft_model": "a draft model",
            "eagle": "EAGLE", "eagle3": "EAGLE-3", "medusa": "Medusa", "mtp": "MTP"}
SELF_FAMILY = "the target as its own draft"
#: Summary columns the sentences read (an absent summary is read as empty with these).
_COLUMNS = ["profile", "method", "num_speculative_tokens", "batch_size", "workload",
            "temperature", "speedup", "speedup_ci_low", "speedup_status", "acceptance_rate",
            "acceptance_alpha", "peak_memory_bytes", "experiment_tags", "cell_id"]


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def family(profile: str, method: str, self_drafts=SELF_DRAFTS) -> str:
    """The family of a profile's method as prose names it."""
    if method in self_drafts:
        return SELF_FAMILY
    setting = comparability.profile_setting(profile)
    vllm_method = setting.methods.get(method, method) if setting else method
    return FAMILIES.get(vllm_method, vllm_method or "no speculation")


def cells_by_origin(summary: pd.DataFrame, origin: str,
                    self_drafts=SELF_DRAFTS) -> pd.DataFrame:
    """Greedy speculative cells with a speedup whose acceptance has ``origin``
    (:data:`comparability.REACHED`, ``SET`` or ``RANDOM_WEIGHTS``), with a ``family`` column."""
    if summary is None or summary.empty:
        empty = summary if summary is not None else pd.DataFrame(columns=_COLUMNS)
        return empty.iloc[:0].assign(family=pd.Series(dtype=object))
    df = summary[(summary["method"] != "baseline") & (summary["temperature"] == 0)
                 & (summary["speedup_status"] == "ok")]
    df = df[[o == origin for o in comparability.acceptance_origins(df)]]
    return df.assign(family=[family(p, m, self_drafts) for p, m in zip(df["profile"],
                                                                        df["method"])])


def reached_cells(summary: pd.DataFrame, self_drafts=SELF_DRAFTS) -> pd.DataFrame:
    """Greedy speculative cells with a speedup whose acceptance a draft reached, with a
    ``family`` column."""
    return cells_by_origin(summary, comparability.REACHED, self_drafts)


def _pays(r) -> bool:
    """A cell pays if the interval of its speedup lies above 1 (the median alone may be noise)."""
    low = r["speedup_ci_low"]
    return bool(r["speedup"] > 1 and (pd.isna(low) or low > 1))


def method_that_paid(summary: pd.DataFrame, self_drafts=SELF_DRAFTS) -> str:
    """The headline of what paid: the family (or families) whose best cell beat its baseline."""
    cells = reached_cells(summary, self_drafts)
    cells = cells[cells["family"] != SELF_FAMILY]
    if cells.empty:
        return "**No speculative method has measured rows with reached acceptance yet.**"
    best = cells.loc[cells.groupby("family")["speedup"].idxmax()].sort_values(
        "speedup", ascending=False)
    paying = [r["family"] for _, r in best.iterrows() if _pays(r)]
    if not paying:
        return ("**No method paid here**: no speculative cell beat its baseline beyond the "
                "interval of its median.")
    if len(paying) == 1:
        return f"**{_cap(paying[0])} is the method that paid here.**"
    return (f"**{_cap(paying[0])} paid most here**, ahead of " + ", ".join(paying[1:]) + ".")


def acceptance_by_workload(summary: pd.DataFrame, families=("prompt lookup",),
                           self_drafts=SELF_DRAFTS) -> str:
    """Where a family's acceptance is highest and lowest, by workload (mean over its cells)."""
    cells = reached_cells(summary, self_drafts)
    cells = cells[cells["family"].isin(families) & cells["acceptance_rate"].notna()]
    by = cells.groupby("workload")["acceptance_rate"].mean().sort_values(ascending=False)
    if len(by) < 2:
        return "not measured on more than one workload yet"
    parts = ", ".join(f"{w} {_pct(a)}" for w, a in by.items())
    return (f"its acceptance is highest on {by.index[0]} and lowest on {by.index[-1]} "
            f"(mean over cells: {parts})")


def self_draft_sentence(summary: pd.DataFrame, self_drafts=SELF_DRAFTS) -> str:
    """What the target drafting for itself did: accepted how much, and whether it paid."""
    from .claims import SANITY_ACCEPTANCE

    cells = reached_cells(summary, self_drafts)
    cells = cells[cells["family"] == SELF_FAMILY]
    if cells.empty:
        return "The target as its own draft is not measured yet"
    acc = cells["acceptance_rate"].min()
    accepts = ("accepts everything" if acc >= SANITY_ACCEPTANCE
               else f"accepts only {_pct(acc)} of its draft tokens at worst")
    if cells["speedup"].max() < 1:
        return (f"The target as its own draft {accepts} and still loses at every measured K "
                f"and batch size: acceptance alone does not make speculation pay; the draft's "
                f"cost decides")
    best = cells.loc[cells["speedup"].idxmax()]
    return (f"The target as its own draft {accepts} and gains at best "
            f"{best['speedup']:.2f}× ({best['method']}, K={int(best['num_speculative_tokens'])}, "
            f"batch {int(best['batch_size'])}), although it costs a full target pass per token")


def lossless_headline(tally: pd.DataFrame, bold: bool = True) -> str:
    """Whether greedy speculation reproduced its baseline wherever it was compared, per dtype
    (:func:`lossless_tally`): exact arithmetic makes it lossless, a dtype whose verification
    pass rounds otherwise than single-token decoding need not be."""
    if tally.empty:
        text = "losslessness was not checked yet"
    else:
        by = tally.groupby("dtype")[["cells", "identical"]].sum()
        held = [d for d, r in by.iterrows() if r["identical"] == r["cells"]]
        broke = [d for d in by.index if d not in held]
        if not broke:
            text = "greedy speculation was lossless where it was checked"
        elif held:
            text = (f"greedy speculation was lossless in {', '.join(held)} where it was "
                    f"checked, not always in {', '.join(broke)}")
        else:
            text = "greedy speculation was not lossless everywhere it was checked"
    return f"**{_cap(text)}**" if bold else text


def lossless_tally(root: Path | None = None, campaigns: Sequence[str] | None = None) -> pd.DataFrame:
    """Losslessness over every campaign (or ``campaigns``) with stored greedy outputs of real
    speculation (set acceptance and non-speculative controls left out: neither is meant to
    match), one row per dtype and hardware: the campaigns, the cells compared and those
    identical to their baseline token for token (:func:`specdec.metrics.losslessness`)."""
    from . import metrics, profiles, store

    rows = []
    for name in campaigns if campaigns is not None else profiles.list_profiles():
        prof = profiles.load_profile(name)
        if prof.reference_only or prof.superseded_by:
            continue
        tokens = store.load_tokens([name], root=Path(root) if root is not None else None)
        if tokens.empty:
            continue
        spec = {m.name for m in prof.methods if m.speculative is not None}
        cells = metrics.losslessness(tokens)
        cells = cells[(cells["status"] == "compared") & cells["method"].isin(spec)]
        if len(cells):
            setting = comparability.profile_setting(name)
            rows.append({"dtype": prof.engine.dtype,
                         "hardware": setting.hardware if setting else prof.hardware.kind,
                         "campaign": name, "cells": len(cells),
                         "identical": int(cells["identical_to_baseline"].sum())})
    per = pd.DataFrame(rows, columns=["dtype", "hardware", "campaign", "cells", "identical"])
    return (per.groupby(["dtype", "hardware"], as_index=False)
            .agg(campaigns=("campaign", ", ".join), cells=("cells", "sum"),
                 identical=("identical", "sum")))


def lossless_sentence(tally: pd.DataFrame) -> str:
    """:func:`lossless_tally` in one clause per dtype, float32 first: how many greedy
    speculative cells reproduced their baseline token for token, in which campaigns."""
    if tally.empty:
        return "no greedy speculative output is stored yet"
    parts = []
    for dtype, g in sorted(tally.groupby("dtype"), key=lambda x: x[0] != "float32"):
        where = "; ".join(f"`{r.campaigns.replace(', ', '`, `')}` on {r.hardware}"
                          for r in g.itertuples())
        parts.append(f"in {dtype}, {int(g['identical'].sum())} of {int(g['cells'].sum())} "
                     f"greedy speculative cells ({where})")
    return "; ".join(parts)


def acceptance_falls_with_k(summary: pd.DataFrame, self_drafts=SELF_DRAFTS) -> str:
    """Whether acceptance at the largest K is below that at the smallest K, per configuration
    measured at several K (the target as its own draft excluded: it accepts all by design)."""
    cells = reached_cells(summary, self_drafts)
    cells = cells[(cells["family"] != SELF_FAMILY) & cells["acceptance_rate"].notna()]
    keys = ["profile", "method", "workload", "batch_size"]
    falls, total = [], 0
    for key, g in cells.groupby(keys):
        if g["num_speculative_tokens"].nunique() < 2:
            continue
        total += 1
        g = g.sort_values("num_speculative_tokens")
        if g["acceptance_rate"].iloc[-1] < g["acceptance_rate"].iloc[0]:
            falls.append(key[1])
    if total == 0:
        return "acceptance against K is not measured yet"
    if len(falls) == total:
        every = {1: "the one configuration", 2: "both configurations"}.get(
            total, f"all {total} configurations")
        return f"acceptance falls with K (in {every} measured at several K)"
    return (f"acceptance fell with K in {len(falls)} of {total} configurations measured at "
            f"several K")


def gpu_campaigns(root: Path | None = None) -> str:
    """Which GPU campaigns have rows, and what their acceptance is (reached or not); the
    superseded ones last, named with their successor."""
    from . import profiles, store

    root = Path(root) if root is not None else None
    parts, missing, superseded = [], [], []
    for name in profiles.list_profiles():
        setting = comparability.profile_setting(name)
        prof = profiles.load_profile(name)
        if setting is None or setting.hardware == "CPU" or prof.reference_only:
            continue
        if prof.superseded_by:  # its rows have left but for what a chapter compares
            superseded.append(f"`{name}` (by `{prof.superseded_by}`)")
            continue
        runs = store.load_runs([name], root=root, only_ok=True)
        if runs.empty:
            missing.append(f"`{name}`")
            continue
        set_acc = runs["acceptance_alpha"].notna().any() if "acceptance_alpha" in runs else False
        kind = ("set acceptance and random weights: it prices speculation at a chosen acceptance"
                if set_acc else "random weights: its costs are real, its acceptance is not"
                if setting.random_weights else "trained weights")
        parts.append(f"`{name}` has {runs['cell_id'].nunique()} measured cells on "
                     f"{setting.hardware} ({kind})")
    text = "; ".join(parts) if parts else "no GPU campaign has measured rows yet"
    if missing:
        text += "; " + ", ".join(missing) + (" is" if len(missing) == 1 else " are") + \
            " prepared but not measured"
    if superseded:
        text += "; superseded: " + ", ".join(superseded)
    return text


def _trend(cells: pd.DataFrame) -> tuple[int, int, list[str]]:
    """(configurations lower at the largest batch, configurations, their descriptions)."""
    parts, lower, total = [], 0, 0
    if cells.empty:  # no rows (an empty frame may lack the columns too)
        return lower, total, parts
    for (p, m, k, w), g in cells.groupby(["profile", "method", "num_speculative_tokens",
                                          "workload"]):
        if g["batch_size"].nunique() < 2:
            continue
        g = g.sort_values("batch_size")
        first, last = g.iloc[0], g.iloc[-1]
        total += 1
        lower += bool(last["speedup"] < first["speedup"])
        parts.append(f"{m} (K = {int(k)}, {w}) on `{p}`: {first['speedup']:.2f}× at batch "
                     f"{int(first['batch_size'])}, {last['speedup']:.2f}× at batch "
                     f"{int(last['batch_size'])}")
    return lower, total, parts


def _trend_verdict(lower: int, total: int) -> str:
    where = "the one configuration" if total == 1 else None
    if lower == total:
        return f"lower at the largest batch than at the smallest in {where or 'every configuration'}"
    if lower == 0:
        return f"not lower at the largest batch in {where or 'any configuration'}"
    return f"lower at the largest batch in {lower} of {total} configurations"


def batch_trend(summary: pd.DataFrame, self_drafts=SELF_DRAFTS) -> str:
    """Whether the speedup at the largest measured batch is above or below the smallest's,
    per configuration measured at several batch sizes."""
    cells = reached_cells(summary, self_drafts)
    lower, total, parts = _trend(cells[cells["family"] != SELF_FAMILY])
    if total == 0:
        return "no configuration is measured at several batch sizes yet"
    return f"in our rows the speedup was {_trend_verdict(lower, total)} ({'; '.join(parts)})"


def batch_trend_at_set(table: pd.DataFrame | None, alpha: float, detail: bool = True) -> str:
    """The same, for cells whose acceptance was set at ``alpha`` at every batch size (vLLM's
    synthetic sampler; ``table`` with a speedup per cell, e.g. read from cost): the batch's
    effect on the cost alone; without ``detail``, the verdict without each configuration's ends."""
    none = (f"no configuration at a set acceptance of {alpha:g} is measured at several batch "
            f"sizes yet")
    if table is None or table.empty or "acceptance_alpha" not in table:
        return none
    cells = table[(table["method"] != "baseline")
                  & ((table["acceptance_alpha"] - alpha).abs() < 1e-9)]
    lower, total, parts = _trend(cells)
    if total == 0:
        return none
    return (f"with the acceptance set at α = {alpha:g} at every batch size, the speedup was "
            f"{_trend_verdict(lower, total)}" + (f" ({'; '.join(parts)})" if detail else ""))


def sanity_bound_sentence(summary: pd.DataFrame, self_drafts=SELF_DRAFTS) -> str:
    """Whether the target drafting for itself accepted what it must, wherever it ran."""
    from .claims import failed_sanity_bound

    if summary is None or summary.empty:
        return "no row of the target drafting for itself is stored yet"
    selfd = summary[summary["method"].isin(self_drafts)]
    if selfd.empty:
        return "no row of the target drafting for itself is stored yet"
    tags = sorted({t for tags in selfd["experiment_tags"] for t in tags})
    failed = failed_sanity_bound(selfd, tags)
    where = ", ".join(f"`{p}`" for p in sorted(selfd["profile"].unique()))
    if failed is None:
        return f"in this study's rows ({where}) it did, wherever it ran"
    return f"in this study's rows ({where}) it did not everywhere: {failed}"


def memory_vs_batch(summary: pd.DataFrame) -> str:
    """How much the measured peak memory moved across batch sizes, per method and campaign."""
    if summary is None or summary.empty:
        return "not measured yet"
    parts = []
    for (p, m), g in summary.dropna(subset=["peak_memory_bytes"]).groupby(["profile", "method"]):
        if g["batch_size"].nunique() < 2:
            continue
        lo, hi = g["peak_memory_bytes"].min(), g["peak_memory_bytes"].max()
        parts.append((hi / lo - 1, f"{m} on `{p}` {lo / 2**30:.2f}–{hi / 2**30:.2f} GiB"))
    if not parts:
        return "no method is measured at several batch sizes yet"
    worst = max(x for x, _ in parts)
    return (f"across batch sizes the peak moved by at most {100 * worst:.0f} % "
            f"({'; '.join(t for _, t in parts)})")


def self_draft_at_zero(summary: pd.DataFrame, lossless: pd.DataFrame | None,
                       self_drafts=SELF_DRAFTS) -> str:
    """Whether the greedy (T = 0) cells beside the self-draft are sound: it must accept what
    the sanity bound asks and reproduce the baseline."""
    from .claims import SANITY_ACCEPTANCE

    cells = summary[summary["method"].isin(self_drafts) & (summary["temperature"] == 0)] \
        if summary is not None and len(summary) else pd.DataFrame()
    if cells.empty:
        return "At T = 0 the self-draft is not measured yet"
    acc = cells["acceptance_rate"].min()
    same = None
    if lossless is not None and len(lossless):
        mine = lossless[lossless["cell_id"].isin(cells["cell_id"])
                        & (lossless["status"] == "compared")]
        if len(mine):
            same = (int(mine["identical_requests"].sum()), int(mine["compared"].sum()))
    identical = "" if same is None else \
        f", and {same[0]} of {same[1]} of its requests are token-identical to the baseline's"
    sound = acc >= SANITY_ACCEPTANCE and (same is None or same[0] == same[1])
    return (f"At T = 0 the measurement is {'sound' if sound else 'not sound either'}: the "
            f"self-draft accepts {_pct(acc)} of its draft tokens{identical}")


def best_k_by_hardware(best_k: pd.DataFrame) -> str:
    """Per campaign, whether the measured best K is one value or differs between methods
    (``best_k``: one row per method with ``profile``, ``method`` and ``best K``)."""
    if best_k is None or best_k.empty:
        return "no campaign has measured speedups yet, so the rule cannot be checked here"
    parts = []
    for p, g in best_k.groupby("profile"):
        ks = sorted({int(k) for k in g["best K"]})
        each = ", ".join(f"{r['method']} {int(r['best K'])}" for _, r in g.iterrows())
        parts.append(f"on `{p}` the best K " + (
            f"differs between methods ({each})" if len(ks) > 1
            else f"is {ks[0]} for every method ({each})"))
    return "; ".join(parts)


def methods_measured(vllm_methods=("eagle", "eagle3", "medusa", "mtp"),
                     root: Path | None = None) -> str:
    """Which of ``vllm_methods`` have rows in any campaign, and whether their acceptance is
    reached (trained heads) or not (set, or random weights)."""
    from . import profiles, store

    root = Path(root) if root is not None else None
    seen: dict[str, dict[str, tuple[set, int]]] = {}  # family -> profile -> (origins, cells)
    for name in profiles.list_profiles():
        setting = comparability.profile_setting(name)
        if setting is None or profiles.load_profile(name).superseded_by:
            continue  # a superseded campaign keeps only what a chapter compares it with
        wanted = [m for m, v in setting.methods.items() if v in vllm_methods]
        if not wanted:
            continue
        runs = store.load_runs([name], root=root, only_ok=True)
        if runs.empty:
            continue
        for m in wanted:
            rows = runs[runs["method"] == m]
            if rows.empty:
                continue
            origin = (comparability.SET if rows["acceptance_alpha"].notna().any()
                      else comparability.RANDOM_WEIGHTS if setting.random_weights
                      else comparability.REACHED)
            per = seen.setdefault(FAMILIES.get(setting.methods[m], m), {})
            origins, n = per.get(name, (set(), 0))
            per[name] = (origins | {origin}, n + rows["cell_id"].nunique())
    names = list(dict.fromkeys(FAMILIES.get(v, v) for v in vllm_methods))
    parts = []
    for n in names:
        where = [f"`{p}` ({' and '.join(sorted(o))} acceptance, {c} cells)"
                 for p, (o, c) in seen.get(n, {}).items()]
        parts.append(f"{n}: " + (", ".join(where) if where else "no rows"))
    return "; ".join(parts)


def crossover_sentences(crossover: pd.DataFrame) -> list[str]:
    """One clause per configuration of :func:`metrics.crossover_batch`: up to which batch it
    pays and where it stops (read off the measured grid, no interpolation)."""
    parts = []
    for r in crossover.itertuples():
        who = f"{r.method} (K = {r.num_speculative_tokens}, {r.workload}) on `{r.profile}`"
        if r.recovers:
            parts.append(f"{who} ran at " + ", ".join(f"{v:.2f}×" for v in r.speedups)
                         + " at batch " + ", ".join(map(str, r.batch_sizes)) + ": it pays "
                         "again after a batch where it did not, so no batch is where it stops")
        elif len(r.batch_sizes) == 1:
            pays = "pays" if pd.isna(r.crossover_batch) else "does not pay"
            parts.append(f"{who} {pays} at batch {r.batch_sizes[0]}, the only batch measured")
        elif pd.notna(r.crossover_batch) and pd.isna(r.last_paying_batch):
            parts.append(f"{who} does not pay even at the smallest batch, "
                         f"{int(r.crossover_batch)}")
        elif pd.notna(r.crossover_batch):
            parts.append(f"{who} pays up to batch {int(r.last_paying_batch)} and stops paying "
                         f"at batch {int(r.crossover_batch)}"
                         + (" (interval wholly below 1)" if r.crossover_ci_below_1 else ""))
        else:
            parts.append(f"{who} pays at every measured batch, up to {int(r.last_paying_batch)}")
    return parts


#: The clause where no configuration has a complete batch sweep.
NO_CROSSOVER = ("no campaign has a complete batch sweep with baselines yet, so no crossover "
                "can be given")


def _num(value, spec: str, suffix: str = "", missing: str = "–") -> str:
    return missing if value is None or pd.isna(value) else f"{value:{spec}}{suffix}"


def best_cell(cells: pd.DataFrame, missing: str = "*not measured*") -> str:
    """The fastest of ``cells`` with its interval and setting, e.g. ``1.52× [1.49, 1.55]
    (ngram, K=4, code, batch 1, `cpu-smollm2`, 62 % acceptance)``."""
    if cells is None or cells.empty:
        return missing
    r = cells.loc[cells["speedup"].idxmax()]
    acceptance = None if pd.isna(r["acceptance_rate"]) else 100 * r["acceptance_rate"]
    return (f"{_num(r['speedup'], '.2f', '×')} "
            f"[{_num(r['speedup_ci_low'], '.2f')}, {_num(r['speedup_ci_high'], '.2f')}] "
            f"({r['method']}, K={int(r['num_speculative_tokens'])}, {r['workload']}, "
            f"batch {int(r['batch_size'])}, `{r['profile']}`, "
            f"{_num(acceptance, '.0f', ' %')} acceptance)")


def best_of_family(summary: pd.DataFrame, family_name: str, self_drafts=SELF_DRAFTS,
                   missing: str = "*not measured*") -> str:
    """:func:`best_cell` among the greedy cells of one method family (:data:`FAMILIES`, or
    :data:`SELF_FAMILY`) whose acceptance a draft reached (:func:`reached_cells`)."""
    cells = reached_cells(summary, self_drafts)
    return best_cell(cells[cells["family"] == family_name], missing)
