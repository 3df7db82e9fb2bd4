"""Chapter helpers (specdec.chapters): what the chapters show, computed from rows and data."""
import math
from pathlib import Path

import pandas as pd
import pytest

from specdec import book, chapters, model_configs, protocol, stats, store, theory
from specdec.profiles import ProfileError


# -- k_sweep ---------------------------------------------------------------------------- #
def test_article_k_table_is_the_ledgers_numbers_and_what_they_imply():
    claimed = book.article_claims(["C11", "C12", "C13"])
    table = chapters.article_k_table(claimed)
    assert list(table["claim"]) == ["C11", "C12", "C13"]
    assert list(table["K"]) == list(claimed["k"])
    assert list(table["tokens/step implied (1 + K × acceptance)"]) == pytest.approx(
        list(1 + claimed["k"] * claimed["acceptance"]))
    for _, r in table.iterrows():  # the implied costs give back the article's speedups
        assert theory.walltime_speedup(r["per-token α implied"], r["K"], r["draft cost c implied"]) \
            == pytest.approx(r["speedup (article says)"])


def test_article_k_falls_names_where_speedup_falls_while_tokens_rise():
    t = pd.DataFrame({"K": [3, 5, 8], "speedup (article says)": [2.0, 2.2, 1.9],
                      "K × acceptance": [1.5, 2.0, 2.4]})
    assert chapters.article_k_falls(t) == "K = 5 to K = 8"
    assert chapters.article_k_falls(t.assign(**{"speedup (article says)": [1, 2, 3]})) \
        == "one K to the next (it never does)"


def test_article_k_rule_in_words():
    rule = {"k_fast": 8, "bandwidth_gb_s": 2000, "k": 5}
    assert chapters.article_k_rule(rule) == "K = 8 when memory bandwidth exceeds 2000 GB/s, else 5"


def _summary():
    rows = []
    for k, s in ((1, 1.1), (3, 1.4), (5, 1.2)):
        e = theory.expected_tokens_per_step(0.7, k)
        rows.append(dict(profile="p", method="draft", workload="w", batch_size=1,
                         compilation="default", num_speculative_tokens=k, speedup=s,
                         speedup_ci_low=s - 0.05, speedup_ci_high=s + 0.05, speedup_status="ok",
                         acceptance_rate=(e - 1) / k, mean_acceptance_length=e, unstable=False))
    rows.append(dict(profile="p", method="baseline", workload="w", batch_size=1,
                     compilation="default", num_speculative_tokens=0, speedup=1.0,
                     speedup_ci_low=1.0, speedup_ci_high=1.0, speedup_status="baseline",
                     acceptance_rate=float("nan"), mean_acceptance_length=float("nan"),
                     unstable=False))
    return pd.DataFrame(rows)


def test_best_k_table_and_the_models_optimal_k_beside_it():
    summ = _summary()
    best = chapters.best_k_table(summ)
    assert best[["method", "best K"]].to_dict("records") == [{"method": "draft", "best K": 3}]
    fit = theory.fit(summ, summ["num_speculative_tokens"] > 0, model="overhead")
    table = chapters.optimal_k_table(summ, fit, best, k_max=16)
    assert table["measured_best_k"].tolist() == [3]
    assert table["optimal_k"].iloc[0] == theory.optimal_k(
        0.7, table["cost_ratio"].iloc[0], 16, table["verify_intercept"].iloc[0])
    assert "measured_best_k" not in chapters.optimal_k_table(summ, fit, best.iloc[:0]).columns


def _sweep_table():
    """Method e swept at K 2 to 8 at set α 0.8 (K 4 from the surface's lease L2, the rest from
    L1), and at K 4 alone at α 0.5 (the surface's grid); method f at two K only."""
    rows = [{"method": "e", "batch_size": 1, "acceptance_alpha": 0.8, "num_speculative_tokens": k,
             "lease_id": "L2" if k == 4 else "L1", "speedup": 1.0, "step_ms": ms}
            for k, ms in ((2, 10.0), (4, 11.0), (6, 13.0), (8, 14.0))]
    rows += [{"method": "e", "batch_size": 1, "acceptance_alpha": 0.5, "num_speculative_tokens": 4,
              "lease_id": "L2", "speedup": 1.0, "step_ms": 11.0}]
    rows += [{"method": "f", "batch_size": 1, "acceptance_alpha": 0.8, "num_speculative_tokens": k,
              "lease_id": "L1", "speedup": 1.0, "step_ms": 9.0} for k in (4, 6)]
    rows += [{"method": "baseline", "batch_size": 1, "acceptance_alpha": None,
              "num_speculative_tokens": 0, "lease_id": "L1", "speedup": 1.0, "step_ms": 6.0}]
    return pd.DataFrame(rows)


def test_gpu_k_sweep_reads_the_lines_swept_and_the_step_per_k_within_their_lease():
    lines, own, t = chapters.gpu_k_sweep(_sweep_table(), 4, None, pd.DataFrame(),
                                         pd.Series({"e": 0.2, "f": 0.01}))
    assert set(lines["method"]) == {"e"} and set(lines["acceptance_alpha"]) == {0.8}
    assert lines.loc[lines["other_lease"], "num_speculative_tokens"].tolist() == [4]
    assert own.empty and t["sweep_k4"] == "no configuration measured in both yet"
    assert t["sweep_methods"] == "e (K = 2, 4, 6, 8; batch 1)"
    assert t["sweep_spread"] == "e ±10%"
    # K 4 (another lease) left out: 3 ms over 2 to 6, then 1 ms over 6 to 8
    assert t["sweep_steps"] == "e at batch 1: 0.50 to 0.75 ms per K, the most from K = 2 to 6"
    lines, own, t = chapters.gpu_k_sweep(_sweep_table().iloc[0:0], 4, None, pd.DataFrame(), None)
    assert lines.empty and own is None
    assert (t["sweep_methods"], t["sweep_spread"], t["sweep_steps"]) == (
        "none yet", "no panel yet", "not measured yet")


def test_gpu_k_sweep_of_the_committed_campaign_sets_the_surfaces_k_beside_its_panel():
    table = chapters.surface_table("h200-surface-v2", None)
    panel_cells = protocol.cells(protocol.load_panels("h200-surface-v2"))
    spread = protocol.method_spread(protocol.panel_table(panel_cells))
    lines, own, t = chapters.gpu_k_sweep(table, 4, panel_cells, store.load_runs("h200-surface-v2"), spread)
    assert {"eagle3", "draft-1b"} <= set(lines["method"])
    key = ["method", "batch_size", "acceptance_alpha", "num_speculative_tokens"]
    other = set(map(tuple, lines.loc[lines["other_lease"], key].to_numpy().tolist()))
    assert 4 in {k for *_, k in other}  # the surface's K, measured in another lease
    assert len(own) and set(map(tuple, own[key].to_numpy().tolist())) <= other
    assert set(own["panel_phase"]) == {"start", "end"}
    assert own["speedup_cost"].notna().all()  # the 1B draft's V1 panel cells too
    assert "eagle3 at batch 1, α = 0.8: " in t["sweep_k4"] and "(start and end panel)" in t["sweep_k4"]
    assert t["sweep_spread"].startswith("draft-1b ±")


def test_one_host_sentences_read_the_sweep_on_the_median_panel_host():
    panel = pd.DataFrame([{"lease_id": lease, "panel_phase": ph, "method": "d", "batch_size": 1,
                           "step_ms": ms, "cell_id": "d1"}
                          for lease, ph, ms in [("L1", "start", 10.0), ("L1", "end", 11.0),
                                                ("L2", "start", 20.0), ("L2", "end", 20.0)]])
    spread = protocol.method_spread(panel)
    rows = pd.DataFrame([{"method": "d", "batch_size": 1, "acceptance_alpha": 0.8,
                          "num_speculative_tokens": k, "lease_id": "L2" if k == 1 else "L1",
                          "speedup": s, "speedup_ci_low": s - 0.01, "speedup_ci_high": s + 0.01}
                         for k, s in [(1, 1.0), (2, 1.3), (3, 1.25), (4, 1.1), (5, 1.0)]])
    t = chapters.one_host_sentences(protocol.one_host(rows, panel, spread), panel, spread)
    # L2's factor 20 / 15.5 lifts K = 1 above L1's K = 2 (1.3 × 10.49 / 15.5)
    assert t["norm_best"].startswith("d at batch 1, α = 0.8: *K* = 1 (1.29×")
    assert t["norm_summary"] == "d: *K* = 1"
    assert t["norm_factors"] == "0.68 to 1.29" and t["norm_drift"] == "d up to 10%"
    assert t["norm_methods"] == "d (±50%)" and t["panel_batches"] == "1"
    assert t["panel_bounds"] == "within 3% over the panel, 5% in its worst cell"
    none = chapters.one_host_sentences(rows.iloc[0:0], None, None)
    assert (none["panel_batches"], none["norm_methods"], none["norm_best"]) == (
        "none", "none", book.NOT_MEASURED) and set(none) == set(t)


# -- batch_scaling ---------------------------------------------------------------------- #
def test_roofline_reads_bandwidth_from_the_profile_and_bytes_from_the_config():
    summ = pd.DataFrame({"profile": ["h200-mechanics"], "method": ["baseline"], "batch_size": [1],
                         "tok_s_median": [150.0]})
    roof = chapters.roofline_table(summ, ["h200-mechanics", "a100-llama3-8b"], "llama-3-8b")
    bound = 4800e9 / model_configs.weight_bytes("llama-3-8b")
    h200, a100 = roof.to_dict("records")
    assert h200["bandwidth GB/s (published)"] == 4800
    assert h200["bound tok/s at batch 1 (computed)"] == pytest.approx(bound)
    assert h200["share of bound"] == pytest.approx(150.0 / bound)
    assert a100["bandwidth GB/s (published)"] == 2039 and math.isnan(a100["share of bound"])
    assert chapters.roofline_sentence(roof) == f"{100 * 150 / bound:.0f} % of the bound on `h200-mechanics`"
    assert chapters.roofline_sentence(roof.iloc[1:]) == "not measured yet"


def test_roofline_refuses_a_profile_without_bandwidth():
    with pytest.raises(ProfileError, match=r"cpu-smollm2\.yaml: hardware\.memory_bandwidth_gb_s"):
        chapters.decode_bound("cpu-smollm2", "llama-3-8b")


def test_memory_table_in_gib():
    summ = pd.DataFrame({"profile": "p", "method": ["b", "a"], "num_speculative_tokens": [0, 2],
                         "batch_size": [1, 1], "peak_memory_bytes": [2**31, 2**30],
                         "kv_cache_bytes": [2**29, None]})
    mem = chapters.memory_table(summ)
    assert mem["method"].tolist() == ["a", "b"]
    assert mem["peak memory GiB"].tolist() == [1.0, 2.0]


def test_crossover_sentence_without_a_sweep():
    summ = _summary()
    summ["temperature"], summ["acceptance_alpha"] = 0.0, None
    sentence, clauses = chapters.crossover_sentence(summ)
    assert clauses == [f"draft (K = {k}, w) on `p` pays at batch 1, the only batch measured"
                       for k in (1, 3, 5)]
    assert sentence == "; ".join(clauses)
    sentence, clauses = chapters.crossover_sentence(summ[summ["method"] == "baseline"])
    assert clauses == [] and sentence.startswith("no campaign has a complete batch sweep")


def test_crossover_of_a_method_that_moves_with_the_host_gives_its_range_not_a_verdict():
    summ = pd.DataFrame({"profile": "p", "method": "d", "num_speculative_tokens": 4,
                         "workload": "w", "temperature": 0.0, "compilation": None,
                         "acceptance_alpha": 0.8, "batch_size": [1, 16],
                         "speedup": [0.85, 0.76], "speedup_ci_high": [0.9, 0.8],
                         "speedup_status": "ok"})
    assert chapters.crossover_sentence(summ)[1] == [
        "d (K = 4, w) on `p` does not pay even at the smallest batch, 1"]
    # its control panel moved by 57 % between leases: 0.85× is within ±28 % of no speculation
    assert chapters.crossover_sentence(summ, {"d": 0.57})[1] == [
        "d (K = 4, w) on `p` ran at 0.85×, 0.76× at batch 1, 16: within its host spread (±28%) "
        "of no speculation, so where it stops paying depends on the host"]
    # a spread too small to reach 1 leaves the verdict
    assert "does not pay" in chapters.crossover_sentence(summ, {"d": 0.1})[0]


def test_gpu_batch_section_cuts_the_committed_surface_along_the_batch(tmp_path):
    table = chapters.surface_table("h200-surface-v2", None)
    spread = protocol.panel_spread("h200-surface-v2")
    shown, at_k, t = chapters.gpu_batch_section(table, 4, [0.5, 0.8], spread)
    assert "tok_s_median" in shown and (shown["method"] == "baseline").any()
    assert set(shown.loc[shown["method"] != "baseline", "acceptance_alpha"]) == {0.8}
    assert set(at_k["acceptance_alpha"]) == {0.5, 0.8} and set(at_k["num_speculative_tokens"]) == {4}
    assert at_k["unstable"].tolist() == (at_k["step_ms_cv"] > stats.CV_THRESHOLD).tolist()
    assert t["gpu_alpha"] == "0.8" and "draft-1b ±" in t["gpu_caveat"]
    # the 1B draft moves with the host: its range, no verdict; without the spread, a verdict
    assert "draft-1b (K = 4, repeat) on `h200-surface-v2` ran at" in t["gpu_crossover"]
    plain = chapters.gpu_batch_section(table, 4, [0.8], None)[2]
    assert "host spread" not in plain["gpu_crossover"] and plain["gpu_caveat"] == ""
    assert t["gpu_trend_short"].count("α = ") == 2 and len(t["gpu_trend"]) > len(t["gpu_trend_short"])
    _, none, t0 = chapters.gpu_batch_section(table, 99, [0.8], spread)
    assert none.empty and t0["gpu_crossover"] == book.NOT_MEASURED and t0["gpu_caveat"] == ""
    # a results folder without the campaign's rows: the surface of its empty summary
    from specdec import surface

    empty = surface.table(book.chapter_data(["h200-surface-v2"], "surface-k4",
                                            results_root=tmp_path).summary)
    shown, none, t0 = chapters.gpu_batch_section(empty, 4, [0.5, 0.8], spread)
    assert shown.empty and none.empty and t0["gpu_crossover"] == book.NOT_MEASURED


# -- draft_selection -------------------------------------------------------------------- #
def test_vocabulary_table_marks_the_articles_drafts_unusable():
    vocab = chapters.vocabulary_table({"TinyLlama-1.1B": "tinyllama-1.1b", "Phi-2": "phi-2",
                                       "Llama-3.2-1B": "llama-3.2-1b"}, "llama-3-8b")
    assert vocab["usable as a draft"].tolist() == [False, False, True]
    assert vocab["draft vocab_size"].tolist() == [32000, 51200, 128256]
    assert set(vocab["target vocab_size"]) == {128256}
    assert chapters.usable_drafts(vocab) == "1 of 3"
    assert chapters.usable_drafts(vocab.iloc[:2]) == "None"


def test_draft_params_from_the_profile():
    from specdec.profiles import load_profile

    prof = load_profile("cpu-smollm2")
    m = prof.method("draft-trunc-16")
    assert chapters.draft_params("cpu-smollm2", "draft-trunc-16") == prof.model(m.draft).params
    assert chapters.draft_params("cpu-smollm2", "baseline") is None
    assert chapters.draft_params("cpu-smollm2", "no-such-method") is None
    assert chapters.draft_params("no-such-profile", "draft-trunc-16") is None


# -- conclusions ------------------------------------------------------------------------ #
def test_prediction_grid_table_names_its_alpha():
    grid = chapters.prediction_grid_table([0.0, 1.0], alpha=0.6, k_max=4)
    assert list(grid.columns) == ["draft cost c (target steps)", "break-even acceptance α (prediction)",
                                  "best K at α = 0.6 (prediction)",
                                  "speedup at α = 0.6, best K (prediction)"]
    assert grid.iloc[1, 2] == 0 and grid.iloc[1, 3] == 1.0


def test_measured_break_even_of_a_protocol_2_campaign_reads_cost():
    """h200-surface-v2 (measuring protocol 2) is read from cost on the runner users get,
    the pinned controls left out."""
    from specdec import protocol

    sentence, table = chapters.measured_break_even("h200-surface-v2", 4)
    be = protocol.break_even(protocol.users_speedups("h200-surface-v2")[0], 4)
    assert sorted(table.index) == sorted(be["method"].unique())
    assert not {"eagle3-v1", "draft-1b-inproc"} & set(table.index)
    from specdec.profiles import load_profile
    assert protocol.surface_workloads(load_profile("h200-surface-v2")) == ["repeat"]
    assert table.loc["eagle3", "batch 1"] == pytest.approx(
        be.set_index(["method", "batch_size"]).loc[("eagle3", 1), "break_even_alpha"])
    # the sentence orders the methods from the least demanding
    easiest = table.min(axis=1).idxmin()
    assert sentence.startswith(f"From the least demanding method to the most: {easiest} α ≈ ")
    # the 1B draft's step moved between control panels: its break-even moves with it
    caveat = sentence[sentence.index(" Between leases"):].strip()
    assert caveat.endswith("is not a finding.") and "draft-1b ±" in caveat
    assert chapters.measured_break_even("h200-surface-v2", 4, results_root=Path("/nonexistent"))[0] \
        == "No rows of `h200-surface-v2` are stored yet."


def test_best_k_summary_names_the_fastest_configuration():
    best = chapters.best_k_table(_summary())
    assert chapters.best_k_summary(best) == "draft on `p` at K = 3: 1.40× (interval 1.35–1.45)"
    assert chapters.best_k_summary(best.iloc[:0]) == book.NOT_MEASURED


def test_article_batch_table_divides_by_the_batch():
    claimed = book.article_claims(["C18", "C19", "C20"])
    table = chapters.article_batch_table(claimed)
    assert list(table["claim"]) == ["C18", "C19", "C20"]
    assert list(table["baseline tok/s per request (from its numbers)"]) == pytest.approx(
        list(claimed["baseline_tok_s"] / claimed["batch"]))


def test_acceptance_range_from_lowest_to_highest():
    cells = _summary()
    cells = cells[cells["method"] != "baseline"]
    text = chapters.acceptance_range(cells)
    lo, hi = cells["acceptance_rate"].min(), cells["acceptance_rate"].max()
    assert text == (f"from {100 * lo:.1f} % (draft on `p`, speedup 1.20×) to "
                    f"{100 * hi:.1f} % (draft on `p`, speedup 1.10×)")
    assert chapters.acceptance_range(cells.iloc[:0]) == book.NOT_MEASURED


def test_what_if_draft_takes_the_first_candidate_with_a_fitted_cost():
    params = pd.DataFrame({"profile": ["a", "b"], "method": ["d1", "d2"],
                           "cost_ratio": [float("nan"), 0.25]})
    assert chapters.what_if_draft(params, {"a": "d1", "b": "d2"}) == ("b", "d2", 0.25)
    assert chapters.what_if_draft(params, {"a": "d1"}) is None


def test_best_per_method_keeps_the_fastest_greedy_cell():
    summ = _summary()
    summ["temperature"] = 0.0
    hot = summ.iloc[[0]].assign(temperature=1.0, speedup=9.0)
    best = chapters.best_per_method(pd.concat([summ, hot], ignore_index=True))
    assert best[["method", "num_speculative_tokens", "speedup"]].to_dict("records") == [
        {"method": "draft", "num_speculative_tokens": 3, "speedup": 1.4}]


def test_dynamic_k_sentence_is_the_surface_chapters_summary_line(tmp_path):
    table = chapters.surface_table("h200-surface-v2", None)
    sentence = chapters.dynamic_k_sentence("h200-surface-v2")
    assert sentence == chapters.dynamic_k_section(table, "h200-surface-v2", "eagle3-dynk")[1]["sum_dyn"]
    # lease 20: the schedule on EAGLE-3's default runner failed at engine start; said first
    assert "does not start on its default runner in vLLM 0.26.0 (`ZeroDivisionError" in sentence \
        or sentence.startswith("vLLM's dynamic *K* ran at")
    assert chapters.dynamic_k_sentence("h200-surface-v2", tmp_path) == (
        "vLLM's dynamic *K* is not measured yet under this protocol.")


def test_dynamic_k_section_says_one_thing_when_nothing_is_measured_and_reads_the_rows_when_it_is():
    table = chapters.surface_table("h200-surface-v2", None)
    empty = table[~table["method"].str.contains("dynk")]
    dyn, text = chapters.dynamic_k_section(empty, "h200-surface-v2", "eagle3-dynk")
    assert dyn.empty and set(text) == {"dyn_failed", "dyn_text", "sum_dyn"}
    assert {"dynamic_over_fixed", "one_host"} <= set(dyn.columns)  # the chapter's table reads them
    assert text["dyn_text"].startswith("No dynamic-*K* cell is measured yet")
    assert "`dynamic-k-eagle3`, `dynamic-k-1b`" in text["dyn_text"]
    assert "ZeroDivisionError" in text["sum_dyn"] and "4 cell(s)" in text["dyn_failed"]
    assert not any("not measured*" in t for t in text.values())  # no placeholder
    row = dict(acceptance_alpha=0.8, batch_size=1, runner="V1", cudagraph_mode="PIECEWISE")
    rows = pd.DataFrame([
        dict(row, method="eagle3-dynk-v1", num_speculative_tokens=5, speedup=1.8, step_ms=16.0,
             spec_num_draft_tokens=500, spec_num_drafts=100),
        dict(row, method="eagle3", num_speculative_tokens=5, speedup=2.0, runner="V2", step_ms=8.0,
             cudagraph_mode="FULL", spec_num_draft_tokens=500, spec_num_drafts=100)])
    dyn, text = chapters.dynamic_k_section(rows, "h200-surface-v2", "eagle3-dynk")
    assert len(dyn) == 1 and ("`eagle3-dynk-v1` (on V1, beside fixed *K* on V2) at a median 0.90× "
                              "(0.90×, 1 of 1 cells)") in text["dyn_text"]
    assert "the ratio carries the runner too" in text["dyn_text"]
    # the step beside the fixed one, and the runner alone from the stored runner control
    assert "At the same *K* the dynamic step took 2.00× the fixed step for `eagle3-dynk-v1`" in text["dyn_text"]
    alone = protocol.runner_step_ratio(store.load_runs("h200-surface-v2"))
    assert f"takes {protocol.span(alone, '.2f', '×')} at batch 1 and 16" in text["dyn_text"]
    assert text["dyn_text"].startswith("So the schedule is measured with EAGLE-3 pinned to the V1")
    assert "Not measured yet: `dynamic-k-1b`" in text["dyn_text"]
    assert "`eagle3-dynk-v1` (V1): PIECEWISE) against FULL" in text["dyn_text"]
    assert text["sum_dyn"].startswith("vLLM's dynamic *K* ran at 0.90× of the same fixed *K*")
    assert "one host" not in text["sum_dyn"]  # EAGLE-3's step holds between hosts
    alone = rows.iloc[[0]]  # the dynamic cell without a fixed one at its K: no ratio to read
    assert chapters.dynamic_k_section(alone, "h200-surface-v2", "eagle3-dynk")[1]["sum_dyn"] == (
        "vLLM's dynamic *K* is measured, but no fixed *K* yet at the *K* its schedule chose: "
        "the ratio is not read.")
    assert "No fixed *K* is measured yet at the *K* the schedule chose" in chapters.dynamic_k_section(
        alone, "h200-surface-v2", "eagle3-dynk")[1]["dyn_text"]


def test_one_host_ratios_scale_a_ratio_by_the_two_leases_panel_steps_of_a_moving_method():
    dyn = pd.DataFrame([dict(method="d-dynk", fixed_method="d", batch_size=1, acceptance_alpha=0.8,
                             dynamic_over_fixed=0.5, lease_id="L2", fixed_lease="L1"),
                        dict(method="d-dynk", fixed_method="d", batch_size=4, acceptance_alpha=0.8,
                             dynamic_over_fixed=0.5, lease_id="L2", fixed_lease="L1")])
    panel = pd.DataFrame([  # d's step: 10 ms in L1, 20 and 5 ms (geometric mean 10) ... in L2
        dict(lease_id="L1", panel_phase="start", method="d", batch_size=1, step_ms=10.0, cell_id="c"),
        dict(lease_id="L2", panel_phase="start", method="d", batch_size=1, step_ms=20.0, cell_id="c"),
        dict(lease_id="L2", panel_phase="end", method="d", batch_size=1, step_ms=5.0, cell_id="c"),
        dict(lease_id="L3", panel_phase="start", method="d", batch_size=1, step_ms=12.0, cell_id="c")])
    out = chapters.one_host_ratios(dyn, panel)  # batch 4: no panel cell, left out
    assert out["one_host"].tolist() == pytest.approx([0.5])
    out = chapters.one_host_ratios(dyn, panel.assign(lease_id=["L1", "L2", "L2", "L2"],
                                                     step_ms=[10.0, 40.0, 40.0, 40.0]))
    assert out["one_host"].tolist() == pytest.approx([2.0])  # L2's host 4 times slower
    assert chapters.one_host_ratios(dyn, panel.assign(method="e")).empty  # d's step not paneled
    steady = panel.assign(step_ms=10.0)  # a method that does not move is read as it is
    assert chapters.one_host_ratios(dyn, steady).empty


def test_failures_name_the_root_cause_from_the_stored_error_tail():
    # lease 20: EAGLE-3 with a dynamic-K schedule on V2 (vLLM 0.26) failed at engine start
    failed = chapters.failures("h200-surface-v2", ["eagle3-dynk"])
    assert len(failed) == 4 and failed["at_start"].all()
    assert set(failed["exception"]) == {"ZeroDivisionError: integer division or modulo by zero"}
    assert failed["where"].str.contains("`_init_candidates` (`vllm/v1/worker/gpu/cudagraph_utils.py`)",
                                        regex=False).all()
    sentence = chapters.failure_sentence(failed, "it", "See upstream.")
    assert "4 cell(s) of it failed at engine start (lease 2026-12-05-h200-20)" in sentence
    assert sentence.startswith("In vLLM 0.26.0,") and sentence.endswith("See upstream.")
    assert chapters.failures("h200-surface-v2", ["eagle3"]).empty
    assert "no failed cell" in chapters.failure_sentence(failed.iloc[0:0], "it")


def test_failures_of_a_cell_that_failed_while_running(tmp_path):
    from specdec import runner

    err = ("Traceback (most recent call last):\n"
           '  File "/x/site/vllm/v1/worker/gpu_model_runner.py", line 9, in execute_model\n'
           '  File "/x/site/vllm/v1/attention/backend.py", line 3, in forward\n'
           "torch.OutOfMemoryError: CUDA out of memory\n"
           "RuntimeError: engine subprocess exited with code 1")
    ident = {"profile": "p", "cell_id": "m-k4-b1-x", "config_hash": "h", "method": "m",
             "batch_size": 1, "acceptance_alpha": 0.8}
    prov = {"vllm_version": "0.26.0"}
    row = runner.failed_row(ident, err, prov, "lease-y")
    d = pd.DataFrame([row])
    assert d["lease_id"].iloc[0] == "lease-y" and d["status"].iloc[0] == "failed"
    exc = chapters._EXCEPTION.search(err)
    assert exc.group(1) == "torch.OutOfMemoryError"  # the first exception line: the root cause
    frames = chapters._VLLM_FRAME.findall(err[:exc.start()])
    assert frames[-1] == ("vllm/v1/attention/backend.py", "forward")


def test_runner_note_only_where_the_runners_differ():
    both = pd.DataFrame({"runner": ["V1", "V1"], "fixed_runner": ["V2", "V2"]})
    assert chapters.runner_note(both) == "; the schedule on V1, fixed K on V2"
    assert chapters.runner_note(both.assign(fixed_runner="V1")) == ""
    assert chapters.runner_note(both.drop(columns="fixed_runner")) == ""


def test_draft_cost_table_reads_cost_at_the_articles_rates():
    """A draft whose step costs two baseline steps at every set α: its break-even is where the
    expected tokens per step reach 2, and at a rate of 0.5 (K = 4: 3 tokens per step) 1.5x."""
    def cell(alpha, method="draft-1b", batch=1):
        return {"profile": "h200-surface-v2", "method": method, "num_speculative_tokens": 4,
                "batch_size": batch, "acceptance_alpha": alpha, "step_ms": 20.0,
                "step_ms_ci_low": 19.0, "step_ms_ci_high": 21.0, "baseline_step_ms": 10.0,
                "baseline_step_ms_ci_low": 10.0, "baseline_step_ms_ci_high": 10.0,
                "runner": "V1", "baseline_method": "baseline-v1", "lease_id": "l1"}
    table = pd.DataFrame([cell(0.0), cell(1.0), cell(0.5, method="eagle3")])
    out = chapters.draft_cost_table(table, ["draft-1b", "draft-1layer"], 4, {"at 50 %": 0.5})
    assert list(out["method"]) == ["draft-1b"]  # eagle3 is not a draft model; draft-1layer absent
    row = out.iloc[0]
    assert row["params"] == chapters.draft_params("h200-surface-v2", "draft-1b")
    assert row["step in baseline steps"] == pytest.approx(2.0)
    assert theory.expected_tokens_per_step(row["break-even α"], 4) == pytest.approx(2.0, abs=0.02)
    assert row["at 50 %"] == pytest.approx(1.5)
    assert chapters.draft_cost_table(None, ["draft-1b"], 4, {"x": 0.5}).empty
    high = pd.DataFrame([cell(0.5), cell(1.0)])  # no measured α brackets a rate of 5 %
    assert math.isnan(chapters.draft_cost_table(high, ["draft-1b"], 4, {"low": 0.05}).iloc[0]["low"])


def test_best_k_phrase_names_the_ties_inside_the_interval():
    assert chapters.best_k_phrase(2, 1.375, [1]) == "*K* = 2 (1.38×, a tie with *K* = 1)"
    assert chapters.best_k_phrase(1, 1.04, [2, 3]) == "*K* = 1 (1.04×, a tie with *K* = 2, 3)"
    assert chapters.best_k_phrase(6, 2.46, []) == "*K* = 6 (2.46×)"


def test_draft_cost_sentences_read_the_smallest_batch_at_the_articles_highest_acceptance():
    article = pd.DataFrame({"claim": ["C7", "C8"], "draft": ["A", "B"],
                            "acceptance (article says)": [0.68, 0.72]})
    cost = pd.DataFrame({"method": ["d1", "d1", "d2"], "params": ["1B", "1B", "2B"],
                         "runner": "V1", "batch": [1, 16, 1],
                         "step in baseline steps": [1.5, 2.0, 1.2],
                         "break-even α": [0.6, 0.7, float("nan")],
                         "at C7 (A, 68 % acceptance rate)": [1.1, 1.0, 1.2],
                         "at C8 (B, 72 % acceptance rate)": [1.2, 1.1, float("nan")]})
    said = chapters.draft_cost_sentences(cost, article)
    assert said == {"gpu_draft_cost": "d1 (1B) 1.50; d2 (2B) 1.20",
                    "gpu_draft_be": "d1 α ≈ 0.60; d2 does not break even within the measured α",
                    "gpu_draft_at": "d1 1.20× (C8, B's 72 % acceptance rate, per-token α ≈ "
                                    f"{float(theory.alpha_from_rate(0.72, 4)):.2f} at K = 4)",
                    "gpu_draft_batch": "1"}
    assert set(chapters.draft_cost_sentences(cost.iloc[0:0], article).values()) == {book.NOT_MEASURED}
