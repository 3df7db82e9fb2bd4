"""A numeric verdict compares like with like (specdec.comparability), on every committed row.

The rule is checked in isolation (each dimension can make a cell incomparable), on the committed
campaigns (SmolLM2 on a CPU and the Llama-3-8B shape with set acceptance on an H200 are never
the article's setting), and on the verdicts the book shows: a reproduced or contradicted numeric
claim rests on comparable rows only, or on an API check.
"""
from __future__ import annotations

import pandas as pd
import pytest

from specdec import claims, comparability as cmp, paths
from specdec.claims import derive

ARTICLE = cmp.ArticleSetting(model="llama-3-8b", hardware="1x A100", method="draft_model",
                             acceptance=0.68)
#: A cell in the article's setting: trained Llama-3-8B, one A100, draft model, 70 % reached.
LIKE = cmp.CellSetting("a100-llama3-8b", "llama-3-8b", "1x A100", "draft_model", 0.70,
                       cmp.REACHED)


def _dims(comparison) -> list[str]:
    return [d.dimension for d in comparison.differences]


def test_a_cell_of_the_articles_setting_is_comparable():
    assert cmp.compare(ARTICLE, LIKE).comparable


@pytest.mark.parametrize("change, dimension", [
    ({"model": "smollm2-135m"}, "model"),
    ({"hardware": "CPU"}, "hardware"),
    ({"hardware": "1x H200"}, "hardware"),
    ({"method": "ngram"}, "method"),
    ({"acceptance": 0.46}, "acceptance"),                                 # outside the window
    ({"acceptance": 0.7, "acceptance_origin": cmp.SET}, "acceptance"),     # set, not reached
    ({"acceptance": 0.7, "acceptance_origin": cmp.RANDOM_WEIGHTS}, "acceptance"),
])
def test_each_dimension_alone_makes_a_cell_incomparable(change, dimension):
    import dataclasses

    got = cmp.compare(ARTICLE, dataclasses.replace(LIKE, **change))
    assert not got.comparable and _dims(got) == [dimension], got.reason()


def test_unstated_is_never_matched_and_any_always_is():
    unstated = cmp.ArticleSetting("llama-3-8b", "1x A100", cmp.UNSTATED, cmp.UNSTATED)
    assert _dims(cmp.compare(unstated, LIKE)) == ["method", "acceptance"]
    general = cmp.ArticleSetting(cmp.ANY, cmp.ANY, "draft_model", cmp.ANY)
    import dataclasses

    cpu = dataclasses.replace(LIKE, model="smollm2-135m", hardware="CPU", acceptance=0.02)
    assert cmp.compare(general, cpu).comparable
    # A general rule still needs acceptance a draft reached, not one set or from random weights.
    assert _dims(cmp.compare(general, dataclasses.replace(cpu, acceptance_origin=cmp.SET))) \
        == ["acceptance"]


def test_profiles_give_their_setting():
    assert cmp.profile_setting("a100-llama3-8b").model == "llama-3-8b"  # instruct = its base
    assert cmp.profile_setting("a100-llama3-8b").hardware == "1x A100"
    assert cmp.profile_setting("cpu-smollm2").hardware == "CPU"
    surface = cmp.profile_setting("h200-surface")
    assert surface.hardware == "1x H200" and surface.random_weights
    assert cmp.profile_setting("no-such-profile") is None


def _committed(profile: str) -> pd.DataFrame:
    summ = claims.summary([profile])
    if summ is None:
        pytest.skip(f"no committed rows for {profile}")
    # speculative cells only: a baseline of any runner (baseline-v1, ...) drafts nothing
    return summ[(summ["method"] != "baseline") & (summ["num_speculative_tokens"] > 0)]


def _claim_settings():
    return [(c.id, c.article_setting()) for c in claims.load_ledger() if c.derive is not None]


def test_h200_surface_rows_are_never_the_articles_setting():
    """Llama-3-8B shape with random weights and set acceptance on an H200: for every claim,
    the acceptance is set (or from random weights), not reached; on A100 claims the hardware
    differs too."""
    rows = _committed("h200-surface-v2")
    assert len(rows)
    for cid, setting in _claim_settings():
        for r, comp in zip(rows.to_dict("records"), cmp.compare_rows(setting, rows)):
            assert not comp.comparable, (cid, r["cell_id"])
            acc = next(d for d in comp.differences if d.dimension == "acceptance")
            assert ("set at alpha" in acc.ours if pd.notna(r["acceptance_alpha"])
                    else acc.ours == "from random weights"), (cid, r["cell_id"], acc)
            if setting.hardware == "1x A100":
                assert "hardware" in _dims(comp) and "1x H200" in comp.reason()


def test_cpu_rows_are_never_the_articles_setting_for_a100_claims():
    rows = _committed("cpu-smollm2")
    for cid, setting in _claim_settings():
        if setting.hardware != "1x A100":
            continue
        for comp in cmp.compare_rows(setting, rows):
            assert {"model", "hardware"} <= set(_dims(comp)), cid


def _check_verdicts(table, ledger) -> None:
    """Every judged numeric verdict rests on comparable cells, or on an API refutation."""
    by_id = {c.id: c for c in ledger}
    for row in table.itertuples():
        claim = by_id[row.id]
        if row.verdict not in claims.JUDGED or claim.kind != "numeric":
            continue
        d = claims.derive_verdict(claim)
        if d["basis"] == "ledger":
            assert any(o == "rejected" for o in claim.checks.values()), row.id
            continue
        assert d["basis"] == "rows" and d["cells"], (row.id, d)
        setting = claim.article_setting()
        summ = claims.summary(list(claim.derive.profiles))
        used = summ[summ["cell_id"].isin(d["cells"])]
        for r, comp in zip(used.to_dict("records"), cmp.compare_rows(setting, used)):
            assert comp.comparable, (row.id, r["cell_id"], comp.reason())


def test_every_verdict_the_book_shows_rests_on_comparable_rows():
    """Re-derive the ledger table the claims and conclusions chapters show, from data/."""
    ledger = claims.load_ledger()
    table = claims.ledger_table()
    _check_verdicts(table, ledger)
    shown = table.set_index("id")["verdict"]
    for cid in ("C18", "C19", "C20"):  # SmolLM2 on 2 CPU cores is not Llama-3-8B on an A100
        assert shown[cid] not in claims.JUDGED, (cid, shown[cid])


def test_with_every_campaign_offered_a_verdict_still_rests_on_comparable_rows(monkeypatch):
    """Every committed campaign's rows offered to every rule: whatever is judged rests only on
    cells of the article's setting (the H200 surface and the CPU rows are not)."""
    profiles = sorted(p.name for p in paths.RESULTS_DIR.iterdir() if p.is_dir())
    assert {"h200-surface-v2", "cpu-smollm2"} <= set(profiles)
    summ = claims.summary(profiles)
    monkeypatch.setattr(derive, "summary", lambda ps, root=None: summ)  # load once
    experiments = sorted({t for tags in summ["experiment_tags"] for t in tags})
    for c in claims.load_ledger():
        if c.derive is None:
            continue
        widened = c.model_copy(update={
            "verdict": "pending-measurement",
            "derive": c.derive.model_copy(update={"profiles": tuple(profiles),
                                                  "experiments": tuple(experiments)})})
        d = claims.derive_verdict(widened)
        if d["verdict"] not in claims.JUDGED:
            continue
        setting = c.article_setting()
        used = summ[summ["cell_id"].isin(d["cells"])]
        assert len(used) and all(x.comparable for x in cmp.compare_rows(setting, used)), c.id
        assert not used["profile"].isin(["h200-surface", "h200-surface-v2", "cpu-smollm2"]).any() or \
            setting.hardware == cmp.ANY, c.id
