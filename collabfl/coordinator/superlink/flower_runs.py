"""Flower runs as the run launcher keeps them: the app it submits, the Flower run id it
records, and the follower copying a run's ServerApp log into the run's folder. The calls
themselves are the daemon's own (coordinator/superlink/superlink_control.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path

from flwr.cli.build import build_fab_from_disk
from flwr.common.serde import fab_to_proto
from flwr.proto.fab_pb2 import Fab as FabProto
from flwr.supercore.fab import Fab

from collabfl.coordinator.superlink.superlink_control import ControlError, LogStream

log = logging.getLogger("collabfl.coordinator")

STOP_FOLLOWER_S = 5.0
"""How long stopping a follower waits for its thread, which its stream's hang-up wakes."""


def app_fab(app_dir: Path) -> FabProto:
    """The app folder as the FAB ``flwr run`` would submit: built once, sent with every run."""
    content = build_fab_from_disk(app_dir)
    return fab_to_proto(Fab(hashlib.sha256(content).hexdigest(), content, {}))


def flower_run_record(flower_run: int) -> str:
    """What the launcher keeps of a launch (``launch.flower_run_file``): its Flower run id,
    under the key of the reply of ``flwr run --format json`` that older releases kept."""
    return json.dumps({"run-id": str(flower_run)})


def recorded_flower_run(record: str) -> int:
    """The Flower run id in a kept record (``flower_run_record``, or an older release's
    ``flwr run`` reply); ValueError if there is none."""
    try:
        run_id = json.loads(record).get("run-id")
    except (ValueError, AttributeError):
        run_id = None
    if not isinstance(run_id, str) or not run_id.isdigit():
        raise ValueError(f"no Flower run id in {' '.join(record.split())[:200]!r}")
    return int(run_id)


class LogFollower:
    """Appends a Flower run's ServerApp log to ``path`` on a thread of its own, from the
    run's start (a relaunch's log follows the previous one's) until the stream ends: the run
    ended, the SuperLink went away, or ``stop``."""

    def __init__(self, stream: LogStream, path: Path) -> None:
        self.stream = stream
        self.path = path
        self._stopping = False
        self.thread = threading.Thread(
            target=self._copy, name=f"serverapp-log-{stream.run_id}", daemon=True
        )
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self) -> None:
        self._stopping = True
        self.stream.close()
        self.thread.join(timeout=STOP_FOLLOWER_S)

    def _copy(self) -> None:
        try:
            with open(self.path, "ab", buffering=0) as out:  # appended: rotate_copy empties it
                for text in self.stream:
                    out.write(text.encode(errors="replace"))
        except (ControlError, OSError) as error:
            if not self._stopping:
                log.info("Flower run %s: its log stream ended: %s", self.stream.run_id, error)
