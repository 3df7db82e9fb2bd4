"""Issue 21: training until held-out agreement plateaus, on CPU, on a tiny slice.

The plateau rule itself; real (few-step) trainings of the EAGLE-3 head (the cheapest kind here)
stopped by each of the three reasons and recorded so; the checkpoints of the learning curve as
artifacts (the same files as the final one, packed, reassembled and installed like it); the
data-size variants (a prefix of the training sequences, the same validation sequences); the
carried data of an earlier lease; and the retraining of a plateau run step for step.
(Its own module: pytest-xdist runs it beside tests/test_training.py.)
"""
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from specdec import profiles
from specdec.training import artifacts, data, export, train
from specdec.training.recipes import ALL, DATA_PARTS, RECIPES, as_recorded, fractions

NAME = "smollm2-eagle3"


@pytest.fixture(scope="module")
def target():
    from specdec import models

    torch.set_num_threads(1)
    prof = profiles.load_profile("cpu-smollm2")
    return train.Target(str(models.resolve_model(prof, prof.target.name)), torch.device("cpu"))


@pytest.fixture(scope="module")
def seqs(tmp_path_factory):
    """9 random sequences: 8 to train on, the last for validation."""
    rng = np.random.default_rng(0)
    raw = [{"prompt_id": f"x{i}", "prompt": rng.integers(100, 3000, 8).tolist(),
            "completion": rng.integers(100, 3000, 16).tolist()} for i in range(9)]
    path = tmp_path_factory.mktemp("seqs") / "sequences.npz"
    digest = data.save_sequences(raw, path, {"test": True})
    loaded, again = data.load_sequences(path)
    assert again == digest == data.data_hash(
        np.concatenate([np.array(s["prompt"] + s["completion"], dtype=np.int32) for s in raw]),
        [24] * 9, [8] * 9)  # stored as uint16, hashed as int32
    assert np.load(path)["tokens"].dtype == np.uint16
    return loaded, digest, path


def _recipe(**kw):
    return {**RECIPES[NAME], "batch_size": 2, "max_len": 24, "log_every": 1, "val_sequences": 1,
            "warmup_steps": 1, "draft_vocab_size": 256, "eval_first_step": 1, **kw}


def _log(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "train_log.jsonl").read_text().splitlines()]


def test_plateau_rule():
    def pts(*accs):
        return [{"step": 125 * 2 ** i, "agreement": a} for i, a in enumerate(accs)]

    assert train.agreement({"acc1": 0.6, "acc2": 0.4, "acc3": 0.2, "acc4": 0.2, "acc5": 0.0,
                            "loss": 3.0}) == pytest.approx(0.35)  # K=4: positions 1-4 only
    assert train.agreement({"acc1": 0.3, "loss": 1.0}) == 0.3
    assert not train.plateaued(pts(0.1, 0.2, 0.2), 0.01)        # fewer than 4 points: never
    assert train.plateaued(pts(0.1, 0.2, 0.3, 0.305), 0.01)      # +0.5 point over a doubling
    assert not train.plateaued(pts(0.1, 0.2, 0.3, 0.31), 0.01)   # +1 point: still improving
    assert train.plateaued(pts(0.1, 0.2, 0.3, 0.25), 0.01)       # worse counts as no gain
    assert not train.plateaued(pts(0.1, 0.2, 0.3, 0.3), None)    # a retraining: never
    with pytest.raises(ValueError, match="not a doubling"):
        train.plateaued(pts(0.1, 0.2, 0.3) + [{"step": 1500, "agreement": 0.3}], 0.01)
    # on the first tokens (the recipes' default since lease 25): the whole sequence plateaued,
    # its first tokens still gain 5 points, so the run goes on
    firsts = [{**p, "first_tokens": {"acc1": a - 0.2}} for p, a in
              zip(pts(0.1, 0.2, 0.3, 0.3), (0.1, 0.2, 0.3, 0.35))]
    assert train.plateaued(firsts, 0.01) and not train.plateaued(firsts, 0.01, "first_tokens")
    assert RECIPES[NAME]["plateau_on"] == "first_tokens"
    with pytest.raises(ValueError, match="plateau_on"):
        train.plateaued(firsts, 0.01, "first")


def test_length_grouped_batches_pad_less_and_cover_every_sequence():
    """``batching: length-grouped``: each epoch still gives every sequence once, in batches of
    similar lengths (fewer padded positions than random batches of the same sequences); the
    order is seeded."""
    rng = np.random.default_rng(1)
    seqs = [(np.arange(n) % 50 + 1, 2) for n in rng.integers(5, 200, 400)]

    def epoch(grouped, seed=0):
        b = train.Batches(seqs, 4, 512, seed, torch.device("cpu"), grouped=grouped)
        out = [next(b) for _ in range(len(seqs) // 4)]
        return out, sorted(i for i in b.order)

    grouped, order = epoch(True)
    assert order == list(range(len(seqs)))
    padded = {g: sum(x["ids"].numel() for x in epoch(g)[0]) for g in (False, True)}
    assert padded[True] < 0.7 * padded[False]
    assert [x["nlen"].tolist() for x in grouped] == [x["nlen"].tolist() for x in epoch(True)[0]]
    assert [x["nlen"].tolist() for x in grouped] != [x["nlen"].tolist() for x in epoch(True, 1)[0]]
    with pytest.raises(ValueError, match="batching"):
        train.option({"batching": "sorted"}, "batching")


@pytest.fixture(scope="module")
def plateau_run(target, seqs, tmp_path_factory):
    """Stopped by the plateau rule at its first chance (no gain of 100 points): evaluations at
    steps 1, 2, 4, 8, each a checkpoint; then the learning curve's artifacts."""
    loaded, digest, _ = seqs
    root = tmp_path_factory.mktemp("plateau")
    man = train.train(NAME, _recipe(plateau_delta=1.0), target, loaded, digest, root / NAME,
                      max_steps=16)  # a rule that never fires stops at 16: "max_steps"
    return root, man, artifacts.curve(root, NAME)


def test_each_stop_reason_is_recorded(plateau_run, target, seqs, tmp_path):
    loaded, digest, _ = seqs
    _, man, _ = plateau_run
    run = man["run"]
    assert (run["steps"], run["stopped_by"]) == (8, "plateau")
    assert [e["step"] for e in run["evals"]] == [0, 1, 2, 4, 8]
    assert run["final_eval"] == run["evals"][-1]
    assert all(e["agreement"] == train.agreement(e) for e in run["evals"])
    assert run["train_s"] <= run["wall_s"]  # evaluations and exports left out of train_s
    cap = train.train(NAME, _recipe(plateau_delta=None), target, loaded, digest,
                      tmp_path / "cap", max_steps=3)["run"]
    assert (cap["steps"], cap["stopped_by"]) == (3, "max_steps")
    assert [(e["step"], "checkpoint" in e) for e in cap["evals"]] == \
        [(0, False), (1, True), (2, True), (3, False)]  # the last step evaluated, not exported
    timed = train.train(NAME, _recipe(plateau_delta=None, safety_cap_s=1e-9), target, loaded,
                        digest, tmp_path / "timed")["run"]
    assert (timed["steps"], timed["stopped_by"], timed["safety_cap_s"]) == (1, "time_cap", 1e-9)
    for d, want in ((tmp_path / "cap", "max_steps"), (tmp_path / "timed", "time_cap")):
        end = _log(d)[-1]
        assert end["event"] == "end" and end["stopped_by"] == want


def test_checkpoints_are_the_artifacts_of_the_learning_curve(plateau_run, target, tmp_path):
    from safetensors import safe_open

    root, man, made = plateau_run
    assert made == {f"{NAME}-c1": 1, f"{NAME}-c2": 2, f"{NAME}-c3": 4}
    assert json.loads((root / NAME / "manifest.json").read_text())["curve"] == made

    def tensors(d):
        with safe_open(str(d / "model.safetensors"), framework="pt") as f:
            return {k: tuple(f.get_tensor(k).shape) for k in f.keys()}

    final = tensors(root / NAME)
    cfg = (root / NAME / "config.json").read_text()
    for ev in man["run"]["evals"][1:]:
        d = root / NAME / ev["checkpoint"]
        cman = json.loads((d / "manifest.json").read_text())
        assert tensors(d) == final and (d / "config.json").read_text() == cfg
        assert cman["run"]["steps"] == ev["step"] and cman["run"]["checkpoint"]
        assert ev["weights_sha256"] == cman["files"]["model.safetensors"]
    # stopped at an evaluation: the final artifact is its last checkpoint
    last = json.loads((root / NAME / "checkpoints/step000008/manifest.json").read_text())
    assert last["tensors"] == man["tensors"]
    # curve artifacts: complete, named, each pointing at its checkpoint's step and weights
    for name, step in made.items():
        cman = json.loads((root / name / "manifest.json").read_text())
        assert (cman["artifact"], cman["checkpoint_of"], cman["checkpoint_step"]) == (name, NAME, step)
        assert export.sha256_file(root / name / "model.safetensors") == cman["files"]["model.safetensors"]
    # they travel and install as the final one does
    assert artifacts.pack(root, [NAME, *made], {}, tmp_path / "parts")["parts"]
    got = artifacts.unpack(tmp_path / "parts", Path(target.path), artifacts_out=tmp_path / "a",
                           records_out=tmp_path / "r")
    assert set(got["artifacts"]) == {NAME, *made}
    # installed where they were trained (a lease measures them there), resolvable by name
    local = artifacts.install_local(root, tmp_path / "b", tmp_path / "rb")
    assert set(local["artifacts"]) == {NAME, *made}
    # records only (what a lease always brings back): every record and checkpoint manifest
    n = artifacts.records_archive(root, tmp_path / "records.tgz")
    with tarfile.open(tmp_path / "records.tgz") as tf:
        names = set(tf.getnames())
    assert n == 4 and f"{NAME}/checkpoints/step000004/manifest.json" in names
    assert f"{NAME}-c2/manifest.json" in names and not any(x.endswith(".safetensors") for x in names)
    # the log travels and is committed gzipped, and reads back line for line
    assert f"{NAME}/train_log.jsonl.gz" in names and f"{NAME}/train_log.jsonl" not in names
    with tarfile.open(tmp_path / "records.tgz") as tf:
        tf.extractall(tmp_path / "rec", filter="data")
    assert artifacts.read_log(tmp_path / "rec" / NAME) == _log(root / NAME)
    assert artifacts.read_log(root / NAME) == _log(root / NAME)  # as written
    assert artifacts.read_log(tmp_path / "nowhere") == []


def test_curve_artifacts_resolve_after_a_local_install(plateau_run, tmp_path, monkeypatch):
    root, _, made = plateau_run
    monkeypatch.setenv("SPECDEC_TRAINED_DIR", str(tmp_path / "t"))
    monkeypatch.setenv("SPECDEC_TRAINED_RECORDS", str(tmp_path / "t" / "_records"))
    artifacts.install_local(root)
    for name in [NAME, *made]:
        assert artifacts.resolve(name) == str(tmp_path / "t" / name)
    w = tmp_path / "t" / f"{NAME}-c1" / "model.safetensors"
    blob = bytearray(w.read_bytes())
    w.unlink()  # a hard link: write a changed copy, not through the link
    blob[-1] ^= 1
    w.write_bytes(bytes(blob))
    with pytest.raises(artifacts.ArtifactError, match="sha256"):
        artifacts.resolve(f"{NAME}-c1")


def test_train_all_keeps_runs_within_the_deadline(target, seqs, tmp_path):
    """No safety cap and no deadline: the run goes on (a retraining, `train tiny`); a deadline
    caps each run's safety cap, and a run that would start after it is an error, not a run."""
    import time

    _, _, path = seqs
    got = train.train_all([NAME], target.path, path, tmp_path / "a", max_steps=1,
                          recipes={NAME: _recipe(safety_cap_s=0)})
    assert got[NAME]["run"]["steps"] == 1 and got[NAME]["run"]["safety_cap_s"] == 0
    got = train.train_all([NAME], target.path, path, tmp_path / "b", max_steps=1,
                          recipes={NAME: _recipe()}, deadline=time.time() + 100)
    assert 0 < got[NAME]["run"]["safety_cap_s"] <= 70
    late = train.train_all([NAME], target.path, path, tmp_path / "c",
                           recipes={NAME: _recipe()}, deadline=time.time() + 10)
    assert late == {NAME: {"error": "TimeoutError: no time left before the deadline"}}


def test_data_fraction_trains_on_a_prefix_validated_alike(target, seqs, tmp_path):
    loaded, digest, _ = seqs
    full_train, full_val = train.split(loaded, _recipe())
    half_train, half_val = train.split(loaded, _recipe(data_fraction=0.5))
    assert len(full_train) == 8 and len(half_train) == 4
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(half_train, full_train))
    assert len(half_val) == 1 and np.array_equal(half_val[0][0], full_val[0][0])
    man = train.train(f"{NAME}-data1of2", _recipe(data_fraction=0.5, plateau_delta=None), target,
                      loaded, digest, tmp_path / "half", max_steps=2)
    assert man["recipe"]["data_fraction"] == 0.5 and man["run"]["data_fraction"] == 0.5
    assert man["run"]["train_sequences"] == 4 and man["data_sha256"] == digest
    variants = fractions([NAME])
    assert sorted(variants) == sorted(f"{NAME}-data1of{p}" for p in DATA_PARTS)
    assert {r["data_fraction"] for r in variants.values()} == {1 / p for p in DATA_PARTS}
    assert set(variants) <= set(ALL) and all(r["data_fraction"] == 1 for r in RECIPES.values())


def test_a_compiled_soft_ce_runs_and_is_recorded_or_falls_back_recorded(target, seqs, tmp_path,
                                                                        monkeypatch):
    """`fit --set soft_ce=compiled`: the run trains through torch.compile and its manifest says
    so; where the compile fails on the machine, the run trains eager and its manifest says
    that, and why (a lease's fit never dies of it)."""
    loaded, digest, _ = seqs
    man = train.train(NAME, _recipe(soft_ce="compiled", plateau_delta=None), target, loaded,
                      digest, tmp_path / "c", max_steps=2)
    assert man["recipe"]["soft_ce"] == "compiled" and "soft_ce_fallback" not in man["recipe"]
    eager = train.train(NAME, _recipe(plateau_delta=None), target, loaded, digest, tmp_path / "e",
                        max_steps=2)
    assert man["run"]["evals"][-1]["loss"] == pytest.approx(eager["run"]["evals"][-1]["loss"],
                                                            rel=1e-4)

    def broken():
        raise RuntimeError("no C compiler")

    monkeypatch.setattr(train, "_soft_ce_compiled", broken)
    man = train.train(NAME, _recipe(soft_ce="compiled", plateau_delta=None), target, loaded,
                      digest, tmp_path / "f", max_steps=2)
    assert man["recipe"]["soft_ce"] == "eager"
    assert man["recipe"]["soft_ce_fallback"] == "RuntimeError: no C compiler"
    assert json.loads((tmp_path / "f" / "recipe.json").read_text())["soft_ce"] == "eager"


def test_a_plateau_run_retrains_step_for_step(plateau_run, target, seqs, tmp_path):
    """recipes.as_recorded on a plateau run's records: its recipe, its steps, no plateau rule,
    no time cap; checkpoints are records of their run, not runs of their own. On the CPU the
    retraining is bit-identical, checkpoints included."""
    import shutil

    loaded, digest, _ = seqs
    root, man, made = plateau_run
    rec = tmp_path / "records"
    for name in [NAME, *made]:
        shutil.copytree(root / name, rec / name, ignore=shutil.ignore_patterns("*.safetensors"))
    recipes = as_recorded(rec)
    assert list(recipes) == [NAME]
    r = recipes[NAME]
    assert (r["max_steps"], r["plateau_delta"], r["safety_cap_s"]) == (8, None, 0)
    assert "vocab_rows" not in man["recipe"] and r["vocab_rows"] == "all"  # as it ran
    new = ("max_steps", "plateau_delta", "safety_cap_s", "vocab_rows")
    assert {k: v for k, v in r.items() if k not in new} \
        == {k: v for k, v in man["recipe"].items() if k not in new}
    again = train.train(NAME, r, target, loaded, digest, tmp_path / "again")
    assert (again["run"]["steps"], again["run"]["stopped_by"]) == (8, "max_steps")
    assert again["tensors"] == man["tensors"]
    assert [e["weights_sha256"] for e in again["run"]["evals"][1:]] == \
        [e["weights_sha256"] for e in man["run"]["evals"][1:]]


def test_records_before_issue_21_retrain_as_they_ran(tmp_path):
    """A recipe recorded before issue 21 (time budget, cosine schedule) comes back with the
    schedule it ran under and no evaluations between the first and the last step."""
    old = {k: v for k, v in RECIPES[NAME].items()
           if k not in ("lr_schedule", "eval_first_step", "plateau_delta", "safety_cap_s",
                        "data_fraction", "batching", "plateau_on", "target_features",
                        "soft_ce")}
    (tmp_path / NAME).mkdir()
    (tmp_path / NAME / "manifest.json").write_text(json.dumps(
        {"recipe": {**old, "time_budget_s": 90}, "run": {"steps": 663}}))
    r = as_recorded(tmp_path)[NAME]
    assert "time_budget_s" not in r
    assert (r["lr_schedule"], r["eval_first_step"], r["data_fraction"], r["max_steps"]) == \
        ("cosine", 0, 1.0, 663)
    assert (r["batching"], r["plateau_on"], r["target_features"], r["soft_ce"]) == \
        ("random", "whole", "per-step", "eager")  # as those runs ran
    assert train._lr(r, 662, 663) < 0.2 * train._lr(r, 100, 663)  # cosine: decayed at the end
    new = RECIPES[NAME]
    assert train._lr(new, 100, 16000) == train._lr(new, 15999, 16000) == new["lr"]


def test_carried_data_is_checked_and_used(seqs, tmp_path):
    """`train data` on a later lease takes the sequences an earlier one generated, if they are
    what their record says and continue the carried prompts."""
    from specdec.training import device

    _, digest, path = seqs
    carry, work = tmp_path / "carry", tmp_path / "work"
    carry.mkdir()
    assert device.carried_data(carry, work) is None
    split = {"train": {"sha256": "prompts-hash"}}
    (carry / "split.json").write_text(json.dumps(split))
    (carry / "sequences.npz").write_bytes(path.read_bytes())
    rec = {"data_sha256": digest, "sequences": 9, "train": split["train"]}
    (carry / "sequences.npz.json").write_text(json.dumps(rec))
    got = device.carried_data(carry, work)
    assert got == work / "data" / "sequences.npz" and data.load_sequences(got)[1] == digest
    (carry / "sequences.npz.json").write_text(json.dumps({**rec, "data_sha256": "0" * 64}))
    with pytest.raises(SystemExit, match="does not match"):
        device.carried_data(carry, work)


def test_kept_data_travels_compressed_and_comes_back_the_same(seqs, tmp_path):
    """`specdec train keep-data`: the sequences a lease returned, checked and xz-compressed
    where they are committed; `train carry` takes them only for the same prompts, and the
    lease's data step decompresses and checks them (no generation)."""
    from specdec.training import device

    _, digest, path = seqs
    back = tmp_path / "back"
    back.mkdir()
    (back / "sequences.npz").write_bytes(path.read_bytes())
    rec = {"data_sha256": digest, "sequences": 9, "train": {"sha256": "prompts-hash"}}
    (back / "sequences.npz.json").write_text(json.dumps(rec))
    kept = tmp_path / "kept"
    assert device.keep_data(back, kept) == digest
    assert (kept / device.DATA_XZ).stat().st_size < path.stat().st_size
    carry, work = tmp_path / "carry", tmp_path / "work"
    carry.mkdir()
    (carry / "split.json").write_text(json.dumps({"train": rec["train"]}))
    for f in (device.DATA_XZ, "sequences.npz.json"):
        (carry / f).write_bytes((kept / f).read_bytes())
    got = device.carried_data(carry, work)
    assert got == work / "data" / "sequences.npz" and data.load_sequences(got)[1] == digest
    assert sorted(p.name for p in (work / "data").iterdir()) == ["sequences.npz", "sequences.npz.json"]
    (back / "sequences.npz.json").write_text(json.dumps({**rec, "data_sha256": "0" * 64}))
    with pytest.raises(SystemExit, match="not kept"):
        device.keep_data(back, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_first_tokens_are_what_a_plateau_request_generates():
    """recipes.WORKLOAD_TOKENS, the evaluation's first tokens, is every plateau profile's
    max_tokens: the prediction from held-out agreement covers the positions vLLM measures."""
    from specdec.training.recipes import WORKLOAD_TOKENS

    for name in ("h200-plateau", "h100-plateau-v2", "h100-plateau"):
        assert profiles.load_profile(name).sampling.max_tokens == WORKLOAD_TOKENS


def test_agreement_as_vllm_counts_it():
    """k_rate: a position is reached only if every earlier one was accepted; first_tokens keeps
    the first n continuation tokens and the one they predict."""
    assert train.k_rate([1.0]) == 1.0
    assert train.k_rate([0.5], k=2) == pytest.approx((0.5 + 0.25) / 2)
    assert train.k_rate([0.8, 0.5, 0.5, 0.5]) == pytest.approx((0.8 + 0.4 + 0.2 + 0.1) / 4)
    assert train.k_rate([0.8, 0.5]) == train.k_rate([0.8, 0.5, 0.5, 0.5])  # the last repeats
    seq = (np.arange(20), 5)
    (cut, plen), = train.first_tokens([seq], n=4)
    assert plen == 5 and list(cut) == list(range(10))


def test_an_exported_head_evaluates_again_as_it_was_evaluated(plateau_run, target, seqs):
    """train.load_kind on the exported EAGLE-3 artifact (bfloat16 weights, d2t / t2d) gives the
    head the training evaluated: the same held-out agreement on the validation sequence, up to
    the rounding to bfloat16; each evaluation also reports the first tokens' agreement."""
    loaded, _, _ = seqs
    root, man, _ = plateau_run
    final = man["run"]["final_eval"]
    assert all(set(e["first_tokens"]) == {"acc1", "acc2", "acc3"} for e in man["run"]["evals"])
    kind = train.load_kind(root / NAME, target)
    got = train.agreement_on(kind, loaded[-1:])
    assert got["loss"] == pytest.approx(final["loss"], rel=0.05)
    assert abs(got["agreement"] - final["agreement"]) <= 0.1
    assert got["k4_rate"] == pytest.approx(train.k_rate([got["acc1"], got["acc2"], got["acc3"]]))
    fresh = train.KINDS["eagle3"](_recipe(), target, loaded[:-1], torch.device("cpu"))
    assert train.agreement_on(fresh, loaded[-1:])["loss"] > got["loss"] + 1  # untrained: worse


def test_an_exported_draft_evaluates_again_as_it_was_evaluated(target, seqs, tmp_path):
    """train.load_kind on an exported draft LM (the target's first layer, distilled for two
    steps; config.json as vLLM loads it, the tied head left to the embeddings) gives the draft
    the training evaluated: what `specdec train replay` runs on vLLM's sequences."""
    loaded, digest, _ = seqs
    name = "smollm2-draft-l2"
    recipe = {**RECIPES[name], "num_layers": 1, "batch_size": 2, "max_len": 24,
              "log_every": 1, "val_sequences": 1, "warmup_steps": 1, "eval_first_step": 1}
    man = train.train(name, recipe, target, loaded, digest, tmp_path / name, max_steps=2)
    final = man["run"]["final_eval"]
    kind = train.load_kind(tmp_path / name, target)
    assert kind.module.config.num_hidden_layers == 1
    assert kind.module.lm_head.weight.data_ptr() == kind.module.model.embed_tokens.weight.data_ptr()
    got = train.agreement_on(kind, loaded[-1:])
    assert got["loss"] == pytest.approx(final["loss"], rel=0.05)
    assert abs(got["acc1"] - final["acc1"]) <= 0.1
    assert got["k4_rate"] == pytest.approx(train.k_rate([got["acc1"]]))


def test_a_medusa_k_copy_replays_as_the_trained_heads(target, seqs, tmp_path):
    """vLLM measures Medusa through ``<name>-k<K>`` copies (artifacts.medusa_variants), which
    have no recipe: `specdec train replay` resolves a copy to the trained heads it was cut
    from (artifacts.trained_of) and evaluates those; a trained artifact resolves to itself
    (lease 29's replay of medusa-k4 failed on the copy's missing recipe.json)."""
    loaded, digest, _ = seqs
    name = "smollm2-medusa"
    recipe = {**RECIPES[name], "batch_size": 2, "max_len": 24, "log_every": 1,
              "val_sequences": 1, "warmup_steps": 1, "eval_first_step": 1}
    man = train.train(name, recipe, target, loaded, digest, tmp_path / name, max_steps=2)
    assert artifacts.medusa_variants(name, [2, 4], tmp_path) == [f"{name}-k2", f"{name}-k4"]
    assert not (tmp_path / f"{name}-k4" / "recipe.json").exists()
    assert artifacts.trained_of(f"{name}-k4", tmp_path) == name
    assert artifacts.trained_of(name, tmp_path) == name
    kind = train.load_kind(tmp_path / artifacts.trained_of(f"{name}-k2", tmp_path), target)
    assert len(kind.module.blocks) == RECIPES[name]["num_heads"]
    from safetensors.torch import load_file
    saved = load_file(str(tmp_path / name / "model.safetensors"))["blocks.3.layers.0.weight"]
    assert saved.abs().sum() > 0  # trained away from the zero start
    assert torch.equal(kind.module.blocks[3]["layers"][0].weight, saved.float())
    got, final = train.agreement_on(kind, loaded[-1:]), man["run"]["final_eval"]
    assert got["loss"] == pytest.approx(final["loss"], rel=0.05)  # the heads it trained
    assert all(abs(got[f"acc{k}"] - final[f"acc{k}"]) <= 0.1 for k in range(1, 5))


def test_bench_times_each_phase_of_a_step(target, seqs, monkeypatch):
    """train.bench: the phases of a real step, each timed, and a whole step without the
    synchronisations; the recipe's batch is what it times, and its warm-up runs the very
    batches it times (a shape new to the process costs once: lease 28)."""
    loaded, _, _ = seqs
    seen, update = [], train._update
    monkeypatch.setattr(train, "_update", lambda kind, opt, params, b, *a, **k: (
        seen.append(b["ids"]), update(kind, opt, params, b, *a, **k))[1])
    r = train.bench(NAME, _recipe(), target, loaded, steps=3)
    assert len(seen) == 9  # the warm-up, the timed pass, the whole steps: the same 3 batches
    assert all(seen[i] is seen[i + 3] is seen[i + 6] for i in range(3))
    assert len({id(b) for b in seen}) == 3
    assert set(r) >= {"features", "loss", "backward", "optimizer", "step_s"}
    assert all(r[k] > 0 for k in ("features", "backward", "optimizer", "step_s"))
    assert (r["name"], r["batch_size"], r["max_len"], r["device"]) == (NAME, 2, 24, "cpu")


def test_the_bench_step_of_a_lease_writes_bench_json(target, seqs, tmp_path, monkeypatch):
    """`lease.sh train bench`: the device step on the work folder `train data` leaves."""
    from specdec.training import device

    _, _, path = seqs
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "target").symlink_to(target.path)
    (work / "data" / "sequences.npz").write_bytes(path.read_bytes())
    monkeypatch.setitem(device.ALL, NAME, _recipe())
    device.main(["bench", "--work", str(work), "--out", str(tmp_path / "out"), "--only", NAME,
                 "--max-steps", "1"])
    got = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert [r["name"] for r in got] == [NAME] and got[0]["steps"] == 1 and got[0]["step_s"] > 0
    # a second bench with a recipe option set (`--set`) adds its results, the setting recorded
    device.main(["bench", "--work", str(work), "--out", str(tmp_path / "out"), "--only", NAME,
                 "--max-steps", "1", "--set", "soft_ce=compiled"])
    got = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert [r["settings"] for r in got] == [{}, {"soft_ce": "compiled"}]
    assert [r["soft_ce"] for r in got] == ["eager", "compiled"]  # the kernel each one ran
    # --profile: the operators of one more pass, by their time, beside bench.json
    device.main(["bench", "--work", str(work), "--out", str(tmp_path / "out"), "--only", NAME,
                 "--max-steps", "1", "--profile"])
    table = (tmp_path / "out" / f"profile-{NAME}.txt").read_text()
    assert table.startswith(f"{NAME}, 1 steps of 2 sequences") and "aten::" in table
    for bad in ("soft_ce=fused", "lr=1"):  # refused before the target loads
        with pytest.raises(SystemExit, match="--set"):
            device.main(["bench", "--work", str(tmp_path / "none"), "--set", bad])


def test_the_fit_step_of_a_lease_trains_with_a_setting_and_records_it(target, seqs, tmp_path,
                                                                       monkeypatch):
    """`lease.sh train bg fit S --only A --set soft_ce=compiled`: the device step trains the
    recipe with the setting, fit.json and the records say so; a setting with --as-recorded
    (repeat the recorded runs) is refused before any work."""
    from specdec.training import device

    _, _, path = seqs
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "target").symlink_to(target.path)
    (work / "data" / "sequences.npz").write_bytes(path.read_bytes())
    monkeypatch.setitem(device.ALL, NAME, _recipe(plateau_delta=None))
    out = tmp_path / "out"
    device.main(["fit", "--work", str(work), "--out", str(out), "--only", NAME, "--seconds", "0",
                 "--max-steps", "2", "--set", "soft_ce=compiled", "--set", "vocab_rows=decoding"])
    fit = json.loads((out / "fit.json").read_text())[NAME]
    assert (fit["recipe"]["soft_ce"], fit["recipe"]["vocab_rows"]) == ("compiled", "decoding")
    assert fit["run"]["steps"] == 2
    with tarfile.open(out / "records.tgz") as tar:
        rec = json.load(tar.extractfile(f"{NAME}/manifest.json"))
    assert (rec["recipe"]["soft_ce"], rec["recipe"]["vocab_rows"]) == ("compiled", "decoding")
    with pytest.raises(SystemExit, match="--as-recorded"):
        device.main(["fit", "--work", str(work), "--out", str(out), "--as-recorded",
                     str(tmp_path), "--set", "soft_ce=compiled"])


def test_split_takes_every_human_turn_once_and_no_held_out_prompt(target):
    """The training prompts: distinct, none a held-out prompt (the first ShareGPT
    conversations), more than the first turns alone; the held-out set as recorded."""
    from transformers import AutoTokenizer

    from specdec import workloads

    s = data.sharegpt_split(600, target.path)
    rec = json.loads((Path(__file__).parents[1] / "data/trained/_data/sequences.npz.json").read_text())
    assert s["heldout"] == rec["heldout"]  # the same 256 conversations as before issue 21
    ids = [tuple(p["token_ids"]) for p in s["prompts"]]
    assert len(ids) == len(set(ids)) == 600
    assert any(not p["prompt_id"].endswith("#0") for p in s["prompts"])  # later turns too
    tok = AutoTokenizer.from_pretrained(target.path)
    held = {tuple(tok(tok.apply_chat_template([{"role": "user", "content": t}],
                                              add_generation_prompt=True, tokenize=False),
                      add_special_tokens=False)["input_ids"])
            for _, t in workloads._sharegpt(data.HELDOUT)}
    assert not held & set(ids)


def test_a_lease_measures_what_it_trained(tmp_path, monkeypatch, capsys):
    """h200-plateau: with only EAGLE-3's final artifact and checkpoints installed, its
    experiment runs (pre-flight checks the experiments named), the whole profile does not."""
    from specdec import runner, validate

    for name in [NAME, *(f"{NAME}-c{i}" for i in (1, 2, 3))]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"vocab_size": 49152}))
    monkeypatch.setenv("SPECDEC_TRAINED_DIR", str(tmp_path))
    res = runner.run("h200-plateau", ["steps-eagle3"], dry_run=True,
                     results_root=tmp_path / "results")
    assert res["failed"] == [] and len(res["skipped"]) == 0
    assert "h200-plateau: 12 cells" in capsys.readouterr().out  # 4 artifacts x 3 workloads
    with pytest.raises(validate.ValidationError, match="smollm2-eagle-c1|is missing"):
        runner.run("h200-plateau", ["steps-eagle3", "steps-eagle"], dry_run=True,
                   results_root=tmp_path / "results")
    # --cell narrows what must be installed to its cells' artifacts: one data size trained,
    # its cells run; the experiment's other sizes stay missing (lease 29 was refused here)
    (tmp_path / f"{NAME}-data1of8").mkdir()
    (tmp_path / f"{NAME}-data1of8" / "config.json").write_text(json.dumps({"vocab_size": 49152}))
    capsys.readouterr()
    runner.run("h200-plateau", ["data-eagle3"], dry_run=True, results_root=tmp_path / "results",
               cells=["eagle3-data1of8-*"])
    assert "h200-plateau: 3 cells" in capsys.readouterr().out
    with pytest.raises(validate.ValidationError, match="data1of4|is missing"):
        runner.run("h200-plateau", ["data-eagle3"], dry_run=True,
                   results_root=tmp_path / "results")
    # a prompt that cannot fit the engine's context is refused before an engine starts (lease
    # 25 measured 32 held-out ShareGPT prompts, the 26th of 2821 tokens: vLLM refused its cells)
    prof = profiles.load_profile("h200-plateau")
    longer = prof.model_copy(update={"workloads": [
        w.model_copy(update={"num_prompts": 32}) if w.name == "sharegpt-heldout" else w
        for w in prof.workloads]})
    with pytest.raises(profiles.ProfileError, match=r"sharegpt-heldout\]: prompt .* 2821 tokens"):
        runner.run(longer, ["steps-eagle3"], dry_run=True, results_root=tmp_path / "results")


@pytest.mark.parametrize("batching", ["length-grouped", "random"])
def test_a_run_a_cap_stopped_goes_on_from_its_state_bit_for_bit(plateau_run, target, seqs,
                                                                 tmp_path, batching):
    """A run a cap stopped keeps its state (a plateau stop does not); resumed in a later lease
    (here: another call) it takes the steps the run not stopped would have taken: on the CPU
    the same weights at every later checkpoint, and one record of both parts (evaluations, log,
    where each part began). A state that is not this run's is refused before any step."""
    loaded, digest, _ = seqs
    root, _, _ = plateau_run
    assert not train.state_path(root / NAME).exists()  # stopped by the plateau rule: nothing kept
    r = _recipe(plateau_delta=None, batching=batching)
    whole = train.train(NAME, r, target, loaded, digest, tmp_path / "whole" / NAME, max_steps=8)
    first = train.train(NAME, r, target, loaded, digest, tmp_path / "a" / NAME, max_steps=3)
    kept = train.state_path(tmp_path / "a" / NAME)
    assert first["run"]["stopped_by"] == "max_steps" and kept.is_file()
    assert kept.parent.name == train.STATE_DIR and not (tmp_path / "a" / NAME / kept.name).exists()
    again = train.train(NAME, r, target, loaded, digest, tmp_path / "b" / NAME, max_steps=8,
                        resume=kept)

    def weights(man):
        return {e["step"]: e["weights_sha256"] for e in man["run"]["evals"] if "checkpoint" in e}

    assert weights(again) == weights(whole) and set(weights(whole)) == {1, 2, 4, 8}
    assert again["tensors"] == whole["tensors"]
    run = again["run"]
    assert (run["steps"], run["stopped_by"]) == (8, "max_steps")
    assert [e["step"] for e in run["evals"]] == [0, 1, 2, 3, 4, 8]  # 3: where the first part stopped
    assert [e["train_s"] for e in run["evals"]] == sorted(e["train_s"] for e in run["evals"])
    assert run["segments"] == [{"from_step": 0, "device_name": "cpu", "to_step": 3},
                               {"from_step": 3, "device_name": "cpu", "to_step": 8}]
    log = _log(tmp_path / "b" / NAME)
    assert [e["step"] for e in log if e["event"] == "train"] == list(range(1, 9))
    assert [e["event"] for e in log if e["event"] in ("resume", "end")] == ["end", "resume", "end"]
    # the first part's checkpoints come as records, their weights stayed where they were made
    early = tmp_path / "b" / NAME / train.CHECKPOINTS / "step000002"
    assert (early / artifacts.MANIFEST).read_text() == \
        (tmp_path / "a" / NAME / train.CHECKPOINTS / "step000002" / artifacts.MANIFEST).read_text()
    assert not (early / export.WEIGHTS).exists()
    for bad, want in (({**r, "lr": 1e-2}, "another recipe"), (r, "data")):
        with pytest.raises(ValueError, match=want):
            train.train(NAME, bad, target, loaded, "0" * 64 if want == "data" else digest,
                        tmp_path / "c" / NAME, max_steps=8, resume=kept)
    with pytest.raises(ValueError, match="nothing to go on with"):
        train.train(NAME, r, target, loaded, digest, tmp_path / "c" / NAME, max_steps=3,
                    resume=kept)


def test_a_kept_state_travels_back_stays_in_history_and_is_carried_again(target, seqs,
                                                                         tmp_path, monkeypatch):
    """The trip of a state between two leases: cut there (fit), brought back a batch of parts a
    call (`train state N`), kept here and committed, its parts removed from the tree, read back
    from git history into the next carry, reassembled and checked there, and gone on from."""
    import subprocess

    from specdec.training import device

    loaded, digest, path = seqs
    work = tmp_path / "work"
    train.train(NAME, _recipe(plateau_delta=None), target, loaded, digest,
                work / "artifacts" / NAME, max_steps=3)
    state = work / "artifacts" / train.STATE_DIR / f"{NAME}.pt"
    monkeypatch.setattr(device, "STATE_PART_BYTES", state.stat().st_size // 5 + 1)
    index = device.states_out(work)
    assert len(index[NAME]["parts"]) == 5
    calls = [tmp_path / f"call{n}" for n in range(2)]  # 4 parts a call
    for n, out in enumerate(calls):
        device.step_state(work, out, n)
    assert len(list(calls[1].glob(f"{NAME}.pt.*"))) == 1
    with pytest.raises(SystemExit, match="not brought back"):
        device.keep_state(calls[:1], tmp_path / "nowhere")
    repo = tmp_path / "repo"
    kept = device.keep_state(calls, repo / "_resume")[NAME]
    assert kept["step"] == 3 and kept["sha256"] == device.sha256_file(state)

    def git(*a):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=repo,
                       check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "kept")
    git("rm", "-q", *[f"_resume/{NAME}/{q['file']}" for q in kept["parts"]])
    git("commit", "-qm", "parts out of the tree")
    assert [f.name for f in (repo / "_resume" / NAME).iterdir()] == ["resume.json"]
    carry = tmp_path / "carry"
    carry.mkdir()
    rec = device._kept_state(NAME, tmp_path / "again.pt", repo / "_resume")
    assert device.sha256_file(tmp_path / "again.pt") == rec["sha256"]
    parts = device.cut(tmp_path / "again.pt", carry, f"resume-{NAME}.pt", 10_000_000)
    (carry / "carry.json").write_text(json.dumps(
        {"resume": {NAME: {"sha256": rec["sha256"], "parts": [q.name for q in parts]}}}))
    there = device.carried_states(carry, tmp_path / "work2")
    assert device.sha256_file(there[NAME]) == device.sha256_file(state)
    again = train.train(NAME, _recipe(plateau_delta=None), target, loaded, digest,
                        tmp_path / "work2" / "artifacts" / NAME, max_steps=4, resume=there[NAME])
    assert again["run"]["segments"][-1] == {"from_step": 3, "device_name": "cpu", "to_step": 4}
    parts[0].write_bytes(b"x" + parts[0].read_bytes()[1:])  # a part damaged on the way
    with pytest.raises(SystemExit, match="do not reassemble"):
        device.carried_states(carry, tmp_path / "work3")
