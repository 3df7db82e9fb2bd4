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
import shutil
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Iterable, Sequence

from . import paths, provenance
from .lockfile import LockError, read_lock  # noqa: F401 (LockError: what pack raises for a bad lock)
from .wheels import (HOST, LOCK_FILE, NOT_BUNDLED, TRIMMED, WheelError, download_wheels,
                     find_wheel, is_trimmed, locked_requirements, requirement_name, wheel_entries)
from .provenance import sha256_file

FORMAT = "specdec-bundle/1"
MANIFEST = "manifest.json"
ARCHIVE = "specdec-bundle.tar.xz"
#: 60 MB: one part plus the repository stays under the device tool's 64 MiB per call.
DEFAULT_PART_SIZE = 60_000_000

class BundleError(RuntimeError):
    """A bundle cannot be built, is incomplete or altered, or does not fit this host."""



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


def pack(out_dir: Path | str, profiles: Sequence[str] = ("h200-surface-v2",),
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
    names = [requirement_name(r) for r in reqs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BundleError(f"requirements: more than one version of {', '.join(dupes)}")
    if download:
        try:
            wheels = download_wheels(reqs, wheel_dir)
        except WheelError as e:
            raise BundleError(str(e)) from None
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
                    for name, info, trim in wheel_entries(whl, trimmed):
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

    missing_trims = [t for t in trimmed if not any(is_trimmed(r["path"], [t]) for r in removed)]
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
    _write_manifest(out_dir, manifest)
    return manifest


def _write_manifest(out_dir: Path, manifest: dict) -> None:
    """manifest.json, written whole or not at all."""
    tmp = out_dir / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, out_dir / MANIFEST)


def resplit(bundle_dir: Path | str, part_size: int) -> dict:
    """Cut a verified bundle's archive again, in place, into parts of at most ``part_size``
    bytes: the same archive (its sha256 unchanged, checked), other parts, a new manifest. For
    when the working tree that travels beside every part has grown so that a part no longer
    fits in one call (``specdec carry-plan`` says so); no download, no rebuild. A crash half
    way leaves parts that :func:`verify` refuses, never a bundle that unpacks wrong."""
    bundle_dir = Path(bundle_dir)
    man = verify(bundle_dir)
    tmp = bundle_dir / ".resplit"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    writer = _PartWriter(tmp, ARCHIVE, part_size)
    try:
        with _ChainedReader([bundle_dir / p["name"] for p in man["parts"]]) as src:
            while block := src.read(1 << 22):
                writer.write(block)
    finally:
        writer.close()
    if writer.whole.hexdigest() != man["archive"]["sha256"]:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BundleError(f"{bundle_dir}: re-cutting changed the archive's hash")
    new = {p["name"] for p in writer.parts}
    for p in writer.parts:
        os.replace(tmp / p["name"], bundle_dir / p["name"])
    for p in man["parts"]:
        if p["name"] not in new:
            (bundle_dir / p["name"]).unlink()
    tmp.rmdir()
    man = {**man, "parts": writer.parts}
    _write_manifest(bundle_dir, man)
    return man


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


def missing_parts(bundle_dir: Path | str) -> list[str]:
    """The parts the manifest names that are not in ``bundle_dir`` (yet: a lease carries them
    over several calls, :func:`specdec.carry.still_to_carry`)."""
    bundle_dir = Path(bundle_dir)
    return [p["name"] for p in read_manifest(bundle_dir)["parts"]
            if not (bundle_dir / p["name"]).is_file()]


def verify(bundle_dir: Path | str) -> dict:
    """Check that every part is present with its recorded size and sha256, and the whole too."""
    bundle_dir = Path(bundle_dir)
    man = read_manifest(bundle_dir)
    missing = missing_parts(bundle_dir)
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
    if args.resplit:
        man = resplit(args.out, args.part_size)
    else:
        man = pack(args.out, profiles=args.profile or ["h200-surface-v2"], part_size=args.part_size,
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
                   help="profile whose model configs to include (repeatable; default h200-surface-v2)")
    b.add_argument("--out", type=Path, default=paths.ROOT / ".bundle",
                   help="output folder (default .bundle/, git-ignored)")
    b.add_argument("--part-size", type=int, default=DEFAULT_PART_SIZE, help="bytes per part")
    b.add_argument("--wheel-dir", type=Path, default=None, help="wheel cache (default .cache/wheels)")
    b.add_argument("--no-download", action="store_true", help="use only wheels already cached")
    b.add_argument("--lock", type=Path, default=None,
                   help="pins with hashes, a pip requirements file (default bundle/requirements-h200.txt)")
    b.add_argument("--preset", type=int, default=6, help="xz preset 0-9")
    b.add_argument("--resplit", action="store_true",
                   help="re-cut the bundle already in --out into parts of --part-size (its hashes "
                        "checked; no download, no rebuild): when the tree beside a part has grown")
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
