"""Every path the study uses, defined in one place."""
from __future__ import annotations

import os
from pathlib import Path

#: Repository root (lib/specdec/paths.py -> ../../..).
ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = ROOT / "profiles"
DATA_DIR = ROOT / "data"
RESULTS_DIR = DATA_DIR / "results"
MODEL_CONFIGS_DIR = DATA_DIR / "model_configs"
#: The claims ledger and the recorded API checks.
CLAIMS_DIR = DATA_DIR / "claims"
NOTEBOOKS_DIR = ROOT / "notebooks"
BOOK_DIR = ROOT / "book"

#: Large, regenerable artefacts (converted weights, bundles). Never committed.
CACHE_DIR = Path(os.environ.get("SPECDEC_CACHE", ROOT / ".cache"))


def results_dir(profile: str, root: Path | None = None) -> Path:
    """Where the rows of one profile's campaign live."""
    return (root or RESULTS_DIR) / profile
