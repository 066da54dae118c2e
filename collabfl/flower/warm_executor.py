"""A long-lived ClientApp executor for a SuperNode started with ``--isolation process``.

In Flower's default ``subprocess`` isolation the SuperNode starts a fresh ``flwr-clientapp``
process per message, which imports flwr, torch and our ClientApp and re-opens the node from
disk every time. With ``--isolation process`` the SuperNode starts no executor: this process
claims its tasks through the SuperNode's runtime API (HTTP on its ``--port``), keeps the
loaded ClientApp (and the node it caches) in memory, and serves every message of the node.

Exactly one executor serves one SuperNode, with that node's ``FLWR_HOME``; the client daemon
supervises it, because a node whose executor is gone receives messages nobody answers.
It serves only collabfl's installed ClientApp, and only tasks of ticketed collabfl runs
(flower/app_gate.py): a FAB's content is never installed or imported. With ``--per-task``
(the ``subprocess`` runtime) it keeps nothing loaded: each task it claims is served by a
fresh child process, as Flower's own executor does with ``flwr-clientapp``, but through the
same gate.
An exception in one message becomes an error reply for that message; the executor goes on.
Stopped (SIGTERM or SIGINT), it finishes the task in hand, if any, and exits without the
interpreter's teardown.
Only public helpers of ``flwr.supernode.runtime.run_clientapp`` are used (not
``run_clientapp()`` itself, which exits the process); nothing in Flower is patched.

    python -m collabfl.flower.warm_executor --runtime-api 127.0.0.1:9094 [--poll 0.1]
        [--supernode-log STATE/supernode.log] [--per-task]

Idle, it does not ask its SuperNode for tasks on a clock when it can watch the SuperNode's
log: sixteen executors asking ten times a second, each ask an HTTP call that the SuperNode
answers in Python, took a sixth of two cores from a 16-client federation. The SuperNode
logs "Receiving" for each message it pulls, just before it creates the message's task, so
the executor looks at the log's size every 20 ms (a stat), reads what was appended, and on
such a line asks every ``--poll`` until the task is there (or a second has passed). It
also asks every 2 s regardless, so that a SuperNode that logs differently only slows it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import httpx
from flwr.app import Context, Error, Message
from flwr.clientapp.client_app import LoadClientAppError
from flwr.common.constant import ErrorCode, SubStatus
from flwr.common.serde import context_from_proto, fab_from_proto, run_from_proto
from flwr.proto.node_pb2 import Node
from flwr.proto.runtime_pb2 import (
    AcquireTaskRequest,
    PullAppMessagesRequest,
    PullTaskInputRequest,
    SendTaskHeartbeatRequest,
)
from flwr.supercore.constant import TaskType
from flwr.supercore.fab import Fab
from flwr.supercore.inflatable.inflatable_protobuf_utils import (
    make_confirm_message_received_fn_protobuf,
    make_pull_object_fn_protobuf,
)
from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
from flwr.supercore.interceptors import TASK_TOKEN_HEADER, RuntimeVersionHttpInterceptor
from flwr.supercore.protobuf.client import (
    ProtobufCall,
    ProtobufClientInterceptor,
    ProtobufRequestContext,
)
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.run import Run
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supercore.task_identity import TaskIdentity
from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

from collabfl.flower.app_gate import CLIENT_APP, RefusedTask, check_task, installed_client_app
from collabfl.flower.processes import warm_executor_command
from collabfl.flower.superexec_auth import claim_signer

log = logging.getLogger("collabfl.warm_executor")

PRELOADED = CLIENT_APP.partition(":")[0]
"""Our ClientApp's module (app_gate.py's CLIENT_APP: the one place the runtime names the app
it serves), imported before the first task: torch and the node code then load while the
federation is still forming, instead of delaying a run's first message by seconds (more so
when every client of a machine imports at once)."""

HEARTBEAT_EVERY_S = 20.0
"""The SuperNode expires an active task's token after about 60 s without a heartbeat."""
OBJECT_BACKOFF_S, OBJECT_BACKOFF_CAP_S = 0.01, 0.2
"""The SuperNode creates a task before its message has arrived from the SuperLink, so the
message is polled quickly; Flower's own helper starts at 1 s and adds about a second."""
IDLE_ASK_S = 2.0
"""Watching the SuperNode's log, the executor still asks for a task this often."""
LOG_CHECK_S = 0.02
"""How often the log's size is looked at: a stat, far cheaper than asking the SuperNode."""
RECEIVING = b"Receiving"
"""What the SuperNode logs for each message it pulls, before it creates its task."""
BURST_S = 1.0
"""After a "Receiving" line, how long tasks are asked for every ``--poll``."""
MESSAGE_WAIT_S = 60.0
"""How long a claimed task waits for its message, and then for the message's content: a
SuperLink or coordinator that died mid-delivery fails the task instead of holding it."""
QUERY_BACKOFF_S = 1.0
"""The pause after a task query that failed for good: Flower's client retries a SuperNode
that is away by itself, and gives up only on an error it will not retry (TLS, a status
other than 502, 503 or 504)."""
FIRST_TOKEN_ENV = "COLLABFL_WARM_FIRST_TOKEN"
"""A task claimed by a ``--per-task`` executor, handed to the child that serves it (never on
the command line, where every local user could read it)."""


@dataclass(frozen=True)
class TaskInput:
    """Everything one ClientApp task needs, pulled from the SuperNode."""

    message: Message
    context: Context
    run: Run
    fab: Fab


class TaskToken:
    """Sets the token of the task being served on every request (none between tasks).

    Flower's token interceptor fixes one token per client, for a process that serves one
    task; this process serves many, so the token is swapped per task.
    """

    def __init__(self) -> None:
        self.value: str | None = None

    def intercept(self, context: ProtobufRequestContext, call_next: ProtobufCall) -> httpx.Response:
        if self.value:
            context.request.headers[TASK_TOKEN_HEADER] = self.value
        return call_next(context)


class Heartbeat:
    """Keeps a long task's token alive while it runs.

    Written here because Flower's heartbeat helper interrupts its own process when the
    SuperNode refuses a beat, which would stop every later task too.
    """

    def __init__(self, client: RuntimeHttpClient) -> None:
        self._client = client
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="task-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_EVERY_S):
            try:
                self._client.SendTaskHeartbeat(SendTaskHeartbeatRequest())
            except httpx.HTTPError as error:  # one missed beat is not fatal
                log.warning("task heartbeat failed: %s", error)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def connect(address: str, token: TaskToken, secret_file: Path | None = None) -> RuntimeHttpClient:
    """A runtime API client that presents itself as ``flwr-clientapp``; with ``secret_file``
    it signs its task claims (flower/superexec_auth.py)."""
    interceptors: list[ProtobufClientInterceptor] = [
        RuntimeVersionHttpInterceptor(component_name="flwr-clientapp")
    ]
    if secret_file is not None:
        interceptors.append(claim_signer(secret_file))
    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=True,
        root_certificates=None,
        interceptors=[*interceptors, token],
        retry_invoker=make_simple_http_retry_invoker(),
    )


def pull_task_input(client: RuntimeHttpClient) -> TaskInput:
    """Activate the claimed task and pull its context, run, FAB and message."""
    response = client.PullTaskInput(PullTaskInputRequest())
    # Who "this process" is, for messages the app creates: Flower's helper sets it per task
    TaskIdentity.task_id = response.task_id
    TaskIdentity.run_id = response.run.run_id
    TaskIdentity.node_id = response.context.node_id
    context = context_from_proto(response.context)
    deadline = time.monotonic() + MESSAGE_WAIT_S
    while not (pulled := client.PullMessages(PullAppMessagesRequest())).messages_list:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the SuperNode had no message for this task in {MESSAGE_WAIT_S} s")
        time.sleep(OBJECT_BACKOFF_S)
    tree = pulled.message_object_trees[0]
    node = Node(node_id=context.node_id)
    message = pull_and_inflate_object_from_tree(
        tree,
        make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
        make_confirm_message_received_fn_protobuf(
            client.ConfirmMessageReceived, node, context.run_id
        ),
        return_type=Message,
        max_time=MESSAGE_WAIT_S,  # Flower's default, 500 tries each, could hold a task ~100 s
        initial_backoff=OBJECT_BACKOFF_S,
        backoff_cap=OBJECT_BACKOFF_CAP_S,
    )
    message.metadata.__dict__["_message_id"] = tree.object_id  # as Flower's helper does
    return TaskInput(message, context, run_from_proto(response.run), fab_from_proto(response.fab))


def error_reply(message: Message, error: Exception) -> Message:
    """The reply Flower's executor sends when a ClientApp raises."""
    code = (
        ErrorCode.LOAD_CLIENT_APP_EXCEPTION
        if isinstance(error, LoadClientAppError)
        else ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    )
    return Message(Error(code=code, reason=f"{type(error).__name__}: {error}"), reply_to=message)


class SuperNodeLog:
    """The SuperNode's log, watched for the lines that announce a task (module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = self._size()

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:  # not written yet
            return 0

    def wait(self, timeout_s: float, stopping: threading.Event) -> bool:
        """Whether a message is being received: True once a "Receiving" line is appended
        within ``timeout_s``, False when it passes (or ``stopping`` is set)."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            size = self._size()
            if size < self.offset:  # a new file: read it from its start
                self.offset = 0
            if size > self.offset and RECEIVING in self._appended(size):
                return True
            if stopping.wait(min(LOG_CHECK_S, left)):
                return False
        return False

    def _appended(self, size: int) -> bytes:
        """The bytes written since the last look, after the few before them that a word
        cut by that look may have begun with (too few to hold the whole word again)."""
        overlap = len(RECEIVING) - 1
        try:
            with self.path.open("rb") as log_file:
                log_file.seek(max(0, self.offset - overlap))
                appended = log_file.read(size - self.offset + overlap)
        except OSError:
            return b""
        self.offset = size
        return appended


class WarmExecutor:
    """Serves the ClientApp tasks of one SuperNode until stopped.

    ``supernode_log``: the SuperNode's log, watched while idle (module doc); without it, a
    task is asked for every ``poll_s``. ``per_task``: serve each task in a fresh child.
    """

    def __init__(
        self,
        address: str,
        poll_s: float,
        supernode_log: Path | None = None,
        per_task: bool = False,
        secret_file: Path | None = None,
    ) -> None:
        self.address = address
        self.poll_s = poll_s
        self.supernode_log = supernode_log
        self.per_task = per_task
        self.watch = None if supernode_log is None else SuperNodeLog(supernode_log)
        self.token = TaskToken()
        self.client = connect(address, self.token, secret_file)
        self.stopping = threading.Event()
        self.busy = False
        """Whether a claimed task is being served (then a stop waits for it)."""

    def stop(self) -> None:
        """Stop after the task being served; at once, when none is. Idle, the executor may
        be inside Flower's runtime API client, which retries an absent SuperNode for as
        long as it is away and never looks at ``stopping``."""
        self.stopping.set()
        if not self.busy:
            stopped(self.address)

    def serve(self) -> None:
        """Claim and serve tasks one at a time until stopped."""
        burst_until = time.monotonic() + BURST_S  # just started: a task may be waiting
        while not self.stopping.is_set():
            claimed = self._acquire()
            if claimed is None:
                if self.watch is None or time.monotonic() < burst_until:
                    self.stopping.wait(self.poll_s)
                elif self.watch.wait(IDLE_ASK_S, self.stopping):
                    burst_until = time.monotonic() + BURST_S
                continue
            self.busy = True
            try:
                if self.per_task:
                    self._serve_in_child(claimed)
                else:
                    self.serve_one(claimed)
            finally:
                self.busy = False

    def _acquire(self) -> str | None:
        """The token of a newly claimed task, or None when there is none."""
        try:
            response = self.client.AcquireTask(
                AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
            )
        except httpx.HTTPError as error:
            log.warning("task query to the runtime API at %s failed: %s", self.address, error)
            self.stopping.wait(QUERY_BACKOFF_S)
            return None
        if not (response.HasField("task") and response.token):
            return None
        return str(response.token)

    def serve_one(self, token: str) -> None:
        """Serve the claimed task whose token is ``token``."""
        started = time.perf_counter()
        self.token.value = token
        try:
            with Heartbeat(self.client):
                status = self._run_task()
        finally:
            self.token.value = None
        log.info("task %s by pid %d in %.3f s", status, os.getpid(), time.perf_counter() - started)

    def _run_task(self) -> str:
        """Pull, run the app, push the reply and the task's status; returns that status."""
        task: TaskInput | None = None
        reply: Message | None = None
        status, details = SubStatus.FAILED, "ClientApp task failed"
        try:
            task = pull_task_input(self.client)
            config = task.context.node_config, task.context.run_config
            check_task(*config, task.fab.content, task.run.run_id)
            reply = installed_client_app()(message=task.message, context=task.context)
            status, details = SubStatus.COMPLETED, ""
        except RefusedTask as error:  # logged by the gate, without a traceback
            details = str(error)
            reply = error_reply(task.message, error) if task is not None else None
        except Exception as error:
            log.exception("ClientApp task failed")
            details = f"{type(error).__name__}: {error}"
            if task is not None:
                reply = error_reply(task.message, error)
        context = None if task is None else task.context
        if reply is not None and context is not None:
            try:
                push_message(self.client, reply, context)
            except Exception as error:
                log.exception("pushing the reply failed")
                status, details = SubStatus.FAILED, f"pushing the reply failed: {error}"
        push_task_output(self.client, context, status, details)  # also stores context.state
        return status

    def _serve_in_child(self, token: str) -> None:
        """Serve the claimed task in a fresh interpreter, which exits when it is done."""
        command = [*warm_executor_command(self.address, self.poll_s), "--one-task"]
        done = subprocess.run(command, env={**os.environ, FIRST_TOKEN_ENV: token}, check=False)
        if done.returncode != 0:
            log.error("the task's process exited with %d", done.returncode)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="collabfl.flower.warm_executor", description=__doc__)
    p.add_argument("--runtime-api", required=True, help="the SuperNode's HOST:PORT (--port)")
    p.add_argument("--poll", type=float, default=0.1, help="seconds between empty task polls")
    p.add_argument(
        "--supernode-log", type=Path, help="the SuperNode's log: ask for tasks when it says so"
    )
    p.add_argument("--per-task", action="store_true", help="serve each task in a fresh process")
    p.add_argument("--one-task", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--superexec-secret-file", type=Path, help="sign task claims with this secret (0600)"
    )
    return p


def main(argv: list[str] | None = None) -> NoReturn:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per task poll
    logging.getLogger("flwr").propagate = False  # it prints through its own handler
    executor = WarmExecutor(
        args.runtime_api, args.poll, args.supernode_log, args.per_task, args.superexec_secret_file
    )
    try:
        if args.one_task:  # a --per-task executor's child: one claimed task, then exit
            executor.serve_one(os.environ.pop(FIRST_TOKEN_ENV))
        else:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: executor.stop())
            if not args.per_task:
                started = time.perf_counter()
                importlib.import_module(PRELOADED)
                log.info("loaded %s in %.1f s", PRELOADED, time.perf_counter() - started)
            log.info("serving %s as pid %d (poll %.3f s)", args.runtime_api, os.getpid(), args.poll)
            executor.serve()
    finally:
        executor.client.close()
    if args.one_task:
        exit_now()
    stopped(args.runtime_api)


def stopped(address: str) -> NoReturn:
    """Say that the executor stopped on request, and exit."""
    log.info("stopped serving %s", address)
    exit_now()


def exit_now() -> NoReturn:
    """Exit without the interpreter's teardown, which has nothing left to do here: every
    task pushed its reply and state before it returned. Collecting a heap that holds torch,
    Flower and a run's models took an executor about a CPU-second, paid on every task by a
    ``--per-task`` child and, in a 32-client federation on two cores, by 32 executors at
    once, longer than their daemons' 10 s grace. Called from a signal handler too: the
    exit happens even if flushing the logs fails there."""
    try:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
