"""A participant who lies about its sample count, before and after the federation's defence.

Issue #30 finding 3: three MNIST-1D clients (Dirichlet α=0.1), 20 rounds, one client
reporting a false training-sample count and nothing else. Each attack runs four ways:
``honest`` (true counts), ``undefended`` (the false count taken as told, as before), ``cap``
(the federation's default share cap, ``federation.max_share = "auto"``) and ``declared``
(the operator declared every member's true size, ``federation.declared_sizes``, plus the
cap).

The runs use the in-process runtime with the ServerApp's admission in front of it: the
reported counts go through ``DeclaredSizes.admit`` and ``capped_counts``, the two functions
the ServerApp's admission and the Flower pool's ``sample_counts`` apply, so every method
sees the sizes a real federation would give it (tests/test_reported_sizes.py shows them in a
real federation). Last, what the cap costs honest runs: whether the default binds on the
true counts for N = 2, 3, 10 and 20, and honest FedAvg under a cap that binds (0.4, N = 3).

    python benchmarks/lying_sizes.py            # 13 runs of 20 rounds: long on 2 shared cores
    python benchmarks/lying_sizes.py --rounds 5 --num-train 4000
    python benchmarks/lying_sizes.py --attack ipfl_buyer_x10 --defence undefended cap

``--attack`` and ``--defence`` run a part (in parallel processes, say) into
``results/lying_sizes-<attacks>.json``; the honest cost is measured only by a whole run.
With every size declared truly the cap does not bind for three clients, so ``declared``
uses the honest counts and gives the ``honest`` run's figures.

The JSON is rewritten after every run, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from _common import exit_on_sigterm, format_table, write_results

from collabfl.client.node import ClientSplits
from collabfl.engine.builders import build_method
from collabfl.engine.config import ExperimentConfig, load_config, model_name
from collabfl.engine.driver import drive
from collabfl.engine.experiment import prepare_data, resolve_device
from collabfl.engine.inprocess import InProcessFederation, build_federation
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.recording import MethodRecorder
from collabfl.engine.report.run_dir import read_run
from collabfl.flower.reported_sizes import DeclaredSizes, MaxShare, capped_counts, share_cap
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.objective import objective_from_names

DEFENCES = ("honest", "undefended", "cap", "declared")
ATTACKS = ("fedavg_client0_x100", "pfedgraph_client0_x100", "ipfl_buyer_x10")


class AdmittedSizes(InProcessFederation):
    """In-process clients whose sizes are what they reported, after the federation's
    admission (declared sizes) and share cap; ``max_share`` None: taken as told."""

    def __init__(
        self,
        federation: InProcessFederation,
        reported: Mapping[int, int],
        declared: DeclaredSizes,
        max_share: MaxShare | None,
    ) -> None:
        super().__init__(federation.nodes)
        self.admitted = {k: declared.admit(k, n)[0] for k, n in reported.items()}
        self.max_share = max_share

    @property
    def sample_counts(self) -> Mapping[int, int]:
        if self.max_share is None:
            return self.admitted
        return capped_counts(self.admitted, self.max_share)


def run(
    config: ExperimentConfig, method: str, liar: int | None, factor: float, defence: str
) -> dict[str, Any]:
    """One run; the liar's share of the first round's sizes and the final rows per client."""
    spec = parse_method_spec(method, config)
    device = resolve_device(config.device)
    data = prepare_data(config)
    splits = [ClientSplits.from_data(client, device) for client in data.clients]
    module = build_model(model_name(config), data.pool.num_classes, config.seed)
    objective = objective_from_names(config.training.loss, config.training.optimizer)
    workspace = FlatModel(module, device)
    honest = build_federation(splits, workspace, config.training, config.seed, objective)
    true = dict(honest.sample_counts)
    reported = dict(true)
    if liar is not None and defence != "honest":
        reported[liar] = round(true[liar] * factor)
    declared = DeclaredSizes(true if defence == "declared" else {}, 0.1)
    cap = None if defence in ("honest", "undefended") else config.federation.max_share
    pool = AdmittedSizes(honest, reported, declared, cap)
    method_object = build_method(spec, pool.sample_counts, workspace)
    with tempfile.TemporaryDirectory() as folder:
        recorder = MethodRecorder(spec, Path(folder), len(splits), "auto", workspace.nbytes)
        drive(method_object, pool, config.rounds, recorder, lambda outcome, rows: None)
        rows = read_run(folder).rows
    counts = pool.sample_counts
    last = max(row["round"] for row in rows)
    final = {row["client"]: row for row in rows if row["round"] == last}
    payments: dict[int, float] = {}
    for row in rows:
        payments[row["client"]] = payments.get(row["client"], 0.0) + (row.get("payment") or 0)
    return {
        "true_counts": true,
        "counts_used": dict(counts),
        "liar_share": None if liar is None else counts[liar] / sum(counts.values()),
        "test_acc": {k: final[k].get("test_acc") for k in sorted(final)},
        "mean_test_acc": float(np.mean([final[k]["test_acc"] for k in final])),
        "payments": {k: round(v, 2) for k, v in sorted(payments.items())},
    }


def ipfl_buyer(config: ExperimentConfig) -> int:
    """The client iPFL's seeded role draw makes the buyer (engine/builders.py)."""
    clients = list(range(config.data.num_clients))
    return int(np.random.default_rng([config.seed, 0x1BF1]).permutation(clients)[0])


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--num-train", type=int, default=16000, help="MNIST-1D pool size")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "collabfl"))
    parser.add_argument("--attack", nargs="+", choices=ATTACKS, help="only these attacks")
    parser.add_argument("--defence", nargs="+", choices=DEFENCES, help="only these defences")
    args = parser.parse_args()
    whole = args.attack is None and args.defence is None
    name = "lying_sizes" if whole else "-".join(["lying_sizes", *(args.attack or ATTACKS)])
    base = [
        f"rounds={args.rounds}",
        f"data.num_train={args.num_train}",
        f"data.cache_dir={json.dumps(args.cache)}",
        "threads=1",
    ]

    def config(*extra: str, clients: int = 3) -> ExperimentConfig:
        return load_config(None, [*base, f"data.num_clients={clients}", *extra])

    attacks = {
        "fedavg_client0_x100": (config(), "fedavg", 0, 100.0),
        "pfedgraph_client0_x100": (config(), "pfedgraph", 0, 100.0),
        "ipfl_buyer_x10": (c := config("ipfl.buyers=0.34"), "ipfl", ipfl_buyer(c), 10.0),
    }
    figures: dict[str, Any] = {"attacks": {}, "honest_cost": {}}
    settings = {
        "rounds": args.rounds,
        "num_train": args.num_train,
        "dataset": "mnist1d",
        "partition": "dirichlet 0.1",
    }
    table = []
    for attack in args.attack or ATTACKS:
        cfg, method, liar, factor = attacks[attack]
        figures["attacks"][attack] = outcome = {"liar": liar, "factor": factor}
        for defence in args.defence or DEFENCES:
            result = run(cfg, method, liar, factor, defence)
            outcome[defence] = result
            acc = result["test_acc"]
            table.append(
                [
                    attack,
                    defence,
                    f"{100 * result['liar_share']:.1f}",
                    " ".join(f"{100 * acc[k]:.1f}" for k in sorted(acc)),
                    f"{100 * result['mean_test_acc']:.1f}",
                    f"{result['payments'][liar]:.2f}",
                ]
            )
            print(table[-1], flush=True)
            write_results(name, figures, settings)  # what is done so far
    print(
        format_table(
            ["attack", "defence", "liar share %", "test acc % per client", "mean %", "liar pays"],
            table,
        )
    )
    if not whole:
        return
    cost = []
    for clients in (2, 3, 10, 20):
        true = [len(c.train) for c in prepare_data(config(clients=clients)).clients]
        top, cap = max(true) / sum(true), share_cap("auto", clients)
        figures["honest_cost"][f"{clients}_clients"] = {"largest_share": top, "auto_cap": cap}
        cost.append([clients, f"{100 * top:.1f}", f"{100 * cap:.1f}", "yes" if top > cap else "no"])
    print(format_table(["clients", "largest honest share %", "auto cap %", "binds"], cost))
    tight = run(config("federation.max_share=0.4"), "fedavg", None, 1.0, "cap")
    plain = figures["attacks"]["fedavg_client0_x100"]["honest"]
    figures["honest_cost"]["fedavg_3_clients_max_share_0.4"] = tight
    print(
        f"honest FedAvg, 3 clients, mean test accuracy: {100 * plain['mean_test_acc']:.2f} % "
        f"uncapped, {100 * tight['mean_test_acc']:.2f} % at max_share 0.4 (a cap that binds)"
    )
    print(write_results("lying_sizes", figures, settings))


if __name__ == "__main__":
    main()
