"""The API checks' results on disk: one Parquet file per vLLM version,
``data/claims/api_checks-<vllm_package>-<version>.parquet``, one row per check with the
outcome, the exception verbatim, the real API and provenance."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import paths, store

CLAIMS_DIR = paths.CLAIMS_DIR

CHECK_COLUMNS = ["check_id", "claim_ids", "description", "call", "outcome",
                 "exception_type", "exception_message", "error_summary", "observed",
                 "real_api", "vllm_source", "config_hash"]


def checks_filename(vllm_package: str, version: str) -> str:
    return f"api_checks-{vllm_package}-{version}.parquet"


def write_checks(rows: list[dict[str, Any]], out_dir: Path | None = None) -> Path:
    """Store check rows atomically as ``api_checks-<pkg>-<version>.parquet``."""
    import pyarrow as pa

    from ..store import atomic_write_table

    if not rows:
        raise ValueError("no check rows to write")
    pkg, ver = rows[0]["vllm_package"], rows[0]["vllm_version"]
    out = Path(out_dir or CLAIMS_DIR) / checks_filename(pkg, ver)
    atomic_write_table(pa.Table.from_pylist(rows), out)
    return out


def load_checks(claims_dir: Path | None = None):
    """All recorded check results (every vLLM version), one DataFrame."""
    import pandas as pd

    files = sorted(Path(claims_dir or CLAIMS_DIR).glob("api_checks-*.parquet"))
    if not files:
        return pd.DataFrame(columns=CHECK_COLUMNS + ["vllm_package", "vllm_version"])
    return pd.concat([store.read_parquet(f).to_pandas(use_threads=False) for f in files], ignore_index=True)


def recorded_spec_config(vllm_package: str, vllm_version: str,
                         claims_dir: Path | None = None) -> tuple[str, dict[str, Any]] | None:
    """What check ``speculative_config_fields`` recorded (``fields``, ``methods``) for that
    vLLM, else for any recorded one, as ``("<package> <version>", observed)``; None if no
    vLLM's is recorded. Pre-flight's fallback where vLLM is not importable."""
    df = load_checks(claims_dir)
    df = df[df["check_id"] == "speculative_config_fields"]
    if df.empty:
        return None
    pinned = df[(df["vllm_package"] == vllm_package) & (df["vllm_version"] == vllm_version)]
    row = (pinned if not pinned.empty else df).iloc[-1]
    return f"{row['vllm_package']} {row['vllm_version']}", json.loads(row["observed"])


def recorded_check(check_id: str, checks=None):
    """One check's recorded outcome and verbatim error for every vLLM version, side by side."""
    checks = load_checks() if checks is None else checks
    df = checks[checks["check_id"] == check_id]
    cols = ["vllm_package", "vllm_version", "device_name", "outcome", "exception_type",
            "exception_message", "observed", "real_api", "vllm_source"]
    return df[cols].reset_index(drop=True)
