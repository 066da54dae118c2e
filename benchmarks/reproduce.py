"""The reproduction report: every method on the papers' settings, one table per setting.

    python benchmarks/reproduce.py --jobs N [--seeds 0,1,2] [--clients 50] [--rounds 30]
        [--settings dir,label_flip,ce_synthetic] [--methods local --methods dpfl:budget=0.1]
        [--report-name results]
    python benchmarks/reproduce.py --redraw-from-json [--report-name results]
    python benchmarks/reproduce.py --figures-from-units --out RERUN [--settings dir,patho]

Each unit of work is one (setting, seed, method) run in the in-process runtime, in a worker
process with one torch thread; units of one (setting, seed) share the same partition (the
seed fixes it). A finished unit leaves ``unit.json`` in its folder, so an interrupted run
continues where it stopped when started again with the same ``--out``. The report,
``docs/results.md`` (figures in ``docs/results.json``, PNGs in ``docs/results/``), is
written from whatever units are finished, and says which are missing: a partial report never
looks complete. ``--report-name`` writes it under another name, so a small run (fewer
settings, methods, seeds, clients or rounds) never replaces the full report. A unit keeps
what the figures need: per-round accuracy, the last collaboration graph, the benign share
on attackers by round; units from before it did lack them, and the report says so. The CE
synthetic regression (``ce_synthetic``) runs in the main process: it takes seconds. Notes
written by hand beside a setting's table live in ``docs/notes/<setting>.md``, and under the
report's header in ``docs/notes/<report name>_intro.md``. The report's JSON keeps the cells
and what the other figures draw (per-round series, the figured graph, the last coalitions), so
``--redraw-from-json`` redraws every figure without the units (reports from before it kept
those records: the accuracy-vs-variance ones only). ``--figures-from-units`` redraws a
report's by-round, graph and coalition figures from a rerun of some of its runs (the units in
``--out``) and says so in their captions, leaving its tables and scatters as they are.

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
import re
import statistics
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import report_figures
from _common import REPO_ROOT, command_line, environment

DOCS = REPO_ROOT / "docs"
NOTES = DOCS / "notes"
SYNTHETIC = "ce_synthetic"
"""The collaboration-equilibrium paper's synthetic regression (benchmarks/equilibrium_synthetic)."""
GRAPH_METHODS = (
    "local",
    "fedavg",
    "fedavg_ft",
    "fedprox",
    "ditto",
    "dpfl:budget=inf",
    "dpfl:budget=0.2",
    "dpfl:budget=0.2,ggc_tie=larger",
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


def machine() -> str:
    """What a unit's numbers depend on besides the code: the build, and the CPU's kernels
    (torch picks AVX2, AVX-512 or AMX code by what the CPU offers, and the bits differ)."""
    import torch

    env = environment()
    capability = torch.backends.cpu.get_cpu_capability()
    return f"Python {env['python']}, torch {env['torch']}, {env['cpu_count']} CPUs ({capability})"


def unit_folder(method: str) -> str:
    """A method's folder name (``dpfl:budget=0.1`` → ``dpfl_budget-0.1``)."""
    return method.replace(":", "_").replace("=", "-").replace(",", "_")


def run_unit(unit: Unit) -> dict[str, Any]:
    """Run one method on one (setting, seed); never raises (the error is returned)."""
    import torch
    from rich.console import Console

    from collabfl.engine.config import load_config
    from collabfl.engine.experiment import run_comparison
    from collabfl.engine.methods import parse_method_spec
    from collabfl.engine.recording import safe_name
    from collabfl.engine.report.run_dir import read_run

    torch.set_num_threads(1)
    started = time.perf_counter()
    result: dict[str, Any] = {"setting": unit.setting, "seed": unit.seed, "method": unit.method}
    try:
        config = load_config(None, [*unit.overrides, f"seed={unit.seed}", "threads=1", "jobs=1"])
        spec = parse_method_spec(unit.method, config)
        (summary,) = run_comparison(config, [spec], Path(unit.folder), Console(quiet=True))
        records = read_run(Path(unit.folder) / safe_name(spec.label))
        last = {int(r["client"]): r for r in records.rows}  # rows are in round order
        malicious = sorted(k for k, r in last.items() if r.get("malicious"))
        result |= {
            "summary": summary,
            "client_acc": {k: r.get("best_test_acc") for k, r in sorted(last.items())},
            "malicious": malicious,
            "curve": benign_curve(records.rows, set(malicious)),
            "true_groups": (records.config.get("data") or {}).get("true_groups"),
            **graph_record(records.graphs, malicious),
            "error": None,
        }
    except Exception:
        result |= {"summary": None, "error": traceback.format_exc()}
    result["wall_s"] = time.perf_counter() - started
    result["machine"] = machine()
    if result["error"] is None:
        unit.done_file.write_text(json.dumps(result))
    return result


def benign_curve(rows: list[dict[str, Any]], malicious: set[int]) -> list[float | None]:
    """By round, the benign clients' mean test accuracy of that round's model."""
    by_round: dict[int, list[float]] = {}
    for row in rows:
        values = by_round.setdefault(int(row["round"]), [])
        if int(row["client"]) not in malicious and row.get("test_acc") is not None:
            values.append(float(row["test_acc"]))
    return [statistics.fmean(v) if v else None for _, v in sorted(by_round.items())]


def graph_record(graphs: dict[int, Any], malicious: list[int]) -> dict[str, Any]:
    """The last collaboration graph (weights to 4 decimals) and, with attackers, the benign
    weight share on them in every round's graph; nothing for a method without graphs."""
    from collabfl.engine.report.graph_stats import edges_to_group

    if not graphs:
        return {}
    record: dict[str, Any] = {"graph_last": graphs[max(graphs)].round(4).tolist()}
    if malicious:
        group = [k in malicious for k in range(len(graphs[max(graphs)]))]
        record["to_attackers_by_round"] = {
            r: edges_to_group(g, np.array(group)) for r, g in sorted(graphs.items())
        }
    return record


def unit_groups(unit: dict[str, Any], clients: int) -> list[str] | None:
    """A unit's clients' true groups as recorded; for a unit from before they were, its
    attackers against the rest; None when it knows of no groups."""
    if unit.get("true_groups"):
        return list(unit["true_groups"])
    malicious = set(unit.get("malicious") or ())
    if not malicious:
        return None
    return ["label-flipped" if k in malicious else "benign" for k in range(clients)]


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


def setting_cells(
    name: str, results: list[dict[str, Any]], methods: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """Per method (of ``methods``, in order): the seeds it finished and the figures."""
    setting = SETTINGS[name]
    by_method: dict[str, dict[str, Any]] = {}
    local = {r["seed"]: r for r in results if r["setting"] == name and r["method"] == "local"}
    for method in methods:
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
    for method, figures in cells.items():
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


def run_synthetic(out: Path, seeds: list[int], run_missing: bool) -> list[dict[str, Any]]:
    """The CE synthetic regression (both settings of Table 1) with our SPO settings and the
    official code's, one stored unit per (variant, seed); missing ones run when asked."""
    import equilibrium_synthetic as ce
    import torch

    torch.set_num_threads(1)
    results = []
    for variant, settings in ce.SPO_VARIANTS.items():
        for seed in seeds:
            done = out / SYNTHETIC / variant / f"s{seed}.json"
            if not done.exists() and run_missing:
                started = time.perf_counter()
                rows = [
                    ce.run(rho, n, seed, ce.DEFAULT_NOISE, settings) | {"paper": paper}
                    for rho, n, paper in ce.SETTINGS
                ]
                unit = {
                    "variant": variant,
                    "seed": seed,
                    "rows": rows,
                    "wall_s": time.perf_counter() - started,
                    "machine": machine(),
                }
                done.parent.mkdir(parents=True, exist_ok=True)
                done.write_text(json.dumps(unit))
                print(f"{SYNTHETIC} {variant} s{seed}: done in {unit['wall_s']:.0f} s", flush=True)
            if done.exists():
                results.append(json.loads(done.read_text()))
    return results


def synthetic_section(units: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """The CE synthetic table: per (ρ, n) and SPO variant, each seed's coalitions."""
    import equilibrium_synthetic as ce

    lines = [
        "## Collaboration equilibrium, synthetic linear regression (CE paper, Table 1)",
        "",
        "Six clients, y = ±u_iᵀx + ε (clients 3–5 flipped), label noise σ = "
        f"{ce.DEFAULT_NOISE}; SPO in memory (`benchmarks/equilibrium_synthetic.py`). `ours`: "
        "our SPO defaults; `official`: the official code's start ray, upper clip, affine "
        "hypernetwork and 200 search steps (`SpoSettings.official()`, docs/fidelity.md). "
        "Exhaustive: the exact benefit graph from pooled least squares and exact losses.",
        "",
        "| ρ, n | SPO | seeds | coalitions per seed | = paper | exhaustive (first seed) |",
        "|---|---|---|---|---|---|",
    ]
    figures: dict[str, Any] = {}
    matched = total = 0
    alone = [row["exhaustive"] == [[c] for c in range(6)] for u in units for row in u["rows"]]
    for rho, n, paper in ce.SETTINGS:
        for variant in ce.SPO_VARIANTS:
            runs = sorted(
                (
                    (u["seed"], row)
                    for u in units
                    if u["variant"] == variant
                    for row in u["rows"]
                    if row["rho"] == rho
                ),
                key=lambda pair: pair[0],
            )
            hits = sum(row["coalitions"] == paper for _, row in runs)
            matched, total = matched + hits, total + len(runs)
            shown = "; ".join(f"s{seed}: {ce.show(row['coalitions'])}" for seed, row in runs)
            exhaustive = ce.show(runs[0][1]["exhaustive"]) if runs else "—"
            lines.append(
                f"| ρ = {rho}, n = {n} | `{variant}` | {len(runs)} | {shown or '—'} | "
                f"{hits}/{len(runs)} | {exhaustive} |"
            )
            figures[f"rho={rho},{variant}"] = {"seeds": [p[0] for p in runs], "matches": hits}
    verdict = "not measured" if not total else "shown" if matched == total else "**not shown**"
    lines += [
        "",
        "Paper claims, checked against the cells above:",
        "",
        "- SPO's equilibrium is {0,1,2} {3,4,5} at ρ = 0.1 and every client alone at ρ = 1 "
        f"(CE paper, Table 1): {verdict} ({matched} of {total} runs match).",
        f"- The exhaustive benefit graph leaves every client alone in {sum(alone)} of "
        f"{len(alone)} runs; where it does at ρ = 0.1, SPO's grouping comes from its clip "
        "floor (strategies/spo.py), not from a true benefit.",
        "",
    ]
    return lines, figures


FIGURE_CAPTIONS = {
    "by_round": "accuracy by round",
    "to_attackers": "benign weight on attackers by round",
    "graph": "graph in the last round",
    "coalitions": "coalition structure",
}
"""How each record figure's line in the report starts (the graph's after its method's name):
``--figures-from-units`` finds the line it rewrites by it."""


def graph_method(name: str) -> str:
    """The DPFL variant whose last graph a setting's graph figure shows."""
    return "dpfl:budget=0.1" if name == "label_flip" else "dpfl:budget=0.2"


def figure_records(
    name: str, methods: list[str], units: list[dict[str, Any]], rounds: int
) -> dict[str, Any]:
    """What a setting's by-round, graph and coalition figures draw from its finished
    ``units``, small enough for the report's JSON, so that the figures can be redrawn once the
    units are gone. One key per figure with something to draw. Series are per method, in
    ``methods`` order (which fixes each method's colour), one list per run, in percent.
    ``rounds``: the planned rounds, where a unit's summary does not say."""
    planned = min((u["summary"].get("rounds_planned") or rounds for u in units), default=rounds)

    def percent(values: list[float | None]) -> list[float | None]:
        return [None if v is None else round(100 * v, 3) for v in values]

    def per_method(series: Callable[[dict[str, Any]], list[float | None] | None]) -> Any:
        with_it = [u for u in units if series(u)]
        runs = {m: [percent(series(u) or []) for u in with_it if u["method"] == m] for m in methods}
        seeds = sorted({u["seed"] for u in with_it})
        return {"planned": planned, "seeds": seeds, "runs": runs} if with_it else None

    def to_attackers(unit: dict[str, Any]) -> list[float | None] | None:
        shares = unit.get("to_attackers_by_round") or {}
        return [v for _, v in sorted(shares.items(), key=lambda kv: int(kv[0]))] or None

    records = {"by_round": per_method(lambda u: u.get("curve"))}
    if records["by_round"]:  # the curves leave attackers out: the label says so when there are
        records["by_round"]["benign"] = any(u.get("malicious") for u in units)
    if name == "label_flip":
        records["to_attackers"] = per_method(to_attackers)
    graphs = [u for u in units if u["method"] == graph_method(name) and u.get("graph_last")]
    if graphs:
        unit = min(graphs, key=lambda u: u["seed"])
        weights = unit["graph_last"]
        records["graph"] = {
            "seed": unit["seed"],
            "weights": weights,
            "groups": unit_groups(unit, len(weights)),
        }
    with_strip = sorted(
        (u for u in units if u["summary"].get("coalitions_last")),
        key=lambda u: (u["method"], u["seed"]),
    )
    if SETTINGS[name].coalitions and with_strip:
        clients = max(len(u["client_acc"]) for u in units)
        records["coalitions"] = {
            "seeds": sorted({u["seed"] for u in with_strip}),
            "strips": {
                f"{u['method']} s{u['seed']}": u["summary"]["coalitions_last"] for u in with_strip
            },
            "clients": clients,
            "groups": next((g for u in units if (g := unit_groups(u, clients))), None),
        }
    return {kind: record for kind, record in records.items() if record}


def draw_records(name: str, records: dict[str, Any], folder: Path) -> dict[str, Path | None]:
    """Draw the figures that ``records`` (figure_records) hold, as folder/<name>_<kind>.png."""
    title = SETTINGS[name].title
    drawn: dict[str, Path | None] = {}
    benign = "benign clients' " if records.get("by_round", {}).get("benign") else ""
    for kind, ylabel in (
        ("by_round", f"{benign}mean test accuracy of the round's model (%)"),
        ("to_attackers", "benign clients' weight on attackers (%)"),
    ):
        if series := records.get(kind):
            drawn[kind] = report_figures.series_by_round(
                title, ylabel, series["runs"], folder / f"{name}_{kind}.png", series["planned"]
            )
    if graph := records.get("graph"):
        drawn["graph"] = report_figures.graph_heatmap(
            f"{title}: {graph_method(name)}, seed {graph['seed']}",
            graph["weights"],
            graph["groups"],
            folder / f"{name}_graph.png",
        )
    if coalitions := records.get("coalitions"):
        drawn["coalitions"] = report_figures.coalition_structure(
            title,
            coalitions["strips"],
            coalitions["clients"],
            folder / f"{name}_coalitions.png",
            coalitions["groups"],
        )
    return drawn


def figure_line(text: str, path: Path | None, missing: str, report_name: str) -> str:
    """A figure's line in the report: its link, or why it is not drawn."""
    if path is None:
        return f"- {text}: not drawn, {missing}."
    return f"- {text}: ![{text}]({report_name}/{path.name})"


def seed_list(seeds: list[int]) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def record_figure_lines(
    name: str,
    records: dict[str, Any],
    drawn: dict[str, Path | None],
    report_name: str,
    runs: int,
    rerun: str | None = None,
) -> dict[str, str]:
    """The report's line of each record figure of the setting, by kind. ``runs``: the runs
    in the table; ``rerun`` (e.g. "rerun on <machine>"): the figures come from a rerun of some
    of them, not from the table's own runs, and each caption says which seeds."""
    lines = {}

    def source(seeds: list[int]) -> str:
        return f"{seed_list(seeds)}, {rerun}" if rerun else seed_list(seeds)

    def stored(kind: str) -> str:
        series = records.get(kind) or {"runs": {}, "seeds": []}
        count = f"{sum(len(r) for r in series['runs'].values())} of {runs} runs"
        return f"{count}: {source(series['seeds'])}" if rerun else f"{count} stored it"

    lines["by_round"] = figure_line(
        f"{FIGURE_CAPTIONS['by_round']} ({stored('by_round')})",
        drawn.get("by_round"),
        "these units predate per-round records: rerun them to draw it",
        report_name,
    )
    if name == "label_flip":
        lines["to_attackers"] = figure_line(
            FIGURE_CAPTIONS["to_attackers"] + (f" ({stored('to_attackers')})" if rerun else ""),
            drawn.get("to_attackers"),
            "these units predate per-round graph records: rerun them to draw it",
            report_name,
        )
    graph = records.get("graph")
    lines["graph"] = figure_line(
        f"`{graph_method(name)}` {FIGURE_CAPTIONS['graph']}"
        + (f" ({source([graph['seed']])})" if graph else ""),
        drawn.get("graph"),
        "these units predate graph records: rerun them to draw it",
        report_name,
    )
    if SETTINGS[name].coalitions:
        coalitions = records.get("coalitions") or {}
        against = ", against the true groups" if coalitions.get("groups") else ""
        rerun_of = f"; {source(coalitions['seeds'])}" if coalitions and rerun else ""
        lines["coalitions"] = figure_line(
            f"{FIGURE_CAPTIONS['coalitions']} (each client's final coalition{against}{rerun_of})",
            drawn.get("coalitions"),
            "no coalition method finished",
            report_name,
        )
    return lines


def setting_figures(
    name: str,
    cells: dict[str, dict[str, Any]],
    results: list[dict[str, Any]],
    folder: Path,
    report_name: str,
    rounds: int,
) -> tuple[list[str], dict[str, Any]]:
    """Draw the setting's figures from its units; say for each one what it comes from.
    Returns the report's lines and the records the figures were drawn from.
    ``rounds``: the planned rounds, where a unit's summary does not say."""
    units = [r for r in results if r["setting"] == name]
    scatter = report_figures.accuracy_vs_variance(
        SETTINGS[name].title, cells, folder / f"{name}_acc_var.png"
    )
    records = figure_records(name, list(cells), units, rounds)
    drawn = draw_records(name, records, folder)
    lines = [
        "Figures (from the runs in the table above):",
        "",
        figure_line(
            "accuracy vs variance across clients", scatter, "no method finished", report_name
        ),
        *record_figure_lines(name, records, drawn, report_name, len(units)).values(),
        "",
    ]
    return lines, records


def notes(name: str) -> list[str]:
    """Hand-written notes kept beside a setting's table (docs/notes/<name>.md)."""
    path = NOTES / f"{name}.md"
    return [path.read_text().rstrip(), ""] if path.exists() else []


def write_report(
    results: list[dict[str, Any]],
    synthetic: list[dict[str, Any]],
    settings: list[str],
    methods: set[str],
    seeds: list[int],
    args: argparse.Namespace,
    total_units: int,
) -> Path:
    finished = len(results) + len(synthetic)
    status = (
        "complete"
        if finished == total_units
        else f"**partial: {finished} of {total_units} runs finished**"
    )
    machines = sorted({r.get("machine", "not recorded") for r in [*results, *synthetic]})
    run_minutes = sum(r["wall_s"] for r in [*results, *synthetic]) / 60
    folder = DOCS / args.report_name
    lines = [
        "# Reproduction report",
        "",
        f"Status: {status}. Regenerate (resumable) with "
        f"`{command_line().replace(' --report-only', '')}`.",
        "",
        f"N = {args.clients} clients (coalition settings: as stated), seeds "
        f"{', '.join(map(str, seeds))}, {args.rounds} rounds, τ_train = {args.epochs:g} epoch(s), "
        f"in-process runtime, defaults otherwise (evaluation.candidates = auto; see "
        f"docs/fidelity.md for every difference from the papers' code). Each run in its own "
        f"process with one torch thread, on: {'; '.join(machines) or 'no run finished'}; "
        f"{run_minutes:.0f} process-minutes in all.",
        "",
        "Cells are mean ± sample std over the seeds that finished. Acc: mean over benign "
        "clients of the test accuracy of each client's best-validation model. Var: its "
        "variance across clients. KB: peer-to-peer plus coordinator model bytes per client "
        "per round. Local model reported: share of clients whose best-validation model is "
        "their post-training model rather than the aggregate (methods that score both). "
        "`ggc_tie=larger`: GGC's opt-in tie variant (add a peer whose gains are both "
        "non-positive only when its raw add gain is the larger), beside the paper's rule.",
        "",
        *notes(f"{args.report_name}_intro"),
    ]
    figures: dict[str, Any] = {}
    records: dict[str, Any] = {}
    for name in settings:
        if name == SYNTHETIC:
            section, figures[name] = synthetic_section(synthetic)
            lines += section + notes(name)
            continue
        chosen = tuple(m for m in SETTINGS[name].methods if not methods or m in methods)
        cells = setting_cells(name, results, chosen)
        figures[name] = cells
        lines += setting_table(name, cells, seeds)
        section, records[name] = setting_figures(
            name, cells, results, folder, args.report_name, args.rounds
        )
        lines += section
        lines += notes(name)
    DOCS.mkdir(exist_ok=True)
    path = DOCS / f"{args.report_name}.md"
    path.write_text("\n".join(lines))
    payload = {
        "settings": figures,
        "machines": machines,
        "command": command_line(),
        "status": status,
        "figures": records,
    }
    (DOCS / f"{args.report_name}.json").write_text(report_json(payload))
    return path


def report_json(payload: dict[str, Any]) -> str:
    """The report's JSON, indented, with each list of plain values on one line: a 50-client
    graph is 50 lines, not 2,500."""
    text = json.dumps(payload, indent=1, default=str)
    # A list holding no list, object or string: its commas are separators only.
    flat = r"\[[^\[\]{}\"]*\]"
    return re.sub(flat, lambda m: "".join(m.group(0).split()).replace(",", ", "), text)


def redraw_from_json(report_name: str) -> list[Path]:
    """Redraw, when the units are not on this machine, every figure that docs/<report_name>.json
    holds enough for: the accuracy-vs-variance ones from its cells, the others from the records
    it keeps of them (reports written before it kept them have none)."""
    payload = json.loads((DOCS / f"{report_name}.json").read_text())
    folder = DOCS / report_name
    drawn = []
    for name, cells in payload["settings"].items():
        if name in SETTINGS:
            path = folder / f"{name}_acc_var.png"
            if report_figures.accuracy_vs_variance(SETTINGS[name].title, cells, path):
                drawn.append(path)
    for name, records in payload.get("figures", {}).items():
        drawn += [p for p in draw_records(name, records, folder).values() if p]
    return drawn


def replace_figure_line(text: str, name: str, kind: str, line: str) -> str:
    """``text`` (a report) with the line of setting ``name``'s ``kind`` figure replaced."""
    lines = text.split("\n")
    start = lines.index(f"## {SETTINGS[name].title}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    caption = FIGURE_CAPTIONS[kind]
    prefix = f"- `{graph_method(name)}` {caption}" if kind == "graph" else f"- {caption}"
    found = [i for i in range(start, end) if lines[i].startswith(prefix)]
    if len(found) != 1:
        raise SystemExit(
            f"report section {SETTINGS[name].title!r} has {len(found)} lines starting "
            f"{prefix!r}, expected 1: rewrite the report with --report-only first"
        )
    lines[found[0]] = line
    return "\n".join(lines)


def agreement(units: list[dict[str, Any]], cells: dict[str, dict[str, Any]]) -> str:
    """How the rerun ``units``' accuracies compare with the table's cells of the same
    (method, seed): a rerun on another CPU need not give the same bits."""
    offs = []
    for unit in units:
        cell, acc = cells[unit["method"]], unit["summary"].get("mean_test_acc")
        # a cell with a seed that had no accuracy does not say which value is whose
        if (
            acc is not None
            and unit["seed"] in cell["seeds"]
            and len(cell["acc"]) == len(cell["seeds"])
        ):
            offs.append(abs(100 * acc - cell["acc"][cell["seeds"].index(unit["seed"])]))
    same = sum(off == 0 for off in offs)
    if not offs or same == len(offs):
        return ", the table's accuracies to the bit" if offs else ""
    if same:
        return (
            f", {same} of {len(offs)} final accuracies the table's to the bit, the others up "
            f"to {max(offs):.2f} pp off"
        )
    return f", final accuracies up to {max(offs):.2f} pp off the table's"


def figures_from_units(report_name: str, out: Path, settings: list[str], rounds: int) -> list[Path]:
    """Redraw an existing report's by-round, to-attackers, graph and coalition figures from
    whatever units of its settings are in ``out`` (a rerun of some of its runs that kept the
    records those figures need), and rewrite those figures' lines to say where they come from.
    Its tables, its accuracy-vs-variance figures and every other line stay as they are, so a
    report whose units are gone gets its figures back without its cells changing. A coalition
    figure is redrawn only when the units hold a strip for every (method, seed) the table has
    one for: fewer strips would show less than the figure drawn first. The records drawn are
    kept in docs/<report_name>.json for --redraw-from-json."""
    md, js = DOCS / f"{report_name}.md", DOCS / f"{report_name}.json"
    text, payload = md.read_text(), json.loads(js.read_text())
    drawn = []
    for name, cells in payload["settings"].items():
        if name not in SETTINGS or name not in settings:
            continue
        units = [json.loads(p.read_text()) for p in sorted((out / name).glob("s*/*/unit.json"))]
        units = [u for u in units if u["method"] in cells]
        if not units:
            continue
        records = figure_records(name, list(cells), units, rounds)
        in_table = {
            f"{m} s{seed}"
            for m, c in cells.items()
            for seed, count in zip(c["seeds"], c.get("coalitions") or [], strict=False)
            if count is not None
        }
        if not in_table <= set(records.get("coalitions", {}).get("strips", {})):
            records.pop("coalitions", None)
        paths = draw_records(name, records, DOCS / report_name)
        machines = ", ".join(sorted({u.get("machine", "a machine not recorded") for u in units}))
        runs = sum(len(c["seeds"]) for c in cells.values())
        rerun = f"rerun on {machines}{agreement(units, cells)}"
        lines = record_figure_lines(name, records, paths, report_name, runs, rerun)
        for kind in records:
            text = replace_figure_line(text, name, kind, lines[kind])
        payload.setdefault("figures", {}).setdefault(name, {}).update(records)
        drawn += [p for p in paths.values() if p]
    md.write_text(text)
    js.write_text(report_json(payload))
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--epochs", type=float, default=1.0)
    choices = [*SETTINGS, SYNTHETIC]
    parser.add_argument("--settings", default=",".join(choices), help=f"of {', '.join(choices)}")
    parser.add_argument(
        "--methods", action="append", default=[], help="only this method (repeat; default: all)"
    )
    parser.add_argument(
        "--report-name", default="results", help="writes docs/NAME.md, NAME.json, NAME/*.png"
    )
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
    parser.add_argument(
        "--redraw-from-json",
        action="store_true",
        help="only redraw the figures docs/NAME.json holds enough for",
    )
    parser.add_argument(
        "--figures-from-units",
        action="store_true",
        help="only redraw docs/NAME.md's by-round, graph and coalition figures from the units "
        "in --out (a rerun of some of its runs), tables and scatters unchanged",
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = set(settings) - set(choices)
    if unknown:
        raise SystemExit(f"unknown settings {sorted(unknown)}; choose from {choices}")
    methods = {m.strip() for m in args.methods if m.strip()}
    known = {m for s in SETTINGS.values() for m in s.methods}
    if methods - known:
        raise SystemExit(f"unknown methods {sorted(methods - known)}; choose from {sorted(known)}")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", args.report_name):
        raise SystemExit(f"--report-name must be letters, digits, _ or -, got {args.report_name!r}")
    if args.redraw_from_json or args.figures_from_units:
        for kept in (DOCS / f"{args.report_name}.md", DOCS / f"{args.report_name}.json"):
            if not kept.exists():
                raise SystemExit(f"--report-name {args.report_name}: no {kept}; write it first")
        redrawn = (
            redraw_from_json(args.report_name)
            if args.redraw_from_json
            else figures_from_units(args.report_name, args.out, settings, args.rounds)
        )
        for path in redrawn:
            print(f"redrew {path.relative_to(REPO_ROOT)}")
        if not redrawn:
            print(f"nothing to redraw: no records in the report, no units under {args.out}")
        return
    base = (
        f"data.num_clients={args.clients}",
        f"rounds={args.rounds}",
        f"epochs={args.epochs}",
        *args.overrides,
    )
    units = [
        Unit(name, seed, method, (*base, *SETTINGS[name].overrides),
             str(args.out / name / f"s{seed}" / unit_folder(method)))
        for seed in seeds
        for name in settings if name != SYNTHETIC
        for method in SETTINGS[name].methods if not methods or method in methods
    ]  # fmt: skip
    # Seeds first, so that a partial report has whole seeds; SPO, by far the slowest, last.
    units.sort(key=lambda u: (u.method == "equilibrium:ocs=spo", u.seed))
    results = [json.loads(u.done_file.read_text()) for u in units if u.done_file.exists()]
    todo = [] if args.report_only else [u for u in units if not u.done_file.exists()]
    synthetic_units = 2 * len(seeds) if SYNTHETIC in settings else 0
    print(
        f"{len(units) + synthetic_units} runs: {len(results)} already finished (not counting "
        f"{SYNTHETIC}), {len(todo)} to go, {args.jobs} jobs",
        flush=True,
    )
    synthetic = (
        run_synthetic(args.out, seeds, not args.report_only) if SYNTHETIC in settings else []
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
    total = len(units) + synthetic_units
    path = write_report(results, synthetic, settings, methods, seeds, args, total)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
