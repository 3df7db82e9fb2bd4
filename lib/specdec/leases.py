"""Device time, lease by lease: what each GPU lease cost and what it measured.

``data/leases/leases.yaml`` holds what only the device tool knows (seconds the machine was
held, calls, the commit that travelled); everything else is recomputed from the stored rows
of the lease's profile (or profiles), matched by that commit and the lease's time window:

- ``cells``: cells with a row stamped inside the window;
- ``engines``: distinct engine starts (one per (method, K, set/natural acceptance));
- ``engine_start_s``: seconds spent starting those engines (``engine_start_s`` of the rows);
- ``cells_per_device_minute``: cells / (device seconds / 60);
- ``other work``: what the lease did besides measuring cells: its ``other_work:`` text, else,
  for a lease with a ``training:`` entry, data and training (a training lease spends most of its
  time on them, which no row counts).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from . import paths, store

LEASES_PATH = paths.DATA_DIR / "leases" / "leases.yaml"
COLUMNS = ["lease", "device", "profile", "commit", "device_held_s", "calls", "cells", "engines",
           "engine_start_s", "cells_per_device_minute", "other work"]


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


def record(path: Path | None = None, root: Path | None = None) -> pd.DataFrame:
    """One row per lease (:data:`COLUMNS`), the cell counts recomputed from the rows."""
    rows = []
    for e in load(path):
        # A lease may measure several profiles (a list); an engine is a (profile, method, K,
        # set/natural acceptance) start.
        names = e["profile"] if isinstance(e["profile"], list) else [e["profile"]]
        runs = pd.concat([store.load_runs(n, root) for n in names], ignore_index=True)
        t = pd.to_datetime(runs["timestamp_utc"], utc=True)
        inside = runs[(runs["git_commit"] == e["commit"]) & (runs["status"] == "ok")
                      & (t >= pd.Timestamp(e["first_call_utc"]))
                      & (t <= pd.Timestamp(e["last_call_end_utc"]))]
        engine_key = ["profile", "method", "num_speculative_tokens",
                      inside["acceptance_alpha"].notna()]
        starts = inside.groupby(engine_key)["engine_start_s"].first() if len(inside) else []
        cells = inside.groupby(["profile", "cell_id"]).ngroups if len(inside) else 0
        rows.append({"lease": e["lease"], "device": e["device"], "profile": ", ".join(names),
                     "commit": e["commit"][:10], "device_held_s": float(e["device_held_s"]),
                     "calls": int(e["calls"]), "cells": cells, "engines": len(starts),
                     "engine_start_s": float(sum(starts)),
                     "cells_per_device_minute": cells / (float(e["device_held_s"]) / 60),
                     "other work": e.get("other_work") or (
                         "data and training of heads and drafts" if e.get("training") else "")})
    return pd.DataFrame(rows, columns=COLUMNS)
