"""The book builds offline, and every chapter of the TOC renders in a real browser.

Executes every notebook (replay mode) into book/chapters/, builds book/_build/html with
Jupyter Book, then opens each page in headless Chromium from file:// and checks, from the
rendered DOM: the page exists with a title, every <img> loaded (naturalWidth > 0), no Python
traceback is shown, a table wider than the page scrolls sideways with its scrollbar on screen,
and the navigation lists every chapter of the TOC.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from specdec import book, paths

pytestmark = pytest.mark.book

#: Chapters that draw one figure per campaign with stored rows.
FIGURE_CHAPTERS = {"chapters/draft_selection", "chapters/k_sweep", "chapters/batch_scaling",
                   "chapters/methods", "chapters/multi_gpu", "chapters/surface"}

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars"]

# Injected into a *copy* of each page: reports, into the DOM, what only a browser knows.
CHECK_SCRIPT = r"""
<script>
(function () {
  document.querySelectorAll('img').forEach(function (i) { i.loading = 'eager'; });
  // A table wider than the page must scroll sideways in a box whose scrollbar fits on
  // screen: the first ancestor it overflows is that box, at most a window high.
  function cutOff(table) {
    for (var box = table.parentElement; box && box !== document.body; box = box.parentElement) {
      if (box.scrollWidth > box.clientWidth + 1) {
        var x = getComputedStyle(box).overflowX;
        return !((x === 'auto' || x === 'scroll') && box.clientHeight <= window.innerHeight);
      }
    }
    return false;
  }
  function report() {
    var imgs = Array.prototype.slice.call(document.images);
    var h1 = document.querySelector('h1');
    var out = {
      title: h1 ? h1.textContent.trim() : '',
      images: imgs.length,
      broken: imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
                  .map(function (i) { return i.getAttribute('src'); }),
      traceback: /Traceback \(most recent call last\)/.test(document.body.innerText)
                 || document.querySelectorAll('.output.traceback, .output.error').length > 0,
      nav: Array.prototype.slice.call(document.querySelectorAll('nav.bd-docs-nav a'))
                .map(function (a) { return a.getAttribute('href'); }),
      cut_tables: Array.prototype.slice.call(document.querySelectorAll('table'))
                  .filter(cutOff).map(function (t) { return t.innerText.slice(0, 60); })
    };
    var pre = document.createElement('pre');
    pre.id = 'specdec-check';
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  if (document.readyState === 'complete') { report(); } else { window.addEventListener('load', report); }
})();
</script>
"""


@pytest.fixture(scope="module")
def built_book(executed_chapters) -> Path:
    # the chapters executed once per session (conftest.executed_chapters), as
    # book.execute_all(mode="replay") writes them; a chapter that failed stops the build
    failed = [e for e in executed_chapters.values() if isinstance(e, Exception)]
    if failed:
        raise failed[0]
    return book.build(quiet=True)


@pytest.fixture(scope="module")
def chromium() -> str:
    from specdec import envspec

    try:
        return envspec.ensure_chromium()
    except (SystemExit, subprocess.CalledProcessError, OSError) as e:
        pytest.skip(f"headless Chromium is not installed and could not be installed: {e}")


def browse(chromium: str, page: Path) -> dict:
    """Open ``page`` (a copy with CHECK_SCRIPT injected) in headless Chromium; return the report."""
    with tempfile.TemporaryDirectory(prefix="specdec-chromium-") as profile_dir:
        proc = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}",
             "--virtual-time-budget=15000", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="specdec-check"[^>]*>(.*?)</pre>', proc.stdout, re.S)
    assert m, (f"{page.name}: Chromium did not run the check (exit {proc.returncode}): "
               f"{proc.stderr[-2000:]}")
    import html

    return json.loads(html.unescape(m.group(1)))


@pytest.fixture(scope="module")
def reports(built_book: Path, chromium: str, tmp_path_factory) -> dict[str, dict]:
    html_dir = built_book.parent
    copy = tmp_path_factory.mktemp("html") / "html"
    shutil.copytree(html_dir, copy)
    out = {}
    for entry in book.toc_files():
        page = copy / f"{entry}.html"
        if not page.exists():
            out[entry] = None
            continue
        text = page.read_text(encoding="utf-8")
        assert "</body>" in text, f"{entry}.html has no </body>"
        page.write_text(text.replace("</body>", CHECK_SCRIPT + "</body>", 1), encoding="utf-8")
        out[entry] = browse(chromium, page)
    return out


def test_build_returns_index(built_book: Path):
    assert built_book.name == "index.html" and built_book.is_file()
    assert built_book.parent == paths.BOOK_DIR / "_build" / "html"


def test_build_is_offline(built_book: Path):
    """Nothing in the pages is loaded from the network: scripts, styles and images are local."""
    remote = re.compile(r'<(?:script|link|img)\b[^>]*\b(?:src|href)="(?:https?:)?//', re.I)
    offenders = [p.relative_to(built_book.parent) for p in built_book.parent.rglob("*.html")
                 if remote.search(p.read_text(encoding="utf-8"))]
    assert not offenders, f"pages load remote resources: {offenders}"


def test_every_chapter_renders(reports):
    missing = [e for e, r in reports.items() if r is None]
    assert not missing, f"TOC chapters without a built page: {missing}"
    untitled = [e for e, r in reports.items() if not r["title"]]
    assert not untitled, f"pages without a title: {untitled}"


def test_navigation_lists_every_chapter(reports):
    root = book.toc_files()[0]
    nav = {h.split("#")[0].removesuffix(".html") for h in reports[root]["nav"] if h}
    absent = [e for e in book.toc_files()[1:] if e not in nav]
    assert not absent, f"the navigation of {root}.html lacks: {absent}"


def test_wide_tables_scroll_with_their_scrollbar_on_screen(reports):
    cut = {e: r["cut_tables"] for e, r in reports.items() if r and r["cut_tables"]}
    assert not cut, f"tables cut off at the right edge (no horizontal scrollbar on screen): {cut}"


def test_no_broken_images(reports):
    broken = {e: r["broken"] for e, r in reports.items() if r and r["broken"]}
    assert not broken, f"images that did not load: {broken}"
    # Figures are drawn per campaign that has rows: with stored rows, the chapters show images.
    if any(paths.RESULTS_DIR.glob("*/*.runs.parquet")):
        shown = sum(reports[e]["images"] for e in FIGURE_CHAPTERS if reports.get(e))
        assert shown > 0, "rows are stored but no experiment chapter shows a figure"


def test_no_tracebacks(reports):
    shown = [e for e, r in reports.items() if r and r["traceback"]]
    assert not shown, f"pages show a Python traceback: {shown}"


def test_build_fails_loudly_on_a_missing_chapter(built_book, tmp_path):
    shutil.copytree(paths.BOOK_DIR, tmp_path / "book", ignore=shutil.ignore_patterns("_build"))
    toc = tmp_path / "book" / "_toc.yml"
    toc.write_text(toc.read_text() + "      - file: chapters/no_such_chapter\n")
    with pytest.raises(book.BookError, match="no_such_chapter"):
        book.build(book_dir=tmp_path / "book", quiet=True)


def test_build_fails_loudly_on_a_warning(built_book, tmp_path):
    """A broken cross-reference is a Sphinx warning; the build must refuse it."""
    shutil.copytree(paths.BOOK_DIR, tmp_path / "book", ignore=shutil.ignore_patterns("_build"))
    intro = tmp_path / "book" / "intro.md"
    intro.write_text(intro.read_text() + "\nSee {doc}`no_such_page`.\n")
    with pytest.raises(book.BookError, match="no_such_page"):
        book.build(book_dir=tmp_path / "book", quiet=True)


def test_browser_check_catches_broken_images_and_tracebacks(chromium, tmp_path):
    """The page check itself must be able to fail."""
    page = tmp_path / "bad.html"
    page.write_text("<html><head><title>t</title></head><body><h1>Bad page</h1>"
                    '<img src="no_such_figure.png"><pre>Traceback (most recent call last):\n'
                    '  File "x.py", line 1</pre>' + CHECK_SCRIPT + "</body></html>")
    report = browse(chromium, page)
    assert report["title"] == "Bad page"
    assert report["broken"] == ["no_such_figure.png"]
    assert report["traceback"] is True


def test_pending_sentence_counts_what_is_not_measured(tmp_path):
    from specdec import profiles as P

    n = len(P.expand(P.load_profile("h200-trained")))
    empty = book.pending_sentence(["h200-trained"], tmp_path)
    assert empty.startswith(f"Not measured yet: `h200-trained` {n} of {n} cells (`trained-k4`")
    stored = book.pending_sentence(["h200-trained"])  # the committed rows: fewer are missing
    assert stored != empty and "h200-trained" in stored


def _surface_without(tmp_path: Path, prefix: str) -> Path:
    """A results root holding the committed h200-surface-v2 rows less the cells whose file
    name starts with ``prefix``: the campaign as it stood before a lease measured them."""
    src = paths.results_dir("h200-surface-v2")
    dst = tmp_path / "results" / "h200-surface-v2"
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if n.startswith(prefix)])
    return tmp_path / "results"


def test_pending_list_names_each_experiment_with_its_missing_and_failed_cells(tmp_path):
    assert not any("`dynamic-k-eagle3`" in line  # lease 23 measured it in full
                   for line in book.pending_list(["h200-surface-v2"]).splitlines())
    before = _surface_without(tmp_path, "eagle3-dynk-v1-")
    lines = book.pending_list(["h200-surface-v2"], before).splitlines()
    # lease 20: EAGLE-3's dynamic K on its default runner failed at engine start, 4 cells
    assert ("- `h200-surface-v2`, `dynamic-k-default-runner`: 0 of 4 cells of `eagle3-dynk` "
            "measured, 4 failed (vLLM did not run them; kept as the record, not measured again); "
            "the 2 baseline cells beside them (shared with other experiments): all measured") in lines
    # the shared baselines are not counted as the experiment's own measured cells
    dyn = next(line for line in lines if "`dynamic-k-eagle3`" in line)
    assert dyn.startswith("- `h200-surface-v2`, `dynamic-k-eagle3`: 0 of 8 cells of `eagle3-dynk-v1`")
    assert not any("`surface-k4`" in line for line in lines)  # measured in full
    empty = book.pending_list(["h200-surface-v2"], tmp_path / "none")  # no rows: every experiment listed
    assert "`surface-k4`: 0 of " in empty and "failed" not in empty
    assert "baseline cells beside them (shared with other experiments): 0 measured" in empty


def test_pending_experiments_are_those_a_lease_would_still_measure(tmp_path):
    assert "dynamic-k-eagle3" not in book.pending_experiments("h200-surface-v2")  # lease 23
    pending = book.pending_experiments("h200-surface-v2", _surface_without(tmp_path, "eagle3-dynk-v1-"))
    assert "k-sweep" not in pending and "surface-k4" not in pending  # measured in full
    assert "dynamic-k-eagle3" in pending
    assert "dynamic-k-default-runner" not in pending  # failed, but kept as the record
    assert "k-sweep" in book.pending_experiments("h200-surface-v2", tmp_path / "none")

def test_pending_clause_names_what_is_pending_or_says_nothing(tmp_path):
    some = "{names} {are} not measured yet"
    assert book.pending_clause("h200-surface-v2", some, "done", ["k-sweep", "surface-k4"]) == "done"
    # no rows under tmp_path: every experiment is pending
    assert book.pending_clause("h200-surface-v2", some, experiments=["dynamic-k-1b"],
                               results_root=tmp_path) == "`dynamic-k-1b` is not measured yet"
    assert book.pending_clause("h200-surface-v2", some, experiments=[
        "dynamic-k-1b", "standard-vs-synthetic", "k-sweep"], results_root=tmp_path) == \
        "`k-sweep`, `dynamic-k-1b` and `standard-vs-synthetic` are not measured yet"
