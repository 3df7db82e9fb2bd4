"""Facts read from the published model configs kept in ``data/model_configs/<name>/config.json``.

A chapter that needs a model's vocabulary or the bytes of its weights reads them here, from
the architecture, instead of typing them: the vocabulary a draft must share with its target
(:func:`vocab_size`), the parameters of a Llama-architecture model (:func:`parameter_count`)
and the bytes a decode step reads for them (:func:`weight_bytes`).
"""
from __future__ import annotations

import json
from typing import Any

from . import paths

#: Bytes per parameter of the dtypes the configs and profiles name.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1}


class ModelConfigError(ValueError):
    """A config is missing, or lacks what is asked of it; the message names the file."""


def load(name: str) -> dict[str, Any]:
    """The ``config.json`` of ``data/model_configs/<name>/`` as a dict."""
    f = paths.MODEL_CONFIGS_DIR / name / "config.json"
    if not f.is_file():
        known = ", ".join(sorted(p.name for p in paths.MODEL_CONFIGS_DIR.iterdir() if p.is_dir()))
        raise ModelConfigError(f"{f}: no such model config (known: {known})")
    return json.loads(f.read_text())


def vocab_size(name: str) -> int:
    """``vocab_size`` of a model config (that of its text config for a multimodal one)."""
    cfg = load(name)
    for c in (cfg, cfg.get("text_config") or {}):
        if "vocab_size" in c:
            return int(c["vocab_size"])
    raise ModelConfigError(f"{name}/config.json: no vocab_size")


def parameter_count(name: str) -> int:
    """Parameters of a ``LlamaForCausalLM`` config, from its shapes.

    Embedding table and LM head (one matrix when ``tie_word_embeddings``), per layer the
    query and output projections (hidden x heads·head_dim), key and value projections
    (hidden x KV heads·head_dim), the gated MLP (three hidden x intermediate matrices) and
    two RMS norms, and the final norm. Other architectures (EAGLE heads, Medusa, GPT-2,
    Phi) are refused: their parameters are laid out differently.
    """
    cfg = load(name)
    if cfg.get("architectures") != ["LlamaForCausalLM"]:
        raise ModelConfigError(f"{name}/config.json: parameter_count knows LlamaForCausalLM, "
                               f"not {cfg.get('architectures')}")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise ModelConfigError(f"{name}/config.json: biases are not counted")
    h, i, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim") or h // heads
    v = cfg["vocab_size"]
    attention = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim
    mlp = 3 * h * i
    layer = attention + mlp + 2 * h
    embeddings = v * h * (1 if cfg.get("tie_word_embeddings") else 2)
    return embeddings + n * layer + h


def weight_bytes(name: str, dtype: str | None = None) -> int:
    """Bytes of all parameters of a config in ``dtype`` (default: the config's ``torch_dtype``).

    The embedding table is counted whole, although a decode step reads only the rows of its
    tokens: an upper bound on the bytes a step must read by one vocabulary x hidden matrix.
    """
    dtype = dtype or load(name).get("torch_dtype")
    if dtype not in DTYPE_BYTES:
        raise ModelConfigError(f"{name}: dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return parameter_count(name) * DTYPE_BYTES[dtype]
