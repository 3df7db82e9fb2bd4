"""The merge of returned results (specdec.merge): every Parquet file checked (schema,
provenance, the profile's cells) before any is written, stored ok cells kept, and the peer's
``.peer.json`` runs taken in by the same ``specdec merge`` call."""
import json
import tarfile

import pytest

from specdec import merge, peer, profiles, provenance, runner, store
from specdec.merge import MergeError

H200 = "h200-mechanics"


def _rows(cell: profiles.Cell, **over):
    prof = profiles.load_profile(H200)
    ident = runner.identity(prof, cell)
    prov = {**provenance.collect(), "vllm_version": "0.26.0", "vllm_package": "vllm",
            "device_name": "NVIDIA H200", "torch_version": "2.11.0+cu130"}
    runs = []
    for rep in range(3):
        row = {f.name: None for f in store.RUNS_SCHEMA}
        row.update(ident, **prov, repeat=rep, status="ok", wall_s=1.0, num_requests=1,
                   num_prompt_tokens=128, num_output_tokens=128, output_tokens_per_s=128.0,
                   tpot_ms=7.8, engine_start_s=60.0)
        row.update(over)
        runs.append(row)
    tok = {f.name: None for f in store.TOKENS_SCHEMA}
    tok.update(ident, **prov, request_index=0, prompt_id="random-0", output_token_ids=[1, 2])
    tok.update({k: v for k, v in over.items() if k in tok})
    return ident["cell_id"], runs, [tok]


def _cells():
    prof = profiles.load_profile(H200)
    return profiles.expand(prof, ["quick-ceiling-k"])[:3]


def _write(root, cell, **over):
    cid, runs, toks = _rows(cell, **over)
    store.write_cell(H200, cid, runs, toks, root=root)
    return cid


def test_merge_writes_checked_cells(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    ids = [_write(src, c) for c in _cells()]
    rep = merge.merge(src / H200, results_root=dest)
    assert sorted(rep.merged) == sorted(f"{H200}/{i}" for i in ids) and rep.rows == 9
    runs = store.load_runs(H200, dest)
    assert len(runs) == 9 and set(runs["device_name"]) == {"NVIDIA H200"}
    assert len(store.load_tokens(H200, dest)) == 3
    again = merge.merge(src, results_root=dest)  # the whole tree works too
    assert len(again.unchanged) == 3 and not again.merged


def test_merge_accepts_a_tar_archive(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    _write(src, _cells()[0])
    arc = tmp_path / "results.tgz"
    with tarfile.open(arc, "w:gz") as tar:
        tar.add(src, arcname=".")
    assert len(merge.merge(arc, results_root=dest).merged) == 1


@pytest.mark.parametrize("over, match", [
    ({"config_hash": "0123456789abcdef"}, "config_hash .* does not match"),
    ({"git_commit": None}, "lack 'git_commit'"),
    ({"device_name": "cpu"}, "GPU profile but rows say device 'cpu'"),
    ({"vllm_version": "0.32.0"}, "measured with vLLM .*0.32.0.*0.26.0"),
    ({"status": "weird"}, "status must be ok or failed"),
])
def test_merge_refuses_bad_rows_and_writes_nothing(tmp_path, over, match):
    src, dest = tmp_path / "src", tmp_path / "dest"
    good, bad = _cells()[:2]
    _write(src, good)
    _write(src, bad, **over)
    with pytest.raises(MergeError, match=match):
        merge.merge(src, results_root=dest)
    assert not list(dest.rglob("*.parquet")), "an invalid file must stop the whole merge"
    rep = merge.merge(src, results_root=dest, skip_invalid=True)
    assert len(rep.merged) == 1 and any(m for m in rep.refused if "does not match" in m or
                                        "lack" in m or "device" in m or "vLLM" in m or "status" in m)


def test_merge_refuses_cells_the_profile_does_not_define(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    cid = _write(src, _cells()[0])
    # The same rows, claimed for a cell id the profile has no cell for.
    f = store.runs_path(H200, cid, src)

    t = store.read_parquet(f).to_pandas(use_threads=False)
    t["cell_id"] = "draft-1layer-k99-b1-random-t0-deadbeef"
    store.atomic_write_table(store.pa.Table.from_pandas(t, schema=store.RUNS_SCHEMA,
                                                        preserve_index=False),
                             f.with_name("draft-1layer-k99-b1-random-t0-deadbeef.runs.parquet"))
    with pytest.raises(MergeError, match="is not a cell of profile"):
        merge.merge(src, results_root=dest)
    f.with_name("draft-1layer-k99-b1-random-t0-deadbeef.runs.parquet").unlink()
    f.rename(f.with_name("renamed.runs.parquet"))
    with pytest.raises(MergeError, match="does not match its cell_id"):
        merge.merge(src, results_root=dest, profile=H200)


def test_merge_refuses_reference_only_and_unknown_profiles(tmp_path):
    src = tmp_path / "src"
    cid, runs, toks = _rows(_cells()[0])
    for r in runs:
        r["profile"] = "a100-llama3-8b"
    store.write_cell("a100-llama3-8b", cid, runs, root=src)
    with pytest.raises(MergeError, match="reference_only"):
        merge.merge(src, results_root=tmp_path / "dest")
    for r in runs:
        r["profile"] = "no-such-profile"
    store.write_cell("no-such-profile", cid, runs, root=tmp_path / "src2")
    with pytest.raises(MergeError, match="not one of this study's"):
        merge.merge(tmp_path / "src2", results_root=tmp_path / "dest")


def test_merge_keeps_stored_ok_cells(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    cell = _cells()[0]
    cid = _write(dest, cell)
    before = store.runs_path(H200, cid, dest).read_bytes()
    _write(src, cell, status="failed", error="CUDA out of memory")
    rep = merge.merge(src, results_root=dest)
    assert rep.kept == [f"{H200}/{cid}"] and not rep.merged
    assert store.runs_path(H200, cid, dest).read_bytes() == before
    # A different ok measurement replaces the stored one only when asked to.
    _write(src, cell, wall_s=2.0)
    assert merge.merge(src, results_root=dest).kept
    assert merge.merge(src, results_root=dest, replace=True).merged == [f"{H200}/{cid}"]
    assert set(store.load_runs(H200, dest)["wall_s"]) == {2.0}


def test_merge_leaves_out_tokens_without_runs(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    cid = _write(src, _cells()[0])
    store.runs_path(H200, cid, src).unlink()
    rep = merge.merge(src, results_root=dest)
    assert not rep.merged and "tokens without runs" in rep.refused[0]


def test_cli_reports_merge_errors_plainly(tmp_path, capsys):
    from specdec import cli

    src = tmp_path / "src"
    _write(src, _cells()[0], device_name="cpu")
    assert cli.main(["merge", str(src), "--results-root", str(tmp_path / "dest")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdec merge: error: ") and "device 'cpu'" in err
    assert "Traceback" not in err
    assert cli.main(["merge", str(tmp_path / "absent"), "--results-root", str(tmp_path / "d")]) == 2
    assert "does not exist" in capsys.readouterr().err


# --------------------------------------------------------------------------- #
# the peer's runs come back in the same archive (<profile>/peer/<cell_id>.peer.json)
# --------------------------------------------------------------------------- #
def _peer_record(cell: profiles.Cell, **over):
    """What ``specdec peer run`` writes for one cell (as tests/test_peer.py builds it)."""
    prof = profiles.load_profile(H200)
    rec = dict(profile=H200, cell_id=profiles.cell_id(prof, cell),
               config_hash=profiles.config_hash(profiles.cell_config(prof, cell)),
               method=cell.method, num_speculative_tokens=cell.num_speculative_tokens,
               batch_size=cell.batch_size, acceptance_alpha=cell.acceptance, input_len=128,
               output_len=128, argv=["-m", "vllm"], env={}, wall_s=50.0, avg_latency_s=0.5,
               latencies_s=[0.5, 0.4, 0.6], provenance={"vllm_version": "0.26.0"})
    rec.update(over)
    return rec


def _write_peer(root, cell, name=None, **over):
    rec = _peer_record(cell, **over)
    d = root / rec["profile"] / "peer"
    d.mkdir(parents=True, exist_ok=True)
    f = d / (name or f"{rec['cell_id']}.peer.json")
    f.write_text(json.dumps(rec))
    return f


def _archive(src, arc):
    """As scripts/lease.sh returns it: the results folder's files under ``./``."""
    with tarfile.open(arc, "w:gz") as tar:
        tar.add(src, arcname=".")
    return arc


def test_one_merge_takes_the_rows_and_the_peer_runs_of_a_returned_archive(tmp_path, capsys):
    from specdec import cli

    src, dest = tmp_path / "src", tmp_path / "dest"
    cell = _cells()[0]
    cid = _write(src, cell)
    _write_peer(src, cell)
    arc = _archive(src, tmp_path / "results.tgz")
    assert cli.main(["merge", str(arc), "--profile", H200, "--results-root", str(dest)]) == 0
    out = capsys.readouterr().out
    assert "1 cell(s) merged (3 run rows)" in out and "1 peer result(s) merged" in out
    assert set(store.load_runs(H200, dest)["cell_id"]) == {cid}
    runs = peer.load(H200, dest)
    assert list(runs["cell_id"]) == [cid] and runs.loc[0, "peer_latency_median_s"] == 0.5
    assert (peer.peer_dir(H200, dest) / f"{cid}.peer.json").is_file()
    again = merge.merge(arc, profile=H200, results_root=dest)
    assert again.unchanged == [f"{H200}/{cid}"] and len(again.peer) == 1


def test_a_bad_peer_file_stops_the_whole_merge(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    cell = _cells()[0]
    _write(src, cell)
    _write_peer(src, cell, name="bad.peer.json", avg_latency_s="fast")
    arc = _archive(src, tmp_path / "results.tgz")
    with pytest.raises(MergeError, match=r"results\.tgz:bad\.peer\.json: not a peer result"):
        merge.merge(arc, profile=H200, results_root=dest)
    assert not dest.exists(), "nothing may be written when a peer file is bad"
    rep = merge.merge(arc, profile=H200, results_root=dest, skip_invalid=True)
    assert len(rep.merged) == 1 and not rep.peer and "bad.peer.json" in rep.refused[0]
    assert not peer.peer_dir(H200, dest).exists()


def test_peer_runs_go_to_the_profile_they_name(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    cell = _cells()[0]
    f = _write_peer(src, cell)  # peer runs alone: a lease that ran only `peer:` experiments
    rep = merge.merge(src, results_root=dest)
    assert not rep.merged and rep.peer == [str(peer.peer_dir(H200, dest) / f.name)]
    assert "1 peer result(s) merged" in rep.summary()
    with pytest.raises(MergeError, match="a peer run of profile 'h200-mechanics', not 'h200-surface'"):
        merge.merge(src, profile="h200-surface", results_root=tmp_path / "d2")
    _write_peer(src, cell, name="x.peer.json", profile="no-such-profile")
    with pytest.raises(MergeError, match="'no-such-profile', not one of this study's"):
        merge.merge(src, results_root=tmp_path / "d3")


def test_a_source_without_result_files_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "run.log").write_text("nothing measured")
    with pytest.raises(MergeError, match=r"no \.parquet or \.peer\.json files"):
        merge.merge(tmp_path / "src", results_root=tmp_path / "dest")


def test_a_wait_on_a_running_lease_returns_what_has_landed_and_it_merges(tmp_path):
    """scripts/lease.sh wait: while the background run goes on, every wait returns the cells
    measured so far (lease 13 lost its machine mid-run and, before this, all of its rows)."""
    import os
    import subprocess
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    tmp = Path("/tmp")
    ours = [tmp / "results", tmp / "lease-start", tmp / "bgout", tmp / "bg.pid", tmp / "bg.log"]
    if any(p.exists() for p in ours):
        pytest.skip("/tmp holds a lease's files (a lease runs on this machine?)")
    cells = _cells()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        old = _write(tmp / "results", cells[0])  # an earlier lease's cell, dated back
        for f in (tmp / "results" / H200).iterdir():
            os.utime(f, (946684800, 946684800))
        (tmp / "lease-start").touch()
        time.sleep(1.1)  # -newer compares modification times (some filesystems keep seconds)
        new = _write(tmp / "results", cells[1])
        (tmp / "bgout").mkdir()
        (tmp / "bg.pid").write_text(str(sleeper.pid))
        (tmp / "bg.log").write_text("stage 1/2: k-sweep\n")
        out = tmp_path / "out"
        done = subprocess.run(["bash", "scripts/lease.sh", "wait", "1"], cwd=repo, text=True,
                              capture_output=True, env={**os.environ, "OUT": str(out)})
        assert done.returncode == 0, done.stderr
        assert "so far: 1 cell(s) in results.tgz" in done.stdout
        assert "background run still going" in done.stdout
        assert (out / "bg.log").is_file()
        rep = merge.merge(out / "results.tgz", profile=H200, results_root=tmp_path / "dest")
        assert rep.merged == [f"{H200}/{new}"] and f"{H200}/{old}" not in rep.merged
    finally:
        sleeper.kill()
        sleeper.wait()
        for p in ours:
            subprocess.run(["rm", "-rf", str(p)], check=False)
