"""The claims and conclusions chapters' tables: the ledger with current verdicts and each
vLLM version's check outcomes, the article's settings, checks side by side, C5's component
map and verdict counts."""
from __future__ import annotations

import json
from pathlib import Path

from .checkio import load_checks
from .checks import C5_ROLES
from .derive import derive_verdict
from .ledger import JUDGED, OUR_FIGURE, VERDICTS, load_ledger


def judged_summary(table) -> str:
    """How many numeric claims our rows could judge, and why the others could not."""
    numeric = table[table["kind"] == "numeric"]
    judged = numeric[(numeric["basis"] == "rows") & numeric["verdict"].isin(JUDGED)]
    ours = int((table["verdict"] == OUR_FIGURE).sum())
    if judged.empty and ours == 0:
        return "no numeric claim could be judged from our rows yet"
    claims = f"{ours} claim{'s' if ours != 1 else ''} show{'s' if ours == 1 else ''}"
    if judged.empty:
        return (f"no numeric claim could be judged from our rows: none is in the article's "
                f"setting ({claims} our figure in our setting only)")
    n = len(judged)
    return (f"{n} numeric claim{'s are' if n != 1 else ' is'} judged from rows in the article's "
            f"setting ({', '.join(judged['id'])}); {claims} our figure in our setting only")


def setting_table(table=None, path: Path | None = None):
    """The article's setting (:mod:`specdec.comparability`) of every claim with a derivation
    rule, with the verdict ``table`` (:func:`ledger_table`) shows for it."""
    import pandas as pd

    rows = []
    for c in load_ledger(path):
        if c.derive is None:
            continue
        s = c.article_setting()
        acc = s.acceptance if isinstance(s.acceptance, str) else f"{s.acceptance:.0%}"
        rows.append({"claim": c.id, "model": s.model, "hardware": s.hardware,
                     "method": s.method, "acceptance": acc})
    out = pd.DataFrame(rows)
    if table is not None and len(out):
        out["verdict"] = out["claim"].map(table.set_index("id")["verdict"])
    return out


def ledger_table(root: Path | None = None, checks=None, path: Path | None = None):
    """The ledger as a DataFrame with current verdicts and each vLLM version's check outcomes."""
    import pandas as pd

    checks = load_checks() if checks is None else checks
    rows = []
    for c in load_ledger(path):
        d = derive_verdict(c, root)
        row = {"id": c.id, "section": c.section, "kind": c.kind,
               "article (zh)": c.zh, "article (en)": c.en,
               "observed": d["observed"].strip(), "verdict": d["verdict"],
               "basis": d["basis"], "evidence": "; ".join(d["evidence"])}
        for (pkg, ver), g in checks.groupby(["vllm_package", "vllm_version"]):
            got = g.set_index("check_id")
            cells = [f"{cid}: {got.loc[cid, 'outcome']}" for cid in c.checks
                     if cid in got.index]
            row[f"checks {pkg} {ver}"] = "; ".join(cells)
        rows.append(row)
    return pd.DataFrame(rows)


def ledger_display(table):
    """The ledger table for a page: HTML-escaped text (the article's code has ``<``, ``>``),
    the Chinese words and their English rendering in one cell, evidence one item per line."""
    import html

    def esc(v) -> str:
        return html.escape(str(v)) if v is not None else ""

    check_cols = [c for c in table.columns if c.startswith("checks ")]
    out = table[["id", "section", "kind"]].rename(columns={"id": "claim"}).copy()
    out["the article says (zh / en)"] = [f"{esc(z)}<br><em>{esc(e)}</em>"
                                         for z, e in zip(table["article (zh)"], table["article (en)"])]
    out["observed"] = table["observed"].map(esc)
    out["verdict"] = table["verdict"].map(lambda v: f"<strong>{esc(v)}</strong>")
    out["evidence"] = table["evidence"].map(lambda v: "<br>".join(esc(x) for x in v.split("; ")))
    for c in check_cols:
        out[c] = table[c].map(lambda v: "<br>".join(esc(x) for x in v.split("; ")) if v else "–")
    return out


def checks_side_by_side(checks=None):
    """Every check's outcome (and error summary) per vLLM version, one row per check."""
    import pandas as pd

    checks = load_checks() if checks is None else checks
    if checks.empty:
        return pd.DataFrame(columns=["check", "claims", "call", "real API"])
    checks = checks.assign(version=checks["vllm_package"] + " " + checks["vllm_version"])
    first = checks.drop_duplicates("check_id").set_index("check_id")
    out = pd.DataFrame({"claims": first["claim_ids"].apply(lambda c: " ".join(c)),
                        "call": first["call"], "real API": first["real_api"]})
    for version, g in checks.groupby("version"):
        g = g.set_index("check_id")
        out[version] = [
            (f"{g.loc[c, 'outcome']}: {g.loc[c, 'exception_type']}: {g.loc[c, 'error_summary']}"
             if isinstance(g.loc[c, "exception_type"], str) else g.loc[c, "outcome"])
            if c in g.index else "not run" for c in out.index]
    return out.rename_axis("check").reset_index()


def component_map(checks=None):
    """C5: the article's three components -> real vLLM classes and source lines, per version."""
    import pandas as pd

    checks = load_checks() if checks is None else checks
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for r in checks[checks["check_id"] == "c5_components"].itertuples():
        version = f"{r.vllm_package} {r.vllm_version}"
        for role, classes in json.loads(r.observed)["classes"].items():
            for cls, src in classes.items():
                rows.setdefault((role, cls), {})[version] = src or "absent"
    order = {role: i for i, role in enumerate(C5_ROLES)}
    return pd.DataFrame([{"article's component": role, "vLLM class": cls, **v}
                         for (role, cls), v in sorted(rows.items(),
                                                      key=lambda kv: order.get(kv[0][0], 99))])


#: What each verdict says of its claims, for :func:`verdict_sentence` (singular, plural).
_VERDICT_WORDS = {
    "api-does-not-exist": ("names an API that does not exist in vLLM",
                           "name an API that does not exist in vLLM"),
    "contradicted": ("is contradicted", "are contradicted"),
    "exists-differently": ("describes something vLLM does differently",
                           "describe something vLLM does differently"),
    "reproduced": ("is reproduced", "are reproduced"),
    OUR_FIGURE: ("has only our figure in our setting", "have only our figure in our setting"),
    "not-testable-here": ("cannot be tested here", "cannot be tested here"),
    "pending-measurement": ("awaits measurements", "await measurements"),
}


def verdict_sentence(table) -> str:
    """"Of the 36 claims, 11 name an API that does not exist in vLLM, ..., 1 is reproduced,
    ... and 2 await measurements": every verdict with its count, in VERDICTS order, the verb
    agreeing with the count."""
    n = table["verdict"].value_counts()
    parts = [f"{int(n.get(v, 0))} {_VERDICT_WORDS[v][int(n.get(v, 0)) != 1]}" for v in VERDICTS]
    return f"Of the {len(table)} claims, " + ", ".join(parts[:-1]) + f" and {parts[-1]}"


def verdict_counts(table):
    """Number of claims per verdict (every verdict listed, zero included), in VERDICTS order."""
    return (table["verdict"].value_counts().reindex(list(VERDICTS), fill_value=0)
            .rename_axis("verdict").reset_index(name="claims"))
