"""The harness against a peer: vLLM's own ``vllm bench latency`` on the cells of one experiment.

``vllm bench latency`` (vllm/benchmarks/latency.py) builds one engine from command-line
arguments, times ``LLM.generate`` on one batch of random prompts, and writes the latencies
to a JSON file. :func:`commands` derives its arguments from the same profile the harness
runs (target, draft, engine settings, environment, the speculative config at the set
acceptance), so a peer run and a harness cell differ only where the two programs do:

* the peer samples at temperature 1 (the harness: greedy) and draws its prompt ids from
  ``[0, 10000)``, new each run; the harness reads a seeded workload;
* the peer times one ``generate`` call per iteration (prefill included), the harness one
  pass of its calls, and reports output tokens per second.

A peer run is stored as one JSON file per harness cell (``<results>/<profile>/peer/
<cell_id>.peer.json``): the cell it mirrors, the exact command, the latencies and the
provenance of the machine, written atomically. Returned from a lease, they are checked and
added by ``specdec merge`` together with the cells' Parquet files (:mod:`specdec.merge` calls
:func:`merge`; ``specdec peer merge`` takes them alone). :func:`compare` sets them beside the
harness's summary rows. Measured, both; the difference is what the book explains.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from . import models, paths, profiles, provenance
from .profiles import Cell, Profile


class PeerError(ValueError):
    """A peer run cannot be built or a stored peer file is malformed (names the file)."""


@dataclass(frozen=True)
class PeerRun:
    """One ``vllm bench latency`` invocation mirroring one harness cell."""

    cell: Cell
    cell_id: str
    config_hash: str
    argv: tuple[str, ...]
    env: dict[str, str]


class PeerResult(BaseModel):
    """What a ``.peer.json`` file holds (checked when read back)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str
    cell_id: str
    config_hash: str
    method: str
    num_speculative_tokens: int
    batch_size: int
    acceptance_alpha: float | None
    input_len: int
    output_len: int
    argv: list[str]
    env: dict[str, str]
    wall_s: float
    avg_latency_s: float
    latencies_s: list[float]
    provenance: dict[str, object]


def _input_len(profile: Profile, cell: Cell) -> int:
    wl = profile.workload(cell.workload)
    if wl.source != "random-tokens" or "prompt_len" not in wl.options:
        raise PeerError(f"{profile.name}: workload {wl.name!r} of cell {cell.method} b{cell.batch_size} "
                        f"is not random-tokens with a prompt_len; the peer times random prompts "
                        f"of a fixed length, so only such a cell has a peer")
    return int(wl.options["prompt_len"])


def commands(profile: Profile, experiment: str, out_dir: Path, iters: int = 5,
             warmup: int = 2) -> list[PeerRun]:
    """The ``vllm bench latency`` runs mirroring every cell of ``experiment``."""
    eng = profile.engine
    runs = []
    for cell in profiles.expand(profile, [experiment]):
        cid = profiles.cell_id(profile, cell)
        chash = profiles.config_hash(profiles.cell_config(profile, cell))
        m = profile.method(cell.method)
        target = models.resolve_model(profile, profile.target.name)
        draft = models.resolve_model(profile, m.draft) if m.draft else None
        argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "latency",
                "--model", str(target), "--dtype", eng.dtype,
                "--max-model-len", str(eng.max_model_len), "--load-format", eng.load_format,
                "--tensor-parallel-size", str(eng.tensor_parallel_size),
                "--gpu-memory-utilization", str(eng.gpu_memory_utilization),
                "--seed", str(eng.seed),
                "--input-len", str(_input_len(profile, cell)),
                "--output-len", str(profile.sampling.max_tokens),
                "--batch-size", str(cell.batch_size),
                "--num-iters-warmup", str(warmup), "--num-iters", str(iters),
                "--output-json", str(out_dir / f"{cid}.bench.json")]
        if eng.max_num_seqs is not None:
            argv += ["--max-num-seqs", str(eng.max_num_seqs)]
        if eng.enforce_eager:
            argv.append("--enforce-eager")
        if eng.compilation_config is not None:
            argv += ["--compilation-config", json.dumps(eng.compilation_config)]
        if eng.skip_tokenizer_init:
            argv += ["--skip-tokenizer-init", "--disable-detokenize"]
        spec = profiles.speculative_config(profile, cell.method, cell.num_speculative_tokens,
                                           draft, acceptance=cell.acceptance)
        if spec is not None:
            argv += ["--speculative-config", json.dumps(spec)]
        runs.append(PeerRun(cell, cid, chash, tuple(argv), dict(eng.env)))
    return runs


def _write_json_atomic(obj: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def peer_dir(profile: str, results_root: Path | None = None) -> Path:
    return paths.results_dir(profile, results_root) / "peer"


def run(profile: Profile | str, experiment: str, results_root: Path | None = None,
        budget_s: float | None = None, min_run_s: float = 90.0, out=None) -> list[Path]:
    """Run every peer invocation of ``experiment`` not yet stored; returns the files written.

    Each invocation starts its own engine (that is what ``bench latency`` does), so a
    ``budget_s`` stops before one that may not finish; what is not run stays pending.
    """
    out = out or sys.stdout
    profile = profiles.load_profile(profile) if isinstance(profile, str) else profile
    profile.refuse_other_gpu(provenance.gpu()[0])
    dest = peer_dir(profile.name, results_root)
    written = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="specdec-peer-") as scratch:
        for pr in commands(profile, experiment, Path(scratch)):
            final = dest / f"{pr.cell_id}.peer.json"
            if final.exists():
                continue
            left = None if budget_s is None else budget_s - (time.monotonic() - t0)
            if left is not None and left < min_run_s:
                print(f"peer: budget spent, {pr.cell_id} not run", file=out)
                break
            print(f"peer: {pr.cell.method} K={pr.cell.num_speculative_tokens} "
                  f"b{pr.cell.batch_size}: {shlex.join(pr.argv[1:])}", file=out, flush=True)
            start = time.monotonic()
            try:
                proc = subprocess.run(pr.argv, env={**os.environ, **pr.env}, text=True,
                                      capture_output=True, timeout=left)
            except subprocess.TimeoutExpired:
                print(f"peer: {pr.cell_id} cut by the budget", file=out)
                break
            wall = time.monotonic() - start
            bench = Path(scratch) / f"{pr.cell_id}.bench.json"
            if proc.returncode != 0 or not bench.is_file():
                print(f"peer: {pr.cell_id} failed (rc {proc.returncode}):\n"
                      f"{(proc.stderr or proc.stdout)[-2000:]}", file=out)
                continue
            res = json.loads(bench.read_text())
            record = PeerResult(
                profile=profile.name, cell_id=pr.cell_id, config_hash=pr.config_hash,
                method=pr.cell.method, num_speculative_tokens=pr.cell.num_speculative_tokens,
                batch_size=pr.cell.batch_size, acceptance_alpha=pr.cell.acceptance,
                input_len=_input_len(profile, pr.cell), output_len=profile.sampling.max_tokens,
                argv=list(pr.argv[1:]), env=pr.env, wall_s=wall,
                avg_latency_s=float(res["avg_latency"]),
                latencies_s=[float(x) for x in res["latencies"]],
                provenance={**provenance.collect(),
                            "lease_id": provenance.lease_id()})
            _write_json_atomic(record.model_dump(), final)
            written.append(final)
            print(f"peer: {pr.cell_id}: {record.avg_latency_s:.3f} s per batch "
                  f"({wall:.0f} s with the engine start)", file=out, flush=True)
    return written


def load(profile: str, results_root: Path | None = None) -> pd.DataFrame:
    """Every stored peer run of a profile, one row each (a malformed file is an error)."""
    rows = []
    for f in sorted(peer_dir(profile, results_root).glob("*.peer.json")):
        try:
            r = PeerResult.model_validate_json(f.read_text())
        except ValidationError as e:
            raise PeerError(f"{f}: not a peer result: {e}") from None
        lat = pd.Series(r.latencies_s)
        rows.append({**r.model_dump(exclude={"argv", "env", "latencies_s", "provenance"}),
                     "peer_latency_median_s": float(lat.median()),
                     "peer_repeats": len(lat),
                     "peer_slowest_over_fastest": float(lat.max() / lat.min()),
                     "peer_tok_s": r.batch_size * r.output_len / float(lat.median()),
                     "command": shlex.join(r.argv),
                     **{k: r.provenance.get(k) for k in ("vllm_version", "device_name",
                                                          "git_commit", "timestamp_utc",
                                                          "lease_id")}})
    return pd.DataFrame(rows)


def compare(peer_df: pd.DataFrame, summary_df: pd.DataFrame,
            runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Harness beside peer for the same cell: output tokens per second, their ratio and spreads.

    The peer's figure is batch x output tokens over the median latency of one generate
    call (prefill included); the harness's is its median output tokens per second. The
    spreads say how far one run may lie from another: the peer's slowest over its fastest
    call, the harness's 95% interval of the median over that median. ``runs`` (the harness's
    run rows) gives each cell's lease (``harness_lease``) beside the peer's (``peer_lease``).
    """
    cols = ["method", "num_speculative_tokens", "acceptance_alpha", "batch_size",
            "harness_tok_s", "peer_tok_s", "harness_over_peer", "harness_ci_rel",
            "peer_slowest_over_fastest", "peer_repeats", "peer_latency_median_s",
            "harness_lease", "peer_lease", "cell_id"]
    if peer_df.empty:
        return pd.DataFrame(columns=cols)
    h = summary_df[["cell_id", "tok_s_median", "tok_s_ci_low", "tok_s_ci_high"]].rename(
        columns={"tok_s_median": "harness_tok_s"})
    df = peer_df.rename(columns={"lease_id": "peer_lease"}).merge(h, on="cell_id", how="left")
    if runs is not None and "lease_id" in runs:
        ok = runs[(runs["status"] == "ok") & runs["lease_id"].notna()]
        df["harness_lease"] = df["cell_id"].map(
            ok.groupby("cell_id")["lease_id"].agg(lambda s: ", ".join(sorted(set(s)))))
    for c in ("harness_lease", "peer_lease"):
        if c not in df:
            df[c] = None
    df["harness_over_peer"] = df["harness_tok_s"] / df["peer_tok_s"]
    df["harness_ci_rel"] = (df["tok_s_ci_high"] - df["tok_s_ci_low"]) / df["harness_tok_s"]
    return df[cols].sort_values(["method", "batch_size"]).reset_index(drop=True)


def _cell_name(row) -> str:
    if row["method"] == "baseline":
        return f"the baseline at batch {int(row['batch_size'])}"
    alpha = "" if pd.isna(row["acceptance_alpha"]) else f", α = {row['acceptance_alpha']:g}"
    return (f"{row['method']} (K = {int(row['num_speculative_tokens'])}{alpha}) at batch "
            f"{int(row['batch_size'])}")


def comparison_sentence(cmp: pd.DataFrame) -> str:
    """The comparison in words, cell by cell, from :func:`compare` (for the book's prose)."""
    done = cmp.dropna(subset=["harness_tok_s", "peer_tok_s"])
    if done.empty:
        return "not measured yet (`specdec status` lists the peer runs still pending)"
    parts = [f"{_cell_name(r)}: the harness {r['harness_tok_s']:.0f} tok/s, `bench latency` "
             f"{r['peer_tok_s']:.0f} tok/s ({round(100 * (r['harness_over_peer'] - 1), 1) + 0.0:+.1f} %; the "
             f"peer's slowest call took {r['peer_slowest_over_fastest']:.2f}× its fastest"
             f"{_leases(r)})" for _, r in done.iterrows()]
    return "; ".join(parts)


def _leases(row) -> str:
    """``"; the harness in lease A, the peer in lease B"`` where the two ran in different
    leases (hosts may differ: the ratio then carries the host too); empty otherwise."""
    h, p = row.get("harness_lease"), row.get("peer_lease")
    if not isinstance(h, str) or not isinstance(p, str) or h == p:
        return ""
    return f"; the harness in lease `{h}`, the peer in `{p}`"


def lease_drift(cmp: pd.DataFrame, panel: pd.DataFrame | None) -> str:
    """Where harness and peer ran in different leases (:func:`compare`'s ``harness_lease``,
    ``peer_lease``), how far the control panel's step time of the same method and batch moved
    between those leases, per panel phase: the part of a harness-over-peer gap that the host
    and the time can explain. ``panel``: the stored panel cells (``lease_id``,
    ``panel_phase``, ``method``, ``batch_size``, ``step_ms``; ``protocol.stored_panel``)."""
    done = cmp.dropna(subset=["harness_tok_s", "peer_tok_s"])
    apart = done[done["harness_lease"].notna() & done["peer_lease"].notna()
                 & (done["harness_lease"] != done["peer_lease"])]
    if apart.empty:
        return "Each peer run and its harness cell ran in the same lease."
    step = (panel.set_index(["lease_id", "panel_phase", "method", "batch_size"])["step_ms"]
            if panel is not None else pd.Series(dtype=float))
    parts = []
    for _, r in apart.iterrows():
        moved = []
        for phase in ("start", "end"):
            a = step.get((r["harness_lease"], phase, r["method"], r["batch_size"]))
            b = step.get((r["peer_lease"], phase, r["method"], r["batch_size"]))
            if a is not None and b is not None:
                moved.append(f"{100 * (b / a - 1):+.1f} % at the {phase}")
        parts.append(f"{_cell_name(r)} ({' and '.join(moved) or 'no panel cell of it in both'})")
    return ("Where the harness's cell and the peer ran in different leases (another host, "
            "perhaps), the control panel's step time of the same method and batch moved between "
            "those leases by: " + "; ".join(parts) + ". A harness-over-peer gap within that "
            "movement is the host's and the hour's, not the clock's.")


def merge(src: Path | str, profile: str | None, results_root: Path | None = None) -> list[Path]:
    """Copy the ``.peer.json`` files of a returned archive (or folder) into the results,
    after checking each; a malformed one, or one of a profile other than ``profile``, stops
    the merge before anything is written. ``profile=None`` takes each file's own profile
    (``specdec merge`` without ``--profile``)."""
    src = Path(src)
    with tempfile.TemporaryDirectory(prefix="specdec-peer-merge-") as scratch:
        if src.is_file():
            with tarfile.open(src) as tar:
                tar.extractall(scratch, filter="data")
            src = Path(scratch)
        found = sorted(src.rglob("*.peer.json"))
        records = []
        for f in found:
            try:
                r = PeerResult.model_validate_json(f.read_text())
            except ValidationError as e:
                raise PeerError(f"{f.name}: not a peer result: {e}") from None
            if profile is not None and r.profile != profile:
                raise PeerError(f"{f.name}: a peer run of profile {r.profile!r}, not {profile!r}")
            if profile is None and r.profile not in profiles.list_profiles():
                raise PeerError(f"{f.name}: a peer run of profile {r.profile!r}, "
                                f"not one of this study's")
            records.append((f.name, r))
        out = []
        for name, r in records:
            dest = peer_dir(r.profile, results_root) / name
            _write_json_atomic(r.model_dump(), dest)
            out.append(dest)
    return out


def _cmd_peer(args) -> int:
    if args.action == "run":
        run(args.profile, args.experiment, args.results_root, args.budget)
    elif args.action == "merge":
        if not args.source:
            raise PeerError("specdec peer merge: give the returned archive or folder (--source)")
        files = merge(args.source, args.profile, args.results_root)
        print(f"peer: merged {len(files)} file(s) into {peer_dir(args.profile, args.results_root)}")
    else:  # list: the exact commands, nothing run
        for pr in commands(profiles.load_profile(args.profile), args.experiment, Path("OUT")):
            print(" ".join(f"{k}={v}" for k, v in pr.env.items()), shlex.join(pr.argv[1:]))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("peer", help="vLLM's own `bench latency` on an experiment's cells")
    p.add_argument("action", choices=["list", "run", "merge"])
    p.add_argument("profile")
    p.add_argument("--experiment", "-e", default="peer-latency")
    p.add_argument("--results-root", type=Path, default=None)
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS")
    p.add_argument("--source", type=Path, default=None, help="merge: archive or folder")
    p.set_defaults(func=_cmd_peer)
