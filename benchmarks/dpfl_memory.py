"""Peak peer memory of a DPFL client's collaboration step against the bound (Bc + 1) × M.

One client of ``--clients`` with an MLP of M bytes (``--width``; 2200 gives about 20 MB)
runs, for each budget Bc, the three collaboration steps of DPFL: round 0's BGGC over all
N − 1 others (batches of at most Bc), a later round's GGC over Ω (Bc candidates, one batch)
and the plain average over Bc chosen peers. Peers arrive as the federated runtime's do:
decoded from bytes in the fetcher's threads. The figure is the peak of the model-sized
storages the step kept alive at once (host memory, tests/support/memory_probe.py), and on
CUDA also the peak of device memory allocated during the step
(torch.cuda.max_memory_allocated), each against (Bc + 1) × M; the client's own model and
its workspace exist before the step and are not counted.

Run: python benchmarks/dpfl_memory.py [--device cuda] [--peers-on host] [--name NAME]
(``--peers-on`` is left out of the task when "device", so the script also measures code
from before the option existed).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from _common import format_table, write_results

from collabfl.strategies.verbs import Collaborate
from tests.support.peer_memory import WireStore, collaboration_peak, mlp_node

STEPS = ("bggc_round0", "ggc_omega", "average")


def task(step: str, budget: int, clients: int, peers_on: str) -> Collaborate:
    """The Collaborate of ``step`` for client 0 under ``budget``."""
    candidates = tuple(range(1, clients)) if step == "bggc_round0" else tuple(range(1, budget + 1))
    extra: dict[str, Any] = {} if peers_on == "device" else {"peers_on": peers_on}
    search = "none" if step == "average" else "greedy"
    return Collaborate(search, candidates, tuple(10.0 + j for j in candidates), budget, **extra)


def measure(step: str, budget: int, args: argparse.Namespace) -> dict[str, Any]:
    """One step on a fresh client: peaks against the bound, and its wall time."""
    node = mlp_node(args.width, args.clients, WireStore(), args.device, args.val)
    model_bytes = node.workspace.nbytes
    collaborate = task(step, budget, args.clients, args.peers_on)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    started = time.perf_counter()
    host_peak = collaboration_peak(node, collaborate, "cpu" if cuda else None)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    bound = (budget + 1) * model_bytes
    row: dict[str, Any] = {
        "step": step,
        "budget": budget,
        "model_mb": round(model_bytes / 1e6, 2),
        "host_peak_models": round(host_peak / model_bytes, 2),
        "bound_models": budget + 1,
        "host_within_bound": host_peak <= bound,
        "seconds": round(seconds, 3),
    }
    if cuda:
        device_peak = torch.cuda.max_memory_allocated() - before
        row["device_peak_models"] = round(device_peak / model_bytes, 2)
        row["device_within_bound"] = device_peak <= bound
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--budgets", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--val", type=int, default=256, help="validation samples")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--peers-on", choices=["device", "host"], default="device")
    parser.add_argument("--name", default="dpfl_memory")
    args = parser.parse_args()
    measure("average", 1, args)  # warm-up: the first step also pays torch's lazy set-up
    rows = [measure(step, budget, args) for budget in args.budgets for step in STEPS]
    headers = list(rows[0])
    print(format_table(headers, [[row[h] for h in headers] for row in rows]))
    settings = {k: v for k, v in vars(args).items() if k != "name"}
    path = write_results(args.name, {"rows": rows}, settings)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
