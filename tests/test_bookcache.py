"""Chapters keyed by their inputs: an unchanged chapter is not re-executed, a changed input
(its campaign's rows, its source, the library) re-executes exactly the chapters that read it,
and the HTML is rebuilt only when something it is built from changed."""
import json
import shutil

import pytest

from specdec import book, bookcache, paths


def _notebook(path, profiles=None):
    src = "mode = 'replay'\n" + (f"profiles = {profiles!r}\n" if profiles is not None else "")
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# t"},
                    {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": src,
                     "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


@pytest.fixture
def tree(tmp_path, monkeypatch):
    for name, sub in [("RESULTS_DIR", "data/results"), ("PROFILES_DIR", "profiles"),
                      ("DATA_DIR", "data"), ("NOTEBOOKS_DIR", "notebooks"), ("BOOK_DIR", "book")]:
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setattr(paths, name, tmp_path / sub)
    for p in ("a", "b"):
        (tmp_path / "profiles" / f"{p}.yaml").write_text(f"name: {p}\n")
        (tmp_path / "data" / "results" / p).mkdir()
        (tmp_path / "data" / "results" / p / "c.runs.parquet").write_bytes(b"rows " + p.encode())
    nbs = {"reads_a": _notebook(tmp_path / "notebooks" / "reads_a.ipynb", ["a"]),
           "reads_all": _notebook(tmp_path / "notebooks" / "reads_all.ipynb")}
    executed = []

    def fake_execute(nb, out_dir, parameters):
        executed.append(nb.stem)
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(nb, out_dir / nb.name)
        return out_dir / nb.name

    monkeypatch.setattr(book, "execute_notebook", fake_execute)
    return {"root": tmp_path, "nbs": nbs, "executed": executed}


def test_profiles_a_chapter_reads(tree):
    assert bookcache.notebook_profiles(tree["nbs"]["reads_a"]) == ["a"]
    assert bookcache.notebook_profiles(tree["nbs"]["reads_all"]) is None
    assert bookcache.notebook_profiles(tree["nbs"]["reads_all"], {"profiles": ["b"]}) == ["b"]


def test_only_chapters_whose_inputs_changed_are_executed(tree):
    out = tree["root"] / "book" / "chapters"
    assert sorted(bookcache.execute_stale(out_dir=out)) == ["reads_a", "reads_all"]
    assert bookcache.execute_stale(out_dir=out) == []  # nothing changed: nothing runs
    (tree["root"] / "data" / "results" / "b" / "d.runs.parquet").write_bytes(b"new row")
    assert bookcache.execute_stale(out_dir=out) == ["reads_all"]  # reads_a does not read b
    (tree["root"] / "data" / "results" / "a" / "c.runs.parquet").write_bytes(b"remeasured")
    assert sorted(bookcache.execute_stale(out_dir=out)) == ["reads_a", "reads_all"]
    (tree["root"] / "data" / "leases").mkdir()
    (tree["root"] / "data" / "leases" / "leases.yaml").write_text("[]\n")
    assert sorted(bookcache.execute_stale(out_dir=out)) == ["reads_a", "reads_all"]
    _notebook(tree["nbs"]["reads_a"], ["a", "b"])
    assert bookcache.execute_stale(out_dir=out) == ["reads_a"]
    (out / "reads_all.ipynb").unlink()  # an executed copy that went missing
    assert bookcache.execute_stale(out_dir=out) == ["reads_all"]
    assert tree["executed"].count("reads_a") == 4


def test_html_is_rebuilt_only_when_its_sources_changed(tree, monkeypatch):
    builds = []

    def fake_build(quiet=False):
        builds.append(1)
        index = paths.BOOK_DIR / "_build" / "html" / "index.html"
        index.parent.mkdir(parents=True, exist_ok=True)
        index.write_text("<html></html>")
        return index

    monkeypatch.setattr(book, "build", fake_build)
    (paths.BOOK_DIR / "intro.md").write_text("# intro\n")
    assert len(bookcache.update_book()) == 2 and len(builds) == 1
    assert bookcache.update_book() == [] and len(builds) == 1  # the second run: seconds
    (paths.BOOK_DIR / "intro.md").write_text("# intro, edited\n")
    assert bookcache.update_book() == [] and len(builds) == 2
