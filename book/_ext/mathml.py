"""Render math to MathML at build time, so formulas show offline and from file://.

Sphinx's default renderer (MathJax) loads JavaScript from a CDN, which an
offline reader does not have. docutils ships a LaTeX -> MathML converter and
browsers render MathML natively; this extension registers it as an HTML math
renderer (``html_math_renderer = "mathml"``).
"""
from docutils import nodes
from docutils.utils.math import latex2mathml


def _mathml(latex: str, block: bool) -> str:
    return latex2mathml.tex2mathml(latex, as_block=block)


def visit_inline(self, node: nodes.Element) -> None:
    self.body.append(_mathml(node.astext(), block=False))
    raise nodes.SkipNode


def visit_block(self, node: nodes.Element) -> None:
    if node.get("number"):
        self.body.append(f'<div class="math-wrapper" id="{node["ids"][0]}">'
                         if node.get("ids") else '<div class="math-wrapper">')
        self.body.append(f'<span class="eqno">({node["number"]})</span>')
    else:
        self.body.append('<div class="math-wrapper">')
    self.body.append(_mathml(node.astext(), block=True))
    self.body.append("</div>")
    raise nodes.SkipNode


def setup(app):
    app.add_html_math_renderer("mathml", (visit_inline, None), (visit_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
