"""Start the ServerApp of the coordinator's own runs, and of nothing else.

In its default isolation Flower's SuperLink starts a SuperExec that claims every ServerApp
task without a credential and runs ``flwr-serverapp --token <hex>``: the token that acts as
the run's ServerApp sits in ``ps`` for every local user for the whole run, and whatever app
anyone submits through the Control API (which asks for no credential) runs as the
coordinator's user. The coordinator runs its SuperLink with ``--isolation process`` and this
launcher in the SuperExec's place. It claims tasks with the SuperExec secret
(flower/superexec_auth.py), starts a ServerApp only for a Flower run the coordinator itself
submitted, and hands that ServerApp its token in a 0600 file (``--token-file``), never on a
command line.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx
from flwr.proto.runtime_pb2 import AcquireTaskRequest
from flwr.supercore.constant import TaskType
from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient

from collabfl.flower.serverapp_template import ForkedServerApp, ServerAppTemplate
from collabfl.flower.superexec_auth import claim_signer
from collabfl.kernel.atomic import write_text
from collabfl.kernel.log_rotation import rotate_copy

log = logging.getLogger(__name__)

CLAIM_POLL_S = 0.1
"""How often the launcher asks for a ServerApp task while a submission of the coordinator
awaits its ServerApp (Flower's SuperExec: 1 s, always)."""
IDLE_CLAIM_S = 2.0
"""How often it asks otherwise. Every ask is an authenticated call that writes the
SuperLink's database; at ``CLAIM_POLL_S`` all the time it was a third of the SuperLink's
calls in a 4-client DPFL run. A task nobody announced (one the SuperLink put back after a
failed start, a foreign submission to refuse) waits this long at most."""
UNREACHABLE_RETRY_S = 0.1
"""How soon a claim is tried again while the SuperLink does not accept connections yet (it
starts beside this launcher). A refused loopback connect costs nothing; Flower's retry
invoker instead backed off 0.4, 0.8, 2.5, 5 s..., so a SuperLink listening 5.7 s after the
daemon started was first asked 14.9 s after, and a run submitted meanwhile waited."""
OWN_RUN_WAIT_S = 60.0
"""How long a claimed task may wait for the run launcher to tell the coordinator its run
id: the task can reach this launcher before the StartRun call that submitted it returns.
Also how long an announced submission keeps the launcher asking every ``CLAIM_POLL_S``."""
TEMPLATE_WAIT_S = 300.0
"""How long a claimed task may wait for the ServerApp template to fork its ServerApp: the
template imports the ServerApp first (seconds; on a loaded 2-core machine, tens)."""


class SubmittedRuns:
    """The Flower run ids the coordinator submitted, shared by its run launcher (which
    announces each submission and adds its id) and the ServerApp launcher (which waits for
    them, and claims tasks often only while a submission awaits its ServerApp)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._ids: set[int] = set()
        self._changed = threading.Condition()
        self._clock = clock
        self._expected: list[float] = []
        """When each announced submission stops being awaited (its task unclaimed)."""
        self._unidentified: list[float] = []
        """When each announced submission whose Flower run id is not known yet stops being
        waited for: while none is, a task of an unknown run is foreign at once."""

    def expect(self) -> None:
        """A submission starts: its ServerApp task will appear soon."""
        with self._changed:
            deadline = self._clock() + OWN_RUN_WAIT_S
            self._expected.append(deadline)
            self._unidentified.append(deadline)
            self._changed.notify_all()

    def abandon(self) -> None:
        """The oldest announced submission failed: no task and no run id will come of it."""
        with self._changed:
            del self._expected[:1]
            del self._unidentified[:1]
            self._changed.notify_all()

    def claimed(self) -> None:
        """The oldest awaited submission got its ServerApp."""
        with self._changed:
            del self._expected[:1]

    def expecting(self) -> bool:
        """Whether a submission awaits its ServerApp (announced within ``OWN_RUN_WAIT_S``)."""
        with self._changed:
            now = self._clock()
            self._expected = [until for until in self._expected if until > now]
            return bool(self._expected)

    def wait_expected(self, timeout_s: float, stopping: threading.Event) -> None:
        """Return once a submission is announced, ``stopping`` is set (then ``wake``), or
        ``timeout_s`` passed."""
        with self._changed:
            self._changed.wait_for(lambda: self._expected or stopping.is_set(), timeout_s)

    def wake(self) -> None:
        """Make every ``wait_expected`` look at its ``stopping`` again."""
        with self._changed:
            self._changed.notify_all()

    def add(self, flower_run_id: int) -> None:
        """The oldest announced submission got its Flower run id."""
        with self._changed:
            self._ids.add(flower_run_id)
            del self._unidentified[:1]
            self._changed.notify_all()

    def wait_for(self, flower_run_id: int, timeout_s: float) -> bool:
        """Whether the coordinator submitted ``flower_run_id``: waits (up to ``timeout_s``)
        only while a submission of its own still lacks its id, so a stranger's run is known
        as one at once, or as soon as the coordinator's own submission names its run."""
        with self._changed:
            self._changed.wait_for(
                lambda: flower_run_id in self._ids or not self._awaiting_id(), timeout_s
            )
            return flower_run_id in self._ids

    def _awaiting_id(self) -> bool:
        now = self._clock()
        self._unidentified = [until for until in self._unidentified if until > now]
        return bool(self._unidentified)


class ServerAppLauncher:
    """Claims the SuperLink's ServerApp tasks and starts one ``flwr-serverapp`` for each
    run in ``submitted``; refuses (never starts) any other."""

    def __init__(
        self,
        runtime_api: str,
        root_certificates: Path | None,
        secret_file: Path,
        submitted: SubmittedRuns,
        token_dir: Path,
        log_path: Path,
        env: Mapping[str, str],
        on_foreign: Callable[[int], None] = lambda flower_run_id: None,
        preload: Sequence[str] = (),
    ) -> None:
        """``on_foreign`` hears of each foreign Flower run once, when it is first refused
        (the coordinator records an event naming it and stops it). ``preload``: the modules
        every ServerApp imports (the app's own), which the template imports once."""
        self.on_foreign = on_foreign
        self.refused: set[int] = set()
        self.runtime_api = runtime_api
        self.root_certificates = root_certificates
        self.submitted = submitted
        self.token_dir = token_dir
        self.log_path = log_path
        self.template = ServerAppTemplate(preload, env, log_path)
        self.stopping = threading.Event()
        self.children: dict[Path, ForkedServerApp] = {}
        once = make_simple_http_retry_invoker()
        once.max_tries = 1  # the claim loop asks again itself (``UNREACHABLE_RETRY_S``)
        self.client = RuntimeHttpClient.from_server_address(
            server_address=runtime_api,
            insecure=root_certificates is None,
            root_certificates=None if root_certificates is None else root_certificates.read_bytes(),
            interceptors=[
                RuntimeVersionHttpInterceptor(component_name="SuperExec"),
                claim_signer(secret_file),
            ],
            retry_invoker=once,
        )
        self._thread = threading.Thread(target=self._serve, name="serverapp-launcher", daemon=True)

    def start(self) -> None:
        self.token_dir.mkdir(mode=0o700, exist_ok=True)
        self.template.start()
        self._thread.start()

    def stop(self) -> None:
        """Stop claiming and end every ServerApp this launcher started."""
        self.stopping.set()
        self.submitted.wake()
        self.template.stop()  # first: a claim waiting on it gives up, and the loop ends
        self._thread.join()
        for child in self.children.values():
            child.terminate()
        for token_file, child in self.children.items():
            try:
                child.wait(timeout=10)
            except TimeoutError:
                child.kill()
            token_file.unlink(missing_ok=True)
        self.client.close()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            self._reap()
            try:
                claimed = self.client.AcquireTask(
                    AcquireTaskRequest(supported_task_types=[TaskType.SERVER_APP])
                )
            except httpx.TransportError as error:
                log.debug("SuperLink runtime API not reachable yet: %s", error)
                self.stopping.wait(UNREACHABLE_RETRY_S)
                continue
            except httpx.HTTPError as error:
                log.debug("SuperLink runtime API refused a claim: %s", error)
                self.stopping.wait(1.0)
                continue
            except Exception:  # a refusal from Flower (e.g. a wrong secret): say it, go on
                log.exception("claiming a ServerApp task failed")
                self.stopping.wait(1.0)
                continue
            if claimed.HasField("task") and claimed.token:
                self._launch(claimed.task.task_id, claimed.task.run_id, claimed.token)
            elif self.submitted.expecting():
                self.stopping.wait(CLAIM_POLL_S)
            else:
                self.submitted.wait_expected(IDLE_CLAIM_S, self.stopping)

    def _launch(self, task_id: int, flower_run_id: int, token: str) -> None:
        if flower_run_id in self.refused or not self.submitted.wait_for(
            flower_run_id, OWN_RUN_WAIT_S
        ):
            self._refuse(flower_run_id)
            return
        self.submitted.claimed()
        token_file = self.token_dir / f"task-{task_id}.token"
        write_text(token_file, token)  # 0600
        flags = [
            "--runtime-api-address", self.runtime_api,
            "--token-file", str(token_file), "--parent-pid", str(os.getpid()),
        ]  # fmt: skip
        if self.root_certificates is None:
            flags.append("--insecure")
        else:
            flags += ["--root-certificates", str(self.root_certificates)]
        try:
            child = self.template.fork(flags, self.log_path, TEMPLATE_WAIT_S)
        except RuntimeError as error:
            log.error("the ServerApp of Flower run %s did not start: %s", flower_run_id, error)
            token_file.unlink(missing_ok=True)
            return
        self.children[token_file] = child
        log.info(
            "started the ServerApp of Flower run %s (task %s, pid %s)",
            flower_run_id, task_id, child.pid,
        )  # fmt: skip

    def _refuse(self, flower_run_id: int) -> None:
        """Never start a run the coordinator did not submit, and never wait on it again."""
        if flower_run_id in self.refused:
            return
        self.refused.add(flower_run_id)
        log.error(
            "REFUSED the ServerApp of Flower run %s: the coordinator did not submit it "
            "(a run submitted through the Control API by someone else); nothing of it runs",
            flower_run_id,
        )
        try:
            self.on_foreign(flower_run_id)
        except Exception:  # the refusal stands whatever the report does
            log.exception("reporting foreign Flower run %s failed", flower_run_id)

    def _reap(self) -> None:
        """Forget ServerApps that ended, and delete their token files; rotate their log."""
        rotate_copy(self.log_path)
        for token_file, child in list(self.children.items()):
            if child.poll() is not None:
                token_file.unlink(missing_ok=True)
                del self.children[token_file]
