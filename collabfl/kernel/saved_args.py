"""A daemon's flags, kept in its state directory so that a restart takes ``--state-dir``
alone.

A daemon started with flags saves them (paths made absolute, so the next start may come
from any folder); started with ``--state-dir`` and nothing else but ``--log-level``, it
reads them back. Flags given again replace the saved set as a whole: what runs is always
exactly one command line, the one given or the one saved.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from collabfl.kernel.atomic import write_text

FILE_NAME = "daemon-args.json"
_NOT_SAVED = frozenset({"help", "version", "state_dir", "log_level"})


def with_saved(argv: Sequence[str]) -> list[str]:
    """``argv``, preceded by the saved flags when it gives nothing but the state dir."""
    argv = list(argv)
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--state-dir", type=Path)
    probe.add_argument("--log-level")
    known, rest = probe.parse_known_args(argv)
    state_dir = known.state_dir
    if rest or state_dir is None or not (state_dir / FILE_NAME).exists():
        return argv
    saved = json.loads((state_dir / FILE_NAME).read_text())
    if not isinstance(saved, list) or not all(isinstance(a, str) for a in saved):
        raise ValueError(f"{state_dir / FILE_NAME} is not a list of flags: delete it")
    return [*saved, *argv]


def save(parser: argparse.ArgumentParser, args: argparse.Namespace, state_dir: Path) -> None:
    """Keep the flags ``args`` holds (those not at their default) in ``state_dir``."""
    state_dir.mkdir(parents=True, exist_ok=True)
    write_text(state_dir / FILE_NAME, json.dumps(as_flags(parser, args), indent=1))


def as_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The command line that gives ``args`` (defaults left out, paths absolute)."""
    flags: list[str] = []
    for action in parser._actions:  # argparse's documented-by-use list of its arguments
        if not action.option_strings or action.dest in _NOT_SAVED:
            continue
        value = getattr(args, action.dest, None)
        if value == action.default or value is None:
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            flags.append(flag)
            continue
        for item in value if isinstance(action, argparse._AppendAction) else [value]:
            flags += [flag, str(item.resolve() if isinstance(item, Path) else item)]
    return flags
