"""Execute the chapters and build the book.

Two passes, each done by the tool made for it:

1. :func:`execute_all` runs every notebook in ``notebooks/`` with papermill
   (fresh kernel of *this* interpreter) and writes the executed copies to
   ``book/chapters/`` -- a build artefact, never committed;
2. :func:`build` runs Jupyter Book 1.x over ``book/`` with execution off (the
   notebooks are already executed) into ``book/_build/html`` and returns the
   path of ``index.html``. Any Sphinx warning fails the build: a missing glue
   key, a broken figure or a chapter missing from the table of contents is a
   defect of the book, not noise.

``specdec book [--mode replay|run] [--only NAME]`` (:mod:`specdec.cli`) does both.

The chapters share a little code, kept here rather than copied between
notebooks: :func:`chapter_data` (measure in ``mode="run"``, then load and
summarise the chapter's experiment rows per profile), :func:`missing_note` (what
a chapter says when a campaign has no rows yet), :func:`figures` (one figure per
campaign), :func:`compact` and :func:`provenance_table` (tables for a page),
:func:`article_claims` (the article's figures, from the claims ledger) and
:func:`glue_md` / :func:`fmt` (numbers into prose).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import yaml

from . import paths

#: Name of the kernelspec that points at this interpreter (installed into sys.prefix).
KERNEL_NAME = "specdec"
MODES = ("replay", "run")
#: Seconds one cell may take in replay mode before papermill gives up (run mode: no limit,
#: the runner has its own per-engine timeouts).
CELL_TIMEOUT_S = 600


class BookError(RuntimeError):
    """A chapter failed to execute or the book failed to build."""


def notebooks(only: str | Sequence[str] | None = None) -> list[Path]:
    """The chapter notebooks in ``notebooks/`` (all, or those named in ``only``)."""
    found = sorted(p for p in paths.NOTEBOOKS_DIR.glob("*.ipynb"))
    if not only:
        return found
    wanted = [only] if isinstance(only, str) else list(only)
    by_name = {p.stem: p for p in found}
    unknown = [n for n in wanted if Path(n).stem not in by_name]
    if unknown:
        raise BookError(f"--only: no notebook named {unknown[0]!r} "
                        f"(known: {', '.join(sorted(by_name)) or 'none'})")
    return [by_name[Path(n).stem] for n in wanted]


def ensure_kernel() -> str:
    """Install a kernelspec for this interpreter into its own prefix (idempotent).

    A fresh clone's venv may have no kernelspec, or one named ``python3`` that
    resolves to whatever ``python`` is first on PATH; papermill must run the
    chapters with the interpreter that has ``specdec`` installed.
    """
    from ipykernel.kernelspec import install

    spec = Path(sys.prefix) / "share" / "jupyter" / "kernels" / KERNEL_NAME / "kernel.json"
    if not spec.exists() or sys.executable not in spec.read_text():
        install(kernel_name=KERNEL_NAME, display_name=f"Python ({KERNEL_NAME})",
                prefix=sys.prefix)
    return KERNEL_NAME


def execute_notebook(notebook: Path, out_dir: Path, parameters: Mapping[str, object]) -> Path:
    """Execute one notebook with papermill into ``out_dir``; the output appears only if
    it succeeded (a failed run is kept as ``<name>.failed.ipynb``, outside the TOC)."""
    import papermill as pm
    from traitlets.config import Config

    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / notebook.name
    partial = out_dir / f".{notebook.stem}.partial.ipynb"
    failed = out_dir / f"{notebook.stem}.failed.ipynb"
    failed.unlink(missing_ok=True)
    try:
        # The kernel talks to papermill over Unix sockets in a private (0700) folder, not
        # over TCP on localhost, which ipykernel warns is unencrypted.
        with tempfile.TemporaryDirectory(prefix="specdec-kernel-") as sockets:
            kernel = Config({"KernelManager": {"transport": "ipc",
                                               "ip": str(Path(sockets) / "kernel")}})
            pm.execute_notebook(
                str(notebook), str(partial),
                parameters=dict(parameters),
                kernel_name=ensure_kernel(),
                cwd=str(paths.NOTEBOOKS_DIR),
                progress_bar=False,
                execution_timeout=None if parameters.get("mode") == "run" else CELL_TIMEOUT_S,
                config=kernel,
            )
    except Exception as e:  # papermill's error names the cell and shows the traceback
        if partial.exists():
            os.replace(partial, failed)  # kept for debugging, outside the TOC
        raise BookError(f"{notebook.name} failed to execute "
                        f"(executed copy with the error: {failed}):\n{e}") from e
    os.replace(partial, final)
    return final


def execute_all(mode: str = "replay", profiles: Sequence[str] | None = None,
                out_dir: Path | None = None, parameters: Mapping[str, object] | None = None,
                only: str | Sequence[str] | None = None) -> list[Path]:
    """Run the chapter notebooks with papermill into ``out_dir`` (``book/chapters/``).

    ``mode="replay"`` reads the stored rows in ``data/``; ``mode="run"`` makes each
    chapter measure its experiments first (``specdec.runner.run``). ``profiles``
    overrides each chapter's default profile list; ``parameters`` are passed on
    to every notebook as is. Stops at the first chapter that fails.
    """
    if mode not in MODES:
        raise BookError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    out_dir = Path(out_dir) if out_dir is not None else paths.BOOK_DIR / "chapters"
    params: dict[str, object] = {"mode": mode}
    if profiles is not None:
        params["profiles"] = list(profiles)
    params.update(parameters or {})
    todo = notebooks(only)
    if not todo:
        raise BookError(f"no notebooks in {paths.NOTEBOOKS_DIR}")
    done = []
    for nb in todo:
        t0 = time.monotonic()
        done.append(execute_notebook(nb, out_dir, params))
        print(f"executed {nb.name} in {time.monotonic() - t0:.1f} s", flush=True)
    return done


def toc_files(book_dir: Path | None = None) -> list[str]:
    """Every ``file:`` entry of ``_toc.yml``, in reading order (without suffix)."""
    book_dir = book_dir or paths.BOOK_DIR
    toc = yaml.safe_load((book_dir / "_toc.yml").read_text())
    out: list[str] = []

    def walk(node):
        if isinstance(node, Mapping):
            if "file" in node:
                out.append(str(node["file"]))
            if "root" in node:
                out.append(str(node["root"]))
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key, []) or []:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(toc)
    return out


def missing_chapters(book_dir: Path | None = None) -> list[str]:
    """TOC entries with no source file (e.g. a notebook that was not executed)."""
    book_dir = book_dir or paths.BOOK_DIR
    suffixes = (".md", ".ipynb")
    return [f for f in toc_files(book_dir)
            if not any((book_dir / f"{f}{s}").exists() or (book_dir / f).exists()
                       for s in suffixes)]


def jupyter_book_executable() -> str:
    """The ``jupyter-book`` script of this interpreter's environment."""
    exe = shutil.which("jupyter-book", path=str(Path(sys.executable).parent))
    if exe is None:
        raise BookError("jupyter-book is not installed in this environment "
                        "(pip install -e '.[book]')")
    return exe


def build(book_dir: Path | None = None, quiet: bool = False) -> Path:
    """Build the HTML book with Jupyter Book 1.x; warnings are errors. Returns index.html."""
    book_dir = Path(book_dir) if book_dir is not None else paths.BOOK_DIR
    missing = missing_chapters(book_dir)
    if missing:
        raise BookError("the table of contents names chapters that do not exist: "
                        + ", ".join(missing)
                        + " (executed notebooks come from `specdec book` / execute_all)")
    html = book_dir / "_build" / "html"
    shutil.rmtree(book_dir / "_build", ignore_errors=True)  # no stale pages or cached doctrees
    cmd = [jupyter_book_executable(), "build", str(book_dir), "--all",
           "--warningiserror", "--keep-going"]
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    if not quiet or proc.returncode != 0:
        sys.stdout.write(proc.stdout[-6000:])
        sys.stderr.write(proc.stderr[-20000:])
    if proc.returncode != 0:
        warnings = [ln for ln in (proc.stdout + proc.stderr).splitlines()
                    if "WARNING" in ln or "ERROR" in ln]
        raise BookError(f"jupyter-book build failed (exit {proc.returncode}); "
                        f"{len(warnings)} warning/error line(s):\n" + "\n".join(warnings[:40]))
    index = html / "index.html"
    if not index.exists():
        raise BookError(f"jupyter-book reported success but {index} does not exist")
    return index


# --------------------------------------------------------------------------- #
# Chapter support: what every experiment notebook does first
# --------------------------------------------------------------------------- #
@dataclass
class ChapterData:
    """One experiment's stored rows for the chapter's profiles, summarised.

    ``runs``: every run row (ok and failed) of the experiment; ``summary``:
    :func:`specdec.metrics.summarize` + :func:`specdec.metrics.with_speedup`;
    ``failures``: :func:`specdec.metrics.failures`; ``tokens``: the stored greedy
    outputs of the experiment's cells (for losslessness); ``measured`` / ``missing``:
    the profiles that do / do not have a successful row for the experiment.
    """

    experiment: "list[str] | None"
    profiles: list[str]
    runs: "object"
    summary: "object"
    failures: "object"
    tokens: "object" = None
    measured: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def of(self, profile: str):
        """The summary rows of one profile."""
        return self.summary[self.summary["profile"] == profile]


def _defined_experiments(profile: str, experiments: Sequence[str]) -> list[str]:
    """Those of ``experiments`` that ``profiles/<profile>.yaml`` defines (a chapter may name
    experiments of several campaigns); [] if the profile is not in this checkout."""
    from .profiles import ProfileError, load_profile

    try:
        known = {e.name for e in load_profile(profile).experiments}
    except ProfileError:
        return []
    return [e for e in experiments if e in known]


def chapter_data(profiles: Sequence[str], experiment: str | Sequence[str] | None,
                 mode: str = "replay", results_root: str | Path | None = None) -> ChapterData:
    """Measure (``mode="run"``) then load the chapter's experiment(s) of each profile.

    ``experiment``: one name or several (a cell counts if it belongs to any; a profile
    uses those it defines), or None for every experiment. In ``"run"`` mode each
    profile's experiments are measured first with :func:`specdec.runner.run`
    (finished cells are skipped); ``"replay"`` only reads ``data/results`` (or
    ``results_root``). A profile without rows is not an error: it is listed in
    ``missing`` and the chapter says so.
    """
    from . import metrics, store

    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    profiles = [profiles] if isinstance(profiles, str) else list(profiles)
    experiments = None if experiment is None else (
        [experiment] if isinstance(experiment, str) else list(experiment))
    root = Path(results_root) if results_root is not None else None
    if mode == "run":
        from . import runner  # needs vLLM; replay must work without it

        for p in profiles:
            chosen = None if experiments is None else _defined_experiments(p, experiments)
            if chosen == []:
                print(f"{p}: defines none of {', '.join(experiments)}; nothing to measure")
                continue
            runner.run(p, experiments=chosen, results_root=root)
    runs = store.load_runs(profiles, root=root)
    if experiments is not None:
        runs = store.tagged(runs, experiments)
    runs = runs.reset_index(drop=True)
    if len(runs):
        store.check_provenance(runs, where=f"{', '.join(experiments or ['all'])} rows")
    summary = metrics.with_speedup(metrics.summarize(runs))
    tokens = store.load_tokens(profiles, root=root)
    tokens = tokens[tokens["cell_id"].isin(set(runs["cell_id"]))].reset_index(drop=True)
    measured = [p for p in profiles if (summary["profile"] == p).any()]
    return ChapterData(experiment=experiments, profiles=profiles, runs=runs, summary=summary,
                       failures=metrics.failures(runs), tokens=tokens, measured=measured,
                       missing=[p for p in profiles if p not in measured])


def missing_note(data: ChapterData, profile: str | None = None) -> str:
    """Markdown saying plainly which campaign has no rows for this chapter, and how to fill it."""
    names = [profile] if profile else data.missing
    names = [n for n in names if n in data.missing]
    if not names:
        return ""
    exps = data.experiment
    lines = []
    for n in names:
        failed = data.runs[(data.runs["profile"] == n)] if len(data.runs) else data.runs
        own = None if exps is None else _defined_experiments(n, exps)
        if own == []:
            why = (f"its profile defines none of the experiments "
                   f"{', '.join(f'`{e}`' for e in exps)} (or is not in this checkout)")
            lines.append(f"- **`{n}`: not measured yet** — {why}. Nothing below is shown "
                         f"for this campaign.")
            continue
        why = (f"{len(failed)} stored row(s), all failed" if len(failed)
               else f"`data/results/{n}/` holds no rows for "
                    f"{'these experiments' if exps else 'it'}")
        cmd = f"specdec run {n}" + "".join(f" --experiment {e}" for e in (own or []))
        lines.append(f"- **`{n}`: not measured yet** — {why}. Nothing below is shown for this "
                     f"campaign. To measure it: `{cmd}` on its hardware, then rebuild the book.")
    what = ("experiment " + ", ".join(f"`{e}`" for e in exps)) if exps else "this chapter"
    return f"**Missing data for {what}.**\n\n" + "\n".join(lines)


def pending_sentence(profiles: Sequence[str], results_root: str | Path | None = None) -> str:
    """Markdown: how many cells of each profile are not measured yet, and in which experiments
    (what `specdec status <profile>` lists), or that every cell is measured."""
    from . import runner
    from .profiles import load_profile

    root = Path(results_root) if results_root is not None else None
    parts = []
    for name in profiles:
        st = runner.status(load_profile(name), results_root=root)
        total = st.pop("(all)")
        left = total["missing"] + total["failed"]
        if left:
            exps = [e for e, c in st.items() if c["missing"] + c["failed"]]
            parts.append(f"`{name}` {left} of {sum(total.values())} cells "
                         f"({', '.join(f'`{e}`' for e in exps)})")
    if not parts:
        return "Every cell of these campaigns is measured."
    return ("Not measured yet: " + "; ".join(parts)
            + ". `specdec status <profile>` lists them; they run with the same commands.")


def pending_experiments(profile: str, results_root: str | Path | None = None) -> list[str]:
    """The experiments of ``profile`` with cells that a lease would still measure (missing, or
    failed outside a record experiment): what a chapter's "as its rows land" clause names."""
    from . import runner
    from .profiles import load_profile

    root = Path(results_root) if results_root is not None else None
    prof = load_profile(profile)
    return [e.name for e in prof.experiments
            if any(pc.will_run for pc in runner.plan(prof, [e.name], results_root=root))]


def pending_clause(profile: str, some: str, none: str = "",
                   experiments: Sequence[str] | None = None,
                   results_root: str | Path | None = None) -> str:
    """``some`` with ``{names}`` (the :func:`pending_experiments` of ``profile``, among
    ``experiments`` if given, as "`a`, `b` and `c`") and ``{are}`` ("is" or "are") filled in, or
    ``none`` where nothing is pending: a chapter's "as its rows land" clause, from the rows."""
    names = [f"`{e}`" for e in pending_experiments(profile, results_root)
             if experiments is None or e in experiments]
    if not names:
        return none
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return some.format(names=listed, are="is" if len(names) == 1 else "are")


def pending_list(profiles: Sequence[str], results_root: str | Path | None = None) -> str:
    """Markdown: a line per experiment of each profile with cells not measured yet or failed
    (:func:`pending_sentence` in detail), or that every experiment is measured. An experiment's
    counts are of its own methods' cells; the baselines beside them, which other experiments
    share, are counted apart."""
    from . import runner
    from .profiles import BASELINE, load_profile

    root = Path(results_root) if results_root is not None else None
    lines = []
    for name in profiles:
        prof = load_profile(name)
        for e in prof.experiments:
            planned = runner.plan(prof, [e.name], results_root=root)
            if all(pc.status == "ok" for pc in planned):
                continue
            own = [pc for pc in planned if pc.cell.method != BASELINE]
            base = [pc for pc in planned if pc.cell.method == BASELINE]
            n = {s: sum(pc.status == s for pc in own) for s in ("ok", "missing", "failed")}
            methods = ", ".join(f"`{m}`" for m in dict.fromkeys(pc.cell.method for pc in own))
            line = f"- `{name}`, `{e.name}`: {n['ok']} of {len(own)} cells of {methods} measured"
            if n["missing"]:
                line += f", {n['missing']} not measured yet"
            if n["failed"]:
                kept = "; kept as the record, not measured again" if e.record else ""
                line += f", {n['failed']} failed (vLLM did not run them{kept})"
            if base:
                b_ok = sum(pc.status == "ok" for pc in base)
                line += (f"; the {len(base)} baseline cells beside them (shared with other "
                         f"experiments): {'all' if b_ok == len(base) else b_ok} measured")
            lines.append(line)
    return "\n".join(lines) or "Every experiment of these campaigns is measured."


def figures(data: ChapterData, draw, caption: str, rows=None) -> list:
    """Show one figure per campaign of the chapter that has rows, each with its caption.

    ``draw(rows_of_one_campaign) -> Figure`` (a :mod:`specdec.plots` function); ``rows``
    defaults to ``data.summary`` (any frame with a ``profile`` column works, e.g. fit
    predictions). Campaigns are drawn apart because their scales differ by an order of
    magnitude (a CPU and an H200). Returns the figures shown.
    """
    from IPython.display import Markdown, display

    rows = data.summary if rows is None else rows
    shown = []
    for p in data.profiles:
        sub = rows[rows["profile"] == p] if len(rows) else rows
        if not len(sub):
            continue
        fig = draw(sub)
        display(fig)
        display(Markdown(f"**Figure ({p}).** {caption}"))
        shown.append(fig)
    if not shown:
        display(Markdown(f"*No campaign of this chapter has rows for this figure yet.* "
                         f"({caption})"))
    return shown


def provenance_table(runs):
    """Per profile: rows, cells, engine version, device, commit(s), time span of the rows."""
    import pandas as pd

    cols = ["profile", "rows", "cells", "vLLM", "device", "CPU", "commit", "measured (UTC)"]
    if not len(runs):
        return pd.DataFrame(columns=cols)
    out = []
    for p, g in runs.groupby("profile", sort=True):
        out.append({
            "profile": p, "rows": len(g), "cells": g["cell_id"].nunique(),
            "vLLM": ", ".join(sorted({f"{a} {b}" for a, b in
                                      zip(g["vllm_package"], g["vllm_version"])})),
            "device": ", ".join(sorted(set(g["device_name"].astype(str)))),
            "CPU": ", ".join(sorted(set(g["cpu_model"].astype(str)))),
            "commit": ", ".join(sorted({str(c)[:10] for c in g["git_commit"]})),
            "measured (UTC)": f"{g['timestamp_utc'].min()[:16]} to {g['timestamp_utc'].max()[:16]}",
        })
    return pd.DataFrame(out, columns=cols)


def article_claims(ids: Sequence[str]):
    """The article's own figures for claims ``ids``, from the versioned claims ledger.

    One row per claim, in the order given: ``claim``, ``zh`` (the article's words),
    ``en`` (English rendering), ``verdict`` (the ledger's), and every field of the
    claim's ``article:`` mapping (e.g. ``acceptance``, ``speedup``). These are the
    article's numbers, only ever shown labelled as the article's.
    """
    import pandas as pd

    from .claims.ledger import load_ledger

    by_id = {c.id: c for c in load_ledger()}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise KeyError(f"claims ledger has no claim {unknown[0]!r}")
    rows = [{"claim": i, "zh": by_id[i].zh, "en": by_id[i].en, "verdict": by_id[i].verdict,
             **by_id[i].article} for i in ids]
    return pd.DataFrame(rows)


#: What a chapter prints where a number could not be measured.
NOT_MEASURED = "*not measured*"


def fmt(value, spec: str = ".2f", suffix: str = "", missing: str = NOT_MEASURED) -> str:
    """Format a computed number for prose (``missing`` for None/NaN), e.g. ``fmt(s, ".2f", "×")``."""
    try:
        if value is None or value != value:  # NaN
            return missing
    except TypeError:
        return missing
    return f"{value:{spec}}{suffix}"


def compact(df, columns: Mapping[str, str], precision: int = 3):
    """A narrow table for a page: the chosen identity ``columns`` (renamed), then the
    standard measured quantities present in ``df`` as short formatted strings
    (throughput and speedup with their interval, acceptance in %, the unstable flag)."""
    out = df[[c for c in columns if c in df.columns]].rename(columns=dict(columns)).copy()

    def interval(mid, lo, hi, spec, suffix=""):
        return [f"{fmt(m, spec, suffix, '–')} [{fmt(a, spec, '', '–')}, {fmt(b, spec, '', '–')}]"
                for m, a, b in zip(df[mid], df[lo], df[hi])]

    if {"tok_s_median", "tok_s_ci_low", "tok_s_ci_high"} <= set(df.columns):
        out["output tok/s [interval]"] = interval("tok_s_median", "tok_s_ci_low", "tok_s_ci_high",
                                                  ".1f")
    if {"speedup", "speedup_ci_low", "speedup_ci_high"} <= set(df.columns):
        out["speedup [interval]"] = interval("speedup", "speedup_ci_low", "speedup_ci_high",
                                             ".2f", "×")
    if "acceptance_rate" in df.columns:
        out["acceptance"] = [fmt(100 * v if v == v else v, ".1f", " %", "–")
                             for v in df["acceptance_rate"].astype(float)]
    if "mean_acceptance_length" in df.columns:
        out["tokens/step"] = [fmt(v, ".2f", "", "–") for v in df["mean_acceptance_length"]]
    if "unstable" in df.columns:
        out["CV check"] = ["unstable" if bool(u) else "ok" for u in df["unstable"].fillna(False)]
    out = out.reset_index(drop=True)
    return out.style.hide(axis="index").format(precision=precision, na_rep="–")


def glue_text(name: str, text: str) -> None:
    """Glue plain text for another page to quote (``{glue:text}`chapters/x.ipynb::name:s```):
    myst-nb pastes only plain text, HTML or images across documents, not Markdown."""
    from myst_nb import glue

    glue(name, str(text), display=False)


def glue_md(name: str, text: str) -> None:
    """Glue a Markdown snippet (``{glue:md}`name``` in prose) without showing it here."""
    from IPython.display import Markdown
    from myst_nb import glue

    glue(name, Markdown(text), display=False)


def glue_table(name: str, table) -> None:
    """Glue a table (a DataFrame or its Styler) for a ``{glue}`` directive in prose, e.g. the
    short answer at the top of a chapter, without showing it here."""
    from myst_nb import glue

    glue(name, table, display=False)


def glue_all(texts: Mapping[str, str]) -> None:
    """:func:`glue_md` every ``name: text`` of a chapter function's sentences."""
    for name, text in texts.items():
        glue_md(name, text)
