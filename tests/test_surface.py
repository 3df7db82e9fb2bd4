"""The set-acceptance surface: acceptance check, break-even, model check, holdings, leases,
figures, and the schema additions, on small frames and on the committed H200 rows."""
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specdec import leases, metrics, plots_surface, protocol, store, surface


def _cell(alpha, k=2, drafts=1000, per_pos=None, method="m", batch=1, speedup=1.0, **kw):
    per_pos = per_pos if per_pos is not None else [alpha ** (i + 1) for i in range(k)]
    return {"profile": "p", "cell_id": f"{method}-{alpha}-{batch}", "method": method,
            "num_speculative_tokens": k, "batch_size": batch, "workload": "w",
            "temperature": 0.0, "compilation": "default", "acceptance_alpha": alpha,
            "spec_num_drafts": drafts, "accepted_per_pos_rate": per_pos,
            "acceptance_rate": float(np.mean(per_pos)), "speedup": speedup,
            "speedup_status": "ok", **kw}


def test_acceptance_check_passes_the_set_rates_and_catches_a_miss():
    df = pd.DataFrame([_cell(0.5), _cell(1.0), _cell(0.0),
                       _cell(0.5, per_pos=[0.5, 0.1]),     # position 1 far below 0.25
                       _cell(1.0, per_pos=[1.0, 0.95]),    # a rate set to 1 that was missed
                       _cell(None, per_pos=[0.3, 0.1])])   # natural acceptance: not checked
    out = metrics.acceptance_check(df)
    assert list(out["acceptance_follows_set"]) == [True, True, True, False, False, None]
    assert out["set_acceptance_rate"].iloc[0] == pytest.approx((0.5 + 0.25) / 2)
    assert math.isinf(out["acceptance_max_z"].iloc[4])


def test_acceptance_check_of_a_dynamic_k_cell_checks_the_positions_drafted():
    # Grid K = 5, but at this batch vLLM's schedule drafted 2 tokens every step.
    drafted = _cell(0.8, k=5, per_pos=[0.8, 0.64, 0.0, 0.0, 0.0], spec_num_draft_tokens=2000)
    missed = _cell(0.8, k=5, per_pos=[0.8, 0.3, 0.0, 0.0, 0.0], spec_num_draft_tokens=2000)
    full_k = _cell(0.8, k=5, per_pos=[0.8, 0.64, 0.0, 0.0, 0.0], spec_num_draft_tokens=5000)
    out = metrics.acceptance_check(pd.DataFrame([drafted, missed, full_k]))
    assert list(out["acceptance_follows_set"]) == [True, False, False]
    assert out["set_acceptance_rate"].iloc[0] == pytest.approx((0.8 + 0.64) / 2)


def test_break_even_interpolates_between_measured_alphas():
    rows = [_cell(a, speedup=s) for a, s in [(0.0, 0.5), (0.5, 0.8), (0.7, 1.2), (1.0, 2.0)]]
    rows += [_cell(a, method="never", speedup=s) for a, s in [(0.0, 0.2), (1.0, 0.9)]]
    be = surface.break_even(pd.DataFrame(rows)).set_index("method")
    assert be.loc["m", "break_even_alpha"] == pytest.approx(0.6)
    assert be.loc["m", "how"] == "interpolated"
    assert math.isnan(be.loc["never", "break_even_alpha"])


def test_model_check_recovers_a_constant_step_cost():
    # Speedups made by the model itself with c = 0.2: fitted on the ends, the middle is exact.
    k, c = 4, 0.2
    rows = []
    for a in (0.0, 0.5, 0.8, 1.0):
        e = k + 1 if a == 1 else (1 - a ** (k + 1)) / (1 - a)
        rows.append(_cell(a, k=k, speedup=e / (c * k + 1), mean_acceptance_length=e))
    # a curve measured only between the ends (vLLM's dynamic K) has nothing to fit: left out
    rows += [_cell(a, method="dynk", k=k, speedup=1.0, mean_acceptance_length=2.0) for a in (0.5, 0.8)]
    fit = surface.model_check(pd.DataFrame(rows))
    assert fit.params["cost_ratio"].iloc[0] == pytest.approx(c, rel=1e-4)
    assert fit.error_of("test")["max_abs_pct"] < 1e-3 and fit.error_of("test")["n"] == 2
    assert set(fit.predictions["method"]) == {"m"}


@pytest.fixture(scope="module")
def h200():
    runs = store.load_runs("h200-surface-v2")
    if not len(runs):
        pytest.skip("no h200-surface-v2 rows in this checkout")
    return surface.table(metrics.with_speedup(metrics.summarize(runs)))


def test_committed_surface_rows_are_what_the_chapter_says(h200):
    spec = h200[h200["method"] != "baseline"]
    assert spec["acceptance_alpha"].notna().all()  # table() keeps set-acceptance cells only
    checked = h200[h200["acceptance_follows_set"].notna()]
    # Every method but n-gram realised its set rates in every cell.
    assert checked[checked["method"] != "ngram"]["acceptance_follows_set"].all()
    # alpha = 1 emits K + 1 tokens per step for the methods that always propose K tokens
    full = spec[(spec["acceptance_alpha"] == 1.0) & (spec["method"] != "ngram")]
    assert np.allclose(full["tokens_per_step"], full["num_speculative_tokens"] + 1)
    base = h200[h200["method"] == "baseline"]
    assert (base["step_ms"] > 0).all() and base["tokens_per_step"].eq(1).all()
    assert set(h200["device_name"]) == {"NVIDIA H200"}


def test_engine_holdings_count_heads_and_drafts(h200):
    hold = surface.engine_holdings(h200).groupby("method").max()
    assert hold.loc["ngram", "draft_gib"] == 0
    # EAGLE shares the target's embedding and head, so it adds less than a draft model
    assert hold.loc["eagle", "draft_gib"] < hold.loc["draft-1b", "draft_gib"]
    # Medusa as published gives every head a full-vocabulary LM head: more than the 1B draft
    assert hold.loc["medusa", "draft_gib"] > hold.loc["draft-1b", "draft_gib"]
    # a runner or engine-core control holds the same weights as the method it pins
    assert hold.loc["eagle3-v1", "draft_gib"] == pytest.approx(hold.loc["eagle3", "draft_gib"])
    assert (hold["target_gib"].round(1) == hold["target_gib"].round(1).iloc[0]).all()


def test_lease_record_matches_the_rows(h200):
    rec = leases.record()
    assert len(rec) >= 1
    # every committed cell of a leased profile was measured in exactly one recorded lease (a
    # lease may name several profiles)
    named = {p for e in leases.load() for p in (e["profile"] if isinstance(e["profile"], list)
                                                   else [e["profile"]])}
    assert "h200-surface-v2" in named
    # a lease's cells whose rows have left data/results/ (a superseded protocol's) are counted
    # from its entry, the rest from the rows; a failed cell (lease 20's dynamic K on V2) is
    # not a measured one
    assert (rec["cells"] - rec["superseded cells"]).sum() == \
        sum(store.load_runs(p, only_ok=True)["cell_id"].nunique() for p in named)
    assert rec["superseded cells"].sum() > 0 and (rec["cells"] >= rec["superseded cells"]).all()
    # a superseded training's rows are counted where they are kept (data/plateau/_superseded/):
    # lease 30's twelve cells of the two-layer draft (lease 46 trained it again), beside its nine
    # of Medusa still in data/results/
    r30 = rec.set_index("lease").loc["2026-12-06-h100-30"]
    assert (r30["cells"], r30["superseded cells"], r30["engines"]) == (21, 12, 7)
    assert not any((e.get("superseded") or {}).get("cells") for e in leases.load()
                   if "plateau" in str(e["profile"]))  # counted from their rows, not by hand
    first = rec[rec["profile"] == "h200-surface-v2"].iloc[0]
    assert first["engines"] >= 3 and 0 < first["engine_start_s"] < first["device_held_s"]


def test_lease_cost_sentences_quote_best_and_worst_among_leases_whose_cells_remain():
    row = dict(device="d", commit="c", calls=1, engine_start_s=60.0, **{"other work": ""})
    spent = pd.DataFrame([
        dict(row, lease="old", profile="p1", device_held_s=600.0, cells=100,
             **{"superseded cells": 100}, engines=5),       # 10 a minute, all rows gone
        dict(row, lease="mixed", profile="p1, p2", device_held_s=600.0, cells=30,
             **{"superseded cells": 10}, engines=3),        # 2 a minute of remaining cells
        dict(row, lease="new", profile="p2", device_held_s=600.0, cells=40,
             **{"superseded cells": 0}, engines=4),
        dict(row, lease="lost", profile="p2", device_held_s=60.0, cells=0,
             **{"superseded cells": 0}, engines=0, **{"other work": "nothing landed"})])
    text = leases.cost_sentences(spent)
    assert text["lease_best"] == "4.0 (new: 40 cells from 4 engines, p2)"
    assert text["lease_worst"] == "2.0 (mixed: 20 cells from 3 engines, p1, p2)"
    assert "measured 170 cells (110 of them rows of a superseded protocol" in text["lease_total"]
    assert text["lease_none"] == "lost: nothing landed"
    assert set(leases.cost_sentences(spent.iloc[0:0]).values()) == {"not measured"}


def test_lease_file_is_checked(tmp_path):
    bad = tmp_path / "leases.yaml"
    bad.write_text("- lease: x\n  device: y\n")
    with pytest.raises(ValueError, match="missing"):
        leases.load(bad)


def test_surface_figures_draw_and_say_no_data(h200):
    k4 = h200[h200["num_speculative_tokens"].isin([0, 4])]
    for draw in (plots_surface.speedup_vs_alpha, plots_surface.step_time_vs_alpha):
        fig = draw(k4)
        assert len(fig.axes) == 4  # one panel per batch size
        empty = draw(None)
        assert any("no data" in t.get_text() for ax in empty.axes for t in ax.texts)
    # a method whose control panel moved: its lines shaded by that spread, in every panel
    m = sorted(set(k4["method"]) - {"baseline"})[0]
    plain, shaded = (plots_surface.speedup_vs_alpha(k4, spread=s) for s in (None, {m: 0.4}))
    assert all(len(b.collections) > len(a.collections) for a, b in zip(plain.axes, shaded.axes))
    assert f"{m}: spread between control panels (±20%)" in [t.get_text() for t in shaded.legends[0].texts]


def test_best_k_ties_within_the_interval_or_the_spread_of_another_lease():
    """The best K is a tie with a K inside its interval, and with a K measured in another
    lease within the method's spread between panels; a K of the same lease is never excused
    by the spread."""
    rows = pd.DataFrame([{"method": "d", "batch_size": 1, "acceptance_alpha": 0.8,
                          "num_speculative_tokens": k, "speedup": s, "speedup_ci_low": s - 0.05,
                          "lease_id": lease}
                         for k, s, lease in [(1, 0.80, "L1"), (2, 0.97, "L1"), (3, 1.00, "L2"),
                                             (4, 0.85, "L2"), (5, 0.70, "L2")]])
    plain = surface.best_k(rows).iloc[0]
    assert plain["best_k"] == 3 and plain["overlaps"] == [2] and plain["within_spread"] == []
    assert plain["tie"]
    wide = surface.best_k(rows, spread=pd.Series({"d": 0.3})).iloc[0]
    # K = 1 (another lease, 0.80 * 1.3 >= 1.0) ties; K = 4 (the best's own lease) does not
    assert wide["overlaps"] == [2] and wide["within_spread"] == [1]
    clear = surface.best_k(rows[rows["num_speculative_tokens"] != 2], min_ks=4).iloc[0]
    assert not clear["tie"] and clear["runner_up_speedup"] == pytest.approx(0.85)
    assert surface.best_k(rows[rows["num_speculative_tokens"] < 5]).empty  # four K: no sweep
    from specdec import chapters
    view = chapters.best_k_view(surface.best_k(rows, spread=pd.Series({"d": 0.3})))
    assert view.loc[("d", 1), "α = 0.8"] == "3 (≈ 2; ~ 1)"
    assert chapters.best_k_view(surface.best_k(rows.iloc[0:0])).empty


def test_k_sweep_marks_the_cell_of_another_lease_and_the_panels_own():
    rows = pd.DataFrame([{"method": "e", "batch_size": b, "num_speculative_tokens": k,
                          "acceptance_alpha": 0.8, "speedup": 1.0 + k / 10,
                          "speedup_ci_low": 1.0, "speedup_ci_high": 2.0,
                          "lease_id": "L2" if k == 4 else "L1", "profile": "p"}
                         for b in (1, 16) for k in (1, 2, 3, 4, 5)])
    panel = pd.DataFrame([{"method": "e", "batch_size": 16, "num_speculative_tokens": 4,
                           "acceptance_alpha": 0.8, "speedup_cost": 1.5, "lease_id": "L1"},
                          {"method": "e", "batch_size": 1, "num_speculative_tokens": 4,
                           "acceptance_alpha": 0.8, "speedup_cost": 1.5, "lease_id": "L9"}])
    fig = plots_surface.k_sweep(*protocol.sweep_own_panel(rows, panel))
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == ["e, batch 1", "e, batch 16"]
    # hollow K = 4 (lease L2) in both panels; a star only where the line's own lease (L1) has one
    hollow = [ax for ax in axes if any(c.get_offsets().shape[0] == 1
                                       and c.get_offsets()[0][0] == 4 for c in ax.collections
                                       if c.get_label() == "measured in another lease")]
    stars = [ax.get_title() for ax in axes for c in ax.collections
             if c.get_label() == "the line's own lease (control panel)"]
    assert len(hollow) == 2 and stars == ["e, batch 16"]
    assert not [c for ax in axes for c in ax.collections if c.get_label() == "spread between control panels"]
    # the method's spread between panels shades each line: ± half of it around the speedup
    fig = plots_surface.k_sweep(*protocol.sweep_own_panel(rows, panel), pd.Series({"e": 0.2}))
    bands = [c for ax in fig.axes for c in ax.collections if c.get_label() == "spread between control panels"]
    assert len(bands) == 2
    ys = bands[0].get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(1.1 * 0.9) and ys.max() == pytest.approx(1.5 * 1.1)
    assert any("no data" in t.get_text() for ax in plots_surface.k_sweep(None).axes for t in ax.texts)


def test_old_files_read_the_added_columns_as_null(tmp_path):
    runs = store.load_runs("cpu-smollm2")
    assert runs["acceptance_alpha"].isna().all() and runs["synthetic_rates"].isna().all()
    # a file lacking a column that is NOT one of the added ones is still refused
    one = next((store.paths.results_dir("cpu-smollm2")).glob("*.runs.parquet"))
    t = store.read_parquet(one).drop_columns(["wall_s"])
    (tmp_path / "x").mkdir()
    pq.write_table(t, tmp_path / "x" / "c.runs.parquet")
    with pytest.raises(store.SchemaError, match="wall_s"):
        store.load_runs("x", tmp_path)


def test_losslessness_leaves_out_set_acceptance_cells():
    base = {"profile": "p", "method": "baseline", "num_speculative_tokens": 0, "batch_size": 1,
            "workload": "w", "temperature": 0.0, "compilation": "default", "prompt_id": "a",
            "request_index": 0, "acceptance_alpha": None}
    rows = [{**base, "cell_id": "b", "output_token_ids": [1, 2, 3]},
            {**base, "cell_id": "s", "method": "x", "num_speculative_tokens": 2,
             "acceptance_alpha": 0.5, "output_token_ids": [1, 9, 9]},
            {**base, "cell_id": "n", "method": "x", "num_speculative_tokens": 2,
             "output_token_ids": [1, 2, 3]}]
    out = metrics.losslessness(pd.DataFrame(rows))
    assert list(out["cell_id"]) == ["n"] and bool(out["identical_to_baseline"].iloc[0])


def test_harness_beside_the_peer_on_the_committed_runs(h200):
    """Section 6: each committed `bench latency` run is set beside the harness's cell; the
    baseline's two clocks must agree closely (they time the same engine doing the same work)."""
    from specdec import peer

    runs = peer.load("h200-surface-v2")
    if runs.empty:
        pytest.skip("no peer runs in this checkout (h200-surface-v2's peer-check is pending)")
    cmp = peer.compare(runs, h200, store.load_runs("h200-surface-v2"))
    assert len(cmp) == len(runs) and cmp["harness_tok_s"].notna().all()
    # every peer run and harness cell says which lease measured it (lease 19 on)
    assert cmp["harness_lease"].notna().all() and cmp["peer_lease"].notna().all()
    base = cmp[cmp["method"] == "baseline"]
    assert ((base["harness_over_peer"] - 1).abs() < 0.10).all()
    assert (cmp["peer_slowest_over_fastest"] >= 1).all()
    sentence = peer.comparison_sentence(cmp)
    assert sentence.count("`bench latency`") == len(cmp)
    assert "not measured" in peer.comparison_sentence(cmp.iloc[0:0])


# -- a published acceptance, read off the surface ---------------------------------------------- #
def test_published_table_inverts_the_independent_model():
    from specdec import theory
    from specdec.claims import published

    for alpha, k in ((0.0, 3), (0.65, 7), (0.9, 4), (1.0, 2)):
        length = float(theory.expected_tokens_per_step(alpha, k))
        assert theory.alpha_from_acceptance(length, k) == pytest.approx(alpha, abs=1e-6)
    t = published.table()
    back = [float(theory.expected_tokens_per_step(a, k)) for a, k in zip(t["implied_alpha"], t["k"])]
    assert back == pytest.approx(t["mean_acceptance_length"].tolist(), abs=1e-6)


def test_published_file_loads_and_refuses_what_it_cannot_be(tmp_path):
    from specdec.claims import published

    entries = published.load()
    assert entries and all(e.url.startswith("http") for e in entries)
    good = ("- method: eagle3\n  checkpoint: x\n  target: y\n  dataset: MT-bench\n"
            "  temperature: 1.0\n  k: 7\n  mean_acceptance_length: 2.5\n  source: s\n"
            "  url: https://example.org\n")
    f = tmp_path / "p.yaml"
    f.write_text(good)
    assert published.load(f)[0].k == 7
    f.write_text(good.replace("2.5", "9.5"))
    with pytest.raises(published.PublishedError, match="between 1 and K"):
        published.load(f)
    f.write_text(good.replace("dataset", "datset"))
    with pytest.raises(published.PublishedError, match="datset"):
        published.load(f)


def test_speedup_from_cost_is_the_measured_speedup_at_a_measured_alpha(h200):
    """At a set α that was measured, the measured tokens per step at the measured step cost give
    back the measured speedup; in between, only the step's cost is interpolated."""
    table = h200
    cell = table[(table["method"] == "eagle3") & (table["num_speculative_tokens"] == 4)
                 & (table["batch_size"] == 1) & (table["acceptance_alpha"] == 0.6)].iloc[0]
    got = surface.speedup_from_cost(table, "eagle3", 0.6, 4, 1, cell["tokens_per_step"])
    assert got["speedup"] == pytest.approx(cell["speedup"], rel=1e-9)
    mid = surface.speedup_from_cost(table, "eagle3", 0.65, 4, 1, 2.0)
    assert (mid["alpha_low"], mid["alpha_high"]) == (0.6, 0.7)
    assert mid["speedup"] == pytest.approx(mid["baseline_step_ms"] * 2.0 / mid["step_ms"])
    assert math.isnan(surface.speedup_from_cost(table, "eagle3", 0.65, 4, 3, 2.0)["speedup"])


def test_speedup_at_interpolates_between_measured_alphas(h200):
    at = h200[(h200["method"] == "eagle3") & (h200["num_speculative_tokens"] == 4)
              & (h200["batch_size"] == 1) & h200["acceptance_alpha"].notna()]
    curve = at.groupby("acceptance_alpha")["speedup"].median()
    exact = surface.speedup_at(h200, "eagle3", 0.6, 4, 1)
    assert exact["speedup"] == pytest.approx(curve[0.6])
    mid = surface.speedup_at(h200, "eagle3", 0.65, 4, 1)
    assert (mid["alpha_low"], mid["alpha_high"]) == (0.6, 0.7)
    assert mid["speedup"] == pytest.approx((curve[0.6] + curve[0.7]) / 2)
    assert math.isnan(surface.speedup_at(h200, "eagle3", 0.65, 4, 3)["speedup"])  # no batch 3


def test_proposed_share_selects_on_each_rows_own_acceptance():
    checks = pd.DataFrame([
        _cell(0.5, method="ngram", draft_share=0.99), _cell(None, method="ngram", per_pos=[0.3, 0.1], draft_share=0.5),
        _cell(0.8, method="eagle3", draft_share=1.0), _cell(1.0, method="ngram", draft_share=0.97),
    ], index=[7, 3, 11, 0])  # an index that lines up with no other frame
    assert sorted(surface.proposed_share(checks)) == [0.97, 0.99]  # not the standard-sampler cell
