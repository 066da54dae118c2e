"""Instructions and replies as Flower Message content, and back.

Both ends of a real federation use this one codec: the ServerApp's ClientPool adapter
encodes instructions, the ClientApp decodes them, and the reply travels the other way. Only
scalars, lists of scalars and at most one float32 weight vector cross the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from collabfl.strategies.protocol import ConfigValue, Instruction, Reply, Verb

MESSAGE_PREFIX = "query."
"""Every verb travels as a Flower query message named ``query.<verb>``."""

_CONFIG, _METRICS, _MODEL, _ARRAY = "config", "metrics", "model", "weights"


def message_type(verb: Verb | str) -> str:
    return MESSAGE_PREFIX + Verb(verb).value


def encode_instruction(instruction: Instruction) -> RecordDict:
    config = dict(instruction.config)
    config["_round"] = instruction.round
    config["_verb"] = Verb(instruction.verb).value
    content = RecordDict({_CONFIG: ConfigRecord(_checked(config))})
    if instruction.model is not None:
        content[_MODEL] = _array_record(instruction.model)
    return content


def decode_instruction(content: RecordDict) -> Instruction:
    if _CONFIG not in content:
        raise ValueError("message carries no instruction config")
    config = dict(content[_CONFIG])
    try:
        round_index = int(config.pop("_round"))
        verb = Verb(config.pop("_verb"))
    except (KeyError, ValueError) as error:
        raise ValueError(f"malformed instruction: {error}") from None
    return Instruction(verb, round_index, config, _vector(content))


def encode_reply(reply: Reply) -> RecordDict:
    content = RecordDict({_METRICS: ConfigRecord(_checked(dict(reply.metrics)))})
    if reply.model is not None:
        content[_MODEL] = _array_record(reply.model)
    return content


def decode_reply(content: RecordDict) -> Reply:
    if _METRICS not in content:
        raise ValueError("reply carries no metrics")
    return Reply(dict(content[_METRICS]), _vector(content))


def _checked(values: Mapping[str, Any]) -> dict[str, ConfigValue]:
    """Drop None (Flower records cannot hold it) and turn numpy scalars into Python ones."""
    out: dict[str, ConfigValue] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, np.generic):
            value = value.item()
        elif isinstance(value, list | tuple):
            value = [v.item() if isinstance(v, np.generic) else v for v in value]
        out[key] = value
    return out


def _array_record(model: Any) -> ArrayRecord:
    array = torch.as_tensor(model).detach().to("cpu", torch.float32).contiguous().numpy()
    return ArrayRecord({_ARRAY: Array(array)})


def _vector(content: RecordDict) -> torch.Tensor | None:
    if _MODEL not in content:
        return None
    record = content[_MODEL]
    if _ARRAY not in record:
        raise ValueError("model record has no weights array")
    array = record[_ARRAY].numpy()
    if array.dtype != np.float32 or array.ndim != 1:
        raise ValueError(f"model must be a 1-D float32 vector, got {array.dtype} {array.shape}")
    return torch.from_numpy(array.copy())
