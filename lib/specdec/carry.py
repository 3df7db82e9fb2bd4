"""What travels to a lease, call by call: the ``carry`` lists of the device tool's calls.

Every call of the device tool copies the working tree (tracked files and untracked ones git does
not ignore) plus the paths named in ``carry``, at most 64 MiB and 8 paths in all; a call over the
limit is refused before it starts, and the calls queued behind it then run without what it was
to bring (lease 2026-12-01-h200-5 lost a call so). The limit counts more than the files' bytes:
that refused call held 63.0 MiB of bytes; counted in whole 4 KiB blocks per file it held
66.3 MiB, while the largest call that passed held 63.5 MiB so counted (the 18.6 MiB tree of
1515 files takes 22.0 MiB of blocks). So sizes here are rounded up to whole blocks, and
:func:`plan` keeps a margin below the limit.

``specdec carry-plan`` prints the calls for the bundle, the training carry and a recorded
training's parts (``book/reproduce.md``, section 5 and "Training heads and drafts on a lease").
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from . import paths

MIB = 1 << 20
#: What one call may carry, tree included, and how many paths it may name.
CALL_BYTES = 64 * MIB
CALL_PATHS = 8
#: Left free under :data:`CALL_BYTES`: the tool's own accounting is not published.
MARGIN = 1 * MIB
BLOCK = 4096
#: The folders a lease carries beyond the tree, and where ``scripts/lease.sh receive`` puts
#: their files on the device (a test holds the script to this list).
CARRIED = {".bundle": "/tmp/b", ".train-carry": "/tmp/t", ".train-out": "/tmp/t/recorded",
           ".vllm-cache": "/tmp/vc"}


def still_to_carry(bundle_dir: str = CARRIED[".bundle"],
                   carry_dir: str = CARRIED[".train-carry"]) -> list[str]:
    """On the device, after ``scripts/lease.sh receive``: the bundle parts its manifest names
    (:func:`specdec.bundle.missing_parts`) and the training-carry files its ``carry.json``
    names that are not there yet, or an index itself where its folder holds files but not it.
    A machine taken back mid-lease takes what it was carried along (lease
    2026-12-06-h200-28 lost five parts so): this says which calls of the plan to repeat on
    the next one. Standard library only (the host's python has no more)."""
    from . import bundle

    def lacking(d: Path, index: str, names) -> list[str]:
        if not (d / index).is_file():
            return [str(d / index)] if d.is_dir() and any(p.is_file() for p in d.iterdir()) else []
        return [str(d / n) for n in names()]

    b, t = Path(bundle_dir), Path(carry_dir)
    return (lacking(b, bundle.MANIFEST, lambda: bundle.missing_parts(b))
            + lacking(t, "carry.json", lambda: [n for n in json.loads(
                (t / "carry.json").read_text())["files"] if not (t / n).is_file()]))


def on_disk(size: int) -> int:
    """Bytes a file of ``size`` bytes is counted as: whole 4 KiB blocks."""
    return -(-int(size) // BLOCK) * BLOCK


def tree_bytes(root: Path | None = None) -> int:
    """What every call carries anyway: the tracked files and the untracked ones git does not
    ignore, each rounded up to whole blocks."""
    root = Path(root or paths.ROOT)
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, check=True).stdout
    total = 0
    for name in out.decode().split("\0"):
        f = root / name
        if name and f.is_file():
            total += on_disk(f.stat().st_size)
    return total


def part_bytes_beside(tree: int | None = None, limit: int = CALL_BYTES - MARGIN) -> int:
    """The largest part, in whole MB with a tenth of the room to spare, that one call carries
    beside the tree as it is now (``tree``: :func:`tree_bytes`): what a file split to travel
    (the bundle, the target's GGUF) is cut to. The tree grows with every lease's rows: 25 MB
    parts fitted beside 38.9 MiB, not beside 40.4."""
    room = limit - (tree_bytes() if tree is None else tree)
    part = int(room * 0.9) // 1_000_000 * 1_000_000
    if part < 4_000_000:
        raise SystemExit(f"the tree leaves {room / MIB:.1f} MiB a call: too little to carry "
                         "files in parts beside it")
    return part


def plan(files: list[Path], tree: int, limit: int = CALL_BYTES - MARGIN,
         max_paths: int = CALL_PATHS) -> list[list[Path]]:
    """The fewest calls (first fit, largest file first) such that each call's tree plus files
    stays within ``limit`` and names at most ``max_paths`` files. Refuses a file that cannot
    travel at all, before any device time is spent."""
    room = limit - tree
    sized = sorted(((on_disk(Path(f).stat().st_size), Path(f)) for f in files),
                   key=lambda x: (-x[0], str(x[1])))
    calls: list[tuple[int, list[Path]]] = []
    for size, f in sized:
        if size > room:
            raise ValueError(f"{f}: {size / MIB:.1f} MiB does not fit in one call beside the "
                             f"{tree / MIB:.1f} MiB tree ({limit / MIB:.0f} MiB in all); split it "
                             f"into smaller parts (a bundle: `specdec bundle --resplit "
                             f"--part-size {part_bytes_beside(tree, limit)}`)")
        for i, (used, names) in enumerate(calls):
            if used + size <= room and len(names) < max_paths:
                calls[i] = (used + size, names + [f])
                break
        else:
            calls.append((size, [f]))
    return [sorted(names) for _, names in calls]


def lease_files(root: Path | None = None, bundle: bool = True, training: bool = False,
                recorded: Path | None = None, cache: bool = False) -> list[Path]:
    """The files a lease carries, relative to ``root``: the bundle's parts and manifest, the
    training carry (``.train-carry/``), a recorded training's parts (``.train-out/<lease>/``),
    vLLM's compile cache (``.vllm-cache/``). Refuses a named source that is not here."""
    root = Path(root or paths.ROOT)
    wanted = []
    if bundle:
        wanted.append((".bundle", "specdec bundle"))
    if training:
        wanted.append((".train-carry", "specdec train carry"))
    if recorded is not None:
        if Path(recorded).parts[:1] != (".train-out",):
            raise ValueError(f"{recorded}: a recorded training travels from .train-out/<lease>/, "
                             "the only place `scripts/lease.sh receive` takes its parts from")
        wanted.append((str(recorded), "the parts a training lease brought back"))
    if cache:
        wanted.append((".vllm-cache", "scripts/lease.sh cache"))
    assert {Path(f).parts[0] for f, _ in wanted} <= set(CARRIED), wanted
    files = []
    for folder, how in wanted:
        found = sorted(p for p in (root / folder).glob("*") if p.is_file()) \
            if (root / folder).is_dir() else []
        if not found:
            raise FileNotFoundError(f"{root / folder}: nothing to carry (made by `{how}`)")
        files += [p.relative_to(root) for p in found]
    return files


def describe(calls: list[list[Path]], tree: int, root: Path | None = None) -> str:
    """The calls as the device tool takes them: one ``carry`` list and command per call."""
    root = Path(root or paths.ROOT)
    lines = [f"tree: {tree / MIB:.1f} MiB on every call; {len(calls)} carrying call(s):"]
    for i, names in enumerate(calls, 1):
        size = tree + sum(on_disk((root / n).stat().st_size) for n in names)
        lines.append(f"  {i}. carry={json.dumps([str(n) for n in names])}  "
                     f"({size / MIB:.1f} MiB)  command: scripts/lease.sh receive")
    return "\n".join(lines)


def _cmd_plan(a) -> int:
    try:
        files = lease_files(bundle=not a.no_bundle, training=a.training, recorded=a.recorded,
                            cache=a.cache)
        tree = tree_bytes()
        calls = plan(files, tree)
    except (FileNotFoundError, ValueError) as e:  # before any device call: say what to do
        print(f"specdec carry-plan: {e}", file=sys.stderr)
        return 2
    print(describe(calls, tree))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("carry-plan", help="the device calls that carry the bundle and "
                                                 "the rest to a lease, each under the call limit")
    p.add_argument("--no-bundle", action="store_true", help="the bundle is not needed")
    p.add_argument("--training", action="store_true", help="also .train-carry/ (issue 10)")
    p.add_argument("--recorded", type=Path, default=None,
                   help="also a recorded training's parts, e.g. .train-out/2026-12-01-h200-4")
    p.add_argument("--cache", action="store_true", help="also vLLM's compile cache")
    p.set_defaults(func=_cmd_plan)
