"""FedCollab's estimated distances on the report's group settings: do they see the groups?

    python benchmarks/group_distances.py [--settings concept_groups] [--seeds 0]
        [--variants default,strong]

The reproduction report's coalition settings (N = 20 in four groups of five: label, feature
or concept shift between groups) run FedCollab in process. Whether FedCollab can find the
groups depends first on its distance estimates D̂: this runs the estimation alone, exactly
as the method does before round 0 (all pairs, the config's discriminator knobs), and
reports the mean D̂ within groups and across groups, the balanced accuracy behind them, and
the coalitions FedCollab's solver picks from these D̂ (C and restarts as configured).
Variants change only the discriminator knobs: "strong" trains it with a larger step and
twice the SGD steps per estimation step.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch
from _common import Stopwatch, format_table, write_results

from collabfl.client.node import ClientSplits
from collabfl.engine.builders import distance_settings
from collabfl.engine.config import load_config
from collabfl.engine.experiment import model_name, prepare_data, resolve_device
from collabfl.engine.inprocess import build_federation
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.strategies.distances import all_pairs, estimate_distances
from collabfl.strategies.fedcollab import coalitions_of, solve_coalitions

SETTINGS = ("label_groups", "feature_groups", "concept_groups")
VARIANTS: dict[str, tuple[str, ...]] = {
    "default": (),
    "strong": ("fedcollab.distance_lr=0.05", "fedcollab.distance_local_steps=20"),
}


def group_means(matrix: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    """Mean off-diagonal D̂ within groups and across groups."""
    same = groups[:, None] == groups[None, :]
    off = ~np.eye(len(groups), dtype=bool)
    return {
        "within": float(matrix[same & off].mean()),
        "across": float(matrix[~same].mean()),
        "across_min": float(matrix[~same].min()),
        "within_max": float(matrix[same & off].max()),
    }


def run(setting: str, seed: int, variant: str) -> dict[str, Any]:
    overrides = (
        f"data.partition={setting}",
        "data.num_clients=20",
        f"seed={seed}",
        *VARIANTS[variant],
    )
    config = load_config(None, list(overrides))
    device = resolve_device(config.device)
    data = prepare_data(config)
    splits = [ClientSplits.from_data(client, device) for client in data.clients]
    module = build_model(model_name(config), data.pool.num_classes, seed=config.seed)
    federation = build_federation(splits, FlatModel(module, device), config.training, config.seed)
    clients = sorted(federation.sample_counts)
    with Stopwatch() as watch:
        estimate = estimate_distances(
            federation, all_pairs(clients), distance_settings(config.fedcollab), 0
        )
    matrix = estimate.matrix(clients)
    groups = np.asarray(data.partition.meta["groups"])
    sizes = [federation.sample_counts[k] for k in clients]
    labels, _ = solve_coalitions(
        sizes, matrix, config.fedcollab.c, config.seed, config.fedcollab.restarts
    )
    return {
        "setting": setting,
        "seed": seed,
        "variant": variant,
        "overrides": list(overrides),
        "steps": estimate.steps,
        "distance": group_means(matrix, groups),
        "coalitions": coalitions_of(labels),
        "groups": groups.tolist(),
        "wall_s": watch.wall,
        "cpu_s": watch.cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--variants", default="default,strong")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = [
        run(setting, int(seed), variant)
        for setting in args.settings.split(",")
        for seed in args.seeds.split(",")
        for variant in args.variants.split(",")
    ]
    rows = [
        [
            r["setting"],
            r["seed"],
            r["variant"],
            r["steps"],
            f"{r['distance']['within']:.3f}",
            f"{r['distance']['across']:.3f}",
            " ".join("{" + ",".join(map(str, c)) + "}" for c in r["coalitions"]),
        ]
        for r in runs
    ]
    headers = ["setting", "seed", "variant", "steps", "D̂ within", "D̂ across", "coalitions"]
    print(format_table(headers, rows))
    print(f"wrote {write_results('group_distances', {'runs': runs}, vars(args))}")


if __name__ == "__main__":
    main()
