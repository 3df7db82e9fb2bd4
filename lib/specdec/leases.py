"""Device time, lease by lease: what each GPU lease cost and what it measured.

``data/leases/leases.yaml`` holds what only the device tool knows (seconds the machine was
held, calls, the commit that travelled); everything else is recomputed from the stored rows
of the lease's profile (or profiles), matched by that commit and the lease's time window:

- ``cells``: cells with a row stamped inside the window;
- ``engines``: distinct engine starts (one per (method, K, set/natural acceptance));
- ``engine_start_s``: seconds spent starting those engines (``engine_start_s`` of the rows);
- ``cells_per_device_minute``: cells / (device seconds / 60);
- ``superseded cells``: cells the lease landed whose rows have since left ``data/results/``:
  a superseded training's, kept under ``data/plateau/_superseded/<lease>/<profile>/`` and
  counted from those rows like the others (:func:`kept_elsewhere`), or a superseded
  protocol's, gone from the tree (git history keeps them), from its ``superseded:`` entry
  (``cells``, ``engines``, ``engine_start_s``, counted from the rows before they left, and
  ``removed_in``); ``cells``, ``engines`` and ``engine_start_s`` count them too: what the lease
  spent its time on;
- ``other work``: what the lease did besides measuring cells: its ``other_work:`` text, else,
  for a lease with a ``training:`` entry, data and training (a training lease spends most of its
  time on them, which no row counts).

:func:`measured_where` is the README's section "What was measured where", generated from the
rows and the profiles (``specdec measured-where [--write-readme]``; ``tests/test_readme.py``
fails when the README's copy differs).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd
import yaml

from . import paths, store
from .training.data import PLATEAU, SUPERSEDED

LEASES_PATH = paths.DATA_DIR / "leases" / "leases.yaml"
COLUMNS = ["lease", "device", "profile", "commit", "device_held_s", "calls", "cells",
           "superseded cells", "engines", "engine_start_s", "cells_per_device_minute", "other work"]


def order(lease: str) -> tuple:
    """A lease id's place in time: ``2026-12-03-h200-10`` after ``2026-12-03-h200-9`` (the
    ids sort by date, then by number, not as text)."""
    head, _, n = str(lease).rpartition("-")
    return (head, int(n)) if n.isdigit() else (str(lease), 0)


def load(path: Path | None = None) -> list[dict]:
    path = path or LEASES_PATH
    if not path.exists():
        return []
    entries = yaml.safe_load(path.read_text()) or []
    need = {"lease", "device", "profile", "commit", "device_held_s", "calls",
            "first_call_utc", "last_call_end_utc"}
    for i, e in enumerate(entries):
        missing = sorted(need - set(e))
        if missing:
            raise ValueError(f"{path.name}[{i}]: missing {', '.join(missing)}")
    return entries


def _inside(runs: pd.DataFrame, entry: dict) -> pd.Series:
    """Rows a lease measured: its commit, stamped inside its time window."""
    t = pd.to_datetime(runs["timestamp_utc"], utc=True, format="ISO8601")
    return ((runs["git_commit"] == entry["commit"])
            & (t >= pd.Timestamp(entry["first_call_utc"]))
            & (t <= pd.Timestamp(entry["last_call_end_utc"])))


def kept_elsewhere(name: str, plateau: Path | None = None) -> pd.DataFrame:
    """The rows of profile ``name`` that a later training superseded: kept, with their records,
    in ``data/plateau/_superseded/<lease>/<name>/`` (each a results root), empty if none."""
    roots = sorted(p for p in (Path(plateau or PLATEAU) / SUPERSEDED).glob(f"*/{name}")
                   if p.is_dir())
    runs = [store.load_runs(name, r.parent) for r in roots]
    return pd.concat(runs, ignore_index=True) if runs else pd.DataFrame()


def _spent(runs: pd.DataFrame, e: dict) -> tuple[int, int, float]:
    """Cells, engine starts and their seconds of lease ``e`` among ``runs``. An engine is a
    (profile, method, K, set/natural acceptance) start."""
    if runs.empty:
        return 0, 0, 0.0
    inside = runs[_inside(runs, e) & (runs["status"] == "ok")]
    if inside.empty:
        return 0, 0, 0.0
    key = ["profile", "method", "num_speculative_tokens", inside["acceptance_alpha"].notna()]
    starts = inside.groupby(key)["engine_start_s"].first()
    return inside.groupby(["profile", "cell_id"]).ngroups, len(starts), float(starts.sum())


def record(path: Path | None = None, root: Path | None = None,
           plateau: Path | None = None) -> pd.DataFrame:
    """One row per lease (:data:`COLUMNS`), the cell counts recomputed from the rows: those in
    ``data/results/``, those a later training superseded (:func:`kept_elsewhere`), and the
    cells of rows gone from the tree that its ``superseded:`` entry records."""
    rows = []
    for e in load(path):
        # A lease may measure several profiles (a list)
        names = e["profile"] if isinstance(e["profile"], list) else [e["profile"]]
        here = _spent(pd.concat([store.load_runs(n, root) for n in names], ignore_index=True), e)
        kept = _spent(pd.concat([kept_elsewhere(n, plateau) for n in names], ignore_index=True), e)
        gone = e.get("superseded") or {}
        gone = (int(gone.get("cells", 0)), int(gone.get("engines", 0)),
                float(gone.get("engine_start_s", 0.0)))
        cells, engines, start_s = (a + b + c for a, b, c in zip(here, kept, gone))
        rows.append({"lease": e["lease"], "device": e["device"], "profile": ", ".join(names),
                     "commit": e["commit"][:10], "device_held_s": float(e["device_held_s"]),
                     "calls": int(e["calls"]), "cells": cells,
                     "superseded cells": kept[0] + gone[0],
                     "engines": engines, "engine_start_s": start_s,
                     "cells_per_device_minute": cells / (float(e["device_held_s"]) / 60),
                     "other work": e.get("other_work") or (
                         "data and training of heads and drafts" if e.get("training") else "")})
    return pd.DataFrame(rows, columns=COLUMNS)


def cost_sentences(spent: pd.DataFrame) -> dict[str, str]:
    """The surface chapter's device-time sentences from :func:`record`: ``lease_total`` (every
    lease, the superseded cells among the cells said apart), ``lease_starts``, ``lease_none``
    (the leases without cells) and ``lease_best`` / ``lease_worst``, the cells per device-minute
    among the leases whose cells are still in ``data/results/`` (counting those cells only)."""
    if not len(spent) or not (spent["cells"] > 0).any():
        return {name: "not measured" for name in
                ("lease_total", "lease_best", "lease_worst", "lease_starts", "lease_none")}
    total_cells, total_s = int(spent["cells"].sum()), spent["device_held_s"].sum()
    gone = int(spent["superseded cells"].sum())
    current = spent.assign(kept=spent["cells"] - spent["superseded cells"])
    current = current[current["kept"] > 0].assign(
        rate=lambda d: d["kept"] / (d["device_held_s"] / 60))
    none = spent[spent["cells"] == 0]

    def one(r):
        n = int(r["engines"])
        return (f"{r['rate']:.1f} ({r['lease']}: {int(r['kept'])} cells from {n} "
                f"engine{'' if n == 1 else 's'}, {r['profile']})")
    return {
        "lease_total": (f"{len(spent)} leases held the machine {total_s / 60:.0f} minutes and "
                        f"measured {total_cells} cells"
                        + (f" ({gone} of them rows of a superseded protocol that have since left "
                           f"`data/results/`)" if gone else "")
                        + f", {total_cells / (total_s / 60):.1f} per device-minute"),
        "lease_starts": f"{100 * spent['engine_start_s'].sum() / total_s:.0f} %",
        "lease_none": "; ".join(f"{r['lease']}: {r['other work'] or 'no cells'}"
                                for _, r in none.iterrows()) or "none",
        "lease_best": one(current.loc[current["rate"].idxmax()]) if len(current) else "none",
        "lease_worst": one(current.loc[current["rate"].idxmin()]) if len(current) else "none",
    }


# --------------------------------------------------------------------------- #
# What was measured where: the README's section, from the rows and the profiles
# --------------------------------------------------------------------------- #
README_PATH = paths.ROOT / "README.md"
BEGIN = ("<!-- measured-where: generated from data/results/ and profiles/ by "
         "`specdec measured-where --write-readme`; do not edit by hand -->")
END = "<!-- /measured-where -->"
#: A row's lease, where the rows carry one (older rows do not: their lease is found in
#: ``leases.yaml`` by commit and time window).
LEASE_COLUMNS = ("lease_id", "lease")
_NEEDED = ("profile", "cell_id", "status", "device_name", "cpu_model", "vllm_package",
           "vllm_version", "git_commit", "timestamp_utc") + LEASE_COLUMNS


def _rows(name: str, root: Path | None) -> pd.DataFrame:
    """A profile's run rows; rows whose columns the schema here does not know (written by a
    newer checkout) are read as they are, only the columns this summary needs."""
    try:
        return store.load_runs(name, root)
    except store.SchemaError:
        files = sorted(paths.results_dir(name, root).glob("*.runs.parquet"))
        tables = [store.read_parquet(f) for f in files]
        return pd.concat([t.select([c for c in _NEEDED if c in t.schema.names])
                          .to_pandas(use_threads=False) for t in tables], ignore_index=True)


def _leases_of(name: str, runs: pd.DataFrame, entries: list[dict]) -> list[str]:
    found: set[str] = set()
    carried = pd.Series(False, index=runs.index)
    for col in LEASE_COLUMNS:
        if col in runs.columns:
            ids = runs[col].dropna().astype(str)
            ids = ids[ids != ""]
            found |= set(ids)
            carried |= runs.index.isin(ids.index)
    rest = runs[~carried]
    for e in entries:
        names = e["profile"] if isinstance(e["profile"], list) else [e["profile"]]
        if name in names and len(rest) and _inside(rest, e).any():
            found.add(str(e["lease"]))
    order = {str(e["lease"]): i for i, e in enumerate(entries)}  # leases.yaml is in time order
    return sorted(found, key=lambda lease: (order.get(lease, len(order)), lease))


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


def measured_where(root: Path | None = None, leases_path: Path | None = None) -> str:
    """Markdown: per profile (and per results folder without a profile), its description and
    what its rows say: cells ok / failed / not yet measured, devices, vLLM, dates, leases."""
    from . import profiles as P

    entries = load(leases_path)
    results = root or paths.RESULTS_DIR
    with_rows = sorted(d.name for d in results.iterdir()
                       if d.is_dir() and any(d.glob("*.runs.parquet"))) if results.is_dir() else []
    lines = []
    for name in sorted(set(P.list_profiles()) | set(with_rows)):
        try:
            prof = P.load_profile(name)
            about = _one_line(prof.description)
        except ValueError as e:  # ProfileError, pydantic's ValidationError
            prof = None
            about = (f"(profile does not load here: {_one_line(str(e))[:100]})"
                     if name in P.list_profiles() else "(no profiles/" + name + ".yaml here)")
        runs = _rows(name, root) if name in with_rows else pd.DataFrame()
        lines.append(f"- `{name}`: {about}")
        if runs.empty:
            lines.append("  Not measured (a reference setup this study does not run)."
                         if prof is not None and prof.reference_only else "  Not measured yet.")
            continue
        cell_ok = runs.groupby("cell_id")["status"].agg(lambda s: bool((s == "ok").all()))
        cells = f"{int(cell_ok.sum())} ok, {int((~cell_ok).sum())} failed"
        if prof is not None:
            grid = {P.cell_id(prof, c) for c in P.expand(prof)}
            cells += f", {len(grid - set(cell_ok.index))} not yet measured (grid: {len(grid)})"
        cpu = runs["cpu_model"] if "cpu_model" in runs.columns else pd.Series("", index=runs.index)
        devices = sorted({f"{d} ({c})" if d == "cpu" and c else str(d)
                          for d, c in zip(runs["device_name"], cpu.fillna(""))})
        vllm = sorted({f"{p} {v}" for p, v in zip(runs["vllm_package"], runs["vllm_version"])})
        days = pd.to_datetime(runs["timestamp_utc"], utc=True, format="ISO8601")
        first, last = days.min().strftime("%Y-%m-%d"), days.max().strftime("%Y-%m-%d")
        leases = _leases_of(name, runs, entries)
        lines.append(f"  Cells: {cells}; on {', '.join(devices)}; {', '.join(vllm)}; measured "
                     f"{first if first == last else f'{first} to {last}'} (UTC)"
                     + (f"; leases {', '.join(leases)}" if leases else "") + ".")
    return "\n".join([BEGIN, *lines, END]) + "\n"


def readme_with(section: str, readme: str) -> str:
    """``readme`` with its generated block replaced by ``section``."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md: no generated block ({BEGIN!r} ... {END!r}) under "
                         f"'## What was measured where'")
    rest = readme[end + len(END):].lstrip("\n")
    return readme[:start] + section + ("\n" + rest if rest else "")


def _cmd_measured_where(args: argparse.Namespace) -> int:
    section = measured_where()
    if not args.write_readme:
        print(section, end="")
        return 0
    try:
        README_PATH.write_text(readme_with(section, README_PATH.read_text()))
    except ValueError as e:
        print(f"specdec measured-where: error: {e}", file=sys.stderr)
        return 1
    print(README_PATH)
    return 0


def register(sub) -> None:
    m = sub.add_parser("measured-where",
                       help="what was measured where, per profile, from the rows (Markdown)",
                       description="Print the README's section 'What was measured where', "
                                   "generated from data/results/ and profiles/.")
    m.add_argument("--write-readme", action="store_true",
                   help="replace the section in README.md instead of printing it")
    m.set_defaults(func=_cmd_measured_where)
