"""Whether GGC's reward evaluations pay to be batched, on the CPU and (when present) CUDA.

Each GGC step needs two new rewards, R(X ∪ j) and R(Y ∖ j): two models on the same
validation set. Looking one step ahead, the next step's four possible pairs can be
evaluated with them (six models for two steps). This script measures the validation loss
of K candidate models both ways:

- sequential: GGC's path today (``Node._val_loss``): load each flat vector into the
  workspace and run ``kernel.training.evaluate`` on it, one Python float per model;
- batched: the K vectors stacked, and the model run once under ``torch.func.vmap`` over
  them (``functional_call``), one read of the K losses.

For each (model, device, K) it reports the median milliseconds per model evaluation each
way, their ratio (batched / sequential: below 1 pays), and the largest difference between
the two ways' losses (GGC decides by comparing them, so anything but 0 can change a
selection). The models are the README's main job (``mnist1d_cnn`` on a client's ~64
validation samples) and the GPU benchmark's (``cifar_cnn`` on 2,000, as in
``benchmarks/gpu_round.py --samples 40000``); the candidates are one initial model plus
small random perturbations, as averages of nearby models are.

Then the whole search as a client runs it (``ClientNode`` handling a greedy
``Collaborate`` over ``--peers`` published peer models), with ``dpfl.batched_rewards`` off
and on: the median milliseconds per search, their ratio, and whether both chose the same
peers.

    python benchmarks/ggc_batching.py [--repeats 200] [--search-repeats 20] [--peers 8]
        [--devices cpu,cuda] [--name NAME]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from _common import exit_on_sigterm, format_table, median, write_results
from torch.func import functional_call, vmap

from collabfl.client.node import ClientNode, ClientSplits
from collabfl.client.peers import MemoryModelStore, PeerFetcher
from collabfl.kernel.batched_eval import stacked_views
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.objective import DEFAULT_OBJECTIVE
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig, evaluate
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.verbs import Collaborate


class Setting(NamedTuple):
    """A model's input shape and the validation samples one client evaluates it on."""

    shape: tuple[int, ...]
    val_samples: int


SETTINGS = {
    "mnist1d_cnn": Setting((1, 40), 64),
    "cifar_cnn": Setting((3, 32, 32), 2000),
}
BATCH_SIZES = (2, 6)
"""Models per batched call: one GGC step's pair, and two steps looked ahead."""


def timed(fn: Callable[[], Any], device: torch.device, repeats: int) -> tuple[float, Any]:
    """Median wall seconds of ``fn`` over ``repeats`` calls (after two warm-up calls), and
    its last result."""
    for _ in range(2):
        result = fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append(time.perf_counter() - start)
    return median(samples), result


def validation(setting: Setting, device: torch.device, generator: torch.Generator) -> TensorData:
    """A client's validation samples for ``setting``, random, on ``device``."""
    n = setting.val_samples
    return TensorData(
        torch.randn(n, *setting.shape, generator=generator).to(device),
        torch.randint(0, 10, (n,), generator=generator).to(device),
    )


def measure(model_name: str, device: torch.device, k: int, repeats: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(0)
    val = validation(SETTINGS[model_name], device, generator)
    n = len(val)
    flat = FlatModel(build_model(model_name, 10, seed=0), device)
    base = flat.get()
    noise = torch.randn(k, base.numel(), generator=generator).to(device)
    candidates = base + 0.01 * base.abs().mean() * noise
    flat.set_training(False)

    def sequential() -> list[float]:
        losses = []
        for vector in candidates:
            flat.load(vector)
            losses.append(evaluate(flat, val, batch_size=n, accuracy=False)[0])
        return losses

    def one_loss(params: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = functional_call(flat.module, params, (val.x,))
        return DEFAULT_OBJECTIVE.summed_loss(logits, val.y) / n

    batched_losses = vmap(one_loss)

    @torch.inference_mode()
    def batched() -> list[float]:
        return [float(v) for v in batched_losses(stacked_views(flat, candidates)).cpu()]

    seq_s, seq_losses = timed(sequential, device, repeats)
    bat_s, bat_losses = timed(batched, device, repeats)
    return {
        "model": model_name,
        "device": str(device),
        "models_per_call": k,
        "val_samples": n,
        "sequential_ms_per_model": 1e3 * seq_s / k,
        "batched_ms_per_model": 1e3 * bat_s / k,
        "batched_over_sequential": bat_s / seq_s,
        "max_loss_difference": max(abs(a - b) for a, b in zip(seq_losses, bat_losses, strict=True)),
    }


def measure_search(
    model_name: str, device: torch.device, peers: int, repeats: int
) -> dict[str, Any]:
    """One client's greedy search over ``peers`` resident peer models (GGC over Ω, all in one
    batch), its rewards read one at a time against six at a time."""
    generator = torch.Generator().manual_seed(0)
    val = validation(SETTINGS[model_name], device, generator)
    n = len(val)
    workspace = FlatModel(build_model(model_name, 10, seed=0), device)
    own = workspace.get()
    store = MemoryModelStore()
    for peer in range(1, peers + 1):
        noise = torch.randn(own.numel(), generator=generator).to(device)
        store.publish(peer, 0, own + 0.01 * own.abs().mean() * noise)
    node = ClientNode(
        0, ClientSplits(val, val, val), workspace, own, TrainingConfig(eval_batch_size=n), 0,
        store, PeerFetcher(store, workspace.numel),
    )  # fmt: skip
    candidates = tuple(range(1, peers + 1))

    def search(mode: str) -> Callable[[], tuple[tuple[int, ...], int]]:
        task = Collaborate(
            "greedy", candidates, (1.0,) * peers, None, assign=False, batched_rewards=mode
        )  # type: ignore[arg-type]

        def run() -> tuple[tuple[int, ...], int]:
            metrics = node.handle(Instruction(0, task)).metrics
            return metrics.chosen, metrics.reward_evaluations

        return run

    off_s, (off_chosen, off_evaluations) = timed(search("off"), device, repeats)
    on_s, (on_chosen, on_evaluations) = timed(search("on"), device, repeats)
    return {
        "model": model_name,
        "device": str(device),
        "peers": peers,
        "one_at_a_time_ms": 1e3 * off_s,
        "lookahead_ms": 1e3 * on_s,
        "lookahead_over_one_at_a_time": on_s / off_s,
        "evaluations": [off_evaluations, on_evaluations],
        "same_choice": off_chosen == on_chosen,
    }


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--search-repeats", type=int, default=20, help="whole searches timed")
    parser.add_argument("--peers", type=int, default=8, help="peer models a search weighs")
    parser.add_argument("--devices", default="cpu,cuda", help="those absent are skipped")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--name", default="ggc_batching", help="results/<name>.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    devices = []
    for name in args.devices.split(","):
        if name == "cuda" and not torch.cuda.is_available():
            print(f"torch {torch.__version__} sees no CUDA device: cuda skipped")
            continue
        devices.append(torch.device(name))
    if not devices:
        raise SystemExit("nothing to measure on: no device of --devices is present")
    rows = [
        measure(model, device, k, args.repeats)
        for device in devices
        for model in SETTINGS
        for k in BATCH_SIZES
    ]
    print("GGC reward evaluations: ms per model, sequential vs vmap-batched")
    print(
        format_table(
            ["model", "device", "K", "sequential", "batched", "batched/seq", "max |Δloss|"],
            [
                [
                    r["model"],
                    r["device"],
                    str(r["models_per_call"]),
                    f"{r['sequential_ms_per_model']:.3f}",
                    f"{r['batched_ms_per_model']:.3f}",
                    f"{r['batched_over_sequential']:.2f}",
                    f"{r['max_loss_difference']:.1e}",
                ]
                for r in rows
            ],
        )
    )
    searches = [
        measure_search(model, device, args.peers, args.search_repeats)
        for device in devices
        for model in SETTINGS
    ]
    print(f"\nOne client's greedy search over {args.peers} peers: ms per search")
    print(
        format_table(
            [
                "model",
                "device",
                "one at a time",
                "look-ahead",
                "ratio",
                "evaluations",
                "same choice",
            ],
            [
                [
                    r["model"],
                    r["device"],
                    f"{r['one_at_a_time_ms']:.1f}",
                    f"{r['lookahead_ms']:.1f}",
                    f"{r['lookahead_over_one_at_a_time']:.2f}",
                    "{} / {}".format(*r["evaluations"]),
                    "yes" if r["same_choice"] else "no",
                ]
                for r in searches
            ],
        )
    )
    path = write_results(
        args.name,
        {"rows": rows, "searches": searches},
        {
            "repeats": args.repeats,
            "threads": args.threads,
            "search_repeats": args.search_repeats,
            "peers": args.peers,
            "models": {name: setting._asdict() for name, setting in SETTINGS.items()},
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
