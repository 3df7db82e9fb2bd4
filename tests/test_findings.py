"""The sentences the conclusions state are generated from rows, and turn when the rows do."""
from __future__ import annotations

import pandas as pd
import pytest

from specdec import findings


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
    ok = pd.DataFrame({"status": ["compared"] * 2, "identical_to_baseline": [True, True]})
    assert findings.lossless_headline(ok) == "**Greedy speculation was lossless where it was checked**"
    bad = ok.assign(identical_to_baseline=[True, False])
    assert "not lossless" in findings.lossless_headline(bad, bold=False)


def test_acceptance_with_k_and_speedup_with_batch_are_read_off_the_rows():
    falling = _summary(_cell("ngram", 1.3, acceptance=0.6, k=1), _cell("ngram", 1.2, acceptance=0.4, k=5))
    assert findings.acceptance_falls_with_k(falling).startswith("acceptance falls with K")
    rising = _summary(_cell("ngram", 1.3, acceptance=0.4, k=1), _cell("ngram", 1.2, acceptance=0.6, k=5))
    assert "in 0 of 1" in findings.acceptance_falls_with_k(rising)
    grows = _summary(_cell("ngram", 1.4, batch=1), _cell("ngram", 1.5, batch=8))
    assert "not lower at the largest batch" in findings.batch_trend(grows)
    shrinks = _summary(_cell("ngram", 1.4, batch=1), _cell("ngram", 1.1, batch=8))
    assert "lower at the largest batch than at the smallest in every" in findings.batch_trend(shrinks)


def test_lookup_acceptance_by_workload_names_the_extremes():
    summ = _summary(_cell("ngram", 1.3, acceptance=0.7, workload="humaneval"),
                    _cell("suffix", 1.1, acceptance=0.3, workload="mtbench"))
    text = findings.acceptance_by_workload(summ)
    assert "highest on humaneval and lowest on mtbench" in text
