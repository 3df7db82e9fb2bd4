"""specdec.carry: the carrying calls of a lease stay under the device tool's limits."""
from __future__ import annotations

import json
import subprocess

import pytest

from specdec import carry

MIB = carry.MIB


def _files(tmp_path, sizes):
    out = []
    for i, s in enumerate(sizes):
        f = tmp_path / f"part.{i:03d}"
        f.write_bytes(b"\0" * s)
        out.append(f)
    return out


def test_sizes_count_whole_blocks():
    assert carry.on_disk(0) == 0
    assert carry.on_disk(1) == 4096
    assert carry.on_disk(4096) == 4096
    assert carry.on_disk(4097) == 8192


def test_plan_keeps_every_call_under_the_limit_and_the_path_count(tmp_path):
    # the refused call of lease 5: a 28.1 MB bundle part and an 18.4 MB GGUF part beside a tree
    # of 22 MiB in blocks go to two calls
    files = _files(tmp_path, [28_132_412, 18_362_432])
    calls = carry.plan(files, tree=22 * MIB)
    assert len(calls) == 2
    # small files share a call, at most 8 to a call
    (tmp_path / "small").mkdir()
    many = _files(tmp_path / "small", [1000] * 10)
    calls = carry.plan(many, tree=20 * MIB)
    assert [len(c) for c in calls] == [8, 2]
    for c in carry.plan(files + many, tree=20 * MIB):
        assert 20 * MIB + sum(carry.on_disk(f.stat().st_size) for f in c) <= carry.CALL_BYTES - carry.MARGIN
        assert len(c) <= carry.CALL_PATHS


def test_a_file_that_cannot_travel_is_refused_before_any_call(tmp_path):
    big = _files(tmp_path, [45 * MIB])
    with pytest.raises(ValueError, match="does not fit in one call.*split it"):
        carry.plan(big, tree=20 * MIB)


def test_tree_counts_what_the_device_copies(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "tracked.txt").write_text("x" * 5000)
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "big.bin").write_bytes(b"\0" * 100_000)
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.txt", ".gitignore"], check=True)
    (tmp_path / "untracked.txt").write_text("y")
    # tracked (2 blocks) + .gitignore (1) + untracked, not ignored (1); the ignored file is not
    assert carry.tree_bytes(tmp_path) == 4 * 4096


def test_lease_files_refuses_a_missing_source(tmp_path):
    (tmp_path / ".bundle").mkdir()
    (tmp_path / ".bundle" / "specdec-bundle.tar.xz.000").write_bytes(b"1")
    assert [str(p) for p in carry.lease_files(tmp_path)] == [".bundle/specdec-bundle.tar.xz.000"]
    with pytest.raises(FileNotFoundError, match="specdec train carry"):
        carry.lease_files(tmp_path, training=True)


def test_lease_sh_receive_takes_every_carried_folder_where_carry_says():
    """`carry.lease_files` and `scripts/lease.sh receive` both know the carried folders: a
    folder added to one must be added to the other, or its files travel and are never used."""
    from specdec import paths

    script = (paths.ROOT / "scripts" / "lease.sh").read_text()
    receive = script[script.index("\nreceive)"):script.index("\n  ;;", script.index("\nreceive)"))]
    copies = [line.split() for line in receive.splitlines() if "cp -v" in line]
    for folder, dest in carry.CARRIED.items():
        hit = [c for c in copies if any(w.startswith(folder + "/") for w in c)]
        assert hit, f"lease.sh receive does not copy {folder}/"
        assert any(w.rstrip("/") == dest for c in hit for w in c), (folder, dest, hit)


def test_still_to_carry_names_what_a_machine_lacks(tmp_path):
    """After a machine was taken back, the fresh one holds only the later calls' files: the
    receive step names the rest from the indexes the first call brings."""
    import inspect

    from specdec import bundle

    b, t = tmp_path / "b", tmp_path / "t"
    b.mkdir()
    (b / "specdec-bundle.tar.xz.001").write_bytes(b"2")  # a later call's part, no manifest yet
    assert carry.still_to_carry(b, t) == [str(b / "manifest.json")]  # t/ absent: nothing of it
    (b / "manifest.json").write_text(json.dumps({"format": bundle.FORMAT, "parts": [
        {"name": f"specdec-bundle.tar.xz.00{i}"} for i in range(3)]}))
    t.mkdir()
    (t / "carry.json").write_text(json.dumps({"files": {"target.gguf.000": "h", "split.json": "h"}}))
    (t / "split.json").write_text("{}")
    assert carry.still_to_carry(b, t) == [str(b / "specdec-bundle.tar.xz.000"),
                                           str(b / "specdec-bundle.tar.xz.002"),
                                           str(t / "target.gguf.000")]
    for f in ("specdec-bundle.tar.xz.000", "specdec-bundle.tar.xz.002"):
        (b / f).write_bytes(b"1")
    (t / "target.gguf.000").write_bytes(b"1")
    assert carry.still_to_carry(b, t) == []
    defaults = inspect.signature(carry.still_to_carry).parameters  # where receive puts them
    assert {p.default for p in defaults.values()} <= set(carry.CARRIED.values())


def test_plan_refuses_a_recorded_training_from_elsewhere(tmp_path, capsys):
    with pytest.raises(ValueError, match="travels from .train-out"):
        carry.lease_files(tmp_path, bundle=False, recorded=tmp_path / "parts")
    from specdec import cli

    assert cli.main(["carry-plan", "--no-bundle", "--recorded", ".train-out/no-such-lease"]) == 2
    assert "nothing to carry" in capsys.readouterr().err


def test_the_training_carry_splits_its_gguf_to_fit_beside_the_tree(tmp_path):
    # 25 MB parts fitted beside a 38.9 MiB tree and not beside 40.4 MiB (lease 30's plan
    # refused them): the default part size follows the tree, and a part so made travels.
    carry_part_bytes = carry.part_bytes_beside
    for tree in (int(38.9 * MIB), int(40.4 * MIB), 50 * MIB):
        part = carry_part_bytes(tree)
        assert carry.plan(_files(tmp_path, [part]), tree)
        assert part % 1_000_000 == 0
    assert carry_part_bytes(int(40.4 * MIB)) < 25_000_000
    with pytest.raises(SystemExit, match="too little"):
        carry_part_bytes(60 * MIB)


def test_cutting_the_gguf_again_leaves_no_part_of_the_earlier_cut(tmp_path):
    """Cut finer in an earlier session (11 MB parts: 9 of them), then coarser beside a smaller
    tree: the surplus part would be listed in carry.json and reassembled after the new ones."""
    from specdec.training import device

    src = tmp_path / "target.gguf"
    src.write_bytes(bytes(range(256)) * 40)  # 10240 bytes
    out = tmp_path / "carry"
    out.mkdir()
    (out / "target.gguf.json").write_text("{}")  # not a part: kept
    assert len(device.cut(src, out, "target.gguf", 1100)) == 10
    parts = device.cut(src, out, "target.gguf", 1400)
    assert [p.name for p in parts] == [f"target.gguf.{i:03d}" for i in range(8)]
    assert sorted(out.glob("target.gguf.*")) == sorted(parts + [out / "target.gguf.json"])
    assert b"".join(p.read_bytes() for p in parts) == src.read_bytes()


def test_a_fit_whose_cap_leaves_its_measure_too_little_is_refused_before_it_starts():
    """`lease.sh train bg fit S` with THEN: a cap that leaves less than the install, a
    measure's 150 s and the deadline's 40 s before THEN_END is refused at once, naming the cap
    that fits (lease 2026-12-08-h100-50 trained to its cap, then measured nothing)."""
    import time

    from specdec import paths

    end = int(time.time()) + 900
    env = {"PATH": "/usr/bin:/bin", "THEN": "600 h100-plateau-v2 data-eagle3", "COMMIT": "0" * 40,
           "THEN_END": str(end)}
    r = subprocess.run(["bash", "scripts/lease.sh", "train", "bg", "fit", "800", "--only", "x"],
                       cwd=paths.ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "it needs 220" in r.stdout
    cap = int(r.stdout.split("a cap of at most ")[1].split("s")[0])
    assert 678 <= cap <= 680  # 900 - 220, less the seconds the call took
