"""`specdec run --dry-run` refuses a bad profile file before any engine starts, naming the
file and the field."""
import re

import pytest
import yaml

from specdec import cli, paths, runner


def _profile_file(tmp_path, mutate=None):
    """A copy of h200-surface (config-only models: nothing to download or convert), cut to
    one small experiment."""
    data = yaml.safe_load((paths.PROFILES_DIR / "h200-surface.yaml").read_text())
    data["name"] = "mine"
    data["experiments"] = [e for e in data["experiments"] if e["name"] == "medusa-5heads"]
    if mutate:
        mutate(data)
    f = tmp_path / "mine.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    return f


@pytest.fixture(autouse=True)
def no_engine(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("an engine subprocess was started")
    monkeypatch.setattr(runner, "_run_group", refuse)


def _run(f, tmp_path, capsys):
    code = cli.main(["run", str(f), "--dry-run", "--results-root", str(tmp_path / "results")])
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_of_a_good_profile_lists_its_cells(tmp_path, capsys):
    code, out, err = _run(_profile_file(tmp_path), tmp_path, capsys)
    assert (code, err) == (0, "")
    assert "engine medusa-5h K=5 (set acceptance)" in out
    assert "medusa-5h-k5-b1-repeat-t0-a0p5-" in out


def test_dry_run_refuses_a_misspelt_workload_source(tmp_path, capsys):
    f = _profile_file(tmp_path, lambda d: d["workloads"][0].update(source="mtbnech"))
    code, out, err = _run(f, tmp_path, capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"specdec: error: {f}: workloads[0].source: 'mtbnech' is not one of ")
    assert err.rstrip().endswith("did you mean 'mtbench'?")


def test_dry_run_refuses_an_hf_draft_without_id(tmp_path, capsys):
    f = _profile_file(tmp_path, lambda d: d["drafts"][0].update(source={"kind": "hf"}))
    code, out, err = _run(f, tmp_path, capsys)
    assert code == 2 and out == ""
    assert err == f"specdec: error: {f}: drafts[0].source.id: required key is missing\n"


def test_dry_run_names_file_and_field_of_an_unknown_top_level_key(tmp_path, capsys):
    f = _profile_file(tmp_path, lambda d: d.update(repeets=5))
    code, out, err = _run(f, tmp_path, capsys)
    assert code == 2
    assert re.match(rf"specdec: error: {re.escape(str(f))}: repeets: unknown key \(allowed here: "
                    r"description, drafts, .*repeats", err)
