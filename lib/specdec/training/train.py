"""Trainers: one per artifact kind, sharing the batching, the frozen target and the loop.

Every training is self-distillation: the frozen target runs on the sequence (prompt + its own
greedy continuation) and gives, at every position, its hidden states and its next-token
distribution ``P_t``; the artifact learns to predict ``P`` where it would be asked to in
decoding (positions from the last prompt token on). Losses (soft cross-entropy unless noted):

- eagle3: step s (0-based) at position i gets the token ``x[i+1+s]`` and predicts ``P[i+1+s]``
  over its draft vocabulary (``P`` renormalised there); step 0 gets ``fc(aux[i])``, later
  steps the head's own previous output (training-time test, :mod:`.heads`);
- eagle: the same chain; loss ``reg_weight * smoothL1(out, h[i+1+s]) + cls_weight * CE`` of
  the target's ``lm_head(out)`` (EAGLE's feature regression plus classification);
- medusa: head k at position i predicts ``P[i+1+k]`` (the token k+2 ahead) over the
  truncated vocabulary;
- draft: a small causal LM (the target's first layers) predicts ``P[t]`` at every t.

``train(name, recipe, target, seqs, data_sha256, out_dir)`` trains until held-out agreement
plateaus (:func:`plateaued`, issue 21), logs (``train_log.jsonl``: one JSON line per
``log_every`` steps, ``eval`` lines at step 0, on the doubling schedule and at the end, an
``end`` line with the stop reason), exports a checkpoint at every scheduled evaluation and the
final artifact via :mod:`.export`. Validation: the last ``val_sequences`` sequences, never
trained on, the same for every ``data_fraction``.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import artifacts
from . import data as data_mod
from . import heads as H
from .recipes import OPTIONS, WORKLOAD_TOKENS, agreement, k_rate, option  # noqa: F401 - train.k_rate


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Target:
    """The frozen target (HF transformers) and what the heads need from it. Its layers run in
    bfloat16 on a GPU (the dtype vLLM serves it in) and in float32 on the CPU; the embeddings
    and the tied ``lm_head`` stay float32 (the next-token distribution, and what the artifacts
    copy). A batch's features are the target's forward on it, or, where the batch comes with
    ``rows`` (:class:`FeatureStore`), the rows the store computed once."""

    def __init__(self, path: str, dev: torch.device):
        from transformers import AutoModelForCausalLM

        self.path = path
        self.cfg = json.loads((Path(path) / "config.json").read_text())
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(dev).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        # (V, H), tied lm_head in SmolLM2: float32 copies, before the layers are cast
        self.embed = self.model.model.embed_tokens.weight.detach().clone()
        self.lm_head = self.embed if self.model.config.tie_word_embeddings \
            else self.model.lm_head.weight.detach().clone()
        self.dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
        self.model.to(self.dtype)
        #: the :class:`FeatureStore` of the run going on (:meth:`reading`)
        self.store = None
        if dev.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

    @contextlib.contextmanager
    def reading(self, store: "FeatureStore | None"):
        """Batches with ``rows`` read ``store`` within the block; it is dropped after it, the
        run failed or not (24 GB for EAGLE-3's, on the GPU the next run needs)."""
        self.store = store
        try:
            yield store
        finally:
            self.store = None

    @torch.no_grad()
    def hidden(self, ids, mask, aux_layers=()):
        """The target's last hidden state (B, L, H) and the hidden states after
        ``aux_layers``, concatenated (B, L, H * len(aux_layers)), in its dtype."""
        with torch.autocast(ids.device.type, enabled=False):
            out = self.model.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        aux = torch.cat([out.hidden_states[k] for k in aux_layers], -1) if aux_layers else None
        return out.last_hidden_state, aux

    @torch.no_grad()
    def features(self, b: dict, aux_layers=(), at=None):
        """``h``, ``aux`` and the next-token ``logits`` (float32, TF32 matmuls on CUDA) of batch
        ``b``: from the store where ``b`` has its ``rows``, else from a forward. The logits at
        every position (B, L, V), or with ``at`` (flat indices, ``b["dec"]``) at those (N, V)."""
        if "rows" in b:
            h, aux = self.store.read(b["rows"], aux_layers)
        else:
            h, aux = self.hidden(b["ids"], b["mask"], aux_layers)
        x = h if at is None else h.reshape(-1, h.shape[-1]).index_select(0, at)
        with torch.autocast(h.device.type, enabled=False):
            logits = x.float() @ self.lm_head.T
        return {"h": h, "logits": logits, "aux": aux}


class FeatureStore:
    """The target's features of every sequence of a set, computed once: the target is frozen
    and the data fixed, so a training step need not run it again (lease 25: the target's
    forward was 0.090 of an EAGLE-3 step's 0.095 s on an H100, and three processes sharing the
    GPU did not hide it). Each token's last hidden state and ``aux_layers`` hidden states, in
    the target's dtype, flat (token, feature) on the target's device; row 0 is zeros, what a
    padded position reads. The logits are computed from ``h`` per batch, as without a store.
    For 5.2 M tokens with EAGLE-3's three auxiliary layers: 24 GB in bfloat16."""

    def __init__(self, target: Target, seqs, max_len: int, aux_layers=(), batch_size: int = 32):
        dev = target.model.device
        self.aux_layers = tuple(aux_layers)
        self.lengths = np.array([min(len(s), max_len) for s, _ in seqs], dtype=np.int64)
        self.offsets = np.concatenate([[1], 1 + np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        width = target.cfg["hidden_size"]
        total = 1 + int(self.lengths.sum())
        self.h = torch.zeros(total, width, dtype=target.dtype, device=dev)
        self.aux = torch.zeros(total, width * len(self.aux_layers), dtype=target.dtype,
                               device=dev) if self.aux_layers else None
        t0 = time.perf_counter()
        batches = Batches(seqs, batch_size, max_len, 0, dev)
        for i in range(0, len(seqs), batch_size):  # in order: a batch's tokens are contiguous
            b = batches.collate(list(range(i, min(i + batch_size, len(seqs)))))
            h, aux = target.hidden(b["ids"], b["mask"], self.aux_layers)
            keep = b["mask"].bool()
            at = slice(int(self.offsets[i]), int(self.offsets[i]) + int(keep.sum()))
            self.h[at] = h[keep]
            if aux is not None:
                self.aux[at] = aux[keep]
        self.seconds = time.perf_counter() - t0

    def rows(self, idx, width: int) -> torch.Tensor:
        """(len(idx), width) store rows of sequences ``idx`` (CPU, int64): a sequence's tokens,
        then 0 (padding)."""
        pos = np.arange(width)[None]
        lens, offs = self.lengths[idx][:, None], self.offsets[idx][:, None]
        return torch.as_tensor(np.where(pos < lens, offs + pos, 0))

    def read(self, rows, aux_layers=()):
        if tuple(aux_layers) not in ((), self.aux_layers):  # (a prefix would read all of them)
            raise ValueError(f"the store holds aux layers {self.aux_layers}, not {tuple(aux_layers)}")
        return self.h[rows], (self.aux[rows] if aux_layers else None)


class Batches:
    """Random batches of ``batch_size`` sequences (seeded), right-padded with id 0; with
    ``grouped``, of similar lengths (transformers' ``get_length_grouped_indices``: each epoch a
    random order cut into mega-batches of 50 batches, each sorted by length)."""

    def __init__(self, seqs, batch_size: int, max_len: int, seed: int, dev, grouped: bool = False,
                 store: FeatureStore | None = None):
        self.seqs, self.bs, self.max_len, self.dev = seqs, batch_size, max_len, dev
        self.store = store  # the batches carry their rows of it
        self.rng = np.random.default_rng(seed)
        self.grouped = grouped
        if grouped:
            self.gen = torch.Generator().manual_seed(seed)
            self.lengths = [min(len(s), max_len) for s, _ in seqs]
        self.order, self.pos = self._epoch(), 0

    def _epoch(self):
        if not self.grouped:
            return self.rng.permutation(len(self.seqs))
        from transformers.trainer_pt_utils import get_length_grouped_indices

        return np.asarray(get_length_grouped_indices(self.lengths, self.bs, generator=self.gen))

    def collate(self, idx):
        items = [(s[: self.max_len], p) for s, p in (self.seqs[i] for i in idx)]
        L = max(len(s) for s, _ in items)
        ids = torch.zeros(len(items), L, dtype=torch.long)
        mask = torch.zeros(len(items), L, dtype=torch.long)
        plen = torch.zeros(len(items), dtype=torch.long)
        nlen = torch.zeros(len(items), dtype=torch.long)
        for j, (s, p) in enumerate(items):
            ids[j, : len(s)] = torch.as_tensor(s.astype(np.int64))
            mask[j, : len(s)] = 1
            plen[j], nlen[j] = min(p, len(s)), len(s)
        out = {"ids": ids, "mask": mask, "plen": plen, "nlen": nlen, **_decoding(plen, nlen, L)}
        if self.store is not None:
            out["rows"] = self.store.rows(np.asarray(idx), L)
        # pinned and asynchronous on a GPU: a copy from pageable memory waits for the GPU
        pin = self.dev.type == "cuda"
        return {k: (v.pin_memory() if pin else v).to(self.dev, non_blocking=pin) for k, v in out.items()}

    def state(self) -> dict:
        """Where the batch order stands (:func:`train` keeps it when a cap stops a run)."""
        return {"rng": self.rng.bit_generator.state, "order": self.order.copy(), "pos": self.pos,
                "gen": self.gen.get_state() if self.grouped else None}

    def restore(self, st: dict) -> None:
        """Continue from :meth:`state`: the batches a run stopped there would have drawn next."""
        self.rng.bit_generator.state = st["rng"]
        self.order, self.pos = np.asarray(st["order"]), int(st["pos"])
        if self.grouped:
            self.gen.set_state(st["gen"])

    def in_order(self) -> list[dict]:
        """Every sequence once, in order, in batches of ``batch_size`` (evaluation)."""
        n = len(self.seqs)
        return [self.collate(list(range(i, min(i + self.bs, n)))) for i in range(0, n, self.bs)]

    def __next__(self):
        if self.pos + self.bs > len(self.order):
            self.order, self.pos = self._epoch(), 0
        idx = self.order[self.pos: self.pos + min(self.bs, len(self.seqs))]
        self.pos += self.bs
        return self.collate(idx)


def _shift(x, s, fill=0):
    """x[:, i] <- x[:, i+s] (the tail filled)."""
    if s == 0:
        return x
    pad = torch.full_like(x[:, :s], fill)
    return torch.cat([x[:, s:], pad], 1)


def _span(plen, nlen, L: int, s: int):
    """(B, L): positions i that are decoding positions (i >= plen-1) whose target index i+1+s
    exists, of sequences padded to ``L``: the one definition of where a loss counts."""
    i = torch.arange(L, device=plen.device)[None]
    return (i >= (plen[:, None] - 1)) & (i + 1 + s <= nlen[:, None] - 1)


def _mask(b, s):
    """:func:`_span` of a batch (on its device), at shift ``s``."""
    return _span(b["plen"], b["nlen"], b["ids"].shape[1], s)


def _decoding(plen, nlen, L: int) -> dict:
    """The positions a loss counts (:func:`_span` at shift -1: from the last prompt token to
    the last token) of sequences padded to ``L``, flat and in order (``dec``, indices into
    (B * L)), and each one's sequence (``dseq``): made on the host with the batch, so reading
    them never waits for the GPU. The recipe's ``vocab_rows: decoding`` computes what is as
    wide as the vocabulary there only (:meth:`_Kind.pair`)."""
    dec = _span(plen, nlen, L, -1).flatten().nonzero().squeeze(1)
    return {"dec": dec, "dseq": dec // L}


def _soft_ce_eager(logits, p, m):
    logp = F.log_softmax(logits.float(), -1)
    per = -(p * logp).sum(-1)
    return (per * m).sum() / m.sum().clamp(min=1)


@functools.cache
def _soft_ce_compiled():
    """:func:`_soft_ce_eager` through ``torch.compile`` (one graph for every batch shape): the
    float32 log-softmax, the product with ``p`` and their sums fused, so the full-vocabulary
    tensors are read a few times instead of written and read at every operation (a training
    step of EAGLE, Medusa or a draft LM is bound by those passes over memory: lease 26's
    bench.json: of EAGLE's 0.065 s step, the loss 0.039 s and its backward 0.026 s)."""
    return torch.compile(_soft_ce_eager, dynamic=True)


def _compile_failure(dev) -> str | None:
    """Why torch.compile cannot build the compiled soft cross-entropy on ``dev`` (None: it
    can). Tried on a small batch, loss and backward against the eager kernel: the graph is
    shape-generic, so a run reuses it, and the compile's seconds fall before its first step."""
    t = time.perf_counter()
    try:
        g = torch.Generator(device=dev).manual_seed(0)  # the run's own random state untouched
        lg = torch.randn(2, 9, 16, device=dev, generator=g)
        with _autocast(dev):
            lg = (lg @ torch.eye(16, device=dev)).requires_grad_()
            p = _probs(torch.randn(2, 9, 16, device=dev, generator=g))
            m = torch.ones(2, 9, device=dev)
            got = _soft_ce(lg, p, m, "compiled")
            got.backward()
            want = _soft_ce(lg.detach(), p, m, "eager")
        if not torch.allclose(got.float(), want.float(), rtol=1e-3):
            raise ArithmeticError(f"compiled {float(got)} against eager {float(want)}")
    except Exception as e:  # noqa: BLE001 - any failure to compile: the eager kernel
        print(f"[train] soft_ce compiled failed ({type(e).__name__}: {e}); running eager",
              flush=True)
        return f"{type(e).__name__}: {e}"[:300]
    print(f"[train] soft_ce compiled in {time.perf_counter() - t:.0f} s", flush=True)
    return None


def _soft_ce(logits, p, m, kernel: str = "eager"):
    """Soft cross-entropy of ``logits`` to the target's distribution ``p`` (probabilities,
    :func:`_probs`) at the same positions, averaged over the positions ``m`` (the pairs
    :meth:`_Kind.pair` makes); ``kernel``: the recipe's ``soft_ce``, eager or compiled."""
    return (_soft_ce_compiled() if kernel == "compiled" else _soft_ce_eager)(logits, p, m)


def _probs(target_logits):
    """The target's next-token distribution, computed once per batch: a head's step s reads it
    shifted (:meth:`_Kind.pair`; the positions past the end lie outside every mask),
    as ``softmax(_shift(logits, 1 + s))`` would give it, one softmax over the vocabulary
    instead of one per head or step."""
    return F.softmax(target_logits.float(), -1)


def _agree(pred, target_ids, m):
    """The share of positions ``m`` where ``pred`` is the target's token: a 0-dim tensor, read
    (``float``) only where it is logged, so that a training step never waits for the GPU."""
    return ((pred == target_ids) & m).sum() / m.sum().clamp(min=1)


def draft_vocab(seqs, size: int, vocab: int) -> torch.Tensor:
    """The ``size`` most frequent target ids in the continuations (then in the prompts, then
    the lowest ids), sorted by id: EAGLE-3's d2t / Medusa's token_map."""
    counts = np.zeros(vocab, dtype=np.int64)
    pcounts = np.zeros(vocab, dtype=np.int64)
    for s, p in seqs:
        np.add.at(counts, s[p:], 1)
        np.add.at(pcounts, s[:p], 1)
    key = counts * (10 ** 9) + pcounts  # continuation counts first, prompt counts break ties
    order = np.lexsort((np.arange(vocab), -key))  # stable: by key desc, then id asc
    return torch.as_tensor(np.sort(order[:size]), dtype=torch.long)


# --------------------------------------------------------------------------- #
# Per-kind models and losses
# --------------------------------------------------------------------------- #
class _Kind:
    """``module`` (trained), ``loss(batch) -> (loss, metrics)``."""

    def __init__(self, recipe, target: Target, seqs, dev):
        self.r, self.t, self.dev = recipe, target, dev
        # the soft cross-entropy's kernel as it will run: compiled where the recipe asks and
        # torch.compile builds it here, else eager, with why in ``fallback``
        self.kernel, self.fallback = option(recipe, "soft_ce"), None
        if self.kernel == "compiled":
            self.fallback = _compile_failure(dev)
            self.kernel = "eager" if self.fallback else "compiled"
        self.rows = option(recipe, "vocab_rows")

    def at(self, b):
        """Where the target's logits are computed: every position (None), or with the recipe's
        ``vocab_rows: decoding`` the positions the loss counts (``b["dec"]``)."""
        return b["dec"] if self.rows == "decoding" else None

    def pair(self, b, o, head, p, top, shift: int):
        """Draft position ``shift`` (0: a draft LM's next token; 1 + s: a head's step s):
        ``head``'s logits of hidden states ``o`` (B, L, H) at each position the loss counts,
        with the target's distribution ``p`` and token ``top`` ``shift`` positions later, and
        the mask of the pairs that exist: (logits, p, top, mask), for :func:`_soft_ce`.
        ``p`` and ``top`` as :meth:`at` computed them; ``o`` is cut before ``head``,
        so neither the logits nor their gradient are as wide as the vocabulary past the cut
        (a slice of the logits cost EAGLE 13 % of its step in its backward: lease 41's
        profile). Every position: shifted views, the positions past the end outside
        :func:`_mask`; the decoding positions: row r pairs with row r + ``shift`` of the same
        sequence (the same pairs)."""
        if self.rows != "decoding":
            n = o.shape[1] - shift
            return head(o[:, :n]), p[:, shift:], top[:, shift:], _mask(b, shift - 1)[:, :n].float()
        n = b["dec"].shape[0] - shift
        x = o.reshape(-1, o.shape[-1]).index_select(0, b["dec"][:n])
        return head(x), p[shift:], top[shift:], (b["dseq"][shift:] == b["dseq"][:n]).float()


class Eagle3(_Kind):
    def __init__(self, recipe, target, seqs, dev):
        super().__init__(recipe, target, seqs, dev)
        cfg = target.cfg
        self.vocab_ids = draft_vocab(seqs, recipe["draft_vocab_size"], cfg["vocab_size"]).to(dev)
        self.module = H.Eagle3Head(cfg, recipe["draft_vocab_size"], len(recipe["aux_layers"])).to(dev)
        with torch.no_grad():  # lm_head starts as the target's rows of the draft vocabulary
            self.module.lm_head.weight.copy_(target.lm_head[self.vocab_ids])

    def loss(self, b):
        f = self.t.features(b, self.r["aux_layers"], self.at(b))
        emb = self.t.embed
        S = self.r["ttt_steps"]
        embeds = [F.embedding(_shift(b["ids"], 1 + s), emb) for s in range(S)]
        pos = torch.arange(b["ids"].shape[1], device=self.dev)[None].expand_as(b["ids"])
        outs = self.module.steps(self.module.fc(f["aux"]), embeds, pos, b["mask"], S)
        total, met = 0.0, {}
        p, top = _probs(f["logits"][..., self.vocab_ids]), f["logits"].argmax(-1)
        for s, o in enumerate(outs):
            lg, ps, ts, m = self.pair(b, o, self.module.logits, p, top, 1 + s)
            total = total + _soft_ce(lg, ps, m, kernel=self.kernel) / S
            met[f"acc{s + 1}"] = _agree(self.vocab_ids[lg.argmax(-1)], ts, m.bool())
        return total, met


class Eagle(_Kind):
    def __init__(self, recipe, target, seqs, dev):
        super().__init__(recipe, target, seqs, dev)
        self.module = H.EagleHead(target.cfg).to(dev)

    def loss(self, b):
        f = self.t.features(b, (), self.at(b))
        S = self.r["ttt_steps"]
        embeds = [F.embedding(_shift(b["ids"], 1 + s), self.t.embed) for s in range(S)]
        pos = torch.arange(b["ids"].shape[1], device=self.dev)[None].expand_as(b["ids"])
        outs = self.module.steps(f["h"], embeds, pos, b["mask"], S)
        total, met = 0.0, {}
        p, top = _probs(f["logits"]), f["logits"].argmax(-1)
        for s, o in enumerate(outs):
            m = _mask(b, s).float()
            h_next = _shift(f["h"], 1 + s)
            reg = (F.smooth_l1_loss(o.float(), h_next.float(), reduction="none").mean(-1) * m).sum() \
                / m.sum().clamp(min=1)
            lg, ps, ts, mc = self.pair(b, o, lambda x: x @ self.t.lm_head.T, p, top, 1 + s)
            cls = _soft_ce(lg, ps, mc, kernel=self.kernel)
            total = total + (self.r["reg_weight"] * reg + self.r["cls_weight"] * cls) / S
            met[f"acc{s + 1}"] = _agree(lg.argmax(-1), ts, mc.bool())
        return total, met


class Medusa(_Kind):
    def __init__(self, recipe, target, seqs, dev):
        super().__init__(recipe, target, seqs, dev)
        self.use_vocab(draft_vocab(seqs, recipe["truncated_vocab_size"], target.cfg["vocab_size"]))
        self.module = H.MedusaHeads(target.cfg["hidden_size"], recipe["num_heads"],
                                    recipe["num_layers"]).to(dev)

    def use_vocab(self, vocab_ids):
        """The token ids the heads predict and the target's head rows they share."""
        self.vocab_ids = vocab_ids.to(self.dev)
        self.head_w = self.t.lm_head[self.vocab_ids]

    def loss(self, b):
        f = self.t.features(b, (), self.at(b))
        outs = self.module(f["h"])
        p, top = _probs(f["logits"][..., self.vocab_ids]), f["logits"].argmax(-1)
        total, met = 0.0, {}
        for k, o in enumerate(outs):
            lg, ps, ts, m = self.pair(b, o, lambda x: x @ self.head_w.T, p, top, 1 + k)
            total = total + _soft_ce(lg, ps, m, kernel=self.kernel) / len(outs)
            met[f"acc{k + 1}"] = _agree(self.vocab_ids[lg.argmax(-1)], ts, m.bool())
        return total, met


class Draft(_Kind):
    def __init__(self, recipe, target, seqs, dev):
        super().__init__(recipe, target, seqs, dev)
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.from_pretrained(target.path)
        n = recipe["num_layers"]
        cfg.num_hidden_layers = n
        if isinstance(getattr(cfg, "layer_types", None), list):
            cfg.layer_types = cfg.layer_types[:n]
        model = AutoModelForCausalLM.from_config(cfg).to(dev)
        sd = {k: v for k, v in target.model.state_dict().items()
              if not (".layers." in k and int(k.split(".layers.")[1].split(".")[0]) >= n)}
        missing, unexpected = model.load_state_dict(sd, strict=False)
        missing = [k for k in missing if k != "lm_head.weight"]
        assert not missing and not unexpected, (missing, unexpected)
        with torch.no_grad():  # the float32 embeddings (the export copies them), not the cast ones
            model.model.embed_tokens.weight.copy_(target.embed)
        model.model.embed_tokens.weight.requires_grad_(False)  # tied: lm_head frozen too
        self.module, self.config = model, cfg

    def loss(self, b):
        f = self.t.features(b, (), self.at(b))
        o = self.module.model(input_ids=b["ids"], attention_mask=b["mask"]).last_hidden_state
        # every position from the last prompt token to the last token (_mask at shift -1)
        lg, p, top, m = self.pair(b, o, self.module.lm_head, _probs(f["logits"]),
                                  f["logits"].argmax(-1), 0)
        loss = _soft_ce(lg, p, m, kernel=self.kernel)
        return loss, {"acc1": _agree(lg.argmax(-1), top, m.bool())}


KINDS = {"eagle3": Eagle3, "eagle": Eagle, "medusa": Medusa, "draft": Draft}


# --------------------------------------------------------------------------- #
# The loop
# --------------------------------------------------------------------------- #
@torch.no_grad()
def evaluate(kind: _Kind, batches: list[dict]) -> dict:
    kind.module.eval()
    tot, mets, n = 0.0, {}, 0
    for b in batches:
        with _autocast(kind.dev):
            loss, met = kind.loss(b)
        tot += float(loss)
        for k, v in met.items():
            mets[k] = mets.get(k, 0.0) + float(v)
        n += 1
    kind.module.train()
    return {"loss": tot / max(n, 1), **{k: v / max(n, 1) for k, v in mets.items()}}


def _autocast(dev):
    if dev.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    import contextlib

    return contextlib.nullcontext()


#: The plateau rule is first applied at the fourth evaluation, so a run it stops leaves at
#: least four checkpoints: the learning curve (issue 21).
CURVE_POINTS = 4

#: Where a run's checkpoints go: ``<out_dir>/checkpoints/step000125/`` ... (each a complete
#: artifact vLLM loads, as :mod:`.export` writes it, with its own manifest).
CHECKPOINTS = "checkpoints"
#: Where a run a cap stopped keeps what it needs to go on in a later lease (:func:`train`,
#: ``resume``): ``<out_root>/_state/<name>.pt``, beside the artifacts, not in one.
STATE_DIR = "_state"


def first_tokens(seqs, n: int = WORKLOAD_TOKENS) -> list:
    """Each (tokens, prompt length) cut after its first ``n`` continuation tokens and the one
    they predict (causal attention: the positions kept see what they saw before)."""
    return [(s[: p + n + 1], p) for s, p in seqs]


def plateaued(points: list[dict], delta: float | None, on: str = "whole") -> bool:
    """The plateau rule: the last evaluation of the doubling schedule gained less than
    ``delta`` of :func:`agreement` over the one at half its steps (from the
    :data:`CURVE_POINTS`-th on; ``delta`` None or 0: never); ``on``: the agreement over the
    whole held-out sequences or over their ``first_tokens``."""
    if not delta or len(points) < CURVE_POINTS:
        return False
    last, half = points[-1], points[-2]
    if last["step"] != 2 * half["step"]:
        raise ValueError(f"not a doubling: steps {half['step']} and {last['step']}")
    option({"plateau_on": on}, "plateau_on")
    value = (lambda e: e["agreement"]) if on == "whole" else (lambda e: agreement(e["first_tokens"]))
    return value(last) - value(half) < delta


def _store(name: str, recipe: dict, target: Target, seqs) -> FeatureStore | None:
    """The :class:`FeatureStore` of ``seqs`` where ``recipe`` precomputes the target's features."""
    if option(recipe, "target_features") != "precomputed":
        return None
    store = FeatureStore(target, seqs, recipe["max_len"], recipe.get("aux_layers", ()),
                         recipe["batch_size"])
    print(f"[train] {name}: the target's features of {len(seqs)} sequences "
          f"({len(store.h) - 1} tokens) computed once in {store.seconds:.0f} s", flush=True)
    return store



def _lr(recipe: dict, step: int, steps_cap: int) -> float:
    warm = min(1.0, (step + 1) / max(1, recipe["warmup_steps"]))
    if recipe["lr_schedule"] == "constant":
        return recipe["lr"] * warm
    if recipe["lr_schedule"] != "cosine":
        raise ValueError(f"unknown lr_schedule {recipe['lr_schedule']!r}")
    progress = min(1.0, step / steps_cap)
    return recipe["lr"] * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def split(seqs, recipe: dict) -> tuple[list, list]:
    """(training, validation) sequences: validation the last ``val_sequences`` (at most a fifth),
    training the first ``data_fraction`` of the rest, so every data size is validated alike."""
    nval = min(recipe["val_sequences"], max(1, len(seqs) // 5))
    pool = seqs[:-nval]
    return pool[:max(1, round(len(pool) * recipe["data_fraction"]))], seqs[-nval:]


def state_path(out_dir: Path) -> Path:
    """Where :func:`train` keeps the state of the run it writes to ``out_dir``."""
    return out_dir.parent / STATE_DIR / f"{out_dir.name}.pt"


def load_state(path: Path, name: str, recipe: dict, data_sha256: str) -> dict:
    """A kept state (:func:`train`), refused unless it is this run's: the same artifact, data
    and training (:func:`recipes.same_training`: the caps and what only costs may differ)."""
    from .recipes import same_training

    st = torch.load(path, map_location="cpu", weights_only=False)
    why = [w for w, bad in (
        (f"artifact {st.get('name')!r}, not {name!r}", st.get("name") != name),
        (f"data {str(st.get('data_sha256'))[:12]}, not {data_sha256[:12]}",
         st.get("data_sha256") != data_sha256),
        ("another recipe", not same_training(st.get("recipe", {}), recipe)),
        # a cosine schedule is laid over the step cap: going on past it is another schedule
        (f"its learning-rate schedule is {recipe.get('lr_schedule')!r}, not constant",
         recipe.get("lr_schedule") != "constant")) if bad]
    if why:
        raise ValueError(f"{path}: cannot resume {name} from it: {'; '.join(why)}")
    return st


def train(name: str, recipe: dict, target: Target, seqs, data_sha256: str, out_dir: Path,
          max_steps: int | None = None, safety_cap_s: float | None = None,
          resume: Path | None = None) -> dict:
    """Train one artifact to its plateau (or ``max_steps``, or the wall-clock safety cap) and
    export it to ``out_dir``, with a checkpoint at every evaluation; returns its manifest.

    Evaluations (held-out loss and agreement, :func:`evaluate`) at step 0, at
    ``eval_first_step`` and every doubling of it (each exported to ``checkpoints/stepNNNNNN``),
    and at the last step. ``run`` in the manifest: ``stopped_by`` (``plateau``, ``max_steps``
    or ``time_cap``), ``evals`` (every evaluation: step, ``train_s`` (training seconds so far,
    evaluations and exports left out), loss, per-position agreement, ``agreement``, the
    checkpoint's folder).

    A run a cap stopped keeps its state (:func:`state_path`: the trained tensors, the optimiser's
    state, the batch order's place, the evaluations, the log and the checkpoints' manifests so
    far), and ``resume`` (such a state, :func:`load_state`) goes on from it: the steps a run not
    stopped there would have taken (on the CPU bit for bit), ``train_s`` counting on from the
    state's, the safety cap counting this run's seconds only; ``run.segments`` says where each
    lease's part began and on what device."""
    import gzip

    from . import export

    dev = target.model.device
    torch.manual_seed(recipe["seed"])
    train_seqs, val_seqs = split(seqs, recipe)
    st = load_state(resume, name, recipe, data_sha256) if resume else None
    kind = KINDS[recipe["kind"]](recipe, target, train_seqs, dev)
    params = [p for p in kind.module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe["lr"], betas=tuple(recipe["betas"]),
                            weight_decay=recipe["weight_decay"])
    steps_cap = max_steps if max_steps is not None else recipe["max_steps"]
    cap_s = safety_cap_s if safety_cap_s is not None else recipe["safety_cap_s"]
    for key in OPTIONS:  # a recipe's bad value fails before any work
        option(recipe, key)
    if st is not None and st["step"] >= steps_cap:
        raise ValueError(f"{resume}: {name} stopped at step {st['step']}, and the step cap is "
                         f"{steps_cap}: nothing to go on with")
    if kind.fallback:  # the run records what ran, and a failed compile costs no lease
        recipe = {**recipe, "soft_ce": "eager", "soft_ce_fallback": kind.fallback}
    val_batches, early_batches = (
        Batches(v, recipe["batch_size"], recipe["max_len"], recipe["seed"], dev).in_order()
        for v in (val_seqs, first_tokens(val_seqs)))
    out_dir.mkdir(parents=True, exist_ok=True)
    log = open(out_dir / "train_log.jsonl", "w")
    base = {"train_sequences": len(train_seqs), "val_sequences": len(val_seqs),
            "data_fraction": recipe["data_fraction"], "device": str(dev),
            "device_name": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
            "torch": torch.__version__, "target_dtype": str(target.dtype).removeprefix("torch.")}
    step, before_s = 0, 0.0  # where this run starts: a kept state's step and training seconds
    evals: list[dict] = []
    segments = [{"from_step": 0, "device_name": base["device_name"]}]
    cmans: dict[str, str] = {}  # checkpoint folder -> its manifest, for a later lease's curve
    if st is not None:
        with torch.no_grad():
            for p, saved in zip(params, st["params"], strict=True):
                p.copy_(saved.to(p.device))
        opt.load_state_dict(st["optimizer"])
        torch.set_rng_state(st["torch_rng"])
        step, before_s, evals = st["step"], st["train_s"], st["evals"]
        segments = st["segments"] + [{"from_step": step, "device_name": base["device_name"]}]
        log.write(gzip.decompress(st["log"]).decode())
        cmans = st["checkpoints"]
        for folder, text in cmans.items():  # the earlier lease's checkpoints: records, no weights
            (out_dir / folder).mkdir(parents=True, exist_ok=True)
            (out_dir / folder / artifacts.MANIFEST).write_text(text)

    def emit(rec):
        log.write(json.dumps(rec, sort_keys=True) + "\n")
        log.flush()

    if st is not None:
        emit({"event": "resume", "step": step, "train_s": before_s, **segments[-1]})
    t0 = time.perf_counter()
    paused = 0.0  # seconds spent evaluating and exporting, left out of train_s
    # the target's features of the training sequences, once (in train_s: it is training time)
    with target.reading(_store(name, recipe, target, train_seqs)) as store:
        if store is not None:
            base["features_s"] = round(store.seconds, 2)
        it = Batches(train_seqs, recipe["batch_size"], recipe["max_len"], recipe["seed"], dev,
                     grouped=option(recipe, "batching") == "length-grouped", store=store)
        if st is not None:
            it.restore(st["batches"])

        def evaluation(step: int, scheduled: bool) -> dict:
            nonlocal paused
            t = time.perf_counter()
            ev = {"step": step, "train_s": round(before_s + t - t0 - paused, 2),
                  **evaluate(kind, val_batches)}
            ev["agreement"] = agreement(ev)
            ev["first_tokens"] = {k: v for k, v in evaluate(kind, early_batches).items()
                                  if k.startswith("acc")}
            if scheduled:
                ev["checkpoint"] = f"{CHECKPOINTS}/step{step:06d}"
                cman = export.export(name, recipe, kind, target, out_dir / ev["checkpoint"],
                                     data_sha256, {**base, "steps": step, "checkpoint": True,
                                                   "final_eval": dict(ev)})
                ev["weights_sha256"] = cman["files"][export.WEIGHTS]
                cmans[ev["checkpoint"]] = (out_dir / ev["checkpoint"] / artifacts.MANIFEST).read_text()
            emit({"event": "eval", **ev})
            print(f"[train] {name} step {step}: held-out agreement {ev['agreement']:.3f} "
                  f"({agreement(ev['first_tokens']):.3f} on the first {WORKLOAD_TOKENS} tokens), "
                  f"loss {ev['loss']:.3f}, {ev['train_s']:.0f} s of training", flush=True)
            evals.append(ev)
            paused += time.perf_counter() - t
            return ev

        if st is None:
            evaluation(0, False)
        next_eval = recipe["eval_first_step"] or None
        while next_eval and next_eval <= step:  # a resumed run: the next doubling past its step
            next_eval *= 2
        stop = None
        while stop is None:
            lr = _lr(recipe, step, steps_cap)
            for g in opt.param_groups:
                g["lr"] = lr
            loss, met, gn = _update(kind, opt, params, next(it), recipe["grad_clip"])
            step += 1
            if step % recipe["log_every"] == 0 or step == 1:
                emit({"event": "train", "step": step, "elapsed_s": round(time.perf_counter() - t0, 2),
                      "loss": float(loss.detach()), "lr": lr, "grad_norm": float(gn),
                      **{k: float(v) for k, v in met.items()}})
            if step == next_eval:
                evaluation(step, True)
                next_eval *= 2
                if plateaued([e for e in evals if "checkpoint" in e], recipe["plateau_delta"],
                             option(recipe, "plateau_on")):
                    stop = "plateau"
            if stop is None and step >= steps_cap:
                stop = "max_steps"
            elif stop is None and cap_s and time.perf_counter() - t0 >= cap_s:
                stop = "time_cap"  # a safety cap (wall clock, evaluations included), not a budget
        final = evals[-1] if evals[-1]["step"] == step else evaluation(step, False)
    wall_s = time.perf_counter() - t0
    emit({"event": "end", "steps": step, "stopped_by": stop, "train_s": final["train_s"],
          "wall_s": round(wall_s, 2), "device": str(dev), "torch": torch.__version__})
    log.close()
    segments[-1]["to_step"] = step
    run = {**base, "steps": step, "stopped_by": stop, "train_s": final["train_s"],
           "wall_s": round(wall_s, 2), "safety_cap_s": cap_s, "final_eval": final,
           "evals": evals, **({"segments": segments} if st is not None else {})}
    if stop != "plateau":  # what a later lease needs to go on (evaluations out of the log)
        keep = state_path(out_dir)
        keep.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"format": 1, "name": name, "recipe": recipe, "data_sha256": data_sha256,
                    "step": step, "train_s": final["train_s"], "evals": evals,
                    "segments": segments, "checkpoints": cmans,
                    "params": [p.detach().cpu() for p in params],
                    "optimizer": opt.state_dict(), "batches": it.state(),
                    "torch_rng": torch.get_rng_state(),
                    "log": gzip.compress((out_dir / "train_log.jsonl").read_bytes(), mtime=0)},
                   keep.with_suffix(".tmp"))
        keep.with_suffix(".tmp").replace(keep)  # whole or not at all
    return export.export(name, recipe, kind, target, out_dir, data_sha256, run)


def _update(kind: _Kind, opt, params, b: dict, grad_clip: float, mark=None):
    """One training step on batch ``b``: the loss, its backward pass, the clipped optimiser
    step; ``mark(phase)`` after each (:func:`bench` times them). Returns (loss, metrics,
    gradient norm), tensors all: nothing here waits for the GPU."""
    mark = mark or (lambda phase: None)
    with _autocast(kind.dev):
        loss, met = kind.loss(b)
    mark("loss")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    mark("backward")
    gn = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    opt.step()
    mark("optimizer")
    return loss, met, gn


def bench(name: str, recipe: dict, target: Target, seqs, steps: int = 20,
          profile: Path | None = None) -> dict:
    """Where a training step's time goes, on this machine: ``steps`` batches of ``recipe``,
    each phase timed with the device synchronised around it (the target's features, the kind's
    loss without them, the backward pass, the optimiser step). Medians in seconds, and a whole
    step timed without the synchronisations (what a training step costs).

    Every pass runs the same batches, after an untimed one over them. The first draft benched
    in a process was several times slower than its fit (lease 28: draft-l6 benched first at
    0.233 s a step and trained at 0.035; draft-l2 second at 0.016; lease 27 the same in the
    other order), where the batches' shapes were new to the process: one-off costs per shape
    (kernel selection) are the likely reason, and a fit of thousands of steps pays them once.
    So the bench times shapes the process has run, as a long fit does. With ``profile`` (a
    file), one more pass over the batches under ``torch.profiler``: its operators by their
    device time, a table to that file (what a phase's time is made of)."""
    dev = target.model.device
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    train_seqs, _ = split(seqs, recipe)
    kind = KINDS[recipe["kind"]](recipe, target, train_seqs, dev)
    params = [p for p in kind.module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe["lr"], betas=tuple(recipe["betas"]))
    # a step's cost does not depend on how many sequences there are: the first 4096 (their
    # features, where the recipe precomputes them, cost in proportion: features_s_per_1000)
    sample = train_seqs[:4096]
    store = _store(name, recipe, target, sample)
    it = Batches(sample, recipe["batch_size"], recipe["max_len"], recipe["seed"], dev,
                 grouped=option(recipe, "batching") == "length-grouped", store=store)
    aux = recipe.get("aux_layers", ())
    phases: dict[str, list[float]] = {"features": [], "loss": [], "backward": [], "optimizer": []}

    batches = [next(it) for _ in range(steps)]

    def step(b: dict, timed: bool):
        if not timed:
            _update(kind, opt, params, b, recipe["grad_clip"])
            return
        sync()
        t = time.perf_counter()
        target.features(b, aux)
        sync()
        phases["features"].append(time.perf_counter() - t)
        t = time.perf_counter()

        def mark(phase):
            nonlocal t
            sync()
            now = time.perf_counter()
            # the loss computes the target's features again: the loss's own share is the rest
            phases[phase].append(now - t - (phases["features"][-1] if phase == "loss" else 0))
            t = now

        _update(kind, opt, params, b, recipe["grad_clip"], mark)

    with target.reading(store):
        for b in batches:  # the warm-up: every shape the timed passes run
            step(b, False)
        for b in batches:
            step(b, True)
        sync()
        t0 = time.perf_counter()
        for b in batches:
            step(b, False)
        sync()
        step_s = (time.perf_counter() - t0) / steps
        if profile is not None:
            acts = [torch.profiler.ProfilerActivity.CPU] + \
                ([torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else [])
            with torch.profiler.profile(activities=acts) as prof:
                for b in batches:
                    step(b, False)
                sync()
            key = "device_time_total" if dev.type == "cuda" else "cpu_time_total"
            profile.write_text(f"{name}, {steps} steps of {recipe['batch_size']} sequences, "
                               f"soft_ce {kind.kernel}\n"
                               + prof.key_averages().table(sort_by=key, row_limit=40))
    out = {k: float(np.median(v)) for k, v in phases.items()}
    out["step_s"] = step_s
    if store is not None:
        out["features_s_per_1000"] = store.seconds * 1000 / len(sample)
    out.update(name=name, steps=steps, batch_size=recipe["batch_size"], max_len=recipe["max_len"],
               soft_ce=kind.kernel,  # as it ran (a failed compile benches eager)
               vocab_rows=kind.rows,
               device=torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu")
    return out


def load_kind(artifact: Path, target: Target, dev=torch.device("cpu")) -> _Kind:
    """An exported EAGLE-3, EAGLE, Medusa or draft-LM artifact (the files :func:`.export.build`
    writes) as the kind that trained it, to evaluate it again (:func:`agreement_on`)."""
    from safetensors.torch import load_file

    recipe = json.loads((artifact / "recipe.json").read_text())
    kind = KINDS[recipe["kind"]].__new__(KINDS[recipe["kind"]])
    _Kind.__init__(kind, recipe, target, None, dev)
    if recipe["kind"] == "draft":  # a checkpoint as vLLM loads it: transformers loads it too
        from transformers import AutoModelForCausalLM

        kind.module = AutoModelForCausalLM.from_pretrained(str(artifact), dtype=torch.float32).to(dev)
        return kind
    sd = load_file(str(artifact / "model.safetensors"))
    if recipe["kind"] == "eagle3":
        d2t = sd.pop("d2t")
        sd.pop("t2d")
        kind.vocab_ids = (d2t + torch.arange(len(d2t))).to(dev)
        kind.module = H.Eagle3Head(target.cfg, recipe["draft_vocab_size"], len(recipe["aux_layers"]))
    elif recipe["kind"] == "eagle":
        sd = {k.replace("layers.0.", "midlayer."): v for k, v in sd.items()}
        kind.module = H.EagleHead(target.cfg)
    else:  # medusa: the heads; their shared output head is the target's (export.build)
        sd.pop("lm_heads.0.weight")
        kind.use_vocab(sd.pop("token_map", torch.arange(target.cfg["vocab_size"])))
        kind.module = H.MedusaHeads(target.cfg["hidden_size"], recipe["num_heads"],
                                    recipe["num_layers"])
    kind.module.load_state_dict({k: v.float() for k, v in sd.items()})
    kind.module.to(dev)
    return kind


def agreement_on(kind: _Kind, seqs, batch_size: int = 8, max_len: int = 512) -> dict:
    """:func:`evaluate` on ``seqs`` ((tokens, prompt length) pairs), in order, with the
    position-wise agreements, their mean (:func:`agreement`) and their K = 4 rate
    (:func:`k_rate`)."""
    ev = evaluate(kind, Batches(seqs, batch_size, max_len, 0, kind.dev).in_order())
    accs = [ev[f"acc{s}"] for s in range(1, 5) if f"acc{s}" in ev]
    return {**ev, "agreement": agreement(ev), "k4_rate": k_rate(accs)}


def vllm_acceptance(runs, method: str, workload: str) -> dict:
    """vLLM's own count on ``method``'s cells of ``workload`` at T = 0 (ok runs of a profile's
    stored rows): accepted over drafted tokens, and the cells it comes from, so that a
    replay keeps what it is compared with beside it."""
    r = runs[(runs["method"] == method) & (runs["workload"] == workload) & (runs["status"] == "ok")
             & (runs["temperature"].astype(float) == 0.0)]
    if r.empty:
        raise SystemExit(f"no ok rows of {method} on {workload} at T = 0")
    return {"vllm_acceptance": round(float(r["spec_num_accepted_tokens"].sum()
                                           / r["spec_num_draft_tokens"].sum()), 4),
            "cells": sorted(set(r["cell_id"])), "rows_git_commit": sorted(set(r["git_commit"]))}


def replay(profile: str, method: str, artifacts_dir: Path, target_path: Path, val: int = 64) -> dict:
    """The training code's agreement, here on the CPU, on the very sequences vLLM generated in
    ``profile``'s cells of ``method`` at T = 0 (prompt + output tokens, as stored), and on the
    first ``val`` held-out sequences of the kept data, whole and cut to their first
    :data:`WORKLOAD_TOKENS`: what the training measures beside what vLLM measured, for the
    method's trained artifact (installed in ``artifacts_dir``). ``specdec train replay``
    writes it to ``data/plateau/<artifact>/replay.json``."""
    import os

    from .. import profiles, provenance, store, workloads

    prof = profiles.load_profile(profile)
    # a Medusa K-head copy (what vLLM loaded) replays as the trained heads it was cut from
    name = artifacts.trained_of(prof.model(prof.method(method).draft).source.artifact, artifacts_dir)
    art = Path(artifacts_dir) / name
    if not (art / "model.safetensors").is_file():
        raise SystemExit(f"{art}: no weights (install them: specdec train unpack PARTS "
                         f"--artifacts {artifacts_dir})")
    toks = store.load_tokens(profile)
    toks = toks[(toks["method"] == method) & (toks["temperature"].astype(float) == 0.0)]
    if toks.empty:
        raise SystemExit(f"{profile}: no stored outputs of {method} at T = 0")
    runs = store.load_runs(profile)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    kind = load_kind(art, Target(str(target_path), torch.device("cpu")))
    out = {"artifact": name, "method": method, "profile": profile,
           "weights_sha256": json.loads((art / "manifest.json").read_text())["files"][
               "model.safetensors"],
           "computed": "the training code's evaluation (specdec.training.train.evaluate), CPU, "
                       "target in float32, head in float32",
           "torch": torch.__version__, "git_commit": provenance.git_commit(),
           "git_dirty": provenance.git_dirty(), "timestamp_utc": provenance.now_utc(),
           "workloads": {}}
    for wl, rows in toks.groupby("workload"):
        prompts = {p.prompt_id: p.token_ids for p in
                   workloads.load_prompts(prof.workload(wl), prof, tokenizer=str(target_path))}
        seqs = [(np.array(list(prompts[r.prompt_id]) + [int(x) for x in r.output_token_ids]),
                 len(prompts[r.prompt_id])) for r in rows.drop_duplicates("prompt_id").itertuples()]
        out["workloads"][wl] = {"requests": len(seqs), **vllm_acceptance(runs, method, wl),
                                **{k: round(v, 4) for k, v in agreement_on(kind, seqs).items()}}
        print(f"{wl}: {out['workloads'][wl]}", flush=True)
    seqs, digest = data_mod.load_sequences(data_mod.DATA_RECORD / data_mod.DATA_XZ)
    held = seqs[-kind.r["val_sequences"]:][:val]
    out["validation"] = {"sequences": len(held), "data_sha256": digest}
    for part, ss in (("whole", held), (f"first {WORKLOAD_TOKENS} tokens", first_tokens(held))):
        out["validation"][part] = {k: round(v, 4) for k, v in agreement_on(kind, ss).items()}
        print(f"validation, {part}: {out['validation'][part]}", flush=True)
    return out


def train_all(names, target_path: str, data_path: Path, out_root: Path,
              max_steps: int | dict | None = None, deadline: float | None = None,
              recipes: dict | None = None, resume: dict | None = None) -> dict:
    """Train the named artifacts in order; returns {name: manifest or error}, a manifest with
    ``curve`` ({``<name>-c<i>``: step}, :func:`.artifacts.curve`) where the run has one. ``deadline``
    (time.time()): no run goes past it, less 30 s (its safety cap is cut to fit; one that would
    start after it is an error, not a run). ``max_steps``: one cap for all, or one per name;
    ``recipes``: default :data:`recipes.ALL`; ``resume``: {name: a kept state to go on from}."""
    from .recipes import ALL

    recipes = recipes or ALL
    seqs, digest = data_mod.load_sequences(data_path)
    target = Target(target_path, device())
    done = {}
    for name in names:
        r = recipes[name]
        t0 = time.time()
        try:
            cap = r["safety_cap_s"]
            if deadline is not None:
                left = deadline - t0 - 30
                if left <= 0:
                    raise TimeoutError("no time left before the deadline")
                cap = min(cap, left) if cap else left
            steps = max_steps.get(name) if isinstance(max_steps, dict) else max_steps
            man = done[name] = train(name, r, target, seqs, digest, out_root / name, steps, cap,
                                     (resume or {}).get(name))
            if r["data_fraction"] == 1 and r["eval_first_step"]:
                man["curve"] = artifacts.curve(out_root, name, CURVE_POINTS - 1)  # none for data sizes
            acc = {k: round(v, 3) for k, v in man["run"]["final_eval"].items()
                   if k.startswith("acc") or k == "loss"}
            print(f"[train] {name}: {man['run']['steps']} steps in {time.time() - t0:.0f}s, "
                  f"stopped by {man['run']['stopped_by']}; held-out {acc}; curve "
                  f"{man.get('curve', {})}", flush=True)
        except Exception as e:  # noqa: BLE001 - one failed artifact must not lose the others
            import traceback

            traceback.print_exc()
            done[name] = {"error": f"{type(e).__name__}: {e}"}
        if target.model.device.type == "cuda":
            torch.cuda.empty_cache()
    return done
