"""Instructions and replies as Flower Message content, and back.

Both ends of a real federation use this one codec: the ServerApp's ClientPool adapter
encodes instructions, the ClientApp decodes them, and the reply travels the other way. A
message holds one ConfigRecord (the task's or the metrics' fields in the one wire encoding
of strategies.wire, plus the instruction's round and verb) and at most one ArrayRecord (the
flat float32 vector).

A program (strategies.protocol.Program: a client's steps of one round) travels as one
``query.program`` message with one ConfigRecord for all its steps: step i's fields under
``i.<field>``, and the step count under ``_steps``; a step's flat vector, if any, is the
ArrayRecord ``model.i``. Its reply holds the steps' replies the same way. One record, not
one per step, because Flower moves every record as its own object: each is one more call to
the SuperLink on both ends of both directions, which is most of a round's cost on loopback.
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
from collabfl.strategies.wire import WireValue, decode, encode

MESSAGE_PREFIX = "query."
"""Every verb travels as a Flower query message named ``query.<verb>``."""
PROGRAM_MESSAGE = MESSAGE_PREFIX + "program"
MAX_PROGRAM_STEPS = 16
"""More steps than any method's round has: a longer program is refused as malformed."""

_CONFIG, _METRICS, _MODEL, _ARRAY = "config", "metrics", "model", "weights"
_ROUND, _VERB = "_round", "_verb"
"""The instruction's own keys in its config record (task fields never start with "_")."""
_STEPS = "_steps"
"""A program's step count, in its one config record."""

Step = tuple[dict[str, WireValue], FlatVector | None]
"""One step of a program or of its reply: its fields and its flat vector, if any."""


def message_type(verb: Verb) -> str:
    return MESSAGE_PREFIX + verb.value


def encode_instruction(instruction: Instruction) -> RecordDict:
    return _content(_CONFIG, ConfigRecord(_instruction_fields(instruction)), instruction.model)


def decode_instruction(content: RecordDict) -> Instruction:
    """The instruction a message carries; ValueError if it is malformed in any way."""
    return _instruction(dict(_config(content, _CONFIG, "instruction")), _vector(content))


def encode_reply(reply: Reply) -> RecordDict:
    return _content(_METRICS, ConfigRecord(encode(reply.metrics)), reply.model)


def decode_reply(content: RecordDict) -> Reply:
    """The reply a message carries; ValueError if it is malformed in any way."""
    return _reply(dict(_config(content, _METRICS, "reply")), _vector(content))


def encode_program(program: Sequence[Instruction]) -> RecordDict:
    return _joined(_CONFIG, [(_instruction_fields(s), s.model) for s in program])


def decode_program(content: RecordDict) -> list[Instruction]:
    """The steps a program message carries; ValueError if any is malformed."""
    return [_instruction(*step) for step in _split(content, _CONFIG, "program")]


def encode_replies(replies: Sequence[Reply]) -> RecordDict:
    return _joined(_METRICS, [(encode(reply.metrics), reply.model) for reply in replies])


def decode_replies(content: RecordDict, steps: int) -> list[Reply]:
    """A program's replies, exactly ``steps`` of them; ValueError otherwise."""
    replies = [_reply(*step) for step in _split(content, _METRICS, "program reply")]
    if len(replies) != steps:
        raise ValueError(f"program reply has {len(replies)} steps, expected {steps}")
    return replies


def _instruction_fields(instruction: Instruction) -> dict[str, WireValue]:
    config = encode(instruction.task)
    config[_ROUND] = instruction.round
    config[_VERB] = instruction.verb.value
    return config


def _instruction(config: dict[str, WireValue], model: FlatVector | None) -> Instruction:
    round_index, verb = config.pop(_ROUND, None), config.pop(_VERB, None)
    if not isinstance(round_index, int) or isinstance(round_index, bool):
        raise ValueError(f"malformed instruction: round {round_index!r}")
    if not isinstance(verb, str) or verb not in TASK_TYPES:
        raise ValueError(f"malformed instruction: unknown verb {verb!r}")
    return Instruction(round_index, decode(TASK_TYPES[Verb(verb)], config), model)


def _reply(metrics: dict[str, WireValue], model: FlatVector | None) -> Reply:
    return Reply(decode(ClientMetrics, metrics), model)


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


def _joined(
    key: str, steps: Sequence[tuple[dict[str, WireValue], FlatVector | None]]
) -> RecordDict:
    """Steps' fields as one record under ``key``, and their vectors as ``model.<step>``."""
    fields: dict[str, WireValue] = {_STEPS: len(steps)}
    content = RecordDict()
    for i, (step, model) in enumerate(steps):
        fields.update({f"{i}.{name}": value for name, value in step.items()})
        if model is not None:
            content[f"{_MODEL}.{i}"] = _array_record(model)
    content[key] = ConfigRecord(fields)
    return content


def _split(content: RecordDict, key: str, what: str) -> list[Step]:
    """``_joined``'s steps back; ValueError for a bad count, strays or unknown steps."""
    fields = dict(_config(content, key, what))
    count = fields.pop(_STEPS, None)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_PROGRAM_STEPS:
        raise ValueError(f"{what} steps must be 1 to {MAX_PROGRAM_STEPS}, not {count!r}")
    steps: list[dict[str, WireValue]] = [{} for _ in range(count)]
    for name, value in fields.items():
        index, _, field = name.partition(".")
        steps[_step_index(index, count, what, name)][field] = value
    models: list[FlatVector | None] = [None] * count
    for name, record in content.items():
        if name == key:
            continue
        base, _, index = name.partition(".")
        if base != _MODEL or not isinstance(record, ArrayRecord):
            raise ValueError(f"{what} has an unexpected record {name!r}")
        models[_step_index(index, count, what, name)] = _array_vector(record)
    return list(zip(steps, models, strict=True))


def _step_index(index: str, count: int, what: str, name: str) -> int:
    """A step number spelled canonically and below ``count``; ValueError otherwise."""
    if not index.isdigit() or index != str(int(index)) or int(index) >= count:
        raise ValueError(f"{what} has an unexpected entry {name!r} (steps 0..{count - 1})")
    return int(index)


def _content(key: str, config: ConfigRecord, model: FlatVector | None) -> RecordDict:
    content = RecordDict({key: config})
    if model is not None:
        content[_MODEL] = _array_record(model)
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
    if record is None:
        raise ValueError("model record has no weights array")
    return _array_vector(record)


def _array_record(model: FlatVector) -> ArrayRecord:
    array = model.detach().to("cpu", torch.float32).contiguous().numpy()
    return ArrayRecord({_ARRAY: Array(array)})


def _array_vector(record: ArrayRecord) -> FlatVector:
    if _ARRAY not in record:
        raise ValueError("model record has no weights array")
    array = record[_ARRAY].numpy()
    if array.dtype != np.float32 or array.ndim != 1:
        raise ValueError(f"model must be a 1-D float32 vector, got {array.dtype} {array.shape}")
    return torch.from_numpy(array.copy())
