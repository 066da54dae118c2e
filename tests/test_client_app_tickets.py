"""A rogue ServerApp's messages (no ticket, a forged one, another run's) get no data.

The ClientApp is driven as Flower drives it (``app(message, context)``) with the node
config a client daemon sets; refused messages must leave the node's state directory as
they found it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from collabfl.apps.client_app import RunNotAuthorized, app
from collabfl.apps.run_setup import SETUP_MESSAGE, decode_description, encode_settings
from collabfl.flower.codec import encode_instruction, message_type
from collabfl.kernel.grants import GrantSigner, generate_private_key, save_public_key
from collabfl.kernel.tickets import TicketSigner
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.verbs import Train
from tests.test_session import _data, _settings

KEY = generate_private_key()


@pytest.fixture(autouse=True)
def flower_task(monkeypatch):
    """The identity Flower's ClientApp process sets before it builds any Message."""
    for name, value in (("_task_id", 1), ("_run_id", 7), ("_node_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


def _context(tmp_path: Path, run_config: dict[str, str]) -> Context:
    key_file = tmp_path / "coordinator.pub.pem"
    save_public_key(GrantSigner(KEY).public_key_bytes(), key_file)
    node_config = {
        "client-id": 3,
        "data-path": str(_data(tmp_path / "c.npz")),
        "state-dir": str(tmp_path / "state"),
        "peer-address": "127.0.0.1:1",
        "coordinator-key": str(key_file),
    }
    return Context(7, 1, node_config, RecordDict(), run_config)


def _setup(context: Context, run_id: str = "r1") -> Message:
    content = encode_settings(_settings(run_id))
    return app(Message(content, dst_node_id=1, message_type=SETUP_MESSAGE), context)


def _state_files(tmp_path: Path) -> list[str]:
    state = tmp_path / "state"
    return sorted(p.name for p in state.rglob("*")) if state.exists() else []


def test_coordinator_ticket_lets_a_run_set_up(tmp_path):
    ticket = TicketSigner(KEY).issue("r1", ttl_s=60)
    reply = _setup(_context(tmp_path, {"run-id": "r1", "run-ticket": ticket}))
    assert decode_description(reply.content).client_id == 3
    assert "run.json" in _state_files(tmp_path)


@pytest.mark.parametrize(
    "run_config",
    [
        {"run-id": "r1"},
        {"run-id": "r1", "run-ticket": ""},
        {"run-id": "r1", "run-ticket": TicketSigner(generate_private_key()).issue("r1", 60)},
        {"run-id": "r1", "run-ticket": TicketSigner(KEY).issue("r0", 60)},
    ],
    ids=["no-ticket", "empty-ticket", "forged-ticket", "other-runs-ticket"],
)
def test_rogue_server_app_cannot_set_up_or_train(tmp_path, run_config, caplog):
    context = _context(tmp_path, run_config)
    with pytest.raises(RunNotAuthorized):
        _setup(context)
    train = Instruction(0, Train(epochs=1))
    content, kind = encode_instruction(train), message_type(train.verb)
    message = Message(content, dst_node_id=1, message_type=kind)
    with pytest.raises(RunNotAuthorized):
        app(message, context)
    assert _state_files(tmp_path) == []
    assert "refused a message of Flower run 7" in caplog.text


def test_set_up_naming_another_run_than_the_ticket_is_refused(tmp_path):
    context = _context(tmp_path, {"run-id": "r1", "run-ticket": TicketSigner(KEY).issue("r1", 60)})
    with pytest.raises(RunNotAuthorized, match="set-up names run 'r2'"):
        _setup(context, run_id="r2")
    assert _state_files(tmp_path) == []


def test_node_without_coordinator_key_serves_nothing(tmp_path):
    context = _context(tmp_path, {"run-id": "r1", "run-ticket": TicketSigner(KEY).issue("r1", 60)})
    del context.node_config["coordinator-key"]
    with pytest.raises(RunNotAuthorized, match="lacks coordinator-key"):
        _setup(context)
