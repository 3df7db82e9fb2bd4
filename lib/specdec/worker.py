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
    emit("engine_ready", engine_start_s=engine_start_s)
    memory = PeakMemory(profile.hardware.kind == "cuda")
    kv_bytes = kv_cache_bytes(llm)
    speculative = spec["speculative_config"] is not None
    prompt_cache: dict[str, list] = {}

    for c in spec["cells"]:
        cell = profiles.Cell(**c["cell"])
        ident = dict(c["identity"])
        try:
            wl = profile.workload(cell.workload)
            if wl.name not in prompt_cache:
                prompt_cache[wl.name] = workloads.load_prompts(wl, profile, tokenizer=spec.get("tokenizer"))
            calls = workloads.batches(prompt_cache[wl.name], cell.batch_size)
            sampling = spec["sampling"]
            memory.reset()
            for _ in range(profile.warmup):
                run_pass(llm, calls, sampling, cell.temperature)
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
