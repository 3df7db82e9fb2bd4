"""Trained artifacts on disk: where they live, packing for a lease, reassembly, resolution.

Layout:

- ``.cache/trained/<artifact>/`` (``SPECDEC_TRAINED_DIR``): what vLLM loads (config.json,
  model.safetensors) and the manifest; never committed (the drafts carry the target's
  embeddings, 113 MB in float32);
- ``data/trained/<artifact>/`` (``SPECDEC_TRAINED_RECORDS``): the committed record: manifest
  (recipe, data hash, run, per-tensor and per-file sha256), recipe, training log, config;
  ``data/plateau/<artifact>/`` the plateau trainings' (:func:`records_archive`: the log
  gzipped, its manifest's sha256 that of the log as written).

Transport (a lease brings back at most 8 files of 16 MiB per call): :func:`pack` leaves out
the tensors that are copies of the target's (``from_target``), tars the rest with the data
and logs and splits it into 15 MB parts with a hash list; :func:`unpack` checks every part
and the archive, restores the left-out tensors from the local target (checking their
sha256), checks every tensor's sha256 against the manifest written on the device, writes
the full checkpoint and installs the artifact and its record.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from .. import paths
from ..provenance import sha256_file
from . import export

MANIFEST = export.MANIFEST
SHIPPED = "model.shipped.safetensors"
PART_BYTES = 15_000_000
ARCHIVE = "train-out.tgz"
PARTS_INDEX = "train-out.parts.json"
LOG = "train_log.jsonl"
RECORD_FILES = ("manifest.json", "recipe.json", LOG, "config.json")


class ArtifactError(RuntimeError):
    """A trained artifact is missing, or its parts or weights do not match their sha256."""


def trained_root() -> Path:
    return Path(os.environ.get("SPECDEC_TRAINED_DIR", paths.CACHE_DIR / "trained"))


def records_root() -> Path:
    return Path(os.environ.get("SPECDEC_TRAINED_RECORDS", paths.DATA_DIR / "trained"))


def _read(p: Path) -> dict | None:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def manifest(name: str, records: Path | None = None) -> dict | None:
    """The manifest in ``records`` only, if given; else the committed record's, else the one
    beside the files (tests, fresh runs)."""
    if records is not None:
        return _read(Path(records) / name / MANIFEST)
    return _read(records_root() / name / MANIFEST) or _read(trained_root() / name / MANIFEST)


def missing_message(name: str) -> str:
    return (f"trained artifact {name!r} is missing: {trained_root() / name} does not exist. "
            f"It is trained on a GPU lease (book/reproduce.md, section 'Training heads and "
            f"drafts on a lease') and installed here with `specdec train unpack <dir of "
            f"train-out parts>`; `specdec train tiny` makes a CPU smoke version")


def local_dir(name: str) -> Path:
    return trained_root() / name


def resolve(name: str) -> str:
    """The directory vLLM loads for artifact ``name``, after checking its weights' sha256."""
    d = trained_root() / name
    if not (d / "config.json").is_file():
        raise ArtifactError(missing_message(name))
    man = manifest(name)
    if man is None:
        raise ArtifactError(f"trained artifact {name!r}: no {MANIFEST} in {records_root() / name} "
                         f"or {d}")
    files = man.get("local_files") or man.get("files") or {}
    for f in ("config.json", "model.safetensors"):
        want = files.get(f)
        if want and sha256_file(d / f) != want:
            raise ArtifactError(f"trained artifact {name!r}: {d / f} does not match the sha256 in "
                             f"its manifest; reinstall it (`specdec train unpack`)")
    return str(d)


def trained_of(name: str, root: Path | None = None) -> str:
    """The artifact that ``name`` in ``root`` (default: :func:`trained_root`) is a K-head copy
    of (a Medusa ``<name>-k<K>``, :func:`medusa_variants`: its manifest's ``variant_of``),
    else ``name`` itself: the one with the recipe and the training's weights."""
    man = _read(Path(root or trained_root()) / name / MANIFEST) or {}
    return man.get("variant_of") or name


def installed_weights(name: str) -> str | None:
    """The sha256 of the weights of artifact ``name`` as installed here (the training's own
    hash, from the manifest beside the files; a Medusa ``-k<K>`` variant: its trained heads'),
    or None where it is not installed. A stored row of a cell records it (``draft_sha256``),
    so a retrained artifact's cells are measured again (:func:`specdec.runner.plan`)."""
    man = _read(trained_root() / name / MANIFEST)
    if man is None or not (trained_root() / name / "config.json").is_file():
        return None
    if man.get("variant_of"):
        return installed_weights(man["variant_of"]) or \
            (man.get("files") or {}).get("model.safetensors")
    return (man.get("files") or man.get("local_files") or {}).get("model.safetensors")


# --------------------------------------------------------------------------- #
# Medusa: one directory per K sharing the weights
# --------------------------------------------------------------------------- #
def medusa_variants(name: str, ks, root: Path | None = None) -> list[str]:
    """``<name>-k<K>`` directories whose config has ``num_heads = K`` and whose weights are a
    link to the trained heads (vLLM loads the first K heads and skips the rest)."""
    root = root or trained_root()
    src = root / name
    cfg = json.loads((src / "config.json").read_text())
    man = json.loads((src / MANIFEST).read_text())
    made = []
    for k in ks:
        if k > cfg["num_heads"]:
            continue
        d = root / f"{name}-k{k}"
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({**cfg, "num_heads": k}, indent=2, sort_keys=True))
        os.symlink(os.path.relpath(src / "model.safetensors", d), d / "model.safetensors")
        vman = {"artifact": f"{name}-k{k}", "variant_of": name, "num_heads": k,
                "kind": man["kind"], "method": man["method"],
                "files": {"config.json": sha256_file(d / "config.json"),
                          "model.safetensors": (man.get("local_files") or man["files"])["model.safetensors"]}}
        (d / MANIFEST).write_text(json.dumps(vman, indent=2, sort_keys=True))
        made.append(d.name)
    return made


# --------------------------------------------------------------------------- #
# The learning curve: checkpoints as artifacts of their own (issue 21)
# --------------------------------------------------------------------------- #
def curve(out_root: Path, name: str, points: int = 3) -> dict[str, int]:
    """The learning curve's artifacts besides the final one: the last ``points`` checkpoints
    before the final step, as ``<name>-c1`` (earliest) … ``<name>-c<points>`` in ``out_root``
    (a run stopped by the plateau at step s: s/8, s/4, s/2), each a complete artifact (weights
    hard-linked) whose manifest names it and says whose checkpoint it is; the final manifest
    gets ``curve`` ({name: step}), which this returns. A checkpoint of a run resumed from an
    earlier lease's state may have its record here and its weights there: its artifact is the
    record and the run's config, without weights (:func:`install_local` passes it by; the
    earlier lease measured it)."""
    man = json.loads((out_root / name / MANIFEST).read_text())
    steps = man["run"]["steps"]
    chosen = [e for e in man["run"]["evals"] if "checkpoint" in e and e["step"] < steps][-points:]
    made = {}
    for i, ev in enumerate(chosen, 1):
        src, dest = out_root / name / ev["checkpoint"], out_root / f"{name}-c{i}"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        if not (src / export.WEIGHTS).is_file():
            shutil.copy2(out_root / name / "config.json", dest / "config.json")
        for f in sorted(src.iterdir()):
            if f.name == export.WEIGHTS:
                os.link(f, dest / f.name)
            elif f.name != MANIFEST:
                shutil.copy2(f, dest / f.name)
        cman = json.loads((src / MANIFEST).read_text())
        cman.update(artifact=dest.name, checkpoint_of=name, checkpoint_step=ev["step"])
        (dest / MANIFEST).write_text(json.dumps(cman, indent=2, sort_keys=True))
        made[dest.name] = ev["step"]
    man["curve"] = made
    (out_root / name / MANIFEST).write_text(json.dumps(man, indent=2, sort_keys=True))
    return made


# --------------------------------------------------------------------------- #
# Packing (device side) and unpacking (here)
# --------------------------------------------------------------------------- #
def _strip(art: Path, dest: Path) -> None:
    from safetensors.torch import load_file, save_file

    man = json.loads((art / MANIFEST).read_text())
    dest.mkdir(parents=True, exist_ok=True)
    tensors = load_file(str(art / "model.safetensors"))
    for k in man.get("from_target", {}):
        tensors.pop(k)
    save_file(tensors, str(dest / SHIPPED), metadata={"format": "pt"})
    for f in RECORD_FILES:
        if (art / f).is_file():
            shutil.copy2(art / f, dest / f)


def cut(src: Path, out: Path, stem: str, part_bytes: int) -> list[Path]:
    """``src`` in parts ``<stem>.000``, ``.001``, ... of at most ``part_bytes`` in ``out``,
    after removing the parts an earlier cut left there: cut finer before, its surplus parts
    would be listed in carry.json and reassembled after the new ones."""
    for old in out.glob(f"{stem}.[0-9][0-9][0-9]"):
        old.unlink()
    parts = []
    with open(src, "rb") as fh:
        while chunk := fh.read(part_bytes):
            parts.append(out / f"{stem}.{len(parts):03d}")
            parts[-1].write_bytes(chunk)
    return parts


def join(parts: list[Path], dest: Path, sha256: str) -> Path:
    """``parts`` in order as ``dest``, refused (and removed) unless its sha256 is ``sha256``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as fh:
        for part in parts:
            fh.write(part.read_bytes())
    if sha256_file(dest) != sha256:
        dest.unlink()
        raise SystemExit(f"{dest.name}: its {len(parts)} parts do not reassemble to sha256 "
                         f"{sha256[:16]} (were all carried, and whole?)")
    return dest


def pack(artifacts_root: Path, names, extra: dict[str, Path], out: Path,
         part_bytes: int = PART_BYTES) -> dict:
    """Tar the artifacts (stripped) and ``extra`` files ({arcname: path}) into ``out`` as
    ``train-out.tgz.NNN`` parts plus ``train-out.parts.json`` (sha256 of each and of all)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "stage"
        for n in names:
            if (artifacts_root / n / MANIFEST).is_file():
                _strip(artifacts_root / n, stage / "artifacts" / n)
        for arc, p in extra.items():
            if Path(p).is_file():
                (stage / arc).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, stage / arc)
        archive = Path(tmp) / ARCHIVE
        with tarfile.open(archive, "w:gz", compresslevel=1) as tf:
            for f in sorted(stage.rglob("*")):
                if f.is_file():
                    tf.add(f, arcname=str(f.relative_to(stage)))
        index = {"archive": ARCHIVE, "bytes": archive.stat().st_size,
                 "sha256": sha256_file(archive),
                 "parts": {p.name: sha256_file(p) for p in cut(archive, out, ARCHIVE, part_bytes)}}
    (out / PARTS_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True))
    return index


def records_archive(root: Path, dest: Path) -> int:
    """Every artifact's record in ``root`` (:data:`RECORD_FILES`, and each checkpoint's
    manifest), no weights, as ``dest`` (a .tgz, ``<artifact>/...``): what a lease always brings
    back, to be committed (``tar xzf records.tgz -C data/plateau``). The training log goes in
    gzipped (``train_log.jsonl.gz``, :func:`read_log`): committed, it travels with every later
    call's tree, and a 32000-step log is 0.7 MB as written, a quarter of that gzipped. Returns
    how many artifacts."""
    arts = sorted(p.parent for p in Path(root).glob(f"*/{MANIFEST}"))
    with tarfile.open(dest, "w:gz") as tf:
        for art in arts:
            for f in [art / f for f in RECORD_FILES] + sorted(art.glob(f"checkpoints/*/{MANIFEST}")):
                if f.name == LOG and f.is_file():
                    blob = gzip.compress(f.read_bytes(), compresslevel=9, mtime=0)
                    info = tarfile.TarInfo(f"{f.relative_to(root)}.gz")
                    info.size, info.mtime, info.mode = len(blob), int(f.stat().st_mtime), 0o644
                    tf.addfile(info, io.BytesIO(blob))
                elif f.is_file():
                    tf.add(f, arcname=str(f.relative_to(root)))
    return len(arts)


def read_log(record: Path) -> list[dict]:
    """A record's training log, one dict per line: ``train_log.jsonl`` as written, or gzipped
    as a plateau record keeps it (:func:`records_archive`); [] where it has none."""
    f = Path(record) / LOG
    if f.is_file():
        text = f.read_text()
    elif f.with_name(LOG + ".gz").is_file():
        text = gzip.decompress(f.with_name(LOG + ".gz").read_bytes()).decode()
    else:
        return []
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def _records_and_variants(dest: Path, kind: str, artifacts_out: Path, records_out: Path) -> None:
    """The last step of installing one artifact (:func:`unpack`, :func:`install_local`): its
    record files beside the others' (a checkpoint has no log of its own) and, for Medusa, the
    ``-k<K>`` variants vLLM loads."""
    from .recipes import MEDUSA_KS

    rec = Path(records_out) / dest.name
    rec.mkdir(parents=True, exist_ok=True)
    for f in RECORD_FILES:
        if (dest / f).is_file():
            shutil.copy2(dest / f, rec / f)
    if kind == "medusa":
        medusa_variants(dest.name, MEDUSA_KS, Path(artifacts_out))


def install_local(root: Path, artifacts_out: Path | None = None,
                  records_out: Path | None = None) -> dict:
    """Install the artifacts trained on this machine (``root``: a lease's ``work/artifacts``)
    as they are, without the trip through parts: weights hard-linked (copied across file
    systems), records beside them, the Medusa ``-k<K>`` variants; :func:`resolve` checks the
    weights' sha256 against the manifest when a profile loads them."""
    artifacts_out, records_out = artifacts_out or trained_root(), records_out or records_root()
    report = {"artifacts": {}}
    for art in sorted(p.parent for p in Path(root).glob(f"*/{MANIFEST}")):
        if not (art / "model.safetensors").is_file():
            continue  # a resumed run's checkpoint from an earlier lease: its weights stayed there
        man = json.loads((art / MANIFEST).read_text())
        dest = Path(artifacts_out) / art.name
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for f in ("model.safetensors",) + RECORD_FILES:
            if (art / f).is_file():
                try:
                    os.link(art / f, dest / f)
                except OSError:
                    shutil.copy2(art / f, dest / f)
        _records_and_variants(dest, man["kind"], artifacts_out, records_out)
        report["artifacts"][art.name] = {"weights_bytes": (dest / "model.safetensors").stat().st_size}
    return report


def _target_tensor(target_dir: Path, spec: dict, shipped: dict):
    from safetensors import safe_open

    with safe_open(str(target_dir / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        key = "lm_head.weight" if "lm_head.weight" in keys else "model.embed_tokens.weight"
        if spec["tensor"] not in ("lm_head", "embed_tokens"):
            key = spec["tensor"]
        t = f.get_tensor(key)
    if spec.get("rows"):
        t = t[shipped[spec["rows"]]].clone()
    return t


def unpack(parts_dir: Path, target_dir: Path, install: bool = True,
           artifacts_out: Path | None = None, records_out: Path | None = None,
           data_out: Path | None = None) -> dict:
    """Check, reassemble and install what a lease brought back; returns a report."""
    from safetensors.torch import load_file

    parts_dir = Path(parts_dir)
    index = json.loads((parts_dir / PARTS_INDEX).read_text())
    h = hashlib.sha256()
    for name, digest in sorted(index["parts"].items()):
        p = parts_dir / name
        if not p.is_file():
            raise ArtifactError(f"part {name} is missing in {parts_dir}")
        blob = p.read_bytes()
        if hashlib.sha256(blob).hexdigest() != digest:
            raise ArtifactError(f"part {name}: sha256 does not match {PARTS_INDEX}")
        h.update(blob)
    if h.hexdigest() != index["sha256"]:
        raise ArtifactError("the reassembled archive's sha256 does not match")
    report = {"archive_sha256": index["sha256"], "artifacts": {}}
    artifacts_out = artifacts_out or trained_root()
    records_out = records_out or records_root()
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / ARCHIVE
        with open(archive, "wb") as fh:
            for name in sorted(index["parts"]):
                fh.write((parts_dir / name).read_bytes())
        stage = Path(tmp) / "x"
        with tarfile.open(archive) as tf:
            tf.extractall(stage, filter="data")
        for art in sorted((stage / "artifacts").glob("*")) if (stage / "artifacts").is_dir() else []:
            man = json.loads((art / MANIFEST).read_text())
            tensors = load_file(str(art / SHIPPED))
            for tname, spec in man.get("from_target", {}).items():
                t = _target_tensor(Path(target_dir), spec, tensors)
                if export.tensor_sha256(t) != spec["sha256"]:
                    raise ArtifactError(f"{art.name}: the local target's {spec['tensor']} differs "
                                        f"from the device's (sha256): not the same target")
                tensors[tname] = t
            bad = [k for k, want in man["tensors"].items()
                   if k not in tensors or export.tensor_sha256(tensors[k]) != want]
            if bad or set(tensors) != set(man["tensors"]):
                raise ArtifactError(f"{art.name}: tensors {bad or sorted(set(tensors) ^ set(man['tensors']))} "
                                    f"do not match the manifest")
            dest = Path(artifacts_out) / art.name
            if install:
                if dest.exists():
                    shutil.rmtree(dest)
                dest.mkdir(parents=True)
                export.save_weights(tensors, dest / "model.safetensors")
                for f in RECORD_FILES:
                    if (art / f).is_file():
                        shutil.copy2(art / f, dest / f)
                local = {f: sha256_file(dest / f) for f in ("config.json", "model.safetensors")}
                same = local["model.safetensors"] == man["files"].get("model.safetensors")
                if not same:
                    man["local_files"] = local  # tensors identical, file bytes differ
                    (dest / MANIFEST).write_text(json.dumps(man, indent=2, sort_keys=True))
                _records_and_variants(dest, man["kind"], artifacts_out, records_out)
                report["artifacts"][art.name] = {"tensors_verified": len(man["tensors"]),
                                                 "file_sha256_identical": same,
                                                 "weights_bytes": (dest / "model.safetensors").stat().st_size}
            else:
                report["artifacts"][art.name] = {"tensors_verified": len(man["tensors"])}
        if install and data_out is not None:
            for f in sorted(stage.rglob("*")):
                if f.is_file() and f.relative_to(stage).parts[0] != "artifacts":
                    d = Path(data_out) / f.relative_to(stage)
                    d.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, d)
    return report
