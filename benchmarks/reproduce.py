"""The reproduction report: every method on the papers' settings, one table per setting.

    python benchmarks/reproduce.py --jobs N [--seeds 0,1,2] [--clients 50] [--rounds 30]

Each unit of work is one (setting, seed, method) run in the in-process runtime, in a worker
process with one torch thread; units of one (setting, seed) share the same partition (the
seed fixes it). A finished unit leaves ``unit.json`` in its folder, so an interrupted run
continues where it stopped when started again with the same ``--out``. The report,
``docs/results.md`` (figures in ``docs/results.json``), is written from whatever units are
finished, and says which are missing: a partial report never looks complete.

Cells: mean ± sample std over seeds of the mean over benign clients of the test accuracy of
each client's best-validation model; its variance across clients; peer plus coordinator
bytes per client per round. Label-flip: the share of benign clients' graph edges that point
to attackers in the last round. Coalition settings: IPR (share of clients above their local
model) and RSD (std over clients of the gain over local, percentage points), the FedCollab
paper's Eq. 11-12. Each paper claim is checked against the measured cells, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, command_line, environment

DOCS = REPO_ROOT / "docs"
GRAPH_METHODS = (
    "local",
    "fedavg",
    "fedavg_ft",
    "fedprox",
    "ditto",
    "dpfl:budget=inf",
    "dpfl:budget=0.2",
    "dpfl:budget=0.1",
    "dpfl:budget=0.05",
    "dpfl_random:budget=0.1",
    "pfedgraph",
    "ipfl",
)
COALITION_METHODS = (
    "local",
    "fedavg",
    "dpfl:budget=0.2",
    "fedcollab",
    "equilibrium",
    "equilibrium:ocs=spo",
)


@dataclass(frozen=True)
class Setting:
    title: str
    overrides: tuple[str, ...]
    methods: tuple[str, ...]
    coalitions: bool = False


SETTINGS: dict[str, Setting] = {
    "dir": Setting(
        "MNIST-1D, Dir(0.1)", ("data.partition=dirichlet", "data.alpha=0.1"), GRAPH_METHODS
    ),
    "patho": Setting(
        "MNIST-1D, Patho(3)",
        ("data.partition=pathological", "data.classes_per_client=3"),
        GRAPH_METHODS,
    ),
    "label_flip": Setting(
        "MNIST-1D, Dir(0.1), 40% label-flip attackers",
        ("data.partition=dirichlet", "data.alpha=0.1", "data.label_flip_fraction=0.4"),
        ("local", "fedavg", "dpfl:budget=0.1", "dpfl_random:budget=0.1", "pfedgraph"),
    ),
    "label_groups": Setting(
        "MNIST-1D, FedCollab label-shift groups, N = 20",
        ("data.partition=label_groups", "data.num_clients=20"),
        COALITION_METHODS,
        coalitions=True,
    ),
    "feature_groups": Setting(
        "MNIST-1D, FedCollab feature-shift groups, N = 20",
        ("data.partition=feature_groups", "data.num_clients=20"),
        COALITION_METHODS,
        coalitions=True,
    ),
    "concept_groups": Setting(
        "MNIST-1D, FedCollab concept-shift groups, N = 20",
        ("data.partition=concept_groups", "data.num_clients=20"),
        COALITION_METHODS,
        coalitions=True,
    ),
}


@dataclass(frozen=True)
class Unit:
    setting: str
    seed: int
    method: str
    overrides: tuple[str, ...]
    folder: str

    @property
    def done_file(self) -> Path:
        return Path(self.folder) / "unit.json"


def run_unit(unit: Unit) -> dict[str, Any]:
    """Run one method on one (setting, seed); never raises (the error is returned)."""
    import torch
    from rich.console import Console

    from collabfl.coordinator.config import load_config
    from collabfl.coordinator.experiment import run_comparison
    from collabfl.coordinator.methods import parse_method_spec
    from collabfl.coordinator.recording import safe_name
    from collabfl.coordinator.report.run_dir import read_run

    torch.set_num_threads(1)
    started = time.perf_counter()
    result: dict[str, Any] = {"setting": unit.setting, "seed": unit.seed, "method": unit.method}
    try:
        config = load_config(None, [*unit.overrides, f"seed={unit.seed}", "threads=1", "jobs=1"])
        spec = parse_method_spec(unit.method, config)
        (summary,) = run_comparison(config, [spec], Path(unit.folder), Console(quiet=True))
        rows = read_run(Path(unit.folder) / safe_name(spec.label)).rows
        last = {int(r["client"]): r for r in rows}  # rows are in round order
        result |= {
            "summary": summary,
            "client_acc": {k: r.get("best_test_acc") for k, r in sorted(last.items())},
            "malicious": sorted(k for k, r in last.items() if r.get("malicious")),
            "error": None,
        }
    except Exception:
        result |= {"summary": None, "error": traceback.format_exc()}
    result["wall_s"] = time.perf_counter() - started
    env = environment()
    result["machine"] = f"Python {env['python']}, torch {env['torch']}, {env['cpu_count']} CPUs"
    if result["error"] is None:
        unit.done_file.write_text(json.dumps(result))
    return result


def spread(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def cell(values: list[float], digits: int = 2) -> str:
    if not values:
        return "—"
    mean, std = spread(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def ipr_rsd(method: dict[str, float | None], local: dict[str, float | None]) -> tuple[float, float]:
    """IPR (%): clients that beat their local model; RSD (pp): std of the gains over local."""
    gains = [
        100 * (method[k] - base)  # type: ignore[operator]
        for k, base in local.items()
        if base is not None and method.get(k) is not None
    ]
    return 100 * statistics.fmean(g > 0 for g in gains), statistics.pstdev(gains)


def setting_cells(name: str, results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method: the seeds it finished and the figures over them."""
    setting = SETTINGS[name]
    by_method: dict[str, dict[str, Any]] = {}
    local = {r["seed"]: r for r in results if r["setting"] == name and r["method"] == "local"}
    for method in setting.methods:
        runs = [r for r in results if r["setting"] == name and r["method"] == method]
        runs.sort(key=lambda r: r["seed"])
        summaries = [r["summary"] for r in runs]
        figures: dict[str, Any] = {
            "seeds": [r["seed"] for r in runs],
            "acc": [100 * s["mean_test_acc"] for s in summaries if s["mean_test_acc"] is not None],
            "var": [100**2 * s["var_test_acc"] for s in summaries if s["var_test_acc"] is not None],
            "bytes": [
                s["bytes_fetched_per_client_round"] + s["coordinator_bytes_per_client_round"]
                for s in summaries
            ],
            "to_attackers": [
                100 * s["benign_edges_to_malicious_last"]
                for s in summaries
                if s.get("benign_edges_to_malicious_last") is not None
            ],
            "local_wins": [
                100
                * s["best_candidate_clients"]["local"]
                / sum(s["best_candidate_clients"].values())
                for s in summaries
                if s.get("best_candidate_clients")
            ],
            "wall_s": [r["wall_s"] for r in runs],
        }
        if setting.coalitions:
            pairs = [
                ipr_rsd(r["client_acc"], local[r["seed"]]["client_acc"])
                for r in runs
                if r["seed"] in local
            ]
            figures["ipr"] = [p[0] for p in pairs]
            figures["rsd"] = [p[1] for p in pairs]
            figures["coalitions"] = [s.get("num_coalitions_last") for s in summaries]
        by_method[method] = figures
    return by_method


def mean_of(cells: dict[str, dict[str, Any]], method: str) -> float | None:
    values = cells.get(method, {}).get("acc") or []
    return statistics.fmean(values) if values else None


Claim = tuple[str, Callable[[dict[str, dict[str, Any]]], tuple[bool | None, str]]]


def beats(
    better: str, worse: str
) -> Callable[[dict[str, dict[str, Any]]], tuple[bool | None, str]]:
    def check(cells: dict[str, dict[str, Any]]) -> tuple[bool | None, str]:
        a, b = mean_of(cells, better), mean_of(cells, worse)
        if a is None or b is None:
            return None, "not measured"
        return a > b, f"{a:.2f} vs {b:.2f}"

    return check


def edges_to_attackers_below(
    limit: float,
) -> Callable[[dict[str, dict[str, Any]]], tuple[bool | None, str]]:
    def check(cells: dict[str, dict[str, Any]]) -> tuple[bool | None, str]:
        values = cells.get("dpfl:budget=0.1", {}).get("to_attackers") or []
        if not values:
            return None, "not measured"
        share = statistics.fmean(values)
        return share < limit, f"{share:.1f}% of benign DPFL edges point to attackers"

    return check


CLAIMS: dict[str, list[Claim]] = {
    "dir": [
        ("DPFL (Bc = 0.2N) beats Local (DPFL paper, Table 1)", beats("dpfl:budget=0.2", "local")),
        ("DPFL (Bc = 0.2N) beats FedAvg+FT and Ditto", beats("dpfl:budget=0.2", "fedavg_ft")),
        (
            "DPFL beats its random-graph ablation",
            beats("dpfl:budget=0.1", "dpfl_random:budget=0.1"),
        ),
        ("pFedGraph beats Local (pFedGraph paper)", beats("pfedgraph", "local")),
        ("Local beats FedAvg on a non-IID split", beats("local", "fedavg")),
    ],
    "patho": [
        ("DPFL (Bc = 0.2N) beats Local", beats("dpfl:budget=0.2", "local")),
        (
            "DPFL beats its random-graph ablation",
            beats("dpfl:budget=0.1", "dpfl_random:budget=0.1"),
        ),
        ("pFedGraph beats Local", beats("pfedgraph", "local")),
    ],
    "label_flip": [
        (
            "benign clients' graphs keep < 10% edges to attackers (DPFL paper)",
            edges_to_attackers_below(10.0),
        ),
        ("DPFL beats FedAvg under label flipping", beats("dpfl:budget=0.1", "fedavg")),
    ],
    "label_groups": [
        (
            "FedAvg inside FedCollab coalitions beats Local (FedCollab paper)",
            beats("fedcollab", "local"),
        ),
        ("FedCollab beats FedAvg over everyone", beats("fedcollab", "fedavg")),
    ],
    "feature_groups": [("FedCollab beats Local", beats("fedcollab", "local"))],
    "concept_groups": [("FedCollab beats FedAvg", beats("fedcollab", "fedavg"))],
}


def setting_table(name: str, cells: dict[str, dict[str, Any]], seeds: list[int]) -> list[str]:
    setting = SETTINGS[name]
    header = ["Method", "seeds", "Acc (%)", "Var (%²)", "KB/client/round"]
    if name == "label_flip":
        header.append("benign edges to attackers (%)")
    if setting.coalitions:
        header += ["IPR (%)", "RSD (pp)", "coalitions"]
    header.append("local model reported (%)")
    lines = [
        f"## {setting.title}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for method in setting.methods:
        figures = cells[method]
        done = len(figures["seeds"])
        row = [f"`{method}`", f"{done}/{len(seeds)}", cell(figures["acc"]), cell(figures["var"], 1)]
        row.append(cell([b / 1024 for b in figures["bytes"]], 1))
        if name == "label_flip":
            row.append(cell(figures["to_attackers"], 1))
        if setting.coalitions:
            counts = [c for c in figures["coalitions"] if c is not None]
            row += [
                cell(figures["ipr"], 1),
                cell(figures["rsd"], 2),
                cell(counts, 1) if counts else "—",
            ]
        row.append(cell(figures["local_wins"], 0) if figures["local_wins"] else "—")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Paper claims, checked against the cells above:", ""]
    for text, check in CLAIMS.get(name, []):
        verdict, detail = check(cells)
        mark = {True: "shown", False: "**not shown**", None: "not measured"}[verdict]
        lines.append(f"- {text}: {mark} ({detail}).")
    return [*lines, ""]


def write_report(
    results: list[dict[str, Any]],
    settings: list[str],
    seeds: list[int],
    args: argparse.Namespace,
    total_units: int,
) -> Path:
    finished = len(results)
    status = (
        "complete"
        if finished == total_units
        else f"**partial: {finished} of {total_units} runs finished**"
    )
    machines = sorted({r.get("machine", "not recorded") for r in results})
    run_minutes = sum(r["wall_s"] for r in results) / 60
    lines = [
        "# Reproduction report",
        "",
        f"Status: {status}. Regenerate (resumable) with "
        f"`{command_line().replace(' --report-only', '')}`.",
        "",
        f"N = {args.clients} clients, seeds {', '.join(map(str, seeds))}, {args.rounds} rounds, "
        f"τ_train = {args.epochs:g} epoch(s), in-process runtime, defaults otherwise "
        f"(evaluation.candidates = auto; see docs/fidelity.md for every difference from the "
        f"papers' code). Each run in its own process with one torch thread, on: "
        f"{'; '.join(machines) or 'no run finished'}; {run_minutes:.0f} process-minutes in all.",
        "",
        "Cells are mean ± sample std over the seeds that finished. Acc: mean over benign "
        "clients of the test accuracy of each client's best-validation model. Var: its "
        "variance across clients. KB: peer-to-peer plus coordinator model bytes per client "
        "per round. Local model reported: share of clients whose best-validation model is "
        "their post-training model rather than the aggregate (methods that score both).",
        "",
    ]
    figures: dict[str, Any] = {}
    for name in settings:
        cells = setting_cells(name, results)
        figures[name] = cells
        lines += setting_table(name, cells, seeds)
    DOCS.mkdir(exist_ok=True)
    (DOCS / "results.md").write_text("\n".join(lines))
    payload = {
        "settings": figures,
        "machines": machines,
        "command": command_line(),
        "status": status,
    }
    (DOCS / "results.json").write_text(json.dumps(payload, indent=1, default=str))
    return DOCS / "results.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"of {', '.join(SETTINGS)}")
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks" / "results" / "reproduce"
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="override")
    parser.add_argument(
        "--deadline-s", type=float, default=0.0, help="stop starting units after this"
    )
    parser.add_argument(
        "--report-only", action="store_true", help="write the report from finished runs"
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise SystemExit(f"unknown settings {sorted(unknown)}; choose from {list(SETTINGS)}")
    base = (
        f"data.num_clients={args.clients}",
        f"rounds={args.rounds}",
        f"epochs={args.epochs}",
        *args.overrides,
    )
    units = [
        Unit(name, seed, method, (*base, *SETTINGS[name].overrides),
             str(args.out / name / f"s{seed}" / method.replace(":", "_").replace("=", "-")))
        for seed in seeds
        for name in settings
        for method in SETTINGS[name].methods
    ]  # fmt: skip
    # Seeds first, so that a partial report has whole seeds; SPO, by far the slowest, last.
    units.sort(key=lambda u: (u.method == "equilibrium:ocs=spo", u.seed))
    results = [json.loads(u.done_file.read_text()) for u in units if u.done_file.exists()]
    todo = [] if args.report_only else [u for u in units if not u.done_file.exists()]
    print(
        f"{len(units)} runs: {len(results)} already finished, {len(todo)} to go, {args.jobs} jobs",
        flush=True,
    )
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
        futures = {}
        for unit in todo:
            Path(unit.folder).mkdir(parents=True, exist_ok=True)
            futures[pool.submit(run_unit, unit)] = unit
        for future in as_completed(futures):
            if future.cancelled():  # not started before --deadline-s: left for the next call
                continue
            result = future.result()
            unit = futures[future]
            status = "done" if result["error"] is None else "FAILED"
            elapsed = time.perf_counter() - started
            print(
                f"[{len(results) + 1}/{len(units)}] {unit.setting} s{unit.seed} {unit.method}: "
                f"{status} in {result['wall_s']:.0f} s (elapsed {elapsed:.0f} s)",
                flush=True,
            )
            if result["error"] is None:
                results.append(result)
            else:
                print(result["error"], flush=True)
            if args.deadline_s and time.perf_counter() - started > args.deadline_s:
                for pending in futures:
                    pending.cancel()
    path = write_report(results, settings, seeds, args, len(units))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
