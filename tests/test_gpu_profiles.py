"""The GPU profiles and their model configs, checked on the CPU (nothing here needs a GPU)."""
import io
import json
import zipfile

import pytest
import yaml

from specdec import bundle, paths, profiles, runner, validate, wheels, workloads

QUICK = ["quick-baseline", "quick-ceiling-k", "quick-ceiling-batch", "quick-floor", "quick-ngram"]
TP_QUICK = ["quick-baseline", "quick-ceiling", "quick-8b", "quick-ngram", "draft-tp1"]


def _config(name):
    return json.loads((paths.MODEL_CONFIGS_DIR / name / "config.json").read_text())


def test_model_configs_follow_the_published_architectures():
    llama8b = _config("llama-3-8b")
    assert (llama8b["hidden_size"], llama8b["intermediate_size"], llama8b["num_hidden_layers"],
            llama8b["num_attention_heads"], llama8b["num_key_value_heads"], llama8b["vocab_size"],
            llama8b["rope_theta"], llama8b["max_position_embeddings"], llama8b["torch_dtype"]) == \
        (4096, 14336, 32, 32, 8, 128256, 500000.0, 8192, "bfloat16")
    for n in (1, 2, 4):
        trunc = _config(f"llama-3-8b-{n}layer")
        assert trunc == {**llama8b, "num_hidden_layers": n}, "a truncation differs only in depth"
    small = _config("llama-3.2-1b")
    assert (small["hidden_size"], small["num_hidden_layers"], small["vocab_size"],
            small["tie_word_embeddings"]) == (2048, 16, 128256, True)
    assert _config("tinyllama-1.1b")["vocab_size"] == 32000
    assert _config("phi-2")["vocab_size"] == 51200
    assert _config("gpt2-medium")["vocab_size"] == 50257
    big = _config("llama-3-70b")
    assert (big["hidden_size"], big["intermediate_size"], big["num_hidden_layers"],
            big["num_attention_heads"], big["num_key_value_heads"], big["vocab_size"]) == \
        (8192, 28672, 80, 64, 8, 128256)
    assert _config("llama-3-70b-1layer") == {**big, "num_hidden_layers": 1}


def test_every_config_loads_in_transformers():
    from transformers import AutoConfig

    for d in sorted(paths.MODEL_CONFIGS_DIR.iterdir()):
        if not d.is_dir():
            continue
        if _config(d.name).get("model_type") == "medusa":
            # Medusa's config class is vLLM's own, not transformers'.
            medusa = pytest.importorskip("vllm.transformers_utils.configs.medusa")
            cfg = medusa.MedusaConfig.from_pretrained(d)
            assert cfg.num_lookahead_tokens == _config(d.name)["num_heads"]
        else:
            cfg = AutoConfig.from_pretrained(d)
        assert cfg.vocab_size == _config(d.name)["vocab_size"]


def test_h200_mechanics_quick_subset_is_part_of_the_full_grid():
    prof = profiles.load_profile("h200-mechanics")
    assert (prof.engine.load_format, prof.engine.skip_tokenizer_init) == ("dummy", True)
    assert prof.engine.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert prof.hardware.kind == "cuda" and prof.engine.version == "0.26.0"
    quick = set(profiles.expand(prof, QUICK))
    full = set(profiles.expand(prof, [e.name for e in prof.experiments
                                      if not e.name.startswith("quick-")]))
    assert quick <= full, f"quick cells outside the full grid: {sorted(quick - full, key=str)[:3]}"
    # One lease: every engine costs a 45-90 s start.
    assert len(profiles.engine_groups(quick)) <= 10
    by = lambda m: {(c.num_speculative_tokens, c.batch_size, c.workload) for c in quick if c.method == m}
    assert {b for _, b, w in by("baseline") if w == "random"} == {1, 2, 4, 8, 16, 32, 64, 128}
    assert {k for k, b, _ in by("draft-1layer") if b == 1} == {1, 2, 4, 8, 16}
    assert {b for k, b, _ in by("draft-1layer") if k == 4} == {1, 4, 16, 64}
    assert by("draft-1b") and {w for _, _, w in by("ngram")} >= {"repeat"}
    full_grid = profiles.expand(prof, ["grid"])
    assert {c.num_speculative_tokens for c in full_grid} == {0, 1, 2, 3, 4, 5, 6, 8, 12, 16}
    assert {c.batch_size for c in full_grid} == {1, 2, 4, 8, 16, 32, 64, 128}


def test_h200_workloads_are_token_ids_within_the_vocabulary():
    prof = profiles.load_profile("h200-mechanics")
    vocab = _config("llama-3-8b")["vocab_size"]
    for wl in prof.workloads:
        prompts = workloads.load_prompts(wl, prof)
        assert len(prompts) == wl.num_prompts
        for p in prompts:
            assert p.text is None and p.token_ids, "no tokenizer: prompts must be ids"
            assert all(0 <= t < vocab for t in p.token_ids)
    rep = workloads.load_prompts(prof.workload("repeat"), prof)[0].token_ids
    block = prof.workload("repeat").options["block_len"]
    assert rep == rep[:block] * prof.workload("repeat").options["copies"]


@pytest.mark.parametrize("name, experiments, engines", [
    ("h200-mechanics", QUICK, 9), ("h200x2-tp", TP_QUICK, 8), ("h200-mechanics", None, 46)])
def test_gpu_profiles_pass_preflight_and_dry_run(tmp_path, name, experiments, engines):
    out = io.StringIO()
    res = runner.run(name, experiments=experiments, dry_run=True, results_root=tmp_path, out=out)
    assert not res["ok"] and not res["failed"]
    assert f"in {engines} engine(s)" in out.getvalue()
    assert not list(tmp_path.rglob("*.parquet")), "a dry run writes nothing"


def test_tp_profile_asks_for_draft_tp_1_and_2():
    prof = profiles.load_profile("h200x2-tp")
    assert prof.engine.tensor_parallel_size == 2 and prof.hardware.num_gpus == 2
    assert {k: prof.engine.env[k] for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                            "NVSHMEM_DISABLE_NVLS")} == \
        {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    tps = {m.speculative.get("draft_tensor_parallel_size") for m in prof.methods
           if m.speculative and m.draft == "llama-3-8b"}
    assert tps == {1, 2}
    assert _config(prof.target.source.config)["hidden_size"] == 8192
    cells = profiles.expand(prof, ["batch-scaling"])
    assert {c.num_speculative_tokens for c in cells} == {0, 2, 3, 4, 5, 6}  # 0: baseline
    assert max(c.batch_size for c in cells) == 64


def _with_article_drafts():
    """h200-mechanics plus the article's drafts, as config-only models of their shapes."""
    data = yaml.safe_load((paths.PROFILES_DIR / "h200-mechanics.yaml").read_text())
    article = {"tinyllama-1.1b": 32000, "phi-2": 51200, "gpt2-medium": 50257}
    for name in article:
        data["drafts"].append({"name": name, "source": {"kind": "config", "config": name}})
    data["methods"] = [m for m in data["methods"]]
    return data, article


@pytest.mark.parametrize("draft", ["tinyllama-1.1b", "phi-2", "gpt2-medium"])
def test_the_articles_drafts_are_refused_for_their_vocabulary(draft):
    data, article = _with_article_drafts()
    data["methods"].append({"name": f"draft-{draft}", "draft": draft,
                            "speculative": {"method": "draft_model"}})
    data["experiments"] = [{"name": "article", "description": "x", "methods": [f"draft-{draft}"],
                            "num_speculative_tokens": [5], "batch_sizes": [1],
                            "workloads": ["random"]}]
    prof = profiles.profile_from_dict(data)
    idx = [m.name for m in prof.methods].index(f"draft-{draft}")
    with pytest.raises(validate.ValidationError) as e:
        validate.preflight(prof)
    assert e.value.field == f"methods[{idx}].draft"
    assert f"vocab_size={article[draft]}" in str(e.value) and "vocab_size=128256" in str(e.value)


def test_reference_profile_is_the_articles_setup():
    prof = profiles.load_profile("a100-llama3-8b")
    assert prof.reference_only and "A100" in prof.hardware.label
    assert prof.target.source.id == "meta-llama/Meta-Llama-3-8B-Instruct"
    ids = {d.source.id for d in prof.drafts}
    assert {"TinyLlama/TinyLlama-1.1B-Chat-v1.0", "microsoft/phi-2",
            "openai-community/gpt2-medium", "meta-llama/Llama-3.2-1B-Instruct"} <= ids
    assert {prof.method(m).speculative["method"] for m in ("eagle", "eagle3")} == {"eagle", "eagle3"}
    assert all(d.source.kind == "hf" for d in (prof.target, *prof.drafts))


def _vllm_source(path):
    whl = wheels.find_wheel(paths.CACHE_DIR / "wheels", wheels.locked_requirements()[0])
    if whl is None:
        pytest.skip("vllm 0.26.0 wheel not cached")
    with zipfile.ZipFile(whl) as zf:
        return zf.read(path).decode()


def test_profile_comments_quote_vllm_0_26_itself():
    spec = _vllm_source("vllm/config/speculative.py")
    assert "Target and draft model should have the same vocabulary size" in spec
    assert "cannot be \"\n                f\"other value than 1 or target model tensor_parallel_size" in spec
    draft = _vllm_source("vllm/v1/spec_decode/draft_model.py")
    assert "'draft_tensor_parallel_size' and 'tensor_parallel_size' \"\n                f\"must be the same" in draft
