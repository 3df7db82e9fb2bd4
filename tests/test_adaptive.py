"""The simulation of the article's adaptive K (claim C17) against fixed K."""
from __future__ import annotations

import numpy as np
import pytest

from specdec import adaptive
from specdec.adaptive import ArticlePolicy, FixedK

#: Step costs growing slowly with K (a cheap draft): 1.0 s plus 0.01 s per drafted token.
CHEAP_STEPS = {k: 1.0 + 0.01 * k for k in range(1, 9)}


def test_conditional_acceptance_from_unconditional_rates():
    q = adaptive.conditional_acceptance([0.8, 0.4, 0.1, 0.0, 0.0])
    np.testing.assert_allclose(q, [0.8, 0.5, 0.25, 0.0, 0.0])


def test_extend_conditional_repeats_the_last_measured_rate():
    np.testing.assert_allclose(adaptive.extend_conditional([0.9, 0.6], 4), [0.9, 0.6, 0.6, 0.6])
    np.testing.assert_allclose(adaptive.extend_conditional([0.9, 0.6, 0.3], 2), [0.9, 0.6])


def test_expected_tokens_per_step_by_hand():
    assert adaptive.expected_tokens_per_step([0.8, 0.5, 0.25], 3) == pytest.approx(
        1 + 0.8 + 0.4 + 0.1)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_simulated_tokens_per_step_match_the_analytic_expectation(k):
    q = [0.9, 0.8, 0.75, 0.7, 0.6, 0.6, 0.5, 0.5]
    result = adaptive.simulate(q, CHEAP_STEPS, FixedK(k), n_steps=20000, seed=1)
    expected = adaptive.expected_tokens_per_step(q, k)
    assert result.tokens_per_step == pytest.approx(expected, rel=0.02)
    assert result.tokens_per_s == pytest.approx(result.tokens_per_step / CHEAP_STEPS[k])
    assert result.mean_accepted == pytest.approx(result.tokens_per_step - 1)
    assert result.k_histogram == {k: 1.0}


def test_article_policy_climbs_to_k_max_when_everything_is_accepted():
    result = adaptive.simulate([1.0] * 8, CHEAP_STEPS, policy := ArticlePolicy(), n_steps=200)
    assert policy.k == 8
    assert result.k_histogram[8] > 0.9


def test_article_policy_falls_to_1_when_nothing_is_accepted():
    result = adaptive.simulate([0.0] * 8, CHEAP_STEPS, policy := ArticlePolicy(), n_steps=200)
    assert policy.k == 1
    assert result.k_histogram[1] > 0.9


def test_article_policy_waits_for_a_full_window():
    policy = ArticlePolicy(initial_k=3, window=10)
    for _ in range(9):
        policy.update(1.0)
    assert policy.k == 3
    policy.update(1.0)
    assert policy.k == 4
    policy.reset()
    assert policy.k == 3 and len(policy.history) == 0


def test_with_high_acceptance_and_cheap_steps_the_best_fixed_k_is_large():
    table = adaptive.compare([0.9] * 8, CHEAP_STEPS, baseline_seconds_per_token=1.0,
                             n_steps=5000)
    assert list(table["k"]) == [1, 2, 3, 4, 5, 6, 7, 8, "adaptive"]
    fixed = table[table["k"] != "adaptive"]
    assert adaptive.best(fixed)["k"] >= 6
    assert np.allclose(table["speedup"], table["tokens_per_s"] * 1.0)
    assert table.loc[table["k"] == "adaptive", "expected_tokens_per_step"].isna().all()


def test_step_seconds_are_interpolated_inside_and_extrapolated_outside():
    seconds = adaptive.interpolate_step_seconds({2: 1.2, 4: 1.4, 6: 2.0}, k_max=8)
    assert list(seconds) == list(range(1, 9))
    assert seconds[2] == pytest.approx(1.2)
    assert seconds[3] == pytest.approx(1.3)
    assert seconds[5] == pytest.approx(1.7)
    assert seconds[1] == pytest.approx(1.1)  # along the line through K=2 and K=4
    assert seconds[8] == pytest.approx(2.6)  # along the line through K=4 and K=6


def test_step_seconds_need_two_measured_k_and_a_positive_result():
    with pytest.raises(ValueError, match="measured"):
        adaptive.interpolate_step_seconds({3: 1.0})
    with pytest.raises(ValueError, match="measured"):
        adaptive.interpolate_step_seconds({1: 1.0, 2: -1.0})
    with pytest.raises(ValueError, match="measured: extrapolating"):  # a falling line
        adaptive.interpolate_step_seconds({1: 1.0, 2: 0.8}, k_max=8)


@pytest.mark.parametrize("q", [[1.2, 0.5], [-0.1], [], [np.nan]])
def test_acceptance_outside_0_1_is_refused(q):
    with pytest.raises(ValueError, match="q"):
        adaptive.simulate(q, CHEAP_STEPS, FixedK(1))
    with pytest.raises(ValueError, match="per_position_rates"):
        adaptive.conditional_acceptance(q)


def test_k_outside_its_range_is_refused():
    with pytest.raises(ValueError, match="k"):
        FixedK(0)
    with pytest.raises(ValueError, match="k:"):
        adaptive.expected_tokens_per_step([0.5, 0.5], 3)
    with pytest.raises(ValueError, match="initial_k"):
        ArticlePolicy(initial_k=9, k_max=8)
    with pytest.raises(ValueError, match="q"):  # the policy may reach K=8, q covers 4
        adaptive.simulate([0.5] * 4, CHEAP_STEPS, ArticlePolicy())
    with pytest.raises(ValueError, match="step_seconds"):
        adaptive.simulate([0.5] * 8, {1: 1.0, 2: 1.1}, ArticlePolicy())
    with pytest.raises(ValueError, match="baseline_seconds_per_token"):
        adaptive.compare([0.5] * 8, CHEAP_STEPS, baseline_seconds_per_token=0.0)


def test_the_same_seed_gives_the_same_result():
    q = [0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.4, 0.4]
    first = adaptive.simulate(q, CHEAP_STEPS, ArticlePolicy(), n_steps=3000, seed=7)
    again = adaptive.simulate(q, CHEAP_STEPS, ArticlePolicy(), n_steps=3000, seed=7)
    other = adaptive.simulate(q, CHEAP_STEPS, ArticlePolicy(), n_steps=3000, seed=8)
    assert first == again
    assert first != other


def test_policies_share_their_draws():
    """Common random numbers: at the same seed, a fixed K=1 and a fixed K=2 see the same first
    position, so K=2 never accepts less than K=1 in total."""
    q = [0.6, 0.6]
    one = adaptive.simulate(q, CHEAP_STEPS, FixedK(1), n_steps=2000, seed=3)
    two = adaptive.simulate(q, CHEAP_STEPS, FixedK(2), n_steps=2000, seed=3)
    first_accepted = np.random.default_rng(3).random((2000, 2))[:, 0] < 0.6
    assert one.mean_accepted == pytest.approx(first_accepted.mean())
    assert two.mean_accepted >= one.mean_accepted
