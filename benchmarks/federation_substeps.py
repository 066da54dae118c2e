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

    python benchmarks/federation_substeps.py [--clients 8] [--methods fedcollab,equilibrium:ocs=spo]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import exit_on_sigterm, format_table, write_results

from collabfl.client.node import ClientSplits
from collabfl.engine.config import ExperimentConfig, load_config
from collabfl.engine.experiment import prepare_data, resolve_device, run_method
from collabfl.engine.inprocess import InProcessFederation
from collabfl.engine.methods import MethodSpec, parse_method_spec, run_request
from collabfl.engine.recording import safe_name
from collabfl.engine.report.run_dir import MESSAGES_FILE, read_run
from collabfl.engine.run_options import RunOptions
from collabfl.flower.substeps import is_substep
from collabfl.launcher.federation import LocalFederation, write_client_files
from collabfl.strategies.protocol import Instruction, Reply


def first_round_s(run_dir: Path) -> float:
    rows = [r for r in read_run(run_dir).rows if r["round"] == 0]
    return float(rows[0]["round_s"])


@contextmanager
def timed_substeps() -> Iterator[list[tuple[float, float]]]:
    """(start, end) of every in-process send of sub-round steps made inside the block."""
    spans: list[tuple[float, float]] = []
    send = InProcessFederation.send

    def timed(
        self: InProcessFederation, instructions: Mapping[int, Instruction]
    ) -> dict[int, Reply]:
        started = time.perf_counter()
        replies = send(self, instructions)
        if is_substep(instructions):
            spans.append((started, time.perf_counter()))
        return replies

    InProcessFederation.send = timed  # type: ignore[method-assign]
    try:
        yield spans
    finally:
        InProcessFederation.send = send  # type: ignore[method-assign]


def in_process(spec: MethodSpec, root: Path) -> tuple[float, float]:
    """Round 0's wall time and the span of its sub-round steps (0 with none)."""
    config = spec.config
    device = resolve_device(config.device)
    data = prepare_data(config)
    splits = [ClientSplits.from_data(client, device) for client in data.clients]
    run_dir = root / safe_name(spec.label)
    with timed_substeps() as spans:
        run_method(spec, data, splits, device, run_dir)
    span = max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0.0
    return first_round_s(run_dir), span


def federated(
    spec: MethodSpec, config: ExperimentConfig, root: Path, deadline_s: float
) -> tuple[float | None, float | None, int]:
    """Round 0's wall time on a federation (None: not done within ``deadline_s``), its
    longest relay seat (None: none came back) and the Flower messages it took (so far)."""
    clients = config.data.num_clients
    files = write_client_files(config, root / "data")
    options = RunOptions(clients, out_dir=str(root))
    with LocalFederation(root / "work", files) as federation, federation.client() as client:
        client.create_run("bench", spec.label, run_request(spec, options))
        deadline = time.monotonic() + deadline_s
        while (run := client.get_run("bench")).last_completed_round is None:
            if not run.active or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    run_dir = root / safe_name(spec.label)
    records = [json.loads(line) for line in (run_dir / MESSAGES_FILE).open()]
    round_zero = [r for r in records if r["round"] == 0]
    seats = [r["round_trip_s"] for r in round_zero if r["kind"] == "seat"]
    done = run.last_completed_round is not None
    return (first_round_s(run_dir) if done else None), max(seats, default=None), len(round_zero)


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
    figures: dict[str, Any] = {}
    rows = []
    for text in args.methods.split(","):
        spec = parse_method_spec(text, config)
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as other:
            local_s, local_steps_s = in_process(spec, Path(one))
            federation_s, seat_s, messages = federated(spec, config, Path(other), args.deadline_s)
        # An unfinished round 0 is reported as its lower bound: the deadline.
        ratio = (federation_s or args.deadline_s) / local_s
        steps_ratio = None if seat_s is None or not local_steps_s else seat_s / local_steps_s
        figures[spec.label] = {
            "in_process_round0_s": local_s,
            "federation_round0_s": federation_s,
            "federation_finished_round0": federation_s is not None,
            "ratio": ratio,
            "in_process_substeps_s": local_steps_s,
            "federation_longest_seat_s": seat_s,
            "substeps_ratio": steps_ratio,
            "federation_round0_messages": messages,
        }
        shown = f"{federation_s:.1f}" if federation_s else f"> {args.deadline_s:.0f}"
        seat_shown = "-" if seat_s is None else f"{seat_s:.1f}"
        steps_shown = "-" if steps_ratio is None else f"{steps_ratio:.2f}x"
        rows.append(
            [
                spec.label,
                f"{local_s:.1f}",
                shown,
                f"{ratio:.2f}x",
                f"{local_steps_s:.1f}",
                seat_shown,
                steps_shown,
                messages,
            ]
        )
        print(json.dumps({spec.label: figures[spec.label]}), flush=True)
    headers = [
        "method",
        "round 0 in-process s",
        "federation s",
        "ratio",
        "sub-steps in-process s",
        "longest seat s",
        "ratio",
        "messages",
    ]
    print(format_table(headers, rows))
    path = write_results("federation_substeps", figures, vars(args) | {"overrides": overrides})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
