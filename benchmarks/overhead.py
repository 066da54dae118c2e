"""Framework overhead: a FedAvg round vs a bare torch loop, and GGC vs its reward evaluations.

Two ratios, each measured side by side in one process, repeated with the order of the two
sides alternated; the medians are reported.

a) FedAvg round. A federation of N MNIST-1D clients (the library's own data pipeline and
   in-process runtime) runs one FedAvg round: every client trains ``epochs`` local epochs
   from the shared initial model and uploads it, the server averages by sample count, and
   the average is broadcast and evaluated on every client's validation and test split. The
   bare side does the same work with plain torch on the same client tensors: one
   ``nn.Module`` from ``build_model``, ``load_state_dict`` of the start weights per client,
   ``torch.optim.SGD`` with the same lr/momentum/weight decay, the same number of steps
   (``steps_for``) and batch size, the same batch order (the generator is seeded as the
   client node seeds it), cross-entropy; state-dict averaging; the same evaluation forward
   passes. What differs is only the framework. ratio = framework / bare (target <= 1.15),
   with and without the evaluation on both sides. The largest absolute difference between
   the two global models is printed as a like-for-like check.

b) GGC cost. After two rounds of local training with models published to the peer store,
   every client receives a COLLABORATE instruction with search="greedy" (BGGC over all other
   clients with its validation loss, exactly what DPFL sends) and the time is compared with
   that of the same number of bare validation passes (the reply's "reward_evaluations"
   calls of ``evaluate`` on the client's validation data, model already loaded).
   ratio = greedy / evaluations (target <= 1.3) for each budget Bc.

Run: python benchmarks/overhead.py [--quick]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from _common import Stopwatch, format_table, median, write_results
from torch import nn

from collabfl.client.node import ClientSplits
from collabfl.client.randomness import batch_generator
from collabfl.engine.config import ExperimentConfig, load_config, model_name
from collabfl.engine.experiment import prepare_data
from collabfl.engine.inprocess import InProcessFederation, build_federation
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.training import TrainingConfig, evaluate, steps_for
from collabfl.strategies.fedavg import FedAvg
from collabfl.strategies.protocol import Instruction, broadcast
from collabfl.strategies.rounds import average_replies
from collabfl.strategies.verbs import Collaborate, Train

TARGET_ROUND = 1.15
TARGET_GGC = 1.3


@dataclass
class Setup:
    """The federation's inputs, shared by both sides of every measurement."""

    config: ExperimentConfig
    splits: list[ClientSplits]
    num_classes: int
    workspace: FlatModel
    initial: torch.Tensor

    def federation(self) -> InProcessFederation:
        """A fresh federation whose clients all start from the initial model."""
        self.workspace.load(self.initial)
        return build_federation(self.splits, self.workspace, self.config.training, self.config.seed)


def make_setup(num_clients: int, epochs: float, seed: int) -> Setup:
    overrides = [f"data.num_clients={num_clients}", f"epochs={epochs}", f"seed={seed}"]
    config = load_config(None, overrides)
    data = prepare_data(config)
    splits = [ClientSplits.from_data(c, torch.device("cpu")) for c in data.clients]
    module = build_model(model_name(config), data.pool.num_classes, seed=config.seed)
    workspace = FlatModel(module)
    return Setup(config, splits, data.pool.num_classes, workspace, workspace.get())


# --- a) FedAvg round ------------------------------------------------------------------------


def framework_round(setup: Setup, with_eval: bool) -> tuple[Stopwatch, torch.Tensor]:
    """Time of one FedAvg round through the library, and the resulting global model."""
    federation = setup.federation()
    epochs = setup.config.epochs
    with Stopwatch() as watch:
        if with_eval:
            for _ in FedAvg(epochs).rounds(federation, 1):
                pass
        else:
            train = Train(epochs, slot="global", upload=True)
            trained = broadcast(federation, 0, train)
            global_model = average_replies(trained, federation.sample_counts)
    if with_eval:
        global_model = federation.nodes[0].slots["global"]
    return watch, global_model


class BareFedAvg:
    """The same round written directly against torch, without the framework."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        config = setup.config
        self.module: nn.Module = build_model(model_name(config), setup.num_classes, config.seed)
        self.start = {k: v.detach().clone() for k, v in self.module.state_dict().items()}

    def round(self, with_eval: bool) -> tuple[Stopwatch, torch.Tensor]:
        with Stopwatch() as watch:
            average = self._round(with_eval)
        return watch, torch.cat([v.reshape(-1) for v in average.values()])

    def _round(self, with_eval: bool) -> dict[str, torch.Tensor]:
        setup, module = self.setup, self.module
        training: TrainingConfig = setup.config.training
        epochs, seed = setup.config.epochs, setup.config.seed
        states, counts, losses = [], [], []
        for k, split in enumerate(setup.splits):
            module.load_state_dict(self.start)
            optimizer = torch.optim.SGD(
                module.parameters(),
                lr=training.lr,
                momentum=training.momentum,
                weight_decay=training.weight_decay,
            )
            module.train()
            x, y = split.train.x, split.train.y
            n, batch = len(split.train), training.batch_size
            steps = steps_for(epochs, n, batch)
            generator = batch_generator(seed, k, 0, "global")
            order, position = torch.empty(0, dtype=torch.long), 0
            total = torch.zeros(())
            for _ in range(steps):
                if position >= len(order):
                    order, position = torch.randperm(n, generator=generator), 0
                index = order[position : position + batch]
                position += batch
                optimizer.zero_grad()
                loss = F.cross_entropy(module(x[index]), y[index])
                loss.backward()
                optimizer.step()
                total += loss.detach()
            losses.append(float(total) / steps)
            states.append({k: v.detach().clone() for k, v in module.state_dict().items()})
            counts.append(n)
        weight_total = float(sum(counts))
        average = {
            name: sum(s[name] * (c / weight_total) for s, c in zip(states, counts, strict=True))
            for name in states[0]
        }
        if with_eval:
            module.load_state_dict(average)
            module.eval()
            metrics = []
            with torch.no_grad():
                for split in setup.splits:
                    for part in (split.val, split.test):
                        metrics.append(bare_evaluate(module, part.x, part.y, training))
        return average


def bare_evaluate(
    module: nn.Module, x: torch.Tensor, y: torch.Tensor, training: TrainingConfig
) -> tuple[float, float]:
    loss_sum, correct = torch.zeros(()), torch.zeros((), dtype=torch.long)
    size = training.eval_batch_size
    for start in range(0, len(y), size):
        xb, yb = x[start : start + size], y[start : start + size]
        logits = module(xb)
        loss_sum += F.cross_entropy(logits, yb, reduction="sum")
        correct += (logits.argmax(dim=1) == yb).sum()
    return float(loss_sum) / len(y), float(correct) / len(y)


def side_by_side(
    first: Callable[[], Stopwatch], second: Callable[[], Stopwatch], repeats: int
) -> dict[str, Any]:
    """Time ``first`` and ``second`` ``repeats`` times each, alternating which goes first.

    Ratios are first / second per repetition, for wall-clock and for process CPU time;
    the medians are the reported figures.
    """
    walls: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    for rep in range(repeats):
        if rep % 2:
            b, a = second(), first()
        else:
            a, b = first(), second()
        for i, watch in enumerate((a, b)):
            walls[i].append(watch.wall)
            cpus[i].append(watch.cpu)
    wall_ratios = [x / y for x, y in zip(*walls, strict=True)]
    cpu_ratios = [x / y for x, y in zip(*cpus, strict=True)]
    return {
        "wall_s": {"first": walls[0], "second": walls[1]},
        "cpu_s": {"first": cpus[0], "second": cpus[1]},
        "wall_ratios": wall_ratios,
        "cpu_ratios": cpu_ratios,
        "median_wall_s": [median(walls[0]), median(walls[1])],
        "median_cpu_s": [median(cpus[0]), median(cpus[1])],
        "median_wall_ratio": median(wall_ratios),
        "median_cpu_ratio": median(cpu_ratios),
    }


def measure_round(setup: Setup, repeats: int, with_eval: bool) -> dict[str, Any]:
    """Framework (first) vs bare (second), after one untimed warm-up of each."""
    bare = BareFedAvg(setup)
    framework_round(setup, with_eval)
    bare.round(with_eval)
    models: dict[str, torch.Tensor] = {}
    deviations: list[float] = []

    def framework() -> Stopwatch:
        watch, models["framework"] = framework_round(setup, with_eval)
        return watch

    def plain() -> Stopwatch:
        watch, models["bare"] = bare.round(with_eval)
        deviations.append(float((models["framework"] - models["bare"]).abs().max()))
        return watch

    result = side_by_side(framework, plain, repeats)
    return {"sides": ["framework", "bare"], **result, "max_abs_diff_global_model": max(deviations)}


# --- b) GGC cost ----------------------------------------------------------------------------


def published_federation(setup: Setup, rounds: int = 2) -> InProcessFederation:
    """A federation after ``rounds`` of local training, each publishing to the peer store."""
    federation = setup.federation()
    for t in range(rounds):
        broadcast(federation, t, Train(setup.config.epochs, publish=True))
    return federation


def measure_ggc(
    federation: InProcessFederation, budget: int | None, round_index: int, repeats: int
) -> dict[str, Any]:
    """Greedy search time over every client vs the same number of bare validation passes."""
    counts = federation.sample_counts
    clients = sorted(federation.nodes)
    saved = {k: federation.nodes[k].slot("model") for k in clients}

    def instruction(k: int) -> Instruction:
        peers = [j for j in clients if j != k]
        search = Collaborate.weighted_by_samples("greedy", peers, counts, budget)
        return Instruction(round_index, search)

    instructions = {k: instruction(k) for k in clients}
    evaluations: dict[int, int] = {}

    def greedy_side() -> Stopwatch:
        watch = Stopwatch()
        for k in clients:
            node = federation.nodes[k]
            with watch:
                reply = node.handle(instructions[k])
            evaluations[k] = reply.metrics.reward_evaluations or 0
            node.slots["model"] = saved[k]
            node.fetcher.take_stats()
        return watch

    def evaluation_side() -> Stopwatch:
        watch = Stopwatch()
        for k in clients:
            node = federation.nodes[k]
            node.workspace.load(saved[k])
            val, batch = node.data.val, node.training.eval_batch_size
            with watch:
                for _ in range(evaluations[k]):
                    evaluate(node.workspace, val, batch)
        return watch

    greedy_side()  # warm-up, and learns the evaluation counts
    evaluation_side()
    result = side_by_side(greedy_side, evaluation_side, repeats)
    total_evaluations = sum(evaluations.values())
    per_eval = [1e6 * t / total_evaluations for t in result["median_cpu_s"]]
    return {
        "budget": "inf" if budget is None else budget,
        "clients": len(clients),
        "reward_evaluations_total": total_evaluations,
        "reward_evaluations_per_client": total_evaluations / len(clients),
        "sides": ["greedy", "evaluations"],
        **result,
        "median_cpu_us_per_evaluation": {"greedy": per_eval[0], "evaluations": per_eval[1]},
    }


def parse_budget(text: str) -> int | None:
    return None if text in ("inf", "unlimited") else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20, help="federation size N")
    parser.add_argument("--epochs", type=float, default=1.0, help="local epochs per round")
    parser.add_argument("--repeats", type=int, default=9, help="timed repetitions per ratio")
    parser.add_argument("--budgets", default="2,5,inf", help="GGC budgets Bc (comma separated)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (runtime default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: 6 clients, 2 repeats")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.repeats = 6, 2
    torch.set_num_threads(args.threads)
    budgets = [parse_budget(b.strip()) for b in args.budgets.split(",") if b.strip()]

    setup = make_setup(args.clients, args.epochs, args.seed)
    print(
        f"N={args.clients} MNIST-1D clients, {args.epochs:g} local epoch(s), "
        f"batch {setup.config.training.batch_size}, torch threads {torch.get_num_threads()}, "
        f"{args.repeats} repetitions (order alternated), medians"
    )
    rounds = {
        "with_eval": measure_round(setup, args.repeats, with_eval=True),
        "without_eval": measure_round(setup, args.repeats, with_eval=False),
    }
    rows = [
        [
            name.replace("_", " "),
            f"{r['median_cpu_s'][0]:.3f}",
            f"{r['median_cpu_s'][1]:.3f}",
            f"{r['median_cpu_ratio']:.3f}",
            f"{r['median_wall_s'][0]:.3f}",
            f"{r['median_wall_s'][1]:.3f}",
            f"{r['median_wall_ratio']:.3f}",
            f"{TARGET_ROUND:.2f}",
            f"{r['max_abs_diff_global_model']:.1e}",
        ]
        for name, r in rounds.items()
    ]
    print("\na) one FedAvg round: framework vs bare torch (CPU time, then wall time)")
    headers = ["round", "fw cpu s", "bare cpu s", "cpu ratio", "fw wall s", "bare wall s"]
    print(format_table([*headers, "wall ratio", "target", "max |Δ global|"], rows))

    federation = published_federation(setup)
    ggc = [measure_ggc(federation, b, round_index=1, repeats=args.repeats) for b in budgets]
    rows = [
        [
            str(r["budget"]),
            f"{r['reward_evaluations_per_client']:.1f}",
            f"{r['median_cpu_s'][0]:.3f}",
            f"{r['median_cpu_s'][1]:.3f}",
            f"{r['median_cpu_us_per_evaluation']['greedy']:.0f}",
            f"{r['median_cpu_us_per_evaluation']['evaluations']:.0f}",
            f"{r['median_cpu_ratio']:.3f}",
            f"{r['median_wall_ratio']:.3f}",
            f"{TARGET_GGC:.2f}",
        ]
        for r in ggc
    ]
    print(f"\nb) greedy search (BGGC, all {args.clients} clients) vs bare validation passes")
    headers = ["Bc", "evals/client", "greedy cpu s", "evals cpu s", "µs/eval", "bare µs/eval"]
    print(format_table([*headers, "cpu ratio", "wall ratio", "target"], rows))
    settings = {
        "clients": args.clients,
        "epochs": args.epochs,
        "repeats": args.repeats,
        "budgets": ["inf" if b is None else b for b in budgets],
        "threads": args.threads,
        "seed": args.seed,
        "quick": args.quick,
        "training": setup.config.training.model_dump(),
        "partition": setup.config.data.partition,
        "alpha": setup.config.data.alpha,
        "model_parameters": setup.workspace.num_parameters,
    }
    figures = {
        "fedavg_round": {**rounds, "target_ratio": TARGET_ROUND},
        "ggc": {"by_budget": ggc, "target_ratio": TARGET_GGC},
    }
    path = write_results("overhead-quick" if args.quick else "overhead", figures, settings)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
