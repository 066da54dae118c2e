"""A participant imports only the user code its own operator allowed.

A run names user code (model factory, loss, optimiser) by import path; the coordinator that
sends the run's settings may pick among the paths a participant allows, but a path the
participant's operator did not list (``collabfl-client --allow-import``) is refused before
anything is imported or written. The ClientApp is driven as Flower drives it.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from flwr.app import Message
from flwr.common.config import parse_config_args
from safetensors.torch import load_file

from collabfl.apps.client_app import NodeSettings, app
from collabfl.apps.run_setup import (
    SETUP_MESSAGE,
    RunSettings,
    decode_description,
    encode_settings,
)
from collabfl.apps.session import NodeState, open_node
from collabfl.client import daemon
from collabfl.client.peers import MemoryModelStore
from collabfl.client.settings import ParticipantSettings, parser
from collabfl.flower.codec import encode_instruction, message_type
from collabfl.kernel.tickets import TicketSigner
from collabfl.kernel.user_code import UserCodeError
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.verbs import Train
from tests.support.client_data import write_client_data
from tests.test_client_app_tickets import KEY, _context, _state_files, flower_task  # noqa: F401
from tests.test_session import _data, _settings

NET = "tests.support.user_code:make_net"
ADAM = "tests.support.user_code:make_adam"
UNTRUSTED = "tests.support.untrusted_code"


@pytest.fixture(autouse=True)
def untrusted_not_loaded(monkeypatch):
    """The untrusted module is not loaded when a test starts (nor left behind after it)."""
    monkeypatch.delitem(sys.modules, UNTRUSTED, raising=False)


def _allowing(tmp_path: Path, *paths: str):
    context = _context(tmp_path, {"run-id": "r1", "run-ticket": TicketSigner(KEY).issue("r1", 60)})
    if paths:
        context.node_config["allow-import"] = ",".join(paths)
    return context


def _message(content, kind: str) -> Message:
    return Message(content, dst_node_id=1, message_type=kind)


def _setup(context, settings: RunSettings) -> Message:
    return app(_message(encode_settings(settings), SETUP_MESSAGE), context)


def _node_config(settings: ParticipantSettings) -> dict:
    command = daemon.supernode_command(settings)
    return parse_config_args([command[command.index("--node-config") + 1]])


def test_allowed_user_code_sets_up_and_trains(tmp_path):
    context = _allowing(tmp_path, NET, ADAM)
    settings = _settings()
    training = settings.training.model_copy(update={"optimizer": ADAM})
    settings = replace(settings, model=NET, training=training)
    reply = _setup(context, settings)
    assert decode_description(reply.content).client_id == 3
    train = Instruction(0, Train(epochs=1))
    app(_message(encode_instruction(train), message_type(train.verb)), context)
    slots = load_file(tmp_path / "state" / "slots.safetensors")
    assert slots["model"].numel() == 40 * 10 + 10  # the user's linear model, not the zoo's CNN


@pytest.mark.parametrize("field", ["model", "loss", "optimizer"])
@pytest.mark.parametrize("allowed", [(), (NET,)], ids=["none-allowed", "other-allowed"])
def test_a_coordinator_cannot_make_a_participant_import_code(tmp_path, field, allowed):
    context = _allowing(tmp_path, *allowed)
    path = f"{UNTRUSTED}:make_net"
    settings = _settings()
    if field == "model":
        settings = replace(settings, model=path)
    else:
        training = settings.training.model_copy(update={field: path})
        settings = replace(settings, training=training)
    with pytest.raises(UserCodeError, match=f"'{path}' is not allowed on this participant"):
        _setup(context, settings)
    assert UNTRUSTED not in sys.modules
    assert _state_files(tmp_path) == []


def test_a_saved_run_naming_code_no_longer_allowed_is_not_loaded(tmp_path):
    """The operator removed a path after a run set up: the next message imports nothing."""
    _data(tmp_path / "c.npz")
    state = NodeState(tmp_path / "state")
    state.write_settings(replace(_settings(), model=f"{UNTRUSTED}:make_net"))
    store = MemoryModelStore()
    with pytest.raises(UserCodeError, match="not allowed"):
        open_node(3, tmp_path / "c.npz", state, store, store, allowed={NET})
    assert UNTRUSTED not in sys.modules
    node = open_node(3, tmp_path / "c.npz", state, store, store, allowed={f"{UNTRUSTED}:make_net"})
    assert node.workspace.numel == 410 and UNTRUSTED in sys.modules


def _daemon_args(tmp_path: Path, *extra: str) -> list[str]:
    write_client_data(tmp_path / "data.npz")
    (tmp_path / "grant.pub").write_bytes(b"")
    return [
        "--client-id", "0", "--data", str(tmp_path / "data.npz"),
        "--state-dir", str(tmp_path / "state"), "--superlink", "127.0.0.1:9092",
        "--peer-address", "localhost:9200", "--coordinator-key", str(tmp_path / "grant.pub"),
        "--insecure", *extra,
    ]  # fmt: skip


def test_the_daemon_hands_its_allow_list_to_the_client_app(tmp_path):
    argv = _daemon_args(tmp_path, "--allow-import", NET, "--allow-import", ADAM)
    node_config = _node_config(ParticipantSettings.from_flags(parser().parse_args(argv)))
    settings = NodeSettings.from_context(SimpleNamespace(node_config=node_config))
    assert settings.allowed_imports == {NET, ADAM}
    plain = ParticipantSettings.from_flags(parser().parse_args(_daemon_args(tmp_path)))
    assert "allow-import" not in _node_config(plain)


def test_the_daemon_refuses_a_malformed_allow_import(tmp_path, capsys):
    assert daemon.main(_daemon_args(tmp_path, "--allow-import", "mylab.models.make_net")) == 2
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and "'mylab.models.make_net' is not an import path" in said[0]


def test_the_daemon_refuses_an_allow_import_it_could_never_import(tmp_path, capsys):
    # Its executor would fail every run's first message; the operator hears it at start.
    assert daemon.main(_daemon_args(tmp_path, "--allow-import", "no_such_lab.models:net")) == 2
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1, said
    assert "'no_such_lab.models:net'" in said[0] and "PYTHONPATH" in said[0]
    assert not (tmp_path / "state" / "supernode.log").exists()
