"""metrics: per-cell summaries, speedups against the right baseline, losslessness.

Rows are synthetic and built here, written through the real store into a
temporary folder (never under data/) so the dtypes are those of real reads.
"""
import math

import numpy as np
import pandas as pd
import pytest

from specdec import metrics, store
from specdec.provenance import PROVENANCE_COLUMNS

PROFILE = "unit-test"


def run_row(method="baseline", k=0, repeat=0, tok_s=100.0, batch=1, workload="chat",
            temperature=0.0, compilation="default", status="ok", drafts=None,
            draft_tokens=None, accepted=None, per_pos=None, cell_id=None):
    cell = cell_id or f"{method}-k{k}-b{batch}-{workload}-t{temperature:g}-{compilation}"
    row = {f.name: None for f in store.RUNS_SCHEMA}
    row.update({p: "x" for p in PROVENANCE_COLUMNS})
    row.update(
        profile=PROFILE, cell_id=cell, config_hash="h" + cell, experiment_tags=["unit"],
        method=method, draft=None, num_speculative_tokens=k, batch_size=batch,
        workload=workload, temperature=temperature, max_tokens=16, compilation=compilation,
        repeat=repeat, status=status, error=None if status == "ok" else "boom",
        wall_s=16 * batch / tok_s, num_requests=batch, num_prompt_tokens=10 * batch,
        num_output_tokens=16 * batch, output_tokens_per_s=tok_s if status == "ok" else None,
        tpot_ms=1000 / tok_s * batch, spec_num_drafts=drafts, spec_num_draft_tokens=draft_tokens,
        spec_num_accepted_tokens=accepted, spec_accepted_per_pos=per_pos,
        device_name="test-device", vllm_version="0.0-test", git_dirty=False,
        timestamp_utc="2026-01-01T00:00:00Z",
    )
    return row


def load(rows, tmp_path):
    """Write rows cell by cell through the store and read them back."""
    by_cell = {}
    for r in rows:
        by_cell.setdefault(r["cell_id"], []).append(r)
    for cid, rs in by_cell.items():
        store.write_cell(PROFILE, cid, rs, root=tmp_path)
    return store.load_runs(PROFILE, root=tmp_path)


def cell(method, k, speeds, **kw):
    return [run_row(method, k, repeat=i, tok_s=s, **kw) for i, s in enumerate(speeds)]


def test_acceptance_numbers_are_exact(tmp_path):
    # Two repeats of 10 drafts of K=3: 30 draft tokens, 12 accepted each -> rate 0.4,
    # mean length 1 + 24/20 = 2.2, per position [16, 6, 2] / 20.
    spec = dict(drafts=10, draft_tokens=30, accepted=12, per_pos=[8, 3, 1])
    rows = cell("baseline", 0, [100, 101, 99]) + cell("ngram", 3, [150, 151, 149], **spec)
    s = metrics.summarize(load(rows, tmp_path)).set_index("method")
    assert s.loc["ngram", "spec_num_draft_tokens"] == 90
    assert s.loc["ngram", "acceptance_rate"] == pytest.approx(36 / 90)
    assert s.loc["ngram", "mean_acceptance_length"] == pytest.approx(1 + 36 / 30)
    assert s.loc["ngram", "accepted_per_pos_rate"] == pytest.approx([24 / 30, 9 / 30, 3 / 30])
    assert math.isnan(s.loc["baseline", "acceptance_rate"])
    assert s.loc["baseline", "accepted_per_pos_rate"] is None
    assert s.loc["ngram", "tok_s_median"] == 150
    assert s.loc["ngram", "ci_method"] == "min-max"
    assert (s.loc["ngram", "tok_s_ci_low"], s.loc["ngram", "tok_s_ci_high"]) == (149, 151)
    assert s.loc["ngram", "n_repeats"] == 3 and s.loc["ngram", "complete"]
    assert s.loc["ngram", "device_name"] == "test-device"


def test_failed_repeats_do_not_count_and_are_listed(tmp_path):
    rows = (cell("baseline", 0, [100, 100, 100])
            + cell("ngram", 3, [150, 150], drafts=1, draft_tokens=3, accepted=3, per_pos=[1, 1, 1])
            + [run_row("ngram", 3, repeat=2, status="failed")]
            + [run_row("suffix", 3, repeat=i, status="failed") for i in range(3)])
    runs = load(rows, tmp_path)
    s = metrics.summarize(runs).set_index("method")
    assert "suffix" not in s.index  # no ok repeat at all
    assert s.loc["ngram", "n_repeats"] == 2 and s.loc["ngram", "n_failed"] == 1
    assert not s.loc["ngram", "complete"]
    f = metrics.failures(runs).set_index("method")
    assert f.loc["suffix", "n_failed"] == 3 and f.loc["suffix", "n_ok"] == 0
    assert f.loc["ngram", "n_ok"] == 2 and f.loc["suffix", "error"] == "boom"
    assert "baseline" not in f.index


def test_speedup_joins_the_matching_baseline(tmp_path):
    rows = (cell("baseline", 0, [100, 100, 100], batch=1)
            + cell("baseline", 0, [400, 400, 400], batch=4)
            + cell("baseline", 0, [200, 200, 200], batch=1, compilation="mode0")
            + cell("ngram", 3, [150, 160, 140], batch=1)
            + cell("ngram", 3, [300, 300, 300], batch=4)
            + cell("ngram", 3, [300, 300, 300], batch=1, compilation="mode0"))
    sp = metrics.with_speedup(metrics.summarize(load(rows, tmp_path)))
    ng = sp[sp["method"] == "ngram"].set_index(["batch_size", "compilation"])
    assert ng.loc[(1, "default"), "speedup"] == pytest.approx(1.5)
    assert ng.loc[(4, "default"), "speedup"] == pytest.approx(0.75)
    assert ng.loc[(1, "mode0"), "speedup"] == pytest.approx(1.5)  # its own compilation's baseline
    assert ng.loc[(1, "default"), "speedup_ci_low"] == pytest.approx(140 / 100)
    assert ng.loc[(1, "default"), "speedup_ci_high"] == pytest.approx(160 / 100)
    assert (ng["speedup_status"] == "ok").all()
    base = sp[sp["method"] == "baseline"]
    assert (base["speedup"] == 1.0).all() and (base["speedup_status"] == "baseline").all()


def test_missing_and_incomplete_baselines_give_no_speedup(tmp_path):
    rows = (cell("baseline", 0, [100, 100], workload="chat")        # incomplete baseline
            + cell("ngram", 3, [150, 150, 150], workload="chat")
            + cell("ngram", 3, [150, 150, 150], workload="code")    # no baseline at all
            + cell("baseline", 0, [100, 100, 100], workload="math")
            + cell("ngram", 3, [150, 150], workload="math"))         # incomplete cell
    sp = metrics.with_speedup(metrics.summarize(load(rows, tmp_path)))
    ng = sp[sp["method"] == "ngram"].set_index("workload")
    assert ng.loc["chat", "speedup_status"] == "baseline incomplete"
    assert ng.loc["code", "speedup_status"] == "no baseline"
    assert ng.loc["math", "speedup_status"] == "incomplete"
    assert ng["speedup"].isna().all()
    assert ng.loc["code", "baseline_cell_id"] is None


def test_a_speedup_above_the_tokens_per_step_is_not_read(tmp_path):
    # 10 drafts of K = 3, 6 accepted a repeat: 1 + 18 / 30 = 1.6 tokens per target step. A
    # speedup whose whole interval lies above that would need a speculative step cheaper than
    # a plain one: the baseline ran on a slower host (h200-trained's HumanEval baseline).
    spec = dict(drafts=10, draft_tokens=30, accepted=6, per_pos=[4, 1, 1])
    rows = (cell("baseline", 0, [100, 100, 100]) + cell("ngram", 3, [150, 155, 160], **spec)
            + cell("baseline", 0, [50, 50, 50], workload="code")
            + cell("ngram", 3, [150, 155, 160], workload="code", **spec))
    sp = metrics.with_speedup(metrics.summarize(load(rows, tmp_path)))
    ng = sp[sp["method"] == "ngram"].set_index("workload")
    assert ng.loc["chat", "speedup_status"] == "ok" and ng.loc["chat", "speedup"] == pytest.approx(1.55)
    assert ng.loc["code", "speedup_status"] == metrics.ABOVE_TOKENS_PER_STEP
    assert math.isnan(ng.loc["code", "speedup"])
    # ... and every other cell over that slow baseline is inflated too: not read either
    rows += cell("suffix", 3, [60, 61, 62], workload="code", drafts=10, draft_tokens=30, accepted=6)
    sp = metrics.with_speedup(metrics.summarize(load(rows, tmp_path))).set_index(["method", "workload"])
    assert sp.loc[("suffix", "code"), "speedup_status"] == metrics.BASELINE_SUSPECT
    assert math.isnan(sp.loc[("suffix", "code"), "speedup"])
    assert sp.loc[("ngram", "chat"), "speedup_status"] == "ok"


def test_unstable_cells_are_flagged_but_kept(tmp_path):
    rows = cell("baseline", 0, [100, 100, 100]) + cell("ngram", 3, [100, 150, 200])
    sp = metrics.with_speedup(metrics.summarize(load(rows, tmp_path))).set_index("method")
    assert sp.loc["ngram", "unstable"] and not sp.loc["baseline", "unstable"]
    assert sp.loc["ngram", "speedup"] == pytest.approx(1.5)
    assert sp.loc["ngram", "tok_s_cv"] == pytest.approx(np.std([100, 150, 200], ddof=1) / 150)


def test_two_baselines_for_one_key_is_refused(tmp_path):
    rows = (cell("baseline", 0, [100, 100, 100])
            + cell("baseline", 0, [90, 90, 90], cell_id="baseline-stale")
            + cell("ngram", 3, [150, 150, 150]))
    with pytest.raises(ValueError, match="two baseline cells"):
        metrics.with_speedup(metrics.summarize(load(rows, tmp_path)))


def test_missing_column_is_named():
    with pytest.raises(ValueError, match="output_tokens_per_s"):
        metrics.summarize(pd.DataFrame({c: [] for c in metrics.CELL_KEYS + ["status"]}))


def test_empty_runs_give_empty_summary():
    empty = store.RUNS_SCHEMA.empty_table().to_pandas(use_threads=False)
    s = metrics.summarize(empty)
    assert s.empty and list(s.columns) == metrics.SUMMARY_COLUMNS
    assert metrics.with_speedup(s).empty
    assert metrics.failures(empty).empty


def test_crossover_batch(tmp_path):
    rows = []
    for b, (base, spec) in {1: (100, 150), 2: (200, 220), 4: (400, 380), 8: (800, 600)}.items():
        rows += cell("baseline", 0, [base] * 3, batch=b) + cell("ngram", 3, [spec] * 3, batch=b)
    sp = metrics.with_speedup(metrics.summarize(load(rows, tmp_path)))
    x = metrics.crossover_batch(sp).iloc[0]
    assert x["batch_sizes"] == [1, 2, 4, 8]
    assert x["last_paying_batch"] == 2 and x["crossover_batch"] == 4
    assert x["crossover_ci_below_1"] and not x["recovers"]
    assert x["speedups"] == pytest.approx([1.5, 1.1, 0.95, 0.75])


# --------------------------------------------------------------------------- #
# losslessness
# --------------------------------------------------------------------------- #
def token_rows(method, k, outputs, temperature=0.0, compilation="default", batch=2):
    rows = []
    for i, out in enumerate(outputs):
        r = {f.name: None for f in store.TOKENS_SCHEMA}
        r.update(profile=PROFILE, cell_id=f"{method}-k{k}-{compilation}-t{temperature:g}",
                 method=method, num_speculative_tokens=k, batch_size=batch, workload="chat",
                 temperature=temperature, compilation=compilation, request_index=i,
                 prompt_id=f"p{i}", output_token_ids=list(out))
        rows.append(r)
    return rows


def load_tokens(rows, tmp_path):
    by_cell = {}
    for r in rows:
        by_cell.setdefault(r["cell_id"], []).append(r)
    for cid, rs in by_cell.items():
        # a tokens file is written with its runs file; one placeholder run row suffices here
        store.write_cell(PROFILE, cid, [run_row(cell_id=cid)], rs, root=tmp_path)
    return store.load_tokens(PROFILE, root=tmp_path)


def test_losslessness_identical_and_diverging(tmp_path):
    base = [[1, 2, 3, 4], [5, 6, 7, 8]]
    rows = (token_rows("baseline", 0, base)
            + token_rows("ngram", 3, base)                         # identical
            + token_rows("draft", 3, [[1, 2, 9, 9], [5, 6, 7]])    # diverges at 2; prefix at 3
            + token_rows("ngram", 3, [[0]], temperature=0.7)       # sampled: not compared
            + token_rows("ngram", 3, [[1], [5]], compilation="mode0"))  # no baseline there
    out = metrics.losslessness(load_tokens(rows, tmp_path)).set_index(["method", "compilation"])
    assert len(out) == 3
    ng = out.loc[("ngram", "default")]
    assert ng["identical_to_baseline"] and ng["identical_fraction"] == 1.0
    assert pd.isna(ng["first_divergence"]) and ng["status"] == "compared"
    d = out.loc[("draft", "default")]
    assert not d["identical_to_baseline"] and d["identical_requests"] == 0
    assert d["first_divergence"] == 2 and d["first_divergence_prompt_id"] == "p0"
    nb = out.loc[("ngram", "mode0")]
    assert nb["status"] == "no baseline" and nb["compared"] == 0
    assert not nb["identical_to_baseline"]
    per = metrics.compare_requests(load_tokens(rows, tmp_path))
    p1 = per[(per["method"] == "draft") & (per["prompt_id"] == "p1")].iloc[0]
    assert p1["first_divergence"] == 3 and p1["baseline_len"] == 4 and p1["output_len"] == 3


def test_best_k_cells_picks_the_fastest_k_of_each_group():
    summ = pd.DataFrame({
        "profile": "p", "workload": "w",
        "method": ["baseline", "ngram", "ngram", "ngram", "draft", "draft", "ngram"],
        "batch_size": [1, 1, 1, 1, 1, 1, 4],
        "num_speculative_tokens": [0, 1, 3, 5, 2, 4, 3],
        "speedup": [1.0, 1.1, 1.4, 1.2, float("nan"), 0.9, 0.8]})
    best = metrics.best_k_cells(summ).set_index(["method", "batch_size"])["num_speculative_tokens"]
    assert best.to_dict() == {("draft", 1): 4, ("ngram", 1): 3, ("ngram", 4): 3}
    assert metrics.best_k_cells(summ[summ["method"] == "baseline"]).empty
    with pytest.raises(ValueError, match="speedup"):
        metrics.best_k_cells(summ.drop(columns=["speedup"]))
