"""The ``specdec`` command, the study's one entry point.

    specdec run PROFILE [--dry-run] [...]   measure the pending cells of a profile
    specdec status PROFILE                  done/failed/missing cells per experiment
    specdec validate PROFILE...             load and pre-flight profiles; nothing runs
    specdec claims [--only ID...] [--out DIR]
                                            run the article's API claims against this vLLM
    specdec book [--mode replay|run] [...]  execute the chapters and build the HTML book
    specdec bundle | unpack                 the offline bundle for air-gapped GPU hosts
    specdec merge SRC [--profile P]         check returned rows (and peer runs), add them
    specdec peer list|run|merge PROFILE     vLLM's own `bench latency` on an experiment's cells
    specdec regenerate PROFILE [--dry-run]  rerun only stale cells, report, rebuild changed chapters
    specdec train carry|unpack|status|tiny  trained heads and drafts (issue 10, specdec.training)
    specdec env extra NAME | environment-yml | check | ensure-chromium
                                            the dependency pins and the test machine
    specdec measured-where [--write-readme] the README's "What was measured where", from the rows

``run``/``status``, ``bundle``/``unpack``, ``merge``, ``peer``, ``regenerate``, ``train`` and
``measured-where`` are declared by :mod:`specdec.runner`, :mod:`specdec.bundle`,
:mod:`specdec.merge`, :mod:`specdec.peer`, :mod:`specdec.regenerate`,
:mod:`specdec.training.cli` and :mod:`specdec.leases` (``register``),
which own their options; the others are here.
On a host without the installed script: ``python -m specdec.cli ...``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import (book, bookcache, bundle, carry, devicetime, envspec, leases, merge, paths, peer,
               protocol, regenerate, runner, validate)
from .training import cli as training_cli
from .claims import checkio, checks, ledger
from .profiles import ProfileError

# --------------------------------------------------------------------------- #
# specdec validate
# --------------------------------------------------------------------------- #
def _cmd_validate(args: argparse.Namespace) -> int:
    status = 0
    for name in args.profiles:
        try:
            notes = validate.check(name)
        except ValueError as e:  # ProfileError or ValidationError: both name the field
            print(f"{name}: REJECTED: {e}")
            status = 1
            continue
        print(f"{name}: ok")
        for note in notes:
            print(f"  - {note}")
    return status


# --------------------------------------------------------------------------- #
# specdec claims
# --------------------------------------------------------------------------- #
def _cmd_claims(args: argparse.Namespace) -> int:
    known = [c.id for c in checks.CHECKS]
    unknown = sorted(set(args.only or ()) - set(known))
    if unknown:
        print(f"specdec claims: error: --only: no check named {unknown[0]!r} "
              f"(known: {', '.join(known)})", file=sys.stderr)
        return 2
    rows = checks.run_checks(args.model_configs, args.only)
    # A subset never replaces the committed full record; it is written only where asked.
    out = checkio.write_checks(rows, args.out) if (args.out or not args.only) else None
    width = max(len(r["check_id"]) for r in rows)
    for r in rows:
        msg = f"  {r['exception_type']}: {r['error_summary']}" if r["exception_type"] else ""
        print(f"{r['check_id']:<{width}}  {r['outcome']:<9}{msg}")
    print(f"{len(rows)} checks, vLLM {rows[0]['vllm_package']} {rows[0]['vllm_version']} "
          f"-> {out or 'not stored (a subset: pass --out DIR to store it)'}")
    if not ledger.LEDGER_PATH.is_file():  # a bare GPU host may carry no ledger
        print("(ledger not compared: no data/claims/ledger.yaml here)")
        return 0
    for d in ledger.compare_with_ledger(rows):
        print("DIFFERS FROM LEDGER:", d)
    return 0


# --------------------------------------------------------------------------- #
# specdec book
# --------------------------------------------------------------------------- #
def _cmd_book(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    try:
        if args.no_execute:
            index = book.build(quiet=True)
        elif args.mode == "replay" and not (args.only or args.profiles or args.all):
            # only the chapters whose inputs changed, and the HTML only if anything did
            bookcache.update_book(out=sys.stderr)
            index = paths.BOOK_DIR / "_build" / "html" / "index.html"
        else:
            bookcache.forget(book.execute_all(mode=args.mode, profiles=args.profiles,
                                              only=args.only))
            index = book.build(quiet=True)
    except book.BookError as e:
        print(f"specdec book: error: {e}", file=sys.stderr)
        return 1
    print(f"built the book in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    print(index)
    return 0


# --------------------------------------------------------------------------- #
# specdec env
# --------------------------------------------------------------------------- #
def _cmd_env_extra(args: argparse.Namespace) -> int:
    print(" ".join(envspec.pins(args.extra)))
    return 0


def _cmd_env_environment_yml(args: argparse.Namespace) -> int:
    envspec.ENVIRONMENT_YML.write_text(envspec.environment_yml())
    print(envspec.ENVIRONMENT_YML)
    return 0


def _cmd_env_check(args: argparse.Namespace) -> int:
    if envspec.environment_yml_is_current():
        return 0
    print("specdec env: error: environment.yml differs from pyproject.toml; run "
          "`specdec env environment-yml`", file=sys.stderr)
    return 1


def _cmd_env_ensure_chromium(args: argparse.Namespace) -> int:
    print(envspec.ensure_chromium())
    return 0


# --------------------------------------------------------------------------- #
# The parser
# --------------------------------------------------------------------------- #
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdec", description="Speculative decoding in vLLM, measured: the study's "
                                    "one command.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    runner.register(sub)  # run, status

    v = sub.add_parser("validate", help="load and pre-flight profiles (names or paths); "
                                        "nothing runs")
    v.add_argument("profiles", nargs="+", metavar="PROFILE")
    v.set_defaults(func=_cmd_validate)

    c = sub.add_parser("claims", help="run the article's API claims against the installed "
                                      "vLLM and store the results")
    c.add_argument("--out", type=Path, default=None,
                   help=f"folder for the parquet (default {paths.CLAIMS_DIR})")
    c.add_argument("--model-configs", type=Path, default=None,
                   help=f"config-only models (default {paths.MODEL_CONFIGS_DIR})")
    c.add_argument("--only", nargs="+", default=None, metavar="CHECK_ID",
                   help="run only these checks (stored only with --out)")
    c.set_defaults(func=_cmd_claims)

    b = sub.add_parser(
        "book", help="execute the chapter notebooks with papermill and build the HTML book",
        description="Execute notebooks/ into book/chapters/ with papermill, then build "
                    "book/_build/html with Jupyter Book; prints the path to index.html. In "
                    "replay mode only the chapters whose inputs changed since the last build "
                    "are executed (their notebook, the library, the rows and shared data they "
                    "read: specdec.bookcache), and the HTML is rebuilt only if anything did.")
    b.add_argument("--mode", choices=book.MODES, default="replay",
                   help="replay: read the stored rows in data/ (default); run: measure first")
    b.add_argument("--only", action="append", metavar="NAME",
                   help="execute only this notebook (repeatable); the others keep their "
                        "previous executed copy")
    b.add_argument("--profile", action="append", dest="profiles", metavar="NAME",
                   help="profile(s) every chapter reads (default: each chapter's own)")
    b.add_argument("--all", action="store_true",
                   help="execute every chapter, whether its inputs changed or not")
    b.add_argument("--no-execute", action="store_true",
                   help="only build, from the executed copies already in book/chapters/")
    b.set_defaults(func=_cmd_book)

    bundle.register(sub)  # bundle, unpack
    carry.register(sub)  # carry-plan: what each device call carries to a lease
    merge.register(sub)  # merge: returned rows and peer runs into data/results/
    peer.register(sub)  # peer
    regenerate.register(sub)  # regenerate: stale-only reruns, run reports, cached chapters
    training_cli.register(sub)  # train: carry, unpack, status, tiny (issue 10)
    leases.register(sub)  # measured-where: the README's section, from the rows
    protocol.register(sub)  # panel: the control panel's drift within and between leases
    devicetime.register(sub)  # devicetime: expected device time of a profile, to plan leases

    e = sub.add_parser("env", help="dependency pins (pyproject.toml is their one source) "
                                   "and the test machine's browser")
    env = e.add_subparsers(dest="env_command", metavar="ACTION", required=True)
    x = env.add_parser("extra", help="print the pins of one extra (default: the core)")
    x.add_argument("extra", nargs="?", default=None, metavar="NAME")
    x.set_defaults(func=_cmd_env_extra)
    env.add_parser("environment-yml", help="rewrite environment.yml from pyproject.toml") \
        .set_defaults(func=_cmd_env_environment_yml)
    env.add_parser("check", help="exit 1 if environment.yml has drifted from pyproject.toml") \
        .set_defaults(func=_cmd_env_check)
    env.add_parser("ensure-chromium", help="print Chromium's path; apt-get install it if "
                                           "missing (needs root)") \
        .set_defaults(func=_cmd_env_ensure_chromium)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ProfileError, validate.ValidationError, ledger.LedgerError) as e:
        # Each names the file and the field: the message is the whole story.
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
