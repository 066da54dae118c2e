"""The Flower ServerApp: drives a method's round protocol across a real federation.

It runs next to the SuperLink (submitted by the coordinator daemon's run launcher),
reads the run's config from the coordinator service, lets the clients join (a ``setup``
message tells each the run's settings and returns its identity, sample count and peer
address), then runs the same strategy code as the in-process runtime through
``FlowerClientPool``. Every completed round is recorded in the coordinator service and in
the same run directory ``collabfl simulate`` writes. A stop requested by an operator is
honoured between rounds.

Each client id is bound to one Flower node for the run (flower/binding.py): a node claiming
an id that another node holds, or that its registered SuperNode key does not carry, is
refused (no instruction, no grant) and recorded as an ``impostor`` event.

Run config keys: the launch's (``coordinator.launch.Launch``: ``run-id``, ``coordinator``,
``launch-token-file``, the TLS files it dials the service with, ``run-ticket`` checked by
every ClientApp, ``node-bindings``: registered ``node:client`` pairs, empty: first come) and
the run's options (``RunOptions``: ``expected-clients``, ``join-timeout``, ...).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from flwr.app import Context, Message
from flwr.serverapp import Grid, ServerApp

from collabfl.apps.exchange import exchange
from collabfl.apps.fleet_signals import CoordinatorSignals, FleetSignals
from collabfl.apps.pool import FlowerClientPool
from collabfl.apps.run_ledger import RunLedger, ServiceLedger
from collabfl.apps.run_setup import (
    SETUP_MESSAGE,
    Description,
    RunSettings,
    decode_description,
    encode_settings,
)
from collabfl.apps.substeps import RelayedSteps
from collabfl.coordinator.store.checkpoints import load_checkpoint, save_checkpoint
from collabfl.coordinator.store.records import Member
from collabfl.coordinator.superlink.launch import Launch
from collabfl.engine.builders import build_method
from collabfl.engine.config import ConfigError, model_name, validate_config
from collabfl.engine.driver import RunStopped, drive
from collabfl.engine.methods import MethodSpec, parse_method_spec
from collabfl.engine.quorum import QuorumLost, run_quorum
from collabfl.engine.recording import MethodRecorder, safe_name
from collabfl.engine.report.coalition_moves import join_clients
from collabfl.engine.report.comparison import write_comparison
from collabfl.engine.report.setting import dataset_text, partition_text
from collabfl.engine.run_options import RunOptions
from collabfl.flower.binding import NodeBinder, parse_bindings
from collabfl.flower.reported_sizes import (
    DeclaredSizes,
    declared_sizes,
    undeclared,
    undeclared_message,
)
from collabfl.flower.run_consistency import FirstCounts
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.printable import shown
from collabfl.strategies.rounds import RoundOutcome

log = logging.getLogger(__name__)

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    launch = Launch.from_run_config(context.run_config)
    run_id = launch.run_id
    options = RunOptions.from_run_config(context.run_config)
    with launch.client(timeout_s=30) as coordinator:
        run = coordinator.get_run(run_id)
        try:
            spec = parse_method_spec(run.method, validate_config(run.config["experiment"]))
        except ValueError as error:  # a config that can never run: fail, don't retry
            coordinator.finish_run(run_id, "failed", f"invalid run config: {error}")
            raise
        try:
            binder = NodeBinder(parse_bindings(launch.node_bindings))
            with contextlib.closing(launch.feeder()) as feeder:
                signals = CoordinatorSignals(coordinator, run_id)
                relay = RelayedSteps(grid, feeder, options.message_timeout_s, signals)
                ledger = ServiceLedger(coordinator, run_id, options.grant_ttl_s)
                status, message = run_federated(
                    grid, ledger, spec, options, binder, relay, signals,
                    enrolled_sizes=launch.enrolled_sizes(),
                )  # fmt: skip
        except ConfigError as error:  # e.g. a client reported an invalid market profile
            coordinator.finish_run(run_id, "failed", str(error))
            raise
        except QuorumLost as error:  # before its first round: no summary to write
            coordinator.finish_run(run_id, "failed", f"the run {error}")
            raise
        except RunStopped:  # while it waited for its quorum, before its first round
            coordinator.finish_run(run_id, "stopped", "stopped by an operator")
        except Exception as error:
            # Leave the run active: the coordinator daemon launches it again and it resumes
            # after its last completed round (a SuperLink restart ends up here).
            log.exception("run %s interrupted", run_id)
            with contextlib.suppress(Exception):
                message = f"{type(error).__name__}: {error}"
                coordinator.record_event(run_id, "interrupted", message, "error")
            raise
        else:
            if status == "stopped":
                coordinator.finish_run(run_id, "stopped", "stopped by an operator")
            elif status == "failed":  # a step failed on every client, or the quorum was lost
                coordinator.finish_run(run_id, "failed", message)
            else:
                coordinator.finish_run(run_id, "finished")


def run_federated(
    grid: Grid,
    ledger: RunLedger,
    spec: MethodSpec,
    options: RunOptions,
    binder: NodeBinder,
    relay: RelayedSteps,
    signals: FleetSignals,
    enrolled_sizes: Mapping[int, int] | None = None,
) -> tuple[str, str]:
    """Join the clients, run every round, record it, and write the run directory; return how
    the run ended ("finished", "stopped" or "failed") and why (a failed run's sentence).
    ``ledger``: the run at its coordinator; ``relay`` carries sub-round steps; ``signals``
    say when to pull replies; ``enrolled_sizes``: the members' training samples declared at
    enrolment."""
    run_id = ledger.run_id
    quorum = run_quorum(spec.name, spec.config.federation, options.expected_clients)
    if spec.config.threads:
        # As the in-process runtime does: the ServerApp's own tensor work (SPO trains its
        # hypernetwork here) on the run's threads. Torch's default, a thread per core,
        # spun against the clients' executors on the same machine.
        torch.set_num_threads(spec.config.threads)
    setup = setup_record(run_id, spec)
    federation = spec.config.federation
    sizes, conflicts = declared_sizes(enrolled_sizes or {}, federation.declared_sizes)
    for client_id, message in conflicts.items():
        ledger.record_event("declared_size", message, client_id=client_id)
    gate = Gate(binder, ledger, DeclaredSizes(sizes, federation.size_tolerance))
    members, num_classes, described = join(grid, setup, options, gate, signals, ledger.say)
    missing = undeclared(spec.name, [m.client_id for m in members], sizes)
    if missing and federation.require_declared_sizes:
        raise ConfigError(f"federation.require_declared_sizes: {undeclared_message(missing)}")
    if missing:
        ledger.record_event("undeclared_sizes", undeclared_message(missing))
    reports = {c: d.market for c, d in described.items() if d.market}
    ledger.register_members(members)
    joined = [m.client_id for m in members]
    shortfall = missing_clients(options.expected_clients, joined, binder.registered.values())
    if shortfall is None:
        ledger.say(f"{len(members)} clients joined")
    else:
        ledger.record_event("fewer_clients", shortfall)
        ledger.say(f"{len(members)} of {options.expected_clients} clients joined")

    model = model_name(spec.config)
    workspace = FlatModel(build_model(model, num_classes, spec.config.seed))
    out_dir = Path(options.out_dir)
    run_dir = out_dir / safe_name(spec.label)
    last = ledger.last_completed_round()
    resume = None if last is None else load_checkpoint(run_dir / "checkpoint", last)
    if resume is not None:
        ledger.record_event("resumed", f"resuming after round {last}", "info")
    # Graphs span client ids 0..n-1 even when some expected client has not joined (yet).
    num_clients = max(options.expected_clients, 1 + max(m.client_id for m in members))
    data, asked = federation_data(described.values()), requested_data(spec)
    if data != asked:
        ledger.record_event("config_rewritten", rewritten(asked, data), "info")
    recorder = MethodRecorder(spec, run_dir, num_clients, model, workspace.nbytes, last, data=data)
    pool = FlowerClientPool(
        grid,
        members,
        ledger,
        Door(grid, setup, gate, signals),
        timeout_s=options.message_timeout_s,
        on_timing=lambda timing: recorder.writer.log_message(asdict(timing)),
        relay=relay,
        signals=signals,
        quorum=quorum,
        max_share=federation.max_share,
        first_counts=gate.counts,
    )
    for k, weight in pool.sample_counts.items():
        if weight < (reported := pool.members[k].num_samples):
            message = f"weighs as {weight} samples, not {reported}: the share cap"
            ledger.record_event("share_capped", message, client_id=k)
    method = build_method(spec, pool.sample_counts, workspace, reports)

    def after_round(outcome: RoundOutcome, rows: list[dict[str, Any]]) -> None:
        """Checkpoint the round, record it in the coordinator service, honour a stop."""
        save_checkpoint(run_dir / "checkpoint", outcome.round, outcome.checkpoint)
        metrics = {row["client"]: row for row in rows}
        graph = outcome.graph or []
        if ledger.record_round(outcome.round, graph, metrics, num_clients, outcome.coalitions):
            raise RunStopped

    try:
        summary = drive(method, pool, spec.config.rounds, recorder, after_round, resume)
    finally:
        pool.close_relay()
    write_comparison(out_dir, [summary], {spec.label: run_dir})
    return str(summary["status"]), str(summary.get("message", ""))


def setup_record(run_id: str, spec: MethodSpec) -> RunSettings:
    """The run settings every client needs before its first instruction."""
    config = spec.config
    return RunSettings(
        run_id=run_id,
        seed=config.seed,
        model=model_name(config),
        device=config.device,
        threads=config.threads,
        training=config.training,
        val_fraction=config.data.val_fraction,
        data_workers=config.data.workers,
    )


@dataclass(frozen=True)
class Gate:
    """The run's node binding and the sizes the operator declared; its refusals
    (``impostor``) and replaced reports (``anomaly``) go to the run's ledger."""

    binder: NodeBinder
    ledger: RunLedger
    sizes: DeclaredSizes = field(default_factory=DeclaredSizes)
    counts: FirstCounts = field(default_factory=FirstCounts)
    """Each member's first reported count in this run: a rejoin is held to it."""


@dataclass(frozen=True)
class Door:
    """The pool's way in for nodes that appear mid-run (apps/pool.py): the run's set-up,
    through its gate."""

    grid: Grid
    setup: RunSettings
    gate: Gate
    signals: FleetSignals
    timeout_s: float = 60.0

    def admit(self, nodes: Sequence[int]) -> list[Member]:
        return admit(self.grid, nodes, self.setup, self.gate, self.timeout_s, self.signals)[0]

    def refused(self, online: Collection[int]) -> Collection[int]:
        return self.gate.binder.refused(online)


def admit(
    grid: Grid,
    nodes: Sequence[int],
    setup: RunSettings,
    gate: Gate,
    timeout_s: float,
    signals: FleetSignals,
) -> tuple[list[Member], set[int], dict[int, Description]]:
    """Send the set-up to ``nodes``; return the members that answered and may speak for the
    client id they claim, their class counts and, per client id, what it said of itself
    (its data; for markets, iPFL cost and eagerness)."""
    messages = [
        Message(encode_settings(setup), dst_node_id=node, message_type=SETUP_MESSAGE)
        for node in nodes
    ]
    members, classes, described = [], set(), {}
    answers = exchange(grid, messages, timeout_s, signals)
    online = set(grid.get_node_ids())
    for node, answer in answers.items():
        content = answer.content
        if isinstance(content, str):
            log.warning("node %s failed to join: %s", node, shown(content))
            continue
        try:
            description = decode_description(content)
        except ValueError as error:
            log.warning("node %s sent an unusable description: %s", node, error)
            continue
        client_id = description.client_id
        refusal = gate.binder.claim(node, client_id, online, description.peer_address)
        if refusal is not None:
            gate.ledger.record_event("impostor", refusal, client_id=client_id)
            continue
        num_samples, replaced = gate.counts.admit(
            client_id, description.num_samples, partial(gate.sizes.admit, client_id)
        )
        if replaced is not None:
            gate.ledger.record_event("anomaly", replaced, client_id=client_id)
        members.append(
            Member(
                client_id=client_id,
                flower_node_id=node,
                peer_address=description.peer_address,
                num_samples=num_samples,
            )
        )
        classes.add(description.num_classes)
        described[description.client_id] = description
    return members, classes, described


def join(
    grid: Grid,
    setup: RunSettings,
    options: RunOptions,
    gate: Gate,
    signals: FleetSignals,
    say: Callable[[str], None] = lambda message: None,
) -> tuple[list[Member], int, dict[int, Description]]:
    """Wait for the expected clients, send them the run's settings, collect who they are.
    ``say`` gets the run's status line while it waits."""
    deadline = time.monotonic() + options.join_timeout_s
    nodes = wait_for_nodes(grid, options.expected_clients, deadline, say)
    timeout_s = max(deadline - time.monotonic(), 30.0)
    members, classes, described = admit(grid, nodes, setup, gate, timeout_s, signals)
    if not members:
        raise RuntimeError(f"no client joined within the join timeout ({len(nodes)} nodes seen)")
    if len(classes) != 1:
        raise RuntimeError(f"clients disagree on the number of classes: {sorted(classes)}")
    return sorted(members, key=lambda m: m.client_id), classes.pop(), described


SAY_EVERY_S = 5.0
"""How often the waiting line's countdown is refreshed (and at once when a client comes)."""


def wait_for_nodes(
    grid: Grid, expected: int, deadline: float, say: Callable[[str], None]
) -> list[int]:
    """The Flower nodes online once ``expected`` are, or at ``deadline`` (monotonic); while
    waiting, ``say`` gets "waiting for clients: 3/4 joined, 87 s left" as it changes."""
    nodes = list(grid.get_node_ids())
    said: tuple[int, float] | None = None
    while len(nodes) < expected and (now := time.monotonic()) < deadline:
        if said is None or said[0] != len(nodes) or now - said[1] >= SAY_EVERY_S:
            left = math.ceil(deadline - now)
            say(f"waiting for clients: {len(nodes)}/{expected} joined, {left} s left")
            said = (len(nodes), now)
        time.sleep(0.5)
        nodes = list(grid.get_node_ids())
    return nodes


def missing_clients(expected: int, joined: Sequence[int], known: Iterable[int]) -> str | None:
    """None when at least ``expected`` clients joined; else the event's message, naming the
    clients missing among ``known`` (those with a registered SuperNode key)."""
    if len(joined) >= expected:
        return None
    absent = sorted(set(known) - set(joined))
    unnamed = expected - len(joined) - len(absent)
    named = [f"client {c}" for c in absent]
    if unnamed > 0:
        named.append(f"{unnamed} client{'s' if unnamed > 1 else ''} not known by id")
    return (
        f"started with {len(joined)} of the {expected} clients asked for (--clients) when the "
        f"join timeout ran out; missing: {', '.join(named)}"
    )


def federation_data(described: Iterable[Description]) -> dict[str, Any]:
    """The run config's ``data`` as it was: the clients that joined at the start and what
    their data files say (a name they all share, else each name with its clients), not the
    TOML's defaults, which a federation does not use."""
    clients = list(described)

    def common(field: str) -> str:
        names: dict[str, list[int]] = {}
        for d in clients:
            names.setdefault(getattr(d, field) or "unnamed", []).append(d.client_id)
        if len(names) == 1:
            return next(iter(names))
        return "; ".join(
            f"{name} (clients {join_clients(sorted(ids))})" for name, ids in sorted(names.items())
        )

    return {
        "num_clients": len(clients),
        "dataset": common("dataset"),
        "partition": common("partition"),
    }


def requested_data(spec: MethodSpec) -> dict[str, Any]:
    """What the run's config says of its data, in ``federation_data``'s terms."""
    data = spec.config.data.model_dump(mode="json")
    return {
        "num_clients": data["num_clients"],
        "dataset": dataset_text(data),
        "partition": partition_text(data),
    }


def rewritten(asked: dict[str, Any], data: dict[str, Any]) -> str:
    """The event saying which of the config's values the run's records replace, and why."""
    changes = "; ".join(
        f"data.{key} {asked[key]!r} -> {data[key]!r}" for key in data if asked[key] != data[key]
    )
    return f"the run's records describe the clients that joined and their data files: {changes}"
