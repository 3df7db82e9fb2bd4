"""Every chapter notebook executes with papermill in replay mode, in a fresh kernel.

Also: each notebook follows the chapter skeleton (title, a ``parameters`` cell with the
papermill knobs, prose), a chapter whose campaign has no rows says so plainly, and the numbers a
chapter glues into its prose are the ones the library computes from the stored rows (checked on
rows written to a temporary folder, never to data/).
"""
from __future__ import annotations

import json
import re

import nbformat
import numpy as np
import pytest

from specdec import book, metrics, paths, profiles as P, provenance, store

pytestmark = pytest.mark.book

NOTEBOOKS = book.notebooks()
#: The experiment chapters written against specdec.book.chapter_data.
EXPERIMENT_CHAPTERS = ["draft_selection", "k_sweep", "batch_scaling", "methods", "protocol"]


def test_there_are_notebooks():
    names = {p.stem for p in NOTEBOOKS}
    assert set(EXPERIMENT_CHAPTERS) <= names, f"missing chapters: {set(EXPERIMENT_CHAPTERS) - names}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_in_replay_mode(notebook, executed_chapters):
    # executed once per session in a fresh kernel (conftest.executed_chapters), the copy the
    # book is built from (tests/test_book.py)
    out = executed_chapters[notebook.stem]
    if isinstance(out, Exception):
        raise out
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"{notebook.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
    # Prose may only cite glued values (tests/test_prose.py); each must exist once executed.
    # (`name:myst` pastes a Markdown value parsed as MyST: myst-nb's format suffix)
    cited = {re.sub(r":(myst|commonmark)$", "", name) for c in nb.cells if c.cell_type == "markdown"
             for name in re.findall(r"\{glue(?::\w+)?\}`([^`]+)`", c.source)}
    glued = {o.get("metadata", {}).get("scrapbook", {}).get("name")
             for c in nb.cells for o in c.get("outputs", [])}
    assert cited <= glued, f"{notebook.name}: prose cites unglued {sorted(cited - glued)}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_a_chapter(notebook):
    nb = nbformat.read(notebook, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.lstrip().startswith("# "), \
        f"{notebook.name}: the first cell must be the markdown title"
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, f"{notebook.name}: needs exactly one cell tagged 'parameters'"
    assert 'mode = "replay"' in params[0].source, f"{notebook.name}: default mode must be replay"
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        f"{notebook.name}: committed notebooks carry no outputs (papermill executes them)"
    # every cell has an id (nbformat 4.5; a missing one is a warning now, an error in a future
    # nbformat), and papermill reads every parameter (a line it cannot parse, as a comment with
    # an apostrophe, is left out of `papermill --help-notebook` and of its parameter checks)
    assert nb.nbformat_minor >= 5 and all(c.get("id") for c in nb.cells), \
        f"{notebook.name}: a cell without an id"
    from papermill.translators import PythonTranslator

    assigned = [ln for ln in params[0].source.splitlines()
                if re.match(r"^[A-Za-z_]\w*\s*=", ln)]
    parsed = PythonTranslator.inspect(params[0])
    assert len(parsed) == len(assigned), \
        f"{notebook.name}: papermill parses {[q.name for q in parsed]} of {assigned}"


def _glued(nb_path, name: str) -> str:
    """The text/markdown (or text/plain) value glued under ``name`` in an executed notebook."""
    nb = nbformat.read(nb_path, as_version=4)
    for c in nb.cells:
        for o in c.get("outputs", []):
            md = o.get("metadata", {}).get("scrapbook", {})
            if md.get("name") == name:
                prefix, data = md.get("mime_prefix", ""), o["data"]
                return data.get(prefix + "text/markdown") or data.get(prefix + "text/plain")
    raise AssertionError(f"{nb_path.name}: nothing glued under {name!r}")


@pytest.mark.parametrize("chapter", EXPERIMENT_CHAPTERS)
def test_chapter_without_rows_says_so(chapter, tmp_path):
    empty = tmp_path / "results"
    empty.mkdir()
    out = book.execute_notebook(paths.NOTEBOOKS_DIR / f"{chapter}.ipynb", tmp_path / "out",
                                {"mode": "replay", "results_root": str(empty)})
    text = json.dumps(nbformat.read(out, as_version=4).cells)
    assert "not measured yet" in text, f"{chapter}: no plain statement that data is missing"


def _synthetic_campaign(root, experiment: str) -> None:
    """Schema-valid rows for one experiment of cpu-smollm2 under ``root`` (a tmp dir)."""
    prof = P.load_profile("cpu-smollm2")
    prov = {**provenance.collect(), "device_name": "synthetic-test-rows"}
    rng = np.random.default_rng(1)
    speed = {"baseline": 50.0, "ngram": 70.0, "suffix": 65.0, "draft-self": 45.0,
             "draft-trunc-8": 30.0, "draft-trunc-16": 25.0}
    for cell in P.expand(prof, [experiment]):
        cid, k = P.cell_id(prof, cell), cell.num_speculative_tokens
        rows = []
        for r in range(3):
            tps = speed[cell.method] * (1 + 0.3 * k / 8) * (1 + rng.normal(0, 0.005))
            n_out = 64 * cell.batch_size
            drafts = n_out // 2 if k else None
            rows.append(dict(
                profile=prof.name, cell_id=cid, config_hash=P.config_hash(P.cell_config(prof, cell)),
                experiment_tags=[experiment], method=cell.method,
                draft=prof.method(cell.method).draft, num_speculative_tokens=k,
                batch_size=cell.batch_size, workload=cell.workload, temperature=cell.temperature,
                max_tokens=64, compilation="default", repeat=r, status="ok", error=None,
                wall_s=n_out / tps, num_requests=cell.batch_size, num_prompt_tokens=10,
                num_output_tokens=n_out, output_tokens_per_s=tps, tpot_ms=1000 / tps,
                spec_num_drafts=drafts, spec_num_draft_tokens=drafts * k if k else None,
                # 80 % of draft tokens accepted: 1 + 0.8 K tokens per step, above every speedup
                # here (a speedup above its tokens per step is not read: metrics.with_speedup)
                spec_num_accepted_tokens=(drafts * 4 // 5) * k if k else None,
                spec_accepted_per_pos=[drafts * 4 // 5] * k if k else None,
                peak_memory_bytes=2**30, kv_cache_bytes=2**30, engine_start_s=1.0, **prov,
                **{c: None for c in store.ADDED_COLUMNS}))
        store.write_cell(prof.name, cid, rows, root=root)


def test_glued_numbers_come_from_the_rows(tmp_path):
    """The K-sweep chapter's headline is the best speedup metrics computes from the same rows."""
    root = tmp_path / "results"
    _synthetic_campaign(root, "k-sweep")
    out = book.execute_notebook(paths.NOTEBOOKS_DIR / "k_sweep.ipynb", tmp_path / "out",
                                {"mode": "replay", "results_root": str(root),
                                 "profiles": ["cpu-smollm2"]})
    summary = metrics.with_speedup(metrics.summarize(store.load_runs("cpu-smollm2", root=root)))
    spec = summary[summary["method"] != "baseline"]
    top = spec.loc[spec["speedup"].idxmax()]
    headline = _glued(out, "k_best_summary")
    assert f"{top['speedup']:.2f}×" in headline and top["method"] in headline, headline
    assert f"K = {int(top['num_speculative_tokens'])}" in headline, headline
