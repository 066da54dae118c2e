"""Launching the ServerApp of every active run: a Flower run started on the coordinator's
SuperLink (a Control API call of the daemon's own), a fresh launch token each time, and the
Flower run's log followed into the run's folder.

A run whose ServerApp dies while the run is still active (a SuperLink or coordinator
restart) is launched again and resumes after its last completed round, ``MAX_LAUNCHES``
times at most.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from flwr.proto.fab_pb2 import Fab

from collabfl.coordinator.enrolment.coordinator_pki import CoordinatorTLSFiles
from collabfl.coordinator.gateway.doorbell import Doorbell
from collabfl.coordinator.settings import CoordinatorSettings, public_names
from collabfl.coordinator.store.state import CoordinatorState, Run
from collabfl.coordinator.superlink.flower_runs import (
    LogFollower,
    flower_run_record,
    recorded_flower_run,
)
from collabfl.coordinator.superlink.launch import (
    Launch,
    flower_run_file,
    launch_app_config,
    remove_old_run_configs,
    write_enrolled_sizes,
    write_launch_token,
)
from collabfl.coordinator.superlink.superlink_control import (
    ControlError,
    SuperLinkControl,
    SuperLinkUnreachable,
)
from collabfl.engine.run_options import flower_app_config
from collabfl.flower.binding import format_bindings
from collabfl.flower.serverapp_launcher import SubmittedRuns
from collabfl.kernel.atomic import write_text
from collabfl.kernel.log_rotation import rotate_copy
from collabfl.kernel.tickets import TicketSigner

log = logging.getLogger("collabfl.coordinator")

APP_NAME = "collabfl-federation"
SERVERAPP = "collabfl.apps.server_app:app"
"""The app's ServerApp component: a module of the installed collabfl, and its object."""
MAX_LAUNCHES = 4
CHECK_RUNS_S = 1.0
"""How often the launcher looks for runs to launch when nothing tells it: a new run rings
the ``runs`` doorbell and is launched at once; a ServerApp that died is noticed on this clock."""


def write_app(state_dir: Path) -> Path:
    """The Flower app folder submitted as each run's FAB (``flower_runs.app_fab``):
    components live in the installed package."""
    app_dir = state_dir / "app"
    app_dir.mkdir(parents=True, exist_ok=True)
    write_text(
        app_dir / "pyproject.toml",
        f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{APP_NAME}"
version = "1.0.0"
description = "collabfl round protocols (components come from the installed collabfl)"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "collabfl"

[tool.flwr.app.components]
serverapp = "{SERVERAPP}"
clientapp = "collabfl.apps.client_app:app"

[tool.flwr.app.config]
{launch_app_config()}
{flower_app_config()}
""",
    )
    return app_dir


def service_launch(
    settings: CoordinatorSettings, files: CoordinatorTLSFiles | None, port: int
) -> Launch:
    """The launch entries every ServerApp gets: where the service is and, with TLS
    (``files``), the coordinator's own certificate to dial it with."""
    address = settings.advertise or f"{public_names(settings)[0]}:{port}"
    if files is None:
        return Launch(coordinator=address)
    return Launch(
        coordinator=address,
        coordinator_ca=str(files.ca.resolve()),
        coordinator_cert=str(files.cert.resolve()),
        coordinator_key=str(files.key.resolve()),
    )


class RunLauncher:
    """Starts (and restarts) the ServerApp of every active run and follows its log.

    Each launch mints the run's launch token (older ServerApps of the run can no longer
    write), starts a Flower run of the app ``fab`` (``flower_runs.app_fab``) through
    ``control``, keeps its id in the state directory (``flower_run_file``) and follows its log
    into serverapp.log; when the follower ends (the run ended, or the SuperLink went away) and
    the run is still active, it launches again.

    ``service``: the launch entries every ServerApp gets (service address, TLS files).
    ``wake``: rung when a run is created, so that it launches without waiting for the clock.
    ``superlink_ready``: clear while a restarted SuperLink is given the SuperNode keys again
    (coordinator/superlink/supernode_restore.py); nothing launches then, so that no ServerApp gets
    the node ids of the SuperLink that died.
    """

    def __init__(
        self,
        state: CoordinatorState,
        state_dir: Path,
        runs_dir: Path,
        fab: Fab,
        control: SuperLinkControl,
        service: Launch,
        tickets: TicketSigner,
        ticket_ttl_s: float,
        wake: Doorbell | None = None,
        check_every_s: float = CHECK_RUNS_S,
        submitted: SubmittedRuns | None = None,
        enrolled_sizes: Callable[[], Mapping[int, int]] = dict,
        superlink_ready: threading.Event | None = None,
    ) -> None:
        self.state = state
        if superlink_ready is None:
            superlink_ready = threading.Event()
            superlink_ready.set()
        self.superlink_ready = superlink_ready
        self.enrolled_sizes = enrolled_sizes
        self.submitted = submitted or SubmittedRuns()
        self.wake = wake or Doorbell()
        self.check_every_s = check_every_s
        self.tickets = tickets
        self.ticket_ttl_s = ticket_ttl_s
        self.state_dir = state_dir
        self.runs_dir = runs_dir
        self.fab = fab
        self.control = control
        self.service = service
        self.running: dict[str, LogFollower] = {}
        self.logs: dict[str, Path] = {}  # run id -> its serverapp.log, rotated by size
        self.launches: dict[str, int] = {}
        self.waiting_for_superlink: set[str] = set()  # runs whose launch found no SuperLink
        self.stop_event = threading.Event()
        if removed := remove_old_run_configs(state_dir):
            log.info("removed %d run-config files an earlier release left", len(removed))

    def loop(self) -> None:
        seen = self.wake.count
        while not self.stop_event.is_set():
            try:
                self.check_runs()
            except Exception:  # e.g. the database went away: keep trying
                log.exception("run launcher: checking runs failed; retrying")
            seen = self.wake.wait(seen, self.check_every_s)

    def check_runs(self) -> None:
        """Launch every active run that has no live ServerApp (new, or its ServerApp died).

        Each run on its own: one that cannot launch (a stored request no ServerApp could run)
        is failed with the reason, and the others still launch.
        """
        for run in self.state.runs():
            follower = self.running.get(run.run_id)
            live = follower is not None and follower.alive()
            if live:
                rotate_copy(self.logs[run.run_id])
            if not run.active or live:
                continue
            if not self.superlink_ready.is_set():
                continue
            if self.launches.get(run.run_id, 0) >= MAX_LAUNCHES:
                self.state.finish_run(run.run_id, "failed", "the ServerApp kept dying")
                continue
            try:
                self.launch(run)
            except ValueError as error:
                log.error("run %s cannot be launched: %s", run.run_id, error)
                self.state.finish_run(run.run_id, "failed", f"invalid run request: {error}")
            except Exception:
                log.exception("run %s: launching failed; retrying", run.run_id)

    def launch(self, run: Run) -> None:
        """Launch the run's ServerApp; ValueError if its stored request cannot run."""
        if self.superlink_still_unreachable(run.run_id):
            return  # the next check asks again
        # Imported at the first launch, if the service's CreateRun has not done it yet (a run
        # resumed after a restart): it imports torch, whose CPU-second clients starting
        # beside the coordinator need to join.
        from collabfl.engine.methods import read_run_request

        count = self.launches[run.run_id] = self.launches.get(run.run_id, 0) + 1
        _, options = read_run_request(run.method, run.config)
        out_dir = options.run_dir(self.runs_dir, run.run_id)
        out_dir.mkdir(parents=True, exist_ok=True)
        options = options.model_copy(update={"out_dir": str(out_dir)})
        token = self.state.new_launch(run.run_id)  # from here on, older ServerApps are stale
        launch = replace(
            self.service,
            run_id=run.run_id,
            launch_token_file=str(write_launch_token(self.state_dir, run.run_id, token)),
            run_ticket=self.tickets.issue(run.run_id, self.ticket_ttl_s),
            node_bindings=format_bindings(self.state.supernode_bindings()),
            enrolled_sizes_file=str(
                write_enrolled_sizes(self.state_dir, run.run_id, self.enrolled_sizes())
            ),
        )
        settings = {**launch.to_run_config(), **options.to_run_config()}
        record_path = flower_run_file(self.state_dir, run.run_id)
        try:
            self.stop_previous(run.run_id, record_path)
            log.info("launching run %s (attempt %s)", run.run_id, count)
            flower_run = self.submit(settings)
        except SuperLinkUnreachable as error:
            self.launches[run.run_id] -= 1  # it never reached the SuperLink: not a launch
            if run.run_id not in self.waiting_for_superlink:
                self.waiting_for_superlink.add(run.run_id)
                log.info("run %s waits for the SuperLink to listen: %s", run.run_id, error)
            return  # the next check tries again, as often as it takes
        except ControlError as error:
            log.error("run %s: the ServerApp was not started: %s", run.run_id, error)
            return  # no follower: the next check launches it again, up to MAX_LAUNCHES
        self.waiting_for_superlink.discard(run.run_id)
        write_text(record_path, flower_run_record(flower_run))
        log.info("run %s: Flower run %s, log in %s", run.run_id, flower_run, out_dir)
        self.logs[run.run_id] = out_dir / "serverapp.log"
        stream = self.control.log_stream(flower_run)
        self.running[run.run_id] = LogFollower(stream, self.logs[run.run_id])

    def superlink_still_unreachable(self, run_id: str) -> bool:
        """Whether the SuperLink that ``run_id``'s last launch found not listening still is not.

        Asked before a launch mints again: a SuperLink down for an hour then costs one cheap
        Control API call a check, not a launch token written to the database, two files and
        a signed ticket each second.
        """
        if run_id not in self.waiting_for_superlink:
            return False
        try:
            self.control.nodes()
        except SuperLinkUnreachable:
            return True
        except ControlError:
            pass  # it listens; the launch itself says what else is wrong
        return False

    def submit(self, settings: Mapping[str, str | int | float]) -> int:
        """Start a Flower run of the app with ``settings``; its Flower run id.

        The ServerApp launcher is told to expect it first: the run's task may reach the
        launcher before StartRun's answer reaches us. ControlError if it was not started.
        """
        self.submitted.expect()
        try:
            flower_run = self.control.start_run(self.fab, settings)
        except ControlError:
            self.submitted.abandon()
            raise
        self.submitted.add(flower_run)  # its ServerApp may start now
        return flower_run

    def stop_previous(self, run_id: str, record_path: Path) -> None:
        """Stop the Flower run a previous launch of this run started, if it still runs.

        After a crash its ServerApp may survive and reconnect; two ServerApps must never
        drive the same run. The previous launch kept that run's id (``flower_run_record``).
        """
        if not record_path.exists():
            return
        try:
            previous = recorded_flower_run(record_path.read_text(errors="replace"))
        except ValueError as error:
            log.warning(
                "run %s: cannot read the previous launch's Flower run id from %s (%s); if its "
                "ServerApp still runs, stop it with `flwr stop <run id>`",
                run_id, record_path, error,
            )  # fmt: skip
            return
        try:
            self.control.stop_run(previous)
        except SuperLinkUnreachable:
            raise  # not "not stopped": nobody was asked; the launch waits for the SuperLink
        except ControlError as error:
            log.info("run %s: previous Flower run %s not stopped: %s", run_id, previous, error)
        else:
            log.info("run %s: stopped previous Flower run %s", run_id, previous)

    def foreign_run(self, flower_run_id: int) -> None:
        """A Flower run someone else submitted reached the ServerApp launcher: name it in an
        event and stop it, so it neither stays pending nor is claimed again."""
        self.state.record_event(
            "",
            "foreign_run_refused",
            f"Flower run {flower_run_id} was submitted to the SuperLink by someone other than "
            "this coordinator; its ServerApp was refused (nothing of it ran) and it is stopped",
        )
        threading.Thread(
            target=self._stop_foreign, args=(flower_run_id,), name="foreign-run-stop", daemon=True
        ).start()

    def _stop_foreign(self, flower_run_id: int) -> None:
        try:
            self.control.stop_run(flower_run_id)
        except ControlError as error:
            log.warning("foreign Flower run %s not stopped: %s", flower_run_id, error)
        else:
            log.warning("stopped foreign Flower run %s", flower_run_id)

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.ring()  # the loop ends now, not at its next check
        for follower in self.running.values():
            follower.stop()
