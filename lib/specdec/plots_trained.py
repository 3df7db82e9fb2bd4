"""Figures of the chapter on real acceptance (trained heads and drafts; :mod:`specdec.acceptance`)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .acceptance import past_peak, stop_label
from .plots import _figure, _no_data, caption, figure, method_palette


def acceptance_by_method(df: pd.DataFrame, k: int,
                         title: str = "Acceptance of each method") -> Figure:
    """Bars of the acceptance rate (%) per method and workload at one K, one panel per
    sampling temperature. Input: summarize rows of one campaign (acceptance.speculative)."""
    d = pd.DataFrame() if df is None else df[df["num_speculative_tokens"] == k]
    temps = sorted(d["temperature"].unique()) if len(d) else [0.0]
    fig, ax = _figure(title, d, "workload", "acceptance rate (accepted / draft tokens, %)")
    if d.empty:
        _no_data(ax)
        return fig
    axes = _panels(fig, f"{title} (K = {k})", d, len(temps), 4.5)
    methods = sorted(d["method"].unique())
    colours = method_palette(methods)
    workloads = sorted(d["workload"].unique())
    width = 0.8 / len(methods)
    for ax, t in zip(axes, temps):
        g = d[d["temperature"] == t]
        for j, m in enumerate(methods):
            gm = g[g["method"] == m].set_index("workload").reindex(workloads)
            xs = np.arange(len(workloads)) - 0.4 + width * (j + 0.5)
            ax.bar(xs, 100 * gm["acceptance_rate"].to_numpy(float), width=width * 0.95,
                   color=colours[m], label=m)
        ax.set_xticks(range(len(workloads)))
        ax.set_xticklabels(workloads)
        ax.set_title(f"temperature {t:g}")
        ax.set_xlabel("workload")
    axes[0].set_ylabel("acceptance rate (accepted / draft tokens, %)")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return fig


def _panels(fig: Figure, title: str, d: pd.DataFrame, n: int, width: float) -> list:
    """Turn ``fig`` into ``n`` panels side by side sharing the y axis, with one title and the
    provenance caption of ``d`` under them all; returns the axes."""
    fig.set_size_inches(width * n + 1.5, 4.4)
    fig.clf()
    fig.suptitle(title)
    fig.supxlabel(caption(d), fontsize="x-small", color="0.35")
    return list(fig.subplots(1, n, sharey=True, squeeze=False)[0])


def conditional_by_position(long: pd.DataFrame,
                            title: str = "Acceptance at each draft position, given the earlier ones") -> Figure:
    """Conditional acceptance (%) against draft position, one line per method, mean over
    workloads (acceptance.per_position rows of one setting and temperature, one K per method:
    acceptance.longest_profiles)."""
    fig, ax = _figure(title, pd.DataFrame(), "draft position (1 = first draft token)",
                      "accepted, given every earlier position was (%)")
    if long is None or long.empty:
        _no_data(ax)
        return fig
    mean = long.groupby(["method", "position"])["conditional"].mean().reset_index()
    colours = method_palette(mean["method"])
    for m, g in mean.groupby("method"):
        ax.plot(g["position"], 100 * g["conditional"], marker="o", color=colours[m], label=m)
    ax.set_ylim(-2, 102)
    ax.set_xticks(sorted(mean["position"].unique()))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return fig


def acceptance_vs_k_by_weights(df: pd.DataFrame, recorded: str, retrained: str,
                               title: str = "Acceptance against K") -> Figure:
    """Acceptance rate (%) against K, one panel per workload, one colour per method: the
    recorded weights' cells as solid lines, the retrained weights' as dashed lines with open
    markers, so a K sweep measured partly with each shows which weights gave which point.
    Input: acceptance.speculative rows (Medusa as one method) of one machine and temperature."""
    d = pd.DataFrame() if df is None else df[df["profile"].isin([recorded, retrained])]
    fig, ax = _figure(title, d, "draft tokens per step, K", "acceptance rate (accepted / draft tokens, %)")
    if d.empty:
        _no_data(ax)
        return fig
    workloads = sorted(d["workload"].unique())
    axes = _panels(fig, title, d, len(workloads), 4.2)
    colours = method_palette(sorted(d["method"].unique()))
    for ax, w in zip(axes, workloads):
        for (m, p), line in d[d["workload"] == w].groupby(["method", "profile"]):
            line = line.sort_values("num_speculative_tokens")
            again = p == retrained
            ax.plot(line["num_speculative_tokens"], 100 * line["acceptance_rate"], marker="o",
                    color=colours[m], linestyle="--" if again else "-",
                    markerfacecolor="white" if again else colours[m],
                    label=f"{m} ({'retrained' if again else 'recorded'})")
        ax.set_title(w)
        ax.set_xlabel("K")
        ax.set_xticks(sorted(int(k) for k in d["num_speculative_tokens"].unique()))
        ax.set_ylim(-2, 102)
    axes[0].set_ylabel("acceptance rate (accepted / draft tokens, %)")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return fig


def training_curves(logs: pd.DataFrame,
                    title: str = "Agreement with the target during training") -> Figure:
    """Agreement at position 1 against the training step, one line per artifact: on each
    logged training batch (thin), its rolling mean over five logs (thick), and the held-out
    evaluations (markers). Input: :func:`specdec.acceptance.training_logs`."""
    fig, ax = _figure(title, pd.DataFrame(), "training step",
                      "agreement at position 1 (share of positions)")
    if logs is None or logs.empty:
        _no_data(ax)
        return fig
    colours = method_palette(sorted(logs["artifact"].unique()))
    for name, g in logs.groupby("artifact"):
        tr = g[g["event"] == "train"].dropna(subset=["acc1"]).sort_values("step")
        ev = g[g["event"] == "eval"].sort_values("step")
        ax.plot(tr["step"], tr["acc1"], color=colours[name], linewidth=0.6, alpha=0.4)
        ax.plot(tr["step"], tr["acc1"].rolling(5, min_periods=1).mean(), color=colours[name],
                linewidth=2, label=f"{name} (training batches)")
        ax.plot(ev["step"], ev["acc1"], color=colours[name], marker="D", linestyle="none",
                markersize=7, markeredgecolor="0.2", label=f"{name} (held out)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="x-small")
    fig.set_size_inches(9.5, 4.6)
    return fig


def _log_x(ax, ticks, base: int = 10) -> None:
    """A log x axis labelled at ``ticks`` in plain numbers (matplotlib labels only powers)."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.set_xscale("log", base=base)
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _run_colours(frame: pd.DataFrame, run: str) -> dict:
    """Each run's colour: its method's where it is the only run of that method, its own where
    runs share a method (the two distilled drafts), so no two lines of a figure look alike."""
    runs = frame[[run, "method"]].drop_duplicates()
    shared = runs["method"].duplicated(keep=False)
    key = dict(zip(runs[run], runs["method"].where(~shared, runs[run])))
    palette = method_palette(sorted(set(key.values())))
    return {name: palette[k] for name, k in key.items()}


def learning_curves(curves: pd.DataFrame, measured: pd.DataFrame,
                    earlier: pd.DataFrame | None = None,
                    title: str = "Learning curves of the plateau trainings") -> Figure:
    """Left: held-out agreement (mean over draft positions) against training seconds, one line
    per whole-data run (:func:`specdec.acceptance.plateau_curves`), dotted over each held-out
    sequence's first 64 tokens where the run recorded it. Right: the K = 4 acceptance
    rate that agreement predicts (line, open markers) beside vLLM's, measured on the checkpoints
    (filled markers: mean over the workloads, bars: their range;
    :func:`specdec.acceptance.plateau_measured`). With ``earlier``
    (:func:`specdec.acceptance.superseded_measured`), hollow diamonds: vLLM's measurement of
    the same recipe's earlier trainings on the same data (``one training``), each at its own
    training seconds, where they were measured on every workload the latest rows have:
    another training of the recipe, where the latest run's checkpoints may not be measured."""
    fig, (left, right) = figure(title, size=(11, 6.2), ncols=2)
    left.set_xlabel("training seconds (log scale)")
    left.set_ylabel("held-out agreement (mean over positions)")
    right.set_xlabel("training seconds (log scale)")
    right.set_ylabel("acceptance rate at K = 4")
    whole = curves[curves["data fraction"] == 1] if not curves.empty else curves
    if whole.empty:
        _no_data(left)
        _no_data(right)
        return fig
    colours = _run_colours(whole, "artifact")
    wl = [c for c in measured.columns if c.startswith("vLLM: ") and c != "vLLM: mean"]
    # an earlier training stands beside this run only where measured as its rows are
    earlier = earlier[earlier["one training"]].dropna(subset=wl) \
        if earlier is not None and not earlier.empty and wl and set(wl) <= set(earlier.columns) \
        else pd.DataFrame(columns=["run"])
    for name, g in whole.groupby("artifact"):
        g = g.sort_values("step")
        colour = colours[name]
        left.plot(g["training (s)"], g["agreement"], marker="o", color=colour, label=name)
        first = g.dropna(subset=["first-64 agreement"])  # recorded from lease 25 on
        if len(first):
            left.plot(first["training (s)"], first["first-64 agreement"], marker=".", color=colour,
                      linestyle=":", label=f"{name}: first 64 tokens")
        right.plot(g["training (s)"], g["predicted K=4 rate"], marker="o", markerfacecolor="white",
                   color=colour, linestyle="--", label=f"{name}: predicted from held-out")
        m = measured[(measured["run"] == name) & measured["latest"]] if not measured.empty \
            else measured  # the curve's own run, not an earlier training of the same recipe
        if not m.empty:
            lo, hi = m[wl].min(axis=1), m[wl].max(axis=1)
            right.errorbar(m["training (s)"], m["vLLM: mean"],
                           yerr=[m["vLLM: mean"] - lo, hi - m["vLLM: mean"]], marker="D",
                           color=colour, linestyle="none", capsize=3,
                           label=f"{name}: vLLM, measured")
        e = earlier[earlier["run"] == name]
        if not e.empty:
            right.plot(e["training (s)"], e["vLLM: mean"], marker="D", markersize=5,
                       markerfacecolor="white", color=colour, linestyle="none",
                       label=f"{name}: vLLM, earlier trainings of its recipe")
    lo, hi = whole["training (s)"].min(), whole["training (s)"].max()
    # 1-3-10 ticks across the runs' seconds (a log axis labels only the decades)
    ticks = [t for t in (1, 3, 10, 30, 100, 300, 1000, 3000, 10000) if lo / 1.5 <= t <= hi * 1.5]
    for ax in (left, right):
        _log_x(ax, ticks or [100])
        ax.set_ylim(0, 1)
    # below the panels: inside, ten entries hide the curves they name
    for ax in (left, right):
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize="x-small")
    return fig


def data_size_curves(sizes: pd.DataFrame,
                     title: str = "Data-size curves: each part of the data trained to its plateau") -> Figure:
    """Left: vLLM's acceptance rate at K = 4 (mean over the workloads, bars: their range)
    against the training sequences, one line per run trained on parts of its data
    (:func:`specdec.acceptance.plateau_data_sizes`). Right: the held-out agreement over the
    first 64 tokens of the same artifacts, what the plateau rule watched. A part that a time or
    step cap stopped is drawn hollow, off the line: "≥", a lower bound on its plateau, where it
    stopped still gaining; with the step of its best evaluation where it had stopped gaining."""
    fig, (left, right) = figure(title, size=(11, 4.2), ncols=2)
    for ax in (left, right):
        ax.set_xlabel("training sequences (log scale)")
    left.set_ylabel("acceptance rate at K = 4 (vLLM)")
    right.set_ylabel("held-out agreement, first 64 tokens")
    if sizes.empty:
        _no_data(left)
        _no_data(right)
        return fig
    colours = _run_colours(sizes, "run")
    wl = [c for c in sizes.columns if c.startswith("vLLM: ") and c != "vLLM: mean"]
    notes = []  # (panel, size, y, text): placed once all are known
    for run, g in sizes.groupby("run"):
        g = g.sort_values("sequences")
        colour = colours[run]
        on, off = g[g["on the curve"]], g[~g["on the curve"]]
        m = on.dropna(subset=["vLLM: mean"]) if "vLLM: mean" in g else g.iloc[:0]
        if len(m):
            lo, hi = m[wl].min(axis=1), m[wl].max(axis=1)
            left.errorbar(m["sequences"], m["vLLM: mean"],
                          yerr=[m["vLLM: mean"] - lo, hi - m["vLLM: mean"]], marker="D",
                          color=colour, capsize=3, label=run)
        right.plot(on["sequences"], on["first-64 agreement"], marker="o", color=colour, label=run)
        for _, r in off.iterrows():  # a cap stopped it: not a curve point
            note = f"({stop_label(r['stopped by'])}, {int(r['step'])} steps)"
            if past_peak(r):  # no lower bound: it had stopped gaining
                note = note[:-1] + f"; best at {int(r['peak step'])})"
            else:  # stopped still gaining: a lower bound on its plateau
                note = "≥ " + note
            note = f"{run.removeprefix('smollm2-')} {note}"
            for ax, y in ((left, r.get("vLLM: mean")), (right, r["first-64 agreement"])):
                if pd.notna(y):
                    ax.plot([r["sequences"]], [y], marker="D" if ax is left else "o", ls="none",
                            mfc="none", color=colour)
                    notes.append((ax, r["sequences"], y, note))
    # at one size, from the highest point down, the notes alternate right and left of their
    # points: two runs capped near the same value would otherwise print over each other
    seen: dict[tuple, int] = {}
    for ax, x, y, note in sorted(notes, key=lambda n: (id(n[0]), n[1], -n[2])):
        k = seen[(id(ax), x)] = seen.get((id(ax), x), -1) + 1
        ax.annotate(note, (x, y), textcoords="offset points", xytext=(-4 if k % 2 else 4, -10),
                    ha="right" if k % 2 else "left", fontsize="x-small", color="0.3")
    for ax in (left, right):
        _log_x(ax, sorted(sizes["sequences"].dropna().unique()), base=2)  # the sizes trained
        ax.set_ylim(0, None)
        ax.legend(loc="lower right", fontsize="x-small")
    return fig
