"""Figures of the speedup surface (:mod:`specdec.surface`), on the book's theme and palette.

One panel per batch size, set acceptance alpha on the x axis, one line per method; the
conventions of :mod:`specdec.plots` hold (error bars are the CI columns, red rings mark
unstable cells, the subtitle names profile, device and vLLM version). A black cross marks a
cell whose realised acceptance missed the set one (``acceptance_follows_set`` False).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from . import leases, plots, protocol
from .profiles import BASELINE

ALPHA_LABEL = "set acceptance α (position i accepted with α^(i+1))"


def _panels(df: pd.DataFrame | None, title: str, ylabel: str, sharey: bool = True):
    plots.set_theme()
    batches = sorted(df["batch_size"].dropna().unique()) if df is not None and len(df) else []
    n = max(len(batches), 1)
    cols = 2 if n > 2 else n  # two panels a row: the page is narrow
    rows = -(-n // cols)
    fig = Figure(figsize=(4.2 * cols + 1.8, 3.2 * rows + 0.8), layout="constrained")
    grid = fig.subplots(rows, cols, sharey=sharey, sharex=True, squeeze=False)
    axes = list(grid.flat)
    for ax in axes[n:]:
        ax.remove()
    axes = axes[:n]
    fig.suptitle(title)
    cap = plots.caption(df) if df is not None else ""
    fig.supxlabel(f"{ALPHA_LABEL}\n{cap}", fontsize="small", color="0.25")
    fig.supylabel(ylabel, fontsize="small")
    return fig, axes, batches


def _legend(fig: Figure, axes) -> None:
    """One legend for all panels, outside on the right (panels are narrow)."""
    seen: dict = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, h)
    fig.legend(list(seen.values()), list(seen), loc="outside right center", fontsize="x-small")


def _missed(ax, g: pd.DataFrame, y: str, state: dict) -> None:
    if "acceptance_follows_set" not in g:
        return
    bad = g[g["acceptance_follows_set"].astype(object).eq(False)]
    if len(bad):
        ax.scatter(bad["acceptance_alpha"], bad[y], marker="x", color="black", s=60, zorder=6,
                   label=None if state.get("missed") else "realised acceptance ≠ set")
        state["missed"] = True


def speedup_vs_alpha(df: pd.DataFrame | None,
                     title: str = "Speedup against set acceptance",
                     spread: Mapping[str, float] | None = None) -> Figure:
    """Measured speedup (with CI) against set alpha, a panel per batch size; ``spread`` (as
    :func:`plots.speedup_vs_batch` takes it) shades a method's line by ± half of it.

    Input: :func:`surface.table` rows (speculative cells with ``acceptance_alpha``).
    """
    need = ["method", "batch_size", "acceptance_alpha", "speedup"]
    d = None if df is None else df[(df["method"] != BASELINE) & df["acceptance_alpha"].notna()]
    fig, axes, batches = _panels(d, title, plots.SPEEDUP_LABEL)
    if d is None or plots._is_empty(d, need):
        plots._no_data(axes[0])
        return fig
    state: dict = {}
    for ax, b in zip(axes, batches):
        g = d[d["batch_size"] == b]
        plots._baseline_line(ax)
        plots._spread_bands(ax, g, "acceptance_alpha", spread)
        plots._lines(ax, g.drop(columns=["batch_size"]), "acceptance_alpha", "speedup",
                     "speedup_ci_low", "speedup_ci_high")
        _missed(ax, g, "speedup", state)
        ax.set_title(f"batch {int(b)}", fontsize="small")
        ax.get_legend().remove()
    _legend(fig, axes)
    return fig


def step_time_vs_alpha(df: pd.DataFrame | None,
                       title: str = "Time per target step against set acceptance") -> Figure:
    """Measured ms per target forward pass (drafting included) against set alpha; the
    baseline's ms per decode step is the dashed grey line of each panel.

    Input: :func:`surface.table` rows, baseline rows included.
    """
    need = ["method", "batch_size", "step_ms"]
    fig, axes, batches = _panels(df, title, "ms per target step (median pass / steps)",
                                 sharey=False)
    if df is None or plots._is_empty(df, need):
        plots._no_data(axes[0])
        return fig
    spec = df[(df["method"] != BASELINE) & df["acceptance_alpha"].notna()]
    for ax, b in zip(axes, batches):
        base = df[(df["method"] == BASELINE) & (df["batch_size"] == b)]["step_ms"]
        if len(base):
            ax.axhline(float(base.median()), color="0.45", linestyle="--", linewidth=1,
                       label="baseline decode step")
        plots._lines(ax, spec[spec["batch_size"] == b].drop(columns=["batch_size"]),
                     "acceptance_alpha", "step_ms", flags=("unstable",))
        ax.set_ylim(bottom=0)
        ax.set_title(f"batch {int(b)}", fontsize="small")
        ax.get_legend().remove()
    _legend(fig, axes)
    return fig


def dynamic_k(df: pd.DataFrame | None, alpha: float,
              title: str = "vLLM's dynamic K against fixed K") -> Figure:
    """Speedup against batch size at one set alpha, a panel per dynamic-K method: the dynamic
    schedule, the fixed K it chose at each batch, and the best fixed K measured there.

    Input: :func:`surface.dynamic_vs_fixed` rows. All three are measured.
    """
    d = None if df is None else df[df["acceptance_alpha"] == alpha]
    methods = sorted(d["method"].unique()) if d is not None and len(d) else []
    n = max(len(methods), 1)
    fig, axes = plots.figure(f"{title} (set α = {alpha:g})", (4.4 * n + 1.8, 3.6), ncols=n,
                             sharey=True)
    fig.supxlabel(f"batch size\n{plots.caption(d) if d is not None and len(d) else ''}",
                  fontsize="small", color="0.25")
    fig.supylabel(plots.SPEEDUP_LABEL, fontsize="small")
    if not methods:
        plots._no_data(axes[0])
        return fig
    series = [("speedup", "dynamic K (vLLM schedule)", "o", "C0"),
              ("fixed_same_k", "fixed K, the K the schedule chose", "s", "C1"),
              ("best_fixed", "best fixed K measured at that batch", "^", "C2")]
    for ax, m in zip(axes, methods):
        g = d[d["method"] == m].sort_values("batch_size")
        plots._baseline_line(ax)
        for col, label, marker, color in series:
            ax.plot(g["batch_size"], g[col], marker=marker, color=color, label=label)
        for _, r in g.iterrows():
            ax.annotate(f"K={round(r['k_used'])}", (r["batch_size"], r["speedup"]),
                        textcoords="offset points", xytext=(0, -12), ha="center",
                        fontsize="x-small", color="C0")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(g["batch_size"].unique()),
                      [str(int(b)) for b in sorted(g["batch_size"].unique())])
        ax.set_title(m, fontsize="small")
    _legend(fig, axes)
    return fig


def k_sweep(lines: pd.DataFrame | None, own: pd.DataFrame | None = None,
            spread: pd.Series | None = None,
            title: str = "Speedup against K, read from cost") -> Figure:
    """The K sweep: a row of panels per method, one per batch size, one line per set alpha
    (with CI error bars). A cell taken from another lease than its line's (``other_lease``)
    is drawn hollow; ``own`` adds the same configuration as the control panel of the line's
    lease measured it, as stars: where a hollow point and a star differ, the lease did.
    ``spread`` (:func:`protocol.method_spread`, per method) shades each line by ± half the
    method's largest move between control panels: its uncertainty from lease to lease.

    Input: :func:`protocol.sweep_own_panel`'s two frames.
    """
    plots.set_theme()
    need = ["method", "batch_size", "num_speculative_tokens", "acceptance_alpha", "speedup"]
    d = None if lines is None or plots._is_empty(lines, need) else lines.dropna(subset=need)
    methods = sorted(d["method"].unique()) if d is not None else []
    batches = sorted(d["batch_size"].unique()) if d is not None else []
    nr, nc = max(len(methods), 1), max(len(batches), 1)
    fig = Figure(figsize=(3.4 * nc + 1.8, 3.0 * nr + 0.9), layout="constrained")
    axes = fig.subplots(nr, nc, sharex=True, squeeze=False)
    fig.suptitle(title)
    fig.supxlabel(f"{plots.K_LABEL}\n{plots.caption(d) if d is not None else ''}",
                  fontsize="small", color="0.25")
    fig.supylabel(plots.SPEEDUP_LABEL, fontsize="small")
    if d is None:
        plots._no_data(axes[0][0])
        return fig
    colours = {a: f"C{i}" for i, a in enumerate(sorted(d["acceptance_alpha"].unique()))}
    own = own if own is not None else pd.DataFrame(columns=need[:4] + ["speedup_cost"])
    for (i, m), (j, b) in ((x, y) for x in enumerate(methods) for y in enumerate(batches)):
        ax = axes[i][j]
        plots._baseline_line(ax)
        for a, g in d[(d["method"] == m) & (d["batch_size"] == b)].groupby("acceptance_alpha"):
            g = g.sort_values("num_speculative_tokens")
            ax.errorbar(g["num_speculative_tokens"], g["speedup"],
                        yerr=plots._errors(g, "speedup", "speedup_ci_low", "speedup_ci_high", 1.0),
                        color=colours[a], marker="o", capsize=3, label=f"set α = {a:g}")
            s = spread.get(m) if spread is not None else None
            if s is not None and pd.notna(s) and s > 0:
                ax.fill_between(g["num_speculative_tokens"], g["speedup"] * (1 - s / 2),
                                g["speedup"] * (1 + s / 2), color=colours[a], alpha=0.12,
                                linewidth=0, label="spread between control panels")
            other = g[g["other_lease"]]
            if len(other):
                ax.scatter(other["num_speculative_tokens"], other["speedup"], s=70, zorder=5,
                           facecolor="white", edgecolor=colours[a], linewidth=1.5,
                           label="measured in another lease")
            star = own[(own["method"] == m) & (own["batch_size"] == b) & (own["acceptance_alpha"] == a)]
            if len(star):
                ax.scatter(star["num_speculative_tokens"], star["speedup_cost"], marker="*",
                           s=110, zorder=6, color=colours[a],
                           label="the line's own lease (control panel)")
        ax.set_title(f"{m}, batch {int(b)}", fontsize="small")
        plots._integer_ticks(ax, d["num_speculative_tokens"])
    _legend(fig, list(axes.flat))
    return fig


def lease_label(lease_id: str, phase: str | None = None) -> str:
    """A short axis label for a lease's panel: its number and the phase's initial
    (``2026-12-03-h200-10``, ``start`` -> ``10s``); an id without a number stays whole."""
    head, _, n = str(lease_id).rpartition("-")
    return (n if n.isdigit() else str(lease_id)) + (str(phase)[0] if phase else "")


def panel_chart(table: pd.DataFrame, metric: str = "step_ms",
                title: str = "The control panel, lease by lease") -> Figure:
    """A control chart: each panel cell's ``metric`` relative to its first measurement, one
    point per lease and phase (start, end) in time order, one line per cell; the band is the
    protocol's ±3 % agreement."""
    fig, (ax,) = plots.figure(title, (8.0, 3.8))
    if table is None or table.empty:
        plots._no_data(ax, "no control panel measured yet")
        return fig
    order = table.drop_duplicates(["lease_id", "panel_phase"])[["lease_id", "panel_phase"]]
    labels = [lease_label(l, p) for l, p in zip(order["lease_id"], order["panel_phase"])]
    pos = {(l, p): i for i, (l, p) in enumerate(zip(order["lease_id"], order["panel_phase"]))}
    palette = plots.method_palette(sorted(set(table["method"])))
    ax.axhspan(-3, 3, color="0.9", zorder=0, label="±3 %")
    for cid, g in table.groupby("cell_id"):
        g = g.assign(_x=[pos[(l, p)] for l, p in zip(g["lease_id"], g["panel_phase"])]).sort_values("_x")
        rel = 100.0 * (g[metric] / g[metric].iloc[0] - 1.0)
        r = g.iloc[0]
        ax.plot(g["_x"], rel, marker="o", color=palette[r["method"]],
                linestyle="-" if r["batch_size"] == 1 else "--",
                label=f"{r['method']} ({r['runner']}), batch {r['batch_size']}")
    ax.set_xticks(range(len(labels)), labels, fontsize="x-small", rotation=60)
    ax.set_xlabel("lease number; s: its start panel, e: its end panel", fontsize="small")
    ax.set_ylabel(f"{metric.replace('_', ' ')}: % from the first panel")
    ax.axhline(0, color="0.4", linewidth=0.8)
    fig.supxlabel(plots.caption(table), fontsize="small", color="0.25")
    fig.legend(loc="outside right upper", fontsize="x-small")
    return fig


def stability_by_method(cells: pd.DataFrame, threshold: float = 0.03,
                        title: str = "How much a cell's repeats vary") -> Figure:
    """Each cell's coefficient of variation over its repeats (throughput and step time), by
    method and runner; the line is the protocol's 3 % limit."""
    fig, axes = plots.figure(title, (8.0, 3.6), ncols=2, sharey=True)
    if cells is None or cells.empty:
        plots._no_data(axes[0])
        return fig
    d = cells.assign(who=cells["method"] + " (" + cells["runner"].fillna("?") + ")")
    order = sorted(set(d["who"]))
    for ax, col, name in ((axes[0], "tok_s_cv", "throughput"), (axes[1], "step_ms_cv", "step time")):
        for i, who in enumerate(order):
            v = 100.0 * d.loc[d["who"] == who, col].astype(float)
            ax.scatter(v, [i] * len(v), alpha=0.7, s=25)
        ax.axvline(100 * threshold, color="crimson", linewidth=1)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel(f"CV of {name} over repeats (%)")
    axes[0].set_yticks(range(len(order)), order, fontsize="small")
    fig.supxlabel(plots.caption(cells), fontsize="small", color="0.25")
    return fig


def host_bound_chart(reps: pd.DataFrame,
                     title: str = "Does the step wait on the host?") -> Figure:
    """Each timed repeat's step time relative to its cell's median against the GPU's busy
    share over the repeat (NVML) and against the engine's CPU seconds per second of the
    repeat, one colour per method and runner: a step that waits on the host slows as the GPU
    idles, and a V2 step whose host work is hidden behind the GPU's slows once the engine's
    core runs out of CPU time to hide it in."""
    fig, axes = plots.figure(title, (8.0, 3.8), ncols=2, sharey=True)
    d = reps.dropna(subset=["gpu_util_pct"]) if reps is not None and len(reps) else None
    if d is None or d.empty:
        plots._no_data(axes[0], "no repeat carries the host's stamps yet")
        return fig
    d = d.assign(who=d["method"] + " (" + d["runner"].fillna("?") + ")")
    palette = plots.method_palette(sorted(set(d["method"])))
    for who, g in d.groupby("who"):
        style = dict(s=18, alpha=0.7, color=palette[g["method"].iloc[0]],
                     marker="o" if g["runner"].iloc[0] == "V2" else "^", label=who)
        axes[0].scatter(g["gpu_util_pct"], 100.0 * g["step_rel"], **style)
        p = g.dropna(subset=["engine_cpu_share"])
        if len(p):
            axes[1].scatter(p["engine_cpu_share"], 100.0 * p["step_rel"], **style)
    axes[0].set_xlabel("GPU busy (NVML, %)")
    axes[1].set_xlabel("engine CPU seconds per second")
    axes[0].set_ylabel("step time: % from its cell's median")
    for ax in axes:
        ax.axhspan(-3, 3, color="0.9", zorder=0)
        ax.axhline(0, color="0.4", linewidth=0.8)
    fig.supxlabel(plots.caption(d), fontsize="small", color="0.25")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize="x-small")
    return fig


def vcpu_speed_chart(shared: pd.DataFrame, fit: pd.DataFrame,
                     title: str = "The step against its vCPU's speed") -> Figure:
    """Each timed repeat's step time relative to its cell's median against the share of the
    repeat its engine's vCPU spent at the slow speed (:func:`specdec.protocol.slow_share`),
    one colour per method and runner, with each method's least-squares line
    (:func:`specdec.protocol.vcpu_speed_fit`): a step whose host work waits on the CPU rises
    with the share; one whose host work is hidden behind the GPU's stays flat."""
    fig, (ax,) = plots.figure(title, (6.4, 3.8))
    if shared is None or shared.empty:
        plots._no_data(ax, "no repeat carries the probe on the engine's vCPU yet")
        return fig
    palette = plots.method_palette(sorted(set(shared["method"])))
    lines = fit.set_index(["method", "runner"]) if len(fit) else None
    for (method, runner), g in shared.groupby(["method", "runner"]):
        ax.scatter(g["slow_share"], 100.0 * g["step_rel"], s=18, alpha=0.7, color=palette[method],
                   marker="o" if runner == "V2" else "^", label=f"{method} ({runner})")
        if lines is not None and (method, runner) in lines.index:
            ln = lines.loc[(method, runner)]
            ax.plot([0, 1], [100.0 * ln["rel_at_fast"], 100.0 * ln["rel_at_slow"]],
                    color=palette[method], linewidth=1.2)
    ax.axhspan(-3, 3, color="0.9", zorder=0)
    ax.axhline(0, color="0.4", linewidth=0.8)
    ax.set_xlim(-0.03, 1.03)
    ax.set_xlabel("share of the repeat at the slow speed (probe on the engine's vCPU)")
    ax.set_ylabel("step time: % from its cell's median")
    fig.supxlabel(plots.caption(shared), fontsize="small", color="0.25")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize="x-small")
    return fig


def probe_across_leases_chart(reps: pd.DataFrame, fit: pd.DataFrame,
                              title: str = "The panel's step against its engine's vCPU, lease to lease"
                              ) -> Figure:
    """Each control-panel repeat's step time against the probe on its engine's vCPU, one panel
    per batch size, one colour per method and runner, with each one's least-squares line
    (:func:`specdec.protocol.probe_across_leases`): a step that waits on the host climbs with
    the probe from one lease to the next; one whose host work hides behind the GPU's stays
    flat."""
    d = protocol.panel_probe_repeats(reps)
    batches = sorted(d["batch_size"].unique()) if len(d) else [None]
    fig, axes = plots.figure(title, (4.2 * len(batches) + 1.4, 3.6), ncols=len(batches), sharey=True)
    if d.empty:
        plots._no_data(axes[0], "no panel repeat carries the probe on the engine's vCPU yet")
        return fig
    palette = plots.method_palette(sorted(set(d["method"])))
    lines = fit.set_index(["method", "runner", "batch_size"]) if len(fit) else None
    for ax, b in zip(axes, batches):
        for (method, runner), g in d[d["batch_size"] == b].groupby(["method", "runner"]):
            x = g["engine_vcpu_probe_us"] / 1000.0
            ax.scatter(x, g["step_ms"], s=16, alpha=0.7, color=palette[method],
                       marker="o" if runner == "V2" else "^", label=f"{method} ({runner})")
            if lines is not None and (method, runner, b) in lines.index:
                ln = lines.loc[(method, runner, b)]
                xs = np.array([x.min(), x.max()])
                ax.plot(xs, ln["intercept_ms"] + ln["ms_per_probe_ms"] * xs, color=palette[method],
                        linewidth=1.2)
        ax.set_title(f"batch {int(b)}", fontsize="small")
        ax.set_xlabel("probe on the engine's vCPU (ms)")
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("step time (ms)")
    fig.supxlabel(plots.caption(d), fontsize="small", color="0.25")
    handles = {lab: h for ax in axes for h, lab in zip(*ax.get_legend_handles_labels())}
    fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize="x-small")
    return fig


def vcpu_survey_chart(survey: pd.DataFrame,
                      title: str = "The same Python on each vCPU, alone") -> Figure:
    """The CPU probe's time on every vCPU (:func:`specdec.worker.vcpu_survey`), one panel per
    survey (lease and phase), one point per pass over the vCPUs: two speeds on any vCPU,
    changing from one pass to the next, is a host that shares its cores with other work."""
    order = {"start": 0, "end": 1}
    groups = (sorted(survey.groupby(["lease_id", "panel_phase"]),
                     key=lambda x: (leases.order(x[0][0]), order.get(x[0][1], 2)))
              if len(survey) else [])
    fig, axes = plots.figure(title, (4.0 * max(len(groups), 1) + 0.6, 3.4),
                             ncols=max(len(groups), 1), sharey=True)
    if not groups:
        plots._no_data(axes[0], "no vCPU survey stored yet")
        return fig
    for ax, ((lease, phase), g) in zip(axes, groups):
        for rnd, r in g.groupby("pass"):
            ax.scatter(r["vcpu"], r["probe_us"] / 1000.0, s=16, alpha=0.75, label=f"pass {rnd + 1}")
        ax.set_title(f"{lease}, {phase}", fontsize="small")
        ax.set_xlabel("vCPU")
        ax.set_xticks(sorted(g["vcpu"].unique())[::2])
    axes[0].set_ylabel("CPU probe (ms, median of its runs)")
    axes[0].set_ylim(bottom=0)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize="x-small")
    return fig
