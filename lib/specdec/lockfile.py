"""Lock files: exact pins with the sha256 of the wheels they may be installed from.

A lock is the subset of pip's requirements-file format that pins and hashes need (so ``pip
install --require-hashes -r`` reads it too); :func:`read_lock` reads it strictly, naming the
file and line of anything else. The offline bundle's lock is ``bundle/requirements-h200.txt``
(:data:`specdec.wheels.LOCK_FILE`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Foo_Bar`` -> ``foo-bar``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


class LockError(ValueError):
    """The lock file is malformed; the message names the file and the line."""


@dataclass(frozen=True)
class LockedRequirement:
    """One line of the lock: an exact pin and the sha256 of the wheels it may be built from."""

    name: str
    version: str
    hashes: tuple[str, ...]
    line: int  # where it starts in the lock file, for messages

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


_PIN = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def read_lock(path: Path | str) -> list[LockedRequirement]:
    """The pins of a lock file, in order, each with its ``--hash=sha256:`` values.

    The accepted format is the subset of pip's requirements files a lock needs: comments and
    blank lines, and per requirement ``name==version`` followed by at least one
    ``--hash=sha256:<64 hex digits>`` (continued with ``\\`` over several lines). Anything
    else (a range instead of a pin, an option, a URL, a marker, a missing or malformed hash, a
    name pinned twice) is a :class:`LockError` naming the file and line.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise LockError(f"{path}: cannot read the lock: {e.strerror}") from None
    logical: list[tuple[int, str]] = []
    pending, start = "", 0
    for no, raw in enumerate(text.splitlines(), start=1):
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if not pending:
            start = no
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        logical.append((start, pending + raw))
        pending = ""
    if pending:
        raise LockError(f"{path}:{start}: the last requirement ends with a line continuation")
    out: list[LockedRequirement] = []
    seen: dict[str, int] = {}
    for no, line in logical:
        where = f"{path}:{no}"
        words = line.split()
        m = _PIN.fullmatch(words[0])
        if m is None:
            raise LockError(f"{where}: {words[0]!r} is not an exact pin name==version")
        hashes = []
        for w in words[1:]:
            h = _HASH.fullmatch(w)
            if h is None:
                raise LockError(f"{where}: {w!r} is not --hash=sha256:<64 lowercase hex digits>")
            hashes.append(h.group(1))
        if not hashes:
            raise LockError(f"{where}: {words[0]} has no --hash=sha256: (every pin is hashed)")
        name = canonical_name(m.group(1))
        if name in seen:
            raise LockError(f"{where}: {name} is pinned again (first on line {seen[name]})")
        seen[name] = no
        out.append(LockedRequirement(m.group(1), m.group(2), tuple(hashes), no))
    if not out:
        raise LockError(f"{path}: no requirements")
    return out
