"""A DPFL round's time with CUDA clients against CPU clients, in-process and federated.

The model is the DPFL paper's CIFAR-10 CNN (kernel/models.py ``cifar_cnn``), where a GPU
pays; the data is CIFAR-shaped (3×32×32, 10 classes) and generated here, in CIFAR-10's
on-disk format, so nothing is downloaded. Each (runtime, device) runs DPFL for ``--rounds``
rounds; a round's time is the median of the recorded round times after the first (round 0
also carries CUDA's and the executors' start-up). With CUDA, the peak GPU memory is recorded:
in-process the process's peak (all clients share one process, so per client is that over the
client count), federated each client process's peak as ``nvidia-smi`` reports it.

Where torch sees no CUDA device the CPU side alone is measured, and the output says so.

    python benchmarks/gpu_round.py [--clients 4] [--rounds 4] [--samples 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import exit_on_sigterm, format_table, median, write_results
from rich.console import Console

from collabfl.engine.config import load_config
from collabfl.engine.experiment import run_comparison
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.report.run_dir import read_run
from collabfl.launcher.federation import federation_up

TEST_SHARE = 5
"""Training samples per test sample, as CIFAR-10's 50 000 / 10 000."""


def write_cifar_like(root: Path, samples: int, seed: int = 0) -> Path:
    """Random CIFAR-10 batches (``samples`` train images over 5 batches, a fifth as many
    test images) in ``root/cifar-10-batches-py``, the layout data.dataset=cifar10 reads."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def batch(n: int) -> dict[bytes, Any]:
        return {
            b"labels": [int(v) for v in rng.integers(0, 10, n)],
            b"data": rng.integers(0, 256, (n, 3 * 32 * 32), dtype=np.uint8),
        }

    per_batch = max(1, samples // 5)
    for i in range(1, 6):
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(batch(per_batch), protocol=2))
    test = batch(max(1, samples // TEST_SHARE))
    (folder / "test_batch").write_bytes(pickle.dumps(test, protocol=2))
    meta = {b"label_names": [f"class{i}".encode() for i in range(10)]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return root


class GpuMemoryWatch:
    """The largest GPU memory ``nvidia-smi`` reports per process while the block runs."""

    def __init__(self) -> None:
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> GpuMemoryWatch:
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _sample(self) -> None:
        query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"]
        while not self._stop.wait(0.5):
            done = subprocess.run(query, capture_output=True, text=True, check=False)
            for line in done.stdout.splitlines():
                pid, used = (part.strip() for part in line.split(","))
                mib = int(used.split()[0]) if used.split()[0].isdigit() else 0
                self.peak[int(pid)] = max(self.peak.get(int(pid), 0), mib)


def round_seconds(run_dir: Path) -> list[float]:
    """Each recorded round's wall time (the recorder's ``round_s``, one value per round)."""
    by_round: dict[int, float] = {}
    for row in read_run(run_dir).rows:
        by_round[int(row["round"])] = float(row["round_s"])
    return [by_round[r] for r in sorted(by_round)]


def threads(runtime: str, device: str, clients: int) -> int:
    """CPU threads per process: on CUDA one (the GPU computes); on the CPU the cores, shared
    by the client processes of a federation (0: torch's default, every core)."""
    if device != "cpu":
        return 1
    return 0 if runtime == "in-process" else max(1, (os.cpu_count() or 1) // clients)


def measure(
    runtime: str, device: str, args: argparse.Namespace, data_root: Path, work: Path
) -> dict[str, Any]:
    out = work / f"{runtime}-{device}"
    overrides = [
        "data.dataset=cifar10",
        f"data.root={json.dumps(str(data_root))}",
        f"data.num_clients={args.clients}",
        f"rounds={args.rounds}",
        "epochs=1",
        "dpfl.init_epochs=1",
        "dpfl.budget=2",
        f"device={device}",
        f"threads={threads(runtime, device, args.clients)}",
        "jobs=1",
    ]
    config = load_config(None, overrides)
    spec = parse_method_spec("dpfl", config)
    console = Console(quiet=True)
    if device != "cpu":
        torch.cuda.reset_peak_memory_stats()
    with GpuMemoryWatch() as watch:
        if runtime == "in-process":
            run_comparison(config, [spec], out, console)
        else:
            federation_up(config, [spec], out, console, timeout_s=args.timeout)
    times = round_seconds(out / "dpfl")
    figures: dict[str, Any] = {
        "round_s": times,
        "steady_round_s": median(times[1:]) if len(times) > 1 else times[0],
        "summary": json.loads((out / "summary.json").read_text())[0],
    }
    if device != "cpu":
        if runtime == "in-process":
            peak = torch.cuda.max_memory_allocated() / 2**20
            figures["gpu_peak_mib"] = peak
            figures["gpu_mib_per_client"] = peak / args.clients
        else:
            figures["gpu_peak_mib_by_process"] = watch.peak
    return figures


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4000, help="CIFAR-shaped train images")
    parser.add_argument("--runtimes", default="in-process,federation")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    if args.clients < 2 or args.rounds < 2:
        parser.error("--clients and --rounds must be at least 2")
    cuda = torch.cuda.is_available()
    devices = ["cpu", "cuda"] if cuda else ["cpu"]
    if not cuda:
        print(f"torch {torch.__version__} sees no CUDA device: measuring the CPU side only")
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-round-") as tmp:
        work = Path(tmp)
        data_root = write_cifar_like(work / "data", args.samples)
        for runtime in runtimes:
            for device in devices:
                results[f"{runtime}/{device}"] = measure(runtime, device, args, data_root, work)
    rows = []
    for runtime in runtimes:
        cpu = results[f"{runtime}/cpu"]["steady_round_s"]
        for device in devices:
            figures = results[f"{runtime}/{device}"]
            memory = figures.get("gpu_mib_per_client")
            by_process = figures.get("gpu_peak_mib_by_process")
            if by_process:
                memory = median(list(by_process.values()))
            rows.append(
                [
                    runtime,
                    device,
                    f"{figures['steady_round_s']:.2f}",
                    f"{cpu / figures['steady_round_s']:.2f}x",
                    "—" if memory is None else f"{memory:.0f}",
                    f"{figures['summary']['mean_test_acc'] * 100:.1f}",
                ]
            )
    headers = ["runtime", "device", "round (s)", "speed-up", "GPU MiB/client", "test acc %"]
    print(format_table(headers, rows))
    name = "gpu_round" if cuda else "gpu_round_cpu_only"
    settings = {**vars(args), "model": "cifar_cnn", "method": "dpfl", "cuda": cuda}
    if cuda:
        settings["gpu"] = torch.cuda.get_device_name(0)
    path = write_results(name, results, settings)
    print(f"written: {path}")


if __name__ == "__main__":
    main()
