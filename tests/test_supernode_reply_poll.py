"""Flower's SuperNode reply poll, and the client daemon's shorter one.

Contract (fails loudly on a Flower upgrade): a Flower 1.41/1.42 SuperNode serves one message
at a time and, once the message is handed to its executor, looks for the reply every 0.5 s,
a literal in its loop with no option or variable to change it. That poll was up to 0.5 s of
every DPFL round (docs/performance.md, "Under Flower's reply poll"), and it stays on a
round's path even if replies travelled around Flower, because the SuperNode takes its next
message only after pushing the reply. So the client daemon runs its SuperNode through
collabfl/flower/quick_reply_supernode.py, which makes that literal's sleep 0.02 s. When an
upgrade changes any of this, that module and benchmarks/reply_poll.py (whose hook uses these
internals) must be looked at again; a new option would be the way to shorten it, and the
module would go.
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import time

import pytest
from flwr.supernode import start_client_internal as loop
from flwr.supernode.nodestate.in_memory_nodestate import InMemoryNodeState

from collabfl.client import daemon
from collabfl.client.settings import ParticipantSettings, parser
from collabfl.flower import quick_reply_supernode
from collabfl.flower.processes import flower_entry_point
from collabfl.flower.quick_reply_supernode import (
    FLOWER_ENTRY_POINT,
    FLOWER_REPLY_POLL_S,
    REPLY_POLL_S,
    ReplyPollClock,
    shorten_reply_poll,
    supernode_program,
)
from collabfl.kernel.python_command import module_command
from tests.support.client_data import write_client_data


def test_contract_the_supernode_polls_for_its_reply_every_half_second() -> None:
    push = inspect.getsource(loop._push_messages)
    poll = re.search(
        r"while not \(reply_messages := state\.get_messages_legacy\(is_reply=True\)\):"
        r"\s*time\.sleep\(([0-9.]+)\)",
        push,
    )
    assert poll is not None, "the SuperNode no longer polls its state for the reply"
    assert float(poll.group(1)) == FLOWER_REPLY_POLL_S
    # the daemon's SuperNode (and the benchmark's hook) swap the module's ``time``
    assert loop.time is time and loop._push_messages.__globals__ is vars(loop)


def test_contract_one_message_at_a_time() -> None:
    """The next pull follows the push of the reply in one loop: a reply relayed around
    Flower would not bring a client's next message any sooner."""
    body = inspect.getsource(loop.start_client_internal)
    pull = body.index("run_id = _pull_and_store_message(")
    assert body.index("_push_messages(", pull) > pull
    assert "Thread(" not in body and "ThreadPoolExecutor" not in body


def test_contract_no_option_shortens_the_poll() -> None:
    cli = importlib.import_module("flwr.supernode.cli.flower_supernode")  # the package's
    options = " ".join(cli._parse_args_run_supernode().format_help().split())  # name is a function
    assert not re.search(r"poll|interval", options, re.IGNORECASE), options
    assert "environ" not in inspect.getsource(loop)


def test_contract_flower_installs_the_supernode_as_a_console_script() -> None:
    from flwr.supernode.cli.flower_supernode import flower_supernode as flowers

    assert flower_entry_point(FLOWER_ENTRY_POINT) is flowers


def test_contract_what_the_benchmark_hook_wraps() -> None:
    """benchmarks/reply_poll_hook/ times a reply from its storing to the loop finding it, and
    sets its own poll once the SuperNode has made its state, before the loop."""
    body = inspect.getsource(loop.start_client_internal)
    assert body.index("state = state_factory.state()") < body.index("while True:")
    store = inspect.signature(InMemoryNodeState.store_message)
    assert list(store.parameters) == ["self", "message"]
    look = inspect.signature(InMemoryNodeState.get_messages_legacy)
    assert "is_reply" in look.parameters
    assert "self.store_message(message)" in inspect.getsource(
        InMemoryNodeState.store_message_and_object_tree
    )


def test_the_short_clock_shortens_only_the_reply_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    clock = ReplyPollClock()
    clock.sleep(FLOWER_REPLY_POLL_S)
    clock.sleep(3)  # after a pull that found no message: Flower's own wait
    clock.sleep(0.25)
    assert slept == [REPLY_POLL_S, 3, 0.25]
    assert clock.monotonic is time.monotonic and clock.time is time.time


def test_shortening_reaches_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "time", loop.time)  # put back after the test
    shorten_reply_poll(loop, 0.01)
    seen = loop._push_messages.__globals__["time"]
    assert isinstance(seen, ReplyPollClock) and seen.poll_s == 0.01


def test_the_daemon_starts_the_short_poll_supernode(tmp_path) -> None:
    write_client_data(tmp_path / "data.npz")
    (tmp_path / "grant.pub").write_bytes(b"")
    flags = [
        "--client-id", "0", "--data", str(tmp_path / "data.npz"),
        "--state-dir", str(tmp_path / "state"), "--superlink", "127.0.0.1:9092",
        "--peer-address", "localhost:9200", "--coordinator-key", str(tmp_path / "grant.pub"),
        "--insecure",
    ]  # fmt: skip
    settings = ParticipantSettings.from_flags(parser().parse_args(flags))
    command = daemon.supernode_command(settings)
    program = supernode_program()
    assert command[: len(program)] == program
    assert program == module_command(quick_reply_supernode.__name__)
    assert command[len(program) : len(program) + 2] == ["--superlink", "127.0.0.1:9092"]


def test_the_short_poll_supernode_is_flowers_own_program() -> None:
    shown = subprocess.run(
        [*supernode_program(), "--help"], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: flower-supernode")
    assert all(flag in shown.stdout for flag in ("--superlink", "--isolation", "--node-config"))
