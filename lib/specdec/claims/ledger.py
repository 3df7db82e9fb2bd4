"""The claims ledger (``data/claims/ledger.yaml``): its schema and its loading.

One entry per checkable statement C1..C36 of the article: the article's own words (Chinese,
verbatim) and an English rendering, the kind of claim, the verdict and its evidence. API
claims name the checks they rest on (:mod:`specdec.claims.checks`) and the outcome recorded
for the reference vLLM. Numeric claims name a derivation rule and the article's setting
(:mod:`specdec.claims.derive`); a setting may also stand alone, for the chapters that set our
cells beside an article figure no rule derives (C7-C9). No number of ours is ever written here.

Loading is strict (:class:`Ledger`: pydantic models, frozen, unknown keys refused): a bad
ledger raises :class:`LedgerError` naming the file and the field
(``data/claims/ledger.yaml: claims[1] (C2).verdict: 'plausible' is not one of ...``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (AfterValidator, Field, StringConstraints, ValidationError,
                      field_validator, model_validator)

from .. import comparability, paths
from ..schema import Seq, StrictModel, error_lines
from .checks import CHECKS
from .registry import OUTCOMES

LEDGER_PATH = paths.CLAIMS_DIR / "ledger.yaml"

#: Rows exist, but none in the article's setting (:mod:`specdec.comparability`): our figure
#: is shown in our setting. Not a verdict on the claim: never counted as reproduced or
#: contradicted, and never written into the ledger (derived from rows only).
OUR_FIGURE = "our-figure-in-our-setting"
VERDICTS = ("reproduced", "contradicted", OUR_FIGURE, "api-does-not-exist",
            "exists-differently", "not-testable-here", "pending-measurement")
#: The verdicts that judge a claim: on a numeric claim, from comparable rows only.
JUDGED = ("reproduced", "contradicted")
KINDS = ("api", "numeric", "advice", "mechanism")
#: The derivation rules of :data:`specdec.claims.derive.DERIVATIONS`, by name.
RULES = ("best_k", "speedup_at_k", "speedup_at_batch", "method_speedup",
         "acceptance_vs_temperature")
#: Claim ids, in order.
CLAIM_IDS = tuple(f"C{i}" for i in range(1, 37))

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Rate = Annotated[float, Field(ge=0.0, le=1.0)]
# Literal[a tuple] is Literal[each of its items]: the tuples above stay the one list.
Verdict = Literal[tuple(v for v in VERDICTS if v != OUR_FIGURE)]


def _known_check(check_id: str) -> str:
    if check_id not in {c.id for c in CHECKS}:
        raise ValueError(f"no check named {check_id!r} (specdec.claims.checks)")
    return check_id


class LedgerError(ValueError):
    """The ledger file is malformed; the message names the file, the claim and the field."""


class Setting(StrictModel):
    """The article's setting for a figure (:mod:`specdec.comparability`): ``any`` does not
    restrict a dimension, ``unstated`` is one the article leaves out."""

    model: Text
    hardware: Text
    method: Text
    #: A rate, ``any`` or ``unstated``; default: the article's stated ``acceptance``.
    acceptance: Rate | Literal[comparability.ANY, comparability.UNSTATED] | None = None


class Derive(StrictModel):
    """How a numeric verdict is derived from measured rows."""

    rule: Literal[RULES]
    #: Profiles whose rows are read.
    profiles: Annotated[Seq[Text], Field(min_length=1)]
    #: Experiments (of those profiles) whose cells the rule reads.
    experiments: Annotated[Seq[Text], Field(min_length=1)]
    #: The target drafting for itself: a sanity bound, never the claim's method.
    bound_methods: Seq[Text] = ()
    #: Only methods whose name matches.
    method_regex: str | None = None

    @field_validator("method_regex")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"{v!r} is not a regular expression: {e}") from None
        return v


class Claim(StrictModel):
    id: Annotated[str, StringConstraints(pattern=r"^C[1-9][0-9]*$")]
    section: Text
    kind: Literal[KINDS]
    #: The article's own words, verbatim.
    zh: Text
    en: Text
    #: As of the reference vLLM; ``our-figure-in-our-setting`` is derived, never written.
    verdict: Verdict
    observed: Text
    evidence: Annotated[Seq[Text], Field(min_length=1)]
    #: {check id: outcome recorded for the reference vLLM}.
    checks: dict[Annotated[str, AfterValidator(_known_check)], Literal[OUTCOMES]] = {}
    derive: Derive | None = None
    #: The article's own figures (acceptance, speedup, ...), labelled as the article's.
    article: dict[str, int | float] = {}
    setting: Setting | None = None

    @model_validator(mode="after")
    def _derive_needs_setting(self) -> "Claim":
        # A rule compares with the article's setting: it must be stated.
        if self.derive is not None and self.setting is None:
            raise ValueError("setting: required where derive is given (model, hardware, "
                             "method of the article's figure)")
        acc = self.article.get("acceptance")
        if acc is not None and not 0 <= acc <= 1:
            raise ValueError(f"article.acceptance: {acc!r} is not a rate in [0, 1]")
        return self

    def article_setting(self) -> comparability.ArticleSetting:
        """The setting our cells are compared with; acceptance defaults to the article's."""
        if self.setting is None:
            raise ValueError(f"{self.id}: no setting in the ledger")
        s = self.setting
        acc = s.acceptance if s.acceptance is not None else \
            self.article.get("acceptance", comparability.UNSTATED)
        return comparability.ArticleSetting(s.model, s.hardware, s.method, acc)


class Ledger(StrictModel):
    version: Literal[1]
    #: The vLLM whose check outcomes the ledger records.
    reference_vllm: Text
    claims: Seq[Claim]

    @model_validator(mode="after")
    def _every_claim_in_order(self) -> "Ledger":
        ids = tuple(c.id for c in self.claims)
        if ids != CLAIM_IDS:
            missing = [i for i in CLAIM_IDS if i not in ids]
            raise ValueError(f"claims: ids must be C1..C36 in order, got {', '.join(ids)}"
                             + (f" (missing: {', '.join(missing)})" if missing else ""))
        return self


def _with_claim_id(line: str, data: Any) -> str:
    """``claims[1].verdict: ...`` -> ``claims[1] (C2).verdict: ...``: the id a reader
    searches the file for."""
    m = re.match(r"claims\[(\d+)\]", line)
    if not m or not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        return line
    i = int(m.group(1))
    entry = data["claims"][i] if i < len(data["claims"]) else None
    cid = entry.get("id") if isinstance(entry, dict) else None
    return f"{m.group(0)} ({cid}){line[m.end():]}" if cid else line


def read_ledger(path: Path | None = None) -> Ledger:
    """The whole ledger file, strictly validated."""
    path = Path(path or LEDGER_PATH)
    where = paths.display(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise LedgerError(f"{where}: malformed YAML: {e}") from None
    if not isinstance(data, dict):
        raise LedgerError(f"{where}: top level must be a mapping with version, "
                          f"reference_vllm and claims")
    try:
        return Ledger.model_validate(data)
    except ValidationError as e:
        raise LedgerError("\n".join(f"{where}: {_with_claim_id(line, data)}"
                                    for line in error_lines(e, Ledger))) from None


def load_ledger(path: Path | None = None) -> tuple[Claim, ...]:
    """The ledger's claims C1..C36, strictly validated (:class:`LedgerError` if malformed)."""
    return read_ledger(path).claims


def claim(claim_id: str, path: Path | None = None) -> Claim:
    """One claim by id."""
    for c in load_ledger(path):
        if c.id == claim_id:
            return c
    raise KeyError(f"claims ledger has no claim {claim_id!r}")


def compare_with_ledger(rows: list[dict[str, Any]], path: Path | None = None) -> list[str]:
    """Differences between live check outcomes and the outcomes the ledger records."""
    got = {r["check_id"]: r["outcome"] for r in rows}
    diffs = []
    for c in load_ledger(path):
        for cid, expected in c.checks.items():
            if cid in got and got[cid] != expected:
                diffs.append(f"{c.id} {cid}: ledger says {expected!r}, vLLM now gives "
                             f"{got[cid]!r}")
    return diffs
