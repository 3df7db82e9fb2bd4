"""Chapters keyed by their inputs: re-execute a notebook only when what it reads changed.

:func:`specdec.book.execute_all` runs every chapter; a regeneration should run only those
whose inputs moved (as jupyter-cache or showyourwork do). A chapter's key is the SHA-256 of

- the notebook's source and the papermill parameters it runs with;
- the library (``lib/specdec/**/*.py``);
- the rows it reads: ``data/results/<profile>/`` and ``profiles/<profile>.yaml`` of every
  profile in its ``profiles`` parameter or named in its source (all profiles when it names
  none, as the claims chapter);
- the shared data every chapter may read: ``data/claims``, ``data/leases``,
  ``data/model_configs``, ``data/reports``, and the trained artifacts' records ``data/trained``
  and ``data/retrained``.

The key of the executed copy is stored beside it (``book/chapters/.inputs/<name>.sha256``);
an executed copy with the same key is kept. The HTML is rebuilt when a chapter was
executed, a prose page changed or ``book/_build/html`` is missing (key in
``book/_build/.inputs.sha256``).
"""
from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path
from typing import Mapping, Sequence

from . import paths

SHARED_DATA = ("claims", "leases", "model_configs", "reports", "trained", "retrained", "panels")


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.exists():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")
                  and "__pycache__" not in p.parts)


_DIGESTS: dict[tuple[str, int, int], bytes] = {}


def _digest(f: Path) -> bytes:
    st = f.stat()
    key = (str(f), st.st_mtime_ns, st.st_size)
    if key not in _DIGESTS:
        _DIGESTS[key] = hashlib.sha256(f.read_bytes()).digest()
    return _DIGESTS[key]


def _hash_files(h, files: Sequence[Path]) -> None:
    for f in files:
        h.update(str(f.relative_to(paths.ROOT) if paths.ROOT in f.parents else f).encode())
        h.update(b"\0")
        h.update(_digest(f))


def notebook_profiles(nb: Path, parameters: Mapping | None = None) -> list[str] | None:
    """Profiles a chapter reads: its ``profiles`` parameter (or the override) plus the known
    profile names its source mentions; None when it names none (it may read any)."""
    src = nb.read_text()
    known = [p.stem for p in paths.PROFILES_DIR.glob("*.yaml")]
    named: set[str] = set()
    if parameters and "profiles" in parameters:
        named |= set(parameters["profiles"] or [])
    else:
        for cell in json.loads(src)["cells"]:
            if "parameters" not in cell.get("metadata", {}).get("tags", []):
                continue
            try:
                tree = ast.parse("".join(cell["source"]))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and getattr(node.targets[0], "id", None) == "profiles"):
                    try:
                        named |= set(ast.literal_eval(node.value) or [])
                    except ValueError:
                        pass
    if not named:
        return None
    named |= {p for p in known if f'"{p}"' in src or f"'{p}'" in src or f"\\\"{p}\\\"" in src}
    return sorted(named)


def input_key(nb: Path, parameters: Mapping | None = None,
              results_root: Path | None = None) -> str:
    """The key of one chapter's inputs (module doc)."""
    h = hashlib.sha256()
    h.update(nb.read_bytes())
    h.update(json.dumps(dict(parameters or {}), sort_keys=True, default=str).encode())
    _hash_files(h, _files(paths.ROOT / "lib" / "specdec"))
    results = results_root or paths.RESULTS_DIR
    chosen = notebook_profiles(nb, parameters)
    if chosen is None:
        _hash_files(h, _files(results) + _files(paths.PROFILES_DIR))
    else:
        for p in chosen:
            _hash_files(h, _files(results / p) + _files(paths.PROFILES_DIR / f"{p}.yaml"))
    for d in SHARED_DATA:
        _hash_files(h, _files(paths.DATA_DIR / d))
    return h.hexdigest()


def _key_file(out_dir: Path, nb: Path) -> Path:
    return out_dir / ".inputs" / f"{nb.stem}.sha256"


def stale_chapters(notebooks: Sequence[Path] | None = None, out_dir: Path | None = None,
                   parameters: Mapping | None = None) -> dict[Path, str]:
    """Notebook -> its key now, for those whose executed copy is missing or has another key."""
    from .book import notebooks as all_notebooks

    out_dir = out_dir or paths.BOOK_DIR / "chapters"
    params = {"mode": "replay", **dict(parameters or {})}
    out = {}
    for nb in notebooks if notebooks is not None else all_notebooks():
        key = input_key(nb, params)
        kf = _key_file(out_dir, nb)
        if not (out_dir / nb.name).exists() or not kf.exists() or kf.read_text().strip() != key:
            out[nb] = key
    return out


def execute_stale(notebooks: Sequence[Path] | None = None, out_dir: Path | None = None,
                  parameters: Mapping | None = None, out=None) -> list[str]:
    """Execute (replay mode) only the chapters whose inputs changed; returns their names."""
    from .book import execute_notebook

    out = out or sys.stdout
    out_dir = out_dir or paths.BOOK_DIR / "chapters"
    params = {"mode": "replay", **dict(parameters or {})}
    done = []
    for nb, key in stale_chapters(notebooks, out_dir, params).items():
        why = "inputs changed" if (out_dir / nb.name).exists() else "no executed copy yet"
        execute_notebook(nb, out_dir, params)
        kf = _key_file(out_dir, nb)
        kf.parent.mkdir(parents=True, exist_ok=True)
        kf.write_text(key + "\n")
        print(f"executed {nb.name} ({why})", file=out, flush=True)
        done.append(nb.stem)
    return done


def forget(executed: Sequence[Path]) -> None:
    """Drop the keys of executed copies made outside :func:`execute_stale` (``specdec book
    --only``/``--profile``/``--all``, other parameters perhaps): the next replay build
    executes them again instead of trusting a key their copy no longer matches."""
    for copy in executed:
        _key_file(Path(copy).parent, Path(copy)).unlink(missing_ok=True)


def book_key(book_dir: Path | None = None) -> str:
    """Key of everything the HTML is built from: prose, config, executed chapters."""
    book_dir = book_dir or paths.BOOK_DIR
    h = hashlib.sha256()
    files = [f for f in _files(book_dir) if "_build" not in f.relative_to(book_dir).parts]
    _hash_files(h, files)
    return h.hexdigest()


def update_book(out=None) -> list[str]:
    """Re-execute the chapters whose inputs changed, then rebuild the HTML if anything did."""
    from .book import build

    out = out or sys.stdout
    executed = execute_stale(out=out)
    marker = paths.BOOK_DIR / "_build" / ".inputs.sha256"
    key = book_key()
    index = paths.BOOK_DIR / "_build" / "html" / "index.html"
    if index.exists() and marker.exists() and marker.read_text().strip() == key:
        print("book: no input changed; HTML kept", file=out)
        return executed
    print(f"book: built {build(quiet=True)}", file=out)
    marker.write_text(key + "\n")
    return executed
