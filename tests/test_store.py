"""The results store: schema on write and read, atomic writes, resume, provenance."""
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specdec import provenance, store


def _run_row(**over):
    row = {f.name: None for f in store.RUNS_SCHEMA}
    row.update(provenance.collect())
    row.update(profile="p", cell_id="c1", config_hash="abc", experiment_tags=["e"],
               method="ngram", num_speculative_tokens=2, batch_size=1, workload="w",
               temperature=0.0, max_tokens=8, compilation="default", repeat=0, status="ok",
               wall_s=1.0, num_requests=1, num_output_tokens=8, output_tokens_per_s=8.0,
               spec_accepted_per_pos=[3, 1])
    row.update(over)
    return row


def _token_row(**over):
    row = {f.name: None for f in store.TOKENS_SCHEMA}
    row.update(provenance.collect())
    row.update(profile="p", cell_id="c1", config_hash="abc", method="ngram",
               request_index=0, prompt_id="q0", output_token_ids=[1, 2, 3])
    row.update(over)
    return row


def test_round_trip_and_resume(tmp_path):
    assert store.cell_status("p", "c1", tmp_path) == "missing"
    store.write_cell("p", "c1", [_run_row(repeat=i) for i in range(3)], [_token_row()], tmp_path)
    assert store.is_done("p", "c1", tmp_path)
    runs = store.load_runs("p", tmp_path)
    assert list(runs["repeat"]) == [0, 1, 2]
    assert list(runs["spec_accepted_per_pos"][0]) == [3, 1]
    assert list(store.load_tokens("p", tmp_path)["output_token_ids"][0]) == [1, 2, 3]
    store.check_provenance(runs)


def test_stored_files_carry_no_column_statistics(tmp_path):
    """Every read takes a whole file; the statistics were a fifth of the committed rows' bytes,
    which every lease call carries. The committed files were rewritten without them."""
    store.write_cell("p", "c1", [_run_row()], [_token_row()], tmp_path)
    files = sorted(tmp_path.rglob("*.parquet"))
    committed = sorted(store.paths.DATA_DIR.rglob("*.parquet"))
    assert len(files) == 2 and len(committed) > 1000
    for f in files + committed:
        meta = pq.ParquetFile(f).metadata
        assert all(meta.row_group(g).column(c).statistics is None
                   for g in range(meta.num_row_groups) for c in range(meta.num_columns)), f


def test_failed_cell_is_not_done(tmp_path):
    store.write_cell("p", "c1", [_run_row(status="failed", error="OOM")], root=tmp_path)
    assert store.cell_status("p", "c1", tmp_path) == "failed"
    assert not store.is_done("p", "c1", tmp_path)
    assert len(store.load_runs("p", tmp_path, only_ok=True)) == 0


def test_rows_with_missing_or_extra_columns_are_refused(tmp_path):
    row = _run_row()
    del row["git_commit"]
    with pytest.raises(store.SchemaError, match="git_commit"):
        store.write_cell("p", "c1", [row], root=tmp_path)
    with pytest.raises(store.SchemaError, match="undocumented.*surprise"):
        store.write_cell("p", "c1", [_run_row(surprise=1)], root=tmp_path)
    with pytest.raises(store.SchemaError, match="do not fit"):
        store.write_cell("p", "c1", [_run_row(batch_size="one")], root=tmp_path)
    assert not list(tmp_path.rglob("*.parquet")), "a refused write must leave no file"


def test_crash_during_write_keeps_the_old_file(tmp_path, monkeypatch):
    store.write_cell("p", "c1", [_run_row(wall_s=1.0)], root=tmp_path)

    def boom(table, where, *a, **k):
        open(where, "wb").write(b"half a file")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(KeyboardInterrupt):
        store.write_cell("p", "c1", [_run_row(wall_s=2.0)], root=tmp_path)
    monkeypatch.undo()
    assert store.load_runs("p", tmp_path)["wall_s"].tolist() == [1.0]
    assert [f.name for f in (tmp_path / "p").iterdir()] == ["c1.runs.parquet"]


def test_foreign_file_fails_schema_check_on_read(tmp_path):
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"x": [1]}), tmp_path / "p" / "bad.runs.parquet")
    with pytest.raises(store.SchemaError, match="columns differ"):
        store.load_runs("p", tmp_path)


def test_provenance_check_refuses_rows_without_origin(tmp_path):
    store.write_cell("p", "c1", [_run_row(git_commit=None)], root=tmp_path)
    with pytest.raises(store.SchemaError, match="git_commit"):
        store.check_provenance(store.load_runs("p", tmp_path))


def test_provenance_has_every_column():
    prov = provenance.collect()
    assert tuple(prov) == provenance.PROVENANCE_COLUMNS
    assert prov["timestamp_utc"].endswith("Z")
    assert prov["python_version"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads counted in /proc (Linux)")
def test_reading_rows_starts_no_arrow_threads(tmp_path):
    """A thread of Arrow's pools alive at exit aborts the process after its work is done (exit
    -6, "terminate called without an active exception"; a CI run failed so). Reading rows must
    start none: counted in a fresh interpreter, where no other test has started the pools."""
    import subprocess
    import sys

    store.write_cell("p", "c1", [_run_row(repeat=i) for i in range(3)], [_token_row()], tmp_path)
    code = ("import os, sys, pyarrow.parquet as pq\n"
            "from pathlib import Path\nfrom specdec import store\n"
            "n = lambda: len(os.listdir('/proc/self/task'))\n"
            "before = n(); root = Path(sys.argv[1])\n"
            "store.load_runs('p', root); store.load_tokens('p', root)\n"
            "store.read_parquet(store.runs_path('p', 'c1', root), columns=['repeat'])\n"
            "print(before, n())\n"
            "pq.read_table(store.runs_path('p', 'c1', root))\n"  # what it replaced
            "print(n(), flush=True); os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    before, after, with_read_table = map(int, out)
    assert after == before
    assert with_read_table > after  # the count can see the threads it guards against
