"""Instructions and replies as Flower Message content, and back.

Both ends of a real federation use this one codec: the ServerApp's ClientPool adapter
encodes instructions, the ClientApp decodes them, and the reply travels the other way. A
message holds one ConfigRecord (the task's or the metrics' fields in the one wire encoding
of strategies.wire, plus the instruction's round and verb) and at most one ArrayRecord (the
flat float32 vector).

A program (strategies.protocol.Program: a client's steps of one round) travels as one
``query.program`` message: step i's records are those of one instruction, named with the
suffix ``.i``, and its reply holds the steps' replies the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as RecordDictProto
from google.protobuf.message import DecodeError

from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import FlatVector, Instruction, Reply
from collabfl.strategies.verbs import TASK_TYPES, Verb
from collabfl.strategies.wire import decode, encode

MESSAGE_PREFIX = "query."
"""Every verb travels as a Flower query message named ``query.<verb>``."""
PROGRAM_MESSAGE = MESSAGE_PREFIX + "program"
MAX_PROGRAM_STEPS = 16
"""More steps than any method's round has: a longer program is refused as malformed."""

_CONFIG, _METRICS, _MODEL, _ARRAY = "config", "metrics", "model", "weights"
_ROUND, _VERB = "_round", "_verb"
"""The instruction's own keys in its config record (task fields never start with "_")."""


def message_type(verb: Verb) -> str:
    return MESSAGE_PREFIX + verb.value


def encode_instruction(instruction: Instruction) -> RecordDict:
    config = encode(instruction.task)
    config[_ROUND] = instruction.round
    config[_VERB] = instruction.verb.value
    return _content(_CONFIG, ConfigRecord(config), instruction.model)


def decode_instruction(content: RecordDict) -> Instruction:
    """The instruction a message carries; ValueError if it is malformed in any way."""
    config = dict(_config(content, _CONFIG, "instruction"))
    round_index, verb = config.pop(_ROUND, None), config.pop(_VERB, None)
    if not isinstance(round_index, int) or isinstance(round_index, bool):
        raise ValueError(f"malformed instruction: round {round_index!r}")
    if not isinstance(verb, str) or verb not in TASK_TYPES:
        raise ValueError(f"malformed instruction: unknown verb {verb!r}")
    return Instruction(round_index, decode(TASK_TYPES[Verb(verb)], config), _vector(content))


def encode_reply(reply: Reply) -> RecordDict:
    return _content(_METRICS, ConfigRecord(encode(reply.metrics)), reply.model)


def decode_reply(content: RecordDict) -> Reply:
    """The reply a message carries; ValueError if it is malformed in any way."""
    metrics = decode(ClientMetrics, _config(content, _METRICS, "reply"))
    return Reply(metrics, _vector(content))


def encode_program(program: Sequence[Instruction]) -> RecordDict:
    return _joined([encode_instruction(instruction) for instruction in program])


def decode_program(content: RecordDict) -> list[Instruction]:
    """The steps a program message carries; ValueError if any is malformed."""
    return [decode_instruction(step) for step in _split(content, _CONFIG, "program")]


def encode_replies(replies: Sequence[Reply]) -> RecordDict:
    return _joined([encode_reply(reply) for reply in replies])


def decode_replies(content: RecordDict, steps: int) -> list[Reply]:
    """A program's replies, exactly ``steps`` of them; ValueError otherwise."""
    replies = [decode_reply(step) for step in _split(content, _METRICS, "program reply")]
    if len(replies) != steps:
        raise ValueError(f"program reply has {len(replies)} steps, expected {steps}")
    return replies


def content_bytes(content: RecordDict) -> bytes:
    """A message's content as bytes, in Flower's own wire format (the sub-step relay's)."""
    return bytes(recorddict_to_proto(content).SerializeToString())


def content_from_bytes(data: bytes) -> RecordDict:
    """``content_bytes``' content back; ValueError when ``data`` is not one."""
    proto = RecordDictProto()
    try:
        proto.ParseFromString(data)
        return recorddict_from_proto(proto)
    except (DecodeError, ValueError, TypeError) as error:
        raise ValueError(f"unreadable message content: {error}") from None


def _joined(parts: Sequence[RecordDict]) -> RecordDict:
    """Single-step contents as one, each record renamed ``<key>.<step>``."""
    joined = RecordDict()
    for i, part in enumerate(parts):
        for key, record in part.items():
            joined[f"{key}.{i}"] = record
    return joined


def _split(content: RecordDict, key: str, what: str) -> list[RecordDict]:
    """``_joined``'s parts back; ValueError for gaps, strays or too many steps."""
    parts: dict[int, RecordDict] = {}
    for name, record in content.items():
        base, _, index = name.rpartition(".")
        if base not in (key, _MODEL) or not index.isdigit() or index != str(int(index)):
            raise ValueError(f"{what} has an unexpected record {name!r}")
        parts.setdefault(int(index), RecordDict())[base] = record
    if not parts or sorted(parts) != list(range(len(parts))) or len(parts) > MAX_PROGRAM_STEPS:
        raise ValueError(f"{what} steps must be 0..n-1 with 1 <= n <= {MAX_PROGRAM_STEPS}")
    return [parts[i] for i in range(len(parts))]


def _content(key: str, config: ConfigRecord, model: FlatVector | None) -> RecordDict:
    content = RecordDict({key: config})
    if model is not None:
        array = model.detach().to("cpu", torch.float32).contiguous().numpy()
        content[_MODEL] = ArrayRecord({_ARRAY: Array(array)})
    return content


def _config(content: RecordDict, key: str, what: str) -> ConfigRecord:
    record = content.config_records.get(key)
    if record is None:
        raise ValueError(f"{what} carries no {key!r} config record")
    return record


def _vector(content: RecordDict) -> FlatVector | None:
    if _MODEL not in content:
        return None
    record = content.array_records.get(_MODEL)
    if record is None or _ARRAY not in record:
        raise ValueError("model record has no weights array")
    array = record[_ARRAY].numpy()
    if array.dtype != np.float32 or array.ndim != 1:
        raise ValueError(f"model must be a 1-D float32 vector, got {array.dtype} {array.shape}")
    return torch.from_numpy(array.copy())
