"""One source of dependency versions: pyproject.toml. environment.yml is generated from it.

    specdec env extra data          # print the pins of one extra
    specdec env environment-yml     # rewrite environment.yml from pyproject.toml
    specdec env check               # exit 1 if environment.yml has drifted
    specdec env ensure-chromium     # apt-get install chromium if it is missing
"""
from __future__ import annotations

import shutil
import subprocess
import tomllib

from . import paths

ENVIRONMENT_YML = paths.ROOT / "environment.yml"
#: The conda environment is for GPU hosts: vLLM's CUDA build needs Python 3.12 and CUDA 13 torch.
CONDA_PYTHON = "3.12"
CONDA_EXTRAS = ("book", "gpu", "test")


def pyproject() -> dict:
    return tomllib.loads((paths.ROOT / "pyproject.toml").read_text())


def pins(extra: str | None = None) -> list[str]:
    project = pyproject()["project"]
    if extra is None:
        return list(project["dependencies"])
    extras = project["optional-dependencies"]
    if extra not in extras:
        raise SystemExit(f"unknown extra {extra!r} (known: {', '.join(sorted(extras))})")
    return list(extras[extra])


def environment_yml() -> str:
    lines = [
        "# GENERATED from pyproject.toml by `specdec env environment-yml`.",
        "# Do not edit by hand: tests/test_environment.py fails when the two drift apart.",
        "# For CUDA GPU hosts (torch 2.11 / CUDA 13, Python 3.12). CPU users: see README.",
        "name: specdec",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={CONDA_PYTHON}",
        "  - pip",
        "  - pip:",
    ]
    for pin in pins() + [p for e in CONDA_EXTRAS for p in pins(e)]:
        lines.append(f"      - {pin}")
    lines.append("      - -e .")
    return "\n".join(lines) + "\n"


def ensure_chromium() -> str:
    """Path of a headless-capable Chromium, installing Debian's package when missing."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if shutil.which("apt-get") is None:
        raise SystemExit("chromium is not installed and apt-get is not available")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True,
                   env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    found = shutil.which("chromium")
    if not found:
        raise SystemExit("apt-get install chromium finished but no chromium is on PATH")
    return found


def environment_yml_is_current() -> bool:
    """Whether environment.yml is what :func:`environment_yml` generates now."""
    return ENVIRONMENT_YML.is_file() and ENVIRONMENT_YML.read_text() == environment_yml()
