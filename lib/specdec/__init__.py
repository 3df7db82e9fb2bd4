"""specdec: speculative decoding in vLLM, measured.

The package is flat on purpose (every notebook says ``from specdec import book, surface``, and
a reader rerunning an old notebook keeps working); the architecture lives in :data:`LAYERS`,
the map below, which ``tests/test_architecture.py`` holds to: every module is in exactly one
layer, and no import circle exists.

Rows flow left to right::

    profiles ──> runner ──> worker (one engine) ──> store (Parquet rows, provenance)
                   │                                   │
             validate (refuses bad input           metrics / surface / theory ──> plots
             before any engine starts)                 │
                                                   claims (ledger, verdicts) ──> book (chapters)
"""
from __future__ import annotations

#: What each module is for, by layer (``tests/test_architecture.py`` checks the map is complete).
LAYERS: dict[str, dict[str, str]] = {
    "foundation": {
        "paths": "where the repository's data, results and book live",
        "schema": "the strict pydantic base shared by profiles and the claims ledger",
        "provenance": "versions, device, driver, commit and dirtiness stamped on every row",
        "stats": "medians, bootstrap intervals, stability of repeated measurements",
        "envspec": "what this machine has (CPU, GPU, packages) for `specdec env`",
        "lockfile": "reading the bundle's pinned requirements with hashes",
    },
    "configuration": {
        "profiles": "a campaign: hardware, engine, target, drafts, methods, workloads, experiments",
        "model_configs": "architecture facts (config.json) of the targets and drafts",
        "comparability": "when two settings compare, so that a numeric verdict may be given",
    },
    "measuring": {
        "validate": "the pre-flight: refuse a bad profile before any engine starts",
        "models": "resolving a profile's model sources to what vLLM loads",
        "workloads": "prompts from packaged datasets, and synthetic token workloads",
        "runner": "cells of an experiment, grouped by engine, run within a budget",
        "worker": "one engine in its own process: warm-up, timed repeats, counters",
        "store": "raw rows as Parquet, schema and provenance checked on read",
        "merge": "rows returned from another machine, checked, added atomically",
        "bundle": "the offline bundle for an air-gapped GPU host (pack, verify, unpack)",
        "carry": "what each device call carries to a lease, under the call's size limit",
        "wheels": "what the bundle ships: the host's image, the lock, the wheels and trims",
        "peer": "vLLM's own `bench latency`, run from the same profile, stored beside the rows",
        "training": "heads and draft models trained here for real acceptance (issue 10)",
    },
    "analysing": {
        "metrics": "rows to cell summaries: throughput, speedup with intervals, acceptance",
        "theory": "the analytical model of speculative decoding, fitted to measured costs",
        "surface": "the set-acceptance speedup surface: break-even, best K, dynamic K",
        "protocol": "measuring protocol 2: step-cost speedups, the control panel, the controls",
        "adaptive": "the article's adaptive K (C17) simulated against fixed K from measured costs",
        "acceptance": "the acceptance reached by the study's trained heads and drafts, per method",
        "findings": "sentences derived from the rows, so that they change when the rows do",
        "plots": "the study's figures (seaborn)",
        "plots_surface": "figures of the speedup surface",
        "plots_trained": "figures of the acceptance reached by trained heads and drafts",
        "leases": "device time per GPU lease and what was measured where, from the rows",
        "devicetime": "what a rerun on another GPU would cost",
    },
    "claims": {
        "claims": "the article's claims: ledger, API checks, derived verdicts, failure cases",
    },
    "book": {
        "book": "chapter data, glue and the Jupyter Book build",
        "chapters": "what the chapters compute beyond the rows (tables, sentences)",
        "bookcache": "skipping chapters whose inputs did not change",
        "regenerate": "the scheduled regeneration: measure what is missing, rebuild, report",
        "cli": "the one `specdec` command line",
    },
}
