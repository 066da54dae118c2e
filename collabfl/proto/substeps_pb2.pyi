from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionRef(_message.Message):
    __slots__ = ("run_id", "launch_token", "session")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    launch_token: str
    session: str
    def __init__(self, run_id: _Optional[str] = ..., launch_token: _Optional[str] = ..., session: _Optional[str] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("ref", "tokens")
    class TokensEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: bytes
        def __init__(self, key: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...
    REF_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    ref: SessionRef
    tokens: _containers.ScalarMap[int, bytes]
    def __init__(self, ref: _Optional[_Union[SessionRef, _Mapping]] = ..., tokens: _Optional[_Mapping[int, bytes]] = ...) -> None: ...

class SessionReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RelayRequest(_message.Message):
    __slots__ = ("ref", "work", "awaiting", "timeout_s")
    class WorkEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: bytes
        def __init__(self, key: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...
    class AwaitingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    REF_FIELD_NUMBER: _ClassVar[int]
    WORK_FIELD_NUMBER: _ClassVar[int]
    AWAITING_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    ref: SessionRef
    work: _containers.ScalarMap[int, bytes]
    awaiting: _containers.ScalarMap[int, int]
    timeout_s: float
    def __init__(self, ref: _Optional[_Union[SessionRef, _Mapping]] = ..., work: _Optional[_Mapping[int, bytes]] = ..., awaiting: _Optional[_Mapping[int, int]] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("payload", "error")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    error: str
    def __init__(self, payload: _Optional[bytes] = ..., error: _Optional[str] = ...) -> None: ...

class RelayReply(_message.Message):
    __slots__ = ("steps", "results")
    class StepsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    class ResultsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Result
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Result, _Mapping]] = ...) -> None: ...
    STEPS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.ScalarMap[int, int]
    results: _containers.MessageMap[int, Result]
    def __init__(self, steps: _Optional[_Mapping[int, int]] = ..., results: _Optional[_Mapping[int, Result]] = ...) -> None: ...

class PollRequest(_message.Message):
    __slots__ = ("run_id", "session", "client_id", "token", "answered", "result", "wait_s")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    session: str
    client_id: int
    token: bytes
    answered: int
    result: Result
    wait_s: float
    def __init__(self, run_id: _Optional[str] = ..., session: _Optional[str] = ..., client_id: _Optional[int] = ..., token: _Optional[bytes] = ..., answered: _Optional[int] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., wait_s: _Optional[float] = ...) -> None: ...

class PollReply(_message.Message):
    __slots__ = ("step", "work", "closed", "fed_ago_s")
    STEP_FIELD_NUMBER: _ClassVar[int]
    WORK_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    FED_AGO_S_FIELD_NUMBER: _ClassVar[int]
    step: int
    work: bytes
    closed: bool
    fed_ago_s: float
    def __init__(self, step: _Optional[int] = ..., work: _Optional[bytes] = ..., closed: _Optional[bool] = ..., fed_ago_s: _Optional[float] = ...) -> None: ...
