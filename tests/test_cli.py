"""The `specdec` command: `run --dry-run` refuses a bad profile file before any engine starts,
naming the file and the field; every other subcommand declared in specdec.cli runs for real."""
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


def test_a_superseded_profile_is_listed_but_not_measured(tmp_path, capsys):
    """h200-surface (the first protocol's) names its successor: a dry run lists its cells, a
    run is refused before any engine starts, naming the profile to measure instead."""
    f = _profile_file(tmp_path)
    assert yaml.safe_load(f.read_text())["superseded_by"] == "h200-surface-v2"
    assert _run(f, tmp_path, capsys)[0] == 0
    code = cli.main(["run", str(f), "--results-root", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code != 0 and "superseded by h200-surface-v2" in err and "measure h200-surface-v2" in err


def test_a_gpu_profile_is_not_measured_on_another_gpu(tmp_path, capsys, monkeypatch):
    """The device tool may lend an H100 for a call that asks for an H200: a run of an H200
    profile there is refused before any engine starts (its rows would pass for H200 rows),
    and so is vLLM's own peer run; a dry run, a CPU machine and the named GPU go on."""
    from specdec import peer, profiles, provenance, runner

    prof = profiles.load_profile("h200-surface-v2")
    assert prof.hardware.gpu_model() == "H200"
    assert profiles.load_profile("cpu-smollm2").hardware.gpu_model() is None
    assert [profiles.gpu_model(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
                                            "NVIDIA H200", "cpu")] == ["H100", "A100", "H200", None]
    monkeypatch.setattr(provenance, "gpu", lambda: ("NVIDIA H100 80GB HBM3", "580.159.04"))
    monkeypatch.setattr(runner, "gpu", provenance.gpu)
    code = cli.main(["run", "h200-surface-v2", "-e", "dynamic-k-1b",
                     "--results-root", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code != 0 and "measures an H200" in err and "NVIDIA H100 80GB HBM3" in err
    assert not (tmp_path / "results").exists()  # nothing written
    with pytest.raises(profiles.ProfileError, match="measures an H200"):
        peer.run(prof, "peer-check", results_root=tmp_path / "peer")
    assert cli.main(["run", "h200-surface-v2", "-e", "dynamic-k-1b", "--dry-run",
                     "--results-root", str(tmp_path / "results")]) == 0
    prof.refuse_other_gpu("NVIDIA H200")  # no error
    profiles.load_profile("cpu-smollm2").refuse_other_gpu("cpu")  # no error


def test_a_gpu_profile_is_not_measured_where_no_gpu_is_visible(tmp_path, capsys, monkeypatch):
    """On a machine without a GPU a GPU profile stores nothing (each cell would be stored as a
    failure, and the regeneration would open a pull request with them); so does any profile
    where vllm cannot be imported (the book's environment)."""
    import importlib.util

    from specdec import runner

    monkeypatch.setattr(runner, "gpu", lambda: ("cpu", None))
    code = cli.main(["run", "h200-surface-v2", "--results-root", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code != 0 and "nvidia-smi sees none" in err and "--dry-run" in err
    assert not (tmp_path / "results").exists()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a))
    code = cli.main(["run", "cpu-smollm2", "--force", "--results-root", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code != 0 and "vllm cannot be imported here" in err
    assert not (tmp_path / "results").exists()


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


# -- every subcommand is declared in specdec.cli, and each is exercised below ------------------ #
def test_every_subcommand_is_declared_without_plugin_loading():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {"run", "status", "validate", "claims", "book", "bundle", "unpack",
                                "merge", "peer", "regenerate", "train", "env", "carry-plan",
                                "measured-where", "panel", "devicetime"}
    assert "importlib" not in (paths.ROOT / "lib/specdec/cli.py").read_text()


def test_validate_accepts_a_good_profile_and_names_the_field_of_a_bad_one(tmp_path, capsys):
    (tmp_path / "good").mkdir()
    (tmp_path / "bad").mkdir()
    good = _profile_file(tmp_path / "good")
    assert cli.main(["validate", str(good)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{good}: ok\n  - speculative_config keys checked against the ")
    bad = _profile_file(tmp_path / "bad", lambda d: d["workloads"][0].update(source="mtbnech"))
    assert cli.main(["validate", str(bad), str(good)]) == 1  # every profile is still reported
    out = capsys.readouterr().out
    assert out.startswith(f"{bad}: REJECTED: {bad}: workloads[0].source: 'mtbnech' is not one of")
    assert f"\n{good}: ok\n" in out


def test_validate_reports_what_vllm_would_refuse(tmp_path, capsys):
    f = _profile_file(tmp_path, lambda d: d.update(sampling={**d.get("sampling", {}),
                                                              "min_p": 0.05}))
    assert cli.main(["validate", str(f)]) == 1
    assert f"{f}: REJECTED: sampling.min_p: min_p=0.05 with speculative decoding" in \
        capsys.readouterr().out


def test_claims_refuses_an_unknown_check_before_running_any(capsys):
    assert cli.main(["claims", "--only", "spec_k_zero", "spec_k_nope"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("specdec claims: error: --only: no check named 'spec_k_nope' (known: ")


def test_claims_runs_checks_and_stores_them_only_where_asked(tmp_path, capsys):
    pytest.importorskip("vllm")
    from specdec.claims import checkio

    assert cli.main(["claims", "--only", "spec_k_zero", "spec_key_draft_worker_use_ray"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^spec_k_zero\s+rejected\s", out, re.M), out
    assert "not stored (a subset" in out and "DIFFERS FROM LEDGER" not in out
    assert cli.main(["claims", "--only", "spec_k_zero", "--out", str(tmp_path)]) == 0
    [stored] = tmp_path.glob("api_checks-*.parquet")
    rows = checkio.load_checks(tmp_path)
    assert list(rows["check_id"]) == ["spec_k_zero"] and list(rows["outcome"]) == ["rejected"]
    assert str(stored) in capsys.readouterr().out


def test_book_reports_an_unknown_chapter_plainly(capsys):
    assert cli.main(["book", "--only", "no_such_chapter"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("specdec book: error: --only: no notebook named 'no_such_chapter'")


def test_env_extra_prints_the_pins_of_pyproject(capsys):
    from specdec import envspec

    assert cli.main(["env", "extra", "data"]) == 0
    assert capsys.readouterr().out.split() == envspec.pins("data")
    assert cli.main(["env", "extra"]) == 0  # no name: the core dependencies
    assert capsys.readouterr().out.split() == envspec.pins()


def test_env_check_and_environment_yml(tmp_path, monkeypatch, capsys):
    from specdec import envspec

    assert cli.main(["env", "check"]) == 0  # the committed file is current
    copy = tmp_path / "environment.yml"
    copy.write_text(envspec.ENVIRONMENT_YML.read_text().replace("pip\n", "pip\n  - extra\n", 1))
    monkeypatch.setattr(envspec, "ENVIRONMENT_YML", copy)
    assert cli.main(["env", "check"]) == 1
    assert "environment.yml differs from pyproject.toml" in capsys.readouterr().err
    assert cli.main(["env", "environment-yml"]) == 0
    assert copy.read_text() == envspec.environment_yml()
    assert cli.main(["env", "check"]) == 0


def test_env_ensure_chromium_prints_an_executable(capsys):
    import os
    import shutil

    if not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no Chromium here: the command would apt-get install it")
    assert cli.main(["env", "ensure-chromium"]) == 0
    path = capsys.readouterr().out.strip()
    assert os.path.isfile(path) and os.access(path, os.X_OK), path


def test_env_without_an_action_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["env"])
    assert e.value.code == 2 and "ACTION" in capsys.readouterr().err


def test_panel_of_an_unknown_profile_says_so(capsys):
    assert cli.main(["panel", "nonexistent"]) != 0
    assert "unknown profile 'nonexistent'" in capsys.readouterr().err
    assert cli.main(["panel", "h200-surface-v2"]) == 0
    assert "2026-12-05-h200-21" in capsys.readouterr().out


def test_book_executes_only_what_changed_unless_told(monkeypatch, capsys, tmp_path):
    """`specdec book` (replay) goes through the chapters' input keys: a second `make book`
    executes nothing; --only, --profile and --all execute as asked and forget the keys of
    what they executed, so that the next replay build does not trust a copy made otherwise."""
    from specdec import book, bookcache

    calls = []
    monkeypatch.setattr(bookcache, "update_book", lambda out=None: calls.append("cached") or [])
    copy = tmp_path / "k_sweep.ipynb"
    monkeypatch.setattr(book, "execute_all", lambda **kw: calls.append(kw) or [copy])
    monkeypatch.setattr(book, "build", lambda quiet=False: calls.append("build") or tmp_path)
    (tmp_path / ".inputs").mkdir()
    key = tmp_path / ".inputs" / "k_sweep.sha256"
    key.write_text("old\n")
    assert cli.main(["book"]) == 0 and calls == ["cached"]
    assert cli.main(["book", "--only", "k_sweep"]) == 0
    assert calls[1:] == [{"mode": "replay", "profiles": None, "only": ["k_sweep"]}, "build"]
    assert not key.exists()
    calls.clear()
    assert cli.main(["book", "--all"]) == 0 and calls[-1] == "build" and "cached" not in calls
