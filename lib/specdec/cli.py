"""The ``specdec`` command. Subcommands come from the modules that own them.

Each module listed in :data:`PLUGINS` defines ``register(subparsers)``:
runner -> ``run``, ``status``; book -> ``book``; bundle -> ``bundle``, ``unpack``,
``merge``; claims -> ``claims``; training.cli -> ``train``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

PLUGINS = ("runner", "book", "bundle", "claims", "training.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in PLUGINS:
        importlib.import_module(f"specdec.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .profiles import ProfileError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ProfileError as e:
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        # Validation errors (specdec.validate.ValidationError) name the field: show them plainly.
        if type(e).__name__ == "ValidationError":
            print(f"specdec: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
