"""Expected device time of a profile's experiments, from a measured campaign's recorded times.

A lease's device time is engine starts (one per (method, K, set/natural acceptance): loading
weights, compiling, capturing graphs) plus the cells each engine measures. Both are recorded:
``engine_start_s`` on every row, and each cell's rows carry the time they were written
(``timestamp_utc``), so the gap between consecutive cells of one engine is what a cell costs
(warm-up, timed repeats, writing). :func:`costs` reads them from a measured campaign;
:func:`estimate` prices another profile's experiments with them (per method where the
reference measured that method, else the reference's median).
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from . import paths, profiles, store

COLUMNS = ["experiment", "cells", "engines", "engine_start_s", "cells_s", "device_s",
           "device_minutes"]


def costs(reference: str, root=None) -> dict:
    """Recorded costs of ``reference``'s ok rows: ``engine_start_s`` (median per method),
    ``cell_s`` (median seconds between consecutive cells of one engine, per batch size)
    and the medians over everything (``engine_start_all``, ``cell_all``)."""
    runs = store.load_runs(reference, root, only_ok=True)
    if runs.empty:
        raise ValueError(f"{reference}: no measured rows to take device times from")
    cells = runs.groupby("cell_id").agg(
        method=("method", "first"), k=("num_speculative_tokens", "first"),
        batch=("batch_size", "first"), synthetic=("acceptance_alpha", lambda s: s.notna().any()),
        commit=("git_commit", "first"), written=("timestamp_utc", "max"),
        start=("engine_start_s", "first")).reset_index()
    cells["written"] = pd.to_datetime(cells["written"], utc=True)
    cells = cells.sort_values("written")
    engine = ["commit", "method", "k", "synthetic"]
    cells["gap_s"] = cells.groupby(engine)["written"].diff().dt.total_seconds()
    # Protocol 2 writes an engine's cells together at its end (interleaved rounds), so the gap
    # says nothing there: a cell costs its timed repeats plus one warm-up pass.
    version = pd.to_numeric(runs["measure_version"], errors="coerce").fillna(1)
    timed = runs[version >= 2].groupby("cell_id")["wall_s"].agg(["sum", "median"])
    if len(timed):
        cost = (timed["sum"] + timed["median"]).rename("timed_s")
        cells = cells.merge(cost, left_on="cell_id", right_index=True, how="left")
        cells["gap_s"] = cells["timed_s"].fillna(cells["gap_s"])
    starts = cells.groupby(engine)["start"].first().reset_index()
    known = cells.dropna(subset=["gap_s"])
    return {"reference": reference,
            "engine_start_s": starts.groupby("method")["start"].median().to_dict(),
            "engine_start_all": float(starts["start"].median()),
            "cell_s": known.groupby("batch")["gap_s"].median().to_dict(),
            "cell_s_method": known.groupby(["method", "batch"])["gap_s"].median().to_dict(),
            "cell_all": float(known["gap_s"].median()),
            "engines_measured": len(starts), "cells_measured": len(cells)}


def estimate(profile, reference: str = "h200-surface-v2", experiments: Sequence[str] | None = None,
             root=None, pending: bool = False) -> pd.DataFrame:
    """Expected device time per experiment of ``profile`` (a Profile, name or path), priced
    with ``reference``'s recorded engine starts and cell times; last row: all of them
    (a cell or engine shared by experiments counted once).

    ``pending``: the next leases' work instead: each experiment's cells not yet stored as ok
    (in ``root``), and, for a profile with a control panel, the panel first, whole (every lease
    measures it again); the last row counts an engine the panel shares with pending cells once
    (an experiment on the panel's engines, measured with it, costs no start of its own)."""
    prof = profile if isinstance(profile, profiles.Profile) else profiles.load_profile(profile)
    c = costs(reference, root)
    names = list(experiments) if experiments else [e.name for e in prof.experiments]
    panel = prof.protocol.panel_experiment if pending else None
    if panel:
        names = [panel] + [n for n in names if n != panel]

    def todo(name):
        if not pending or name == panel:
            return profiles.expand(prof, [name])
        from .runner import plan  # the cells a run would measure: not stored as ok

        return [pc.cell for pc in plan(prof, [name], results_root=root) if pc.will_run]

    rows = []
    for name in names + [None]:
        if name:
            cells = todo(name)
        else:  # all of them, a cell of several experiments once
            cells = list({profiles.cell_id(prof, x): x for n in names for x in todo(n)}.values())
        groups = profiles.engine_groups(cells)
        start = sum(c["engine_start_s"].get(m, c["engine_start_all"]) for m, _, _ in groups)
        per_cell = sum(c.get("cell_s_method", {}).get(
            (x.method, x.batch_size), c["cell_s"].get(x.batch_size, c["cell_all"])) for x in cells)
        label = f"{name} (every lease)" if name and name == panel else name
        # concurrent engines (protocol.concurrent_engines = n) start one after another and
        # share the GPU for their cells: the starts add up, the cells' time is split n ways
        # (an upper bound while an engine's cells outlast the next one's start)
        device = start + per_cell / prof.protocol.concurrent_engines
        rows.append({"experiment": label or "(all)", "cells": len(cells), "engines": len(groups),
                     "engine_start_s": start, "cells_s": per_cell, "device_s": device,
                     "device_minutes": device / 60})
    return pd.DataFrame(rows, columns=COLUMNS)


#: The profile template for a new GPU (loads with ``specdec run <path> --dry-run``).
TEMPLATE = paths.PROFILES_DIR / "templates" / "new-gpu.yaml"


def table(est: pd.DataFrame) -> pd.DataFrame:
    """:func:`estimate`'s frame for a page: whole seconds and minutes, readable headers."""
    out = est.rename(columns={"engine_start_s": "engine starts (s)", "cells_s": "cells (s)",
                              "device_s": "device time (s)", "device_minutes": "device minutes"})
    for col in ("engine starts (s)", "cells (s)", "device time (s)"):
        out[col] = out[col].round(0).astype(int)
    out["device minutes"] = [f"{m:.1f}" for m in out["device minutes"]]
    return out


def cost_table(c: dict) -> pd.DataFrame:
    """The recorded costs :func:`estimate` prices with: engine start per method, cell per batch."""
    rows = [{"what": f"engine start, {m}", "seconds": f"{s:.0f}"}
            for m, s in sorted(c["engine_start_s"].items())]
    rows += [{"what": f"one cell at batch {b}", "seconds": f"{s:.0f}"}
             for b, s in sorted(c["cell_s"].items())]
    return pd.DataFrame(rows, columns=["what", "seconds"])


def default_reference(profile: str) -> str:
    """What to price ``profile`` with: its own recorded times once it has measured rows (its
    protocol's cells and its engines' starts), else h200-surface-v2's (the reproducible
    protocol's long cells: the first protocol's short ones priced the template at under half
    its cost)."""
    name = profiles.load_profile(profile).name
    return name if not store.load_runs(name, None, only_ok=True).empty else "h200-surface-v2"


def _cmd(args) -> int:
    args.reference = args.reference or default_reference(args.profile)
    est = estimate(args.profile, args.reference, args.experiment or None, pending=args.pending)
    print(f"{args.profile}: expected device time{' of the cells not measured yet' if args.pending else ''}, "
          f"priced with {args.reference}'s recorded engine starts and cell times (per method where "
          "it measured the method)")
    print(table(est).to_string(index=False))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("devicetime", help="expected device time of a profile's experiments, "
                                                 "priced with a measured campaign's recorded times")
    p.add_argument("profile")
    p.add_argument("--reference", default=None,
                   help="the measured campaign to price with (default: the profile itself once "
                        "it has rows, else h200-surface-v2)")
    p.add_argument("-e", "--experiment", action="append", help="only this experiment (repeatable)")
    p.add_argument("--pending", action="store_true",
                   help="only the cells not stored yet (the next leases' work), with the control "
                        "panel every lease measures")
    p.set_defaults(func=_cmd)
