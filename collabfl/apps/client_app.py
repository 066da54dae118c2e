"""The Flower ClientApp: runs each coordinator instruction on this participant.

Flower starts this in a fresh process per message, or the client daemon's warm executor
runs it for every message in one process (flower/warm_executor.py), where the opened node
stays in memory between messages (apps/session.py's NodeCache). Either way, everything
durable lives elsewhere: the node's state directory, saved after every message, and the
client daemon's peer server, which
serves what this app publishes into ``<state-dir>/published/<run id>``. Peer models are
fetched directly from their owners over gRPC with the grants the coordinator attached; the
coordinator only ever sends indices, sizes, addresses and grants.

Only runs the coordinator launched are served: every message's run config must carry a
``run-ticket`` the coordinator signed for its ``run-id`` (kernel/tickets.py), checked
against the coordinator's public key, and issued after that run last ended (the node config's
``ended-runs`` file, which the client daemon keeps), before the node's data or state is
touched; anything else gets an error reply and a line in the log.

Node config (set by the client daemon on the SuperNode): ``client-id`` (int),
``data-path`` (this participant's data file, or the ``pkg.mod:factory`` import path of its
own loader, client/data/source.py), ``state-dir``, ``peer-address`` (where peers
reach this daemon's peer server), ``coordinator-key`` (PEM of the coordinator's public
key, which signs tickets and grants), and optionally ``device`` (overrides the run's device,
e.g. "cuda:1" on a GPU machine), ``peer-ca`` (PEM of the federation CA), ``peer-cert`` and
``peer-key`` (this member's certificate and key, presented to peers: mutual TLS),
``keep-rounds`` (published rounds kept per run), ``max-peer-weight`` (peer models with a
larger weight magnitude are refused), ``cost`` and ``eagerness`` (the iPFL market profile
this participant reports), ``coordinator-service`` (where this participant reaches the
coordinator's sub-step relay, when not where the ServerApp does), ``allow-import``
(comma-separated ``pkg.mod:attr`` import paths of user code, a model factory, loss or
optimiser, that runs may name).

A run names user code only by import path, and this participant imports only the paths its
own operator listed in ``allow-import``: a set-up naming any other path is refused before
anything is imported or written, so a coordinator can choose among allowed code but never
make a participant run code of its choosing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from collabfl.apps.run_setup import SETUP_QUERY, decode_settings, encode_description
from collabfl.apps.session import NodeCache, NodeState, describe
from collabfl.apps.substeps import SEAT_MESSAGE, decode_seat, encode_served, serve_seat
from collabfl.client.data.opening import DataRef, data_ref
from collabfl.client.model_store import PublishedModels
from collabfl.client.node import ClientNode
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_limits import MAX_PEER_WEIGHT
from collabfl.client.peers import PeerModelSource, PeerUnavailable
from collabfl.coordinator.relay.substep_client import SeatPoller
from collabfl.flower.app_gate import verify_ticket
from collabfl.flower.codec import (
    MESSAGE_PREFIX,
    PROGRAM_MESSAGE,
    decode_instruction,
    decode_program,
    encode_replies,
    encode_reply,
)
from collabfl.kernel.tickets import InvalidTicket
from collabfl.kernel.tls import ClientTLS
from collabfl.kernel.user_code import check_allowed, parse_allowed
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.verbs import (
    Collaborate,
    Discriminate,
    Evaluate,
    Gradient,
    Task,
    Train,
    Verb,
)

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 60.0
HEADER_ALLOWANCE = 1 << 20
"""Bytes allowed beyond the raw weights for the safetensors header."""

app = ClientApp()
nodes = NodeCache()
"""This process's opened node, reused by the next message while its files are unchanged."""


@dataclass(frozen=True)
class NodeSettings:
    """This SuperNode's node config."""

    client_id: int
    data: DataRef
    """The data file, or a ``data.source`` factory's import path."""
    state_dir: Path
    peer_address: str
    device: str
    peer_ca: Path | None
    peer_cert: Path | None
    peer_key: Path | None
    keep_rounds: int
    max_peer_weight: float
    market: dict[str, float]
    """iPFL profile the participant reports: sharing ``cost`` and data ``eagerness``."""
    coordinator_service: str
    """Where this participant reaches the coordinator's relay; empty: where the ServerApp
    does (right when both share a host or network view)."""
    allowed_imports: frozenset[str]
    """Import paths of user code this participant's operator allows runs to name."""

    @classmethod
    def from_context(cls, context: Context) -> NodeSettings:
        config = context.node_config
        required = ("client-id", "data-path", "state-dir", "peer-address")
        missing = [k for k in required if k not in config]
        if missing:
            raise ValueError(f"node config lacks {', '.join(missing)}")

        def path(key: str) -> Path | None:
            value = str(config.get(key, ""))
            return Path(value) if value else None

        return cls(
            client_id=int(config["client-id"]),
            data=data_ref(str(config["data-path"])),
            state_dir=Path(str(config["state-dir"])),
            peer_address=str(config["peer-address"]),
            device=str(config.get("device", "")),
            peer_ca=path("peer-ca"),
            peer_cert=path("peer-cert"),
            peer_key=path("peer-key"),
            keep_rounds=int(config.get("keep-rounds", 3)),
            max_peer_weight=float(config.get("max-peer-weight", MAX_PEER_WEIGHT)),
            market={k: float(config[k]) for k in ("cost", "eagerness") if k in config},
            coordinator_service=str(config.get("coordinator-service", "")),
            allowed_imports=parse_allowed(str(config.get("allow-import", "")).split(",")),
        )


class RunNotAuthorized(Exception):
    """The message belongs to a run the coordinator did not launch (no valid ticket)."""


Handler = Callable[[Message, Context], Message]


def authorize(context: Context) -> str:
    """The collabfl run id of a run whose ticket verifies; RunNotAuthorized otherwise."""
    try:
        return verify_ticket(context.node_config, context.run_config)
    except InvalidTicket as error:
        log.error("refused a message of Flower run %s: %s", context.run_id, error)
        raise RunNotAuthorized(f"run not launched by this coordinator: {error}") from None


def ticketed(handler: Handler) -> Handler:
    """Serve ``handler``'s messages only for runs with a valid coordinator ticket."""

    @functools.wraps(handler)
    def checked(message: Message, context: Context) -> Message:
        authorize(context)
        return handler(message, context)

    return checked


class NoPeers:
    """The peer source of messages that fetch nothing."""

    def fetch(self, owner: int, round_index: int) -> NoReturn:
        raise PeerUnavailable("this instruction carries no peer grants")


@app.query(SETUP_QUERY)
@ticketed
def setup(message: Message, context: Context) -> Message:
    """Join a run: remember its settings and report identity and sample count."""
    node = NodeSettings.from_context(context)
    settings = decode_settings(message.content)
    if settings.run_id != context.run_config.get("run-id"):
        raise RunNotAuthorized(f"set-up names run {settings.run_id!r}, not the ticket's run")
    for path in settings.import_paths():
        check_allowed(path, node.allowed_imports)
    if node.device:
        settings = replace(settings, device=node.device)
    state = NodeState(node.state_dir)
    state.write_settings(settings)
    published = PublishedModels(state.published, node.client_id)
    published.retire_other_runs(settings.run_id)
    published.begin_launch(settings.run_id, str(context.run_id))
    description = describe(
        node.client_id,
        node.data,
        node.peer_address,
        node.market,
        settings.val_fraction,
        node.allowed_imports,
    )
    return Message(encode_description(description), reply_to=message)


def handle(message: Message, context: Context) -> Message:
    """Run one instruction against the node's saved state and save the new state."""
    (reply,) = run_steps([decode_instruction(message.content)], context)
    return Message(encode_reply(reply), reply_to=message)


def handle_program(message: Message, context: Context) -> Message:
    """Run a round's steps in one message (strategies.protocol.Program), in order."""
    replies = run_steps(decode_program(message.content), context)
    return Message(encode_replies(replies), reply_to=message)


def run_steps(steps: Sequence[Instruction], context: Context) -> list[Reply]:
    """Open the node, run ``steps`` in order, save its state once after the last.

    The replay guard sees the steps as one unit: a program replayed after a coordinator
    restart starts again from the state its round began with.
    """
    round_index, names = steps[0].round, [_step_name(step.task) for step in steps]
    if any(step.round != round_index for step in steps):
        raise ValueError("a program's steps must belong to one round")
    settings = NodeSettings.from_context(context)
    replies = []
    with opened_node(settings, round_index, names) as (node, run):
        for step in steps:
            if isinstance(step.task, Collaborate):
                node.fetcher.source = _peer_source(
                    step.task, node.workspace.numel, settings, run, str(context.run_id)
                )
            try:
                replies.append(node.answer(step))
            finally:
                close = getattr(node.fetcher.source, "close", None)
                if close is not None:
                    close()
                node.fetcher.source = NoPeers()
    return replies


@contextmanager
def opened_node(
    settings: NodeSettings, round_index: int, names: Sequence[str]
) -> Iterator[tuple[ClientNode, str]]:
    """This participant's node and run id, for steps ``names`` of ``round_index``; its state
    is saved, and the steps recorded as done, once the block ends without an error."""
    state = NodeState(settings.state_dir)
    state.begin(round_index, names[0])
    run = state.read_settings().run_id
    published = PublishedModels(state.published, settings.client_id, settings.keep_rounds)
    store = published.for_publishing(run)
    node = nodes.open(
        settings.client_id, settings.data, state, store, NoPeers(), settings.allowed_imports
    )
    node.fetcher.max_weight = settings.max_peer_weight
    yield node, run
    state.save(node)
    nodes.keep(node, settings.data, state)
    state.done(round_index, *names)


@app.query(SEAT_MESSAGE.removeprefix(MESSAGE_PREFIX))
@ticketed
def take_seat(message: Message, context: Context) -> Message:
    """Serve a relay session's sub-round steps until it closes (apps/substeps.py)."""
    settings = NodeSettings.from_context(context)
    seat = decode_seat(message.content)
    address = settings.coordinator_service or seat.address
    run_id = str(context.run_config.get("run-id", ""))
    poller = SeatPoller(
        address, run_id, seat.session, settings.client_id, seat.token, _tls(settings)
    )
    with opened_node(settings, seat.round, [f"substeps:{seat.session}"]) as (node, _), poller:
        served = serve_seat(poller, node.answer, seat.idle_s)
    return Message(encode_served(served), reply_to=message)


for _verb in Verb:  # every verb's messages go to the same handler; a new verb needs no edit
    app.query(_verb.value)(ticketed(handle))
app.query(PROGRAM_MESSAGE.removeprefix(MESSAGE_PREFIX))(ticketed(handle_program))


def _step_name(task: Task) -> str:
    """What the node's replay guard calls this message within its round.

    Verbs repeated within a round (distance estimation, the equilibrium's OCS searches, SPO's
    gradient queries) carry a step so that a repeat is not mistaken for a replay.
    """
    slot = task.slot if isinstance(task, Train | Collaborate | Evaluate) else "model"
    step = task.step if isinstance(task, Collaborate | Discriminate | Gradient) else None
    name = f"{task.verb.value}:{slot}"
    return name if step is None else f"{name}:{step}"


def _peer_source(
    task: Collaborate, numel: int, settings: NodeSettings, run: str, launch: str
) -> PeerModelSource:
    candidates = task.candidates
    if len(task.peer_addresses) != len(candidates) or len(task.peer_grants) != len(candidates):
        raise ValueError("collaborate needs one peer address and one grant per candidate")
    return GrpcPeerSource(
        addresses=dict(zip(candidates, task.peer_addresses, strict=True)),
        grants=dict(zip(candidates, task.peer_grants, strict=True)),
        expected_numel=numel,
        max_bytes=numel * 4 + HEADER_ALLOWANCE,
        timeout_s=task.peer_wait_s or FETCH_TIMEOUT_S,
        tls=_tls(settings),
        run=run,
        launch=launch,
    )


def _tls(settings: NodeSettings) -> ClientTLS | None:
    """This member's certificate for peers and the relay (None: no TLS)."""
    if settings.peer_ca is None:
        return None
    return ClientTLS.from_files(settings.peer_ca, settings.peer_cert, settings.peer_key)
