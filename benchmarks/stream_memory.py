"""What ``stream=True`` costs and saves: peak memory and wall time of one ``collabfl.api.run``
on Datasets that make their items on demand, stacked against streamed.

    python benchmarks/stream_memory.py --clients 10 --samples 2000 --repeats 3

Each run is a fresh process (peak RSS is per process), alternating the two modes, on a
Dataset that holds no inputs: item i is drawn from a seeded generator when it is read, so
stacking it is the only copy of the inputs in memory. Inputs are 3×32×32 float32 (12 KiB a
sample), a small CNN, ``local`` for 2 rounds of 1 epoch. The floor is the same run on 20
samples a client (the interpreter, torch and collabfl). Prints the medians, what each mode
holds above the floor, their ratios, and writes ``results/stream_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

from _common import REPO_ROOT, format_table, median, write_results

SHAPE = (3, 32, 32)


def one_run(clients: int, samples: int, stream: bool) -> None:
    """Run once in this process; print wall seconds and peak RSS (MiB) as JSON."""
    import torch
    from torch import nn
    from torch.utils.data import Dataset

    import collabfl.api as cf

    class Drawn(Dataset[Any]):
        def __init__(self, client: int, split: str, size: int) -> None:
            split_number = ("train", "val", "test").index(split)
            self.seed, self.size = (3 * client + split_number) * 1_000_003, size

        def __len__(self) -> int:
            return self.size

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            generator = torch.Generator().manual_seed(self.seed + i)
            label = int(torch.randint(10, (), generator=generator))
            return torch.randn(SHAPE, generator=generator) + label / 10, label

    def net() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(3, 8, 5), nn.ReLU(), nn.MaxPool2d(4), nn.Flatten(), nn.Linear(8 * 49, 10)
        )

    start = time.perf_counter()
    cf.run(
        "local",
        model=net,
        train=[Drawn(k, "train", samples) for k in range(clients)],
        val=[Drawn(k, "val", samples // 10) for k in range(clients)],
        test=[Drawn(k, "test", samples // 2) for k in range(clients)],
        rounds=2,
        epochs=1,
        stream=stream,
        overrides={"threads": 1},
    )
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "peak_rss_mib": peak}))


def measure(clients: int, samples: int, stream: bool) -> dict[str, float]:
    command = [sys.executable, __file__, "--one", "stream" if stream else "stacked"]
    command += ["--clients", str(clients), "--samples", str(samples)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--samples", type=int, default=2000, help="train samples per client")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", choices=["stacked", "stream"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_run(args.clients, args.samples, args.one == "stream")
        return
    runs: dict[str, list[dict[str, float]]] = {"stacked": [], "stream": [], "floor": []}
    for _ in range(args.repeats):
        for mode in runs:
            samples = 20 if mode == "floor" else args.samples
            runs[mode].append(measure(args.clients, samples, mode == "stream"))
    medians = {
        mode: {key: median([r[key] for r in rows]) for key in ("wall_s", "peak_rss_mib")}
        for mode, rows in runs.items()
    }
    inputs_mib = args.clients * args.samples * 1.6 * 4 * 3 * 32 * 32 / 2**20
    floor = medians["floor"]["peak_rss_mib"]
    above = {mode: medians[mode]["peak_rss_mib"] - floor for mode in ("stacked", "stream")}
    ratios = {
        "wall_s": medians["stream"]["wall_s"] / medians["stacked"]["wall_s"],
        "peak_rss_above_floor": above["stream"] / above["stacked"],
    }
    rows = [
        [mode, f"{m['wall_s']:.1f}", f"{m['peak_rss_mib']:.0f}", f"{above.get(mode, 0):.0f}"]
        for mode, m in medians.items()
    ]
    rows.append(
        ["stream / stacked", f"{ratios['wall_s']:.2f}", "", f"{ratios['peak_rss_above_floor']:.2f}"]
    )
    print(f"{args.clients} clients, {inputs_mib:.0f} MiB of inputs in all (train+val+test)")
    print(format_table(["mode", "wall s", "peak RSS MiB", "above floor"], rows))
    figures = {
        "runs": runs, "medians": medians, "above_floor_mib": above, "ratios": ratios,
        "inputs_mib": inputs_mib,
    }  # fmt: skip
    path = write_results("stream_memory", figures, vars(args))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
