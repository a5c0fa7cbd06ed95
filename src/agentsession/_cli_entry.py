"""The entry point of the ``agentsession`` command and of ``python -m agentsession``.

The command line is built on click and rich, which only the ``cli`` extra installs: a library
user never needs them. When they are missing, the command prints one line naming the extra and
exits with status 1 instead of failing with a traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["CLI_MODULES", "INSTALL_HINT", "main", "missing_cli_modules"]

CLI_MODULES = ("click", "rich")
"""The modules the command line imports that the core does not need (the ``cli`` extra)."""

INSTALL_HINT = "the command line needs: pip install 'agentsession[cli]'"
"""What the command prints (after ``agentsession: ``) when a module of the extra is missing."""


def missing_cli_modules() -> list[str]:
    """The modules of :data:`CLI_MODULES` that cannot be imported, in that order."""
    missing: list[str] = []
    for name in CLI_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line, or print how to install it and exit 1 when click or rich is
    missing. ``argv`` defaults to the process's arguments."""
    missing = missing_cli_modules()
    if missing:
        print(f"agentsession: {INSTALL_HINT} (missing: {', '.join(missing)})", file=sys.stderr)
        raise SystemExit(1)
    from .cli import main as cli_main

    cli_main(argv)
