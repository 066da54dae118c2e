"""Sub-round steps over the real federation against the same work in one process.

FedCollab's distance estimation and the collaboration equilibrium's SPO search send many
small messages inside their first round (one per estimation step or oracle query), so over
a real federation their cost is mostly messaging. This runs each method's first round
(round 0: the estimation or the search, then one round of training) in the in-process
runtime and on a loopback federation of N client daemons, one after the other on this
machine, and reports both wall times, their ratio and the federation's message count.

The sub-round steps alone are compared too, as a span: in the in-process runtime, from the
start of the first send of sub-round steps to the end of the last (timed here by wrapping
``InProcessFederation.send``); over the federation, the longest relay seat of round 0 (its
messages.jsonl "seat" record: from the seat message's creation to its reply, so seating the
clients and closing the session count against the federation). Both spans include the
coordinator's own work between steps (SPO trains its hypernetwork there).

Beside the wall times, the CPU the sub-round steps cost, per step and client: in process,
this process's CPU time over the span of the sub-step sends; over the federation, the CPU
time of every process of the federation (coordinator side and client daemons, from
/proc, sampled every ``CPU_SAMPLE_S``) over round 0's first ``longest seat`` seconds (the
relay session opens the round), divided by the client-steps (each seat's step count,
summed). On a machine with fewer cores than clients the wall time measures the cores; the
CPU per client-step is what a deployment with a core per client pays, and the federation's
figure split into its coordinator side and its clients says where the messaging costs.

    python benchmarks/federation_substeps.py [--clients 8] [--methods fedcollab,equilibrium:ocs=spo]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from _common import exit_on_sigterm, format_table, write_results
from coordinator_cpu import tree_cpu_seconds

from collabfl.apps.substeps import is_substep
from collabfl.client.node import ClientSplits
from collabfl.engine.config import ExperimentConfig, load_config
from collabfl.engine.experiment import prepare_data, resolve_device, run_method
from collabfl.engine.inprocess import InProcessFederation
from collabfl.engine.methods import MethodSpec, parse_method_spec, run_request
from collabfl.engine.recording import safe_name
from collabfl.engine.report.run_dir import MESSAGES_FILE, read_run
from collabfl.engine.run_options import RunOptions
from collabfl.launcher.federation import LocalFederation, write_client_files
from collabfl.strategies.protocol import Instruction, Reply

CPU_SAMPLE_S = 0.1
"""How often the federation's processes' CPU times are read (a pass over /proc: ~10 ms)."""


def first_round_s(run_dir: Path) -> float:
    rows = [r for r in read_run(run_dir).rows if r["round"] == 0]
    return float(rows[0]["round_s"])


@contextmanager
def timed_substeps() -> Iterator[list[tuple[float, float, float, float, int]]]:
    """(start, end, CPU start, CPU end, clients) of every in-process send of sub-round steps
    made inside the block (times: wall and this process's CPU)."""
    spans: list[tuple[float, float, float, float, int]] = []
    send = InProcessFederation.send

    def timed(
        self: InProcessFederation, instructions: Mapping[int, Instruction]
    ) -> dict[int, Reply]:
        started, cpu = time.perf_counter(), time.process_time()
        replies = send(self, instructions)
        if is_substep(instructions):
            spans.append(
                (started, time.perf_counter(), cpu, time.process_time(), len(instructions))
            )
        return replies

    InProcessFederation.send = timed  # type: ignore[method-assign]
    try:
        yield spans
    finally:
        InProcessFederation.send = send  # type: ignore[method-assign]


def in_process(spec: MethodSpec, root: Path) -> tuple[float, float, float, int]:
    """Round 0's wall time, the span of its sub-round steps (0 with none), the CPU seconds
    of that span and its client-steps."""
    config = spec.config
    device = resolve_device(config.device)
    data = prepare_data(config)
    splits = [ClientSplits.from_data(client, device) for client in data.clients]
    run_dir = root / safe_name(spec.label)
    with timed_substeps() as spans:
        run_method(spec, data, splits, device, run_dir)
    if not spans:
        return first_round_s(run_dir), 0.0, 0.0, 0
    span = max(s[1] for s in spans) - min(s[0] for s in spans)
    cpu = max(s[3] for s in spans) - min(s[2] for s in spans)
    return first_round_s(run_dir), span, cpu, sum(s[4] for s in spans)


class CpuSampler:
    """The CPU seconds of the federation's coordinator side and of its client daemons
    (each with every process under it), read every ``CPU_SAMPLE_S``."""

    def __init__(self, federation: LocalFederation) -> None:
        self.roots = {name: p.pid for name, p in federation.processes.items()}
        self.samples: list[tuple[float, float, float]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stopping.wait(CPU_SAMPLE_S):
            cpu = {name: tree_cpu_seconds(pid) for name, pid in self.roots.items()}
            coordinator = cpu.pop("coordinator")
            self.samples.append((time.perf_counter(), coordinator, sum(cpu.values())))

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()

    def between(self, start: float, end: float) -> tuple[float, float]:
        """CPU seconds of the coordinator side and of the clients from the sample nearest
        ``start`` to the one nearest ``end``."""

        def nearest(t: float) -> tuple[float, float, float]:
            return min(self.samples, key=lambda sample: abs(sample[0] - t))

        first, last = nearest(start), nearest(end)
        return last[1] - first[1], last[2] - first[2]


def federated(
    spec: MethodSpec, config: ExperimentConfig, root: Path, deadline_s: float
) -> dict[str, Any]:
    """Round 0 on a federation: its wall time (None: not done within ``deadline_s``), its
    longest relay seat (None: none came back), the Flower messages it took (so far), and
    the CPU seconds of the coordinator side and of the clients over the longest seat's span
    from the round's start, with the client-steps the seats served."""
    clients = config.data.num_clients
    files = write_client_files(config, root / "data")
    options = RunOptions(expected_clients=clients, out_dir=str(root / "out"))  # not beside the data
    with LocalFederation(root / "work", files) as federation, federation.client() as client:
        sampler = CpuSampler(federation)
        client.create_run("bench", spec.label, run_request(spec, options))
        deadline = time.monotonic() + deadline_s
        while (run := client.get_run("bench")).last_completed_round is None:
            if not run.active or time.monotonic() > deadline:
                break
            time.sleep(CPU_SAMPLE_S)
        ended = time.perf_counter()
        time.sleep(2 * CPU_SAMPLE_S)  # a sample after the end
        sampler.stop()
    run_dir = root / "out" / safe_name(spec.label)
    records = [json.loads(line) for line in (run_dir / MESSAGES_FILE).open()]
    round_zero = [r for r in records if r["round"] == 0]
    seats = [r for r in round_zero if r["kind"] == "seat"]
    seat_s = max((r["round_trip_s"] for r in seats), default=None)
    done = run.last_completed_round is not None
    round_s = first_round_s(run_dir) if done else None
    coordinator_cpu = clients_cpu = None
    if round_s is not None and seat_s is not None:
        started = ended - round_s
        coordinator_cpu, clients_cpu = sampler.between(started, started + seat_s)
    return {
        "round0_s": round_s,
        "longest_seat_s": seat_s,
        "messages": len(round_zero),
        "substeps_coordinator_cpu_s": coordinator_cpu,
        "substeps_clients_cpu_s": clients_cpu,
        "client_steps": sum(r["steps"] for r in seats),
    }


def per_client_step_ms(cpu_s: float | None, client_steps: int) -> float | None:
    return None if cpu_s is None or not client_steps else 1000 * cpu_s / client_steps


def shown_ms(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.0f}"


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--methods", default="fedcollab,equilibrium:ocs=spo")
    parser.add_argument(
        "--deadline-s", type=float, default=900.0, help="give up on a federated round 0 after"
    )
    args = parser.parse_args()
    overrides = [
        f"data.num_clients={args.clients}",
        "rounds=1",
        "data.num_train=4000",
        "data.num_test=2000",
        "epochs=1",
    ]
    config = load_config(None, overrides)
    settings = vars(args) | {
        "overrides": overrides,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "torch_threads": torch.get_num_threads(),
    }
    figures: dict[str, Any] = {}
    rows = []
    for text in args.methods.split(","):
        spec = parse_method_spec(text, config)
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as other:
            local_s, local_steps_s, local_cpu, local_client_steps = in_process(spec, Path(one))
            fed = federated(spec, config, Path(other), args.deadline_s)
        federation_s, seat_s = fed["round0_s"], fed["longest_seat_s"]
        # An unfinished round 0 is reported as its lower bound: the deadline.
        ratio = (federation_s or args.deadline_s) / local_s
        steps_ratio = None if seat_s is None or not local_steps_s else seat_s / local_steps_s
        local_ms = per_client_step_ms(local_cpu, local_client_steps)
        fed_cpu = None
        if fed["substeps_coordinator_cpu_s"] is not None:
            fed_cpu = fed["substeps_coordinator_cpu_s"] + fed["substeps_clients_cpu_s"]
        fed_ms = per_client_step_ms(fed_cpu, fed["client_steps"])
        coordinator_ms = per_client_step_ms(fed["substeps_coordinator_cpu_s"], fed["client_steps"])
        cpu_ratio = None if fed_ms is None or not local_ms else fed_ms / local_ms
        figures[spec.label] = {
            "in_process_round0_s": local_s,
            "federation_round0_s": federation_s,
            "federation_finished_round0": federation_s is not None,
            "ratio": ratio,
            "in_process_substeps_s": local_steps_s,
            "federation_longest_seat_s": seat_s,
            "substeps_ratio": steps_ratio,
            "federation_round0_messages": fed["messages"],
            "in_process_substeps_cpu_s": local_cpu,
            "in_process_client_steps": local_client_steps,
            "in_process_cpu_ms_per_client_step": local_ms,
            "federation_substeps_coordinator_cpu_s": fed["substeps_coordinator_cpu_s"],
            "federation_substeps_clients_cpu_s": fed["substeps_clients_cpu_s"],
            "federation_client_steps": fed["client_steps"],
            "federation_cpu_ms_per_client_step": fed_ms,
            "federation_coordinator_cpu_ms_per_client_step": coordinator_ms,
            "cpu_ratio": cpu_ratio,
        }
        shown = f"{federation_s:.1f}" if federation_s else f"> {args.deadline_s:.0f}"
        rows.append(
            [
                spec.label,
                f"{local_s:.1f}",
                shown,
                f"{ratio:.2f}x",
                f"{local_steps_s:.1f}",
                "-" if seat_s is None else f"{seat_s:.1f}",
                "-" if steps_ratio is None else f"{steps_ratio:.2f}x",
                fed["messages"],
                shown_ms(local_ms),
                shown_ms(fed_ms),
                shown_ms(coordinator_ms),
                "-" if cpu_ratio is None else f"{cpu_ratio:.2f}x",
            ]
        )
        print(json.dumps({spec.label: figures[spec.label]}), flush=True)
        # Written after every method: a later one that fails keeps what was measured.
        path = write_results("federation_substeps", figures, settings)
    headers = [
        "method",
        "round 0 in-process s",
        "federation s",
        "ratio",
        "sub-steps in-process s",
        "longest seat s",
        "ratio",
        "messages",
        "CPU ms/client-step in-process",
        "federation",
        "of it coordinator",
        "ratio",
    ]
    print(format_table(headers, rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
