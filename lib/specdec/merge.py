"""Results measured on another machine, checked and then added to ``data/results/<profile>/``.

A lease (or any host without this checkout) sends back a folder, or a ``.tar``/``.tgz`` of one,
holding the runner's per-cell Parquet files (``<cell_id>.runs.parquet`` and
``<cell_id>.tokens.parquet``) and possibly the peer's ``vllm bench latency`` results
(``<profile>/peer/<cell_id>.peer.json``, :mod:`specdec.peer`). :func:`merge` takes it whole:

1. every Parquet file is checked first: its schema (:func:`specdec.store.read_file`), its
   provenance (:func:`specdec.store.check_provenance`, plus the device and the vLLM version the
   profile names) and that its ``cell_id``/``config_hash`` is a cell the profile defines now;
2. the ``.peer.json`` files are checked and copied by :func:`specdec.peer.merge`;
3. only then are the cells written, one at a time, each atomically
   (:func:`specdec.store.atomic_write_table`).

An invalid Parquet or peer file stops the merge before anything is written, unless
``skip_invalid``. A stored ``ok`` cell is kept over a different incoming one unless ``replace``;
a ``failed`` one never replaces it. ``specdec merge SRC [--profile P]`` is the command.
"""
from __future__ import annotations

import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import peer, store
from .profiles import ProfileError, cell_config, cell_id, config_hash, expand, load_profile


class MergeError(ValueError):
    """Returned result files cannot be merged; the message names the file and the reason."""


@dataclass
class MergeReport:
    merged: list[str] = field(default_factory=list)       # cell ids written
    rows: int = 0                                         # run rows written
    unchanged: list[str] = field(default_factory=list)    # identical to what is stored
    kept: list[str] = field(default_factory=list)         # stored ok cell kept over incoming
    refused: list[str] = field(default_factory=list)      # "file: reason"
    peer: list[str] = field(default_factory=list)         # peer result files written

    def summary(self) -> str:
        return (f"{len(self.merged)} cell(s) merged ({self.rows} run rows), "
                f"{len(self.unchanged)} unchanged, {len(self.kept)} kept as stored, "
                f"{len(self.refused)} refused; {len(self.peer)} peer result(s) merged")


def _source(src: Path, scratch: Path) -> tuple[Path, str]:
    """The folder holding the returned files, and the prefix of names in messages: ``src``
    itself, or a tar archive extracted into ``scratch`` (messages name ``archive:member``)."""
    if src.is_file():
        if not tarfile.is_tarfile(src):
            raise MergeError(f"{src}: neither a folder nor a tar archive")
        with tarfile.open(src) as tar:
            tar.extractall(scratch, filter="data")
        return scratch, f"{src}:"
    if not src.is_dir():
        raise MergeError(f"{src}: does not exist")
    return src, ""


def _result_files(base: Path, prefix: str) -> list[tuple[str, Path]]:
    """(name for messages, path) of the Parquet files under ``base`` (see :func:`_source`)."""
    files = sorted(base.rglob("*.parquet"))
    if prefix:
        return [(f"{prefix}{f.relative_to(base).as_posix()}", f) for f in files]
    return [(str(f), f) for f in files]


def _expected_cells(profile) -> dict[str, str]:
    return {cell_id(profile, c): config_hash(cell_config(profile, c)) for c in expand(profile)}


def _check_file(f: Path, kind: str, known: dict, profile_filter: str | None,
                where: str | None = None):
    """Schema, provenance and identity checks of one returned file -> (profile, cell_id, table)."""
    schema = store.SCHEMAS[kind]
    where = where or str(f)
    try:
        # The store's own reading: schema checked, columns added since the file was written
        # read as null (a lease that retags an older cell sends it back in the old schema).
        table = store.read_file(f, schema)
    except store.SchemaError as e:
        raise MergeError(str(e).replace(str(f), where, 1)) from None
    df = table.to_pandas(use_threads=False)
    if df.empty:
        raise MergeError(f"{where}: no rows")
    store.check_provenance(df, where=where)
    names = set(df["profile"])
    if len(names) != 1:
        raise MergeError(f"{where}: rows of several profiles {sorted(names)}")
    pname = names.pop()
    if profile_filter and pname != profile_filter:
        raise MergeError(f"{where}: rows of profile {pname!r}, merging {profile_filter!r}")
    if pname not in known:
        try:
            prof = load_profile(pname)
        except ProfileError as e:
            raise MergeError(f"{where}: profile {pname!r} is not one of this study's: {e}") from None
        known[pname] = (prof, _expected_cells(prof))
    prof, expected = known[pname]
    if prof.reference_only:
        raise MergeError(f"{where}: profile {pname!r} is reference_only: it is never measured here")
    cells = set(df["cell_id"])
    if len(cells) != 1:
        raise MergeError(f"{where}: rows of several cells {sorted(cells)}")
    cid = cells.pop()
    if f.name != f"{cid}.{kind}.parquet":
        raise MergeError(f"{where}: file name does not match its cell_id {cid!r}")
    if cid not in expected:
        raise MergeError(f"{where}: cell_id {cid!r} is not a cell of profile {pname!r} "
                         f"(its configuration changed since this was measured?)")
    hashes = set(df["config_hash"])
    if hashes != {expected[cid]}:
        raise MergeError(f"{where}: config_hash {sorted(hashes)} does not match the profile's "
                         f"{expected[cid]!r} for {cid}")
    if kind == "runs":
        bad = df[~df["status"].isin(["ok", "failed"])]
        if len(bad):
            raise MergeError(f"{where}: status must be ok or failed, got {sorted(set(bad['status']))}")
    want_vllm = prof.engine.version
    if set(df["vllm_version"]) != {want_vllm}:
        raise MergeError(f"{where}: measured with vLLM {sorted(set(df['vllm_version']))}, "
                         f"the profile names {want_vllm}")
    if prof.hardware.kind == "cuda" and (df["device_name"] == "cpu").any():
        raise MergeError(f"{where}: profile {pname!r} is a GPU profile but rows say device 'cpu'")
    return pname, cid, table


def _merge_peer(base: Path, prefix: str, profile: str | None, root: Path | None,
                report: MergeReport, skip_invalid: bool) -> None:
    """The ``.peer.json`` files under ``base``, through :func:`specdec.peer.merge` (which checks
    them all before it writes any): all of them merged, or none and a MergeError (with
    ``skip_invalid``: none, and the reason in ``report.refused``)."""
    try:
        written = peer.merge(base, profile, root)
    except peer.PeerError as e:
        msg = f"{prefix}{e}" if prefix else str(e)
        if not skip_invalid:
            raise MergeError(msg) from None
        report.refused.append(msg)
        return
    report.peer.extend(str(p) for p in written)


def merge(src: Path | str, profile: str | None = None, results_root: Path | str | None = None,
          skip_invalid: bool = False, replace: bool = False) -> MergeReport:
    """Merge returned per-cell Parquet files and peer results into ``results_root/<profile>/``.

    Every file is checked before anything is written; an invalid file stops the merge
    (MergeError naming it) unless ``skip_invalid``, which leaves it out and reports it (the
    peer results go in all together or not at all). A stored ``ok`` cell is not overwritten
    by a different incoming one unless ``replace``; an incoming ``failed`` cell never
    replaces a stored ``ok`` one. ``profile`` accepts only rows and peer results of that
    profile; without it, each file goes to the profile it names.
    """
    src = Path(src)
    root = Path(results_root) if results_root else None
    report = MergeReport()
    with tempfile.TemporaryDirectory(prefix="specdec-merge-") as scratch:
        base, prefix = _source(src, Path(scratch))
        files = _result_files(base, prefix)
        has_peer = any(base.rglob("*.peer.json"))
        if not files and not has_peer:
            raise MergeError(f"{src}: no .parquet or .peer.json files")
        known: dict = {}
        checked: dict[tuple[str, str], dict[str, object]] = {}
        for where, f in files:
            kind = "runs" if f.name.endswith(".runs.parquet") else (
                "tokens" if f.name.endswith(".tokens.parquet") else None)
            try:
                if kind is None:
                    raise MergeError(f"{where}: not a .runs.parquet or .tokens.parquet file")
                pname, cid, table = _check_file(f, kind, known, profile, where)
            except (MergeError, store.SchemaError) as e:
                if not skip_invalid:
                    raise MergeError(str(e)) from None
                report.refused.append(str(e))
                continue
            checked.setdefault((pname, cid), {})[kind] = table
        if has_peer:  # after the Parquet checks, before any cell is written
            _merge_peer(base, prefix, profile, root, report, skip_invalid)
        for (pname, cid), tables in sorted(checked.items()):
            runs = tables.get("runs")
            if runs is None:
                # Tokens are written first: tokens alone mean the cell never finished.
                report.refused.append(f"{pname}/{cid}: tokens without runs (cell did not finish)")
                continue
            incoming_ok = all(s == "ok" for s in runs.column("status").to_pylist())
            stored = store.cell_status(pname, cid, root)
            runs_dest = store.runs_path(pname, cid, root)
            if stored != "missing" and store.read_parquet(runs_dest).equals(runs):
                report.unchanged.append(f"{pname}/{cid}")
                continue
            if stored == "ok" and (not incoming_ok or not replace):
                report.kept.append(f"{pname}/{cid}")
                continue
            if "tokens" in tables:
                store.atomic_write_table(tables["tokens"], store.tokens_path(pname, cid, root))
            store.atomic_write_table(runs, runs_dest)
            report.merged.append(f"{pname}/{cid}")
            report.rows += runs.num_rows
    return report


# --------------------------------------------------------------------------- #
# CLI
# --------------------------------------------------------------------------- #
def _cmd_merge(args) -> int:
    try:
        report = merge(args.src, profile=args.profile, results_root=args.results_root,
                       skip_invalid=args.skip_invalid, replace=args.replace)
    except MergeError as e:  # it names the file and the reason: no traceback
        print(f"specdec {args.command}: error: {e}", file=sys.stderr)
        return 2
    for r in report.refused:
        print(f"refused: {r}", file=sys.stderr)
    for k in report.kept:
        print(f"kept stored ok cell: {k}", file=sys.stderr)
    print(report.summary())
    return 1 if report.refused else 0


def register(subparsers) -> None:
    m = subparsers.add_parser("merge", help="merge returned result files into data/results/")
    m.add_argument("src", type=Path,
                   help="folder or .tar/.tgz of returned .parquet (and .peer.json) files")
    m.add_argument("--profile", default=None,
                   help="accept only rows (and peer results) of this profile")
    m.add_argument("--results-root", type=Path, default=None, help="instead of data/results")
    m.add_argument("--skip-invalid", action="store_true", help="merge the valid files, report the rest")
    m.add_argument("--replace", action="store_true", help="let incoming ok cells replace stored ones")
    m.set_defaults(func=_cmd_merge)
