"""The results store: tidy Parquet, one pair of files per cell, provenance on every row.

Layout (fixed, resumable)::

    data/results/<profile>/<cell_id>.runs.parquet     one row per timed repeat
    data/results/<profile>/<cell_id>.tokens.parquet   one row per request (greedy outputs)

A cell whose ``runs`` file exists with every row ``status == "ok"`` is done and
is skipped on resume; a failed cell is stored as ``status == "failed"`` rows
(with the error) and rerun on the next pass. Writes go to a temporary file in
the same folder and are renamed into place, so a crash never leaves half a file.
The tokens file is written before the runs file: a runs file implies its tokens.

Schema ``runs`` (a row = one timed repeat of one cell):

==========================  =====================================================
profile, cell_id            campaign and fixed cell name
config_hash                 hash of the cell's full configuration (profiles.config_hash)
experiment_tags             experiments that included the cell when it was measured (a record,
                            never rewritten); readers get the membership the profile gives *now*
                            (:func:`experiment_membership`, applied by :func:`load_runs`)
measure_version             version of the measuring protocol (runner.MEASURE_VERSION); null = 1
method, draft               method name; draft model name or null
num_speculative_tokens      K (0 for the baseline)
batch_size, workload        requests per ``generate`` call; workload name
temperature, max_tokens     sampling
compilation                 compilation config as JSON ("default" when vLLM's own)
repeat                      0-based index of the timed repeat (warm-ups are not stored)
status, error               "ok" or "failed"; the exception text for failures
wall_s                      seconds of the repeat's ``generate`` calls, summed (runner docstring)
num_requests                requests in the repeat (one pass: calls x batch_size)
num_prompt_tokens           prompt tokens in the repeat
num_output_tokens           generated tokens in the repeat
output_tokens_per_s         num_output_tokens / wall_s
tpot_ms                     ms per output token of one request: 1000*wall_s/(num_output_tokens/batch_size)
spec_num_drafts             delta of vllm:spec_decode_num_drafts over the repeat
spec_num_draft_tokens       delta of vllm:spec_decode_num_draft_tokens
spec_num_accepted_tokens    delta of vllm:spec_decode_num_accepted_tokens
spec_accepted_per_pos       delta of vllm:spec_decode_num_accepted_tokens_per_pos, by position
peak_memory_bytes           peak device memory of the engine process (GPU) or RSS (CPU)
kv_cache_bytes              KV cache size the engine allocated, where known
engine_start_s              seconds to construct the engine (same for all rows of a group)
acceptance_alpha            set acceptance alpha (synthetic rejection sampling); null = natural
synthetic_rates             the unconditional per-position rates set for the cell (alpha**(i+1))
model_runner                vLLM's model runner class (V1 and V2 runners differ in speed)
model_weight_bytes          bytes of the target's weights in the engine
draft_weight_bytes          bytes the draft or heads add (shared tensors counted once; 0: ngram)
kv_cache_tokens             tokens the KV cache holds (blocks x block size)
cudagraph_mode              the CUDA graph mode the engine ran with, after vLLM's own overrides
                            (dynamic K forces PIECEWISE on the V1 runner); null on CPU or older rows
async_scheduling            whether vLLM scheduled the next step while the GPU ran this one (its
                            default is off for draft_model, Medusa and ngram); null in older rows
attempt                     0; 1 for the repeats of a cell measured again because its CV was high
                            (protocol 2: readers take a cell's last attempt)
passes                      workload passes in the repeat (protocol 2: as many as make it last
                            ``protocol.min_repeat_s``)
engine_core                 "inproc" (vLLM's engine core in the measuring process) or "default"
                            (vLLM's default: a separate process)
engine_steps                engine steps of the repeat: per request max(1 + drafts, output -
                            accepted tokens), summed, over the batch size (the requests of a call
                            step together); for the baseline output tokens over batch size
step_ms                     1000 * wall_s / engine_steps: the time of one engine step
tokens_per_step             output tokens per request per step (realised; 1 for the baseline)
gpu_*                       what the GPU was doing during the repeat (NVML, sampled every 200 ms):
                            median SM clock, lowest SM clock, median memory clock, power, temperature,
                            the OR of the clock-throttle reasons seen; null on CPU
gpu_util_pct                median NVML GPU utilisation over the repeat (share of time a kernel ran)
host_probe_us               median time of a fixed piece of pure-Python work, timed every 200 ms
                            beside the engine (worker.GpuSampler): how fast the host ran host-side
                            code; null on CPU and beside an in-process engine core
host_busy_pct               share of the machine's CPU time that was busy over the repeat (psutil)
host_steal_pct              share of the machine's CPU time the hypervisor gave to others (steal)
engine_cpu_s                CPU seconds of the measuring process and its descendants (vLLM's
                            engine core) over the repeat
gpu_uuid                    the GPU's UUID (NVML): which physical GPU, hence which host, measured
engine_vcpu                 the vCPU the engine's busiest process (vLLM's engine core) ran on most
                            over the repeat (sampled with the GPU stamps; from its second repeat)
engine_vcpu_share           the share of those samples on that vCPU (1: it did not move)
engine_vcpu_probe_us        the CPU probe run on the engine's own vCPU (mean over the repeat, every
                            second sample, so it follows the repeat's mix of the vCPU's two
                            speeds): how fast that vCPU ran host code (lease 10 on)
lease_id                    the device lease that measured the row ($SPECDEC_LEASE), if any
panel_phase                 "start" or "end" for a lease's control-panel rows (issue 19), else null
draft_sha256                sha256 of the trained draft's or heads' weights measured (null: a
                            draft not trained here, or rows before lease 27)
provenance columns          see provenance.PROVENANCE_COLUMNS
==========================  =====================================================

Schema ``tokens`` (a row = one request of the first timed repeat): identity columns
as above plus ``request_index``, ``prompt_id``, ``output_token_ids`` and provenance.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import paths
from .provenance import PROVENANCE_COLUMNS


def read_parquet(source, columns: Sequence[str] | None = None) -> pa.Table:
    """One Parquet file (path or buffer) as a table, read on the calling thread.

    ``pq.read_table`` reads through Arrow's dataset scanner and its thread pools; a worker of
    those pools still alive when the interpreter exits aborts the process ("terminate called
    without an active exception", exit -6; apache/arrow#34314), after the command has done its
    work (a CI run of ``tests/test_without_torch.py`` failed so; about 1 exit in 10 here). Our
    files are a few KiB, threads buy nothing: ``ParquetFile.read(use_threads=False)`` starts
    none; nor does a file read as bytes (opening a path starts one). Pass the table on with
    ``to_pandas(use_threads=False)``, for the same reason.
    """
    if isinstance(source, (str, os.PathLike)):
        source = pa.BufferReader(Path(source).read_bytes())
    return pq.ParquetFile(source).read(columns=columns, use_threads=False)


class SchemaError(ValueError):
    """A stored file does not match the documented schema."""


_PROVENANCE_FIELDS = [
    pa.field("vllm_version", pa.string()),
    pa.field("vllm_package", pa.string()),
    pa.field("torch_version", pa.string()),
    pa.field("python_version", pa.string()),
    pa.field("device_name", pa.string()),
    pa.field("driver_version", pa.string()),
    pa.field("cpu_model", pa.string()),
    pa.field("hostname", pa.string()),
    pa.field("git_commit", pa.string()),
    pa.field("git_dirty", pa.bool_()),
    pa.field("timestamp_utc", pa.string()),
]
assert tuple(f.name for f in _PROVENANCE_FIELDS) == PROVENANCE_COLUMNS

_IDENTITY_FIELDS = [
    pa.field("profile", pa.string()),
    pa.field("cell_id", pa.string()),
    pa.field("config_hash", pa.string()),
    pa.field("experiment_tags", pa.list_(pa.string())),
    pa.field("method", pa.string()),
    pa.field("draft", pa.string()),
    pa.field("num_speculative_tokens", pa.int64()),
    pa.field("batch_size", pa.int64()),
    pa.field("workload", pa.string()),
    pa.field("temperature", pa.float64()),
    pa.field("max_tokens", pa.int64()),
    pa.field("compilation", pa.string()),
    pa.field("acceptance_alpha", pa.float64()),
    pa.field("measure_version", pa.int64()),
]

RUNS_SCHEMA = pa.schema(
    _IDENTITY_FIELDS
    + [
        pa.field("repeat", pa.int64()),
        pa.field("status", pa.string()),
        pa.field("error", pa.string()),
        pa.field("wall_s", pa.float64()),
        pa.field("num_requests", pa.int64()),
        pa.field("num_prompt_tokens", pa.int64()),
        pa.field("num_output_tokens", pa.int64()),
        pa.field("output_tokens_per_s", pa.float64()),
        pa.field("tpot_ms", pa.float64()),
        pa.field("spec_num_drafts", pa.int64()),
        pa.field("spec_num_draft_tokens", pa.int64()),
        pa.field("spec_num_accepted_tokens", pa.int64()),
        pa.field("spec_accepted_per_pos", pa.list_(pa.int64())),
        pa.field("peak_memory_bytes", pa.int64()),
        pa.field("kv_cache_bytes", pa.int64()),
        pa.field("engine_start_s", pa.float64()),
        pa.field("synthetic_rates", pa.list_(pa.float64())),
        pa.field("model_runner", pa.string()),
        pa.field("model_weight_bytes", pa.int64()),
        pa.field("draft_weight_bytes", pa.int64()),
        pa.field("kv_cache_tokens", pa.int64()),
        pa.field("cudagraph_mode", pa.string()),
        pa.field("async_scheduling", pa.bool_()),
        # Measuring protocol 2 (issue 19); null in rows measured before it.
        pa.field("attempt", pa.int64()),
        pa.field("passes", pa.int64()),
        pa.field("engine_core", pa.string()),
        pa.field("engine_steps", pa.float64()),
        pa.field("step_ms", pa.float64()),
        pa.field("tokens_per_step", pa.float64()),
        pa.field("gpu_sm_clock_mhz", pa.float64()),
        pa.field("gpu_sm_clock_min_mhz", pa.float64()),
        pa.field("gpu_mem_clock_mhz", pa.float64()),
        pa.field("gpu_power_w", pa.float64()),
        pa.field("gpu_temp_c", pa.float64()),
        pa.field("gpu_throttle_reasons", pa.int64()),
        pa.field("gpu_util_pct", pa.float64()),
        pa.field("host_probe_us", pa.float64()),
        pa.field("host_busy_pct", pa.float64()),
        pa.field("host_steal_pct", pa.float64()),
        pa.field("engine_cpu_s", pa.float64()),
        pa.field("gpu_uuid", pa.string()),
        pa.field("engine_vcpu", pa.int64()),
        pa.field("engine_vcpu_share", pa.float64()),
        pa.field("engine_vcpu_probe_us", pa.float64()),
        pa.field("lease_id", pa.string()),
        pa.field("panel_phase", pa.string()),
        pa.field("draft_sha256", pa.string()),
    ]
    + _PROVENANCE_FIELDS
)

#: Columns added after rows were first stored (schema 2, for the set-acceptance surface and
#: what the engine holds). A file written before them lacks them and reads them as null;
#: any other difference from the schema is an error.
ADDED_COLUMNS = frozenset({"acceptance_alpha", "synthetic_rates", "model_runner",
                           "model_weight_bytes", "draft_weight_bytes", "kv_cache_tokens",
                           "cudagraph_mode", "measure_version",
                           # protocol 2 (issue 19)
                           "attempt", "passes", "engine_core", "engine_steps", "step_ms",
                           "tokens_per_step", "gpu_sm_clock_mhz", "gpu_sm_clock_min_mhz",
                           "gpu_mem_clock_mhz", "gpu_power_w", "gpu_temp_c",
                           "gpu_throttle_reasons", "lease_id", "panel_phase",
                           # the host's side of a repeat (issue 19, lease 8)
                           "gpu_util_pct", "host_probe_us", "host_busy_pct", "host_steal_pct",
                           "engine_cpu_s", "gpu_uuid", "engine_vcpu", "engine_vcpu_share",
                           # what the async-control shows (lease 9)
                           "async_scheduling", "engine_vcpu_probe_us",
                           # which trained weights a row measured (lease 27)
                           "draft_sha256"})

TOKENS_SCHEMA = pa.schema(
    _IDENTITY_FIELDS
    + [
        pa.field("request_index", pa.int64()),
        pa.field("prompt_id", pa.string()),
        pa.field("output_token_ids", pa.list_(pa.int64())),
    ]
    + _PROVENANCE_FIELDS
)

SCHEMAS = {"runs": RUNS_SCHEMA, "tokens": TOKENS_SCHEMA}


def _table(rows: Sequence[Mapping], schema: pa.Schema) -> pa.Table:
    missing = [f.name for f in schema if any(f.name not in r for r in rows)]
    if missing:
        raise SchemaError(f"rows lack column(s): {', '.join(missing)}")
    extra = sorted({k for r in rows for k in r} - set(schema.names))
    if extra:
        raise SchemaError(f"rows have undocumented column(s): {', '.join(extra)}")
    try:
        return pa.Table.from_pylist([dict(r) for r in rows], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaError(f"rows do not fit the schema: {e}") from None


def atomic_write_table(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` so that readers see the old file or the new, never half.
    Without column statistics: every read takes a whole file (:func:`read_parquet`), so they
    serve nothing, and in a file of a few rows and 71 columns they were a fifth of its bytes,
    which every lease's call carries with the tree."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp, write_statistics=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def runs_path(profile: str, cell_id: str, root: Path | None = None) -> Path:
    return paths.results_dir(profile, root) / f"{cell_id}.runs.parquet"


def tokens_path(profile: str, cell_id: str, root: Path | None = None) -> Path:
    return paths.results_dir(profile, root) / f"{cell_id}.tokens.parquet"


def write_cell(profile: str, cell_id: str, runs: Sequence[Mapping],
               tokens: Sequence[Mapping] = (), root: Path | None = None) -> Path:
    """Store one cell: tokens first, then runs (whose presence marks the cell as stored)."""
    if not runs:
        raise SchemaError(f"{cell_id}: no run rows to write")
    runs_table = _table(runs, RUNS_SCHEMA)  # validate both before touching disk
    tokens_table = _table(tokens, TOKENS_SCHEMA) if tokens else None
    if tokens_table is not None:
        atomic_write_table(tokens_table, tokens_path(profile, cell_id, root))
    out = runs_path(profile, cell_id, root)
    atomic_write_table(runs_table, out)
    return out


#: Files already read and checked in this process, keyed by their content: (path, schema,
#: digest of the bytes) -> table. A chapter reads the same committed rows many times over
#: (the conclusions chapter: 3447 reads of 988 files, half its time); a file whose bytes
#: changed in any way is parsed and checked again (the key is the content, not a timestamp,
#: which the kernel may leave unchanged by a quick rewrite). Tables are immutable; a failed
#: read is never kept, so a bad file raises every time it is read.
_READ_CACHE: dict[tuple, tuple[pa.Schema, pa.Table]] = {}
_READ_CACHE_MAX = 50_000


def read_file(f: Path, schema: pa.Schema) -> pa.Table:
    """One stored file, checked against ``schema``; a file that is not readable Parquet or
    does not fit the schema raises :class:`SchemaError` naming it (never skipped)."""
    import hashlib

    try:
        with open(f, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise SchemaError(f"{f}: not a readable Parquet file ({e}); move it away or delete "
                          f"it to remeasure the cell") from None
    key = (os.fspath(f), id(schema), hashlib.blake2b(data, digest_size=20).digest())
    hit = _READ_CACHE.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    table = _read_file(f, schema, pa.BufferReader(data))
    if len(_READ_CACHE) >= _READ_CACHE_MAX:
        _READ_CACHE.clear()
    _READ_CACHE[key] = (schema, table)
    return table


def _read_file(f: Path, schema: pa.Schema, source) -> pa.Table:
    try:
        t = read_parquet(source)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise SchemaError(f"{f}: not a readable Parquet file ({e}); move it away or delete "
                          f"it to remeasure the cell") from None
    absent = [n for n in schema.names if n in ADDED_COLUMNS and n not in t.schema.names]
    for name in absent:
        fld = schema.field(name)
        t = t.append_column(fld, pa.nulls(t.num_rows, type=fld.type))
    if absent and set(t.schema.names) == set(schema.names):
        t = t.select(schema.names)
    if t.schema.names != schema.names:
        missing = sorted(set(schema.names) - set(t.schema.names))
        extra = sorted(set(t.schema.names) - set(schema.names))
        raise SchemaError(f"{f}: columns differ from the schema "
                          f"(missing {missing or 'none'}, extra {extra or 'none'})")
    try:
        return t.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
        raise SchemaError(f"{f}: types differ from the schema: {e}") from None


def cell_status(profile: str, cell_id: str, root: Path | None = None) -> str:
    """"missing", "ok" or "failed" for one stored cell (a corrupt file: SchemaError)."""
    p = runs_path(profile, cell_id, root)
    if not p.exists():
        return "missing"
    status = read_file(p, RUNS_SCHEMA).column("status").to_pylist()
    return "ok" if status and all(s == "ok" for s in status) else "failed"


def measured_weights(profile: str, cell_id: str, root: Path | None = None) -> set:
    """The ``draft_sha256`` values of a stored cell's rows (None: rows before the column, or
    a draft not trained here)."""
    p = runs_path(profile, cell_id, root)
    return set(read_file(p, RUNS_SCHEMA).column("draft_sha256").to_pylist()) if p.exists() else set()


def is_done(profile: str, cell_id: str, root: Path | None = None) -> bool:
    return cell_status(profile, cell_id, root) == "ok"


def partial_files(profile: str, root: Path | None = None) -> list[Path]:
    """Temporary files an interrupted write left behind (``atomic_write_table``'s)."""
    d = paths.results_dir(profile, root)
    return sorted(d.glob(".*.parquet.*.tmp")) if d.exists() else []


def read_frame(files: Iterable[Path], schema: pa.Schema) -> pd.DataFrame:
    """Stored files of one schema (:func:`read_file` each) as one frame, in file order."""
    tables = [read_file(f, schema) for f in sorted(files)]
    if not tables:
        return schema.empty_table().to_pandas(use_threads=False)
    return pa.concat_tables(tables).to_pandas(use_threads=False)


# --------------------------------------------------------------------------- #
# Experiment membership: derived from the profile at read time, never stored
# --------------------------------------------------------------------------- #
def experiment_membership(profile) -> dict[str, list[str]]:
    """cell_id -> the experiments of ``profile`` (a Profile, a name or a path) whose grid
    holds the cell, as the profile says now. {} when the profile is not in this checkout."""
    from . import profiles as P

    if isinstance(profile, P.Profile):
        return _membership(profile)
    path = Path(profile) if Path(str(profile)).suffix else paths.PROFILES_DIR / f"{profile}.yaml"
    try:
        key = (str(path.resolve()), path.stat().st_mtime_ns)
    except OSError:
        return {}
    if key not in _MEMBERSHIP_CACHE:
        try:
            _MEMBERSHIP_CACHE[key] = _membership(P.load_profile(path))
        except P.ProfileError:
            _MEMBERSHIP_CACHE[key] = {}
    return _MEMBERSHIP_CACHE[key]


_MEMBERSHIP_CACHE: dict[tuple[str, int], dict[str, list[str]]] = {}


def _membership(profile) -> dict[str, list[str]]:
    from . import profiles as P

    out: dict[str, list[str]] = {}
    for e in profile.experiments:
        for c in P.expand(profile, [e.name]):
            out.setdefault(P.cell_id(profile, c), []).append(e.name)
    return out


def with_membership(df: pd.DataFrame, experiments_from: Mapping | None = None) -> pd.DataFrame:
    """``df`` with ``experiment_tags`` set from each row's profile, as it is now.

    ``experiments_from`` maps a profile name to a Profile or a path (default:
    ``profiles/<name>.yaml``). A cell the profile's grids no longer hold, or a profile not
    in this checkout, keeps the record written when it was measured.
    """
    if df.empty or "experiment_tags" not in df.columns:
        return df
    experiments_from = experiments_from or {}
    tags = list(df["experiment_tags"])
    for name in df["profile"].unique():
        member = experiment_membership(experiments_from.get(name, name))
        if not member:
            continue
        for i, (p, cid) in enumerate(zip(df["profile"], df["cell_id"])):
            if p == name and cid in member:
                tags[i] = list(member[cid])
    df = df.copy()
    df["experiment_tags"] = pd.Series(tags, index=df.index, dtype=object)
    return df


def tagged(df: pd.DataFrame, experiments: Sequence[str]) -> pd.DataFrame:
    """Rows whose cell belongs to any of ``experiments`` (``experiment_tags``, set by
    :func:`with_membership` when the rows are read)."""
    if df.empty:
        return df
    wanted = set(experiments)
    mask = [tags is not None and bool(wanted & set(tags)) for tags in df["experiment_tags"]]
    return df.loc[pd.Series(mask, index=df.index, dtype=bool)]


def load_runs(profiles: str | Sequence[str], root: Path | None = None,
              only_ok: bool = False, experiments_from: Mapping | None = None) -> pd.DataFrame:
    """All run rows of one or more profiles, schema-checked, with experiment membership
    from the profiles (:func:`with_membership`)."""
    names = [profiles] if isinstance(profiles, str) else list(profiles)
    files = [f for n in names for f in paths.results_dir(n, root).glob("*.runs.parquet")]
    df = with_membership(read_frame(files, RUNS_SCHEMA), experiments_from)
    return df[df["status"] == "ok"].reset_index(drop=True) if only_ok else df


def load_tokens(profiles: str | Sequence[str], root: Path | None = None,
                experiments_from: Mapping | None = None) -> pd.DataFrame:
    names = [profiles] if isinstance(profiles, str) else list(profiles)
    files = [f for n in names for f in paths.results_dir(n, root).glob("*.tokens.parquet")]
    return with_membership(read_frame(files, TOKENS_SCHEMA), experiments_from)


def check_provenance(df: pd.DataFrame, where: str = "rows") -> None:
    """Every row must say what measured it: versions, device, commit, time, config."""
    need = ["vllm_version", "torch_version", "device_name", "git_commit",
            "timestamp_utc", "config_hash"]
    for col in need:
        if col not in df.columns:
            raise SchemaError(f"{where}: no column {col!r}")
        bad = df[col].isna()
        if bad.any():
            raise SchemaError(f"{where}: {int(bad.sum())} row(s) lack {col!r}")
