"""Contract (fails loudly on a Flower upgrade): Flower's SuperNode reply poll.

A Flower 1.41/1.42 SuperNode serves one message at a time and, once the message is handed to
its executor, looks for the reply every 0.5 s, a literal in its loop with no option or
variable to change it. That poll is up to 0.5 s of every DPFL round (docs/performance.md,
"Under Flower's reply poll"), and it stays on a round's path even if replies travelled
around Flower, because the SuperNode takes its next message only after pushing the reply.
When an upgrade changes any of this, the finding and benchmarks/reply_poll.py (whose hook
uses these internals) must be looked at again; a new option would be the way to shorten it.
"""

from __future__ import annotations

import importlib
import inspect
import re

from flwr.supernode import start_client_internal as loop
from flwr.supernode.nodestate.in_memory_nodestate import InMemoryNodeState


def test_contract_the_supernode_polls_for_its_reply_every_half_second() -> None:
    push = inspect.getsource(loop._push_messages)
    poll = re.search(
        r"while not \(reply_messages := state\.get_messages_legacy\(is_reply=True\)\):"
        r"\s*time\.sleep\(([0-9.]+)\)",
        push,
    )
    assert poll is not None, "the SuperNode no longer polls its state for the reply"
    assert float(poll.group(1)) == 0.5
    assert loop.time.sleep is __import__("time").sleep  # the hook swaps the module's ``time``


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


def test_contract_what_the_benchmark_hook_wraps() -> None:
    """benchmarks/reply_poll_hook/ times a reply from its storing to the loop finding it."""
    store = inspect.signature(InMemoryNodeState.store_message)
    assert list(store.parameters) == ["self", "message"]
    look = inspect.signature(InMemoryNodeState.get_messages_legacy)
    assert "is_reply" in look.parameters
    assert "self.store_message(message)" in inspect.getsource(
        InMemoryNodeState.store_message_and_object_tree
    )
