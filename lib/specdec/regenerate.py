"""Stale-only regeneration: remeasure what is stale, rebuild what changed, say what moved.

``specdec regenerate <profile>`` does, in order:

1. :func:`stale_cells`: a cell of the profile is *stale* when its rows are missing or failed,
   when its stored ``config_hash`` is not the hash of its configuration now, when its rows
   were measured by another measuring protocol (``measure_version`` vs
   :data:`specdec.runner.MEASURE_VERSION`) or by another engine release than the profile's
   ``engine.package`` / ``engine.version``. A corrupt or schema-violating result file stops
   everything with a message naming it (:func:`specdec.store.read_file`).
2. Only the stale cells are measured (:func:`specdec.runner.run` with ``force`` on exactly
   those ids); finished cells are written one by one, atomically, so a killed regeneration
   resumes where it stopped. A regeneration is a lease: for a profile with a control panel
   (measuring protocol 2) the panel is measured with the first engines and again at the end
   (``data/panels/<lease>-start|end/``), the lease id from ``$SPECDEC_LEASE`` or
   ``regenerate-<UTC time>``, the end panel's expected time kept out of the cells' budget.
   A superseded profile (``superseded_by``) is refused before anything runs.
3. When anything was measured, a run report (:func:`build_report`) is written to
   ``data/reports/<profile>/<UTC time>.json``: what was rerun and why, which figures moved
   outside their intervals against the rows that were there before (the committed ones in a
   clean checkout), and how the environment (GPU, driver, vLLM, torch) differs.
4. The chapters whose inputs changed are re-executed and the book rebuilt
   (:mod:`specdec.bookcache`).

With nothing stale, nothing is measured, no report is written, no chapter is re-executed:
a second run finishes in seconds.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

import pandas as pd

from . import paths, profiles, provenance, store

REPORTS_DIR = paths.DATA_DIR / "reports"
#: Provenance fields a report compares before / after (what a reader needs to explain a move).
ENVIRONMENT_FIELDS = {"device_name": "GPU / device", "driver_version": "driver",
                      "vllm_package": "vLLM package", "vllm_version": "vLLM",
                      "torch_version": "torch", "python_version": "Python", "cpu_model": "CPU"}
#: Figures compared before / after: (median, interval low, interval high, label).
FIGURES = [("tok_s_median", "tok_s_ci_low", "tok_s_ci_high", "output tok/s"),
           ("speedup", "speedup_ci_low", "speedup_ci_high", "speedup")]


#: Why a cell :func:`runner.plan` marks ``stale`` is measured again.
STALE_WHY = {"stale": "trained weights changed (its rows measured others, or do not say which)"}


def _release(version) -> str | None:
    """``0.26.0+cu130`` -> ``0.26.0`` (a local build tag is the same release)."""
    return None if version is None or version != version else str(version).split("+")[0]


def _load(profile) -> tuple[profiles.Profile, str]:
    if isinstance(profile, profiles.Profile):
        return profile, str(paths.PROFILES_DIR / f"{profile.name}.yaml")
    path = Path(profile) if Path(str(profile)).suffix else paths.PROFILES_DIR / f"{profile}.yaml"
    return profiles.load_profile(profile), str(path)


def stale_cells(profile, experiments: Sequence[str] | None = None,
                results_root: Path | None = None, runs: pd.DataFrame | None = None
                ) -> dict[str, list[str]]:
    """cell_id -> why it must be measured (empty: nothing stale), in the profile's order."""
    from . import runner

    prof, _ = _load(profile)
    runs = store.load_runs(prof.name, results_root) if runs is None else runs
    by_cell = {cid: g for cid, g in runs.groupby("cell_id")} if len(runs) else {}
    want_engine = (prof.engine.package, _release(prof.engine.version))
    out: dict[str, list[str]] = {}
    for pc in runner.plan(prof, experiments, results_root=results_root):
        if pc.status != "ok":
            if pc.will_run:  # a failure kept as the record (Experiment.record) is not stale
                out[pc.cell_id] = [STALE_WHY.get(pc.status, pc.status)]  # missing | failed
            continue
        g = by_cell[pc.cell_id]
        why = []
        want_hash = profiles.config_hash(profiles.cell_config(prof, pc.cell))
        if set(g["config_hash"]) != {want_hash}:
            why.append("configuration changed")
        versions = {int(v) if v == v and v is not None else 1 for v in g["measure_version"]}
        want_version = runner.measure_version(prof)
        if versions != {want_version}:
            why.append(f"measuring code version {'/'.join(map(str, sorted(versions)))} -> "
                       f"{want_version}")
        engines = {(p, _release(v)) for p, v in zip(g["vllm_package"], g["vllm_version"])}
        if engines != {want_engine}:
            have = ", ".join(sorted(f"{p} {v}" for p, v in engines))
            why.append(f"engine {have} -> {want_engine[0]} {want_engine[1]}")
        if why:
            out[pc.cell_id] = why
    return out


# --------------------------------------------------------------------------- #
# The run report
# --------------------------------------------------------------------------- #
def _summary(runs: pd.DataFrame) -> pd.DataFrame:
    from . import metrics

    ok = runs[runs["status"] == "ok"] if len(runs) else runs
    if not len(ok):
        return pd.DataFrame(columns=["cell_id"])
    return metrics.with_speedup(metrics.summarize(ok)).set_index("cell_id")


def moved_figures(before: pd.DataFrame, after: pd.DataFrame, cells: Sequence[str]) -> list[dict]:
    """Figures of ``cells`` whose new value lies outside the interval of the rows before.

    One entry per (cell, figure): the interval before, the value now, the relative change
    and how far outside the interval (relative to its nearer end).
    """
    old, new = _summary(before), _summary(after)
    out = []
    for cid in cells:
        if cid not in old.index or cid not in new.index:
            continue
        for mid, lo, hi, label in FIGURES:
            if mid not in old.columns or mid not in new.columns:
                continue
            o, a, b, n = (old.at[cid, mid], old.at[cid, lo], old.at[cid, hi], new.at[cid, mid])
            if any(x is None or x != x for x in (o, a, b, n)):
                continue
            if a <= n <= b:
                continue
            edge = b if n > b else a
            out.append({"cell_id": cid, "figure": label, "before": float(o),
                        "before_interval": [float(a), float(b)], "now": float(n),
                        "change": float(n / o - 1) if o else None,
                        "outside_by": float(n / edge - 1) if edge else None})
    return out


def environment_changes(before: pd.DataFrame, after: pd.DataFrame,
                        cells: Sequence[str]) -> list[dict]:
    """Provenance fields whose values differ between the rows before and the new rows."""
    new = after[after["cell_id"].isin(list(cells))] if len(after) else after
    if not len(new) or not len(before):
        return []
    out = []
    for col, label in ENVIRONMENT_FIELDS.items():
        was = sorted({str(v) for v in before[col] if v is not None and v == v})
        now = sorted({str(v) for v in new[col] if v is not None and v == v})
        if was != now:
            out.append({"field": label, "before": was, "now": now})
    return out


def build_report(profile: str, stale: dict[str, list[str]], outcome: dict[str, list[str]],
                 before: pd.DataFrame, after: pd.DataFrame) -> dict:
    """The run report of one regeneration, from the rows before and after it."""
    from .provenance import git_commit, now_utc

    state = {cid: k for k in ("ok", "failed", "deferred") for cid in outcome.get(k, [])}
    measured = [c for c in stale if state.get(c) == "ok"]
    return {
        "profile": profile,
        "timestamp_utc": now_utc(),
        "git_commit": git_commit(),
        "rerun": [{"cell_id": c, "why": stale[c], "outcome": state.get(c, "not run")}
                  for c in stale],
        "moved": moved_figures(before, after, measured),
        "environment": environment_changes(before, after, measured),
        "rows_before": int(len(before)),
        "rows_after": int(len(after)),
    }


def write_report(report: dict, reports_dir: Path | None = None) -> Path:
    d = (reports_dir or REPORTS_DIR) / report["profile"]
    d.mkdir(parents=True, exist_ok=True)
    stamp = report["timestamp_utc"].replace(":", "").replace("-", "")
    path, n = d / f"{stamp}.json", 0
    while path.exists():  # a second report in the same second: keep both, in order ('~' sorts after '.')
        n += 1
        path = d / f"{stamp}~{n}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def load_reports(reports_dir: Path | None = None) -> list[dict]:
    """Every stored run report, oldest first (a malformed one raises, naming its file)."""
    d = reports_dir or REPORTS_DIR
    out = []
    for f in sorted(d.glob("*/*.json")) if d.exists() else []:
        try:
            rep = json.loads(f.read_text())
        except ValueError as e:
            raise ValueError(f"{f}: not a run report ({e})") from None
        missing = {"profile", "timestamp_utc", "rerun", "moved", "environment"} - set(rep)
        if missing:
            raise ValueError(f"{f}: not a run report (lacks {', '.join(sorted(missing))})")
        out.append({**rep, "file": str(f.relative_to(d.parent) if d.parent in f.parents else f)})
    return sorted(out, key=lambda r: r["timestamp_utc"])


def history_table(reports: Sequence[dict]) -> pd.DataFrame:
    """One row per regeneration: when, which profile, cells rerun / ok / failed, moves."""
    rows = []
    for r in reports:
        outcomes = [x["outcome"] for x in r["rerun"]]
        rows.append({"regenerated (UTC)": r["timestamp_utc"], "profile": r["profile"],
                     "cells rerun": len(outcomes), "ok": outcomes.count("ok"),
                     "failed": outcomes.count("failed"),
                     "figures outside their interval": len(r["moved"]),
                     "environment changed": ", ".join(e["field"] for e in r["environment"])
                     or "no", "commit": str(r.get("git_commit", ""))[:10]})
    return pd.DataFrame(rows, columns=["regenerated (UTC)", "profile", "cells rerun", "ok",
                                       "failed", "figures outside their interval",
                                       "environment changed", "commit"])


def latest(reports: Sequence[dict]) -> list[dict]:
    """The most recent report of each profile, by profile name."""
    last: dict[str, dict] = {}
    for r in reports:
        last[r["profile"]] = r
    return [last[p] for p in sorted(last)]


def status_markdown(reports: Sequence[dict]) -> str:
    """One sentence for the run-report page: how many regenerations are recorded."""
    if not reports:
        return ("**No regeneration is recorded yet.** The rows in `data/results/` come from "
                "`specdec run` and the leases; the first `specdec regenerate` that measures "
                "something writes its report to `data/reports/` and it appears here.")
    profs = sorted({r["profile"] for r in reports})
    return (f"**{len(reports)} regeneration(s) recorded**, of "
            + ", ".join(f"`{p}`" for p in profs)
            + f"; the latest on {reports[-1]['timestamp_utc'][:10]}.")


def report_markdown(report: dict) -> str:
    """A report as Markdown for a book page (the page stays a call)."""
    from collections import Counter

    why = Counter(w.split(" ")[0] if w in ("missing", "failed") else w
                  for x in report["rerun"] for w in x["why"])
    out = Counter(x["outcome"] for x in report["rerun"])
    lines = [f"### `{report['profile']}`, regenerated {report['timestamp_utc']}", "",
             f"**Rerun:** {len(report['rerun'])} cell(s) ("
             + ", ".join(f"{n} {k}" for k, n in sorted(out.items())) + "); why: "
             + "; ".join(f"{w} ({n})" for w, n in sorted(why.items())) + ".", ""]
    if report["environment"]:
        lines.append("**Environment differences** (rows before → rows measured now):")
        lines.append("")
        for e in report["environment"]:
            lines.append(f"- {e['field']}: {', '.join(e['before']) or '–'} → "
                         f"{', '.join(e['now']) or '–'}")
    else:
        lines.append("**Environment:** the same GPU/device, driver, vLLM and torch as before.")
    lines.append("")
    if report["moved"]:
        lines.append("**Figures outside their earlier interval:**")
        lines.append("")
        lines.append("| cell | figure | before [interval] | now | change |")
        lines.append("| --- | --- | --- | --- | --- |")
        for m in report["moved"]:
            a, b = m["before_interval"]
            ch = "–" if m["change"] is None else f"{m['change']:+.1%}"
            lines.append(f"| `{m['cell_id']}` | {m['figure']} | {m['before']:.3g} "
                         f"[{a:.3g}, {b:.3g}] | {m['now']:.3g} | {ch} |")
    else:
        lines.append("**No figure moved outside its earlier interval** (or no rerun cell had "
                     "rows before).")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- #
# Regenerating
# --------------------------------------------------------------------------- #
def regenerate(profile, experiments: Sequence[str] | None = None,
               results_root: Path | None = None, reports_dir: Path | None = None,
               worker: list[str] | None = None, budget_s: float | None = None,
               dry_run: bool = False, book: bool = True, out=None) -> dict:
    """Measure the stale cells of ``profile``, report, rebuild what changed (module doc).

    Returns ``{"stale": {cell_id: reasons}, "outcome": runner.run's result or None,
    "report": path or None, "chapters": executed chapter names, "seconds": float}``.
    """
    out = out or sys.stdout
    t0 = time.perf_counter()
    prof, path = _load(profile)
    if not dry_run:
        prof.refuse_if_superseded()
    for tmp in store.partial_files(prof.name, results_root):
        tmp.unlink(missing_ok=True)  # a killed write's leftovers, never a result
    before = store.load_runs(prof.name, results_root)  # refuses a corrupt file, naming it
    stale = stale_cells(prof, experiments, results_root, runs=before)
    print(f"{prof.name}: {len(stale)} stale cell(s)", file=out, flush=True)
    for cid, why in stale.items():
        print(f"  {cid}: {'; '.join(why)}", file=out)
    result = {"stale": stale, "outcome": None, "report": None, "chapters": [], "seconds": 0.0}
    if dry_run:
        result["seconds"] = time.perf_counter() - t0
        return result
    if stale:
        from . import runner

        panel = prof.protocol.panel_experiment
        lease = (provenance.lease_id()
                 or time.strftime("regenerate-%Y-%m-%dT%H%M%SZ", time.gmtime())) if panel else None
        cells_budget = budget_s
        if panel and budget_s is not None:  # keep the end panel's expected time out of it
            end = runner.panel_cells(prof, lease, "end", results_root)
            cells_budget = max(0.0, budget_s - sum(
                runner.engine_estimate_s(prof, g)
                for g in profiles.engine_groups(end, cell=lambda pc: pc.cell).values()))
        started = time.perf_counter()
        outcome = runner.run(path, experiments=experiments, force=True, cells=list(stale),
                             results_root=results_root, worker=worker, budget_s=cells_budget,
                             out=out, panel="start" if panel else None, lease=lease)
        if panel:
            left = None if budget_s is None else budget_s - (time.perf_counter() - started)
            result["panel_end"] = runner.run(path, results_root=results_root, worker=worker,
                                             budget_s=left, out=out, panel="end", lease=lease)
            result["lease"] = lease
        result["outcome"] = outcome
        if outcome["ok"] or outcome["failed"]:
            after = store.load_runs(prof.name, results_root)
            report = build_report(prof.name, stale, outcome, before, after)
            result["report"] = write_report(report, reports_dir)
            print(f"run report: {result['report']}", file=out)
    if book:
        from . import bookcache

        result["chapters"] = bookcache.update_book(out=out)
    result["seconds"] = time.perf_counter() - t0
    print(f"{prof.name}: regenerated in {result['seconds']:.1f}s", file=out)
    return result


# --------------------------------------------------------------------------- #
# CLI: specdec regenerate
# --------------------------------------------------------------------------- #
def _cmd(args) -> int:
    try:
        res = regenerate(args.profile, experiments=args.experiment or None,
                         results_root=args.results_root, budget_s=args.budget,
                         dry_run=args.dry_run, book=not args.no_book)
    except (store.SchemaError, profiles.ProfileError) as e:  # a corrupt file, named; a
        print(f"specdec regenerate: refused: {e}", file=sys.stderr)  # superseded profile
        return 2
    return 1 if res["outcome"] and res["outcome"]["failed"] else 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "regenerate", help="measure only stale cells, report what moved, rebuild changed chapters",
        description=__doc__.splitlines()[0])
    p.add_argument("profile", help="profile name (profiles/<name>.yaml) or path")
    p.add_argument("--experiment", "-e", action="append", help="only this experiment (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="list the stale cells and why; run nothing")
    p.add_argument("--no-book", action="store_true", help="measure and report only")
    p.add_argument("--results-root", type=Path, default=None, help="instead of data/results")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="wall-clock budget for measuring (as specdec run --budget)")
    p.set_defaults(func=_cmd)
