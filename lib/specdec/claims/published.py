"""Acceptance published elsewhere for heads and drafts of the article's model class, cited.

The H200 surface measures what each method costs at any acceptance; which acceptance a trained
head reaches on real text for a Llama-3-8B-class target cannot be measured here (no weights
offline). Where a public source states one, ``data/claims/published_acceptance.yaml`` records
it with the source, and the surface is read at that acceptance: a *measured cost at a stated
acceptance*, never a measurement of the head.

Sources state a mean acceptance length (tokens per target step at some K); the surface is set
by a per-token acceptance α. :func:`specdec.theory.alpha_from_acceptance` converts one into
the other under Leviathan's independent model, an assumption every use must state.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml
from pydantic import Field, ValidationError, model_validator

from .. import paths, theory
from ..schema import Seq, StrictModel, error_lines

PUBLISHED_PATH = paths.CLAIMS_DIR / "published_acceptance.yaml"


class PublishedError(ValueError):
    """The file of published acceptance is malformed; the message names the entry and field."""


class PublishedAcceptance(StrictModel):
    method: str                     # the vLLM method it would run as (eagle3, eagle, medusa, ...)
    checkpoint: str                 # the published head or draft
    target: str                     # the model it drafts for
    dataset: str
    temperature: float = Field(ge=0)
    k: int = Field(ge=1)            # draft tokens per step of the measurement
    mean_acceptance_length: float   # tokens per target step, the bonus token included
    source: str
    url: str = Field(pattern=r"^https?://")

    @model_validator(mode="after")
    def _length_within_k(self):
        if not 1.0 <= self.mean_acceptance_length <= self.k + 1:
            raise ValueError(f"mean_acceptance_length {self.mean_acceptance_length} is not "
                             f"between 1 and K + 1 = {self.k + 1}")
        return self


class _File(StrictModel):
    entries: Seq[PublishedAcceptance]


def load(path: Path | None = None) -> tuple[PublishedAcceptance, ...]:
    """Every published entry, strictly validated (:class:`PublishedError` naming the field)."""
    path = Path(path or PUBLISHED_PATH)
    where = paths.display(path)
    if not path.exists():
        return ()
    try:
        data = yaml.safe_load(path.read_text()) or []
    except yaml.YAMLError as e:
        raise PublishedError(f"{where}: malformed YAML: {e}") from None
    try:
        return _File.model_validate({"entries": data}).entries
    except ValidationError as e:
        raise PublishedError("\n".join(f"{where}: {line}"
                                       for line in error_lines(e, _File))) from None


def table(entries=None) -> pd.DataFrame:
    """One row per entry with the implied α (:func:`specdec.theory.alpha_from_acceptance`)."""
    entries = load() if entries is None else entries
    rows = [{**e.model_dump(), "implied_alpha": float(theory.alpha_from_acceptance(e.mean_acceptance_length, e.k))}
            for e in entries]
    return pd.DataFrame(rows, columns=list(PublishedAcceptance.model_fields) + ["implied_alpha"])
