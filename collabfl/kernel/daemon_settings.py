"""A daemon's settings: one strict, frozen model built once from its flags, kept in its state
directory so that a restart takes ``--state-dir`` alone.

Each daemon subclasses ``DaemonSettings`` with one field per flag (the flag's argparse
``dest``). ``load`` parses the command line and builds the model; given nothing but
``--state-dir`` (and ``--log-level``), it reads the settings an earlier start saved instead.
Flags given again replace the saved set as a whole: what runs is always exactly one set of
settings, the one given or the one saved. ``save`` writes them with ``model_dump_json``
(paths made absolute, so the next start may come from any folder; defaults left out, so a
restart gets the defaults of the version that runs) and ``load`` reads them with
``model_validate_json``.

A state dir saved by an older collabfl holds its flags as a JSON list (``LEGACY_FILE``): it is
read with the daemon's own parser, and replaced by the settings file at the next save.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from collabfl.kernel.atomic import write_text

FILE_NAME = "daemon-settings.json"
LEGACY_FILE = "daemon-args.json"
"""Where an older collabfl kept a daemon's flags: a JSON list of command-line arguments."""
_NOT_SAVED = frozenset({"log_level"})

Port = Annotated[int, Field(ge=0, le=65535)]
"""A TCP port flag (0: a free one, where the daemon takes that)."""
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A positive, finite number of seconds."""


class DaemonSettings(BaseModel):
    """What every daemon's settings hold: its state dir and its log level (never saved)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    state_dir: Path
    log_level: str = "INFO"

    @classmethod
    def from_flags(cls, args: argparse.Namespace) -> Self:
        """The settings a parsed command line gives; ValueError, one line naming the flag,
        when a value has the wrong type."""
        values = {name: _immutable(getattr(args, name)) for name in cls.model_fields}
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise ValueError(one_line(error)) from None

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of field ``name``: the one value the parser shows and the model holds."""
        return cls.model_fields[name].default

    def saved(self) -> Path:
        """The settings file of this state dir."""
        return self.state_dir / FILE_NAME


S = TypeVar("S", bound=DaemonSettings)


def _immutable(value: Any) -> Any:
    """argparse's lists (repeatable flags) as the tuples a frozen model holds."""
    return tuple(value) if isinstance(value, list) else value


def one_line(error: ValidationError, source: str = "") -> str:
    """A validation error as one line: each wrong flag, what was wrong and its value."""
    parts = []
    for item in error.errors(include_url=False):
        flag = f"--{str(item['loc'][0]).replace('_', '-')}: " if item["loc"] else ""
        value = repr(item.get("input"))
        value = value if len(value) <= 80 else f"{value[:77]}..."
        parts.append(f"{flag}{item['msg'].lower()}, got {value}")
    return f"{source}{'; '.join(parts)}"


def load(settings: type[S], parser: argparse.ArgumentParser, argv: Sequence[str]) -> S:
    """The settings ``argv`` gives, or, when it gives nothing but the state dir (and the log
    level), those saved there by an earlier start; ValueError, one line naming the file and
    the fix, when the saved ones cannot be read."""
    argv = list(argv)
    args = parser.parse_args(argv)
    saved = read_saved(settings, parser, args.state_dir) if _restart_only(argv) else None
    if saved is None:
        return settings.from_flags(args)
    return saved.model_copy(update={"state_dir": args.state_dir, "log_level": args.log_level})


def _restart_only(argv: list[str]) -> bool:
    """Whether ``argv`` gives no flag but ``--state-dir`` and ``--log-level``."""
    probe = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    probe.add_argument("--state-dir")
    probe.add_argument("--log-level")
    _, rest = probe.parse_known_args(argv)
    return not rest


def read_saved(settings: type[S], parser: argparse.ArgumentParser, state_dir: Path) -> S | None:
    """The settings saved in ``state_dir`` (the settings file, else an older collabfl's
    flags file), or None when it holds neither."""
    path = state_dir / FILE_NAME
    if path.exists():
        try:
            return settings.model_validate_json(path.read_bytes())
        except ValidationError as error:
            raise ValueError(
                f"{one_line(error, f'{path}: ')}; start the daemon with every flag again "
                "(it saves them anew), or move the file away"
            ) from None
    legacy = state_dir / LEGACY_FILE
    if not legacy.exists():
        return None
    flags = json.loads(legacy.read_text())
    if not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags):
        raise ValueError(
            f"{legacy} is not a list of flags: start the daemon with every flag again (it "
            "saves them anew), or move the file away"
        )
    return settings.from_flags(parser.parse_args([*flags, "--state-dir", str(state_dir)]))


def save(settings: DaemonSettings) -> None:
    """Keep ``settings`` in their state dir (owner-only), paths absolute, defaults left out;
    an older collabfl's flags file there is replaced."""
    absolute = settings.model_copy(
        update={name: value.resolve() for name, value in settings if isinstance(value, Path)}
    )
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    text = absolute.model_dump_json(indent=1, exclude=set(_NOT_SAVED), exclude_defaults=True)
    write_text(settings.saved(), text)
    (settings.state_dir / LEGACY_FILE).unlink(missing_ok=True)
