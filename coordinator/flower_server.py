"""The Flower ServerApp: drives a method's round protocol across a real federation.

It runs next to the SuperLink (started by the coordinator daemon through ``flwr run``),
reads the run's config from the coordinator service, lets the clients join (a ``setup``
message tells each the run's settings and returns its identity, sample count and peer
address), then runs the same strategy code as the in-process runtime through
``FlowerClientPool``. Every completed round is recorded in the coordinator service and in
the same run directory ``collabfl simulate`` writes. A stop requested by an operator is
honoured between rounds.

Run config keys: ``run-id``, ``coordinator`` (address of the coordinator service),
``out-dir``, ``expected-clients``, ``join-timeout``, ``message-timeout``, ``grant-ttl``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from collabfl.client.flat import FlatModel
from collabfl.client.models import build_model
from collabfl.coordinator.config import validate_config
from collabfl.coordinator.experiment import model_name, write_comparison
from collabfl.coordinator.flower_pool import FlowerClientPool, exchange
from collabfl.coordinator.methods import MethodSpec, build_method, parse_method_spec
from collabfl.coordinator.recording import MethodRecorder, safe_name
from collabfl.coordinator.service import CoordinatorClient
from collabfl.coordinator.state import Member

log = logging.getLogger(__name__)

app = ServerApp()


class StopRequested(Exception):
    """An operator asked the run to stop."""


@app.main()
def main(grid: Grid, context: Context) -> None:
    settings = dict(context.run_config)
    run_id = str(settings["run-id"])
    with CoordinatorClient(str(settings["coordinator"]), timeout_s=30) as coordinator:
        run = coordinator.get_run(run_id)
        try:
            config = validate_config(run.config["experiment"])
            spec = parse_method_spec(run.method, config)
            drive(grid, coordinator, run_id, spec, settings)
        except StopRequested:
            coordinator.finish_run(run_id, "stopped", "stopped by an operator")
        except Exception as error:
            log.exception("run %s failed", run_id)
            coordinator.finish_run(run_id, "failed", f"{type(error).__name__}: {error}")
            raise
        else:
            coordinator.finish_run(run_id, "finished")


def drive(
    grid: Grid,
    coordinator: CoordinatorClient,
    run_id: str,
    spec: MethodSpec,
    settings: dict[str, Any],
) -> None:
    """Join the clients, run every round, record it, and write the run directory."""
    members, num_classes = join(grid, run_id, spec, settings)
    coordinator.register_members(members)
    ttl = float(settings.get("grant-ttl", 600))

    def issue(fetcher: int, owners, round_index: int):
        return coordinator.issue_grants(run_id, round_index, fetcher, owners, ttl)

    def on_event(round_index: int, kind: str, client_id: int, message: str) -> None:
        log.warning("round %s client %s: %s: %s", round_index, client_id, kind, message)
        coordinator.record_event(run_id, kind, message, round=round_index, client_id=client_id)

    pool = FlowerClientPool(
        grid, members, issue, on_event, timeout_s=float(settings.get("message-timeout", 600))
    )
    model = model_name(spec.config)
    model_bytes = FlatModel(build_model(model, num_classes, spec.config.seed)).nbytes
    out_dir = Path(str(settings["out-dir"]))
    run_dir = out_dir / safe_name(spec.label)
    recorder = MethodRecorder(spec, run_dir, len(members), model, model_bytes)
    started = time.perf_counter()
    for outcome in build_method(spec, len(members)).rounds(pool, spec.config.rounds):
        rows = recorder.record(outcome, pool.take_coordinator_bytes())
        metrics = {row["client"]: row for row in rows}
        run = coordinator.record_round(
            run_id, outcome.round, outcome.graph or [], metrics, num_clients=len(members)
        )
        if run.status == "stopping":
            raise StopRequested
    summary = recorder.finish(time.perf_counter() - started)
    write_comparison(out_dir, [summary], {spec.label: run_dir})


def join(
    grid: Grid, run_id: str, spec: MethodSpec, settings: dict[str, Any]
) -> tuple[list[Member], int]:
    """Wait for the expected clients, send them the run's settings, collect who they are."""
    expected = int(settings.get("expected-clients", 1))
    deadline = time.monotonic() + float(settings.get("join-timeout", 120))
    nodes = list(grid.get_node_ids())
    while len(nodes) < expected and time.monotonic() < deadline:
        time.sleep(0.5)
        nodes = list(grid.get_node_ids())
    config = spec.config
    setup = ConfigRecord(
        {
            "run_id": run_id,
            "seed": config.seed,
            "model": model_name(config),
            "device": config.device,
            "threads": config.threads,
            "training": config.training.model_dump_json(),
        }
    )
    messages = [
        Message(RecordDict({"config": setup}), dst_node_id=node, message_type="query.setup")
        for node in nodes
    ]
    timeout = max(deadline - time.monotonic(), 30.0)
    members, classes = [], set()
    for node, content in exchange(grid, messages, timeout, 0.25).items():
        if isinstance(content, str):
            log.warning("node %s failed to join: %s", node, content)
            continue
        described = content["metrics"]
        members.append(
            Member(
                client_id=int(described["client_id"]),
                flower_node_id=node,
                peer_address=str(described["peer_address"]),
                num_samples=int(described["num_samples"]),
            )
        )
        classes.add(int(described["num_classes"]))
    if not members:
        raise RuntimeError(f"no client joined within the join timeout ({len(nodes)} nodes seen)")
    if len(classes) != 1:
        raise RuntimeError(f"clients disagree on the number of classes: {sorted(classes)}")
    ids = [m.client_id for m in members]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"two nodes claim the same client id: {sorted(ids)}")
    return sorted(members, key=lambda m: m.client_id), classes.pop()
