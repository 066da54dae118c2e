"""The Flower ClientApp: runs each coordinator instruction on this participant.

Flower starts this in a fresh process per message. Everything durable lives elsewhere: the
node's state directory (flower/session.py) and the client daemon's peer server, which
serves what this app publishes into ``<state-dir>/published``. Peer models are fetched
directly from their owners over gRPC with the grants the coordinator attached; the
coordinator only ever sends indices, sizes, addresses and grants.

Node config (set by the client daemon on the SuperNode): ``client-id`` (int),
``data-path`` (this participant's data file), ``state-dir``, ``peer-address`` (where peers
reach this daemon's peer server), and optionally ``device`` (overrides the run's device,
e.g. "cuda:1" on a GPU machine), ``peer-ca`` (PEM of the CA of peers' TLS certificates),
``cost`` and ``eagerness`` (the iPFL market profile this participant reports).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from collabfl.client.model_store import DiskModelStore
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peers import PeerModelSource, PeerUnavailable
from collabfl.flower.codec import decode_instruction, encode_reply
from collabfl.flower.session import NodeState, RunSettings, describe, open_node
from collabfl.kernel.tls import ClientTLS
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.protocol import Verb

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 60.0
HEADER_ALLOWANCE = 1 << 20
"""Bytes allowed beyond the raw weights for the safetensors header."""

app = ClientApp()


@dataclass(frozen=True)
class NodeSettings:
    """This SuperNode's node config."""

    client_id: int
    data_path: Path
    state_dir: Path
    peer_address: str
    device: str
    peer_ca: Path | None
    market: dict[str, float]
    """iPFL profile the participant reports: sharing ``cost`` and data ``eagerness``."""

    @classmethod
    def from_context(cls, context: Context) -> NodeSettings:
        config = context.node_config
        required = ("client-id", "data-path", "state-dir", "peer-address")
        missing = [k for k in required if k not in config]
        if missing:
            raise ValueError(f"node config lacks {', '.join(missing)}")
        peer_ca = str(config.get("peer-ca", ""))
        return cls(
            client_id=int(config["client-id"]),
            data_path=Path(str(config["data-path"])),
            state_dir=Path(str(config["state-dir"])),
            peer_address=str(config["peer-address"]),
            device=str(config.get("device", "")),
            peer_ca=Path(peer_ca) if peer_ca else None,
            market={k: float(config[k]) for k in ("cost", "eagerness") if k in config},
        )


class NoPeers:
    """The peer source of messages that fetch nothing."""

    def fetch(self, owner: int, round_index: int):
        raise PeerUnavailable("this instruction carries no peer grants")


@app.query("setup")
def setup(message: Message, context: Context) -> Message:
    """Join a run: remember its settings and report identity and sample count."""
    node = NodeSettings.from_context(context)
    config = message.content["config"]
    settings = RunSettings(
        run_id=str(config["run_id"]),
        seed=int(config["seed"]),
        model=str(config["model"]),
        device=node.device or str(config["device"]),
        threads=int(config["threads"]),
        training=TrainingConfig.model_validate_json(str(config["training"])),
    )
    NodeState(node.state_dir).write_settings(settings)
    reply = describe(node.client_id, node.data_path, node.peer_address, node.market)
    return Message(RecordDict({"metrics": ConfigRecord(reply)}), reply_to=message)


@app.query(Verb.TRAIN.value)
@app.query(Verb.COLLABORATE.value)
@app.query(Verb.EVALUATE.value)
@app.query(Verb.DISCRIMINATE.value)
@app.query(Verb.GRADIENT.value)
def handle(message: Message, context: Context) -> Message:
    """Run one instruction against the node's saved state and save the new state."""
    settings = NodeSettings.from_context(context)
    instruction = decode_instruction(message.content)
    state = NodeState(settings.state_dir)
    # Verbs repeated within a round (distance estimation, the equilibrium's OCS searches, SPO's
    # gradient queries) carry a "step" so that a repeat is not mistaken for a replay.
    step = f"{instruction.verb.value}:{instruction.config.get('slot', 'model')}"
    if "step" in instruction.config:
        step += f":{instruction.config['step']}"
    state.begin(instruction.round, step)
    store = DiskModelStore(state.published, owner=settings.client_id)
    node = open_node(settings.client_id, settings.data_path, state, store, NoPeers())
    if instruction.verb is Verb.COLLABORATE:
        node.fetcher.source = _peer_source(instruction.config, node.workspace.numel, settings)
    try:
        reply = node.handle(instruction)
    finally:
        close = getattr(node.fetcher.source, "close", None)
        if close is not None:
            close()
    state.save(node)
    state.done(instruction.round, step)
    return Message(encode_reply(reply), reply_to=message)


def _peer_source(config, numel: int, settings: NodeSettings) -> PeerModelSource:
    candidates = [int(j) for j in config["candidates"]]
    addresses = [str(a) for a in config.get("peer_addresses", [])]
    grants = [bytes(g) for g in config.get("peer_grants", [])]
    if len(addresses) != len(candidates) or len(grants) != len(candidates):
        raise ValueError("collaborate needs one peer address and one grant per candidate")
    tls = None if settings.peer_ca is None else ClientTLS.from_files(settings.peer_ca)
    return GrpcPeerSource(
        addresses=dict(zip(candidates, addresses, strict=True)),
        grants=dict(zip(candidates, grants, strict=True)),
        expected_numel=numel,
        max_bytes=numel * 4 + HEADER_ALLOWANCE,
        timeout_s=FETCH_TIMEOUT_S,
        tls=tls,
    )
