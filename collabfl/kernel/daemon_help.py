"""What a daemon's ``--help`` shows: a description for its user and every option's default.

The module docstrings of the daemons explain the design to the next engineer; their users
read this instead, so module paths and internals stay out of it.
"""

from __future__ import annotations

import argparse

EXIT_STATUS = "Exit status: 0 done, 2 bad input or usage (nothing ran), 1 a failure while running."


class DaemonHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks and appends ``(default: X)`` to each option that
    has a default its help text does not already state."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default in (None, False, "", [], argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


def daemon_parser(prog: str, description: str, example: str) -> argparse.ArgumentParser:
    """An argument parser for one of collabfl's programs, with an example and the exit codes."""
    return argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=f"example:\n  {example}\n\n{EXIT_STATUS}",
        formatter_class=DaemonHelpFormatter,
    )
