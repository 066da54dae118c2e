"""A real federation's set-up exchange: the run's settings out, each client's description back.

Before its first instruction a client gets the run's settings (``RunSettings``, which it also
keeps in its state directory, apps/session.py) in a ``query.setup`` message and answers
with who it is (``Description``, in the wire encoding of strategies.wire).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar

from flwr.app import ConfigRecord, RecordDict
from pydantic import ConfigDict, TypeAdapter, ValidationError

from collabfl.client.data.client_file import is_plain_name
from collabfl.flower.codec import MESSAGE_PREFIX
from collabfl.kernel.training_config import TrainingConfig
from collabfl.kernel.user_code import is_import_path
from collabfl.kernel.validation import problems
from collabfl.strategies.wire import decode, encode

SETUP_QUERY = "setup"
"""The ClientApp query that handles the set-up message."""
SETUP_MESSAGE = MESSAGE_PREFIX + SETUP_QUERY

_SETTINGS, _DESCRIPTION = "run_settings", "description"


@dataclass(frozen=True)
class RunSettings:
    """What the coordinator's set-up message tells a client about the run.

    It crosses processes (set-up message, the node's run.json), so reading it is strict: exact
    JSON types, every field, no unknown ones (``training`` follows the user's config rules).
    """

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(strict=True, extra="forbid")

    run_id: str
    seed: int
    model: str
    device: str
    threads: int
    training: TrainingConfig
    val_fraction: float = 0.2
    """The share of a ``data.source`` client's train split held out for validation when
    its factory gives no val split (the config's ``data.val_fraction``)."""
    data_workers: int = 0
    """DataLoader processes reading a ``data.source`` client's Datasets (``data.workers``)."""

    def to_json(self) -> str:
        values = dataclasses.asdict(self)
        values["training"] = self.training.model_dump()
        return json.dumps(values, sort_keys=True)

    def import_paths(self) -> list[str]:
        """The user code the run names (model, loss, optimiser): a participant imports only
        what its operator allowed (apps/client_app.py)."""
        named = (self.model, self.training.loss, self.training.optimizer)
        return [name for name in named if is_import_path(name)]

    @classmethod
    def from_json(cls, text: str) -> RunSettings:
        """The settings in ``text``; ValueError naming each bad field, on one line."""
        try:
            return _SETTINGS_SCHEMA.validate_json(text)
        except ValidationError as error:
            raise ValueError(f"run settings: {'; '.join(problems(error))}") from None


_SETTINGS_SCHEMA = TypeAdapter(RunSettings)


@dataclass(frozen=True)
class Description:
    """What a client tells the coordinator at set-up: identity, sizes, where peers fetch its
    models, what its data file says of its data (dataset, partition), and (for iPFL) the
    market profile it chose to report, if any."""

    client_id: int
    num_samples: int
    num_classes: int
    peer_address: str
    cost: float | None = None
    eagerness: float | None = None
    dataset: str | None = None
    partition: str | None = None

    def __post_init__(self) -> None:
        for name in ("dataset", "partition"):
            value = getattr(self, name)
            if value is not None and not is_plain_name(value):
                raise ValueError(f"{name} must be a short printable one-line name")

    @property
    def market(self) -> dict[str, float]:
        """The reported iPFL profile: ``cost`` and ``eagerness``, where given."""
        values = {"cost": self.cost, "eagerness": self.eagerness}
        return {k: v for k, v in values.items() if v is not None}


def encode_settings(settings: RunSettings) -> RecordDict:
    return RecordDict({_SETTINGS: ConfigRecord({_SETTINGS: settings.to_json()})})


def decode_settings(content: RecordDict) -> RunSettings:
    record = content.config_records.get(_SETTINGS)
    text = None if record is None else record.get(_SETTINGS)
    if not isinstance(text, str):
        raise ValueError("set-up message carries no run settings")
    return RunSettings.from_json(text)


def encode_description(description: Description) -> RecordDict:
    return RecordDict({_DESCRIPTION: ConfigRecord(encode(description))})


def decode_description(content: RecordDict) -> Description:
    """A client's description; ValueError if it is malformed in any way."""
    record = content.config_records.get(_DESCRIPTION)
    if record is None:
        raise ValueError("set-up reply carries no description")
    return decode(Description, record)
