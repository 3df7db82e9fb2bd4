"""specdec.acceptance: the tables of the chapter on real acceptance, on hand-made summaries."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from specdec import acceptance, theory


def _row(profile, method, k, workload, t, rate, per_pos, **extra):
    return {"profile": profile, "method": method, "num_speculative_tokens": k,
            "workload": workload, "temperature": t, "acceptance_rate": rate,
            "mean_acceptance_length": 1 + k * rate, "accepted_per_pos_rate": per_pos,
            "draft_weight_bytes": 8e6, "acceptance_alpha": np.nan, **extra}


@pytest.fixture()
def summary():
    rows = [
        _row("h200-trained", "eagle3", 4, "mtbench", 0.0, 0.20, [0.4, 0.2, 0.1, 0.1]),
        _row("h200-trained", "eagle3", 4, "humaneval", 0.0, 0.10, [0.2, 0.1, 0.05, 0.05]),
        _row("h200-trained", "eagle3", 4, "mtbench", 0.7, 0.15, [0.3, 0.15, 0.1, 0.05]),
        _row("h200-trained", "eagle", 4, "mtbench", 0.0, 0.05, [0.1, 0.05, 0.03, 0.02]),
        _row("cpu-trained", "eagle3", 4, "mtbench", 0.0, 0.18, [0.36, 0.18, 0.1, 0.08]),
        {"profile": "h200-trained", "method": "baseline", "num_speculative_tokens": 0,
         "workload": "mtbench", "temperature": 0.0, "acceptance_rate": np.nan},
    ]
    return pd.DataFrame(rows)


def test_per_position_gives_the_conditional_rates(summary):
    pos = acceptance.per_position(summary)
    one = pos[(pos["setting"].str.startswith("H200")) & (pos["method"] == "eagle3")
              & (pos["workload"] == "mtbench") & (pos["temperature"] == 0)]
    assert one["rate"].tolist() == [0.4, 0.2, 0.1, 0.1]
    assert one["conditional"].round(6).tolist() == [0.4, 0.5, 0.5, 1.0]
    assert "baseline" not in set(pos["method"])


def test_cpu_against_gpu_pairs_the_same_cell(summary):
    both = acceptance.cpu_vs_gpu(summary)
    assert len(both) == 1 and both.iloc[0]["method"] == "eagle3"
    assert both.iloc[0]["difference"] == pytest.approx(0.02)
    assert "+2.0%" in acceptance.agreement_sentence(both)
    assert acceptance.machine_spread(both) == pytest.approx(0.02)
    assert np.isnan(acceptance.machine_spread(both.iloc[0:0]))
    assert acceptance.agreement_sentence(both.iloc[0:0]).startswith("no cell")


def test_ranking_and_temperature(summary):
    rank = acceptance.ranking(summary, "h200-trained", 4)
    assert rank["method"].tolist() == ["eagle3", "eagle"]
    assert rank.iloc[0]["acceptance"] == pytest.approx(0.15)
    assert acceptance.ranking_sentence(rank).startswith("eagle3 15% (10%–20%)")
    temp = acceptance.temperature_effect(summary)
    assert temp[["T = 0", "T = 0.7"]].values.tolist() == [[0.2, 0.15]]
    assert acceptance.temperature_sentence(temp) == ("from T = 0 to T = 0.7 the acceptance rate "
                                                     "changed by -5.0 percentage points in the "
                                                     "median over 1 cell (-5.0 to -5.0)")
    assert acceptance.temperature_sentence(temp.iloc[0:0]).startswith("no cell")
    assert acceptance.temperature_by_method(temp) == "eagle3 -5.0 points"
    assert acceptance.temperature_effect(None).empty


def test_beside_the_article_shows_the_ledgers_verdict(summary, tmp_path):
    """The trained chapter's table gives each claim the claims ledger's verdict, not its own."""
    from specdec import claims

    table = acceptance.beside_the_article(summary, ["C30", "C29", "C7"], root=tmp_path).set_index("claim")
    # eagle rows: same vLLM method as C30, everything else differs
    assert table.loc["C30", "our methods"] == "eagle"
    assert "model smollm2-135m" in table.loc["C30", "what differs"]
    assert table.loc["C29", "our cells"] == 0 and table.loc["C29", "what differs"] == ""
    assert table.loc["C7", "article acceptance"] == pytest.approx(0.68)
    ledger = {c.id: c for c in claims.load_ledger()}
    for cid in ("C30", "C29", "C7"):  # no rows under tmp_path: the ledger's verdict, as derived
        assert table.loc[cid, "verdict (claims ledger)"] == \
            claims.derive_verdict(ledger[cid], root=tmp_path)["verdict"]
    assert table.loc["C7", "verdict (claims ledger)"] == "contradicted"  # the pair is refused


def test_on_the_surface_takes_the_measured_tokens_at_the_measured_step_cost(summary):
    surface_df = pd.DataFrame({
        "method": ["baseline", "eagle3", "eagle3", "eagle"], "workload": ["repeat"] * 4,
        "num_speculative_tokens": [0, 4, 4, 4], "batch_size": [1, 1, 1, 1],
        "acceptance_alpha": [np.nan, 0.0, 1.0, 0.5], "step_ms": [8.0, 10.0, 14.0, 12.0]})
    est = acceptance.on_the_surface(summary, surface_df, k=4).set_index("method")
    alpha = float(theory.alpha_from_rate(0.15, 4))
    assert est.loc["eagle3", "alpha"] == pytest.approx(alpha)
    # mean tokens per step over the two workloads: (1.8 + 1.4) / 2; the step's cost between
    # the measured 10 ms at alpha 0 and 14 ms at alpha 1; the baseline's 8 ms per token
    assert est.loc["eagle3", "tokens per step"] == pytest.approx(1.6)
    assert est.loc["eagle3", "speedup"] == pytest.approx(8.0 * 1.6 / (10.0 + 4.0 * alpha))
    assert np.isnan(est.loc["eagle", "speedup"])  # one measured α: nothing to read between
    assert "eagle3 (acceptance rate 15%, per-token α ≈" in acceptance.surface_sentence(est.reset_index())


def test_adaptive_simulation_uses_the_longest_measured_profile(summary):
    q, where = acceptance.conditional_profile(summary, "eagle3")
    # the CPU's profile comes first when both machines measured the same K
    assert where.startswith("CPU") and q[0] == pytest.approx(0.36)
    surface_df = pd.DataFrame({
        "method": ["baseline"] + ["eagle3"] * 3, "batch_size": [1] * 4,
        "num_speculative_tokens": [0, 1, 2, 4], "step_ms": [np.nan, 11.0, 12.0, 14.0],
        "tpot_ms_median": [10.0, np.nan, np.nan, np.nan]})
    sim = acceptance.simulate_adaptive(summary, surface_df, n_steps=2000)
    assert sim["method"].tolist() == ["eagle3"]
    assert 1 <= sim.iloc[0]["best fixed K"] <= 8
    assert sim.iloc[0]["adaptive / best fixed"] <= 1.05
    assert "(simulated)" in acceptance.adaptive_sentence(sim)


def test_artifact_table_and_data_sentence_read_the_records(tmp_path):
    art = tmp_path / "smollm2-eagle"
    art.mkdir()
    (art / "manifest.json").write_text(json.dumps({
        "method": "eagle", "trained_params": 4.2e6, "weights_bytes": 8.4e6,
        "run": {"steps": 10, "train_s": 5.0, "stopped_by": "max_steps", "device_name": "cpu",
                "final_eval": {"loss": 1.5, "acc1": 0.4}},
        "data_sha256": "ab" * 32, "files": {"model.safetensors": "cd" * 32}}))
    table = acceptance.artifact_table(tmp_path)
    assert table["artifact"].tolist() == ["smollm2-eagle"]
    assert table.iloc[0]["agreement at position 1"] == 0.4
    (tmp_path / "_data").mkdir()
    (tmp_path / "_data" / "sequences.npz.json").write_text(json.dumps({
        "sequences": 3, "completion_tokens": 30, "data_sha256": "ef" * 32,
        "generation": {"max_tokens": 10, "engine": "0.26.0", "dtype": "bfloat16", "seconds": 1.0},
        "heldout": {"count": 256, "sha256": "01" * 32}}))
    assert acceptance.data_sentence(tmp_path).startswith("3 greedy continuations")


def test_model_free_against_trained():
    rank = pd.DataFrame({"method": ["ngram", "eagle3", "suffix"],
                         "acceptance": [0.5, 0.14, 0.45]})
    assert acceptance.model_free_sentence(rank).startswith(
        "the best model-free proposer, ngram, accepts more than the best trained one, eagle3 (50% against 14%")
    assert acceptance.model_free_sentence(rank[rank["method"] != "eagle3"]).startswith("not measured beside")
    # the trained ones' range leaves out what trains nothing
    two = pd.concat([rank, pd.DataFrame({"method": ["eagle"], "acceptance": [0.11]})])
    assert acceptance.trained_range(two) == "11% to 14%"
    assert acceptance.trained_range(rank[rank["method"] != "eagle3"]) == "not measured yet"


def test_longest_profiles_keep_each_methods_largest_k(summary):
    extra = pd.DataFrame([_row("h200-trained", "eagle", 8, "mtbench", 0.0, 0.05, [0.1] * 8)])
    pos = acceptance.longest_profiles(acceptance.per_position(pd.concat([summary, extra])))
    h200 = pos[pos["setting"].str.startswith("H200") & (pos["temperature"] == 0)]
    assert set(h200.loc[h200["method"] == "eagle", "K"]) == {8}
    assert set(h200.loc[h200["method"] == "eagle3", "K"]) == {4}


def test_reproduction_compares_the_same_cells_against_the_declared_tolerance(summary):
    retrained = pd.DataFrame([
        # eagle3: +0.01 and +0.02 on the two workloads both measured -> mean +0.015, within
        _row("h200-retrained", "eagle3", 4, "mtbench", 0.0, 0.21, [0.4] * 4),
        _row("h200-retrained", "eagle3", 4, "humaneval", 0.0, 0.12, [0.2] * 4),
        # a workload the recorded profile did not measure is left out of both means
        _row("h200-retrained", "eagle3", 4, "sharegpt-heldout", 0.0, 0.90, [0.9] * 4),
        # eagle: 0.05 -> 0.10, outside +-3 points
        _row("h200-retrained", "eagle", 4, "mtbench", 0.0, 0.10, [0.2] * 4),
        # another temperature is not compared
        _row("h200-retrained", "eagle3", 4, "mtbench", 0.7, 0.99, [0.99] * 4),
    ])
    rep = acceptance.reproduction(pd.concat([summary, retrained], ignore_index=True))
    by = rep.set_index("method")
    assert by.loc["eagle3", "workloads"] == 2
    assert by.loc["eagle3", "difference"] == pytest.approx(0.015)
    assert by.loc["eagle3", "largest workload difference"] == pytest.approx(0.02)
    assert bool(by.loc["eagle3", "within tolerance"])
    assert by.loc["eagle", "difference"] == pytest.approx(0.05)
    assert not bool(by.loc["eagle", "within tolerance"])
    text = acceptance.reproduction_sentence(rep)
    assert text.startswith("1 of 2 methods reproduce within ±3%") and "eagle, +5.0%" in text
    assert acceptance.reproduction(summary).empty  # nothing retrained yet
    assert "not been measured" in acceptance.reproduction_sentence(acceptance.reproduction(summary))
    assert acceptance.reproduction_margin(rep, 0.014) == (
        "the largest difference of the means, 5.0%, is outside the tolerance and not smaller than "
        "the 1.4% by which the same weights vary between the CPU and the H200")
    assert acceptance.reproduction_margin(rep[rep["method"] == "eagle3"], 0.02).startswith(
        "the largest difference of the means, 1.5%, is within the tolerance and smaller")
    assert acceptance.reproduction_margin(rep.iloc[0:0], 0.014).startswith("not known")
    # profiles passed by name are paired even where they are not among the chapter's campaigns
    other = pd.concat([summary, retrained], ignore_index=True).replace(
        {"profile": {"h200-trained": "a", "h200-retrained": "b"}})
    assert acceptance.reproduction(other, "a", "b")["method"].tolist() == ["eagle3", "eagle"]


def test_retraining_table_says_whether_data_and_weights_are_the_same(tmp_path):
    def record(root, name, steps, acc1, data, weights):
        d = root / name
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({
            "method": "eagle", "run": {"steps": steps, "final_eval": {"acc1": acc1}},
            "data_sha256": data, "files": {"model.safetensors": weights}}))

    record(tmp_path / "a", "smollm2-eagle", 369, 0.42, "d1", "w1")
    record(tmp_path / "b", "smollm2-eagle", 369, 0.41, "d1", "w2")
    t = acceptance.retraining_table(tmp_path / "a", tmp_path / "b")
    row = t.set_index("artifact").loc["smollm2-eagle"]
    assert row["steps (recorded)"] == row["steps (retrained)"] == 369
    assert bool(row["same data"]) and not bool(row["same weights"])
    assert acceptance.retraining_sentence(t) == (
        "1 of 1 artifacts were retrained on data with the recorded sha256, 1 of 1 for the "
        "recorded number of steps; 0 of 1 came out with the recorded weights bit for bit, and "
        "their agreement with the target at position 1 differs from the recorded by at most "
        "1.0% (absolute)")
    assert acceptance.retraining_table(tmp_path / "a", tmp_path / "none").empty
    assert acceptance.retraining_sentence(pd.DataFrame()).startswith("no retraining")


def test_medusa_variants_are_one_method_against_k():
    rows = pd.DataFrame({"method": ["medusa-k2", "medusa-k8", "eagle3", "medusa"]})
    assert acceptance.medusa_as_one_method(rows)["method"].tolist() == ["medusa"] * 2 + ["eagle3", "medusa"]
    assert rows["method"].tolist()[0] == "medusa-k2"  # the input is left as it was


def test_linear_reading_in_alpha_overstates_a_convex_speedup(summary):
    surface_df = pd.DataFrame({
        "method": ["baseline", "eagle3", "eagle3"], "workload": ["repeat"] * 3,
        "num_speculative_tokens": [0, 4, 4], "batch_size": [1, 1, 1],
        "acceptance_alpha": [np.nan, 0.0, 0.5], "step_ms": [8.0, 10.0, 10.0],
        "speedup": [np.nan, 0.8, 8.0 * 1.9375 / 10.0]})  # tokens per step at alpha 0.5, K=4
    est = acceptance.on_the_surface(summary, surface_df, k=4)
    over = acceptance.linear_alpha_overstatement(est, surface_df, 4)
    assert (over.dropna() > 0).all() and len(over.dropna()) == 1


def test_drafted_per_step_shows_a_proposer_that_stops_short():
    rows = pd.DataFrame([
        _row("cpu-trained", "suffix", k, "mtbench", 0.0, 0.5, [0.5] * k,
             spec_num_drafts=100, spec_num_draft_tokens=d)
        for k, d in [(1, 100), (4, 170), (8, 200)]])
    t = acceptance.drafted_per_step(rows)
    assert t.loc["suffix"].tolist() == pytest.approx([1.0, 1.7, 2.0])
    assert acceptance.drafted_sentence(t) == "suffix drafts 1.0 to 2.0 tokens per proposal for K = 1 to 8"
    assert "not been measured" in acceptance.drafted_sentence(t, "ngram")


def test_temperature_effect_takes_both_h200_campaigns_and_says_which(summary):
    """The retrained weights' K=8 cells (T = 0 and 0.7) count beside the recorded ones, each
    row naming its campaign; the CPU, which measures T = 0 only, never enters."""
    more = pd.DataFrame([
        _row("h200-retrained", "eagle3", 8, "mtbench", 0.0, 0.06, [0.3] * 8),
        _row("h200-retrained", "eagle3", 8, "mtbench", 0.7, 0.05, [0.2] * 8),
        _row("h200-retrained", "eagle", 8, "mtbench", 0.0, 0.04, [0.2] * 8),  # no T = 0.7 pair
    ])
    temp = acceptance.temperature_effect(pd.concat([summary, more], ignore_index=True))
    assert temp[["campaign", "method", "K", "T = 0", "T = 0.7"]].values.tolist() == [
        ["h200-retrained", "eagle3", 8, 0.06, 0.05], ["h200-trained", "eagle3", 4, 0.2, 0.15]]


def test_paired_keeps_only_cells_both_profiles_measured(summary):
    both = acceptance.paired(acceptance.speculative(summary), "cpu-trained", "h200-trained",
                             ["method", "num_speculative_tokens", "workload", "temperature"])
    assert both.values.tolist() == [["eagle3", 4, "mtbench", 0.0, 0.18, 0.20]]
    assert list(acceptance.paired(summary, "cpu-trained", "nowhere", ["method"]).columns) == \
        ["method", "cpu-trained", "nowhere"]


def test_k_sweep_figure_draws_retrained_weights_dashed(summary):
    """On the H200 the K sweep mixes recorded and retrained weights: each point must say which."""
    from specdec import plots_trained

    more = pd.DataFrame([
        _row("h200-retrained", "eagle3", 4, "mtbench", 0.0, 0.19, [0.4] * 4),
        _row("h200-retrained", "eagle3", 8, "mtbench", 0.0, 0.06, [0.3] * 8),
    ])
    rows = acceptance.speculative(pd.concat([summary, more], ignore_index=True))
    rows = rows[(rows["temperature"] == 0) & (rows["profile"] != "cpu-trained")]
    fig = plots_trained.acceptance_vs_k_by_weights(rows, "h200-trained", "h200-retrained")
    lines = {ln.get_label(): ln for ax in fig.axes for ln in ax.get_lines()}
    assert lines["eagle3 (recorded)"].get_linestyle() == "-"
    assert lines["eagle3 (retrained)"].get_linestyle() == "--"
    assert list(lines["eagle3 (retrained)"].get_xdata()) == [4, 8]
    assert [ax.get_title() for ax in fig.axes] == ["humaneval", "mtbench"]
    empty = plots_trained.acceptance_vs_k_by_weights(rows.iloc[0:0], "h200-trained", "h200-retrained")
    assert empty.axes  # an empty figure that says so, not an error


def test_training_logs_say_whether_a_run_was_still_learning(tmp_path):
    """The training log of a recorded run: its training-batch agreement over the last two
    fifths of its steps, its held-out agreement at the end, what stopped it; and the figure."""
    from specdec import plots_trained

    d = tmp_path / "smollm2-eagle3"
    d.mkdir()
    lines = ([{"event": "eval", "step": 0, "acc1": 0.0, "loss": 9.0}]
             + [{"event": "train", "step": s, "acc1": s / 200, "loss": 1.0} for s in range(10, 101, 10)]
             + [{"event": "eval", "step": 100, "acc1": 0.3, "loss": 3.0},
                {"event": "end", "steps": 100, "stopped_by": "time_budget"}])
    (d / "train_log.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    logs = acceptance.training_logs(tmp_path)
    assert set(logs["event"]) == {"train", "eval"} and set(logs["stopped_by"]) == {"time_budget"}
    said = acceptance.training_sentence(logs)
    # steps 70-80 (0.375 mean) then 90-100 (0.475); held out 0.30 at step 100
    assert said == ("smollm2-eagle3: 0.38, then 0.47 on its training batches (the last two fifths "
                    "of its 100 steps), 0.30 held out at the end, stopped by time budget")
    assert acceptance.training_sentence(acceptance.training_logs(tmp_path / "none")) == \
        "no training log is recorded"
    fig = plots_trained.training_curves(logs)
    assert "smollm2-eagle3 (held out)" in [t.get_text() for t in fig.axes[0].get_legend().texts]
    committed = acceptance.training_logs()  # the recorded lease-4 trainings
    assert set(committed["artifact"]) >= {"smollm2-eagle3", "smollm2-medusa"}


def test_stopped_sentence_counts_why_the_recorded_trainings_stopped():
    arts = pd.DataFrame({"stopped by": ["time_budget", "plateau", "time_budget", None]})
    assert acceptance.stopped_sentence(arts) == ("2 of 4 by time budget; 1 of 4 by plateau; "
                                                 "1 of 4 by not recorded")
    assert acceptance.stopped_sentence(pd.DataFrame()) == "no training recorded"


def test_speedups_above_the_tokens_per_step_are_named_with_their_baselines():
    """h200-trained's HumanEval baselines ran at about half the other workloads' speed (a
    135M target's step waits on the host): the speedups over them exceed the tokens per step,
    which no speculative step can, and are not read."""
    from specdec import metrics, store

    summ = metrics.with_speedup(metrics.summarize(store.load_runs("h200-trained")))
    bad = summ[summ["speedup_status"].isin([metrics.ABOVE_TOKENS_PER_STEP, metrics.BASELINE_SUSPECT])]
    above = summ[summ["speedup_status"] == metrics.ABOVE_TOKENS_PER_STEP]
    assert len(above) and set(bad["workload"]) == {"humaneval"} and bad["speedup"].isna().all()
    # every speculative HumanEval cell shares the slow baselines
    spec = summ[(summ["method"] != "baseline") & (summ["workload"] == "humaneval")]
    assert len(bad) == len(spec) > len(above)
    said = acceptance.unread_speedups(summ)
    assert said.startswith(f"the speedups of {len(bad)} cells are not read: {len(above)} of them")
    assert "`h200-trained` humaneval at batch 8" in said
    ok = summ[~summ.index.isin(bad.index)]
    assert acceptance.unread_speedups(ok).startswith("every speculative cell's speedup lies within")


def _plateau_records(root, stopped_by="time_cap", recipe=None):
    """A whole-data run with evaluations at 125 … 1000 (checkpoints) and one checkpoint
    artifact (-c1, step 250), as a lease's records.tgz unpacks into data/plateau."""
    evals = [{"step": 0, "train_s": 0.0, "acc1": 0.0, "acc2": 0.0, "acc3": 0.0, "loss": 9.0}]
    for i, st in enumerate((125, 250, 500, 1000)):
        a = 0.4 + 0.1 * i
        evals.append({"step": st, "train_s": st / 10, "acc1": a, "acc2": a - 0.05,
                      "acc3": a - 0.1, "loss": 3.0 - i, "checkpoint": f"checkpoints/step{st:06d}",
                      "first_tokens": {"acc1": a - 0.1, "acc2": a - 0.15, "acc3": a - 0.2}})
    run = {"evals": evals, "steps": 1000, "stopped_by": stopped_by, "device_name": "NVIDIA H100 80GB HBM3",
           "data_fraction": 1.0, "train_s": 100.0}
    (root / "smollm2-eagle3").mkdir(parents=True)
    (root / "smollm2-eagle3" / "manifest.json").write_text(json.dumps(
        {"artifact": "smollm2-eagle3", "method": "eagle3", "run": run, **({"recipe": recipe} if recipe else {})}))
    (root / "smollm2-eagle3-c1").mkdir()
    (root / "smollm2-eagle3-c1" / "manifest.json").write_text(json.dumps(
        {"artifact": "smollm2-eagle3-c1", "method": "eagle3", "checkpoint_of": "smollm2-eagle3",
         "checkpoint_step": 250, "run": {"steps": 250, "checkpoint": True}}))


def _plateau_summary():
    rows = []
    for method, draft, rates in (("eagle3", "smollm2-eagle3", (0.30, 0.20)),
                                 ("eagle3-c1", "smollm2-eagle3-c1", (0.20, 0.10))):
        for wl, r in zip(("mtbench", "humaneval"), rates):
            rows.append(_row("h100-plateau", method, 4, wl, 0.0, r, [0.5, 0.3, 0.2, 0.1],
                             draft=draft))
    return pd.DataFrame(rows)


def test_plateau_artifacts_on_the_surface_with_the_training_that_bought_them(tmp_path):
    """The final plateau artifact is read off the surface as on_the_surface reads it, with
    its steps, seconds and why it stopped; its checkpoints are no surface method's."""
    _plateau_records(tmp_path, stopped_by="plateau")
    surface_df = pd.DataFrame({
        "method": ["baseline", "eagle3", "eagle3"], "workload": ["repeat"] * 3,
        "num_speculative_tokens": [0, 4, 4], "batch_size": [1, 1, 1],
        "acceptance_alpha": [np.nan, 0.0, 1.0], "step_ms": [8.0, 10.0, 14.0]})
    summary = _plateau_summary()
    est = acceptance.plateau_on_the_surface(summary, surface_df, 4, tmp_path)
    assert est["method"].tolist() == ["eagle3"] and est["profile"].tolist() == ["h100-plateau"]
    want = acceptance.on_the_surface(summary, surface_df, 4, profile="h100-plateau")
    assert est.loc[0, "speedup"] == pytest.approx(want.loc[0, "speedup"])
    assert est.loc[0, "acceptance"] == pytest.approx(0.25)
    assert (est.loc[0, "steps"], est.loc[0, "stopped by"]) == (1000, "plateau")
    assert acceptance.surface_sentence(est).startswith(
        "eagle3 (`h100-plateau`, 1000 steps in 100 s of training, stopped by plateau; "
        "acceptance rate 25%")
    assert acceptance.surface_sentence(est.iloc[0:0]).startswith("no trained method's")
    # the chapters' short answer: the same reading beside the acceptance and the training
    table = acceptance.plateau_table(acceptance.plateau_measured(summary, tmp_path),
                                     acceptance.plateau_curves(tmp_path), est)
    assert table.columns.tolist() == ["method", "acceptance", "lowest", "highest", "training",
                                      "stopped by", "batch 1"]
    assert table.loc[0, "batch 1"] == pytest.approx(est.loc[0, "speedup"])
    html = acceptance.plateau_table_style(table).to_html()
    assert "speedup at batch 1 (predicted)" in html and "25% (20%–30%)" in html
    assert acceptance.plateau_table(pd.DataFrame(), acceptance.plateau_curves(tmp_path)).empty


def test_plateau_curves_and_what_vllm_measured_side_by_side(tmp_path):
    _plateau_records(tmp_path)
    curves = acceptance.plateau_curves(tmp_path)
    assert curves["step"].tolist() == [125, 250, 500, 1000]  # step 0 and checkpoints' own records out
    last = curves.iloc[-1]
    assert last["agreement"] == pytest.approx(0.65)
    assert last["predicted K=4 rate"] == pytest.approx(
        (0.7 + 0.7 * 0.65 + 0.7 * 0.65 * 0.6 + 0.7 * 0.65 * 0.6 * 0.6) / 4)
    assert last["first-64 agreement"] == pytest.approx(0.55)
    m = acceptance.plateau_measured(_plateau_summary(), tmp_path).set_index("artifact")
    assert m.loc["smollm2-eagle3", "step"] == 1000 and m.loc["smollm2-eagle3-c1", "step"] == 250
    assert m.loc["smollm2-eagle3-c1", "held-out agreement"] == pytest.approx(0.45)
    assert m.loc["smollm2-eagle3", "vLLM: mean"] == pytest.approx(0.25)
    assert m.loc["smollm2-eagle3", "vLLM: mtbench"] == pytest.approx(0.30)
    assert acceptance.plateau_measured(_plateau_summary().iloc[0:0], tmp_path).empty
    # rows read with a record only where they measured its weights: a checkpoint's name taken
    # by another step of a resumed run, or a recipe trained again, leaves the old rows unread
    c1 = tmp_path / "smollm2-eagle3-c1" / "manifest.json"
    c1.write_text(json.dumps({**json.loads(c1.read_text()), "files": {"model.safetensors": "w1"}}))
    rows = _plateau_summary().assign(draft_sha256="w1")
    assert "smollm2-eagle3-c1" in set(acceptance.plateau_measured(rows, tmp_path)["artifact"])
    assert set(acceptance.plateau_measured(rows.assign(draft_sha256="w0"), tmp_path)["artifact"]) \
        == {"smollm2-eagle3"}  # the final's record names no weights here: read as before
    from specdec import plots_trained

    fig = plots_trained.learning_curves(curves, m.reset_index())
    left, right = fig.axes[:2]
    assert [ln.get_label() for ln in left.get_lines()] == \
        ["smollm2-eagle3", "smollm2-eagle3: first 64 tokens"]
    assert list(left.get_lines()[1].get_ydata()) == pytest.approx([0.25, 0.35, 0.45, 0.55])
    # two runs of one method (the two distilled drafts are both draft_model): two colours
    two = pd.concat([curves, curves.assign(artifact="smollm2-eagle3-b")], ignore_index=True)
    lines = plots_trained.learning_curves(two, m.reset_index().iloc[0:0]).axes[0].get_lines()
    colour = {ln.get_label(): ln.get_color() for ln in lines}
    assert colour["smollm2-eagle3"] != colour["smollm2-eagle3-b"]
    # a Medusa record is measured as its K-head variant (<record>-k4): read with its record
    medusa = _plateau_summary().assign(draft=lambda d: d["draft"] + "-k4")
    m = acceptance.plateau_measured(medusa, tmp_path).set_index("artifact")
    assert m.loc["smollm2-eagle3", "step"] == 1000 and m.loc["smollm2-eagle3-c1", "step"] == 250


def test_plateau_retraining_summary_and_table_count_each_kind_of_pair():
    """The chapter leads its retraining check with a summary and a table: the reproduction
    checks (one training, both stopped by the plateau rule) apart from the pairs a cap or a
    change of recipe makes no check, bit-identical only where every step both kept has one
    sha256, and each verdict in the table."""
    rep = pd.DataFrame([
        # run, earlier lease, steps, stopped by, a retraining, within, difference
        ("smollm2-eagle", "L1", 16000, 16000, "plateau", "plateau", True, True, 0.0),
        ("smollm2-medusa", "L2", 1000, 1000, "plateau", "plateau", True, False, 0.04),
        ("smollm2-draft-l2", "L3", 2730, 50255, "time_cap", "time_cap", False, None, 0.113),
        ("smollm2-eagle3", "L4", 8000, 8000, "plateau", "plateau", False, None, 0.01),
    ], columns=["run", "earlier lease", "earlier steps", "later steps", "earlier stopped by",
                "later stopped by", "a retraining", "within tolerance", "difference"]).assign(
        workloads="humaneval", **{"earlier acceptance": 0.2, "later acceptance": 0.21})
    eq = pd.DataFrame([
        ("smollm2-eagle", "L1", 8000, True, True, True, 0.001),
        ("smollm2-eagle", "L1", 16000, True, True, True, 0.0),
        ("smollm2-medusa", "L2", 1000, True, False, False, 0.04),
        ("smollm2-eagle3", "L4", 8000, False, None, None, 0.01),
    ], columns=["run", "earlier lease", "step", "one training", "within tolerance",
                "same weights", "difference"])
    assert acceptance.plateau_retraining_summary(rep, eq) == (
        "4 runs were trained in two or more leases: 4 pairs of final artifacts; in the 2 pairs "
        "that are one training stopped twice by the plateau rule, the finals differ through vLLM "
        "by at most 4.0 points (1 of 2 within the ±3 points of a reproduction), 1 of them with "
        "bit-identical weights. At equal steps, whatever stopped either run, 2 of 3 comparisons "
        "lie within the ±3 points (the largest difference 4.0 points). In 1 pair a cap stopped "
        "the earlier run, so its difference (+11.3 points) is what the other number of steps "
        "bought, not a reproduction. 1 other pair is not one training (other data or recipe) or "
        "had its later run capped: no reproduction check.")
    t = acceptance.plateau_retraining_table(rep, eq)
    assert list(t["verdict"]) == [
        "reproduced (within ±3), bit-identical", "outside ±3",
        "not a check: earlier run stopped by time cap", "not a check: another training"]
    assert list(t["steps"])[2] == "2730 → 50255" and list(t["run"])[0] == "eagle"
    assert list(t["stopped by"])[2] == "time cap → time cap"
    assert list(t["difference (points)"]) == pytest.approx([0.0, 4.0, 11.3, 1.0])
    # one step of a pair with other weights: not bit-identical
    eq.loc[0, "same weights"] = False
    assert acceptance.plateau_retraining_table(rep, eq)["verdict"].iloc[0] == "reproduced (within ±3)"
    assert acceptance.plateau_retraining_summary(pd.DataFrame(), eq).startswith("no recipe")
    assert acceptance.plateau_retraining_table(pd.DataFrame(), eq).empty


def test_a_repeated_training_keeps_its_earlier_rows_with_their_record(tmp_path):
    """A later lease trains a recipe again: the earlier training's rows read the record moved
    with them to _superseded/<lease>/ (not the latest one), are not the latest, stay off the
    short answer and the curve, and sit beside the latest in plateau_retraining, a reproduction
    check only where both runs were stopped by the plateau rule."""
    _plateau_records(tmp_path, stopped_by="plateau")  # the latest training (h100-plateau-v2)
    records = tmp_path / acceptance.SUPERSEDED / "L25" / "plateau"
    _plateau_records(records, stopped_by="plateau")
    old = records / "smollm2-eagle3" / "manifest.json"
    man = json.loads(old.read_text())
    man["run"]["steps"] = man["run"]["evals"][-1]["step"] = 500  # ... stopped earlier
    old.write_text(json.dumps(man))
    later = _plateau_summary().assign(profile="h100-plateau-v2")
    later["acceptance_rate"] += 0.02

    def earlier():  # what superseded_measured reads from the lease's rows and records
        return acceptance.plateau_measured(_plateau_summary(), records).assign(latest=False,
                                                                               lease="L25")

    latest = acceptance.plateau_measured(later, tmp_path)
    m = pd.concat([earlier(), latest], ignore_index=True)
    final = m[m["artifact"] == "smollm2-eagle3"].set_index("campaign")
    assert final.loc["h100-plateau", "step"] == 500 and not final.loc["h100-plateau", "latest"]
    assert final.loc["h100-plateau-v2", "step"] == 1000 and final.loc["h100-plateau-v2", "latest"]
    curves = acceptance.plateau_curves(tmp_path)
    short = acceptance.plateau_table(m, curves).iloc[0]  # the latest training's final artifact
    assert (short["method"], short["training"]) == ("eagle3", "1000 steps, 100 s, H100")
    assert (short["acceptance"], short["lowest"], short["highest"]) == \
        pytest.approx((0.27, 0.22, 0.32))
    rep = acceptance.plateau_retraining(latest, earlier(), tmp_path)
    assert len(rep) == 1
    r = rep.iloc[0]
    assert (r["earlier"], r["later"], r["earlier steps"], r["later steps"]) == \
        ("h100-plateau", "h100-plateau-v2", 500, 1000)
    assert r["difference"] == pytest.approx(0.02) and r["a retraining"] and r["within tolerance"]
    assert acceptance.plateau_retraining_sentence(rep) == (
        "eagle3: 500 then 1000 steps (`h100-plateau`, `h100-plateau-v2`), 25.0% then 27.0% on "
        "humaneval, mtbench (+2.0 points), within the ±3 points of a reproduction")
    from specdec import plots_trained

    right = plots_trained.learning_curves(curves, m).axes[1]
    measured_points = [ln for ln in right.get_lines() if ln.get_marker() == "D"]
    assert sorted(float(y) for ln in measured_points for y in ln.get_ydata()) == \
        pytest.approx([0.17, 0.27])  # the latest run's two points only
    # the same recipe's earlier training beside them, hollow, where asked; another recipe's not
    e = earlier().assign(**{"one training": True})

    def hollow(frame):
        return [ln for ln in plots_trained.learning_curves(curves, m, frame).axes[1].get_lines()
                if ln.get_marker() == "D" and ln.get_markerfacecolor() == "white"]

    assert [ln.get_label() for ln in hollow(e)] == \
        ["smollm2-eagle3: vLLM, earlier trainings of its recipe"]
    assert sorted(float(y) for y in hollow(e)[0].get_ydata()) == pytest.approx([0.15, 0.25])
    assert hollow(e.assign(**{"one training": False})) == []
    # what only costs (features from a store, a fused loss, the cap) is the same training;
    # a recipe read as recorded before a key existed takes the way those runs ran
    from specdec.training.recipes import RECIPES, same_training

    r0 = RECIPES["smollm2-medusa"]
    assert same_training({**r0, "target_features": "per-step"}, {**r0, "soft_ce": "compiled"})
    assert same_training({k: v for k, v in r0.items() if k != "soft_ce"}, r0)
    assert not same_training({**r0, "lr": 3e-4}, r0)
    assert not same_training({**r0, "batching": "random"}, r0)
    # another data hash (or recipe) in the earlier record: not the same training, no verdict
    man["data_sha256"] = "another"
    old.write_text(json.dumps(man))
    r = acceptance.plateau_retraining(latest, earlier(), tmp_path).iloc[0]
    assert not r["a retraining"] and r["within tolerance"] is None
    assert "not the same training" in acceptance.plateau_retraining_sentence(
        acceptance.plateau_retraining(latest, earlier(), tmp_path))
    del man["data_sha256"]
    # the earlier run stopped by its time: what the second training bought, not a check
    man["run"]["stopped_by"] = "time_cap"
    old.write_text(json.dumps(man))
    r = acceptance.plateau_retraining(latest, earlier(), tmp_path).iloc[0]
    assert not r["a retraining"] and r["within tolerance"] is None
    assert "stopped by time cap, so the difference is what training further bought, not a reproduction" in \
        acceptance.plateau_retraining_sentence(acceptance.plateau_retraining(
            latest, earlier(), tmp_path))
    assert acceptance.plateau_retraining_sentence(acceptance.plateau_retraining(
        pd.DataFrame(), pd.DataFrame())) == "no recipe has been trained to its plateau twice yet"
    assert acceptance.plateau_retraining(latest, pd.DataFrame(), tmp_path).empty


def test_plateau_sentences_say_why_a_run_stopped(tmp_path):
    _plateau_records(tmp_path / "a")
    curves = acceptance.plateau_curves(tmp_path / "a")
    said = acceptance.plateau_sentence(curves)
    assert "1000 steps, 100 s of training on an H100" in said and "stopped by time cap" in said
    assert "(500 to 1000 steps) gained 10.0 points of agreement" in said  # the whole (recorded)
    # not stopped by the rule: what its next doubling would cost at its pace (100 s + 2 x 50 s)
    assert "training to its next doubling (2000 steps) would take about 200 s on that GPU " \
        "(predicted at its pace)" in said
    short = acceptance.plateau_table(acceptance.plateau_measured(_plateau_summary(), tmp_path / "a"),
                                     curves)
    assert len(short) == 1 and short.loc[0, "acceptance"] == pytest.approx(0.25)
    # stopped by its time: what its last doubling still gained
    assert short.loc[0, "stopped by"] == "time cap (still +10.0 points a doubling)"
    _plateau_records(tmp_path / "b", stopped_by="plateau", recipe={"plateau_on": "first_tokens"})
    curves = acceptance.plateau_curves(tmp_path / "b")
    said = acceptance.plateau_sentence(curves)
    assert "gained 10.0 points of agreement over the first 64 tokens" in said  # what it watched
    assert "next doubling" not in said  # the rule stopped it
    short = acceptance.plateau_table(acceptance.plateau_measured(_plateau_summary(), tmp_path / "b"),
                                     curves)
    assert short.loc[0, "stopped by"] == "plateau"
    # the recipe's step cap is named as the tables name it, not by its key (max_steps)
    _plateau_records(tmp_path / "c", stopped_by="max_steps")
    said = acceptance.plateau_sentence(acceptance.plateau_curves(tmp_path / "c"))
    assert "stopped by step cap" in said and "max steps" not in said
    # a final artifact measured on fewer workloads than another: its mean says on which
    more = pd.concat([_plateau_summary(), pd.DataFrame([_row(
        "h100-plateau", "eagle3-c1", 4, "sharegpt-heldout", 0.0, 0.4, [0.5, 0.3, 0.2, 0.1],
        draft="smollm2-eagle3-c1")])])
    short = acceptance.plateau_table(acceptance.plateau_measured(more, tmp_path / "b"), curves)
    assert short.loc[0, "method"] == "eagle3 (humaneval and mtbench only)"
    assert (short.loc[0, "lowest"], short.loc[0, "highest"]) == pytest.approx((0.2, 0.3))
    assert acceptance.plateau_sentence(acceptance.plateau_curves(tmp_path / "none")) == \
        "no plateau training is recorded yet"


def test_replay_sets_the_training_code_beside_vllm(tmp_path):
    _plateau_records(tmp_path)
    (tmp_path / "smollm2-eagle3" / "replay.json").write_text(json.dumps({
        "artifact": "smollm2-eagle3", "method": "eagle3", "profile": "h100-plateau",
        "workloads": {"mtbench": {"k4_rate": 0.31, "vllm_acceptance": 0.3},
                      "humaneval": {"k4_rate": 0.19, "vllm_acceptance": 0.2}},
        "validation": {"sequences": 64, "whole": {"agreement": 0.74, "k4_rate": 0.5},
                       "first 64 tokens": {"agreement": 0.62, "k4_rate": 0.35}}}))
    said = acceptance.replay_sentence(tmp_path)
    assert "humaneval 19% predicted, 20% measured; mtbench 31% predicted, 30% measured" in said
    assert "74% over whole sequences (a K = 4 rate of 50%) but 62% over their first 64" in said


def test_a_recipe_trained_again_in_one_profile_is_compared_at_equal_steps(tmp_path):
    """Lease 27 trained EAGLE again in the profile of lease 26, whose rows it replaced: the
    earlier training's rows and records go to _superseded/<lease>/, and the two trainings are
    compared through vLLM at every step both kept (a reproduction check where they are one
    training), whatever stopped either run."""
    _plateau_records(tmp_path)  # the latest training
    old = tmp_path / acceptance.SUPERSEDED / "L26" / "plateau"
    _plateau_records(old)
    earlier = acceptance.plateau_measured(_plateau_summary(), old).assign(latest=False, lease="L26")
    later = _plateau_summary()
    later["acceptance_rate"] += 0.01
    m = acceptance.plateau_measured(later, tmp_path)
    eq = acceptance.plateau_equal_steps(m, earlier, tmp_path)
    assert eq["step"].tolist() == [250, 1000] and set(eq["method"]) == {"eagle3"}
    assert eq["one training"].all() and eq["within tolerance"].all()
    assert eq["difference"].tolist() == pytest.approx([0.01, 0.01])
    assert eq["same weights"].isna().all()  # the records here keep no weights' sha256
    assert acceptance.plateau_equal_steps_sentence(eq) == (
        "eagle3 (`h100-plateau`, lease L26 then the latest), mean over humaneval, mtbench: "
        "250 steps 15.0% then 16.0% (+1.0 points), 1000 steps 25.0% then 26.0% (+1.0 points); "
        "all within the ±3 points of a reproduction")

    def weigh(d, sha):  # each evaluation's checkpoint weights, as train.py records them
        f = d / "smollm2-eagle3" / "manifest.json"
        man = json.loads(f.read_text())
        for ev in man["run"]["evals"]:
            ev["weights_sha256"] = sha(ev["step"])
        f.write_text(json.dumps(man))

    weigh(old, lambda st: f"sha{st}")  # the two trainings: the same weights, then not
    weigh(tmp_path, lambda st: f"sha{st}")
    earlier = acceptance.plateau_measured(_plateau_summary(), old).assign(latest=False, lease="L26")
    m = acceptance.plateau_measured(later, tmp_path)
    eq = acceptance.plateau_equal_steps(m, earlier, tmp_path)
    assert eq["same weights"].tolist() == [True, True]
    assert acceptance.plateau_equal_steps_sentence(eq).endswith(
        "reproduction, and the weights at every one of these steps are bit-identical (sha256)")
    weigh(tmp_path, lambda st: "other" if st == 1000 else f"sha{st}")
    m = acceptance.plateau_measured(later, tmp_path)
    eq = acceptance.plateau_equal_steps(m, earlier, tmp_path)
    assert eq["same weights"].tolist() == [True, False]
    assert acceptance.plateau_equal_steps_sentence(eq).endswith(
        "reproduction, with other weights at 1 of these steps (the training is not bit-identical)")
    weigh(tmp_path, lambda st: "other")  # what follows reads no weights
    m = acceptance.plateau_measured(later, tmp_path)
    assert acceptance.plateau_equal_steps_sentence(acceptance.plateau_equal_steps(
        m, earlier, tmp_path)).endswith(
        "with other weights at every one of these steps (the training is not bit-identical)")
    # two earlier trainings of the recipe (leases 26 and 27 of EAGLE): one clause each
    shutil.copytree(old, tmp_path / acceptance.SUPERSEDED / "L27" / "plateau")
    eq = acceptance.plateau_equal_steps(m, pd.concat([earlier, earlier.assign(lease="L27")]),
                                        tmp_path)
    said = acceptance.plateau_equal_steps_sentence(eq)
    assert "lease L26 then the latest" in said and "lease L27 then the latest" in said
    later.loc[later["method"] == "eagle3", "acceptance_rate"] += 0.05  # the final moved 6 points
    eq = acceptance.plateau_equal_steps(acceptance.plateau_measured(later, tmp_path), earlier, tmp_path)
    assert eq["within tolerance"].tolist() == [True, False]
    assert "1 of 2 within" in acceptance.plateau_equal_steps_sentence(eq)
    man = json.loads((old / "smollm2-eagle3" / "manifest.json").read_text())
    (old / "smollm2-eagle3" / "manifest.json").write_text(json.dumps({**man, "data_sha256": "x"}))
    eq = acceptance.plateau_equal_steps(m, earlier, tmp_path)
    assert not eq["one training"].any() and eq["within tolerance"].isna().all()
    assert "not the same training" in acceptance.plateau_equal_steps_sentence(eq)
    assert acceptance.plateau_equal_steps(m, pd.DataFrame(), tmp_path).empty
    assert acceptance.plateau_equal_steps_sentence(pd.DataFrame()).startswith("no recipe")


def test_the_committed_plateau_logs_are_the_logs_their_manifests_hash():
    """data/plateau keeps each training's log gzipped (records_archive); what it decompresses
    to is the log the device wrote, by the sha256 its manifest recorded there."""
    import gzip
    import hashlib
    import json

    root = acceptance.PLATEAU_RECORDS
    assert not list(root.rglob("train_log.jsonl"))  # none committed as written
    logs = sorted(root.rglob("train_log.jsonl.gz"))
    assert len(logs) >= 30
    for f in logs:
        want = json.loads((f.parent / "manifest.json").read_text())["files"]["train_log.jsonl"]
        assert hashlib.sha256(gzip.decompress(f.read_bytes())).hexdigest() == want, f


def test_the_superseded_eagle_trainings_are_read_with_their_own_records():
    """The committed store: lease 26's EAGLE (time-capped at 7307 steps, checkpoints at 1000,
    2000 and 4000) left data/results/ when lease 27 trained the recipe again, and lease 27's
    (max_steps at 16000; 2000, 4000, 8000) when lease 31 did; each is read from
    data/plateau/_superseded/<lease>/ with its own records, and lease 31's (max_steps at 32000)
    when lease 47 did. Lease 27 and 31 trained the same recipe on the same data on two H100s:
    their checkpoints at equal steps are one file; lease 47's (``vocab_rows: decoding``, the same
    sums in another order) are other files at every step."""
    e = acceptance.superseded_measured()
    eagle = e[e["run"] == "smollm2-eagle"]
    assert not eagle["latest"].any()
    by = eagle.groupby("lease")
    assert sorted(by.get_group("2026-12-05-h100-26")["step"]) == [1000, 2000, 4000, 7307]
    assert sorted(by.get_group("2026-12-06-h100-27")["step"]) == [2000, 4000, 8000, 16000]
    assert set(by.get_group("2026-12-05-h100-26")["stopped by"]) == {"time_cap"}
    assert set(by.get_group("2026-12-06-h100-27")["stopped by"]) == {"max_steps"}
    assert sorted(by.get_group("2026-12-06-h100-31")["step"]) == [4000, 8000, 16000, 32000]
    root = acceptance.PLATEAU_RECORDS
    old = [root / acceptance.SUPERSEDED / lease / "plateau" / "smollm2-eagle"
           for lease in ("2026-12-06-h100-27", "2026-12-06-h100-31")]

    def sha(d, s):
        return json.loads((d / "checkpoints" / f"step{s:06d}" / "manifest.json").read_text()
                          )["files"]["model.safetensors"]
    steps = (4000, 8000, 16000)
    assert [len({sha(d, s) for d in old}) for s in steps] == [1, 1, 1]
    assert all(sha(root / "smollm2-eagle", s) != sha(old[1], s) for s in steps)


def _whole_and_half(tmp_path):
    """The plateau records with EAGLE-3's whole data (2000 sequences, 1000 steps) and its half
    (``smollm2-eagle3-data1of2``: 1000 sequences, 500 steps, its plateau); the half's manifest."""
    _plateau_records(tmp_path, stopped_by="plateau")
    man = json.loads((tmp_path / "smollm2-eagle3" / "manifest.json").read_text())
    man["run"]["train_sequences"] = 2000
    (tmp_path / "smollm2-eagle3" / "manifest.json").write_text(json.dumps(man))
    half = json.loads(json.dumps(man))
    half["artifact"] = "smollm2-eagle3-data1of2"
    half["run"].update(data_fraction=0.5, train_sequences=1000, steps=500)
    half["run"]["evals"] = [e for e in half["run"]["evals"] if e["step"] <= 500]
    (tmp_path / "smollm2-eagle3-data1of2").mkdir()
    (tmp_path / "smollm2-eagle3-data1of2" / "manifest.json").write_text(json.dumps(half))
    return half


def test_a_data_size_curve_beside_the_whole_data_run_and_off_the_short_answer(tmp_path):
    """A run trained on half its data (<run>-data1of2, to its own plateau) is a point of the
    run's data-size curve with the whole-data run, vLLM's acceptance where measured; the short
    answer and the learning curves name the whole-data run only."""
    half = _whole_and_half(tmp_path)
    summary = pd.concat([_plateau_summary(), pd.DataFrame(
        [_row("h100-plateau", "eagle3-data1of2", 4, wl, 0.0, r, [0.5, 0.3, 0.2, 0.1],
              draft="smollm2-eagle3-data1of2") for wl, r in (("mtbench", 0.2), ("humaneval", 0.16))])],
        ignore_index=True)
    curves = acceptance.plateau_curves(tmp_path)
    measured = acceptance.plateau_measured(summary, tmp_path)
    sizes = acceptance.plateau_data_sizes(measured, curves)
    assert sizes["artifact"].tolist() == ["smollm2-eagle3-data1of2", "smollm2-eagle3"]
    assert sizes["sequences"].tolist() == [1000, 2000] and sizes["step"].tolist() == [500, 1000]
    assert sizes["vLLM: mean"].tolist() == pytest.approx([0.18, 0.25])
    assert sizes["first-64 agreement"].tolist() == pytest.approx([0.45, 0.55])
    assert acceptance.data_size_sentence(sizes) == (
        "eagle3 on 1000 / 2000 training sequences: 18.0% / 25.0% through vLLM (held-out "
        "agreement over the first 64 tokens 45.0% / 55.0%), each stopped by plateau; the whole "
        "data against its 1/2: +7.0 points: more data still buys acceptance, so its whole-data "
        "figure is a lower bound on the method")
    within = sizes.assign(**{"vLLM: mean": [0.24, 0.25]})
    assert acceptance.data_size_sentence(within, ["smollm2-eagle3", "smollm2-eagle"]).endswith(
        "+1.0 points, within the ±3 points of a reproduction: more data bought nothing "
        "measurable; not yet trained on parts of their data: eagle")
    assert acceptance.data_size_sentence(sizes.iloc[0:0]).startswith("no method")
    short = acceptance.plateau_table(measured, curves)  # the whole-data run only
    assert short["method"].tolist() == ["eagle3"] and short.loc[0, "acceptance"] == pytest.approx(0.25)
    # what the whole data bought over its largest part: beside what the steps bought
    assert (short.loc[0, "more data"], short.loc[0, "more data from"]) == (pytest.approx(7.0), 0.5)
    shown = acceptance.plateau_table_style(short).data
    assert shown.loc[0, "all data vs a part"] == "+7.0 points over 1/2"
    from specdec import plots_trained

    left, right = plots_trained.data_size_curves(sizes).axes[:2]
    assert list(right.get_lines()[0].get_xdata()) == [1000, 2000]
    assert [float(y) for y in left.get_lines()[0].get_ydata()] == pytest.approx([0.18, 0.25])
    # two runs of one method (the two distilled drafts): each its own colour, as in the steps figure
    two = pd.concat([sizes, sizes.assign(run="smollm2-eagle3-b")], ignore_index=True)
    colour = {ln.get_label(): ln.get_color()
              for ln in plots_trained.data_size_curves(two).axes[1].get_lines()}
    assert colour["smollm2-eagle3"] != colour["smollm2-eagle3-b"]
    # only the whole data trained: no data-size curve
    assert acceptance.plateau_data_sizes(measured, curves[curves["data fraction"] == 1]).empty
    # a part the time cap stopped measures that budget: shown, but off the curve
    quarter = json.loads(json.dumps(half))
    quarter["artifact"] = "smollm2-eagle3-data1of4"
    quarter["run"].update(data_fraction=0.25, train_sequences=500, steps=250, stopped_by="time_cap")
    quarter["run"]["evals"] = [e for e in quarter["run"]["evals"] if e["step"] <= 250]
    (tmp_path / "smollm2-eagle3-data1of4").mkdir()
    (tmp_path / "smollm2-eagle3-data1of4" / "manifest.json").write_text(json.dumps(quarter))
    summary = pd.concat([summary, pd.DataFrame(
        [_row("h100-plateau", "eagle3-data1of4", 4, "mtbench", 0.0, 0.1, [0.5, 0.3, 0.2, 0.1],
              draft="smollm2-eagle3-data1of4")])], ignore_index=True)
    curves = acceptance.plateau_curves(tmp_path)
    sizes = acceptance.plateau_data_sizes(acceptance.plateau_measured(summary, tmp_path), curves)
    assert sizes["on the curve"].tolist() == [False, True, True]
    assert acceptance.data_size_sentence(sizes) == (
        "eagle3 on 1000 / 2000 training sequences: 18.0% / 25.0% through vLLM (held-out "
        "agreement over the first 64 tokens 45.0% / 55.0%), each stopped by plateau; the whole "
        "data against its 1/2: +7.0 points: more data still buys acceptance, so its whole-data "
        "figure is a lower bound on the method (its 1/4, stopped by the time cap at 250 steps, "
        "10.0%, measures that budget, a lower bound on its plateau: not on the curve)")
    left, right = plots_trained.data_size_curves(sizes).axes[:2]
    assert list(right.get_lines()[0].get_xdata()) == [1000, 2000]  # the line: plateaus only
    hollow = [ln for ln in left.get_lines() if ln.get_markerfacecolor() == "none"]
    assert [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in hollow] == [([500], [0.1])]
    assert [t.get_text() for t in left.texts] == ["eagle3 ≥ (time cap, 250 steps)"]  # a lower bound
    assert not sizes["past its peak"].any()
    # a capped part whose final evaluation fell below an earlier one (lease 44's two-layer 1/2:
    # 52.9 % at 32000 steps, 51.8 % at the cap): no lower bound, its best evaluation named
    quarter["run"]["evals"].append({**quarter["run"]["evals"][-1], "step": 400, "first_tokens": {
        "acc1": 0.2, "acc2": 0.2, "acc3": 0.2}})
    quarter["run"]["steps"] = 400
    (tmp_path / "smollm2-eagle3-data1of4" / "manifest.json").write_text(json.dumps(quarter))
    sizes = acceptance.plateau_data_sizes(acceptance.plateau_measured(summary, tmp_path),
                                          acceptance.plateau_curves(tmp_path))
    assert sizes["past its peak"].tolist() == [True, False, False]
    assert (sizes.loc[0, "peak step"], sizes.loc[0, "peak first-64"]) == (250, pytest.approx(0.35))
    assert acceptance.data_size_sentence(sizes).endswith(
        "(its 1/4, stopped by the time cap at 400 steps, 10.0%, measures that budget, not on "
        "the curve; its first-64-token agreement was highest at 250 steps, 35.0%, against 20.0% "
        "where it stopped: more steps had stopped buying agreement)")
    left = plots_trained.data_size_curves(sizes).axes[0]
    assert [t.get_text() for t in left.texts] == ["eagle3 (time cap, 400 steps; best at 250)"]


def _sizes(rows):
    """A plateau_data_sizes frame of one run: (fraction, stopped by, vLLM mean) per size."""
    return pd.DataFrame([{"run": "smollm2-eagle3", "method": "eagle3",
                          "artifact": "smollm2-eagle3" + (f"-data1of{round(1 / f)}" if f < 1 else ""),
                          "data fraction": f, "sequences": int(2000 * f), "step": 1000,
                          "stopped by": stop, "training (s)": 10.0, "first-64 agreement": 0.5,
                          "on the curve": f == 1 or stop == "plateau", "vLLM: mean": m}
                         for f, stop, m in rows])


def test_a_capped_part_bounds_what_the_rest_of_the_data_bought():
    """A part a cap stopped is a lower bound on its plateau: within a reproduction's noise of a
    whole-data run the plateau rule stopped, the rest of the data bought at most that (lease
    33's EAGLE-3 on half its data); otherwise the largest part on the curve answers."""
    flattens = _sizes([(0.25, "plateau", 0.20), (0.5, "max_steps", 0.29), (1, "plateau", 0.295)])
    g = acceptance.data_gain(flattens).iloc[0]
    assert (g["from"], g["at most"], g["still gaining"], g["curve"]) == (0.5, True, False, "flattens")
    assert g["points"] == pytest.approx(0.5)
    said = acceptance.data_size_sentence(flattens)
    assert said.endswith("the whole data against its 1/4: +9.5 points, but at most +0.5 of them "
                         "over its 1/2, which the step cap stopped at 1000 steps still gaining "
                         "with 29.0% (a lower bound on its plateau): the curve flattens before "
                         "the whole data")
    assert "not on the curve" not in said  # the bounding part is named once
    assert acceptance.data_reading(acceptance.data_gain(flattens)) == "eagle3's rises, then flattens"
    # a capped part past its best evaluation was not stopped still gaining: no bound
    g = acceptance.data_gain(flattens.assign(**{"past its peak": [False, True, False]})).iloc[0]
    assert (g["from"], g["at most"]) == (0.25, False)
    # the capped part far below the whole: no bound, the largest part on the curve answers
    rising = _sizes([(0.25, "plateau", 0.20), (0.5, "time_cap", 0.18), (1, "plateau", 0.295)])
    g = acceptance.data_gain(rising).iloc[0]
    assert (g["from"], g["at most"], g["still gaining"], g["curve"]) == (0.25, False, True, "still rising")
    # a whole-data run a cap stopped is itself a lower bound: the two bounds settle nothing
    capped = _sizes([(0.25, "plateau", 0.20), (0.5, "max_steps", 0.29), (1, "max_steps", 0.295)])
    assert acceptance.data_gain(capped).iloc[0]["at most"] == False  # noqa: E712
    table = pd.DataFrame([{"method": "eagle3", "acceptance": 0.295, "lowest": 0.25, "highest": 0.37,
                           "training": "16000 steps", "stopped by": "plateau", "more data": 0.5,
                           "more data from": 0.5, "more data at most": True}])
    assert acceptance.plateau_table_style(table).data.loc[0, "all data vs a part"] == \
        "at most +0.5 points over 1/2"
    flat = _sizes([(0.125, "plateau", 0.08), (0.5, "plateau", 0.088), (1, "plateau", 0.086)])
    assert acceptance.data_gain(flat).iloc[0]["curve"] == "flat"
    falls = _sizes([(0.25, "plateau", 0.30), (1, "plateau", 0.20)])
    assert acceptance.data_gain(falls).iloc[0][["curve", "over smallest"]].tolist() == \
        ["falls", pytest.approx(-10.0)]
    assert acceptance.data_reading(acceptance.data_gain(flat.iloc[0:0])).startswith("no run")


def test_a_part_the_step_cap_stopped_at_the_whole_datas_steps_compares_at_that_budget():
    """Both stopped by the step cap at the same step count (lease 45's EAGLE on half its data
    and on all of it, 32000 steps each): what the rest of the data bought at that budget, like
    with like; the part is named once, and neither is read as a plateau."""
    rows = [(0.25, "plateau", 0.25, 16000), (0.5, "max_steps", 0.281, 32000),
            (1, "max_steps", 0.284, 32000)]
    sizes = _sizes([r[:3] for r in rows]).assign(step=[r[3] for r in rows])
    g = acceptance.data_gain(sizes).iloc[0]
    assert (g["from"], g["at most"], g["equal steps"], g["still gaining"], g["curve"]) == \
        (0.5, False, True, False, "flattens at equal steps")
    assert g["points"] == pytest.approx(0.3)
    said = acceptance.data_size_sentence(sizes)
    assert said.endswith("+0.3 of them over its 1/2 (28.1%) trained as many steps (32000, both "
                         "stopped by the step cap): at that budget the rest of the data bought "
                         "nothing measurable; where either would plateau with more steps is not "
                         "measured")
    assert "not on the curve" not in said
    assert "equal step budget" in acceptance.data_reading(acceptance.data_gain(sizes))
    # a different step count is another budget: the largest part on the curve answers
    g = acceptance.data_gain(sizes.assign(step=[16000, 16000, 32000])).iloc[0]
    assert (g["from"], g["equal steps"], g["curve"]) == (0.25, False, "still rising")
    # at equal steps and more than a reproduction's noise apart, more data still buys
    g = acceptance.data_gain(sizes.assign(**{"vLLM: mean": [0.25, 0.24, 0.284]})).iloc[0]
    assert (g["equal steps"], g["still gaining"], g["curve"]) == (True, True, "still rising")
    # beside another run's part capped near the same value (EAGLE-3's 1/2, 29.0 %, and EAGLE's,
    # 28.1 %, lease 45): the two notes sit on either side of their points, named by run
    other = sizes.assign(run="smollm2-eagle3", **{"vLLM: mean": [0.23, 0.29, 0.295],
                                                   "stopped by": ["plateau", "max_steps", "plateau"]})
    both = pd.concat([sizes.assign(run="smollm2-eagle"), other], ignore_index=True)
    from specdec import plots_trained

    left = plots_trained.data_size_curves(both).axes[0]
    notes = {t.get_text(): t.get_horizontalalignment() for t in left.texts}
    assert notes == {"eagle3 ≥ (step cap, 32000 steps)": "left",
                     "eagle ≥ (step cap, 32000 steps)": "right"}
    table = pd.DataFrame([{"method": "eagle", "acceptance": 0.284, "lowest": 0.23, "highest": 0.34,
                           "training": "32000 steps", "stopped by": "step cap", "more data": 0.3,
                           "more data from": 0.5, "more data at most": False,
                           "more data equal steps": True}])
    assert acceptance.plateau_table_style(table).data.loc[0, "all data vs a part"] == \
        "+0.3 points over 1/2 at equal steps"


def test_max_steps_changes_a_training_only_under_a_schedule_that_reads_it():
    """With a constant rate (after the warm-up) a run allowed more steps computes the same
    steps up to the other's cap: one training; under a cosine schedule every rate moves."""
    from specdec.training.recipes import RECIPES, same_training

    r = RECIPES["smollm2-draft-l2"]
    assert r["lr_schedule"] == "constant"
    assert same_training({**r, "max_steps": 16000}, {**r, "max_steps": 32000})
    cosine = {**r, "lr_schedule": "cosine"}
    assert not same_training({**cosine, "max_steps": 16000}, {**cosine, "max_steps": 32000})
    assert not same_training({**r, "max_steps": 16000}, {**cosine, "max_steps": 16000})


def test_runner_pin_pairs_the_same_weights_on_both_runners(tmp_path):
    """runner_pin: a plateau artifact measured pinned (V1, in-process core) and on vLLM's
    defaults (V2, own process) with the same weights gives the pin's difference per workload
    and on the mean; other weights on one side are no comparison; the controls never enter the
    data-size or steps rows (plateau_measured)."""
    v1, v2 = (f"vllm.v1.worker.{m}.GPUModelRunner" for m in ("gpu_model_runner", "gpu.model_runner"))
    rows = []
    for wl, pinned, default in (("mtbench", 0.20, 0.22), ("humaneval", 0.30, 0.29)):
        rows.append(_row("h100-plateau-v2", "eagle3-data1of8", 4, wl, 0.0, pinned, None,
                         draft="smollm2-eagle3-data1of8", draft_sha256="aa", model_runner=v1,
                         engine_core="inproc"))
        rows.append(_row("h100-plateau-v2", "eagle3-data1of8-default", 4, wl, 0.0, default, None,
                         draft="smollm2-eagle3-data1of8", draft_sha256="aa", model_runner=v2,
                         engine_core="default"))
    summary = pd.DataFrame(rows)
    assert acceptance.runner_pin(summary.iloc[0:0]).empty
    assert acceptance.runner_pin_sentence(acceptance.runner_pin(summary.iloc[0:0])).startswith(
        "not measured yet")
    table = acceptance.runner_pin(summary).set_index("workload")
    assert table.loc["mtbench", "points"] == pytest.approx(2.0)
    assert table.loc["mean", "points"] == pytest.approx(0.5)
    assert tuple(table.loc["mean", ["pinned runner", "pinned core", "default runner",
                                    "default core"]]) == ("V1", "in-process", "V2", "own-process")
    sentence = acceptance.runner_pin_sentence(table.reset_index())
    assert "25.0% pinned (V1 runner, in-process engine core)" in sentence
    assert "25.5% on vLLM's defaults (V2 runner, own-process engine core), +0.5 points" in sentence
    assert "(at most 2.0 on one workload), within the ±3 points of a reproduction" in sentence
    other = summary.assign(draft_sha256=np.where(summary["method"].str.endswith("default"), "bb", "aa"))
    assert not acceptance.runner_pin(other)["same weights"].any()
    assert "different weights" in acceptance.runner_pin_sentence(acceptance.runner_pin(other))
    # plateau_measured reads the pinned rows only
    m = acceptance.plateau_measured(summary, tmp_path)
    assert m["method"].tolist() == ["eagle3-data1of8"]
    assert m.loc[0, "vLLM: mean"] == pytest.approx(0.25)


def test_rule_noise_sets_two_trainings_of_one_recipe_side_by_side(tmp_path):
    """What the plateau rule watches, in two trainings of one recipe on the same data: the
    first-64-token agreement of each at every step both reached, the difference in points, the
    rule's threshold beside it; a pair on other data is no pair."""
    _plateau_records(tmp_path, stopped_by="plateau", recipe={"plateau_delta": 0.01})
    man = json.loads((tmp_path / "smollm2-eagle3" / "manifest.json").read_text())
    assert acceptance.rule_noise_sentence(acceptance.rule_noise(tmp_path)).startswith("no recipe")
    old = json.loads(json.dumps(man))
    for ev in old["run"]["evals"]:
        if ev["step"] == 1000:  # first-64 agreement 0.55 in the later training, 0.58 here
            ev["first_tokens"] = {k: v + 0.03 for k, v in ev["first_tokens"].items()}
    d = tmp_path / "_superseded" / "lease-a" / "plateau" / "smollm2-eagle3"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(old))
    other = tmp_path / "_superseded" / "lease-b" / "plateau" / "smollm2-eagle3"
    other.mkdir(parents=True)
    (other / "manifest.json").write_text(json.dumps({**old, "data_sha256": "other data"}))
    noise = acceptance.rule_noise(tmp_path, from_step=250)
    assert noise["earlier lease"].unique().tolist() == ["lease-a"]
    assert noise["step"].tolist() == [250, 500, 1000]
    assert noise["difference"].tolist() == pytest.approx([0.0, 0.0, -3.0])
    assert noise["threshold"].tolist() == [1.0, 1.0, 1.0]
    assert acceptance.rule_noise_sentence(noise) == (
        "1 pair of trainings of one recipe on the same data, evaluated at 3 steps both reached "
        "from 250 on: the first-64-token agreement the rule watches differed by 0.0 points in "
        "the median and by at most 3.0 at the same step, against the rule's threshold of 1 "
        "point over a doubling; over a doubling, the gain the rule reads differed by 1.5 points "
        "in the median and by at most 3.0 between the two trainings of a pair, and the rule's "
        "verdict never differed between them")
    # what the rule acts on: the gain over a doubling in each training; an earlier training
    # that gained under the threshold where the later gained over it split the verdict
    g = acceptance.doubling_gains(noise)
    assert g[["from", "to"]].values.tolist() == [[250, 500], [500, 1000]]
    assert (g["earlier gain"] - g["later gain"]).tolist() == pytest.approx([0.0, 3.0])
    assert not g["split"].any()
    at = noise.set_index("step")
    rise = 100 * (at.loc[1000, "later"] - at.loc[500, "later"])
    assert rise >= 1  # the later training's gain over the threshold
    low = noise.assign(earlier=noise["earlier"].where(  # the earlier's: half a point
        noise["step"] != 1000, at.loc[500, "earlier"] + 0.005))
    assert acceptance.doubling_gains(low)["split"].tolist() == [False, True]
    assert acceptance.rule_noise_sentence(low).endswith(
        f"and the rule's verdict differed: eagle3 from 500 to 1000 steps gained {rise:+.1f} "
        "points in its latest training and +0.5 in lease lease-a's")
    # a pair equal at every step is counted, in the singular where it is one
    same = noise.assign(earlier=noise["later"], difference=0.0)
    assert " (1 pair identical at every step)," in acceptance.rule_noise_sentence(same)


def test_data_sizes_are_compared_on_the_workloads_every_size_measured(tmp_path):
    """A whole-data run measured on fewer workloads than its part (lease 47's EAGLE: HumanEval
    only): every size's mean is over the workloads they share, and the sentence says which."""
    half = _whole_and_half(tmp_path)
    whole = _plateau_summary()
    whole = whole[~((whole["draft"] == "smollm2-eagle3") & (whole["workload"] == "humaneval"))]
    summary = pd.concat([whole, pd.DataFrame(
        [_row("h100-plateau", "eagle3-data1of2", 4, wl, 0.0, r, [0.5, 0.3, 0.2, 0.1],
              draft="smollm2-eagle3-data1of2") for wl, r in (("mtbench", 0.2), ("humaneval", 0.16))])],
        ignore_index=True)
    measured = acceptance.plateau_measured(summary, tmp_path)
    sizes = acceptance.plateau_data_sizes(measured, acceptance.plateau_curves(tmp_path))
    assert sizes["vLLM: mean"].tolist() == pytest.approx([0.2, 0.3])  # mtbench, not 0.18
    assert set(sizes["workloads"]) == {"mtbench"}
    said = acceptance.data_size_sentence(sizes)
    assert "(on mtbench only: the workloads every size measured)" in said
    assert "+10.0 points" in said


def test_a_capped_earlier_training_against_a_later_one_the_rule_stopped_first():
    """The retraining sentence: an earlier run a cap stopped after more steps than the later
    run's plateau rule allowed is not 'what training further bought' (lease 31 against 47)."""
    rep = pd.DataFrame([{"run": "smollm2-eagle", "earlier": "p", "later": "p",
                         "earlier steps": e, "later steps": 16000,
                         "earlier stopped by": "max_steps", "later stopped by": "plateau",
                         "workloads": "humaneval", "earlier acceptance": 0.28,
                         "later acceptance": 0.249, "difference": -0.031,
                         "a retraining": False, "within tolerance": None}
                        for e in (32000, 16000, 8000)])
    said = acceptance.plateau_retraining_sentence(rep).split("; eagle: ")
    assert said[0].endswith("after more steps than the later one's plateau rule allowed: the "
                            "difference is what those further steps bought, not a reproduction")
    assert said[1].endswith("at the step where the later one's plateau rule stopped it: the "
                            "same budget, outside the ±3 points of a reproduction")
    assert said[2].endswith("so the difference is what training further bought, not a "
                            "reproduction")


def test_the_short_answer_names_a_training_that_went_on_where_the_rule_stopped_another():
    """Lease 47's EAGLE: the rule stopped it at 16000 steps (+0.6 over its last doubling) where
    lease 31's training of the recipe gained +1.2 and went on to 32000: the short answer sets
    the two side by side on the workloads both measured; lease 27's (stopped at 16000 too by
    its step cap) went no further and is not named; no split, no sentence."""
    noise = pd.DataFrame(
        [{"run": "smollm2-eagle", "earlier lease": lease, "step": s, "earlier": e,
          "later": la, "difference": 100 * (la - e), "threshold": 1.0}
         for lease in ("L27", "L31")
         for s, e, la in ((8000, 0.569, 0.572), (16000, 0.581, 0.578))])
    rep = pd.DataFrame([{"run": "smollm2-eagle", "earlier lease": lease, "earlier steps": step,
                         "later steps": 16000, "earlier stopped by": "max_steps",
                         "later stopped by": "plateau", "workloads": "humaneval",
                         "earlier acceptance": he, "later acceptance": 0.249}
                        for lease, step, he in (("L27", 16000, 0.257), ("L31", 32000, 0.28))])
    gains = acceptance.doubling_gains(noise)
    assert acceptance.rule_split_sentence(gains, rep) == (
        "The rule's verdict is firm to a doubling, not exactly: eagle's latest training stopped "
        "at 16000 steps (+0.6 points over its last doubling), where lease L31's training of its "
        "recipe gained +1.2 and went on to 32000 steps (step cap): 28.0% there against 24.9% on "
        "humaneval through vLLM.")
    alike = noise.assign(later=noise["earlier"])
    assert acceptance.rule_split_sentence(acceptance.doubling_gains(alike), rep) == ""
    assert acceptance.rule_split_sentence(gains, rep.iloc[:1]) == ""
