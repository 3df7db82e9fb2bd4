"""Model facts read from data/model_configs: vocabularies, parameters and weight bytes."""
import json

import pytest

from specdec import model_configs, paths


@pytest.mark.parametrize("name, params", [
    ("llama-3-8b", 8_030_261_248),      # Meta-Llama-3-8B's published safetensors total
    ("llama-3.2-1b", 1_235_814_400),    # tied embeddings: one matrix
    ("tinyllama-1.1b", 1_100_048_384),
    ("llama-3-70b", 70_553_706_496),
])
def test_parameter_count_from_the_shapes(name, params):
    assert model_configs.parameter_count(name) == params


def test_weight_bytes_follow_the_dtype():
    n = model_configs.parameter_count("llama-3-8b")
    assert model_configs.weight_bytes("llama-3-8b") == 2 * n  # the config's torch_dtype, bf16
    assert model_configs.weight_bytes("llama-3-8b", "float32") == 4 * n
    with pytest.raises(model_configs.ModelConfigError, match="dtype 'int3'"):
        model_configs.weight_bytes("llama-3-8b", "int3")


def test_vocabularies_of_the_articles_drafts_and_the_target():
    assert model_configs.vocab_size("llama-3-8b") == 128256
    assert model_configs.vocab_size("llama-3.2-1b") == 128256
    assert {model_configs.vocab_size(n) for n in ("tinyllama-1.1b", "phi-2", "gpt2-medium")} \
        == {32000, 51200, 50257}


def test_text_config_vocabulary_and_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "MODEL_CONFIGS_DIR", tmp_path)
    (tmp_path / "mm").mkdir()
    (tmp_path / "mm" / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 7}}))
    assert model_configs.vocab_size("mm") == 7
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "config.json").write_text("{}")
    with pytest.raises(model_configs.ModelConfigError, match="none/config.json: no vocab_size"):
        model_configs.vocab_size("none")
    with pytest.raises(model_configs.ModelConfigError, match=r"no such model config \(known: mm, none\)"):
        model_configs.load("nope")


def test_parameter_count_refuses_other_architectures():
    with pytest.raises(model_configs.ModelConfigError, match="PhiForCausalLM"):
        model_configs.parameter_count("phi-2")
    with pytest.raises(model_configs.ModelConfigError, match="EagleLlamaForCausalLM"):
        model_configs.parameter_count("eagle-llama-3-8b")
