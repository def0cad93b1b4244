"""The ``gpumodel`` command line: one sub-module per sub-command.

Each module named in :data:`COMMANDS` defines ``register(subparsers)``, which adds its
sub-command and sets ``func`` (``args -> exit code``) on its parser.

Exit codes: 0 done; 2 the input was refused (a usage error, or a
:class:`~gpumodel.base.errors.GpumodelError` from the library: one line ``gpumodel CMD: error: ...`` on
stderr); 1 an internal error (one line naming it; set ``GPUMODEL_DEBUG=1`` for the traceback) or
output cut short by a closed pipe (``gpumodel gpus | head -1`` ends quietly); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import warnings

from gpumodel import __version__
from gpumodel.base.errors import GpumodelError

__all__ = ["main", "build_parser", "COMMANDS"]

#: sub-command modules, in the order ``gpumodel --help`` lists them
COMMANDS = ("gpus", "systems", "roofline", "memory", "occupancy", "estimate", "plan", "serve", "calibrate", "ui")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit code 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


EPILOG = """\
Every command but ui (the web page) takes --json: strict JSON (no NaN; null where a number is undefined) in SI units
(bytes, seconds, FLOP/s, bytes/s); `gpumodel COMMAND --help` lists its keys. Counts take 4096, 1e6,
8Ki or 1T; sizes in bytes 80GiB, 48KiB or 80GB; durations 50ms or 1s.
Exit codes: 0 done; 2 the input was refused (one line on stderr says why); 1 an internal error.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpumodel",
        description="Analytical GPU performance modeling: specs, rooflines, memory budgets, occupancy.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    parser.add_argument("--version", action="version", version=f"gpumodel {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 2 refused input, 1 internal error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    prog = f"gpumodel {args.command}"
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning(prog)
            code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if isinstance(exc, GpumodelError):
            message, code = str(exc), 2
        elif isinstance(exc, OSError):  # a file the user named (--out, --plot) cannot be written or read
            where = f"{exc.filename}: " if exc.filename else ""
            message, code = f"{where}{exc.strerror or exc}", 2
        else:
            if os.environ.get("GPUMODEL_DEBUG"):
                raise
            message = (f"internal error: {type(exc).__name__}: {exc} (a bug in gpumodel; please report it "
                       "with the command line; GPUMODEL_DEBUG=1 shows the traceback)")
            code = 1
        print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)
        return code


def _one_line_warning(prog: str):
    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split())
        if text not in seen:  # a warning raised by several calls of one command is printed once
            seen.add(text)
            print(f"{prog}: warning: {text}", file=file or sys.stderr)

    return show


def _silence_stdout() -> None:
    """After a closed pipe: point stdout at devnull so that the flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout replaced (tests) or already closed
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
