"""When our figure may be set against the article's: the comparability rule, written once.

A numeric verdict (*reproduced* / *contradicted*) compares like with like. A measured cell
is comparable with an article figure only if they agree on every dimension below; if any
differs, our number is **our figure in our setting**: shown beside the article's, never a
verdict on it.

- **model**: the target's class, i.e. architecture family and size (an instruct fine-tune
  is the class of its base). The draft/target cost ratio, and so the speedup, depends on it.
- **hardware**: device class and count ("1x A100", "1x H200", "CPU"). The balance of memory
  bandwidth and compute decides whether verifying K+1 tokens costs about one decode step;
  an H200 is not an A100 (2.4x the bandwidth), a CPU is neither.
- **method**: the speculative method vLLM runs (``draft_model``, ``ngram``, ``eagle``,
  ``eagle3``, ``medusa``, ...), as the profile configures it.
- **acceptance** (speculative cells only): ours must be *reached*, i.e. trained weights and
  vLLM's standard rejection sampling, and within :data:`ACCEPTANCE_WINDOW` of the acceptance
  the article states for the figure. Acceptance *set* by synthetic rejection sampling
  (``acceptance_alpha`` on a row) or produced by random weights (``load_format: dummy``) is
  not reached: it times the real kernels at a chosen acceptance, it does not show what a
  draft achieves. Where the article states no acceptance, none of ours can be shown near it.

The article's side of each claim is ``setting:`` in ``data/claims/ledger.yaml``: what the
article states for that figure or, where its section says nothing, its one stated test
environment (§5.1: A100-80GB, Llama-3-8B). ``any`` marks a dimension a general rule does not
restrict; ``unstated`` one the article leaves out although the figure depends on it.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any, Mapping

#: The claim does not restrict this dimension (a general rule, e.g. "K = 5 above 500 GB/s").
ANY = "any"
#: The article does not state this dimension although its figure depends on it.
UNSTATED = "unstated"
#: A cell's acceptance is comparable only within this absolute distance of the article's.
ACCEPTANCE_WINDOW = 0.1

#: Where a cell's acceptance comes from.
REACHED = "reached"          # trained weights, standard rejection sampling
SET = "set"                  # synthetic rejection sampling at a chosen alpha
RANDOM_WEIGHTS = "random weights"  # load_format dummy: an artefact of the weights

DIMENSIONS = ("model", "hardware", "method", "acceptance")


@dataclasses.dataclass(frozen=True)
class ArticleSetting:
    """The setting of one article figure (ledger ``setting:``, validated by
    :class:`specdec.claims.ledger.Setting`; :meth:`~specdec.claims.ledger.Claim.article_setting`
    builds it)."""

    model: str
    hardware: str
    method: str
    #: A rate in [0, 1], :data:`ANY` or :data:`UNSTATED`.
    acceptance: float | str

    def describe(self) -> str:
        acc = self.acceptance if isinstance(self.acceptance, str) else f"{self.acceptance:.0%}"
        return (f"model {self.model}, hardware {self.hardware}, method {self.method}, "
                f"acceptance {acc}")


@dataclasses.dataclass(frozen=True)
class CellSetting:
    """The setting of one measured cell, read from its profile and its row."""

    profile: str
    model: str | None
    hardware: str | None
    method: str | None  # None: the baseline (no speculation)
    acceptance: float | None
    acceptance_origin: str | None  # REACHED, SET or RANDOM_WEIGHTS; None for the baseline

    def describe(self) -> str:
        """Short label of the setting, e.g. "smollm2-135m on CPU"."""
        if self.model is None:
            return f"profile {self.profile} (not in this checkout: setting unknown)"
        weights = ", random weights" if self.acceptance_origin in (SET, RANDOM_WEIGHTS) else ""
        acc = ""
        if self.acceptance_origin == SET:
            acc = f", acceptance set at alpha {self.acceptance:g}"
        return f"{self.model}{weights} on {self.hardware}{acc}"


@dataclasses.dataclass(frozen=True)
class Difference:
    """One dimension on which a cell is not like the article's figure."""

    dimension: str  # one of DIMENSIONS
    ours: str
    theirs: str
    why: str = ""  # what makes it different when the values alone do not say

    def text(self) -> str:
        return f"{self.dimension} {self.ours} (the article's: {self.theirs}{self.why})"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Whether a cell is like the article's figure, and every dimension that differs."""

    differences: tuple[Difference, ...]

    @property
    def comparable(self) -> bool:
        return not self.differences

    def reason(self) -> str:
        return "; ".join(d.text() for d in self.differences) or "comparable"


# --------------------------------------------------------------------------- #
# Our side, from the profile
# --------------------------------------------------------------------------- #
def model_class(name: str) -> str:
    """Target class from a profile's target name: an instruct/chat fine-tune is its base."""
    return re.sub(r"-(instruct|chat)$", "", name.strip().lower())


def hardware_class(kind: str, label: str, num_gpus: int = 0) -> str:
    """"CPU", or "<n>x <GPU model>" read from the label (e.g. "1x A100", "2x H200")."""
    from .profiles import gpu_model

    if kind == "cpu":
        return "CPU"
    return f"{max(num_gpus, 1)}x {gpu_model(label) or label}"


@dataclasses.dataclass(frozen=True)
class ProfileSetting:
    model: str
    hardware: str
    random_weights: bool
    methods: Mapping[str, str | None]  # method name -> vLLM method (None: baseline)


@functools.lru_cache(maxsize=None)
def profile_setting(profile: str) -> ProfileSetting | None:
    """The setting a profile measures in, or None if the profile is not in this checkout."""
    from .profiles import ProfileError, load_profile

    try:
        p = load_profile(profile)
    except ProfileError:
        return None
    methods = {m.name: (dict(m.speculative).get("method", "draft_model") if m.speculative
                        else None) for m in p.methods}
    return ProfileSetting(model=model_class(p.target.name),
                          hardware=hardware_class(p.hardware.kind, p.hardware.label,
                                                  p.hardware.num_gpus),
                          random_weights=p.engine.load_format == "dummy", methods=methods)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def cell_setting(row: Mapping[str, Any], self_drafts=()) -> CellSetting:
    """The setting of a summary row (``profile``, ``method``, ``acceptance_rate``,
    ``acceptance_alpha``). Methods named in ``self_drafts`` draft with the target itself:
    a sanity bound, not the method of any article figure."""
    prof = profile_setting(row["profile"])
    name = row["method"]
    if prof is None:
        method = None if name == "baseline" else name
        return CellSetting(row["profile"], None, None, method, None, None)
    method = prof.methods.get(name, name)
    if method is None:
        return CellSetting(row["profile"], prof.model, prof.hardware, None, None, None)
    if name in self_drafts:
        method = f"{method} with the target as its own draft"
    alpha = row.get("acceptance_alpha")
    if not _missing(alpha):
        origin, acc = SET, float(alpha)
    else:
        rate = row.get("acceptance_rate")
        acc = None if _missing(rate) else float(rate)
        origin = RANDOM_WEIGHTS if prof.random_weights else REACHED
    return CellSetting(row["profile"], prof.model, prof.hardware, method, acc, origin)


def acceptance_origins(rows) -> list[str | None]:
    """:attr:`CellSetting.acceptance_origin` of each row of a summary frame, in order."""
    return [cell_setting(r).acceptance_origin for r in rows.to_dict("records")]


# --------------------------------------------------------------------------- #
# The rule
# --------------------------------------------------------------------------- #
def _dimension(name: str, theirs: str, ours: str | None) -> Difference | None:
    if theirs == ANY:
        return None
    if ours is None:
        return Difference(name, "unknown (profile not in this checkout)", theirs)
    if theirs == UNSTATED:
        return Difference(name, ours, UNSTATED, ", so nothing can be shown to match it")
    return Difference(name, ours, theirs) if ours != theirs else None


def _acceptance(article: ArticleSetting, cell: CellSetting) -> Difference | None:
    theirs = (article.acceptance if isinstance(article.acceptance, str)
              else f"{article.acceptance:.0%}")
    if cell.acceptance_origin == SET:
        return Difference("acceptance", f"set at alpha {cell.acceptance:g}", theirs,
                          "; ours is set by synthetic rejection sampling, not reached")
    if cell.acceptance_origin == RANDOM_WEIGHTS:
        return Difference("acceptance", "from random weights", theirs,
                          "; ours is an artefact of the weights, not reached")
    if cell.acceptance_origin is None:
        return Difference("acceptance", "unknown (profile not in this checkout)", theirs)
    ours = "not recorded" if cell.acceptance is None else f"{cell.acceptance:.0%}"
    if article.acceptance == ANY:
        return None
    if article.acceptance == UNSTATED:
        return Difference("acceptance", ours, UNSTATED, ", so no acceptance can be shown near it")
    if cell.acceptance is None or abs(cell.acceptance - article.acceptance) > ACCEPTANCE_WINDOW:
        return Difference("acceptance", ours, theirs,
                          f"; a match needs ±{ACCEPTANCE_WINDOW * 100:.0f} points")
    return None


def compare(article: ArticleSetting, cell: CellSetting) -> Comparison:
    """Every dimension on which ``cell`` differs from the article's setting (none: comparable)."""
    diffs = [_dimension("model", article.model, cell.model),
             _dimension("hardware", article.hardware, cell.hardware),
             _dimension("method", article.method, cell.method)]
    if cell.method is not None:  # acceptance matters for speculative cells only
        diffs.append(_acceptance(article, cell))
    return Comparison(tuple(d for d in diffs if d is not None))


def compare_rows(article: ArticleSetting, rows, self_drafts=()) -> list[Comparison]:
    """:func:`compare` for every row of a summary DataFrame, in order."""
    return [compare(article, cell_setting(r, self_drafts)) for r in rows.to_dict("records")]


def summarize(comparisons) -> str:
    """What differs over many cells, one clause per dimension (distinct values joined)."""
    by_dim: dict[tuple[str, str, str], list[str]] = {}
    for c in comparisons:
        for d in c.differences:
            values = by_dim.setdefault((d.dimension, d.theirs, d.why), [])
            if d.ours not in values:
                values.append(d.ours)
    order = {d: i for i, d in enumerate(DIMENSIONS)}
    parts = []
    for (dim, theirs, why), values in sorted(by_dim.items(), key=lambda kv: order[kv[0][0]]):
        parts.append(Difference(dim, _joined(values), theirs, why).text())
    return "; ".join(parts)


def _joined(values: list[str]) -> str:
    """Distinct values, as a range when they are more than two percentages."""
    pct = [float(v[:-1]) for v in values if re.fullmatch(r"\d+(\.\d+)?%", v)]
    if len(pct) == len(values) > 2:
        return f"{min(pct):g}%–{max(pct):g}%"
    return ", ".join(values)
