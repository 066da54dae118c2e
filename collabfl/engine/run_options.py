"""How a run on a real federation waits for and talks to its clients.

The options travel twice: in the run request the coordinator service stores
(``expected_clients``) and in the Flower run config the coordinator daemon hands the ServerApp
(``expected-clients = 3``; the app's pyproject declares the defaults). Both spellings derive
from one key per field here, and the defaults live only here.

Values are checked when read (types and ranges, by a strict pydantic model: an int passes
for a float, nothing else is converted), so a mistyped option is refused when the run is
created rather than failing every launch of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

OptionValue = int | float | str


@dataclass(frozen=True)
class _Key:
    """A field's Flower run-config key (the stored request uses ``_`` for ``-``)."""

    name: str


_Seconds = Field(gt=0, allow_inf_nan=False)


class RunOptions(BaseModel):
    """A run's options on a real federation (the in-process runtime needs none of them)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    expected_clients: Annotated[int, Field(ge=1), _Key("expected-clients")] = 1
    """Clients the ServerApp waits for before the first round."""
    join_timeout_s: Annotated[float, _Seconds, _Key("join-timeout")] = 120.0
    """How long it waits for them."""
    message_timeout_s: Annotated[float, _Seconds, _Key("message-timeout")] = 600.0
    """How long one client may take to answer one instruction."""
    grant_ttl_s: Annotated[float, _Seconds, _Key("grant-ttl")] = 600.0
    """Lifetime of the peer-fetch grants the coordinator signs."""
    out_dir: Annotated[str, _Key("out-dir")] = ""
    """Run directory on the coordinator machine, inside the daemon's runs directory
    (relative: to it; "": a folder named after the run)."""

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
        """The Flower run-config entries (what ``flwr run -c key=value`` would set)."""
        values: dict[str, OptionValue] = self.model_dump()
        return {_key(info): values[name] for name, info in type(self).model_fields.items()}

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
        """The options ``source`` holds under their ``spell``-ed keys (other keys are not
        options and are left alone); InvalidRunOptions names each one that is refused."""
        keys = {name: spell(_key(info)) for name, info in cls.model_fields.items()}
        values = {name: source[key] for name, key in keys.items() if key in source}
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise InvalidRunOptions(_describe(error, cls.model_fields, keys)) from None

    @classmethod
    def request_keys(cls) -> set[str]:
        """The keys of a stored run request that hold options."""
        return {_request_key(_key(info)) for info in cls.model_fields.values()}


class InvalidRunOptions(ValueError):
    """An option with the wrong type or out of range; the message names it."""


def _key(info: FieldInfo) -> str:
    return next(m.name for m in info.metadata if isinstance(m, _Key))


def _describe(
    error: ValidationError, fields: Mapping[str, FieldInfo], keys: Mapping[str, str]
) -> str:
    """The refused options, one clause each: a wrong type names the key as the source spells
    it, a value out of range names the field."""
    found = []
    for problem in error.errors():
        name = str(problem["loc"][0]) if problem["loc"] else ""
        given = problem.get("input")
        info = fields.get(name)
        if problem["type"].endswith("_type") and info is not None:
            kind = info.annotation.__name__ if isinstance(info.annotation, type) else "valid"
            found.append(f"{keys.get(name, name)} must be {kind}, got {given!r}")
        elif name == "expected_clients":
            found.append(f"expected_clients must be >= 1, got {given}")
        elif info is not None and info.annotation is float:
            found.append(f"{name} must be a positive number of seconds, got {given}")
        else:
            found.append(f"{name}: {problem['msg']} (got {given!r})")
    return "; ".join(found)


def _request_key(key: str) -> str:
    return key.replace("-", "_")


def flower_app_config() -> str:
    """The defaults as TOML lines for the ``[tool.flwr.app.config]`` table of the app."""
    defaults = RunOptions().to_run_config()
    return "\n".join(f"{key} = {json.dumps(value)}" for key, value in defaults.items())
