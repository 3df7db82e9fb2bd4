"""The claims of the article (C1..C36), checked against the real vLLM and measured rows.

- :mod:`~specdec.claims.registry`: what an API check is and how one runs;
  :mod:`~specdec.claims.checks`: the checks themselves (executed against the installed vLLM,
  no weights, no engine) and :func:`run_checks`;
  :mod:`~specdec.claims.checkio`: their results per vLLM version under ``data/claims/``.
- :mod:`~specdec.claims.ledger`: ``data/claims/ledger.yaml``, its schema and loading.
- :mod:`~specdec.claims.derive`: numeric verdicts from rows in the article's setting only
  (:mod:`specdec.comparability`).
- :mod:`~specdec.claims.tables` and :mod:`~specdec.claims.cases`: what the claims,
  conclusions and failure-cases chapters show.

``specdec claims`` runs the checks (:mod:`specdec.cli`). The names below are the ones the
chapters and tests use, re-exported so that ``from specdec import claims; claims.X`` reads
as before.
"""
from .cases import (OOM_PATTERN, config_vocab_size, demo_profile, floor_cells, grid_k_values,
                    k_bounds_sentence, large_k_cells, large_k_checked, oom_failures)
from .checkio import (CHECK_COLUMNS, CLAIMS_DIR, checks_filename, load_checks, recorded_check,
                      write_checks)
from .checks import CHECKS, run_checks
from .derive import (DERIVATIONS, SANITY_ACCEPTANCE, TOLERANCE, acceptance_by_temperature,
                     derive_verdict, failed_sanity_bound, in_experiments, summary)
from .ledger import (JUDGED, KINDS, LEDGER_PATH, OUR_FIGURE, VERDICTS, Claim, LedgerError,
                     compare_with_ledger, load_ledger)
from .registry import OUTCOMES
from .tables import (checks_side_by_side, component_map, judged_summary, ledger_display,
                     ledger_table, setting_table, verdict_counts, verdict_sentence)

__all__ = [
    "OOM_PATTERN", "config_vocab_size", "demo_profile", "floor_cells", "grid_k_values",
    "k_bounds_sentence", "large_k_cells", "large_k_checked", "oom_failures",
    "CHECK_COLUMNS", "CLAIMS_DIR", "checks_filename", "load_checks", "recorded_check",
    "write_checks", "CHECKS", "run_checks",
    "DERIVATIONS", "SANITY_ACCEPTANCE", "TOLERANCE", "acceptance_by_temperature",
    "derive_verdict", "failed_sanity_bound", "in_experiments", "summary",
    "JUDGED", "KINDS", "LEDGER_PATH", "OUR_FIGURE", "VERDICTS", "Claim", "LedgerError",
    "compare_with_ledger", "load_ledger", "OUTCOMES",
    "checks_side_by_side", "component_map", "judged_summary", "ledger_display", "ledger_table",
    "setting_table", "verdict_counts", "verdict_sentence",
]
