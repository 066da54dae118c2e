"""The equilibrium's two OCS estimators, greedy (GGC) and SPO, on MNIST-1D concept-shift groups.

    python benchmarks/equilibrium_ocs.py [--seeds 0,1,2] [--clients 8] [--rounds 10]

On the ``concept_groups`` partition (groups 0-1 of large clients, 2-3 of small ones) a
client reads labels through its group's map: identity, 70 % agreeing with it, and one map
shared by groups 2 and 3 that agrees with neither. No single model serves two different maps,
so a good OCS estimator never mixes maps in a coalition, and may pool groups 2 and 3 (the
FedCollab paper's structure: large clients by type, small ones pooled). Per seed: the
coalitions each estimator
finds (as client groups), the search's cost on its own (wall time, messages per client, bytes
through the coordinator; in-process, the two searches timed side by side), and after
``--rounds`` rounds of FedAvg inside the coalitions the accuracy, IPR and RSD against Local.

Writes results/equilibrium_ocs.{json,md}; run directories go to results/runs-equilibrium-*/.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import torch
from _common import RESULTS_DIR, write_results
from coalition_methods import cell, final_accuracies, ipr_rsd
from rich.console import Console

from collabfl.client.node import ClientSplits
from collabfl.engine.builders import build_method
from collabfl.engine.config import load_config, model_name
from collabfl.engine.experiment import prepare_data, run_comparison
from collabfl.engine.inprocess import build_federation
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.recording import safe_name
from collabfl.engine.report.run_dir import read_run
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.strategies.protocol import Instruction, Reply

ESTIMATORS = {"greedy": "equilibrium", "spo": "equilibrium:ocs=spo"}
METHODS = ["local", "fedavg", *ESTIMATORS.values()]


class MeteredPool:
    """Counts messages and model bytes (both ways) per client around an in-process pool."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.messages = 0
        self.model_bytes = 0

    @property
    def sample_counts(self):
        return self.inner.sample_counts

    def send(self, instructions: dict[int, Instruction]) -> dict[int, Reply]:
        self.messages += 1
        replies = self.inner.send(instructions)
        moved = [i.model for i in instructions.values()] + [r.model for r in replies.values()]
        self.model_bytes += sum(4 * m.numel() for m in moved if m is not None)
        return replies


def search_cost(overrides: list[str]) -> dict:
    """Each estimator's search alone on fresh clients: coalitions, time, messages, bytes."""
    config = load_config(None, overrides)
    torch.set_num_threads(config.threads)  # as the runs do, so their floats match
    data = prepare_data(config)
    groups = data.partition.meta["groups"]
    maps = [tuple(m) for m in data.partition.meta["group_label_permutations"]]
    result = {}
    for estimator, label in ESTIMATORS.items():
        splits = [ClientSplits.from_data(c, torch.device("cpu")) for c in data.clients]
        workspace = FlatModel(build_model(model_name(config), data.pool.num_classes, config.seed))
        federation = build_federation(splits, workspace, config.training, config.seed)
        method = build_method(parse_method_spec(label, config), federation.sample_counts, workspace)
        pool = MeteredPool(federation)
        started = time.perf_counter()
        search = method.search(pool)  # type: ignore[attr-defined]
        result[estimator] = {
            "wall_s": time.perf_counter() - started,
            "messages_per_client": pool.messages,
            "model_mib": pool.model_bytes / 2**20,
            "coalitions": search["coalitions"],
            "coalition_groups": [[groups[k] for k in c] for c in search["coalitions"]],
            "mixed_coalitions": sum(
                len({maps[groups[k]] for k in c}) > 1 for c in search["coalitions"]
            ),
            "iterations": len(search["iterations"]),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs_dir = RESULTS_DIR / f"runs-equilibrium-{time.strftime('%Y%m%d-%H%M%S')}"
    base = [
        f"data.num_clients={args.clients}",
        "data.partition=concept_groups",
        f"rounds={args.rounds}",
        "jobs=2",
    ]
    started = time.perf_counter()
    searches: dict[int, dict] = {}
    table: dict[str, dict[str, list[float]]] = {
        m: {"acc": [], "ipr": [], "rsd": []} for m in METHODS
    }
    for seed in seeds:
        searches[seed] = search_cost([*base, f"seed={seed}"])
        print(f"seed {seed} searches: {searches[seed]}", flush=True)
        config = load_config(None, [*base, f"seed={seed}"])
        out = runs_dir / f"s{seed}"
        specs = [parse_method_spec(m, config) for m in METHODS]
        run_comparison(config, specs, out, Console(file=io.StringIO()))
        local = final_accuracies(out / "local")
        for method in METHODS:
            accuracy = final_accuracies(out / safe_name(method))
            ipr, rsd = ipr_rsd(accuracy, local)
            table[method]["acc"].append(statistics.fmean(accuracy.values()))
            table[method]["ipr"].append(ipr)
            table[method]["rsd"].append(rsd)
        for name, label in ESTIMATORS.items():  # the runs found what the lone searches did
            found = read_run(out / safe_name(label)).coalitions
            assert found[0] == searches[seed][name]["coalitions"], (label, found[0])
        print(f"seed {seed} done after {time.perf_counter() - started:.0f} s", flush=True)

    lines = [
        "# Collaboration equilibrium: greedy vs SPO OCS on MNIST-1D concept-shift groups",
        "",
        f"N = {args.clients} (`concept_groups`: groups 0-1 large, 2-3 small; label maps "
        "identity, 70 % agreeing, and one shared by groups 2-3), "
        f"{args.rounds} rounds of FedAvg inside the coalitions, seeds "
        f"{args.seeds}; mean ± std over seeds. Default settings (greedy: 5 warm-up epochs; "
        "SPO: 1000 hypernetwork + 100 search steps per client set, batch 64).",
        "",
        "| Method | Acc (%) | IPR (%) | RSD (pp) |",
        "|---|---|---|---|",
        *(
            f"| `{m}` | {cell(v['acc'])} | {cell(v['ipr'])} | {cell(v['rsd'])} |"
            for m, v in table.items()
        ),
        "",
        "Mixed: coalitions holding two different label maps. Messages/client: the search's "
        "sends (greedy: warm-up + one per set; its peer models travel peer to peer, not "
        "through the coordinator).",
        "",
        "| Seed | OCS | Coalitions (client groups) | Mixed | Sets searched | Messages/client "
        "| Model MiB | Search s |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {seed} | {name} | {r['coalition_groups']} | {r['mixed_coalitions']} | "
            f"{r['iterations']} | {r['messages_per_client']} | {r['model_mib']:.1f} | "
            f"{r['wall_s']:.1f} |"
            for seed, found in searches.items()
            for name, r in found.items()
        ),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (RESULTS_DIR / "equilibrium_ocs.md").write_text(text)
    settings = {"seeds": seeds, "clients": args.clients, "rounds": args.rounds}
    settings["wall_s"] = time.perf_counter() - started
    print(write_results("equilibrium_ocs", {"table": table, "searches": searches}, settings))


if __name__ == "__main__":
    main()
