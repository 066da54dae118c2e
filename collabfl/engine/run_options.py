"""How a run on a real federation waits for and talks to its clients.

The options travel twice: in the run request the coordinator service stores
(``expected_clients``) and in the Flower run config the coordinator daemon hands the ServerApp
(``flwr run -c expected-clients=3``; the app's pyproject declares the defaults). Both
spellings derive from one key per field here, and the defaults live only here.

Values are checked when read (types and ranges), so a mistyped option is refused when the
run is created rather than failing every launch of it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

OptionValue = int | float | str


def _option(default: OptionValue, key: str) -> Any:
    """A field with its Flower run-config key (the stored request uses ``_`` for ``-``) and
    the type its values are read as."""
    return field(default=default, metadata={"key": key, "read": type(default)})


@dataclass(frozen=True)
class RunOptions:
    """A run's options on a real federation (the in-process runtime needs none of them)."""

    expected_clients: int = _option(1, "expected-clients")
    """Clients the ServerApp waits for before the first round."""
    join_timeout_s: float = _option(120.0, "join-timeout")
    """How long it waits for them."""
    message_timeout_s: float = _option(600.0, "message-timeout")
    """How long one client may take to answer one instruction."""
    grant_ttl_s: float = _option(600.0, "grant-ttl")
    """Lifetime of the peer-fetch grants the coordinator signs."""
    out_dir: str = _option("", "out-dir")
    """Run directory on the coordinator machine, inside the daemon's runs directory
    (relative: to it; "": a folder named after the run)."""

    def __post_init__(self) -> None:
        if self.expected_clients < 1:
            raise InvalidRunOptions(f"expected_clients must be >= 1, got {self.expected_clients}")
        for name in ("join_timeout_s", "message_timeout_s", "grant_ttl_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InvalidRunOptions(f"{name} must be a positive number of seconds, got {value}")

    def run_dir(self, runs_dir: Path, run_id: str) -> Path:
        """The run's directory, which must lie inside ``runs_dir`` (symbolic links resolved):
        a run request never chooses where on the coordinator machine files are written."""
        root = runs_dir.resolve()
        target = (root / (self.out_dir or run_id)).resolve()
        if not target.is_relative_to(root):
            raise InvalidRunOptions(
                f"out_dir {self.out_dir!r} is outside the coordinator's runs directory {root} "
                "(collabfl-coordinator --runs-dir); give a folder inside it"
            )
        return target

    def to_run_config(self) -> dict[str, OptionValue]:
        """The Flower run-config entries (``flwr run -c key=value``)."""
        values = asdict(self)
        return {f.metadata["key"]: values[f.name] for f in fields(self)}

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> RunOptions:
        """Read the options from a Flower run config; absent keys keep their defaults."""
        return cls._read(run_config, lambda key: key)

    def to_request(self) -> dict[str, OptionValue]:
        """The entries of a stored run request (``expected_clients``, ``out_dir``, ...)."""
        return {_request_key(k): v for k, v in self.to_run_config().items()}

    @classmethod
    def from_request(cls, request: Mapping[str, Any]) -> RunOptions:
        """Read the options from a stored run request; absent keys keep their defaults."""
        return cls._read(request, _request_key)

    @classmethod
    def _read(cls, source: Mapping[str, Any], spell: Callable[[str], str]) -> RunOptions:
        values: dict[str, Any] = {}
        for option in fields(cls):
            key = spell(option.metadata["key"])
            if key in source:
                values[option.name] = _typed(key, source[key], option.metadata["read"])
        return cls(**values)

    @classmethod
    def request_keys(cls) -> set[str]:
        """The keys of a stored run request that hold options."""
        return {_request_key(f.metadata["key"]) for f in fields(cls)}


class InvalidRunOptions(ValueError):
    """An option with the wrong type or out of range; the message names it."""


def _typed(key: str, value: Any, kind: type) -> OptionValue:
    """``value`` as ``kind``; an int passes for a float, nothing else is converted."""
    accepted = (int, float) if kind is float else (kind,)
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise InvalidRunOptions(f"{key} must be {kind.__name__}, got {value!r}")
    return kind(value)


def _request_key(key: str) -> str:
    return key.replace("-", "_")


def flower_app_config() -> str:
    """The defaults as TOML lines for the ``[tool.flwr.app.config]`` table of the app."""
    defaults = RunOptions().to_run_config()
    return "\n".join(f"{key} = {json.dumps(value)}" for key, value in defaults.items())
