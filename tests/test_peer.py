"""The peer (`vllm bench latency`) runs: built from the profile the harness runs, stored
checked, and set beside the harness's rows. No engine here: the commands are inspected."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from specdec import peer, profiles
from specdec.profiles import load_profile


@pytest.fixture(scope="module")
def surface():
    return load_profile("h200-surface")


def _arg(argv, flag):
    return argv[list(argv).index(flag) + 1]


def test_commands_mirror_the_harness_cells(surface):
    peer_out = Path("o")
    runs = peer.commands(surface, "peer-latency", peer_out)
    cells = profiles.expand(surface, ["peer-latency"])
    assert {r.cell_id for r in runs} == {profiles.cell_id(surface, c) for c in cells}
    for r in runs:
        a = r.argv
        assert a[2:5] == ("vllm.entrypoints.cli.main", "bench", "latency")
        assert _arg(a, "--batch-size") == str(r.cell.batch_size)
        assert _arg(a, "--input-len") == "128" and _arg(a, "--output-len") == "128"
        assert _arg(a, "--load-format") == "dummy" and "--skip-tokenizer-init" in a
        assert _arg(a, "--output-json").startswith(str(peer_out))
        # The same runner and sampler pins as the harness's engines.
        assert r.env == dict(surface.engine.env)
        if r.cell.method == "baseline":
            assert "--speculative-config" not in a
        else:
            spec = json.loads(_arg(a, "--speculative-config"))
            assert spec["method"] == "eagle3" and spec["num_speculative_tokens"] == 4
            assert spec["rejection_sample_method"] == "synthetic"
            assert spec["synthetic_acceptance_rates"] == pytest.approx([0.8, 0.64, 0.512, 0.4096])
            assert spec["model"].endswith("eagle3-llama-3-8b")


def test_a_cell_without_fixed_length_random_prompts_has_no_peer(surface):
    with pytest.raises(peer.PeerError, match="random-tokens"):
        peer.commands(surface, "surface-k4", Path("o"))


def _record(**over):
    base = dict(profile="h200-surface", cell_id="eagle3-k4-b1-x", config_hash="abc",
                method="eagle3", num_speculative_tokens=4, batch_size=1, acceptance_alpha=0.8,
                input_len=128, output_len=128, argv=["-m", "vllm"], env={}, wall_s=50.0,
                avg_latency_s=0.5, latencies_s=[0.5, 0.4, 0.6], provenance={"vllm_version": "0.26.0"})
    base.update(over)
    return base


def test_merge_checks_every_file_and_load_reads_them(tmp_path):
    src = tmp_path / "src" / "h200-surface" / "peer"
    src.mkdir(parents=True)
    (src / "eagle3-k4-b1-x.peer.json").write_text(json.dumps(_record()))
    archive = tmp_path / "results.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "src", arcname=".")
    root = tmp_path / "results"
    assert len(peer.merge(archive, "h200-surface", root)) == 1
    df = peer.load("h200-surface", root)
    assert df.loc[0, "peer_latency_median_s"] == 0.5
    assert df.loc[0, "peer_tok_s"] == pytest.approx(1 * 128 / 0.5)

    summary = pd.DataFrame({"cell_id": ["eagle3-k4-b1-x"], "tok_s_median": [230.4],
                            "tok_s_ci_low": [228.0], "tok_s_ci_high": [233.0]})
    cmp = peer.compare(df, summary)
    assert cmp.loc[0, "harness_over_peer"] == pytest.approx(230.4 / 256.0)


def test_a_malformed_peer_file_is_refused_naming_it(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "bad.peer.json").write_text(json.dumps(_record(avg_latency_s="fast", extra=1)))
    with pytest.raises(peer.PeerError, match="bad.peer.json"):
        peer.merge(src, "h200-surface", tmp_path / "results")
    assert not (tmp_path / "results").exists()  # nothing written


def test_a_peer_file_of_another_profile_is_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.peer.json").write_text(json.dumps(_record(profile="cpu-smollm2")))
    with pytest.raises(peer.PeerError, match="cpu-smollm2"):
        peer.merge(src, "h200-surface", tmp_path / "results")


def test_lease_drift_names_the_panels_move_between_the_two_leases():
    cmp = pd.DataFrame({"method": ["eagle3", "baseline"], "num_speculative_tokens": [4, 0],
                        "acceptance_alpha": [0.8, None], "batch_size": [16, 1],
                        "harness_tok_s": [6404.0, 201.0], "peer_tok_s": [6135.0, 201.0],
                        "harness_lease": ["L19", "L19"], "peer_lease": ["L20", "L19"]})
    panel = pd.DataFrame({"lease_id": ["L19", "L20", "L19", "L20"],
                          "panel_phase": ["start", "start", "end", "end"],
                          "method": ["eagle3"] * 4, "batch_size": [16] * 4,
                          "step_ms": [8.40, 8.61, 8.73, 8.59]})
    text = peer.lease_drift(cmp, panel)
    assert "eagle3 (K = 4, α = 0.8) at batch 16 (+2.5 % at the start and -1.6 % at the end)" in text
    assert "baseline" not in text  # the same lease: nothing to say
    assert "no panel cell" in peer.lease_drift(cmp, None)
    assert "same lease" in peer.lease_drift(cmp.assign(peer_lease="L19"), panel)
    full = cmp.assign(harness_over_peer=cmp["harness_tok_s"] / cmp["peer_tok_s"],
                      peer_slowest_over_fastest=1.0)
    assert "the harness in lease `L19`, the peer in `L20`" in peer.comparison_sentence(full)
