"""Protocol 2's analysis (issue 19): last attempts, step-cost speedups, panel drift."""
import numpy as np
import pandas as pd
import pytest

from specdec import protocol, theory

V1 = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
V2 = "vllm.v1.worker.gpu.model_runner.GPUModelRunner"


def _rows(method, k, alpha, step_ms, tps, runner=V2, core="default", batch=1, attempt=0,
          lease=None, phase=None, reps=5, jitter=0.0):
    out = []
    for r in range(reps):
        s = step_ms * (1 + jitter * (r - reps // 2))
        steps = 512 / tps
        out.append({
            "profile": "p", "cell_id": f"{method}-k{k}-b{batch}-a{alpha}", "method": method,
            "num_speculative_tokens": k, "batch_size": batch, "workload": "w", "temperature": 0.0,
            "acceptance_alpha": alpha, "status": "ok", "attempt": attempt, "repeat": r,
            "output_tokens_per_s": batch * tps / (s / 1000), "step_ms": s,
            "tokens_per_step": tps, "engine_steps": steps, "num_output_tokens": 512 * batch,
            "num_requests": batch, "wall_s": steps * s / 1000, "passes": 1,
            "model_runner": runner, "engine_core": core, "cudagraph_mode": "FULL",
            "gpu_sm_clock_mhz": 1980.0, "gpu_sm_clock_min_mhz": 1970.0, "gpu_power_w": 400.0,
            "gpu_temp_c": 50.0, "hostname": "h", "cpu_model": "c", "git_commit": "abc",
            "timestamp_utc": "2026-12-02T10:00:00Z", "lease_id": lease, "panel_phase": phase})
    return out


def test_expected_tokens_per_step():
    assert theory.expected_tokens_per_step(0.0, 4) == 1.0
    assert theory.expected_tokens_per_step(1.0, 4) == 5.0
    assert theory.expected_tokens_per_step(0.8, 4) == pytest.approx(1 + .8 + .64 + .512 + .4096)


def test_speedup_from_cost_pairs_the_baseline_of_the_same_runner():
    rows = (_rows("baseline", 0, None, 6.0, 1.0) + _rows("baseline-v1", 0, None, 8.0, 1.0, runner=V1)
            + _rows("eagle3", 4, 0.8, 7.0, 3.2) + _rows("draft-1b", 4, 0.8, 12.0, 3.5, runner=V1))
    cells = protocol.cells(pd.DataFrame(rows))
    sp = protocol.speedups(cells).set_index("method")
    e = theory.expected_tokens_per_step(0.8, 4)
    assert sp.loc["eagle3", "baseline_method"] == "baseline"
    assert sp.loc["draft-1b", "baseline_method"] == "baseline-v1"  # V1 with V1
    assert sp.loc["eagle3", "speedup_cost"] == pytest.approx(e * 6.0 / 7.0)
    assert sp.loc["draft-1b", "speedup_cost"] == pytest.approx(e * 8.0 / 12.0)
    # realised: tokens per step 3.2 drawn, not the expected 3.36
    assert sp.loc["eagle3", "speedup"] == pytest.approx(3.2 * 6.0 / 7.0)
    assert sp.loc["eagle3", "runner"] == "V2" and sp.loc["draft-1b", "runner"] == "V1"
    d = protocol.cost_vs_realised(sp.reset_index()).set_index("method")
    assert d.loc["eagle3", "realised_over_cost"] == pytest.approx(3.2 / e - 1)


def test_last_attempt_replaces_an_unstable_first_measurement():
    rows = _rows("baseline", 0, None, 6.0, 1.0, jitter=0.1) + _rows("baseline", 0, None, 6.6, 1.0, attempt=1)
    cells = protocol.cells(pd.DataFrame(rows))
    assert len(cells) == 1 and cells.iloc[0]["step_ms"] == pytest.approx(6.6)
    assert cells.iloc[0]["attempts"] == 2 and cells.iloc[0]["tok_s_cv"] == pytest.approx(0.0)
    unstable = protocol.cells(pd.DataFrame(_rows("baseline", 0, None, 6.0, 1.0, jitter=0.1)))
    assert len(protocol.flagged(unstable)) == 1



def test_remeasures_count_the_second_attempts_that_came_under_the_limit():
    rows = (_rows("baseline", 0, None, 6.0, 1.0, jitter=0.1, lease="L")
            + _rows("baseline", 0, None, 6.0, 1.0, attempt=1, lease="L")
            + _rows("draft-1b", 4, 0.8, 9.0, 3.0, jitter=0.1, lease="L")
            + _rows("draft-1b", 4, 0.8, 9.0, 3.0, jitter=0.08, attempt=1, lease="L")
            + _rows("eagle3", 4, 0.8, 7.0, 3.0, jitter=0.1, lease="L"))
    # the same measurement stored twice (a panel copy) counts once
    rows += [dict(r, panel_phase="start") for r in rows if r["method"] == "draft-1b"]
    again = protocol.remeasures(pd.DataFrame(rows)).set_index("method")
    assert list(again.index) == ["baseline", "draft-1b"]  # eagle3 was measured once
    assert (again.loc["baseline", "remeasured"], again.loc["baseline", "came_under"]) == (1, 1)
    assert (again.loc["draft-1b", "remeasured"], again.loc["draft-1b", "came_under"]) == (1, 0)
    assert again.loc["draft-1b", "cv_second"] < again.loc["draft-1b", "cv_first"]
    assert protocol.remeasures(pd.DataFrame(rows[:5])).empty

def test_prediction_between_measured_alphas():
    rows = _rows("baseline", 0, None, 6.0, 1.0)
    for a, step in [(0.5, 7.0), (0.8, 7.3), (1.0, 7.5), (0.9, 7.4 * 1.05)]:
        rows += _rows("eagle3", 4, a, step, theory.expected_tokens_per_step(a, 4))
    sp = protocol.speedups(protocol.cells(pd.DataFrame(rows)))
    check = protocol.predicted_between(sp, [0.5, 0.8, 1.0], [0.9])
    assert len(check) == 1
    row = check.iloc[0]
    assert row["predicted"] == pytest.approx(theory.expected_tokens_per_step(0.9, 4) * 6.0 / 7.4)
    assert row["error"] == pytest.approx(1.05 - 1, rel=1e-6) and not row["within"]
    by = protocol.between_by_method(check, pd.Series({"eagle3": 0.08})).iloc[0]
    assert (by["checks"], by["within_tolerance"], by["within_spread"]) == (1, 0, 1)
    by = protocol.between_by_method(check, pd.Series({"eagle3": 0.02})).iloc[0]
    assert by["within_spread"] == 0 and by["largest_error"] == pytest.approx(0.05, rel=1e-6)



def test_break_even_reads_the_cost_where_the_speedup_reaches_one():
    """Step 6 ms plain, 9 ms speculative at every alpha: the speedup from cost is E(a, 4)
    * 6 / 9, which reaches 1 where E = 1.5, a little above alpha 1/3; the figure's rows carry
    that speedup and flag the unstable cell."""
    rows = _rows("baseline", 0, None, 6.0, 1.0)
    for a in (0.0, 0.5, 1.0):
        rows += _rows("eagle3", 4, a, 9.0, theory.expected_tokens_per_step(a, 4),
                      jitter=0.05 if a == 0.5 else 0.0)
    sp = protocol.speedups(protocol.cells(pd.DataFrame(rows)))
    be = protocol.break_even(sp, 4).iloc[0]
    grid = [a / 100 for a in range(101)]
    expect = next(a for a in grid if theory.expected_tokens_per_step(a, 4) * 6 / 9 >= 1)
    assert be["break_even_alpha"] == pytest.approx(expect) and not be["pays_from_lowest"]
    assert be["alpha_low"] <= be["break_even_alpha"] <= be["alpha_high"]
    surf = protocol.as_surface(sp).set_index("acceptance_alpha")
    assert surf.loc[1.0, "speedup"] == pytest.approx(5 * 6 / 9)
    assert list(surf["unstable"]) == [False, True, False]
    never = protocol.speedups(protocol.cells(pd.DataFrame(
        _rows("baseline", 0, None, 6.0, 1.0) + [r for a in (0.0, 1.0) for r in _rows(
            "eagle3", 4, a, 60.0, theory.expected_tokens_per_step(a, 4))])))
    assert pd.isna(protocol.break_even(never, 4).iloc[0]["break_even_alpha"])


def test_answer_table_reads_cost_at_the_set_alpha_with_each_methods_spread():
    rows = _rows("baseline", 0, None, 6.0, 1.0) + _rows("baseline-v1", 0, None, 8.0, 1.0, runner=V1)
    for a in (0.5, 1.0):
        e = theory.expected_tokens_per_step(a, 4)
        rows += _rows("eagle3", 4, a, 7.0, e) + _rows("medusa", 4, a, 10.0, e, runner=V1)
    sp = protocol.speedups(protocol.cells(pd.DataFrame(rows)))
    published = pd.DataFrame({"method": ["eagle3"], "dataset": ["MT-bench"], "implied_alpha": [0.65]})
    t = protocol.answer_table(sp, pd.Series({"eagle3": 0.1}), published, k=4, alpha=0.8,
                              batches=(1, 16)).set_index(["method", "acceptance"])
    e = theory.expected_tokens_per_step(0.8, 4)
    assert t.loc[("eagle3", "set α = 0.8"), "batch 1"].startswith(f"{e * 6 / 7:.2f}×")
    assert t.loc[("medusa", "set α = 0.8"), "batch 1"].startswith(f"{e * 8 / 10:.2f}×")
    assert t.loc[("eagle3", "published (MT-bench): α ≈ 0.65"), "batch 1"].startswith(
        f"{theory.expected_tokens_per_step(0.65, 4) * 6 / 7:.2f}×")
    assert t.loc[("eagle3", "set α = 0.8"), "batch 16"] == "not measured yet"
    assert t.loc[("eagle3", "set α = 0.8"), "panel spread"] == "±5.0%"
    assert t.loc[("medusa", "set α = 0.8"), "panel spread"] == "not in the panel (V1: moves with the host)"


STEPS = ((1, 6.2), (2, 6.5), (4, 7.0), (6, 8.0), (8, 11.0))  # ms per step at each K


def _swept(steps=STEPS, lease_of=lambda kk: None):
    rows = _rows("baseline", 0, None, 6.0, 1.0)
    for kk, step in steps:
        for a in (0.5, 1.0):
            rows += _rows("eagle3", kk, a, step, theory.expected_tokens_per_step(a, kk),
                          lease=lease_of(kk))
    return rows


def test_answer_table_takes_the_best_measured_k_where_k_was_swept():
    rows = _swept()
    rows += [{**r, "batch_size": 16} for r in _rows("baseline", 0, None, 6.0, 1.0)]
    for a in (0.5, 1.0):  # batch 16: K = 4 only
        rows += [{**r, "batch_size": 16, "cell_id": r["cell_id"] + "-16"}
                 for r in _rows("eagle3", 4, a, 7.0, theory.expected_tokens_per_step(a, 4))]
    sp = protocol.speedups(protocol.cells(pd.DataFrame(rows)))
    t = protocol.answer_table(sp, pd.Series(dtype=float), pd.DataFrame(columns=["method"]), k=4,
                              alpha=0.8, batches=(1, 16)).set_index("method")
    best = max(((kk, theory.expected_tokens_per_step(0.8, kk) * 6.0 / step) for kk, step in STEPS),
               key=lambda x: x[1])
    assert t.loc["eagle3", "batch 1"].startswith(f"{best[1]:.2f}×")
    assert best[0] == 6 and t.loc["eagle3", "batch 1"].endswith("at K = 6")
    # a K whose interval reaches into the best one's is named beside it: a tie, not a loser
    # K = 6's step may be as long as 9 ms: K = 4's reading (2.88x) then lies in its interval, K = 8's not
    wide = sp.assign(step_ms_ci_high=sp["step_ms_ci_high"].where(
        sp["num_speculative_tokens"] != 6, 9.0))
    r = protocol.best_read(wide, "eagle3", 0.8, 1)
    assert r["num_speculative_tokens"] == 6 and r["overlaps"] == [4]
    t2 = protocol.answer_table(wide, pd.Series(dtype=float), pd.DataFrame(columns=["method"]), k=4,
                               alpha=0.8, batches=(1,)).set_index("method")
    assert t2.loc["eagle3", "batch 1"].endswith("at K = 6 (K = 4 within the interval)")
    assert t.loc["eagle3", "batch 16"].startswith(
        f"{theory.expected_tokens_per_step(0.8, 4) * 6 / 7:.2f}×") and "K =" not in t.loc["eagle3", "batch 16"]


def test_best_read_needs_a_sweep_of_five_k_as_best_k_does():
    """Three K measured are not a sweep (surface.best_k's rule): the reading stays at K = 4,
    although K = 6 reads higher."""
    sp = protocol.speedups(protocol.cells(pd.DataFrame(_swept(STEPS[1:4]))))
    r = protocol.best_read(sp, "eagle3", 0.8, 1)
    assert r["num_speculative_tokens"] == 4 and not r["swept"]
    assert protocol.best_read(sp, "eagle3", 0.8, 1, min_ks=3)["num_speculative_tokens"] == 6


def test_answer_table_names_the_k_of_another_lease_within_the_spread():
    """K = 4 read in another lease than the best K = 6, 2.8 % below it: inside a 5 % panel
    spread (two hosts may differ by that much) it is named as not beaten; inside a 1 % spread
    it is beaten. Both readings' own intervals are narrow (no tie by the interval)."""
    sp = protocol.speedups(protocol.cells(pd.DataFrame(_swept(lease_of=lambda kk: "L2" if kk == 4 else "L1"))))
    r = protocol.best_read(sp, "eagle3", 0.8, 1, spread=0.05)
    assert r["num_speculative_tokens"] == 6 and r["overlaps"] == [] and r["within_spread"] == [4]
    assert r["leases"] == ["L1", "L2"]
    assert protocol.best_read(sp, "eagle3", 0.8, 1, spread=0.01)["within_spread"] == []
    t = protocol.answer_table(sp, pd.Series({"eagle3": 0.05}), pd.DataFrame(columns=["method"]),
                              k=4, alpha=0.8, batches=(1,)).set_index("method")
    assert t.loc["eagle3", "batch 1"].endswith("at K = 6 (K = 4 within the spread, in another lease)")
    # the same K in the best one's own lease is judged by its interval alone
    same = protocol.speedups(protocol.cells(pd.DataFrame(_swept(lease_of=lambda kk: "L1"))))
    assert protocol.best_read(same, "eagle3", 0.8, 1, spread=0.05)["within_spread"] == []


def test_panel_drift_between_leases():
    rows = []
    for lease, phase, scale in [("L1", "start", 1.0), ("L1", "end", 1.01), ("L2", "start", 1.2)]:
        rows += _rows("baseline", 0, None, 6.0 * scale, 1.0, lease=lease, phase=phase)
        rows += _rows("eagle3", 4, 0.8, 7.0 * scale, 3.36, lease=lease, phase=phase)
    table = protocol.panel_table(protocol.cells(pd.DataFrame(rows)))
    assert list(table["lease_id"]) == ["L1", "L1", "L1", "L1", "L2", "L2"]
    drift = protocol.panel_drift(table).set_index(["lease_id", "panel_phase"])
    assert drift.loc[("L1", "end"), "median_diff"] == pytest.approx(0.01)
    assert bool(drift.loc[("L1", "end"), "agrees"]) and not bool(drift.loc[("L2", "start"), "agrees"])
    assert protocol.runner_label(V1) == "V1" and protocol.runner_label(None) is None
    assert protocol.panel_drift(table.iloc[:0]).empty
    # within a lease: L1 only (L2 has its start panel alone)
    inside = protocol.within_lease(table)
    assert set(inside["lease_id"]) == {"L1"} and len(inside) == 2
    assert inside["move"].to_numpy() == pytest.approx([0.01, 0.01])
    assert protocol.within_lease(table[table["panel_phase"] == "start"]).empty
    # in time order, not as text: lease 10 after lease 9 (the first panel is the earliest)
    rows = []
    for lease, scale in [("2026-12-03-h200-10", 1.0), ("2026-12-03-h200-9", 1.1)]:
        rows += _rows("baseline", 0, None, 6.0 * scale, 1.0, lease=lease, phase="start")
    table = protocol.panel_table(protocol.cells(pd.DataFrame(rows)))
    assert list(table["lease_id"]) == ["2026-12-03-h200-9", "2026-12-03-h200-10"]
    drift = protocol.panel_drift(table).set_index("lease_id")
    assert drift.loc["2026-12-03-h200-10", "median_diff"] == pytest.approx(1 / 1.1 - 1)


def test_summarize_counts_a_cell_by_its_last_attempt():
    """The last-attempt rule sits in metrics.summarize, which every chapter and the
    regeneration read: a cell measured again is not averaged with its unstable first try."""
    from specdec import metrics

    rows = _rows("baseline", 0, None, 6.0, 1.0, jitter=0.1) + _rows("baseline", 0, None, 6.6, 1.0, attempt=1)
    extra = {"config_hash": "h", "draft": None, "max_tokens": 512, "compilation": "default",
             "tpot_ms": 5.0, "spec_num_drafts": None, "spec_num_draft_tokens": None,
             "spec_num_accepted_tokens": None, "spec_accepted_per_pos": None}
    summary = metrics.summarize(pd.DataFrame([{**r, **extra} for r in rows]))
    assert len(summary) == 1 and summary.iloc[0]["n_repeats"] == 5
    assert summary.iloc[0]["tok_s_median"] == pytest.approx(1.0 / 0.0066)


def test_host_bound_reads_a_step_that_waits_on_the_host():
    """A V1 step that slows as the GPU idles is flagged by the correlation with the GPU's
    busy share; a V2 step at full utilisation carries none, and the probe is uncorrelated."""
    rows = []
    for r, (step, util, probe) in enumerate([(12, 90, 1.0), (16, 70, 1.5), (20, 55, 1.0),
                                             (14, 80, 1.5), (18, 60, 1.2)]):
        rows += [{**_rows("draft-1b", 4, 0.8, step, 3.3, runner=V1, reps=1)[0], "repeat": r,
                  "gpu_util_pct": util, "host_probe_us": 1000 * probe, "host_steal_pct": 0.0,
                  "host_busy_pct": 6.5, "timestamp_utc": f"t{r}"}]
        rows += [{**_rows("eagle3", 4, 0.8, 7.0 + 0.01 * r, 3.3, reps=1)[0], "repeat": r,
                  "gpu_util_pct": 100.0, "host_probe_us": 1000 * probe, "host_steal_pct": 0.0,
                  "host_busy_pct": 5.0, "timestamp_utc": f"t{r}"}]
    reps = protocol.repeats(pd.DataFrame(rows))
    hb = protocol.host_bound(reps).set_index("method")
    assert hb.loc["draft-1b", "r_gpu_util"] < -0.95
    assert abs(hb.loc["draft-1b", "r_probe"]) < 0.5
    assert pd.isna(hb.loc["eagle3", "r_gpu_util"]) and hb.loc["eagle3", "gpu_util_pct"] == 100.0
    assert hb.loc["draft-1b", "step_range"] == pytest.approx((20 - 12) / 16)


def test_vcpu_speed_fit_reads_how_much_slower_a_step_is_on_a_slow_vcpu():
    """Repeats whose engine vCPU probe lies between their lease's two surveyed speeds: a step
    that is 30 % longer on an all-slow vCPU than on an all-fast one gives slow_over_fast 1.3
    and r near 1; a step that ignores its vCPU gives about 1.0; a lease without a survey,
    nothing."""
    survey = pd.DataFrame({"lease_id": "L", "panel_phase": "start", "vcpu": [0, 1, 2, 3],
                           "pass": 0, "probe_us": [1000.0, 1000.0, 1600.0, 1600.0],
                           "cpu_model": None})
    rows = []
    for r, share in enumerate([0.0, 0.2, 0.5, 0.7, 1.0, 0.4, 1.3]):
        probe = 1000.0 + 600.0 * share
        rows += [{**_rows("draft-1b", 4, 0.8, 10.0 * (1 + 0.3 * min(share, 1.0)), 3.3, runner=V1,
                          reps=1, lease="L")[0],
                  "repeat": r, "engine_vcpu_probe_us": probe, "timestamp_utc": f"t{r}"}]
        rows += [{**_rows("eagle3", 4, 0.8, 7.0 + 0.001 * (r % 2), 3.3, reps=1, lease="L")[0],
                  "repeat": r, "engine_vcpu_probe_us": probe, "timestamp_utc": f"t{r}"}]
    reps = protocol.repeats(pd.DataFrame(rows))
    shared = protocol.slow_share(reps, survey)
    assert shared["slow_share"].max() == 1.0  # a probe beyond the slow level is clipped
    fit = protocol.vcpu_speed_fit(shared).set_index("method")
    assert fit.loc["draft-1b", "slow_over_fast"] == pytest.approx(1.3, rel=1e-6)
    assert fit.loc["draft-1b", "r"] > 0.99 and fit.loc["draft-1b", "repeats"] == 7
    assert fit.loc["eagle3", "slow_over_fast"] == pytest.approx(1.0, abs=0.001)
    assert protocol.slow_share(reps, survey.assign(lease_id="other")).empty


def test_controls_pair_each_pin_with_its_own_baseline():
    rows = (_rows("baseline", 0, None, 6.0, 1.0) + _rows("baseline-v1", 0, None, 6.0, 1.0, runner=V1)
            + _rows("baseline-v1-inproc", 0, None, 6.1, 1.0, runner=V1, core="inproc")
            + _rows("eagle3", 4, 0.8, 7.0, 3.36) + _rows("eagle3-v1", 4, 0.8, 7.3, 3.36, runner=V1)
            + _rows("eagle3-v1-inproc", 4, 0.8, 8.2, 3.36, runner=V1, core="inproc")
            + _rows("eagle3", 4, 0.5, 7.0, 1.9))
    ctrl = protocol.controls(protocol.speedups(protocol.cells(pd.DataFrame(rows))))
    assert list(ctrl["method"]) == ["eagle3", "eagle3-v1", "eagle3-v1-inproc"]  # not alpha 0.5
    assert list(ctrl["baseline_method"]) == ["baseline", "baseline-v1", "baseline-v1-inproc"]
    e = theory.expected_tokens_per_step(0.8, 4)
    assert ctrl["speedup_cost"].tolist() == pytest.approx([e * 6 / 7.0, e * 6 / 7.3, e * 6.1 / 8.2])


def test_speedup_pairs_the_baseline_of_the_same_lease_first():
    """Two H200s give the plain target steps a few percent apart (lease 9): a method measured
    in a later lease is paired with that lease's own baseline, from its panel if the campaign
    did not measure it there; without one, with the campaign's baseline of any lease."""
    rows = (_rows("baseline", 0, None, 5.0, 1.0, lease="L7") + _rows("eagle", 4, 0.8, 7.0, 3.3, lease="L9")
            + _rows("eagle", 4, 0.5, 7.0, 1.9, lease="L10"))
    panel = (_rows("baseline", 0, None, 4.8, 1.0, lease="L9", phase="end")
             + _rows("baseline", 0, None, 4.9, 1.0, lease="L9", phase="start"))
    sp = protocol.speedups(protocol.cells(pd.DataFrame(rows)), protocol.cells(pd.DataFrame(panel)))
    sp = sp.set_index("acceptance_alpha")
    e = theory.expected_tokens_per_step(0.8, 4)
    assert sp.loc[0.8, "baseline_lease"] == "L9"  # the start panel's
    assert sp.loc[0.8, "speedup_cost"] == pytest.approx(e * 4.9 / 7.0)
    assert sp.loc[0.5, "baseline_lease"] == "L7"


def test_controls_take_the_default_from_the_panel_of_the_same_lease():
    rows = (_rows("baseline-v1", 0, None, 5.0, 1.0, runner=V1, lease="L7")
            + _rows("draft-1b", 4, 0.8, 12.0, 3.3, runner=V1, lease="L7")
            + _rows("draft-1b-async", 4, 0.8, 11.0, 3.3, runner=V1, lease="L9"))
    panel = (_rows("baseline", 0, None, 4.9, 1.0, lease="L9", phase="start")
             + _rows("draft-1b", 4, 0.8, 14.0, 3.3, runner=V1, lease="L9", phase="start")
             + _rows("draft-1b", 4, 0.8, 13.0, 3.3, runner=V1, lease="L8", phase="start"))
    sp = protocol.speedups(protocol.cells(pd.DataFrame(rows)))
    ps = protocol.panel_speedups(protocol.cells(pd.DataFrame(panel)))
    ctrl = protocol.controls(sp, panel=ps)
    assert list(zip(ctrl["method"], ctrl["lease_id"], ctrl["panel_phase"].fillna("-"))) == [
        ("draft-1b", "L7", "-"), ("draft-1b", "L9", "start"), ("draft-1b-async", "L9", "-")]
    assert ctrl["step_ms"].tolist() == pytest.approx([12.0, 14.0, 11.0])
    # the panel measures no V1 baseline: without the campaign's, its V1 cells have no speedup;
    # with it, they are read against the baseline the campaign's own V1 cells are read against
    assert ps["speedup_cost"].isna().all()
    ps2 = protocol.panel_speedups(protocol.cells(pd.DataFrame(panel)), protocol.cells(pd.DataFrame(rows)))
    one = ps2[(ps2["lease_id"] == "L9")].iloc[0]
    assert one["baseline_method"] == "baseline-v1" and one["baseline_lease"] == "L7"
    assert one["speedup_cost"] == pytest.approx(theory.expected_tokens_per_step(0.8, 4) * 5.0 / 14.0)
    assert len(ps2) == len(ps)  # the campaign's cells add no panel rows


def test_surface_table_gives_the_surface_readers_cost_on_each_runner(monkeypatch):
    """protocol.surface_table: the protocol-1 readers (speedup_from_cost, the dynamic-K and
    K-sweep tables) get the speedup read from cost, each method against its own runner's
    baseline; a dynamic-K cell is read at the K its schedule chose, else left realised."""
    from specdec import surface

    def dyn(alpha, drafts, tokens, batch):
        rows = _rows("eagle3-dynk", 5, alpha, 7.5, 3.0, batch=batch)
        return [{**r, "spec_num_drafts": drafts, "spec_num_draft_tokens": tokens} for r in rows]

    rows = (_rows("baseline", 0, None, 6.0, 1.0) + _rows("baseline-v1", 0, None, 8.0, 1.0, runner=V1)
            + _rows("eagle3", 4, 0.8, 7.0, 3.2) + _rows("draft-1b", 4, 0.8, 12.0, 3.5, runner=V1)
            + _rows("eagle3-v1", 4, 0.8, 9.0, 3.2, runner=V1)  # a pinned control: not users'
            + dyn(0.8, 100, 500, 1)                             # the schedule chose K = 5
            + _rows("baseline", 0, None, 6.2, 1.0, batch=4) + dyn(0.8, 100, 450, 4))  # no whole K
    df = pd.DataFrame(rows).assign(profile="h200-surface-v2", workload="repeat",
                                   compilation="default")
    monkeypatch.setattr(protocol.store, "load_runs", lambda *a, **k: df)
    monkeypatch.setattr(protocol, "load_panels", lambda *a, **k: pd.DataFrame())
    t = protocol.surface_table("h200-surface-v2")
    by = t.set_index(["method", "batch_size"])
    e4, e5 = theory.expected_tokens_per_step(0.8, 4), theory.expected_tokens_per_step(0.8, 5)
    assert "eagle3-v1" not in set(t["method"])
    assert by.loc[("baseline", 1), "speedup"] == 1.0 and by.loc[("baseline-v1", 1), "speedup"] == 1.0
    assert by.loc[("eagle3", 1), "speedup"] == pytest.approx(e4 * 6.0 / 7.0)
    assert by.loc[("draft-1b", 1), "speedup"] == pytest.approx(e4 * 8.0 / 12.0)
    assert by.loc[("draft-1b", 1), "speedup_from"] == "cost"
    assert by.loc[("eagle3-dynk", 1), "speedup"] == pytest.approx(e5 * 6.0 / 7.5)
    assert by.loc[("eagle3-dynk", 1), "mean_acceptance_length"] == pytest.approx(e5)
    assert by.loc[("eagle3-dynk", 4), "speedup_from"] == "realised"
    assert by.loc[("eagle3-dynk", 4), "speedup"] == pytest.approx(by.loc[("eagle3-dynk", 4), "speedup_realised"])
    # the protocol-1 reader takes each cell's own runner's baseline: 8 ms for the V1 draft
    at = surface.speedup_from_cost(t, "draft-1b", 0.8, 4, 1, e4)
    assert at["speedup"] == pytest.approx(e4 * 8.0 / 12.0) and at["baseline_step_ms"] == 8.0
    # theory.fit recovers the set alpha from the tokens per step the speedup assumes
    fit = theory.fit(t, t["method"] != "none", alpha_source="per_token")
    got = fit.predictions.set_index(["method", "batch_size"])
    assert got.loc[("eagle3", 1), "alpha"] == pytest.approx(0.8, abs=1e-6)


def test_panel_range_spans_the_panels_of_every_lease_and_gpu():
    rows = []
    for lease, gpu, step in (("L1", "G1", 12.0), ("L2", "G2", 24.0), ("L3", None, 16.0)):
        for phase in ("start", "end"):
            rows += [{**r, "gpu_uuid": gpu} for r in
                     _rows("baseline", 0, None, 5.0, 1.0, lease=lease, phase=phase)
                     + _rows("draft-1b", 4, 0.8, step, 3.3, lease=lease, phase=phase)]
    ps = protocol.panel_speedups(protocol.cells(pd.DataFrame(rows)))
    r = protocol.panel_range(ps, "draft-1b").iloc[0]
    e = theory.expected_tokens_per_step(0.8, 4)
    assert r["low"] == pytest.approx(e * 5 / 24) and r["high"] == pytest.approx(e * 5 / 12)
    assert (r["panels"], r["leases"], r["gpus"]) == (6, 3, 3)  # L3's unrecorded GPU counts once
    assert protocol.panel_range(ps, "eagle3").empty


def test_sweep_own_panel_gives_the_start_panel_before_the_end():
    line = {"method": "e", "batch_size": 1, "acceptance_alpha": 0.8}
    sweep = pd.DataFrame([{**line, "num_speculative_tokens": k, "speedup": 1.0 + k / 10,
                           "lease_id": "L2" if k == 4 else "L1"} for k in (1, 2, 4)])
    panel = pd.DataFrame([{**line, "num_speculative_tokens": 4, "speedup_cost": v,
                           "lease_id": "L1", "panel_phase": p} for p, v in (("end", 1.6), ("start", 1.5))])
    lines, own = protocol.sweep_own_panel(sweep, panel)
    assert list(own["panel_phase"]) == ["start", "end"] and list(own["other_speedup"]) == [1.4, 1.4]
    assert lines["other_lease"].tolist() == [False, False, True]


def test_panel_normalised_reads_each_lease_at_the_median_panel_host():
    """A cell's speedup times its lease's panel step (geometric mean of start and end) over the
    median panel step of that method and batch; cells of a batch or lease without a panel drop."""
    panel = pd.DataFrame([
        {"lease_id": lease, "panel_phase": ph, "method": "d", "batch_size": 1, "step_ms": ms}
        for lease, ph, ms in [("L1", "start", 10.0), ("L1", "end", 10.0), ("L2", "start", 16.0),
                              ("L2", "end", 25.0), ("L3", "start", 30.0), ("L3", "end", 30.0)]])
    rows = pd.DataFrame([
        {"method": "d", "batch_size": b, "num_speculative_tokens": k, "acceptance_alpha": 0.8,
         "lease_id": lease, "speedup": 1.0, "speedup_ci_low": 0.9, "speedup_ci_high": 1.1}
        for b, k, lease in [(1, 1, "L1"), (1, 2, "L2"), (1, 3, "L9"), (64, 1, "L1")]])
    out = protocol.panel_normalised(rows, panel).set_index("num_speculative_tokens")
    assert sorted(out.index) == [1, 2]  # L9 has no panel; batch 64 is not in it
    median = 20.5  # of 10, 10, 16, 25, 30, 30
    assert out.loc[1, "host_factor"] == pytest.approx(10.0 / median)
    assert out.loc[2, "host_factor"] == pytest.approx((16.0 * 25.0) ** 0.5 / median)
    assert out.loc[2, "speedup"] == pytest.approx(20.0 / 20.5)  # sqrt(16 * 25) / median
    assert out.loc[1, "speedup_ci_high"] == pytest.approx(1.1 * 10.0 / 20.5)
    assert out.loc[2, "panel_drift"] == pytest.approx(25.0 / 16.0 - 1)

    # the step is read at the median host too: over the factor, as the speedup is times it
    steps = protocol.panel_normalised(rows.assign(step_ms=8.0, step_ms_cv=0.1), panel)
    assert steps.set_index("num_speculative_tokens").loc[1, "step_ms"] == pytest.approx(8.0 * 20.5 / 10.0)
    assert (steps["step_ms_cv"] == 0.1).all()


def test_one_host_normalises_only_the_methods_whose_panels_moved():
    """Only a method whose panel spread exceeds PANEL_WORST is read on one host; no panel, no
    such method: nothing."""
    panel = pd.DataFrame([{"lease_id": lease, "panel_phase": "start", "method": m, "batch_size": 1,
                           "step_ms": ms} for lease, m, ms in
                          [("L1", "d", 10.0), ("L2", "d", 20.0), ("L1", "e", 7.0), ("L2", "e", 7.1)]])
    rows = pd.DataFrame([{"method": m, "batch_size": 1, "num_speculative_tokens": 4,
                          "lease_id": "L1", "speedup": 1.0, "step_ms": 5.0} for m in ("d", "e")])
    spread = protocol.method_spread(panel.assign(cell_id=panel["method"]))
    assert protocol.moved_methods(spread) == ["d"]
    out = protocol.one_host(rows, panel, spread)
    assert list(out["method"]) == ["d"] and out["host_factor"].iloc[0] == pytest.approx(10.0 / 15.0)
    assert protocol.one_host(rows, None, spread).empty
    assert protocol.one_host(rows, panel, pd.Series({"d": 0.01})).empty


def test_answer_table_adds_a_one_host_row_for_a_method_whose_panel_moved():
    """A sweep whose K = 1, 2 came from a slow lease (panel step 20 ms) and the rest from a
    fast one (10 ms): raw, the fast lease's K wins; read on one host the slow lease's cells
    are scaled up, and the row says how far the panel moved within a lease. A batch the panel
    does not measure has no such reading."""
    slow = {1, 2}
    rows = _swept(steps=((1, 7.8), (2, 8.0), (4, 7.0), (6, 8.0), (8, 11.0)),
                  lease_of=lambda kk: "slow" if kk in slow else "fast")
    rows += [{**r, "batch_size": 16} for r in _rows("baseline", 0, None, 6.0, 1.0)]
    for a in (0.5, 1.0):
        rows += [{**r, "batch_size": 16, "cell_id": r["cell_id"] + "-16"}
                 for r in _rows("eagle3", 4, a, 7.0, theory.expected_tokens_per_step(a, 4), lease="fast")]
    sp = protocol.speedups(protocol.cells(pd.DataFrame(rows)))
    panel = pd.DataFrame([{"lease_id": lease, "panel_phase": ph, "method": "eagle3", "batch_size": 1,
                           "step_ms": ms, "cell_id": "p"} for lease, ph, ms in
                          [("slow", "start", 20.0), ("slow", "end", 20.0), ("fast", "start", 10.0),
                           ("fast", "end", 11.0)]])
    spread = protocol.method_spread(panel)
    one = protocol.one_host(sp, panel, spread)
    t = protocol.answer_table(sp, spread, pd.DataFrame(columns=["method"]), k=4, alpha=0.8,
                              batches=(1, 16), one_host_rows=one).set_index(["method", "acceptance"])
    raw = t.loc[("eagle3", "set α = 0.8"), "batch 1"]
    norm = t.loc[("eagle3", f"set α = 0.8, {protocol.ONE_HOST}"), "batch 1"]
    assert raw.endswith("at K = 6") or "at K = 6 " in raw
    assert "at K = 2" in norm
    factor = 20.0 / 15.5  # the slow lease's panel over the median of 20, 20, 10, 11
    e2 = theory.expected_tokens_per_step(0.8, 2)
    assert norm.startswith(f"{e2 * 6.0 / 8.0 * factor:.2f}×")
    assert t.loc[("eagle3", f"set α = 0.8, {protocol.ONE_HOST}"), "batch 16"] == "no panel cell at this batch"
    assert t.loc[("eagle3", f"set α = 0.8, {protocol.ONE_HOST}"), "panel spread"] == "within a lease: up to 10%"
    # without the one-host rows, no such row
    t0 = protocol.answer_table(sp, spread, pd.DataFrame(columns=["method"]), k=4, alpha=0.8, batches=(1,))
    assert not t0["acceptance"].str.contains("one host").any()


def test_probe_across_leases_reads_a_step_that_follows_its_engines_vcpu():
    """Panel repeats of three leases whose vCPU probe differs: a step proportional to the
    probe gives r near 1, a line through zero and a CV that dividing by the probe removes; a
    flat step gives r near 0. Cells outside the panel (not K = 4 at 0.8) are not read."""
    rows = []
    for i, (lease, probe) in enumerate([("A", 1000.0), ("B", 1400.0), ("C", 1900.0)]):
        for r in range(3):
            p = probe * (1 + 0.01 * r)
            rows += [{**_rows("draft-1b", 4, 0.8, 12.0 * p / 1000.0, 3.3, runner=V1, reps=1,
                              lease=lease, phase="start")[0],
                      "repeat": r, "engine_vcpu_probe_us": p, "timestamp_utc": f"t{i}{r}"}]
            rows += [{**_rows("baseline", 0, None, 5.0 + 0.01 * r, 1.0, reps=1, lease=lease,
                              phase="start")[0],
                      "repeat": r, "engine_vcpu_probe_us": p, "timestamp_utc": f"t{i}{r}"}]
            rows += [{**_rows("draft-1b", 2, 0.8, 99.0, 2.4, runner=V1, reps=1, lease=lease,
                              phase="start")[0],
                      "repeat": r, "engine_vcpu_probe_us": p, "timestamp_utc": f"t{i}{r}"}]
    pl = protocol.probe_across_leases(protocol.repeats(pd.DataFrame(rows))).set_index("method")
    d = pl.loc["draft-1b"]
    assert d["repeats"] == 9 and d["leases"] == 3 and d["r"] > 0.999
    assert d["intercept_ms"] == pytest.approx(0.0, abs=1e-6) and d["ms_per_probe_ms"] == pytest.approx(12.0)
    assert d["cv"] > 0.2 and d["cv_per_probe"] < 1e-9
    assert abs(pl.loc["baseline", "ms_per_probe_ms"]) < 0.05
    assert protocol.probe_across_leases(pd.DataFrame({"panel_phase": []})).empty
    from specdec import plots_surface
    fig = plots_surface.probe_across_leases_chart(protocol.repeats(pd.DataFrame(rows)), pl.reset_index())
    assert len(fig.axes[0].lines) == 2  # one line per method at batch 1
    assert any("not" in t.get_text() or "no panel" in t.get_text() for t in
               plots_surface.probe_across_leases_chart(pd.DataFrame({"panel_phase": []}), pl.iloc[0:0]).axes[0].texts)


def test_host_caveat_names_only_the_moved_methods_a_sentence_reads():
    spread = pd.Series({"draft-1b": 1.14, "eagle3": 0.11, "baseline": 0.04, "eagle": np.nan})
    text = protocol.host_caveat(["eagle", "draft-1b", "baseline", "draft-1b"], spread)
    assert "draft-1b ±57.0%" in text and "its" in text and "eagle3" not in text
    both = protocol.host_caveat(["eagle3", "draft-1b"], spread)
    assert "eagle3 ±5.5%, draft-1b ±57.0%" in both and "theirs" in both
    assert protocol.host_caveat(["eagle", "baseline"], spread) == ""
    assert protocol.host_caveat(["draft-1b"], None) == ""
    assert protocol.host_caveat(["draft-1b"], pd.Series(dtype=float)) == ""


def test_panel_spread_of_a_profile_without_panels_is_empty(tmp_path):
    assert protocol.panel_spread("h200-surface-v2", tmp_path).empty
    stored = protocol.panel_spread("h200-surface-v2")  # the committed panels
    assert stored["draft-1b"] > protocol.PANEL_WORST >= stored["baseline"]
    assert set(protocol.moved_spread(stored)) == set(protocol.moved_methods(stored)) \
        and "baseline" not in protocol.moved_spread(stored) and protocol.moved_spread(None) == {}
    assert protocol.stored_panel("h200-surface-v2", tmp_path) is None


def test_cost_vs_realised_summary_is_per_method_and_runner():
    cvr = pd.DataFrame({"method": ["a", "a", "b"], "runner": ["V2", "V2", "V1"],
                        "realised_over_cost": [0.01, -0.03, 0.002],
                        "draw_deviation": [-0.02, 0.0, 0.01]})
    out = protocol.cost_vs_realised_summary(cvr).set_index("method")
    assert out.loc["a", "cells"] == 2 and out.loc["b", "cells"] == 1
    assert out.loc["a", "realised vs cost: median |Δ|"] == pytest.approx(0.02)
    assert out.loc["a", "realised vs cost: worst |Δ|"] == pytest.approx(0.03)
    assert out.loc["a", "tokens per step vs expected: worst |Δ|"] == pytest.approx(0.02)


def test_lease_steps_leave_out_one_lease_and_span_the_rest():
    panel = pd.DataFrame([{"method": m, "lease_id": l, "batch_size": b, "panel_phase": ph,
                           "step_ms": s}
                          for m, l, b, ph, s in [("d", "L1", 1, "start", 20.0), ("d", "L1", 1, "end", 21.0),
                                                 ("d", "L2", 1, "start", 30.0), ("d", "L3", 16, "end", 25.0),
                                                 ("e", "L2", 1, "start", 5.0)]])
    view, phrase = protocol.lease_steps(panel, "d", exclude_lease="L1")
    assert list(view.index) == ["L2", "L3"] and set(view.columns) == {"batch 1, start", "batch 16, end"}
    assert phrase == "25.0 to 30.0 ms per step over 2 panel cells of 2 other leases"
    assert protocol.lease_steps(panel, "x")[1] == "not measured"


def test_panel_steps_and_core_span_the_fastest_and_slowest_panel():
    reps = pd.DataFrame([{"method": "eagle3", "batch_size": 16, "lease_id": l, "panel_phase": ph,
                          "step_ms": s, "engine_cpu_share": c}
                         for l, ph, s, c in [("L1", "start", 8.0, 0.5), ("L1", "start", 8.2, 0.5),
                                             ("L2", "end", 9.0, 0.95), ("L2", None, 1.0, 0.1)]])
    table, phrase = protocol.panel_steps_and_core(reps)
    assert len(table) == 2
    assert phrase == "from 8.10 ms at 0.50 CPU seconds per second to 9.00 ms at 0.95, over 2 panels"


def test_lease_label_is_the_number_and_the_phase():
    from specdec import plots_surface

    assert plots_surface.lease_label("2026-12-03-h200-10", "start") == "10s"
    assert plots_surface.lease_label("2026-12-01-h200", "end") == "2026-12-01-h200e"


def _panel_rows():
    """Two leases' panels on two GPUs: the baseline steady, EAGLE-3 at batch 16 moving 10 %
    within the first lease, the 1B draft twice as slow in the second; steal in lease L2 only."""
    rows = []
    for lease, gpu, phase, base, e3, d1, steal in [
            ("L1", "GPU-aaaaaaaaaaaa-1", "start", 6.0, 7.0, 10.0, None),
            ("L1", "GPU-aaaaaaaaaaaa-1", "end", 6.0, 7.7, 10.0, None),
            ("L2", "GPU-bbbbbbbbbbbb-2", "start", 6.06, 7.0, 20.0, 0.5)]:
        for b in (1, 16):
            rows += [{**r, "gpu_uuid": gpu, "host_steal_pct": steal, "cell_id": f"{r['cell_id']}-{b}"}
                     for r in _rows("baseline", 0, None, base, 1.0, batch=b, lease=lease, phase=phase)
                     + _rows("eagle3", 4, 0.8, e3 if b == 16 else 7.0, 3.36, batch=b, lease=lease, phase=phase)
                     + _rows("draft-1b", 4, 0.8, d1, 3.36, runner=V1, batch=b, lease=lease, phase=phase)]
    return pd.DataFrame(rows)


def test_panel_sentences_name_the_moving_methods_hosts_and_steal():
    runs = _panel_rows()
    panel = protocol.panel_table(protocol.cells(runs))
    t = protocol.panel_sentences(panel, runs)
    assert t["panel_sentence"] == ("Across every panel, the step time of `baseline` stayed within 3 % "
                                   "between the panels; `draft-1b`, `eagle3` moved by more than 5 %.")
    assert t["n_leases"] == "2"
    assert t["n_hosts"] == "2 GPUs named by their UUID (`GPU-aaaaaaaa…` in L1; `GPU-bbbbbbbb…` in L2)"
    assert t["base_host_gap"] == "1.0 % at batch 1 and 1.0 % at batch 16"
    assert t["e3_16_moves"] == "10.0 % in L1 (L2: one panel only)"
    assert t["lease_sentence"].startswith("`baseline` 1.0 % at batch 1, 1.0 % at batch 16; ")
    assert "`draft-1b` 100.0 % at batch 1" in t["lease_sentence"]
    assert "0.50 % of the machine's CPU time in the start panel of L2" in t["steal_sentence"]
    assert protocol.panel_sentences(panel, runs.assign(host_steal_pct=None))["steal_sentence"] == \
        "No panel records the hypervisor's steal yet."
    none = protocol.panel_sentences(None, runs.iloc[0:0])
    assert none["n_leases"] == "0" and none["e3_16_moves"] == "not measured yet"
    assert set(none) == set(t)


def test_controls_section_reads_each_pin_against_its_own_baseline_and_lease():
    rows = (_rows("baseline", 0, None, 6.0, 1.0, lease="L7") + _rows("baseline-v1", 0, None, 6.0, 1.0, runner=V1, lease="L7")
            + _rows("baseline-v1-inproc", 0, None, 6.0, 1.0, runner=V1, core="inproc", lease="L7")
            + _rows("eagle3", 4, 0.8, 7.0, 3.36, lease="L7", jitter=0.01)
            + _rows("eagle3-v1", 4, 0.8, 8.0, 3.36, runner=V1, lease="L7", jitter=0.02)
            + _rows("eagle3-v1-inproc", 4, 0.8, 9.0, 3.36, runner=V1, core="inproc", lease="L7")
            + _rows("draft-1b", 4, 0.8, 12.0, 3.36, runner=V1, lease="L7")
            + _rows("draft-1b-inproc", 4, 0.8, 12.5, 3.36, runner=V1, core="inproc", lease="L8")
            + _rows("draft-1b-async", 4, 0.8, 11.0, 3.36, runner=V1, lease="L8"))
    panel_runs = (_rows("baseline", 0, None, 6.0, 1.0, lease="L8", phase="start")
                  + _rows("draft-1b", 4, 0.8, 13.0, 3.36, runner=V1, lease="L8", phase="start")
                  + _rows("draft-1b", 4, 0.8, 14.0, 3.36, runner=V1, lease="L8", phase="end")
                  + _rows("draft-1b", 4, 0.8, 20.0, 3.36, runner=V1, lease="L9", phase="start"))
    cell_df = protocol.cells(pd.DataFrame(rows))
    panel_cells = protocol.cells(pd.DataFrame(panel_runs))
    ctrl, other, t = protocol.controls_section(protocol.speedups(cell_df), cell_df, panel_cells,
                                               protocol.panel_table(panel_cells))
    e = theory.expected_tokens_per_step(0.8, 4)
    assert t["ctrl_runner"].startswith(f"{e * 6 / 7:.2f}× on V2 against {e * 6 / 8:.2f}× on V1 at batch 1")
    assert t["ctrl_core"].startswith(f"{e * 6 / 9:.2f}× at batch 1")
    assert t["ctrl_cv"].endswith("on V2 and 0.0 % on V1") and not t["ctrl_cv"].startswith("0.0 %")
    # the in-process 1B draft of L8 beside L8's panel cells; the other leases' panels apart
    assert t["ctrl_draft"] == ("batch 1: 12.5 ms in process, 13.0 ms, 14.0 ms with vLLM's core "
                               "(the panel's start and end)")
    assert list(other.index) == ["L9"] and t["ctrl_draft_other"].startswith("20.0 to 20.0 ms")
    assert t["ctrl_async"].startswith("batch 1: 11.0 ms (CV 0 %) with it, against 13.0 ms (CV 0 %) "
                                      "and 14.0 ms (CV 0 %) without it")
    assert t["ctrl_pinned"] == "batch 1: not measured; batch 16: not measured"  # said so, not as nan
    assert set(ctrl["method"]) >= {"eagle3", "eagle3-v1", "draft-1b-async"}
    none = protocol.controls_section(None, None, None, None)
    assert none[0] is None and none[1].empty and set(none[2]) == set(t)
    assert set(none[2].values()) == {"not measured yet"}


def test_old_rows_section_from_the_committed_rows(tmp_path):
    from specdec import store

    runs = store.load_runs("h200-surface-v2")
    runs = runs[runs["workload"] == "repeat"]
    explained, t = protocol.old_rows_section("h200-surface", runs, protocol.cells(runs))
    assert list(explained["method"]) == [c[0] for c in protocol.OLD_CONFIGS]
    assert explained["old rows"].notna().all()
    e3 = explained[explained["method"] == "eagle3"]
    # each step back to vLLM's defaults multiplies up to the whole way
    step = lambda a, b: (e3[a] / e3[b]).to_numpy()
    assert step("V2, default core", "old rows") == pytest.approx(
        step("V1, in-process", "old rows") * step("V1, default core", "V1, in-process")
        * step("V2, default core", "V1, default core"))
    assert t["e3_all"].endswith("×") and t["base_move"].endswith(" %") and t["top_clock"].endswith(" MHz")
    assert t["old_tokens"] == "128"
    # without the old rows (another results folder): the table is None, the sentences say so
    none, t0 = protocol.old_rows_section("h200-surface", runs, protocol.cells(runs), tmp_path)
    assert none is None and t0["e3_all"] == "not measured yet" and t0["old_tokens"] == "128"


def test_survey_sentences_give_the_two_speeds():
    survey = pd.DataFrame({"lease_id": ["L1"] * 4 + ["L2"] * 2, "panel_phase": "start",
                           "vcpu": [0, 0, 1, 1, 0, 0], "pass": [0, 1, 0, 1, 0, 1],
                           "probe_us": [1000.0, 2000.0, 1000.0, 1000.0, 2000.0, 2000.0]})
    t = protocol.survey_sentences(survey)
    assert (t["sv_fast"], t["sv_slow"], t["sv_ratio"], t["sv_share"]) == ("1.00 ms", "2.00 ms", "2.0", "50 %")
    assert t["sv_both"] == "1 of 3 vCPUs (each lease's counted apart)"
    assert t["sv_surveys"] == "2 surveys in 2 leases"
    assert set(protocol.survey_sentences(survey.iloc[0:0]).values()) == {"not measured yet"}


def test_vcpu_sentences_read_the_step_against_the_engines_vcpu():
    survey = pd.DataFrame({"lease_id": "L", "panel_phase": "start", "vcpu": [0, 1, 2, 3],
                           "pass": 0, "probe_us": [1000.0, 1000.0, 1600.0, 1600.0]})
    rows = []
    for r, share in enumerate([0.0, 0.2, 0.5, 0.7, 1.0, 0.4]):
        probe = 1000.0 + 600.0 * share
        rows += [{**_rows("draft-1b", 4, 0.8, 2.0 + 10.0 * probe / 1000.0, 3.3, runner=V1, reps=1,
                          lease="L", phase="start")[0],
                  "repeat": r, "engine_vcpu_probe_us": probe, "timestamp_utc": f"t{r}"}]
        rows += [{**_rows("eagle3", 4, 0.8, 7.0 + 0.001 * (r % 2), 3.3, reps=1, lease="L", phase="start")[0],
                  "repeat": r, "engine_vcpu_probe_us": probe, "timestamp_utc": f"t{r}"}]
    reps = protocol.repeats(pd.DataFrame(rows))
    shared = protocol.slow_share(reps, survey)
    fit = protocol.vcpu_speed_fit(shared)
    t = protocol.vcpu_sentences(shared, fit, protocol.probe_across_leases(reps), reps)
    assert t["vf_leases"] == "L" and t["vf_medusa"] == "not measured yet"
    assert t["vf_1b"].startswith("1.50 times as long on a slow vCPU as on a fast one (Pearson's r = 1.00 over 6")
    assert t["vf_v2"] == "0.0 %"
    assert t["pl_1b"] == "r = 1.00 at batch 1 over 6 repeats in 1 leases"
    assert t["pl_line"] == "2.0 ms + 10.0 ms per ms of probe at batch 1"
    assert t["pl_cv"] == "2.3 % instead of 14.4 % at batch 1"
    assert t["pl_v2"].startswith("eagle3 at batch 1: r = ") and t["pl_v2"].endswith("probe's range")
    empty = protocol.vcpu_sentences(shared.iloc[0:0], fit.iloc[0:0], protocol.probe_across_leases(reps.iloc[0:0]),
                                    reps.iloc[0:0])
    assert set(empty.values()) <= {"none yet", "not measured yet"} and set(empty) == set(t)


def test_host_bound_sentences_read_the_gpu_idle_share_and_the_engine_core():
    rows = []
    for r, (step, util, cpu) in enumerate([(12, 90, 0.5), (16, 70, 0.6), (20, 55, 0.9),
                                           (14, 80, 0.55), (18, 60, 0.8)]):
        stamps = {"repeat": r, "host_probe_us": 1000.0 + 10 * r, "host_steal_pct": 0.1 * r,
                  "host_busy_pct": 6.5, "timestamp_utc": f"t{r}"}
        rows += [{**_rows("draft-1b", 4, 0.8, step, 3.3, runner=V1, reps=1, lease="L1")[0],
                  **stamps, "gpu_util_pct": util, "engine_cpu_s": 1.0}]
        rows += [{**_rows("eagle3", 4, 0.8, 7.0 * (1 + (cpu - 0.5) / 10), 3.3, batch=16, reps=1,
                          lease="L1", phase="start")[0],
                  **stamps, "gpu_util_pct": 100.0 - r, "engine_cpu_s": cpu}]
    reps = protocol.repeats(pd.DataFrame(rows))
    hb = protocol.host_bound(reps)
    p16, t = protocol.host_bound_sentences(hb, reps)
    assert t["hb_util_v2"] == "96 %"
    assert t["hb_util_v1"] == "a median 70–70.0 % (as little as 55 % in a repeat)"
    assert t["hb_r_util"].startswith("-0.9") and t["hb_steal"] == "0.4 %" and t["hb_busy"] == "6.5 %"
    assert t["hb_e3_r"].endswith("over 5 repeats") and float(t["hb_e3_r"].split()[0]) > 0.99
    assert t["hb_probe"] == "1.00 to 1.04 ms" and t["hb_r_probe_leases"].endswith(" in L1")
    assert len(p16) == 1 and t["hb_e3_panels"].endswith("over 1 panels")
    none_table, none = protocol.host_bound_sentences(hb.iloc[0:0], reps)
    assert none_table.empty and set(none) == set(t) and set(none.values()) == {"not measured yet"}


def test_span_prints_one_value_where_the_ends_print_alike():
    assert protocol.span([0.171, 0.174], ".2f") == "0.17"
    assert protocol.span(pd.Series([1.2, 1.5]), ".2f", "×") == "1.20× to 1.50×"


def test_standard_vs_synthetic_reads_only_pairs_measured_in_one_lease():
    def rows(leases):  # syn batch 1, syn batch 4, std batch 1, std batch 4, in these leases
        sides = [(1.0, 1, 10 / 1.1), (1.0, 4, 10 / 1.1), (None, 1, 10.0), (None, 4, 10.0)]
        out = []
        for (alpha, b, ms), lease in zip(sides, leases):
            out += _rows("draft-1layer", 3, alpha, ms, 4.0, runner=V1, batch=b, lease=lease)
        other = _rows("draft-1layer", 4, 1.0, 5.0, 5.0, runner=V1, lease="L1")  # surface-k4's
        out += _rows("baseline", 0, None, 6.0, 1.0, batch=1, lease="L1")  # the experiment's baseline
        for r in out:
            r["experiment_tags"] = ["standard-vs-synthetic"]
        for r in other:
            r["experiment_tags"] = ["surface-k4"]
        return pd.DataFrame(out + other)

    syn_only = rows(["L1"] * 4)
    syn_only = syn_only[syn_only["acceptance_alpha"].notna()]
    none, sentence = protocol.standard_vs_synthetic(syn_only)
    assert none is None and "Not measured yet" in sentence and "precision" not in sentence
    base_only = rows(["L1"] * 4)
    none, sentence = protocol.standard_vs_synthetic(base_only[base_only["method"] == "baseline"])
    assert none is None and "Not measured yet" in sentence
    out, sentence = protocol.standard_vs_synthetic(rows(["L1"] * 4))
    assert list(out["synthetic / standard"]) == pytest.approx([1.1, 1.1])
    assert list(out["lease"]) == ["L1", "L1"]
    assert "1.100 to 1.100 over 2 batch sizes" in sentence and "K = 3" in sentence
    # batch 1's pair crosses leases (synthetic L1, standard L2), batch 4's does not: not read
    out, sentence = protocol.standard_vs_synthetic(rows(["L1", "L2", "L2", "L2"]))
    assert "over 1 batch sizes" in sentence and list(out["batch"]) == [4]
    none, sentence = protocol.standard_vs_synthetic(rows(["L1", "L1", "L2", "L2"]))
    assert none is None and "not read" in sentence and "precision" not in sentence


def test_runner_step_ratio_is_eagle3_on_v1_over_v2_per_batch_median_over_leases():
    rows = (_rows("eagle3", 4, 0.8, 7.0, 3.2, lease="L1") + _rows("eagle3", 4, 0.8, 9.0, 3.2, lease="L2")
            + _rows("eagle3-v1", 4, 0.8, 8.4, 3.2, runner=V1, lease="L2")
            + _rows("eagle3", 4, 0.8, 8.0, 3.2, lease="L1", phase="start")  # a panel cell: not read
            + _rows("eagle3", 4, 0.8, 12.0, 3.2, batch=16) + _rows("eagle3", 5, 0.8, 1.0, 3.2, runner=V1))
    ratio = protocol.runner_step_ratio(pd.DataFrame(rows))
    assert ratio.to_dict() == pytest.approx({1: 8.4 / 8.0})  # batch 16: no V1 side
    assert protocol.runner_step_ratio(pd.DataFrame(_rows("eagle3", 4, 0.8, 7.0, 3.2))).empty
    assert protocol.runner_step_ratio(pd.DataFrame()).empty
