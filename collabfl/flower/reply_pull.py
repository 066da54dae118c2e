"""Replies pulled from the SuperLink without Flower's one-second wait for late content.

The SuperLink hands out a reply as soon as its SuperNode has pushed the message itself; the
objects that hold its content follow a few milliseconds later. Flower's
``HttpGrid.pull_messages`` asks for a missing object again after 1 s, then 2 s, so a reply
pulled in that gap cost its round a second, most rounds once a federation had a few
clients. Here a missing object is asked for again after 5 ms, growing to 50 ms, as the Fleet
gateway does for SuperNodes (coordinator/gateway/fleet_gateway.py).

This reads the runtime client of Flower's ``HttpGrid``, which is not public API;
tests/test_reply_pull.py names what it relies on and fails when an upgrade changes it. A
grid of another kind is asked through its public ``pull_messages``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeGuard, cast

from flwr.app import Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.proto.message_pb2 import (
    ConfirmMessageReceivedRequest,
    ObjectTree,
    PullObjectRequest,
    PullObjectResponse,
)
from flwr.proto.node_pb2 import Node
from flwr.proto.runtime_pb2 import PullAppMessagesRequest, PullAppMessagesResponse
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_object import iterate_object_tree
from flwr.supercore.inflatable.inflatable_protobuf_utils import make_pull_object_fn_protobuf
from flwr.supercore.inflatable.inflatable_utils import (
    ObjectPullError,
    inflate_object_from_contents,
    pull_objects,
)

log = logging.getLogger(__name__)

OBJECT_BACKOFF_S, OBJECT_BACKOFF_CAP_S = 0.005, 0.05
OBJECT_WAIT_S = 60.0
"""How long a reply's content may lag its message: only a SuperNode that died mid-push
takes this long, and its reply is then an error (the SuperLink hands a reply out once)."""
NODE_GONE = f"error {ErrorCode.NODE_UNAVAILABLE}:"
"""How the error the SuperLink answers for a node that went offline before replying begins:
its SuperNode stopped, was killed (its daemon says so at once, flower/stale_node.py) or
missed its heartbeats; the message it held is lost."""
CONTENT_LOST = "reply content unavailable:"
"""How a reply whose content never reached the SuperLink begins: its SuperNode was killed
while pushing it (a soak's SIGKILL of every client at once left two). The reply is lost on
the way, like a node's that went offline; the client's step did not fail."""


def node_gone(content: RecordDict | str) -> bool:
    """Whether a reply is the SuperLink's word that its node went offline."""
    return isinstance(content, str) and content.startswith(NODE_GONE)


def content_lost(content: RecordDict | str) -> TypeGuard[str]:
    """Whether a reply's content never arrived (``lost_content``)."""
    return isinstance(content, str) and content.startswith(CONTENT_LOST)


def lost_content(error: Exception) -> str:
    """The answer for a reply whose content could not be pulled."""
    return f"{CONTENT_LOST} {error}"


@dataclass(frozen=True)
class Pulled:
    """One reply: what it answers, who sent it and when, its content or error text."""

    reply_to: str
    src_node_id: int
    created_at: float
    content: RecordDict | str


class RuntimeClient(Protocol):
    """The calls of Flower's runtime API client that pulling replies needs."""

    def PullMessages(self, request: PullAppMessagesRequest) -> PullAppMessagesResponse: ...

    def PullObject(self, request: PullObjectRequest) -> PullObjectResponse: ...

    def ConfirmMessageReceived(self, request: ConfirmMessageReceivedRequest) -> object: ...


def pull_replies(grid: Grid, message_ids: list[str]) -> list[Pulled]:
    """The replies to ``message_ids`` that have arrived (each is handed out once)."""
    # Imported here: it loads the SuperLink's state code (0.7 s), and every ClientApp
    # imports this module through the sub-step seat (apps/substeps.py) without pulling.
    from flwr.superlink.grid.http_grid import HttpGrid

    if isinstance(grid, HttpGrid):
        client = cast(RuntimeClient, grid._runtime_client)  # not public: see above
        return pull_from_runtime(client, grid.node, grid.run.run_id, message_ids)
    return [_pulled(reply) for reply in grid.pull_messages(message_ids)]


def pull_from_runtime(
    client: RuntimeClient,
    node: Node,
    run_id: int,
    message_ids: list[str],
    wait_s: float = OBJECT_WAIT_S,
) -> list[Pulled]:
    """Pull the replies, then each one's content, confirming each one received."""
    answer = client.PullMessages(PullAppMessagesRequest(message_ids=message_ids))
    pull_object = make_pull_object_fn_protobuf(client.PullObject, node, run_id)
    pulled = []
    for proto, tree in zip(answer.messages_list, answer.message_object_trees, strict=True):
        meta = proto.metadata
        try:
            contents = _pull_contents(pull_object, tree, wait_s)
        except ObjectPullError as error:
            log.warning("reply %s from node %s lost: %s", meta.message_id, meta.src_node_id, error)
            lost = lost_content(error)
            pulled.append(Pulled(meta.reply_to_message_id, meta.src_node_id, meta.created_at, lost))
            continue
        confirm = ConfirmMessageReceivedRequest(
            node=node, run_id=run_id, message_object_id=meta.message_id
        )
        client.ConfirmMessageReceived(confirm)
        reply = inflate_object_from_contents(meta.message_id, contents)
        pulled.append(_pulled(cast(Message, reply)))
    return pulled


def _pull_contents(
    pull_object: Callable[[str], bytes], tree: ObjectTree, wait_s: float
) -> dict[str, bytes]:
    return pull_objects(
        [node.object_id for node in iterate_object_tree(tree)],
        pull_object,
        max_time=wait_s,
        max_tries_per_object=None,
        initial_backoff=OBJECT_BACKOFF_S,
        backoff_cap=OBJECT_BACKOFF_CAP_S,
    )


def _pulled(reply: Message) -> Pulled:
    meta = reply.metadata
    content: RecordDict | str = (
        f"error {reply.error.code}: {reply.error.reason}" if reply.has_error() else reply.content
    )
    return Pulled(meta.reply_to_message_id, meta.src_node_id, meta.created_at, content)
