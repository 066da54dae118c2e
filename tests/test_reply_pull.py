"""Replies pulled with a short wait for content that lags its message (flower/reply_pull.py).

A runtime client standing in for the SuperLink serves a real Flower reply, message and
objects, and answers "not yet" for each object a few times first, as the SuperLink does
between a SuperNode's push of a reply and the push of its content. The reply must arrive
whole and be confirmed; content that never arrives must become an error answer, never a
hang or a half-read reply. The Flower internals the pull stands on are named at the end.
"""

from __future__ import annotations

from collections import Counter

import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.app.message import remove_content_from_message
from flwr.common.serde import message_to_proto
from flwr.proto.message_pb2 import PullObjectResponse
from flwr.proto.node_pb2 import Node
from flwr.proto.runtime_pb2 import PullAppMessagesResponse
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects, get_object_tree
from flwr.supercore.task_identity import TaskIdentity
from support.flower_api import assert_flower_has

from collabfl.flower.reply_pull import pull_from_runtime


class LaggingRuntime:
    """Hands out one reply; each of its objects is "not yet there" ``lag`` times first."""

    def __init__(self, reply: Message, lag: int) -> None:
        reply.metadata.__dict__["_message_id"] = reply.object_id  # as a pushed reply has
        self.reply = reply
        self.objects = {k: v.deflate() for k, v in get_all_nested_objects(reply).items()}
        self.lag = lag
        self.asks: Counter[str] = Counter()
        self.confirmed: list[str] = []

    def PullMessages(self, request) -> PullAppMessagesResponse:
        proto = message_to_proto(remove_content_from_message(self.reply))
        tree = get_object_tree(self.reply)
        return PullAppMessagesResponse(messages_list=[proto], message_object_trees=[tree])

    def PullObject(self, request) -> PullObjectResponse:
        self.asks[request.object_id] += 1
        if self.asks[request.object_id] <= self.lag:
            return PullObjectResponse(object_found=True, object_available=False)
        content = self.objects[request.object_id]
        return PullObjectResponse(object_found=True, object_available=True, object_content=content)

    def ConfirmMessageReceived(self, request) -> None:
        self.confirmed.append(request.message_object_id)


def _reply() -> Message:
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 5, 7  # a client's task
    instruction = Message(RecordDict(), dst_node_id=7, message_type="query.program")
    instruction.metadata.__dict__["_message_id"] = "instruction-1"
    instruction.metadata.__dict__["_src_node_id"] = 1
    content = RecordDict({"metrics": ConfigRecord({"_steps": 1, "0.train_loss": 0.25})})
    return Message(content, reply_to=instruction)


def test_a_reply_whose_content_lags_arrives_whole_and_is_confirmed():
    runtime = LaggingRuntime(_reply(), lag=3)
    [pulled] = pull_from_runtime(runtime, Node(node_id=1), 5, ["instruction-1"])
    assert pulled.reply_to == "instruction-1" and pulled.src_node_id == 7
    assert isinstance(pulled.content, RecordDict)
    assert pulled.content.config_records["metrics"]["0.train_loss"] == 0.25
    assert set(runtime.asks.values()) == {4}  # each object: three "not yet", then its content
    assert runtime.confirmed == [runtime.reply.object_id]


def test_content_that_never_arrives_is_an_error_answer_not_a_half_reply():
    runtime = LaggingRuntime(_reply(), lag=10**9)
    [pulled] = pull_from_runtime(runtime, Node(node_id=1), 5, ["instruction-1"], wait_s=0.2)
    assert isinstance(pulled.content, str) and "unavailable" in pulled.content
    assert pulled.reply_to == "instruction-1" and pulled.src_node_id == 7
    assert runtime.confirmed == []


# (module, symbol, parameters passed by name; None: only used)
USED = [
    ("flwr.superlink.grid.http_grid", "HttpGrid._runtime_client", None),
    ("flwr.superlink.grid.http_grid", "HttpGrid.run", None),
    ("flwr.supercore.inflatable.inflatable_utils", "pull_objects",
     ["object_ids", "pull_object_fn", "max_time", "max_tries_per_object", "initial_backoff",
      "backoff_cap"]),
    ("flwr.supercore.inflatable.inflatable_utils", "inflate_object_from_contents",
     ["object_id", "object_contents"]),
    ("flwr.supercore.inflatable.inflatable_utils", "ObjectPullError", None),
    ("flwr.supercore.inflatable.inflatable_object", "iterate_object_tree", None),
    ("flwr.supercore.inflatable.inflatable_protobuf_utils", "make_pull_object_fn_protobuf",
     ["pull_object_protobuf", "node", "run_id"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.PullMessages", ["request"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.PullObject", ["request"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.ConfirmMessageReceived", ["request"]),
    ("flwr.proto.message_pb2", "ConfirmMessageReceivedRequest",
     ["node", "run_id", "message_object_id"]),
    ("flwr.proto.runtime_pb2", "PullAppMessagesRequest", ["message_ids"]),
]  # fmt: skip


@pytest.mark.parametrize(("module", "symbol", "parameters"), USED, ids=lambda v: str(v))
def test_the_pull_uses_flower_as_it_is(module, symbol, parameters):
    assert_flower_has(module, symbol, parameters, "pulling replies")
