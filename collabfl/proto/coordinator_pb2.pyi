from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_STOPPING: _ClassVar[RunStatus]
    RUN_STATUS_STOPPED: _ClassVar[RunStatus]
    RUN_STATUS_FINISHED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]

class EventLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_LEVEL_UNSPECIFIED: _ClassVar[EventLevel]
    EVENT_LEVEL_INFO: _ClassVar[EventLevel]
    EVENT_LEVEL_WARNING: _ClassVar[EventLevel]
    EVENT_LEVEL_ERROR: _ClassVar[EventLevel]
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_STOPPING: RunStatus
RUN_STATUS_STOPPED: RunStatus
RUN_STATUS_FINISHED: RunStatus
RUN_STATUS_FAILED: RunStatus
EVENT_LEVEL_UNSPECIFIED: EventLevel
EVENT_LEVEL_INFO: EventLevel
EVENT_LEVEL_WARNING: EventLevel
EVENT_LEVEL_ERROR: EventLevel

class InviteRequest(_message.Message):
    __slots__ = ("role", "subject", "hosts", "ttl_s", "samples")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    role: str
    subject: str
    hosts: _containers.RepeatedScalarFieldContainer[str]
    ttl_s: float
    samples: int
    def __init__(self, role: _Optional[str] = ..., subject: _Optional[str] = ..., hosts: _Optional[_Iterable[str]] = ..., ttl_s: _Optional[float] = ..., samples: _Optional[int] = ...) -> None: ...

class Invitation(_message.Message):
    __slots__ = ("token", "token_id", "role", "subject", "expires_at", "join_address")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    JOIN_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    token: str
    token_id: str
    role: str
    subject: str
    expires_at: float
    join_address: str
    def __init__(self, token: _Optional[str] = ..., token_id: _Optional[str] = ..., role: _Optional[str] = ..., subject: _Optional[str] = ..., expires_at: _Optional[float] = ..., join_address: _Optional[str] = ...) -> None: ...

class RevokeRequest(_message.Message):
    __slots__ = ("role", "subject")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    role: str
    subject: str
    def __init__(self, role: _Optional[str] = ..., subject: _Optional[str] = ...) -> None: ...

class RegisterSupernodeRequest(_message.Message):
    __slots__ = ("client_id", "public_key")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    client_id: int
    public_key: str
    def __init__(self, client_id: _Optional[int] = ..., public_key: _Optional[str] = ...) -> None: ...

class SupernodeRegistration(_message.Message):
    __slots__ = ("flower_node_id", "replaced_node_id")
    FLOWER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLACED_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    flower_node_id: int
    replaced_node_id: int
    def __init__(self, flower_node_id: _Optional[int] = ..., replaced_node_id: _Optional[int] = ...) -> None: ...

class Enrolment(_message.Message):
    __slots__ = ("role", "subject", "host", "cert_serial", "cert_not_after", "enrolled_at", "revoked_at", "samples")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    CERT_SERIAL_FIELD_NUMBER: _ClassVar[int]
    CERT_NOT_AFTER_FIELD_NUMBER: _ClassVar[int]
    ENROLLED_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    role: str
    subject: str
    host: str
    cert_serial: str
    cert_not_after: float
    enrolled_at: float
    revoked_at: float
    samples: int
    def __init__(self, role: _Optional[str] = ..., subject: _Optional[str] = ..., host: _Optional[str] = ..., cert_serial: _Optional[str] = ..., cert_not_after: _Optional[float] = ..., enrolled_at: _Optional[float] = ..., revoked_at: _Optional[float] = ..., samples: _Optional[int] = ...) -> None: ...

class ListEnrolmentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EnrolmentList(_message.Message):
    __slots__ = ("enrolments",)
    ENROLMENTS_FIELD_NUMBER: _ClassVar[int]
    enrolments: _containers.RepeatedCompositeFieldContainer[Enrolment]
    def __init__(self, enrolments: _Optional[_Iterable[_Union[Enrolment, _Mapping]]] = ...) -> None: ...

class FleetSignal(_message.Message):
    __slots__ = ("run_id", "launch_token", "seen", "timeout_s")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SEEN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    launch_token: str
    seen: int
    timeout_s: float
    def __init__(self, run_id: _Optional[str] = ..., launch_token: _Optional[str] = ..., seen: _Optional[int] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class FleetActivity(_message.Message):
    __slots__ = ("replies",)
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: int
    def __init__(self, replies: _Optional[int] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("client_id", "flower_node_id", "peer_address", "num_samples", "registered_at", "updated_at")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    FLOWER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    client_id: int
    flower_node_id: int
    peer_address: str
    num_samples: int
    registered_at: float
    updated_at: float
    def __init__(self, client_id: _Optional[int] = ..., flower_node_id: _Optional[int] = ..., peer_address: _Optional[str] = ..., num_samples: _Optional[int] = ..., registered_at: _Optional[float] = ..., updated_at: _Optional[float] = ...) -> None: ...

class RegisterMembersRequest(_message.Message):
    __slots__ = ("members", "run_id", "launch_token")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    run_id: str
    launch_token: str
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., run_id: _Optional[str] = ..., launch_token: _Optional[str] = ...) -> None: ...

class ListMembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MemberList(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "method", "config_json", "status", "last_completed_round", "created_at", "updated_at", "message")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPLETED_ROUND_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    method: str
    config_json: str
    status: RunStatus
    last_completed_round: int
    created_at: float
    updated_at: float
    message: str
    def __init__(self, run_id: _Optional[str] = ..., method: _Optional[str] = ..., config_json: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., last_completed_round: _Optional[int] = ..., created_at: _Optional[float] = ..., updated_at: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class CreateRunRequest(_message.Message):
    __slots__ = ("run_id", "method", "config_json", "overwrite", "out_claimed")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    OUT_CLAIMED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    method: str
    config_json: str
    overwrite: bool
    out_claimed: bool
    def __init__(self, run_id: _Optional[str] = ..., method: _Optional[str] = ..., config_json: _Optional[str] = ..., overwrite: _Optional[bool] = ..., out_claimed: _Optional[bool] = ...) -> None: ...

class RunMessage(_message.Message):
    __slots__ = ("run_id", "message", "launch_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    message: str
    launch_token: str
    def __init__(self, run_id: _Optional[str] = ..., message: _Optional[str] = ..., launch_token: _Optional[str] = ...) -> None: ...

class RunRef(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RunList(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class FinishRunRequest(_message.Message):
    __slots__ = ("run_id", "status", "message", "launch_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    status: RunStatus
    message: str
    launch_token: str
    def __init__(self, run_id: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., message: _Optional[str] = ..., launch_token: _Optional[str] = ...) -> None: ...

class Edge(_message.Message):
    __slots__ = ("i", "j", "weight")
    I_FIELD_NUMBER: _ClassVar[int]
    J_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    i: int
    j: int
    weight: float
    def __init__(self, i: _Optional[int] = ..., j: _Optional[int] = ..., weight: _Optional[float] = ...) -> None: ...

class Coalition(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, members: _Optional[_Iterable[int]] = ...) -> None: ...

class RoundRecord(_message.Message):
    __slots__ = ("run_id", "round", "num_clients", "edges", "metrics_json", "recorded_at", "has_coalitions", "coalitions", "launch_token")
    class MetricsJsonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    NUM_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    METRICS_JSON_FIELD_NUMBER: _ClassVar[int]
    RECORDED_AT_FIELD_NUMBER: _ClassVar[int]
    HAS_COALITIONS_FIELD_NUMBER: _ClassVar[int]
    COALITIONS_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    num_clients: int
    edges: _containers.RepeatedCompositeFieldContainer[Edge]
    metrics_json: _containers.ScalarMap[int, str]
    recorded_at: float
    has_coalitions: bool
    coalitions: _containers.RepeatedCompositeFieldContainer[Coalition]
    launch_token: str
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., num_clients: _Optional[int] = ..., edges: _Optional[_Iterable[_Union[Edge, _Mapping]]] = ..., metrics_json: _Optional[_Mapping[int, str]] = ..., recorded_at: _Optional[float] = ..., has_coalitions: _Optional[bool] = ..., coalitions: _Optional[_Iterable[_Union[Coalition, _Mapping]]] = ..., launch_token: _Optional[str] = ...) -> None: ...

class RoundRef(_message.Message):
    __slots__ = ("run_id", "round")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("event_id", "run_id", "round", "level", "kind", "client_id", "message", "time", "launch_token")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    run_id: str
    round: int
    level: EventLevel
    kind: str
    client_id: int
    message: str
    time: float
    launch_token: str
    def __init__(self, event_id: _Optional[int] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., level: _Optional[_Union[EventLevel, str]] = ..., kind: _Optional[str] = ..., client_id: _Optional[int] = ..., message: _Optional[str] = ..., time: _Optional[float] = ..., launch_token: _Optional[str] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("run_id", "after_id", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_id: int
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., after_id: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class EventList(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...

class IssueGrantsRequest(_message.Message):
    __slots__ = ("run_id", "round", "ttl_s", "launch_token", "fetches")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FETCHES_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    ttl_s: float
    launch_token: str
    fetches: _containers.RepeatedCompositeFieldContainer[Fetch]
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., ttl_s: _Optional[float] = ..., launch_token: _Optional[str] = ..., fetches: _Optional[_Iterable[_Union[Fetch, _Mapping]]] = ...) -> None: ...

class Fetch(_message.Message):
    __slots__ = ("fetcher", "owners")
    FETCHER_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    fetcher: int
    owners: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, fetcher: _Optional[int] = ..., owners: _Optional[_Iterable[int]] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("owner", "token")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    owner: int
    token: bytes
    def __init__(self, owner: _Optional[int] = ..., token: _Optional[bytes] = ...) -> None: ...

class FetcherGrants(_message.Message):
    __slots__ = ("fetcher", "grants")
    FETCHER_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    fetcher: int
    grants: _containers.RepeatedCompositeFieldContainer[Grant]
    def __init__(self, fetcher: _Optional[int] = ..., grants: _Optional[_Iterable[_Union[Grant, _Mapping]]] = ...) -> None: ...

class RoundGrants(_message.Message):
    __slots__ = ("fetches",)
    FETCHES_FIELD_NUMBER: _ClassVar[int]
    fetches: _containers.RepeatedCompositeFieldContainer[FetcherGrants]
    def __init__(self, fetches: _Optional[_Iterable[_Union[FetcherGrants, _Mapping]]] = ...) -> None: ...

class RoundGraph(_message.Message):
    __slots__ = ("round", "num_clients", "edges")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    NUM_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    round: int
    num_clients: int
    edges: _containers.RepeatedCompositeFieldContainer[Edge]
    def __init__(self, round: _Optional[int] = ..., num_clients: _Optional[int] = ..., edges: _Optional[_Iterable[_Union[Edge, _Mapping]]] = ...) -> None: ...

class GraphHistory(_message.Message):
    __slots__ = ("run_id", "rounds")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    rounds: _containers.RepeatedCompositeFieldContainer[RoundGraph]
    def __init__(self, run_id: _Optional[str] = ..., rounds: _Optional[_Iterable[_Union[RoundGraph, _Mapping]]] = ...) -> None: ...

class RoundMetrics(_message.Message):
    __slots__ = ("round", "metrics_json")
    class MetricsJsonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    ROUND_FIELD_NUMBER: _ClassVar[int]
    METRICS_JSON_FIELD_NUMBER: _ClassVar[int]
    round: int
    metrics_json: _containers.ScalarMap[int, str]
    def __init__(self, round: _Optional[int] = ..., metrics_json: _Optional[_Mapping[int, str]] = ...) -> None: ...

class MetricsHistory(_message.Message):
    __slots__ = ("run_id", "rounds")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    rounds: _containers.RepeatedCompositeFieldContainer[RoundMetrics]
    def __init__(self, run_id: _Optional[str] = ..., rounds: _Optional[_Iterable[_Union[RoundMetrics, _Mapping]]] = ...) -> None: ...

class CoalitionsRequest(_message.Message):
    __slots__ = ("run_id", "round")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class RoundCoalitions(_message.Message):
    __slots__ = ("round", "coalitions")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    COALITIONS_FIELD_NUMBER: _ClassVar[int]
    round: int
    coalitions: _containers.RepeatedCompositeFieldContainer[Coalition]
    def __init__(self, round: _Optional[int] = ..., coalitions: _Optional[_Iterable[_Union[Coalition, _Mapping]]] = ...) -> None: ...

class CoalitionHistory(_message.Message):
    __slots__ = ("run_id", "rounds")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    rounds: _containers.RepeatedCompositeFieldContainer[RoundCoalitions]
    def __init__(self, run_id: _Optional[str] = ..., rounds: _Optional[_Iterable[_Union[RoundCoalitions, _Mapping]]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("uptime_s", "db_path", "num_members", "num_runs", "active_runs", "members", "supernodes_error", "unbound_nodes")
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    DB_PATH_FIELD_NUMBER: _ClassVar[int]
    NUM_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    SUPERNODES_ERROR_FIELD_NUMBER: _ClassVar[int]
    UNBOUND_NODES_FIELD_NUMBER: _ClassVar[int]
    uptime_s: float
    db_path: str
    num_members: int
    num_runs: int
    active_runs: _containers.RepeatedCompositeFieldContainer[Run]
    members: _containers.RepeatedCompositeFieldContainer[MemberStatus]
    supernodes_error: str
    unbound_nodes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, uptime_s: _Optional[float] = ..., db_path: _Optional[str] = ..., num_members: _Optional[int] = ..., num_runs: _Optional[int] = ..., active_runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., members: _Optional[_Iterable[_Union[MemberStatus, _Mapping]]] = ..., supernodes_error: _Optional[str] = ..., unbound_nodes: _Optional[_Iterable[int]] = ...) -> None: ...

class MemberStatus(_message.Message):
    __slots__ = ("client_id", "host", "presence", "last_seen", "supernode_registered", "cert_not_after", "revoked", "flower_node_id", "peer_address")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    SUPERNODE_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    CERT_NOT_AFTER_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    FLOWER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    client_id: int
    host: str
    presence: str
    last_seen: float
    supernode_registered: bool
    cert_not_after: float
    revoked: bool
    flower_node_id: int
    peer_address: str
    def __init__(self, client_id: _Optional[int] = ..., host: _Optional[str] = ..., presence: _Optional[str] = ..., last_seen: _Optional[float] = ..., supernode_registered: _Optional[bool] = ..., cert_not_after: _Optional[float] = ..., revoked: _Optional[bool] = ..., flower_node_id: _Optional[int] = ..., peer_address: _Optional[str] = ...) -> None: ...

class RunFile(_message.Message):
    __slots__ = ("path", "size")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class RunResults(_message.Message):
    __slots__ = ("run_id", "results_md", "files", "truncated")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_MD_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    results_md: str
    files: _containers.RepeatedCompositeFieldContainer[RunFile]
    truncated: bool
    def __init__(self, run_id: _Optional[str] = ..., results_md: _Optional[str] = ..., files: _Optional[_Iterable[_Union[RunFile, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class RunFileRequest(_message.Message):
    __slots__ = ("run_id", "path", "offset")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    path: str
    offset: int
    def __init__(self, run_id: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class RunFileChunk(_message.Message):
    __slots__ = ("data", "size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    size: int
    def __init__(self, data: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...
