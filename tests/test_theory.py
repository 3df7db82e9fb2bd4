"""theory: the Leviathan et al. (2023) formulas, alpha from acceptance, optimal K, the fit."""
import numpy as np
import pandas as pd
import pytest

from specdec import theory


def test_expected_tokens_limits_and_closed_form():
    assert theory.expected_tokens_per_step(0.0, 5) == 1.0
    assert theory.expected_tokens_per_step(1.0, 5) == 6.0
    assert theory.expected_tokens_per_step(1 - 1e-9, 5) == pytest.approx(6.0, rel=1e-6)
    assert theory.expected_tokens_per_step(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert theory.expected_tokens_per_step(0.8, 0) == 1.0
    e = theory.expected_tokens_per_step(np.array([0.2, 0.6, 0.9]), 4)
    assert np.all(np.diff(e) > 0)  # increasing in alpha
    with pytest.raises(ValueError, match="alpha"):
        theory.expected_tokens_per_step(1.2, 3)
    with pytest.raises(ValueError, match="k"):
        theory.expected_tokens_per_step(0.5, -1)


def test_walltime_speedup_facts():
    # Free draft, perfect acceptance: K+1 tokens per step at the cost of one.
    assert theory.walltime_speedup(1.0, 3, 0.0) == 4.0
    # Nothing accepted: every draft step is pure cost.
    assert theory.walltime_speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)
    # Monotone: up in alpha, down in cost.
    s = theory.walltime_speedup(np.linspace(0, 1, 11), 4, 0.05)
    assert np.all(np.diff(s) > 0)
    assert theory.walltime_speedup(0.7, 4, 0.05) > theory.walltime_speedup(0.7, 4, 0.2)
    # A verification overhead v > 1 lowers the speedup by exactly that factor at c = 0.
    assert theory.walltime_speedup(0.7, 4, 0.0, verify_intercept=1.25) == pytest.approx(
        theory.walltime_speedup(0.7, 4, 0.0) / 1.25)


def test_optimal_k():
    # Brute force agrees, and the optimum grows with alpha and shrinks with cost.
    ks = np.arange(1, 17)
    s = theory.walltime_speedup(0.8, ks, 0.05)
    assert theory.optimal_k(0.8, 0.05) == ks[np.argmax(s)]
    assert theory.optimal_k(0.9, 0.05) >= theory.optimal_k(0.6, 0.05)
    assert theory.optimal_k(0.8, 0.02) >= theory.optimal_k(0.8, 0.2)
    assert theory.optimal_k(1.0, 0.0, k_max=8) == 8
    assert theory.optimal_k(0.1, 0.5) == 0  # never pays


def test_alpha_from_acceptance_inverts_expected_tokens():
    for a, k in [(0.0, 3), (0.3, 1), (0.65, 5), (0.9, 8), (1.0, 4)]:
        length = theory.expected_tokens_per_step(a, k)
        assert theory.alpha_from_acceptance(length, k) == pytest.approx(a, abs=1e-9)
    out = theory.alpha_from_acceptance(np.array([1.0, 2.0, np.nan]), np.array([3, 3, 3]))
    assert out[0] == 0.0 and 0 < out[1] < 1 and np.isnan(out[2])
    # The rate route: K=2, rate 0.375 is alpha 0.5.
    assert theory.alpha_from_rate(0.375, 2) == pytest.approx(0.5)


def synthetic_cells(c=0.08, v=1.0, noise=0.0, seed=0):
    """with_speedup-shaped rows whose speedups come from the model itself."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in (1, 2, 3, 5, 8):
        for alpha in (0.5, 0.8):
            e = theory.expected_tokens_per_step(alpha, k)
            s = e / (c * k + v) * (1 + noise * rng.standard_normal())
            rows.append(dict(profile="p", method="draft", batch_size=1, compilation="default",
                             num_speculative_tokens=k, speedup=s, speedup_status="ok",
                             mean_acceptance_length=e, acceptance_rate=(e - 1) / k,
                             speedup_ci_low=s * 0.98, speedup_ci_high=s * 1.02))
    rows.append(dict(profile="p", method="baseline", batch_size=1, compilation="default",
                     num_speculative_tokens=0, speedup=1.0, speedup_status="baseline",
                     mean_acceptance_length=np.nan, acceptance_rate=np.nan))
    return pd.DataFrame(rows)


def test_fit_recovers_known_cost_and_predicts_held_out():
    df = synthetic_cells(c=0.08)
    train = df["num_speculative_tokens"].isin([1, 3])
    res = theory.fit(df, train)
    assert res.params.loc[0, "cost_ratio"] == pytest.approx(0.08, rel=1e-6)
    assert res.params.loc[0, "n_train"] == 4
    test = res.error_of("test")
    assert test["n"] == 6 and test["max_abs_pct"] < 1e-4
    assert set(res.predictions["split"]) == {"train", "test"}
    assert "baseline" not in set(res.predictions["method"])


def test_fit_overhead_model_recovers_both_terms_and_leviathan_does_not():
    df = synthetic_cells(c=0.05, v=1.3)
    train = df["num_speculative_tokens"].isin([1, 2, 8])
    res = theory.fit(df, train, model="overhead")
    assert res.params.loc[0, "cost_ratio"] == pytest.approx(0.05, rel=1e-5)
    assert res.params.loc[0, "verify_intercept"] == pytest.approx(1.3, rel=1e-5)
    assert res.error_of("test")["max_abs_pct"] < 1e-3
    lev = theory.fit(df, train, model="leviathan")
    assert lev.error_of("test")["max_abs_pct"] > 1.0  # v fixed at 1 cannot fit v = 1.3


def test_fit_reports_error_under_noise_and_groups_without_training():
    df = synthetic_cells(c=0.1, noise=0.05, seed=3)
    other = synthetic_cells(c=0.3).assign(method="other")
    both = pd.concat([df, other], ignore_index=True)
    train = (both["method"] == "draft") & both["num_speculative_tokens"].isin([1, 2, 3])
    res = theory.fit(both, train)
    p = res.params.set_index("method")
    assert p.loc["draft", "cost_ratio"] == pytest.approx(0.1, abs=0.03)
    assert np.isnan(p.loc["other", "cost_ratio"]) and p.loc["other", "n_train"] == 0
    err = res.error_of("test")
    assert err["n_unpredicted"] == len(other) - 1 and err["median_abs_pct"] > 0
    with pytest.raises(ValueError, match="model"):
        theory.fit(df, train.iloc[: len(df)], model="nope")


def test_what_if_grid():
    w = theory.what_if(0.1, ks=(1, 4), alphas=[0.0, 0.5, 1.0])
    assert len(w) == 6 and (w["kind"] == "prediction").all()
    k4 = w[w["num_speculative_tokens"] == 4].set_index("alpha")
    assert k4.loc[1.0, "predicted_speedup"] == pytest.approx(5 / 1.4)
    assert k4.loc[0.0, "predicted_speedup"] == pytest.approx(1 / 1.4)
    assert k4.loc[1.0, "acceptance_rate"] == pytest.approx(1.0)


def test_fit_on_no_cells_reports_nothing_without_crashing():
    df = synthetic_cells().iloc[:0]
    res = theory.fit(df, [])
    assert res.params.empty and res.predictions.empty
    assert res.error_of("test")["n"] == 0


def test_break_even_alpha():
    # Free draft (c=0) with cheap verification pays at any acceptance.
    assert theory.break_even_alpha(0.0) < 1e-5
    # c=0.1, K=1: (1+a)/(1.1) > 1  <=>  a > 0.1; larger K cannot do better at that alpha.
    assert abs(theory.break_even_alpha(0.1) - 0.1) < 1e-4
    # c=0.5: K=1 pays once (1+a)/1.5 > 1, i.e. a > 0.5 (K=2 needs a > 0.618).
    assert abs(theory.break_even_alpha(0.5) - 0.5) < 1e-4
    # A draft as costly as the target never pays: E(a, K) < K + 1 = c*K + 1 for every a < 1.
    assert theory.break_even_alpha(1.0) == 1.0


def test_article_implied_costs_reproduce_the_stated_speedups():
    """The implied alpha and draft cost put back into the model give the table's speedup."""
    k, rate, speedup = [3, 5], [0.6, 0.5], [1.8, 1.6]
    imp = theory.article_implied(k, rate, speedup)
    assert list(imp["k_times_acceptance"]) == pytest.approx([1.8, 2.5])
    assert list(imp["implied_tokens_per_step"]) == pytest.approx([2.8, 3.5])
    for i in range(2):
        back = theory.walltime_speedup(imp["implied_alpha"][i], k[i], imp["implied_cost_ratio"][i])
        assert back == pytest.approx(speedup[i], rel=1e-9)


def test_optimal_k_table_uses_the_median_alpha_and_the_fitted_costs():
    df = synthetic_cells(c=0.08)
    res = theory.fit(df, df["num_speculative_tokens"] > 0, model="overhead")
    table = theory.optimal_k_table(df, res.params, k_max=16)
    assert len(table) == 1
    row = table.iloc[0]
    alpha = theory.add_alpha(df).query("method != 'baseline'")["alpha_per_token"].median()
    assert row["median_alpha"] == pytest.approx(alpha)
    assert row["optimal_k"] == theory.optimal_k(alpha, row["cost_ratio"], 16, row["verify_intercept"])
    assert 0 < row["optimal_k"] <= 16
    unfitted = res.params.assign(cost_ratio=np.nan)
    assert theory.optimal_k_table(df, unfitted)["optimal_k"].iloc[0] is None


def test_prediction_grid_free_and_costly_drafts():
    grid = theory.prediction_grid([0.0, 0.1, 1.0], alpha=0.7, k_max=8).set_index("cost_ratio")
    assert grid.loc[0.0, "break_even_alpha"] < 1e-5 and grid.loc[0.0, "best_k"] == 8
    assert grid.loc[0.1, "break_even_alpha"] == pytest.approx(0.1, abs=1e-4)
    assert grid.loc[0.1, "predicted_speedup"] == pytest.approx(
        theory.walltime_speedup(0.7, grid.loc[0.1, "best_k"], 0.1))
    # A draft as costly as the target never pays: plain decoding, speedup 1.
    assert grid.loc[1.0, "break_even_alpha"] == 1.0 and grid.loc[1.0, "best_k"] == 0
    assert grid.loc[1.0, "predicted_speedup"] == 1.0


def test_decode_bound_is_bandwidth_over_bytes():
    assert theory.decode_bound_steps_per_s(4800, 16e9) == pytest.approx(300.0)
    with pytest.raises(ValueError, match="positive"):
        theory.decode_bound_steps_per_s(0, 16e9)
