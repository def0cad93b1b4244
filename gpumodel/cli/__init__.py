"""The ``gpumodel`` command line: one sub-module per sub-command.

Each module named in :data:`COMMANDS` defines ``register(subparsers)``, which adds its
sub-command and sets ``func`` (``args -> exit code``) on its parser.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

__all__ = ["main", "build_parser", "COMMANDS"]

#: sub-command modules, in the order ``gpumodel --help`` lists them
COMMANDS = ("gpus", "roofline", "memory", "occupancy", "estimate", "calibrate", "serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpumodel",
        description="Analytical GPU performance modeling: specs, rooflines, memory budgets, occupancy.",
    )
    from gpumodel import __version__

    parser.add_argument("--version", action="version", version=f"gpumodel {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 user error, 2 usage error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from gpumodel.specs import SpecError, UnknownNameError

    try:
        return int(args.func(args) or 0)
    except (SpecError, UnknownNameError, ValueError) as exc:
        print(f"gpumodel {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
