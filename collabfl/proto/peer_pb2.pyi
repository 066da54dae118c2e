from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FetchRequest(_message.Message):
    __slots__ = ("owner", "round", "grant", "run", "launch")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    owner: int
    round: int
    grant: bytes
    run: str
    launch: str
    def __init__(self, owner: _Optional[int] = ..., round: _Optional[int] = ..., grant: _Optional[bytes] = ..., run: _Optional[str] = ..., launch: _Optional[str] = ...) -> None: ...

class TensorInfo(_message.Message):
    __slots__ = ("name", "shape", "dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...

class Manifest(_message.Message):
    __slots__ = ("owner", "round", "tensors", "byte_size", "num_samples", "weights_blake3")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_BLAKE3_FIELD_NUMBER: _ClassVar[int]
    owner: int
    round: int
    tensors: _containers.RepeatedCompositeFieldContainer[TensorInfo]
    byte_size: int
    num_samples: int
    weights_blake3: str
    def __init__(self, owner: _Optional[int] = ..., round: _Optional[int] = ..., tensors: _Optional[_Iterable[_Union[TensorInfo, _Mapping]]] = ..., byte_size: _Optional[int] = ..., num_samples: _Optional[int] = ..., weights_blake3: _Optional[str] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("data", "offset", "manifest")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    manifest: Manifest
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., manifest: _Optional[_Union[Manifest, _Mapping]] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: str
    def __init__(self, run: _Optional[str] = ...) -> None: ...

class HealthReply(_message.Message):
    __slots__ = ("owner", "latest_round", "status")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    LATEST_ROUND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    owner: int
    latest_round: int
    status: str
    def __init__(self, owner: _Optional[int] = ..., latest_round: _Optional[int] = ..., status: _Optional[str] = ...) -> None: ...
