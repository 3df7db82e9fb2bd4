"""An offline bundle for air-gapped CUDA hosts: pack it here, verify and unpack it there.

Many GPU clusters cannot reach a package index. ``pack`` builds, on a machine that can,
everything a run of the study needs on such a host beyond what it already has:

- the vLLM wheel (``vllm==0.26.0``, the newest built for torch 2.11 / CUDA 13) and the
  runtime dependencies the host lacks, pinned with hashes in the lock file
  ``bundle/requirements-h200.txt`` (:data:`LOCK_FILE`, :func:`read_lock`), unpacked as they
  would be installed, minus files an H200 run of these profiles never loads
  (:data:`TRIMMED`: FlashAttention 2 kernels, the Rust front end, Blackwell-only and
  DeepGEMM sources) and minus optional kernel packages (:data:`NOT_BUNDLED`);
- the study's own code (``lib/specdec``), the chosen profiles and their model configs.

All of it goes into one ``tar.xz`` split into parts of at most ``part_size`` bytes, with a
``manifest.json`` holding the sha256 of every part and of the whole archive. ``unpack``
checks every hash (a missing or altered part is a clear error naming it) before it
extracts anything, then extracts into a site directory to put on ``PYTHONPATH``.

Host prerequisites (:data:`HOST`): Linux x86-64, Python 3.12, ``torch==2.11.0+cu130`` and
the packages of the CUDA image this study used (see :data:`HOST_PACKAGES`); set
``VLLM_USE_FLASHINFER_SAMPLER=0`` (flashinfer is not bundled).

Unpacking needs the standard library alone (the host's own Python has no pydantic or yaml).
The results the host sends back are checked and added by :mod:`specdec.merge`.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Iterable, Sequence

from . import paths, provenance
from .lockfile import LockError, LockedRequirement, canonical_name, read_lock  # noqa: F401
from .provenance import sha256_file

FORMAT = "specdec-bundle/1"
MANIFEST = "manifest.json"
ARCHIVE = "specdec-bundle.tar.xz"
#: 60 MB: one part plus the repository stays under the device tool's 64 MiB per call.
DEFAULT_PART_SIZE = 60_000_000

#: The lock: vLLM and the runtime dependencies of vllm 0.26.0 that the host image lacks,
#: one exact version each with the sha256 of its wheel (a pip requirements file; the reasons
#: for the pins are in its header). Read by :func:`read_lock` when :func:`pack` is given no
#: ``requirements``; unpacking never reads it.
LOCK_FILE = paths.ROOT / "bundle" / "requirements-h200.txt"
#: The distribution whose wheel the lock must pin.
VLLM = "vllm"

#: vLLM requirements deliberately left out: optional kernel packages (flashinfer and the
#: JIT/DSL stacks behind it), video decoding, NVTX ranges. vLLM falls back without them
#: for dense bf16 Llama models on Hopper; VLLM_USE_FLASHINFER_SAMPLER=0 keeps the sampler
#: off flashinfer.
NOT_BUNDLED = (
    "flashinfer-python", "tilelang", "nvidia-cutlass-dsl", "quack-kernels",
    "tokenspeed-mla", "humming-kernels", "fastsafetensors", "nvidia-cudnn-frontend", "nvtx",
    "torchcodec", "pynvvideocodec",
)

#: Paths inside the installed packages that are not shipped (prefixes end with "/").
TRIMMED = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",  # FA2; Hopper runs FA3 (_vllm_fa3_C)
    "vllm/vllm-rs",                              # Rust API server binary
    "vllm/third_party/fmha_sm100/",              # Blackwell (sm100) attention sources
    "vllm/third_party/deep_gemm/",               # DeepGEMM (FP8 MoE) sources and builds
)

#: What the target host must already have.
HOST = {
    "python": "3.12",
    "platform": "manylinux_2_28_x86_64",
    "torch": "2.11.0+cu130",
    "env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"},
}

#: The packages of the host image (the device tool's CUDA image, as listed on 2026-11-17):
#: never bundled, the host's own versions are used.
HOST_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn
einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec
gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13
nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt
xarray xxhash yarl zipp
""".split())

#: pip tags the wheels must carry (the host's glibc is newer than all of these).
PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64")


class BundleError(RuntimeError):
    """A bundle cannot be built, is incomplete or altered, or does not fit this host."""


_canon = canonical_name


# --------------------------------------------------------------------------- #
# The lock file (read by specdec.lockfile)
# --------------------------------------------------------------------------- #
def locked_requirements(path: Path | str = LOCK_FILE) -> list[str]:
    """The lock's pins as ``name==version`` strings, vLLM first (as :func:`pack` takes them);
    :class:`LockError` for a malformed lock."""
    lock = read_lock(path)
    if _canon(lock[0].name) != VLLM:
        raise LockError(f"{path}:{lock[0].line}: the first pin must be {VLLM}, "
                        f"not {lock[0].name}")
    return [r.requirement for r in lock]


# --------------------------------------------------------------------------- #
# Wheels
# --------------------------------------------------------------------------- #
def _requirement_name(req: str) -> str:
    return _canon(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))


def _wheel_name(path: Path) -> str:
    return _canon(path.name.split("-")[0])


def find_wheel(wheel_dir: Path, requirement: str) -> Path | None:
    """The wheel in ``wheel_dir`` for a pinned ``name==version`` requirement, if present."""
    name = _requirement_name(requirement)
    version = requirement.split("==", 1)[1] if "==" in requirement else None
    for whl in sorted(wheel_dir.glob("*.whl")):
        parts = whl.name.split("-")
        if _canon(parts[0]) == name and (version is None or parts[1] == version):
            return whl
    return None


def download_wheels(requirements: Sequence[str], wheel_dir: Path) -> list[Path]:
    """Fetch each pinned requirement's Python 3.12 manylinux x86-64 wheel (no dependencies).

    Wheels already in ``wheel_dir`` are reused; pip is asked only for the others.
    """
    wheel_dir.mkdir(parents=True, exist_ok=True)
    missing = [r for r in requirements if find_wheel(wheel_dir, r) is None]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--python-version", HOST["python"],
               "--implementation", "cp", "-d", str(wheel_dir)]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        proc = subprocess.run(cmd + list(missing), capture_output=True, text=True)
        if proc.returncode != 0:
            raise BundleError(f"pip download failed for {', '.join(missing)}:\n"
                              f"{proc.stderr.strip()[-2000:]}")
    wheels = []
    for r in requirements:
        whl = find_wheel(wheel_dir, r)
        if whl is None:
            raise BundleError(f"no wheel for {r} in {wheel_dir} after download")
        wheels.append(whl)
    return wheels


def _is_trimmed(path: str, trimmed: Sequence[str]) -> bool:
    return any(path == t or (t.endswith("/") and path.startswith(t)) for t in trimmed)


def _wheel_entries(whl: Path, trimmed: Sequence[str]):
    """(installed relative path, ZipInfo) for each file pip would put in site-packages.

    ``<name>.data/purelib`` and ``/platlib`` land in site-packages like the rest; scripts,
    headers and data files are not needed to import the package and are dropped.
    """
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            name = info.filename
            m = re.match(r"[^/]+\.data/([^/]+)/(.*)", name)
            if m:
                if m.group(1) not in ("purelib", "platlib"):
                    continue
                name = m.group(2)
            yield name, info, _is_trimmed(name, trimmed)


# --------------------------------------------------------------------------- #
# Split writing and chained reading
# --------------------------------------------------------------------------- #
class _PartWriter(io.RawIOBase):
    """A write-only stream cut into files of at most ``part_size`` bytes, hashed as written."""

    def __init__(self, out_dir: Path, stem: str, part_size: int):
        if part_size <= 0:
            raise BundleError(f"part_size: must be positive, got {part_size}")
        self.out_dir, self.stem, self.part_size = out_dir, stem, part_size
        self.parts: list[dict] = []
        self.whole = hashlib.sha256()
        self.size = 0
        self._fh = None
        self._hash = None
        self._left = 0

    def writable(self) -> bool:
        return True

    def _next_part(self) -> None:
        self._close_part()
        name = f"{self.stem}.{len(self.parts):03d}"
        self._fh = open(self.out_dir / name, "wb")
        self._hash = hashlib.sha256()
        self._left = self.part_size
        self.parts.append({"name": name, "size": 0})

    def _close_part(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self.parts[-1]["sha256"] = self._hash.hexdigest()
            self._fh = None

    def write(self, b) -> int:
        mv = memoryview(b).cast("B")
        n = len(mv)
        while len(mv):
            if self._fh is None or self._left == 0:
                self._next_part()
            chunk = mv[: self._left]
            self._fh.write(chunk)
            self._hash.update(chunk)
            self.whole.update(chunk)
            self._left -= len(chunk)
            self.parts[-1]["size"] += len(chunk)
            mv = mv[len(chunk):]
        self.size += n
        return n

    def close(self) -> None:
        self._close_part()
        super().close()


class _ChainedReader(io.RawIOBase):
    """Read several files as one stream."""

    def __init__(self, files: Sequence[Path]):
        self._files = list(files)
        self._fh = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while True:
            if self._fh is None:
                if not self._files:
                    return 0
                self._fh = open(self._files.pop(0), "rb")
            n = self._fh.readinto(buf)
            if n:
                return n
            self._fh.close()
            self._fh = None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        super().close()


# --------------------------------------------------------------------------- #
# Pack
# --------------------------------------------------------------------------- #
def profile_model_configs(profile_names: Iterable[str]) -> list[str]:
    """The ``data/model_configs`` folders the profiles' models are built from."""
    from .profiles import load_profile

    out: set[str] = set()
    for name in profile_names:
        prof = load_profile(name)
        for model in (prof.target, *prof.drafts):
            if model.source.kind == "config" and model.source.config:
                out.add(model.source.config)
    return sorted(out)


def repo_files(profile_names: Sequence[str]) -> list[tuple[str, Path]]:
    """(archive path under ``repo/``, file) for the study code, the profiles and their configs."""
    files = []
    lib = paths.ROOT / "lib" / "specdec"
    for f in sorted(lib.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".typed"):
            files.append((f"lib/specdec/{f.relative_to(lib).as_posix()}", f))
    for name in profile_names:
        f = paths.PROFILES_DIR / f"{name}.yaml"
        files.append((f"profiles/{f.name}", f))
    for cfg in profile_model_configs(profile_names):
        d = paths.MODEL_CONFIGS_DIR / cfg
        for f in sorted(d.iterdir()):
            if f.is_file():
                files.append((f"data/model_configs/{cfg}/{f.name}", f))
    for f in (paths.ROOT / "pyproject.toml",):
        if f.is_file():
            files.append((f.name, f))
    return files


def _tarinfo(name: str, size: int, mode: int, mtime: float) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = size, mode, int(mtime)
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _clear_bundle(out_dir: Path) -> None:
    for f in out_dir.glob(f"{ARCHIVE}.*"):
        f.unlink()
    (out_dir / MANIFEST).unlink(missing_ok=True)


def pack(out_dir: Path | str, profiles: Sequence[str] = ("h200-mechanics",),
         part_size: int = DEFAULT_PART_SIZE, wheel_dir: Path | str | None = None,
         requirements: Sequence[str] | None = None, trimmed: Sequence[str] = TRIMMED,
         download: bool = True, preset: int = 6, include_repo: bool = True,
         lock: Path | str | None = None) -> dict:
    """Build the bundle in ``out_dir``: parts ``specdec-bundle.tar.xz.NNN`` and ``manifest.json``.

    ``requirements`` defaults to the pins of the lock file (``lock``, default
    :data:`LOCK_FILE`), and then every wheel must have one of the sha256 the lock gives for
    it (checked before anything is written); with ``download=False`` every wheel must
    already be in ``wheel_dir`` (default ``CACHE_DIR/wheels``). Returns the manifest. The
    manifest is written last: a bundle without one is incomplete.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel_dir = Path(wheel_dir) if wheel_dir else paths.CACHE_DIR / "wheels"
    lock_path = Path(lock) if lock else LOCK_FILE
    try:
        locked = {r.requirement: r for r in read_lock(lock_path)} if requirements is None else {}
        reqs = list(requirements) if requirements is not None else locked_requirements(lock_path)
    except LockError as e:
        raise BundleError(str(e)) from None
    names = [_requirement_name(r) for r in reqs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BundleError(f"requirements: more than one version of {', '.join(dupes)}")
    if download:
        wheels = download_wheels(reqs, wheel_dir)
    else:
        wheels = []
        for r in reqs:
            whl = find_wheel(wheel_dir, r)
            if whl is None:
                raise BundleError(f"requirements: no wheel for {r} in {wheel_dir} "
                                  f"(run without --no-download to fetch it)")
            wheels.append(whl)
    digests = [sha256_file(whl) for whl in wheels]
    for req, whl, digest in zip(reqs, wheels, digests):
        if req in locked and digest not in locked[req].hashes:
            raise BundleError(f"{whl}: sha256 {digest} is not the one {lock_path}:"
                            f"{locked[req].line} locks for {req}")
    repo = repo_files(profiles) if include_repo else []

    _clear_bundle(out_dir)
    writer = _PartWriter(out_dir, ARCHIVE, part_size)
    packages, removed, seen = [], [], {}
    try:
        with lzma.LZMAFile(writer, "w", preset=preset) as xz, \
                tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for req, whl, digest in zip(reqs, wheels, digests):
                packages.append({"requirement": req, "wheel": whl.name, "sha256": digest})
                with zipfile.ZipFile(whl) as zf:
                    for name, info, trim in _wheel_entries(whl, trimmed):
                        if trim:
                            removed.append({"path": name, "size": info.file_size})
                            continue
                        if name in seen:
                            raise BundleError(f"{whl.name} and {seen[name]} both install {name}")
                        seen[name] = whl.name
                        unix_mode = (info.external_attr >> 16) & 0o777
                        mode = 0o755 if unix_mode & 0o111 else 0o644
                        mtime = _dt.datetime(*info.date_time).timestamp()
                        with zf.open(info) as src:
                            tar.addfile(_tarinfo(f"site/{name}", info.file_size, mode, mtime), src)
            for arc, f in repo:
                st = f.stat()
                with open(f, "rb") as src:
                    tar.addfile(_tarinfo(f"repo/{arc}", st.st_size, 0o644, st.st_mtime), src)
    finally:
        writer.close()

    missing_trims = [t for t in trimmed if not any(_is_trimmed(r["path"], [t]) for r in removed)]
    manifest = {
        "format": FORMAT,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": provenance.git_commit(),
        "git_dirty": provenance.git_dirty(),
        "profiles": list(profiles),
        "host": HOST,
        "archive": {"name": ARCHIVE, "size": writer.size, "sha256": writer.whole.hexdigest()},
        "parts": writer.parts,
        "packages": packages,
        "not_bundled": list(NOT_BUNDLED) if requirements is None else [],
        "trimmed": {"rules": list(trimmed), "files": len(removed),
                    "bytes": sum(r["size"] for r in removed),
                    "rules_matching_nothing": missing_trims},
    }
    tmp = out_dir / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, out_dir / MANIFEST)
    return manifest


# --------------------------------------------------------------------------- #
# Verify and unpack
# --------------------------------------------------------------------------- #
def read_manifest(bundle_dir: Path | str) -> dict:
    bundle_dir = Path(bundle_dir)
    f = bundle_dir / MANIFEST
    if not f.is_file():
        raise BundleError(f"{f}: no manifest (incomplete bundle, or not a bundle folder)")
    try:
        man = json.loads(f.read_text())
    except ValueError as e:
        raise BundleError(f"{f}: malformed manifest: {e}") from None
    if man.get("format") != FORMAT:
        raise BundleError(f"{f}: format {man.get('format')!r}, expected {FORMAT!r}")
    return man


def verify(bundle_dir: Path | str) -> dict:
    """Check that every part is present with its recorded size and sha256, and the whole too."""
    bundle_dir = Path(bundle_dir)
    man = read_manifest(bundle_dir)
    missing = [p["name"] for p in man["parts"] if not (bundle_dir / p["name"]).is_file()]
    if missing:
        raise BundleError(f"{bundle_dir}: missing part(s) {', '.join(missing)} "
                          f"of {len(man['parts'])}")
    whole = hashlib.sha256()
    for p in man["parts"]:
        f = bundle_dir / p["name"]
        if f.stat().st_size != p["size"]:
            raise BundleError(f"{f}: {f.stat().st_size} bytes, the manifest says {p['size']} "
                              f"(truncated or altered part)")
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            while block := fh.read(1 << 22):
                h.update(block)
                whole.update(block)
        if h.hexdigest() != p["sha256"]:
            raise BundleError(f"{f}: sha256 {h.hexdigest()} does not match the manifest's "
                              f"{p['sha256']} (altered part)")
    if whole.hexdigest() != man["archive"]["sha256"]:
        raise BundleError(f"{bundle_dir}: the parts together hash to {whole.hexdigest()}, "
                          f"the manifest says {man['archive']['sha256']}")
    return man


def check_host(man: dict) -> None:
    """The bundle's compiled parts need the host's Python minor version and torch."""
    want_py = man["host"]["python"]
    have_py = f"{sys.version_info.major}.{sys.version_info.minor}"
    if have_py != want_py:
        raise BundleError(f"host.python: this bundle is built for Python {want_py}, "
                          f"this is Python {have_py}")
    import importlib.metadata as md

    want_torch = man["host"]["torch"]
    try:
        have_torch = md.version("torch")
    except md.PackageNotFoundError:
        raise BundleError(f"host.torch: torch {want_torch} is required and not installed") from None
    if have_torch.split("+")[0] != want_torch.split("+")[0]:
        raise BundleError(f"host.torch: this bundle needs torch {want_torch}, found {have_torch}")


def _move_into(src: Path, dest: Path, replace: bool) -> None:
    if dest.exists() and any(dest.iterdir()):
        if not replace:
            raise BundleError(f"{dest}: not empty (pass replace=True / --replace to overwrite)")
        shutil.rmtree(dest)
    elif dest.exists():
        dest.rmdir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, dest)


def unpack(bundle_dir: Path | str, site_dir: Path | str, repo_dir: Path | str | None = None,
           replace: bool = False, host_check: bool = True) -> dict:
    """Verify the bundle, then extract its packages into ``site_dir`` (and the study into ``repo_dir``).

    Nothing is extracted unless every hash matches. Extraction goes to a temporary folder
    beside ``site_dir`` that is renamed into place, so a failure leaves no half-filled site.
    Returns the manifest.
    """
    man = verify(bundle_dir)
    if host_check:
        check_host(man)
    site_dir = Path(site_dir).resolve()
    site_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".specdec-unpack-", dir=site_dir.parent))
    try:
        parts = [Path(bundle_dir) / p["name"] for p in man["parts"]]
        with _ChainedReader(parts) as raw, lzma.LZMAFile(raw) as xz, \
                tarfile.open(fileobj=xz, mode="r|") as tar:
            tar.extractall(tmp, filter="data")
        _move_into(tmp / "site", site_dir, replace)
        if repo_dir is not None and (tmp / "repo").exists():
            _move_into(tmp / "repo", Path(repo_dir).resolve(), replace)
    except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
        raise BundleError(f"{bundle_dir}: archive cannot be read: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return man


def shell_env(man: dict, site_dir: Path | str, lib_dir: Path | str | None = None) -> str:
    """``export`` lines for running the study on the host from the unpacked bundle."""
    pythonpath = [str(Path(site_dir).resolve())]
    if lib_dir:
        pythonpath.append(str(Path(lib_dir).resolve()))
    lines = [f"export PYTHONPATH={':'.join(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}}"]
    lines += [f"export {k}={v}" for k, v in man["host"]["env"].items()]
    # The bundle has no .git: provenance takes the commit it was packed from.
    lines.append(f"export SPECDEC_COMMIT={man['git_commit']}")
    if man.get("git_dirty") is not None:
        lines.append(f"export SPECDEC_DIRTY={int(bool(man['git_dirty']))}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- #
# CLI
# --------------------------------------------------------------------------- #
def _plain_errors(fn):
    """Bundle errors name the file and the reason: print them, no traceback."""
    def run(args) -> int:
        try:
            return fn(args)
        except BundleError as e:
            print(f"specdec {args.command}: error: {e}", file=sys.stderr)
            return 2
    return run


def _cmd_bundle(args) -> int:
    man = pack(args.out, profiles=args.profile or ["h200-mechanics"], part_size=args.part_size,
               wheel_dir=args.wheel_dir, download=not args.no_download, preset=args.preset,
               lock=args.lock)
    for p in man["parts"]:
        print(f"{Path(args.out) / p['name']}  {p['size'] / 1e6:.1f} MB  sha256 {p['sha256'][:16]}")
    print(f"{len(man['parts'])} part(s), {man['archive']['size'] / 1e6:.1f} MB in all; "
          f"{len(man['packages'])} packages; trimmed {man['trimmed']['files']} files "
          f"({man['trimmed']['bytes'] / 1e6:.0f} MB uncompressed)")
    if man["trimmed"]["rules_matching_nothing"]:
        print(f"warning: trim rules that matched nothing: {man['trimmed']['rules_matching_nothing']}")
    return 0


def _cmd_unpack(args) -> int:
    man = unpack(args.dir, args.site, repo_dir=args.repo, replace=args.replace,
                 host_check=not args.no_host_check)
    lib = Path(args.repo) / "lib" if args.repo else None
    if args.print_env:
        print(shell_env(man, args.site, lib))
    else:
        print(f"unpacked {len(man['packages'])} packages into {args.site} "
              f"(bundle of {man['created_utc']}, commit {man['git_commit'][:12]}); then:",
              file=sys.stderr)
        print(shell_env(man, args.site, lib))
    return 0


def register(subparsers) -> None:
    b = subparsers.add_parser("bundle", help="pack vLLM + deps + the study for an air-gapped GPU host")
    b.add_argument("--profile", "-p", action="append",
                   help="profile whose model configs to include (repeatable; default h200-mechanics)")
    b.add_argument("--out", type=Path, default=paths.ROOT / ".bundle",
                   help="output folder (default .bundle/, git-ignored)")
    b.add_argument("--part-size", type=int, default=DEFAULT_PART_SIZE, help="bytes per part")
    b.add_argument("--wheel-dir", type=Path, default=None, help="wheel cache (default .cache/wheels)")
    b.add_argument("--no-download", action="store_true", help="use only wheels already cached")
    b.add_argument("--lock", type=Path, default=None,
                   help="pins with hashes, a pip requirements file (default bundle/requirements-h200.txt)")
    b.add_argument("--preset", type=int, default=6, help="xz preset 0-9")
    b.set_defaults(func=_plain_errors(_cmd_bundle))

    u = subparsers.add_parser("unpack", help="verify a bundle's hashes and extract it")
    u.add_argument("dir", type=Path, help="folder with manifest.json and the parts")
    u.add_argument("--site", type=Path, required=True, help="where the packages go (put on PYTHONPATH)")
    u.add_argument("--repo", type=Path, default=None, help="also extract the study code here")
    u.add_argument("--replace", action="store_true", help="overwrite a non-empty --site/--repo")
    u.add_argument("--no-host-check", action="store_true",
                   help="skip the Python/torch version check (only to inspect a bundle)")
    u.add_argument("--print-env", action="store_true", help="print only the export lines (for eval)")
    u.set_defaults(func=_plain_errors(_cmd_unpack))


if __name__ == "__main__":
    from .cli import main

    sys.exit(main(sys.argv[1:]))
