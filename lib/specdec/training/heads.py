"""The trained heads as plain PyTorch modules, computing what vLLM's loaders compute.

Each module's parameter names are the checkpoint names vLLM reads (see :mod:`.export`), and
its forward pass follows the vLLM model class line by line (vLLM 0.32 and 0.26 agree):

- :class:`Eagle3Head` = ``vllm/model_executor/models/llama_eagle3.py``: ``fc`` fuses the
  target's auxiliary hidden states (after layers ``aux_layers``) into one; the single decoder
  layer ("midlayer") takes ``cat(input_layernorm(embed(token)), hidden_norm(hidden))``
  (q/k/v from 2*hidden), and its pre-norm output is both the next step's hidden input and,
  after ``norm``, the input of its own ``lm_head`` over a draft vocabulary (``d2t`` maps it to
  target ids);
- :class:`EagleHead` = ``llama_eagle.py``: ``fc(cat(embed(token), hidden))``, one decoder
  layer without input norm, output ``hidden + residual`` fed to the target's ``lm_head``
  (shared, frozen) and back as the next hidden input;
- :class:`MedusaHeads` = ``medusa.py`` with ``original_lm_head``: head k is a residual block
  ``x + SiLU(W x + b)`` on the target's last (normed) hidden state, followed by the target's
  own ``lm_head`` (frozen; restricted to ``token_map`` if the vocabulary is truncated); it
  predicts the token k+2 ahead.

Multi-step training ("training-time test", EAGLE-3): step s feeds the head its own output of
step s-1; a query of step s at position i attends to the step-1 keys of positions <= i (the
context, computed from target features, as in vLLM after verification) and to its own chain's
keys of steps 2..s at position i. :func:`ttt_attention` implements that mask.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * x).to(dtype)


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Llama (neox-style) rotary embedding of ``x`` (B, H, L, D) at positions ``pos`` (B, L)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = pos.to(torch.float32)[:, None, :, None] * inv  # B,1,L,D/2
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., : d // 2].float(), x[..., d // 2:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


def ttt_attention(q, ks, vs, key_mask=None):
    """Attention of step-s queries ``q`` (B,Hq,L,D) over step-1 keys (causal) and the
    diagonal keys of steps 2..s (``ks[1:]``, ``vs[1:]``). ``key_mask`` (B,L) marks real
    (non-padding) step-1 keys."""
    b, hq, L, d = q.shape
    rep = hq // ks[0].shape[1]
    k1 = ks[0].repeat_interleave(rep, 1)
    v1 = vs[0].repeat_interleave(rep, 1)
    scale = 1.0 / math.sqrt(d)
    s1 = (q @ k1.transpose(-1, -2)).float() * scale
    causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    allowed = causal[None, None]
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :].bool()
    s1 = s1.masked_fill(~allowed, float("-inf"))
    diag = [((q * kt.repeat_interleave(rep, 1)).sum(-1, keepdim=True)).float() * scale
            for kt in ks[1:]]
    w = torch.softmax(torch.cat([s1, *diag], -1), -1).to(q.dtype)
    out = w[..., :L] @ v1
    for t, vt in enumerate(vs[1:]):
        out = out + w[..., L + t: L + t + 1] * vt.repeat_interleave(rep, 1)
    return out


class _Mlp(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Attn(nn.Module):
    def __init__(self, in_dim: int, hidden: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(in_dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def qkv(self, x, pos, theta):
        b, L, _ = x.shape
        q = self.q_proj(x).view(b, L, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, L, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, L, self.kv_heads, self.head_dim).transpose(1, 2)
        return rope(q, pos, theta), rope(k, pos, theta), v

    def out(self, o):
        b, h, L, d = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, L, h * d))


class _Layer(nn.Module):
    """One Llama decoder layer whose attention input is ``in_dim`` wide."""

    def __init__(self, cfg: dict, in_dim: int, input_norm: bool):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.self_attn = _Attn(in_dim, h, cfg["num_attention_heads"], cfg["num_key_value_heads"],
                               cfg.get("head_dim") or h // cfg["num_attention_heads"])
        self.mlp = _Mlp(h, cfg["intermediate_size"])
        self.post_attention_layernorm = RMSNorm(h, eps)
        if input_norm:
            self.input_layernorm = RMSNorm(h, eps)


def _theta(cfg: dict) -> float:
    rp = cfg.get("rope_parameters") or {}
    return float(rp.get("rope_theta") or cfg.get("rope_theta") or 10000.0)


class _Recurrent(nn.Module):
    """Shared multi-step loop of the EAGLE heads: ``step_input`` builds the attention input
    and the residual from (hidden, embeds); the layer and its KV chain are common."""

    def steps(self, hidden0, embeds, pos, key_mask, n_steps):
        """Run ``n_steps`` draft steps. ``embeds[s]`` (B,L,H) is the token input of step s
        (the token s+1 ahead of the position); returns the list of per-step outputs
        (pre-norm hidden, to be turned into logits by the caller)."""
        theta = self.theta
        layer = self.midlayer
        ks, vs, outs = [], [], []
        hidden = hidden0
        for s in range(n_steps):
            x, residual = self.step_input(hidden, embeds[s])
            q, k, v = layer.self_attn.qkv(x, pos + s, theta)
            ks.append(k)
            vs.append(v)
            a = layer.self_attn.out(ttt_attention(q, ks, vs, key_mask))
            r2 = a + residual
            r3 = layer.mlp(layer.post_attention_layernorm(r2)) + r2
            outs.append(r3)
            hidden = r3
        return outs


class Eagle3Head(_Recurrent):
    def __init__(self, cfg: dict, draft_vocab_size: int, num_aux: int):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.theta = _theta(cfg)
        self.fc = nn.Linear(num_aux * h, h, bias=False)
        self.midlayer = _Layer(cfg, 2 * h, input_norm=True)
        self.midlayer.hidden_norm = RMSNorm(h, eps)
        self.norm = RMSNorm(h, eps)
        self.lm_head = nn.Linear(h, draft_vocab_size, bias=False)

    def step_input(self, hidden, emb):
        layer = self.midlayer
        x = torch.cat([layer.input_layernorm(emb), layer.hidden_norm(hidden)], -1)
        return x, hidden

    def logits(self, out):
        return self.lm_head(self.norm(out))


class EagleHead(_Recurrent):
    def __init__(self, cfg: dict):
        super().__init__()
        h = cfg["hidden_size"]
        self.theta = _theta(cfg)
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.midlayer = _Layer(cfg, h, input_norm=False)

    def step_input(self, hidden, emb):
        x = self.fc(torch.cat([emb, hidden], -1))
        return x, x


class MedusaHeads(nn.Module):
    def __init__(self, hidden: int, num_heads: int, num_layers: int = 1):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"layers": nn.ModuleList(nn.Linear(hidden, hidden, bias=True)
                                                   for _ in range(num_layers))})
            for _ in range(num_heads))
        for blk in self.blocks:
            for lin in blk["layers"]:
                nn.init.zeros_(lin.weight)  # each head starts as the target's own next-token head
                nn.init.zeros_(lin.bias)

    def forward(self, h):
        outs = []
        for blk in self.blocks:
            x = h
            for lin in blk["layers"]:
                x = x + F.silu(lin(x))
            outs.append(x)
        return outs
