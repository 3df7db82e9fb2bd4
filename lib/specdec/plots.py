"""Figures: one function per figure type, one theme, one palette for the whole book.

Each function takes a tidy DataFrame (from :mod:`specdec.metrics` or
:mod:`specdec.theory`), draws nothing it did not receive, and returns a
:class:`matplotlib.figure.Figure` (not registered with pyplot, so a notebook
shows it once). Empty input gives a figure that says "no data". Error bars are
the CI columns of the input; a dashed line marks the baseline (speedup 1);
colours follow :func:`method_palette`, so a method has one colour in every
chapter; cells flagged unstable (CV above the threshold) get a red ring.
A small subtitle names the profile, its hardware and device, and vLLM version.
"""
from __future__ import annotations

import functools
import zlib
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from .profiles import BASELINE, ProfileError, load_profile

#: Methods with a fixed colour (index into the palette); others are placed by a hash of the name.
#: The baseline is always grey, so it takes no palette slot.
KNOWN_METHODS = ("ngram", "suffix", "draft-self", "draft-trunc-8", "draft-trunc-16",
                 "draft_model", "eagle", "eagle3", "medusa", "draft-1layer", "draft-1b")
#: Columns that, when they vary inside one figure's data, split a method into several lines.
VARIANT_COLUMNS = ("profile", "workload", "batch_size", "num_speculative_tokens", "temperature",
                   "compilation", "acceptance_alpha")
_SHORT = {"profile": "", "workload": "", "batch_size": "b=", "num_speculative_tokens": "K=",
          "temperature": "T=", "compilation": "compile=", "acceptance_alpha": "α="}
_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")

SPEEDUP_LABEL = "speedup over baseline (× output tokens/s)"
K_LABEL = "draft tokens per step, K"
BATCH_LABEL = "batch size (requests per generate call)"


def set_theme() -> None:
    """The book's one theme (seaborn whitegrid, notebook context, colour-blind palette)."""
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind",
                  rc={"figure.figsize": (6.4, 4.2), "figure.dpi": 100, "savefig.dpi": 150,
                      "axes.titlesize": "medium", "legend.fontsize": "small"})


@functools.lru_cache(maxsize=1)
def _palette() -> tuple:
    # Greys are left out: grey is the baseline's colour.
    colours = sns.color_palette("colorblind", 10) + sns.color_palette("dark", 10)
    return tuple(c for c in colours if max(c) - min(c) > 0.05)


def method_palette(methods: Sequence[str]) -> dict[str, tuple]:
    """Colour of each method: fixed for :data:`KNOWN_METHODS`, hashed for others.

    The baseline is always grey. A hashed colour already taken in the same call
    moves to the next free one, so one figure never shows two methods alike.
    """
    pal = _palette()
    # Hashed methods draw from the slots no known method owns, so a hashed colour does not
    # depend on which known methods share the figure; only when those run out do they spill.
    free = [j for j in range(len(pal)) if j >= len(KNOWN_METHODS)]
    out: dict[str, tuple] = {}
    used = set()
    for m in sorted(set(methods), key=lambda m: (m not in KNOWN_METHODS, m)):
        if m == BASELINE:
            out[m] = (0.45, 0.45, 0.45)
            continue
        if m in KNOWN_METHODS:
            order = [KNOWN_METHODS.index(m)]
        else:
            start = zlib.crc32(m.encode()) % len(free)
            order = [free[(start + step) % len(free)] for step in range(len(free))]
        j = next((j for j in order + list(range(len(pal))) if j not in used), order[0])
        used.add(j)
        out[m] = pal[j]
    return out


@functools.lru_cache(maxsize=None)
def _hardware_label(profile: str) -> str | None:
    try:
        return load_profile(profile).hardware.label
    except (ProfileError, OSError):
        return None


def caption(df: pd.DataFrame) -> str:
    """'profile (hardware) · device · vLLM version' from the rows' own columns.

    Rows without these columns (e.g. ``theory.what_if`` output) can be given them
    with ``df.assign(profile=..., device_name=..., vllm_version=...)``.
    """
    parts = []
    for p in _distinct(df, "profile"):
        hw = _hardware_label(p)
        parts.append(f"{p} ({hw})" if hw else p)
    pieces = ["; ".join(parts)] if parts else []
    dev = _distinct(df, "device_name")
    if dev:
        pieces.append(f"device {', '.join(dev)}")
    ver = _distinct(df, "vllm_version")
    if ver:
        pieces.append(f"vLLM {', '.join(ver)}")
    return " · ".join(pieces)


def _distinct(df: pd.DataFrame, col: str) -> list[str]:
    if col not in df.columns:
        return []
    return sorted({str(v) for v in df[col] if pd.notna(v)})


def _figure(title: str, df: pd.DataFrame, xlabel: str, ylabel: str):
    fig, (ax,) = figure(title)
    ax.set_title(caption(df), fontsize="x-small", color="0.35", loc="left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return fig, ax


def figure(title: str, size: tuple[float, float] | None = None, ncols: int = 1,
           sharey: bool = False):
    """A themed, titled figure of ``ncols`` panels side by side (``size``: matplotlib's default
    where None): (figure, list of axes)."""
    set_theme()
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(1, ncols, sharey=sharey, squeeze=False)[0]
    fig.suptitle(title)
    return fig, list(axes)


def _no_data(ax, what: str = "no data") -> None:
    ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center",
            fontsize="large", color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _is_empty(df: pd.DataFrame | None, needed: Sequence[str]) -> bool:
    if df is None or len(df) == 0:
        return True
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ValueError(f"plot input lacks column(s) {', '.join(missing)}")
    return df[list(needed)].dropna().empty


def _variants(df: pd.DataFrame, x: str) -> list[str]:
    return [c for c in VARIANT_COLUMNS if c in df.columns and c != x and df[c].nunique() > 1]


def _label(method: str, cols: Sequence[str], values: Sequence) -> str:
    extra = ", ".join(f"{_SHORT[c]}{v:g}" if isinstance(v, float) else f"{_SHORT[c]}{v}"
                      for c, v in zip(cols, values))
    return f"{method} ({extra})" if extra else method


def _errors(g: pd.DataFrame, y: str, lo: str | None, hi: str | None, scale: float = 1.0):
    if lo is None or hi is None or lo not in g or hi not in g:
        return None
    yv = g[y].to_numpy(float)
    low = np.nan_to_num(yv - g[lo].to_numpy(float), nan=0.0).clip(min=0)
    high = np.nan_to_num(g[hi].to_numpy(float) - yv, nan=0.0).clip(min=0)
    return np.vstack([low, high]) * scale


_SPEEDUP_FLAGS = ("unstable", "baseline_unstable")  # a speedup is as shaky as either side


def _mark_unstable(ax, g: pd.DataFrame, x: str, y: str, scale: float, state: dict,
                   flags: Sequence[str] = _SPEEDUP_FLAGS) -> None:
    flag = pd.Series(False, index=g.index)
    for col in flags:
        if col in g:
            flag |= g[col].fillna(False).astype(bool)
    if flag.any():
        ax.scatter(g.loc[flag, x], g.loc[flag, y] * scale, s=160, facecolors="none",
                   edgecolors="red", linewidths=1.2, zorder=5,
                   label=None if state.get("unstable") else "unstable (CV above threshold)")
        state["unstable"] = True


def _lines(ax, df: pd.DataFrame, x: str, y: str, lo=None, hi=None, scale: float = 1.0,
           flags: Sequence[str] = _SPEEDUP_FLAGS) -> None:
    """One line per method (and per variant), with CI error bars and unstable rings."""
    df = df.dropna(subset=[x, y])
    colours = method_palette(df["method"])
    variants = _variants(df, x)
    styles = {v: i for i, v in enumerate(sorted({tuple(r) for r in df[variants].itertuples(
        index=False)}, key=str))} if variants else {(): 0}
    state: dict = {}
    for key, g in df.groupby(["method"] + variants, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        method, vals = key[0], tuple(key[1:])
        g = g.sort_values(x)
        i = styles.get(vals, 0)
        ax.errorbar(g[x], g[y] * scale, yerr=_errors(g, y, lo, hi, scale), color=colours[method],
                    linestyle=_LINESTYLES[i % len(_LINESTYLES)],
                    marker=_MARKERS[i % len(_MARKERS)], capsize=3,
                    label=_label(method, variants, vals))
        _mark_unstable(ax, g, x, y, scale, state, flags)
    ax.legend(loc="best")


def _baseline_line(ax) -> None:
    ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1, label="baseline (1×)", zorder=1)


def _integer_ticks(ax, values) -> None:
    ticks = sorted({int(v) for v in values if pd.notna(v)})
    if ticks:
        ax.set_xticks(ticks)


def _speculative(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["method"] != BASELINE] if "method" in df else df


def speedup_vs_k(df: pd.DataFrame, title: str = "Speedup vs K") -> Figure:
    """Speedup (with its CI) against K, one line per method. Input: with_speedup rows."""
    fig, ax = _figure(title, df if df is not None else pd.DataFrame(), K_LABEL, SPEEDUP_LABEL)
    need = ["method", "num_speculative_tokens", "speedup"]
    if _is_empty(df, need) or _is_empty(_speculative(df), need):
        _no_data(ax)
        return fig
    d = _speculative(df)
    _baseline_line(ax)
    _lines(ax, d, "num_speculative_tokens", "speedup", "speedup_ci_low", "speedup_ci_high")
    _integer_ticks(ax, d["num_speculative_tokens"])
    return fig


def acceptance_vs_k(df: pd.DataFrame, y: str = "acceptance_rate",
                    title: str = "Acceptance vs K") -> Figure:
    """Acceptance against K, one line per method. Input: summarize rows.

    ``y``: ``"acceptance_rate"`` (accepted/draft tokens, plotted in %) or
    ``"mean_acceptance_length"`` (tokens per target step).
    """
    labels = {"acceptance_rate": "acceptance rate (accepted / draft tokens, %)",
              "mean_acceptance_length": "mean acceptance length (tokens per target step)"}
    if y not in labels:
        raise ValueError(f"y must be one of {', '.join(labels)}, got {y!r}")
    fig, ax = _figure(title, df if df is not None else pd.DataFrame(), K_LABEL, labels[y])
    need = ["method", "num_speculative_tokens", y]
    if _is_empty(df, need) or _is_empty(_speculative(df), need):
        _no_data(ax)
        return fig
    d = _speculative(df)
    # acceptance is pooled engine counters: the throughput CV flag does not apply
    _lines(ax, d, "num_speculative_tokens", y, scale=100.0 if y == "acceptance_rate" else 1.0,
           flags=())
    if y == "acceptance_rate":
        ax.set_ylim(-2, 102)
    _integer_ticks(ax, d["num_speculative_tokens"])
    return fig


def acceptance_vs_temperature(df: pd.DataFrame,
                              title: str = "Acceptance vs temperature") -> Figure:
    """Acceptance rate (%) against sampling temperature, one line per method. summarize rows."""
    fig, ax = _figure(title, df if df is not None else pd.DataFrame(), "sampling temperature",
                      "acceptance rate (accepted / draft tokens, %)")
    need = ["method", "temperature", "acceptance_rate"]
    if _is_empty(df, need) or _is_empty(_speculative(df), need):
        _no_data(ax)
        return fig
    # acceptance is pooled engine counters: the throughput CV flag does not apply
    _lines(ax, _speculative(df), "temperature", "acceptance_rate", scale=100.0, flags=())
    ax.set_ylim(-2, 102)
    return fig


def verdict_counts(ledger: pd.DataFrame, verdicts: Sequence[str], kinds: Sequence[str],
                   title: str = "Verdicts, claim by claim") -> Figure:
    """Stacked horizontal bars: claims per verdict, split by kind of claim.

    ``ledger``: one row per claim with ``verdict`` and ``kind`` columns
    (:func:`specdec.claims.tables.ledger_table`); ``verdicts``/``kinds`` fix the order, zeros kept.
    """
    set_theme()
    fig = Figure(layout="constrained", figsize=(7.6, 3.4))
    ax = fig.add_subplot()
    fig.suptitle(title)
    ax.set_xlabel(f"claims of the article ({0 if ledger is None else len(ledger)} in all)")
    if _is_empty(ledger, ["verdict", "kind"]):
        _no_data(ax)
        return fig
    counts = (ledger.groupby(["verdict", "kind"]).size().unstack(fill_value=0)
              .reindex(index=list(verdicts), columns=list(kinds), fill_value=0))
    left = np.zeros(len(counts))
    for kind, colour in zip(kinds, _palette()):
        ax.barh(counts.index, counts[kind], left=left, color=colour, label=kind)
        left += counts[kind].to_numpy()
    for y, total in enumerate(left):
        ax.text(total + 0.15, y, str(int(total)), va="center", fontsize="small")
    # room for the longest bar's label inside the axes, clear of the legend beside them
    ax.set_xlim(0, left.max() * 1.1 + 1)
    ax.invert_yaxis()
    ax.legend(title="kind", loc="center left", bbox_to_anchor=(1.02, 0.5))
    return fig


def _batch_axis(ax, values) -> None:
    ax.set_xscale("log", base=2)
    _integer_ticks(ax, values)
    ax.set_xticklabels([str(t) for t in ax.get_xticks().astype(int)])
    ax.minorticks_off()


SPREAD_LABEL = "spread between control panels"


def speedup_vs_batch(df: pd.DataFrame, title: str = "Speedup vs batch size",
                     spread: Mapping[str, float] | None = None) -> Figure:
    """Speedup (with CI) against batch size (log2 axis), one line per method. with_speedup rows.
    ``spread`` (a method's largest move between control panels, :func:`protocol.method_spread`,
    given for the methods whose figures move with the host) shades its line by ± half of it."""
    fig, ax = _figure(title, df if df is not None else pd.DataFrame(), BATCH_LABEL, SPEEDUP_LABEL)
    need = ["method", "batch_size", "speedup"]
    if _is_empty(df, need) or _is_empty(_speculative(df), need):
        _no_data(ax)
        return fig
    d = _speculative(df)
    _baseline_line(ax)
    _spread_bands(ax, d, "batch_size", spread)
    _lines(ax, d, "batch_size", "speedup", "speedup_ci_low", "speedup_ci_high")
    _batch_axis(ax, d["batch_size"])
    if spread:
        _legend_beside(fig, ax)
    return fig


def _spread_bands(ax, df: pd.DataFrame, x: str, spread: Mapping[str, float] | None) -> None:
    """Each method of ``spread`` (its largest move between control panels) shaded ± half of it
    around its speedup line against ``x``."""
    colours = method_palette(df["method"])
    for m, g in df.dropna(subset=["speedup"]).groupby("method"):
        s = (spread or {}).get(m)
        if s is not None and pd.notna(s) and s > 0:
            g = g.sort_values(x)
            ax.fill_between(g[x], g["speedup"] * (1 - s / 2), g["speedup"] * (1 + s / 2),
                            color=colours[m], alpha=0.15, linewidth=0,
                            label=f"{m}: {SPREAD_LABEL} (±{s / 2:.0%})")


def _legend_beside(fig, ax) -> None:
    """The legend right of the axes, the figure widened for it: with the spread entries it is
    too tall to sit inside without hiding data."""
    fig.set_size_inches(9.5, 4.8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small")


def throughput_vs_batch(df: pd.DataFrame, title: str = "Throughput vs batch size") -> Figure:
    """Median output tokens/s (with CI) against batch size, baseline included. summarize rows."""
    fig, ax = _figure(title, df if df is not None else pd.DataFrame(), BATCH_LABEL,
                      "output tokens/s (median over repeats)")
    need = ["method", "batch_size", "tok_s_median"]
    if _is_empty(df, need):
        _no_data(ax)
        return fig
    _lines(ax, df, "batch_size", "tok_s_median", "tok_s_ci_low", "tok_s_ci_high",
           flags=("unstable",))
    _batch_axis(ax, df["batch_size"])
    return fig


def method_comparison(df: pd.DataFrame, title: str = "Methods compared",
                      spread: Mapping[str, float] | None = None) -> Figure:
    """Bars of speedup (with CI) per method, grouped by workload (and other varying columns);
    ``spread`` (as :func:`speedup_vs_batch` takes it) adds a wide, pale bar of ± half of it
    beside a method's interval.

    Input: with_speedup rows; one bar per method and group.
    """
    fig, ax = _figure(title, df if df is not None else pd.DataFrame(), "workload", SPEEDUP_LABEL)
    need = ["method", "workload", "speedup"]
    if _is_empty(df, need) or _is_empty(_speculative(df), need):
        _no_data(ax)
        return fig
    d = _speculative(df).dropna(subset=["speedup"])
    group_cols = ["workload"] + [c for c in _variants(d, "workload") if c != "workload"]
    def order(group):  # numbers by value (batch 4 before 16), the rest by name
        return [(0, v, "") if isinstance(v, (int, float, np.number)) else (1, 0, str(v))
                for v in group]
    groups = sorted({tuple(r) for r in d[group_cols].itertuples(index=False)}, key=order)
    methods = sorted(d["method"].unique())
    colours = method_palette(methods)
    width = 0.8 / len(methods)
    state: dict = {}
    for j, m in enumerate(methods):
        g = d[d["method"] == m]
        pos = {grp: i for i, grp in enumerate(groups)}
        xs = np.array([pos[tuple(r)] for r in g[group_cols].itertuples(index=False)], float)
        xs = xs - 0.4 + width * (j + 0.5)
        ax.bar(xs, g["speedup"], width=width * 0.95, color=colours[m], label=m)
        # error bars drawn apart: matplotlib's bar(yerr=) trips over a single bar's 2x1 array
        ax.errorbar(xs, g["speedup"], yerr=_errors(g, "speedup", "speedup_ci_low",
                                                   "speedup_ci_high"),
                    fmt="none", ecolor="0.2", capsize=3)
        sp = (spread or {}).get(m)
        if sp is not None and pd.notna(sp) and sp > 0:  # the host's part, beside the interval
            ax.errorbar(xs + width * 0.2, g["speedup"], yerr=g["speedup"].to_numpy() * sp / 2,
                        fmt="none", ecolor=colours[m], elinewidth=3, alpha=0.45, capsize=0,
                        label=f"{m}: {SPREAD_LABEL} (±{sp / 2:.0%})")
        _mark_unstable(ax, g.assign(_x=xs), "_x", "speedup", 1.0, state)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([_label(str(g[0]), group_cols[1:], g[1:]).replace("(", "\n(")
                        for g in groups])
    ax.set_xlabel(" / ".join(group_cols).replace("num_speculative_tokens", "K"))
    _baseline_line(ax)
    if spread:
        _legend_beside(fig, ax)
    else:
        ax.legend(loc="best")
    return fig


def acceptance_per_position(df: pd.DataFrame,
                            title: str = "Acceptance by draft position") -> Figure:
    """Rate of acceptance at each draft position (accepted at i / drafts, %). summarize rows.

    A token at position i is accepted only if all before it were, so the rate
    can only fall with i.
    """
    fig, ax = _figure(title, df if df is not None else pd.DataFrame(),
                      "draft position (1 = first draft token)",
                      "accepted at position / drafts (%)")
    if df is None or len(df) == 0 or "accepted_per_pos_rate" not in df:
        _no_data(ax)
        return fig
    rows = []
    for _, r in df.iterrows():
        rates = r["accepted_per_pos_rate"]
        if rates is None or (np.isscalar(rates) and pd.isna(rates)):
            continue
        for i, v in enumerate(rates, start=1):
            rows.append({**r.drop("accepted_per_pos_rate").to_dict(), "position": i, "rate": v})
    long = pd.DataFrame(rows)
    if long.empty:
        _no_data(ax)
        return fig
    _lines(ax, long, "position", "rate", scale=100.0, flags=())
    ax.set_ylim(-2, 102)
    _integer_ticks(ax, long["position"])
    return fig


def theory_vs_measured(predictions: pd.DataFrame,
                       title: str = "Analytical model vs measurement") -> Figure:
    """Predicted (model) against measured speedup per cell; the diagonal is a perfect fit.

    Input: ``theory.fit(...).predictions``. Circles are training cells, triangles
    held-out cells; horizontal bars are the measured speedup's CI. The subtitle
    adds the held-out median and max absolute error (%).
    """
    fig, ax = _figure(title, predictions if predictions is not None else pd.DataFrame(),
                      "measured speedup (×)", "predicted speedup (×, model)")
    need = ["method", "speedup", "predicted_speedup"]
    if _is_empty(predictions, need):
        _no_data(ax)
        return fig
    d = predictions.dropna(subset=need)
    colours = method_palette(d["method"])
    split = d["split"] if "split" in d else pd.Series("test", index=d.index)
    for (m, s), g in d.groupby([d["method"], split], sort=True):
        ax.errorbar(g["speedup"], g["predicted_speedup"],
                    xerr=_errors(g, "speedup", "speedup_ci_low", "speedup_ci_high"),
                    color=colours[m], marker="o" if s == "train" else "^", linestyle="none",
                    capsize=2, label=f"{m} ({'fitted on' if s == 'train' else 'held out'})")
    lo = min(d["speedup"].min(), d["predicted_speedup"].min()) * 0.95
    hi = max(d["speedup"].max(), d["predicted_speedup"].max()) * 1.05
    ax.plot([lo, hi], [lo, hi], color="0.3", linestyle="--", linewidth=1,
            label="prediction = measurement")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    held = d[split == "test"]
    if len(held) and "abs_pct_error" in held:
        ax.set_title(f"{caption(d)} · held-out error: median "
                     f"{held['abs_pct_error'].median():.1f} %, max "
                     f"{held['abs_pct_error'].max():.1f} % (n={len(held)})",
                     fontsize="x-small", color="0.35", loc="left")
    ax.legend(loc="best")
    return fig


def what_if_acceptance(what_if_df: pd.DataFrame, reference_points=None, x: str = "alpha",
                       title: str = "Predicted speedup vs acceptance (model)") -> Figure:
    """Model-predicted speedup against acceptance, one line per K (``theory.what_if`` rows).

    ``x``: ``"alpha"`` (per-token acceptance) or ``"acceptance_rate"`` (accepted
    / draft tokens, as vLLM reports it), plotted in %. ``reference_points``: the
    article's claimed acceptances, as a mapping ``label -> value`` or rows with
    ``label``, a ``value`` in the units of ``x`` (fraction) and optionally the
    claimed ``speedup``; each is drawn as a labelled vertical line (and a star at
    the claimed speedup), marked "article's claim".
    """
    labels = {"alpha": "per-token acceptance α (%)",
              "acceptance_rate": "acceptance rate (accepted / draft tokens, %)"}
    if x not in labels:
        raise ValueError(f"x must be one of {', '.join(labels)}, got {x!r}")
    fig, ax = _figure(title, what_if_df if what_if_df is not None else pd.DataFrame(),
                      labels[x], "predicted speedup (×, model)")
    need = ["num_speculative_tokens", x, "predicted_speedup"]
    if _is_empty(what_if_df, need):
        _no_data(ax)
        return fig
    d = what_if_df.dropna(subset=need)
    ks = sorted(d["num_speculative_tokens"].unique())
    colours = dict(zip(ks, sns.color_palette("viridis", len(ks))))
    for k, g in d.groupby("num_speculative_tokens", sort=True):
        g = g.sort_values(x)
        ax.plot(g[x] * 100, g["predicted_speedup"], color=colours[k], label=f"K={k}")
    _baseline_line(ax)
    if "cost_ratio" in d:
        costs = ", ".join(f"{c:.3g}" for c in sorted(d["cost_ratio"].unique()))
        ax.set_title(f"{caption(d)} · cost ratio c = {costs}", fontsize="x-small",
                     color="0.35", loc="left")
    refs = _reference_rows(reference_points)
    for i, r in enumerate(refs):
        xv = 100 * float(r["value"])
        ax.axvline(xv, color="crimson", linestyle=":", linewidth=1.2,
                   label="article's claim" if i == 0 else None)
        ax.annotate(f"article's claim: {r['label']}", xy=(xv, 1.0),
                    xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                    fontsize="x-small", color="crimson")
        if r.get("speedup") is not None and pd.notna(r.get("speedup")):
            ax.scatter([xv], [float(r["speedup"])], marker="*", s=140, color="crimson", zorder=6,
                       label="article's claimed speedup" if i == 0 else None)
    ax.set_xlim(0, 100)
    ax.legend(loc="upper left")
    return fig


def _reference_rows(reference_points) -> list[dict]:
    if reference_points is None:
        return []
    if isinstance(reference_points, Mapping):
        return [{"label": str(k), "value": float(v)} for k, v in reference_points.items()]
    rows = (reference_points.to_dict("records") if isinstance(reference_points, pd.DataFrame)
            else [dict(r) for r in reference_points])
    for r in rows:
        if "label" not in r or "value" not in r:
            raise ValueError("reference_points rows need 'label' and 'value'")
    return rows
