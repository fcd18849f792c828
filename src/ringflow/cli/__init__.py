"""The ``ringflow`` command: one argparse parser, one subcommand per module ``cli/_<name>.py``.

ARCHITECTURE.md "cli" layer; STYLE.md "Errors". Adding a subcommand needs no edit here: create
``src/ringflow/cli/_<name>.py`` with

    def register(subcommands: Subcommands) -> None:
        parser = subcommands.add_parser("<name>", help="...")
        parser.add_argument(...)
        parser.set_defaults(handler=run)       # run(args: argparse.Namespace) -> int

Modules are found by name (every ``_<name>`` module of this package that defines ``register``),
in alphabetical order. Exit codes: 0 success; 2 bad arguments or bad configuration (argparse's
usage errors, and any ``ClientError`` / ``ConfigurationError`` a handler raises, printed as one
line without a traceback); 1 any other ``RingflowError``. Anything else is a bug and propagates.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Sequence
from typing import TypeAlias

from ringflow.errors import ClientError, ConfigurationError, RingflowError

# The object ``add_subparsers`` returns (generic only in the type stubs, hence the string).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Handler = Callable[[argparse.Namespace], int]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def _subcommand_modules() -> list[str]:
    names = [
        info.name
        for info in pkgutil.iter_modules(__path__)
        if info.name.startswith("_") and not info.name.startswith("__")
    ]
    return sorted(f"{__name__}.{name}" for name in names)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every discovered subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="ringflow",
        description="ringflow: a Dynamo-style, CDC-native wide-column database.",
    )
    subcommands = parser.add_subparsers(dest="command", metavar="<command>")
    for module_name in _subcommand_modules():
        register = getattr(importlib.import_module(module_name), "register", None)
        if callable(register):
            register(subcommands)
    return parser


def _exit_code(error: SystemExit) -> int:
    if error.code is None:
        return EXIT_OK
    return error.code if isinstance(error.code, int) else EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ringflow`` with ``argv`` (default: the process arguments); return the exit code."""
    parser = build_parser()
    try:
        arguments = parser.parse_args(argv)
    except SystemExit as error:  # argparse has printed the usage error or the help
        return _exit_code(error)
    handler: Handler | None = getattr(arguments, "handler", None)
    if handler is None:
        parser.print_usage(sys.stderr)
        print("ringflow: error: a command is required", file=sys.stderr)
        return EXIT_USAGE
    try:
        return handler(arguments)
    except (ClientError, ConfigurationError) as error:
        print(f"ringflow {arguments.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except RingflowError as error:
        print(f"ringflow {arguments.command}: failed: {error}", file=sys.stderr)
        return EXIT_FAILURE


__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "Handler",
    "Subcommands",
    "build_parser",
    "main",
]
