"""Where the time of a DPFL round goes in a real loopback federation.

Starts a coordinator and N client daemons as real processes (SuperLink, SuperNodes, peer
gRPC servers), runs DPFL, and splits each round's wall time into client training, peer
fetch, selection (GGC without its fetches) and evaluation — the slowest client of each,
since clients work in parallel — and the rest, which is Flower messaging (polling waits,
one ClientApp process per message, state load/save). Also reports the time from launching
the processes to the first completed round.

    python benchmarks/federation_round.py [--clients 4] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import format_table, median, write_results

from collabfl.coordinator.config import load_config
from collabfl.coordinator.federation import LocalFederation, write_client_files
from collabfl.coordinator.methods import parse_method_spec, run_request
from collabfl.coordinator.report.run_dir import read_run
from collabfl.coordinator.run_options import RunOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--budget", type=int, default=2)
    args = parser.parse_args()
    overrides = [
        f"data.num_clients={args.clients}",
        f"rounds={args.rounds}",
        f"dpfl.budget={args.budget}",
        "data.num_train=4000",
        "data.num_test=2000",
        "epochs=1",
        "dpfl.init_epochs=2",
    ]
    config = load_config(None, overrides)
    spec = parse_method_spec("dpfl", config)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = write_client_files(config, root / "data")
        launched = time.perf_counter()
        with LocalFederation(root / "work", files) as federation:
            online = time.perf_counter()
            with federation.client() as client:
                client.create_run(
                    "bench",
                    spec.label,
                    run_request(spec, RunOptions(args.clients, out_dir=str(root))),
                )
                first_round = None
                while True:
                    run = client.get_run("bench")
                    if first_round is None and run.last_completed_round is not None:
                        first_round = time.perf_counter()
                    if not run.active:
                        break
                    time.sleep(0.2)
            assert run.status == "finished", run.message
        rows = read_run(root / "dpfl").rows

    table, per_round = [], []
    for t in range(args.rounds):
        these = [r for r in rows if r["round"] == t]
        wall = these[0]["round_s"]
        train = max(r["train_s"] for r in these)
        fetch = max(r["fetch_s"] for r in these)
        collaborate = max(r["collaborate_s"] for r in these)
        evaluate = max(r["evaluate_s"] for r in these)
        messaging = wall - train - collaborate - evaluate
        split = {
            "round": t,
            "wall_s": wall,
            "train_s": train,
            "peer_fetch_s": fetch,
            "selection_s": collaborate - fetch,
            "evaluate_s": evaluate,
            "flower_messaging_s": messaging,
        }
        per_round.append(split)
        table.append([t, *(f"{split[k]:.2f}" for k in list(split)[1:])])
    steady = per_round[1:] or per_round
    figures = {
        "launch_to_online_s": online - launched,
        "launch_to_first_round_s": (first_round or online) - launched,
        "rounds": per_round,
        "steady_median": {k: median([r[k] for r in steady]) for k in steady[0] if k != "round"},
    }
    print(format_table(["round", "wall", "train", "fetch", "select", "eval", "flower"], table))
    print(f"launch → all online: {figures['launch_to_online_s']:.1f} s")
    print(f"launch → first round done: {figures['launch_to_first_round_s']:.1f} s")
    print("steady-state median (rounds ≥ 1):", json.dumps(figures["steady_median"], indent=1))
    path = write_results("federation_round", figures, vars(args) | {"overrides": overrides})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
