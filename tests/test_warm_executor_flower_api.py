"""The Flower internals the warm executor (flower/warm_executor.py) stands on.

The executor uses Flower's runtime API client and ClientApp helpers, not a documented
plugin interface; when an upgrade moves or reshapes one of them this test names it, instead
of a federation that hangs because no executor answers its SuperNode. Also the part of the
executor's behaviour that needs no federation: a failing message's error reply.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import flwr
import pytest
from packaging.requirements import Requirement
from support.flower_api import assert_flower_has

ROOT = Path(__file__).resolve().parents[1]

# (module, symbol, parameters the executor passes, by name; None: only imported)
USED = [
    ("flwr.supercore.runtime", "RuntimeHttpClient.from_server_address",
     ["server_address", "insecure", "root_certificates", "interceptors", "retry_invoker"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.AcquireTask", ["request"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.PullTaskInput", ["request"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.PullMessages", ["request"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.SendTaskHeartbeat", ["request"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.PullObject", ["request"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.ConfirmMessageReceived", ["request"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.close", []),
    ("flwr.supercore.interceptors", "RuntimeVersionHttpInterceptor", ["component_name"]),
    ("flwr.supercore.interceptors", "TASK_TOKEN_HEADER", None),
    ("flwr.supercore.protobuf.client", "ProtobufRequestContext", None),
    ("flwr.supercore.protobuf.client", "ProtobufCall", None),
    ("flwr.supercore.retry", "make_simple_http_retry_invoker", []),
    ("flwr.supercore.constant", "TaskType.CLIENT_APP", None),
    ("flwr.supercore.task_identity", "TaskIdentity", None),
    ("flwr.supercore.fab", "Fab", None),
    ("flwr.supercore.run", "Run", None),
    ("flwr.supercore.inflatable.inflatable_utils", "pull_and_inflate_object_from_tree",
     ["object_tree", "pull_object_fn", "confirm_object_received_fn", "return_type",
      "max_time", "initial_backoff", "backoff_cap"]),
    ("flwr.supercore.inflatable.inflatable_protobuf_utils", "make_pull_object_fn_protobuf",
     ["pull_object_protobuf", "node", "run_id"]),
    ("flwr.supercore.inflatable.inflatable_protobuf_utils",
     "make_confirm_message_received_fn_protobuf",
     ["confirm_message_received_protobuf", "node", "run_id"]),
    ("flwr.supernode.runtime.run_clientapp", "push_message", ["client", "message", "context"]),
    ("flwr.supernode.runtime.run_clientapp", "push_task_output",
     ["client", "context", "sub_status", "details"]),
    ("flwr.common.serde", "context_from_proto", None),
    ("flwr.common.serde", "run_from_proto", None),
    ("flwr.common.serde", "fab_from_proto", None),
    ("flwr.common.constant", "SubStatus.COMPLETED", None),
    ("flwr.common.constant", "ErrorCode.CLIENT_APP_RAISED_EXCEPTION", None),
    ("flwr.common.constant", "ErrorCode.LOAD_CLIENT_APP_EXCEPTION", None),
    ("flwr.clientapp.client_app", "LoadClientAppError", None),
    ("flwr.proto.runtime_pb2", "AcquireTaskRequest", ["supported_task_types"]),
    ("flwr.proto.runtime_pb2", "PullTaskInputRequest", []),
    ("flwr.proto.runtime_pb2", "PullAppMessagesRequest", []),
    ("flwr.proto.runtime_pb2", "SendTaskHeartbeatRequest", []),
    ("flwr.proto.node_pb2", "Node", ["node_id"]),
]  # fmt: skip


def test_flwr_is_the_pinned_version():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = [Requirement(d) for d in pyproject["project"]["dependencies"]]
    pin = next(r for r in pins if r.name == "flwr")
    assert pin.specifier.contains(flwr.__version__), (
        f"flwr {flwr.__version__} is outside the pinned {pin.specifier}: check the warm "
        "executor's Flower internals (this file) before moving the pin"
    )


@pytest.mark.parametrize(("module", "symbol", "parameters"), USED, ids=lambda v: str(v))
def test_executor_uses_flower_as_it_is(module, symbol, parameters):
    assert_flower_has(module, symbol, parameters, "the warm executor")


def test_task_identity_is_settable_per_task():
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("task_id", "run_id", "node_id"):
        prop = getattr(type(TaskIdentity), name, None)
        assert isinstance(prop, property) and prop.fset is not None, (
            f"the warm executor sets flwr.supercore.task_identity.TaskIdentity.{name} per task"
        )


def test_a_failing_message_becomes_an_error_reply():
    from flwr.app import Message, RecordDict
    from flwr.clientapp.client_app import LoadClientAppError
    from flwr.common.constant import ErrorCode
    from flwr.supercore.task_identity import TaskIdentity

    from collabfl.flower.warm_executor import error_reply

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 2, 3
    message = Message(RecordDict(), dst_node_id=3, message_type="query.train")
    message.metadata.__dict__["_message_id"] = "received"  # as a pulled message has
    reply = error_reply(message, ValueError("bad instruction"))
    assert reply.has_error() and reply.error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert reply.error.reason == "ValueError: bad instruction"
    assert reply.metadata.reply_to_message_id == "received"
    failed_load = error_reply(message, LoadClientAppError("no app"))
    assert failed_load.error.code == ErrorCode.LOAD_CLIENT_APP_EXCEPTION


def test_the_executor_preloads_the_client_app_the_app_names(tmp_path: Path) -> None:
    """Preloading pays off only if Flower's loader later asks for that very module."""
    from collabfl.coordinator.superlink.run_launcher import write_app
    from collabfl.flower.warm_executor import PRELOADED

    app = tomllib.loads((write_app(tmp_path) / "pyproject.toml").read_text())
    module, _, _ = app["tool"]["flwr"]["app"]["components"]["clientapp"].partition(":")
    assert module == PRELOADED


class _ContentNeverArrives:
    """A SuperNode runtime API whose task has a message whose content never becomes
    available (its sender died between pushing the message and its objects)."""

    def __init__(self) -> None:
        self.object_pulls = 0

    def PullTaskInput(self, request):
        from flwr.proto.message_pb2 import Context
        from flwr.proto.run_pb2 import Run
        from flwr.proto.runtime_pb2 import PullTaskInputResponse

        return PullTaskInputResponse(
            task_id=7, context=Context(node_id=3, run_id=2), run=Run(run_id=2)
        )

    def PullMessages(self, request):
        from flwr.proto.message_pb2 import Message, ObjectTree
        from flwr.proto.runtime_pb2 import PullAppMessagesResponse

        return PullAppMessagesResponse(
            messages_list=[Message()], message_object_trees=[ObjectTree(object_id="ab" * 32)]
        )

    def PullObject(self, request):
        from flwr.proto.message_pb2 import PullObjectResponse

        self.object_pulls += 1
        return PullObjectResponse(object_found=True, object_available=False)

    def ConfirmMessageReceived(self, request):
        raise AssertionError("nothing was received")


def test_a_message_whose_content_never_arrives_fails_the_task_in_bounded_time(monkeypatch):
    from collabfl.flower import warm_executor

    monkeypatch.setattr(warm_executor, "MESSAGE_WAIT_S", 0.5)
    client = _ContentNeverArrives()
    started = time.monotonic()
    with pytest.raises(Exception, match="timeout or retry limit"):
        warm_executor.pull_task_input(client)  # type: ignore[arg-type]
    assert time.monotonic() - started < 30.0  # Flower's default: about 100 s
    assert client.object_pulls > 1  # it did wait for the content
