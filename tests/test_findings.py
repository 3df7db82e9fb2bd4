"""The sentences the conclusions state are generated from rows, and turn when the rows do."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from specdec import findings, store


def _cell(method, speedup, acceptance=0.5, k=3, batch=1, workload="mtbench", profile="cpu-smollm2",
          alpha=None, temperature=0.0, ci=0.05):
    return {"profile": profile, "method": method, "num_speculative_tokens": k, "batch_size": batch,
            "workload": workload, "temperature": temperature, "speedup": speedup,
            "speedup_ci_low": speedup - ci, "speedup_ci_high": speedup + ci,
            "speedup_status": "ok", "acceptance_rate": acceptance, "acceptance_alpha": alpha,
            "experiment_tags": ["k-sweep"]}


def _summary(*cells):
    return pd.DataFrame(list(cells))


@pytest.mark.parametrize("ngram, draft, expected", [
    (1.5, 0.6, "**Prompt lookup is the method that paid here.**"),
    (0.9, 1.4, "**A draft model is the method that paid here.**"),
    (1.5, 1.3, "**Prompt lookup paid most here**, ahead of a draft model."),
    (0.9, 0.6, "**No method paid here**"),
    (1.02, 0.6, "**No method paid here**"),  # the interval reaches below 1
])
def test_the_method_that_paid_follows_the_rows(ngram, draft, expected):
    summ = _summary(_cell("ngram", ngram), _cell("draft-trunc-16", draft),
                    _cell("draft-self", 1.9, acceptance=1.0))  # a sanity bound never "pays"
    assert findings.method_that_paid(summ).startswith(expected)


def test_set_acceptance_never_makes_a_method_pay():
    """The H200 surface sets acceptance: its speedups price methods, they do not show one pays."""
    summ = _summary(_cell("ngram", 0.9), _cell("eagle3", 3.0, acceptance=1.0,
                                               profile="h200-surface", alpha=1.0))
    assert findings.method_that_paid(summ).startswith("**No method paid here**")


def test_self_draft_sentence_turns_with_its_speedup():
    loses = findings.self_draft_sentence(_summary(_cell("draft-self", 0.8, acceptance=1.0)))
    assert "accepts everything and still loses" in loses and "cost decides" in loses
    gains = findings.self_draft_sentence(_summary(_cell("draft-self", 1.2, acceptance=1.0)))
    assert "gains at best 1.20×" in gains and "loses" not in gains


def test_lossless_headline_turns_when_a_cell_differs():
    ok = pd.DataFrame({"dtype": ["float32", "bfloat16"], "hardware": ["CPU", "1x H200"],
                       "campaigns": ["a", "b"], "cells": [3, 2], "identical": [3, 2]})
    assert findings.lossless_headline(ok) == "**Greedy speculation was lossless where it was checked**"
    mixed = findings.lossless_headline(ok.assign(identical=[3, 1]), bold=False)
    assert mixed == "greedy speculation was lossless in float32 where it was checked, not always in bfloat16"
    assert "not lossless" in findings.lossless_headline(ok.assign(identical=[2, 1]), bold=False)
    assert findings.lossless_sentence(ok.assign(identical=[3, 1])) == (
        "in float32, 3 of 3 greedy speculative cells (`a` on CPU); "
        "in bfloat16, 1 of 2 greedy speculative cells (`b` on 1x H200)")


def test_lossless_tally_reads_every_real_campaign_and_leaves_set_acceptance_out():
    tally = findings.lossless_tally()
    assert set(tally["dtype"]) >= {"float32", "bfloat16"}
    assert (tally["identical"] <= tally["cells"]).all()
    # the H200 surface sets acceptance (not meant to match) and its runner controls are no
    # speculation: neither is counted; its standard-sampler cells (natural acceptance) are
    runs = store.load_runs("h200-surface-v2")
    natural = runs[runs["acceptance_alpha"].isna() & (runs["num_speculative_tokens"] > 0)
                   & (runs["status"] == "ok")]
    surface = findings.lossless_tally(campaigns=["h200-surface-v2"])
    assert surface["cells"].sum() == natural["cell_id"].nunique()
    assert natural["cell_id"].nunique() < runs[runs["num_speculative_tokens"] > 0]["cell_id"].nunique()


def test_acceptance_with_k_and_speedup_with_batch_are_read_off_the_rows():
    falling = _summary(_cell("ngram", 1.3, acceptance=0.6, k=1), _cell("ngram", 1.2, acceptance=0.4, k=5))
    assert findings.acceptance_falls_with_k(falling).startswith("acceptance falls with K")
    rising = _summary(_cell("ngram", 1.3, acceptance=0.4, k=1), _cell("ngram", 1.2, acceptance=0.6, k=5))
    assert "in 0 of 1" in findings.acceptance_falls_with_k(rising)
    grows = _summary(_cell("ngram", 1.4, batch=1), _cell("ngram", 1.5, batch=8))
    assert "not lower at the largest batch" in findings.batch_trend(grows)
    shrinks = _summary(_cell("ngram", 1.4, batch=1), _cell("ngram", 1.1, batch=8))
    assert "lower at the largest batch than at the smallest in the one configuration" in findings.batch_trend(shrinks)


def test_lookup_acceptance_by_workload_names_the_extremes():
    summ = _summary(_cell("ngram", 1.3, acceptance=0.7, workload="humaneval"),
                    _cell("suffix", 1.1, acceptance=0.3, workload="mtbench"))
    text = findings.acceptance_by_workload(summ)
    assert "highest on humaneval and lowest on mtbench" in text


def test_best_k_sentence_says_whether_it_differs_between_methods():
    differs = pd.DataFrame({"profile": ["p", "p"], "method": ["ngram", "draft"], "best K": [3, 1]})
    assert "differs between methods" in findings.best_k_by_hardware(differs)
    same = differs.assign(**{"best K": [3, 3]})
    assert "is 3 for every method" in findings.best_k_by_hardware(same)


def test_self_draft_at_zero_is_sound_only_if_it_accepts_and_matches():
    summ = _summary(_cell("draft-self", 0.8, acceptance=1.0)).assign(cell_id="s")
    same = pd.DataFrame({"cell_id": ["s"], "status": ["compared"], "identical_requests": [8],
                         "compared": [8]})
    assert "is sound" in findings.self_draft_at_zero(summ, same)
    assert "not sound" in findings.self_draft_at_zero(summ, same.assign(identical_requests=[4]))
    low = summ.assign(acceptance_rate=0.5)
    assert "not sound" in findings.self_draft_at_zero(low, same)


def test_memory_vs_batch_reports_the_largest_move():
    summ = _summary(_cell("ngram", 1.2, batch=1), _cell("ngram", 1.3, batch=8))
    summ["peak_memory_bytes"] = [2**30, 1.5 * 2**30]
    assert "at most 50 %" in findings.memory_vs_batch(summ)


def test_k_bounds_sentence_reads_the_recorded_outcomes():
    from specdec import claims

    checks = pd.DataFrame({
        "check_id": ["spec_k_zero", "spec_k_large"], "vllm_package": ["vllm"] * 2,
        "vllm_version": ["9.9.9"] * 2, "outcome": ["rejected", "accepted"],
        "observed": ["{}", '{"K=16": "accepted", "K=32": "accepted", "K=64": "rejected"}']})
    text = claims.k_bounds_sentence(checks)
    assert text == ("K = 0 is rejected, K = 16 and 32 are accepted, K = 64 is rejected "
                    "by vllm 9.9.9"), text
    assert claims.large_k_checked(checks) == [16, 32, 64]


@pytest.mark.parametrize("summary", [None, pd.DataFrame(columns=list(_cell("x", 1.0)))])
def test_every_sentence_has_a_plain_answer_without_rows(summary, tmp_path):
    for sentence in (findings.method_that_paid, findings.acceptance_by_workload,
                     findings.self_draft_sentence, findings.acceptance_falls_with_k,
                     findings.batch_trend, findings.sanity_bound_sentence,
                     findings.memory_vs_batch):
        assert re.search(r"\b(not|no|No)\b", sentence(summary)), sentence.__name__
    assert "not measured" in findings.self_draft_at_zero(summary, None)
    assert "no GPU campaign has measured rows" in findings.gpu_campaigns(str(tmp_path))
    assert "no rows" in findings.methods_measured(root=str(tmp_path))


def test_crossover_sentences_name_each_case():
    cross = pd.DataFrame({
        "profile": "p", "method": ["a", "b", "c", "d", "e"],
        "num_speculative_tokens": [2, 3, 4, 5, 6], "workload": "w",
        "batch_sizes": [[1, 4], [1, 4, 8], [1, 16], [1], [4]],
        "last_paying_batch": [float("nan"), 4.0, 16.0, 1.0, float("nan")],
        "crossover_batch": [1.0, 8.0, float("nan"), float("nan"), 4.0],
        "crossover_ci_below_1": [True, True, None, None, False],
        "speedups": [[0.9, 0.8], [1.2, 1.1, 0.9], [1.3, 1.1], [1.2], [0.9]],
        "recovers": False})
    a, b, c, d, e = findings.crossover_sentences(cross)
    assert a == "a (K = 2, w) on `p` does not pay even at the smallest batch, 1"
    assert b == "b (K = 3, w) on `p` pays up to batch 4 and stops paying at batch 8 (interval wholly below 1)"
    assert c == "c (K = 4, w) on `p` pays at every measured batch, up to 16"
    assert d == "d (K = 5, w) on `p` pays at batch 1, the only batch measured"
    assert e == "e (K = 6, w) on `p` does not pay at batch 4, the only batch measured"
    assert findings.crossover_sentences(cross.iloc[:0]) == []
    # a dip that recovers at a larger batch is no crossover
    dip = cross.iloc[[1]].assign(speedups=[[1.2, 0.98, 1.06]], recovers=True)
    assert findings.crossover_sentences(dip) == [
        "b (K = 3, w) on `p` ran at 1.20×, 0.98×, 1.06× at batch 1, 4, 8: it pays again after a "
        "batch where it did not, so no batch is where it stops"]


def test_best_of_family_reads_reached_cells_of_that_family_only():
    summ = _summary(_cell("ngram", 1.3, acceptance=0.62, k=4), _cell("suffix", 1.5, k=2),
                    _cell("draft-trunc-16", 0.7), _cell("draft-self", 1.9, acceptance=1.0),
                    _cell("ngram", 3.0, profile="h200-surface", alpha=1.0))  # set, not reached
    lookup = findings.best_of_family(summ, "prompt lookup")
    assert lookup.startswith("1.50× [1.45, 1.55] (suffix, K=2, mtbench, batch 1, `cpu-smollm2`")
    assert lookup.endswith("50 % acceptance)")
    assert "(draft-trunc-16, K=3" in findings.best_of_family(summ, "a draft model")
    assert "(draft-self," in findings.best_of_family(summ, findings.SELF_FAMILY)
    assert findings.best_of_family(summ, "EAGLE") == "*not measured*"
    assert findings.best_of_family(_summary(), "prompt lookup", missing="none") == "none"


def test_batch_trend_at_a_set_acceptance():
    empty = pd.DataFrame()
    assert findings.batch_trend_at_set(empty, 0.8).startswith("no configuration")
    assert findings.batch_trend_at_set(None, 0.8).startswith("no configuration")
    table = _summary(_cell("eagle3", 2.4, k=4, batch=1, profile="h200", alpha=0.8),
                     _cell("eagle3", 1.6, k=4, batch=64, profile="h200", alpha=0.8),
                     _cell("eagle3", 3.0, k=4, batch=64, profile="h200", alpha=1.0),
                     _cell("baseline", 1.0, k=0, batch=64, profile="h200"))
    said = findings.batch_trend_at_set(table, 0.8)
    assert said.startswith("with the acceptance set at α = 0.8 at every batch size, the speedup "
                           "was lower at the largest batch than at the smallest in the one "
                           "configuration")
    assert "2.40× at batch 1, 1.60× at batch 64" in said
    short = findings.batch_trend_at_set(table, 0.8, detail=False)
    assert said.startswith(short) and "batch 64" not in short
    assert findings.batch_trend_at_set(table, 1.0).startswith("no configuration")  # one batch


def test_gpu_campaigns_name_a_superseded_profile_apart_from_the_measured_ones():
    """h200-surface keeps six cells for the protocol chapter's comparison: it is named as
    superseded (with its successor), not as a campaign with measured cells, nor as prepared."""
    text = findings.gpu_campaigns()
    measured, _, superseded = text.partition("; superseded: ")
    assert "`h200-surface` (by `h200-surface-v2`)" in superseded
    assert "`h200-mechanics` (by `h200-surface-v2`)" in superseded
    assert "`h200-surface` has" not in measured and "`h200-mechanics`" not in measured
