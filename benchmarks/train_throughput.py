"""Images per second of collabfl's local training against a bare PyTorch loop (issue 41's
anchor: within 0.9× on a GPU).

Both sides train the built-in ResNet-18 (kernel/models.py; ``--model cifar_cnn`` for a quick
look) on the same synthetic CIFAR-shaped images (3×32×32, 10 classes, already on the
device), at the same batch size, with the same SGD (lr, momentum, weight decay), the same
precision (``--amp``) and layout (``--channels-last``), drawing a fresh permutation every
epoch. collabfl's side is what a client does for a Train step: load its model into the flat
workspace, ``kernel.training.train`` for ``--steps`` steps, read the model back. The bare
side is a module, ``torch.optim.SGD`` and ``torch.autocast`` (with a GradScaler for fp16),
the loop a PyTorch user would write. The sides alternate, ``--repeats`` times each after one
warm-up each; the figure is the median images per second. Both sides report their mean
loss: at ``--amp off`` equal, so the same work was timed (tests/test_train_throughput.py).

    python benchmarks/train_throughput.py --device cuda --amp bf16 --channels-last
    python benchmarks/train_throughput.py --device cpu --batch-size 32 --steps 4 --repeats 3
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from _common import Stopwatch, exit_on_sigterm, format_table, median, write_results

from collabfl.kernel.compute import amp_problem
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig, train

SAMPLES = 2048
"""Images in the synthetic split (several epochs' worth of steps at small batch sizes)."""
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

Runner = Callable[[int, int], float]
"""(steps, seed) → trains that many steps from the same start model; the mean loss (equal
on both sides at amp off: the same work is timed)."""


def synthetic(device: torch.device, samples: int) -> TensorData:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (samples,), generator=generator)
    return TensorData(x.to(device), y.to(device))


def collabfl_side(
    model: str, config: TrainingConfig, data: TensorData, device: torch.device
) -> Runner:
    """A client's Train step: load, ``train``, read back (kernel/training.py)."""
    workspace = FlatModel(build_model(model, 10, seed=0), device)
    start = workspace.get()

    def run(steps: int, seed: int) -> float:
        workspace.load(start)
        generator = torch.Generator().manual_seed(seed)
        loss = train(workspace, data, 1.0, config, generator, steps=steps)
        workspace.get()
        return loss

    return run


def bare_side(model: str, config: TrainingConfig, data: TensorData, device: torch.device) -> Runner:
    """The loop as PyTorch's documentation writes it."""
    module = build_model(model, 10, seed=0).to(device)
    if config.channels_last:
        module = module.to(memory_format=torch.channels_last)
    start = {k: v.clone() for k, v in module.state_dict().items()}
    scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None
    autocast = (
        (lambda: torch.autocast(device.type, dtype=DTYPES[config.amp]))
        if config.amp != "off"
        else nullcontext
    )
    size = config.batch_size

    def run(steps: int, seed: int) -> float:
        module.load_state_dict(start)
        module.train()
        optimizer = torch.optim.SGD(
            module.parameters(),
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
        generator = torch.Generator().manual_seed(seed)
        order, position = torch.empty(0, dtype=torch.long), 0
        total = torch.zeros((), device=device)
        for _ in range(steps):
            if position >= len(order):
                order, position = torch.randperm(len(data), generator=generator).to(device), 0
            index = order[position : position + size]
            position += size
            x = data.x[index]
            if config.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            optimizer.zero_grad()
            with autocast():
                loss = F.cross_entropy(module(x), data.y[index])
            backward_and_step(loss, optimizer, scaler)
            total += loss.detach()
        return float(total) / steps

    return run


def backward_and_step(
    loss: torch.Tensor, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None
) -> None:
    """One step of the bare loop, through fp16's loss scaler when there is one."""
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def timed(run: Runner, steps: int, seed: int, device: torch.device) -> tuple[Stopwatch, float]:
    """Wall and process CPU seconds of one run (the CPU time is the steadier figure on a
    shared machine; on a GPU the wall time is the figure), and its mean loss."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    with Stopwatch() as watch:
        loss = run(steps, seed)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return watch, loss


def measure(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    config = TrainingConfig(
        batch_size=args.batch_size, amp=args.amp, channels_last=args.channels_last
    )
    data = synthetic(device, max(SAMPLES, args.batch_size))
    sides = {
        "collabfl": collabfl_side(args.model, config, data, device),
        "bare PyTorch": bare_side(args.model, config, data, device),
    }
    for run in sides.values():  # warm-up: kernels chosen, memory cached
        timed(run, min(args.steps, 3), 0, device)
    watches: dict[str, list[Stopwatch]] = {name: [] for name in sides}
    losses: dict[str, list[float]] = {name: [] for name in sides}
    for repeat in range(args.repeats):
        for name, run in sides.items():
            watch, loss = timed(run, args.steps, repeat + 1, device)
            watches[name].append(watch)
            losses[name].append(loss)
    images = args.steps * args.batch_size
    rates = {name: [images / w.wall for w in values] for name, values in watches.items()}
    cpu_rates = {name: [images / w.cpu for w in values] for name, values in watches.items()}
    medians = {name: median(values) for name, values in rates.items()}
    cpu_medians = {name: median(values) for name, values in cpu_rates.items()}
    return {
        "images_per_s": rates,
        "median_images_per_s": medians,
        "ratio": medians["collabfl"] / medians["bare PyTorch"],
        "images_per_cpu_s": cpu_rates,
        "ratio_cpu_time": cpu_medians["collabfl"] / cpu_medians["bare PyTorch"],
        "mean_loss": losses,
    }


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--model", choices=["resnet18", "cifar_cnn"], default="resnet18")
    parser.add_argument("--amp", choices=["off", "bf16", "fp16"], default="off")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50, help="steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0: default")
    parser.add_argument("--name", default=None, help="results/<name>.json (default: derived)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error(f"torch {torch.__version__} sees no CUDA device; give --device cpu")
    device = torch.device(args.device)
    problem = amp_problem(args.amp, device)
    if problem is not None:
        parser.error(problem)
    figures = measure(args, device)
    if device.type == "cuda":
        figures["gpu"] = torch.cuda.get_device_name(device)
    rows = [
        [name, f"{median(values):.1f}", f"{min(values):.1f}-{max(values):.1f}"]
        for name, values in figures["images_per_s"].items()
    ]
    print(format_table(["side", "images/s (median, wall)", "range"], rows))
    ratios = f"{figures['ratio']:.3f} (wall), {figures['ratio_cpu_time']:.3f} (process CPU time)"
    print(f"collabfl / bare: {ratios}; {args.device}, amp {args.amp}")
    layout = "-nhwc" if args.channels_last else ""
    model = "" if args.model == "resnet18" else f"-{args.model}"
    name = args.name or f"train_throughput{model}-{args.device}-{args.amp}{layout}"
    settings = {k: v for k, v in vars(args).items() if k != "name"}
    print(f"written: {write_results(name, figures, settings)}")


if __name__ == "__main__":
    main()
