"""DPFL on a lab's workload: ResNet-18 on CIFAR-shaped images on disk (issue 41).

The images are written locally (benchmarks/workload_data.py) and every client reads its own
through a ``data.source`` factory, a batch at a time. DPFL runs with 4 clients and Bc = 2 in
the in-process runtime and as a real federation (``collabfl federation up``), on the CPU or
on CUDA. For each runtime it reports:

- a steady round (the rounds after the set-up round, median) broken into train / fetch /
  rewards (GGC's evaluations) / evaluate / overhead: the round's wall time less the
  clients' work (summed in process, where clients take turns; the slowest client's in a
  federation, where they run at once);
- training images per second of the whole federation (all clients' samples over the time
  they trained: summed in process, the slowest client's in a federation) against a bare
  PyTorch loop over the same Dataset with a DataLoader (same model, batch size, precision,
  layout and workers), timed in this process first;
- the GPU's utilisation and memory, sampled with nvidia-smi while the runtime runs;
- the most peer models a client held at once, against Bc + 1 (DPFL's bound besides its own).

    python benchmarks/gpu_workload.py --device cuda --amp bf16 --channels-last
    python benchmarks/gpu_workload.py --tiny     # a CIFAR CNN on a few images, CPU, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from statistics import median
from typing import Any

import torch
import torch.nn.functional as F
import workload_data
from _common import BENCH_DIR, exit_on_sigterm, format_table, write_results
from quickstart_time import collabfl_executable
from torch.utils.data import DataLoader, Subset
from train_throughput import backward_and_step

from collabfl.kernel.models import build_model

RUNTIMES = ("inprocess", "federated")
PHASES = ("train", "fetch", "rewards", "evaluate", "overhead")
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Workload:
    """What both runtimes and the bare loop run."""

    device: str = "cuda"
    model: str = "resnet18"
    clients: int = 4
    budget: int = 2
    rounds: int = 3
    train: int = 2000
    test: int = 500
    batch_size: int = 128
    amp: str = "off"
    channels_last: bool = False
    workers: int = 2
    timeout_s: float = 1800.0

    def overrides(self) -> list[str]:
        return [
            "data.source=workload_data:factory",
            f"data.num_clients={self.clients}",
            f"model.name={self.model}",
            "method=dpfl",
            f"dpfl.budget={self.budget}",
            "dpfl.init_epochs=1",
            f"rounds={self.rounds}",
            "epochs=1",
            f"device={self.device}",
            "threads=1",
            f"training.batch_size={self.batch_size}",
            f"training.eval_batch_size={max(self.batch_size, 256)}",
            f"training.amp={self.amp}",
            f"training.channels_last={str(self.channels_last).lower()}",
            f"training.loader_workers={self.workers}",
        ]


TINY = Workload(
    device="cpu", model="cifar_cnn", clients=3, rounds=2, train=40, test=16, batch_size=8,
    workers=0, timeout_s=600.0,
)  # fmt: skip


class GpuSampler:
    """nvidia-smi's utilisation and memory every 250 ms while in the ``with`` block (no
    samples where there is no nvidia-smi)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        binary = shutil.which("nvidia-smi")
        if binary is not None:
            query = "--query-gpu=utilization.gpu,memory.used"
            self._process = subprocess.Popen(
                [binary, query, "--format=csv,noheader,nounits", "-lms", "250"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and all(p.replace(".", "", 1).isdigit() for p in parts[:2]):
                self.samples.append((float(parts[0]), float(parts[1])))

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=10)

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {"samples": 0}
        utilisation = [u for u, _ in self.samples]
        return {
            "samples": len(self.samples),
            "median_utilisation_pct": median(utilisation),
            "max_utilisation_pct": max(utilisation),
            "max_memory_mib": max(m for _, m in self.samples),
        }


def trained_per_round(work: Workload) -> int:
    """The images a client trains on each round: one epoch of its train split less the
    validation it holds out (data.val_fraction = 0.2)."""
    return work.train - round(0.2 * work.train)


def bare_loop(work: Workload, data_dir: Path, steps: int) -> dict[str, float]:
    """Images per second of the loop a PyTorch user writes, over as many of client 0's
    images as a client trains on per round, batched as a client batches them (the last
    batch of an epoch partial)."""
    os.environ["WORKLOAD_DATA"] = str(data_dir)
    torch.set_num_threads(1)  # as the runs' threads = 1
    device = torch.device(work.device)
    split = Subset(workload_data.factory(0)["train"], range(trained_per_round(work)))
    module = build_model(work.model, workload_data.CLASSES, seed=0).to(device)
    layout = torch.channels_last if work.channels_last else torch.contiguous_format
    module = module.to(memory_format=layout)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    scaler = torch.amp.GradScaler(device.type) if work.amp == "fp16" else None
    pinned = device.type == "cuda"
    loader = DataLoader(
        split, batch_size=work.batch_size, shuffle=True, num_workers=work.workers,
        pin_memory=pinned, persistent_workers=work.workers > 0,
    )  # fmt: skip
    module.train()

    def one_pass(limit: int) -> int:
        seen = 0
        for step, (x, y) in enumerate(loader):
            if step == limit:
                break
            x = x.to(device, non_blocking=pinned).contiguous(memory_format=layout)
            y = y.to(device, non_blocking=pinned)
            optimizer.zero_grad(set_to_none=True)
            autocast = (
                torch.autocast(device.type, dtype=AMP_DTYPES[work.amp])
                if work.amp != "off"
                else nullcontext()
            )
            with autocast:
                loss = F.cross_entropy(module(x), y)
            backward_and_step(loss, optimizer, scaler)
            seen += len(y)
        return seen

    one_pass(2)  # warm-up: workers started, kernels chosen
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started, images = time.perf_counter(), 0
    while images < steps * work.batch_size:  # whole passes, as many as the steps need
        images += one_pass(steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"images": images, "seconds": time.perf_counter() - started}


def run_runtime(work: Workload, runtime: str, data_dir: Path, out: Path) -> dict[str, Any]:
    """One DPFL run in ``runtime``; its rows, wall time and the GPU's samples."""
    flags = [arg for o in work.overrides() for arg in ("--set", o)]
    command = [collabfl_executable()]
    if runtime == "inprocess":
        command += ["simulate", *flags, "--out", str(out)]
    else:
        command += ["federation", "up", *flags, "--out", str(out), "--timeout", str(work.timeout_s)]
    paths = [str(BENCH_DIR), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "WORKLOAD_DATA": str(data_dir), "PYTHONPATH": os.pathsep.join(paths)}
    started = time.perf_counter()
    with GpuSampler() as gpu:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=work.timeout_s + 120
        )
    if done.returncode != 0:
        raise SystemExit(f"{runtime} run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    metrics = (out / "dpfl" / "metrics.jsonl").read_text().splitlines()
    return {
        "rows": [json.loads(line) for line in metrics],
        "wall_s": time.perf_counter() - started,
        "gpu": gpu.summary(),
    }


def round_phases(rows: list[dict[str, Any]], runtime: str) -> dict[str, float]:
    """The median steady round (every round after the set-up round 0) by phase, seconds."""
    by_round: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_round.setdefault(row["round"], []).append(row)
    steady = [r for r in sorted(by_round) if r > 0] or sorted(by_round)
    per_round: dict[str, list[float]] = {name: [] for name in (*PHASES, "round")}
    for r in steady:
        clients = by_round[r]
        work = [c["train_s"] + c["collaborate_s"] + c["evaluate_s"] for c in clients]
        critical = sum(work) if runtime == "inprocess" else max(work)
        per_round["train"].append(_mean(c["train_s"] for c in clients))
        per_round["fetch"].append(_mean(c["fetch_s"] for c in clients))
        per_round["rewards"].append(_mean(c["collaborate_s"] - c["fetch_s"] for c in clients))
        per_round["evaluate"].append(_mean(c["evaluate_s"] for c in clients))
        round_s = clients[0]["round_s"]
        per_round["overhead"].append(max(0.0, round_s - critical))
        per_round["round"].append(round_s)
    return {name: median(values) for name, values in per_round.items()}


def _mean(values: Iterable[float]) -> float:
    listed = list(values)
    return sum(listed) / len(listed)


def training_rate(rows: list[dict[str, Any]], work: Workload, runtime: str) -> float:
    """Training images per second of the whole federation over its steady rounds: every
    client's samples (``trained_per_round``) over the time its clients trained, which in
    process is the sum of their training seconds (they take turns) and in a federation the
    slowest client's (they train at once, sharing the machine)."""
    per_client = trained_per_round(work)
    by_round: dict[int, list[float]] = {}
    for row in rows:
        if row["round"] > 0:
            by_round.setdefault(row["round"], []).append(row["train_s"])
    images = sum(per_client * len(times) for times in by_round.values())
    combine = sum if runtime == "inprocess" else max
    seconds = sum(combine(times) for times in by_round.values())
    return images / seconds if seconds else 0.0


def model_bytes(work: Workload) -> int:
    module = build_model(work.model, workload_data.CLASSES, seed=0)
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def measure(work: Workload, runtimes: tuple[str, ...], folder: Path) -> dict[str, Any]:
    """Write the data into ``folder``, time the bare loop, run each runtime there."""
    data_dir = folder / "data"
    workload_data.write(data_dir, work.clients, work.train, work.test)
    bare = bare_loop(work, data_dir, steps=max(32, work.train // work.batch_size))
    figures: dict[str, Any] = {
        "workload": asdict(work),
        "model_bytes": model_bytes(work),
        "bare_images_per_s": bare["images"] / bare["seconds"],
        "peer_bound_models": work.budget + 1,
        "runtimes": {},
    }
    for runtime in runtimes:
        run = run_runtime(work, runtime, data_dir, folder / runtime)
        rows = run["rows"]
        rate = training_rate(rows, work, runtime)
        figures["runtimes"][runtime] = {
            "steady_round_s": round_phases(rows, runtime),
            "wall_s": run["wall_s"],
            "images_per_s": rate,
            "images_per_s_vs_bare": rate / figures["bare_images_per_s"],
            "peak_peer_models": max(row["peak_peer_models"] for row in rows),
            "peer_bytes_fetched": sum(row["bytes_fetched"] for row in rows),
            "mean_test_acc": sum(r["test_acc"] for r in rows if r["round"] == work.rounds - 1)
            / work.clients,
            "gpu": run["gpu"],
        }
    return figures


def print_figures(figures: dict[str, Any]) -> None:
    rows = []
    for runtime, got in figures["runtimes"].items():
        phases = got["steady_round_s"]
        rows.append(
            [runtime, f"{phases['round']:.2f}"]
            + [f"{phases[p]:.2f}" for p in PHASES]
            + [
                f"{got['images_per_s']:.1f} ({got['images_per_s_vs_bare']:.2f}×)",
                f"{got['peak_peer_models']} / {figures['peer_bound_models']}",
                str(got["gpu"].get("median_utilisation_pct", "–")),
            ]
        )
    headers = ["runtime", "round s", *(f"{p} s" for p in PHASES)]
    headers += ["train img/s (vs bare)", "peak peers / Bc+1", "GPU util % (median)"]
    print(format_table(headers, rows))
    print(
        f"bare PyTorch loop: {figures['bare_images_per_s']:.1f} images/s; model "
        f"{figures['model_bytes'] / 2**20:.1f} MiB; {figures['workload']['device']}"
    )


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the CI-sized CPU workload")
    parser.add_argument("--device", choices=["cpu", "cuda"])
    parser.add_argument("--model")
    parser.add_argument("--clients", type=int)
    parser.add_argument("--budget", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--train", type=int, help="training images per client")
    parser.add_argument("--test", type=int, help="test images per client")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--amp", choices=["off", "bf16", "fp16"])
    parser.add_argument("--channels-last", action="store_true", default=None)
    parser.add_argument("--workers", type=int, help="DataLoader workers per client")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--name", help="results/<name>.json (default: gpu_workload-<device>)")
    args = parser.parse_args()
    base = TINY if args.tiny else Workload()
    chosen = {
        key: value
        for key, value in vars(args).items()
        if key in Workload.__dataclass_fields__ and value is not None
    }
    work = replace(base, **chosen)
    if work.device == "cuda" and not torch.cuda.is_available():
        parser.error(f"torch {torch.__version__} sees no CUDA device; give --device cpu")
    runtimes = tuple(r for r in args.runtimes.split(",") if r)
    if not set(runtimes) <= set(RUNTIMES):
        parser.error(f"--runtimes: choose from {', '.join(RUNTIMES)}")
    with tempfile.TemporaryDirectory(prefix="gpu-workload-") as folder:
        figures = measure(work, runtimes, Path(folder))
    if work.device == "cuda":
        figures["gpu_name"] = torch.cuda.get_device_name(0)
    print_figures(figures)
    name = args.name or f"gpu_workload-{work.device}{'-tiny' if args.tiny else ''}"
    print(f"written: {write_results(name, figures, {'runtimes': list(runtimes)})}")


if __name__ == "__main__":
    sys.exit(main())
