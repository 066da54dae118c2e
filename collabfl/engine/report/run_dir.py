"""The run directory: writing a run's records as it goes and reading them back.

Layout: config.json, metrics.jsonl (one row per round and client), graphs/round_NNNN.json
(one collaboration graph per round kept, graph methods only), coalitions.jsonl (one line per round,
coalition methods only), messages.jsonl (a real federation's message timings, one line per
answered message), failures.jsonl (steps that failed on clients, one line each; only when
one did) and summary.json. Whole files are written through a temporary file and
os.replace, so a crash never leaves half a config, graph or summary behind; the .jsonl files
are append-only and flushed after every round.

What grows with every round is bounded (``Retention``, the config's ``retention`` section):
graph files are kept for the latest rounds and, before them, every n-th round only;
messages.jsonl (diagnostics) is rotated by size into messages.jsonl.1, .2, ... The result,
metrics.jsonl, is kept whole, written compactly: a row leaves out the metrics its method does
not report (None), and ``read_run`` gives them back as None.
"""

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from collabfl.engine.report.graph_stats import adjacency
from collabfl.kernel.atomic import write_text
from collabfl.kernel.log_rotation import rotate, rotated
from collabfl.strategies.metrics import recorded_names

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
COALITIONS_FILE = "coalitions.jsonl"
MESSAGES_FILE = "messages.jsonl"
FAILURES_FILE = "failures.jsonl"
SUMMARY_FILE = "summary.json"
GRAPHS_DIR = "graphs"
SEEDS_FILE = "seeds.json"
"""A multi-seed run's plan (seeds, methods), written before its first seed starts."""
ROW_FIELDS = ("round", "client", *recorded_names())
"""What every metrics row holds, in order: a row read back has each (None where the file
leaves it out) and then whatever else it holds (coordinator_bytes, round_s)."""

FINE_TUNE = "fine_tune"
"""The ``phase`` of the rows of a step after a method's planned rounds (FedAvg+FT's and
FedProx+FT's local fine-tuning): their ``round`` is the planned rounds' count, one past the
last round, so a reader of metrics.jsonl must not take it for a round."""


OUTPUT_MARKERS = ("partition.npz", "summary.json", "results.md", SEEDS_FILE, "serverapp.log")
"""Files a ``compare``/``simulate``/``federation up``/``admin start`` output folder holds once
it has started."""


def claim_output_dir(path: Path, overwrite: bool = False) -> Path:
    """Make ``path`` ready for a new run, before anything is written into it.

    A missing or empty folder is fine. A folder holding an earlier run is refused unless
    ``overwrite`` (then the earlier run is removed); a non-empty folder that holds no run is
    refused either way, so a mistyped ``--out`` never deletes unrelated files.
    """
    if not path.exists():
        return path
    if not path.is_dir():
        raise ValueError(f"--out {path} is a file, not a folder")
    if not any(path.iterdir()):
        return path
    if not any((path / marker).exists() for marker in OUTPUT_MARKERS):
        raise ValueError(f"--out {path} is not empty and holds no collabfl run; choose another")
    if not overwrite:
        raise ValueError(f"--out {path} holds an earlier run; choose another or pass --overwrite")
    shutil.rmtree(path)
    return path


def graph_file_name(round_index: int) -> str:
    """File name of one round's graph; zero padded so names sort in round order."""
    return f"round_{round_index:04d}.json"


def _graph_round(path: Path) -> int:
    """The round a graph file's name gives (``round_0042.json``: 42)."""
    return int(path.stem.removeprefix("round_"))


@dataclass(frozen=True)
class Retention:
    """What a run folder keeps of what grows every round (the config's ``retention``).

    Graph files of the ``graphs_keep_last`` latest rounds are kept, and before them those of
    rounds that are multiples of ``graphs_keep_every`` (round 0 included, so a run's first
    graph stays). messages.jsonl is rotated once it passes ``messages_max_bytes``, keeping
    ``messages_keep`` rotated files."""

    graphs_keep_last: int = 1000
    graphs_keep_every: int = 100
    messages_max_bytes: int = 16 << 20
    messages_keep: int = 2

    def keeps_graph(self, round_index: int, latest: int) -> bool:
        """Whether round ``round_index``'s graph stays once round ``latest`` is recorded."""
        return (
            latest - round_index < self.graphs_keep_last
            or round_index % self.graphs_keep_every == 0
        )

    def pruned_by(self, latest: int) -> bool:
        """Whether recording round ``latest`` has pruned some earlier round's graph."""
        return self.graphs_keep_every > 1 and latest > self.graphs_keep_last

    def describe(self) -> str:
        """The rule in words, for a summary that covers fewer graphs than rounds."""
        return (
            f"the last {self.graphs_keep_last} rounds' graphs, and before them those of the "
            f"rounds that are multiples of {self.graphs_keep_every} (retention)"
        )


def _to_builtin(value: Any) -> Any:
    """Let json write numpy scalars and arrays, which metrics code produces naturally."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _dumps(obj: Any, indent: int | None = None) -> str:
    return json.dumps(obj, default=_to_builtin, indent=indent)


class RunWriter:
    """Writes one method run's records into its own folder.

    The folder must be new or empty: appending to another run's metrics would silently mix
    two runs. The exception is ``resume_after``: the same run continuing after a restart,
    which keeps the records of rounds up to that one and drops anything later.
    """

    def __init__(
        self,
        path: Path | str,
        resume_after: int | None = None,
        retention: Retention | None = None,
    ) -> None:
        self.path = Path(path)
        self.retention = retention or Retention()
        if resume_after is not None:
            self._truncate_after(resume_after)
        elif self.path.exists() and any(self.path.iterdir()):
            raise FileExistsError(f"run directory {self.path} is not empty")
        (self.path / GRAPHS_DIR).mkdir(parents=True, exist_ok=True)
        (self.path / METRICS_FILE).touch()
        self._prunable = sorted(  # graph rounds a later round may prune, oldest first
            r
            for r in map(_graph_round, (self.path / GRAPHS_DIR).glob("round_*.json"))
            if r % self.retention.graphs_keep_every
        )

    def _truncate_after(self, last_round: int) -> None:
        for name in (METRICS_FILE, COALITIONS_FILE, FAILURES_FILE):
            _truncate_jsonl(self.path / name, last_round)
        for path in rotated(self.path / MESSAGES_FILE):
            _truncate_jsonl(path, last_round)
        graphs = self.path / GRAPHS_DIR
        if graphs.exists():
            for graph in graphs.glob("round_*.json"):
                if json.loads(graph.read_text(encoding="utf-8"))["round"] > last_round:
                    graph.unlink()
        (self.path / SUMMARY_FILE).unlink(missing_ok=True)

    def write_config(self, config: dict[str, Any]) -> None:
        """Record the resolved config, so the run can be reproduced and labelled later."""
        write_text(self.path / CONFIG_FILE, _dumps(config, indent=2) + "\n", shared=True)

    def log_round(self, rows: list[dict[str, Any]]) -> None:
        """Append one round's rows (one per client); flushed so a crash keeps finished rounds.
        A row leaves out what is None (the metrics its method does not report)."""
        compact = ({k: v for k, v in row.items() if v is not None} for row in rows)
        _append(self.path / METRICS_FILE, "".join(_compact(row) + "\n" for row in compact))

    def log_graph(self, round: int, num_clients: int, edges: list[tuple[int, int, float]]) -> None:
        """Record the round's collaboration graph as directed edges (i uses j's model, weight w)."""
        record = {
            "round": int(round),
            "num_clients": int(num_clients),
            "edges": [[int(i), int(j), float(w)] for i, j, w in edges],
        }
        write_text(
            self.path / GRAPHS_DIR / graph_file_name(round), _compact(record) + "\n", shared=True
        )
        if round % self.retention.graphs_keep_every:
            self._prunable.append(int(round))
        self._prune_graphs(int(round))

    def _prune_graphs(self, latest: int) -> None:
        """Remove the graph files the retention no longer keeps once ``latest`` is recorded."""
        while self._prunable and not self.retention.keeps_graph(self._prunable[0], latest):
            (self.path / GRAPHS_DIR / graph_file_name(self._prunable.pop(0))).unlink(
                missing_ok=True
            )

    def log_coalitions(self, round: int, coalitions: list[list[int]]) -> None:
        """Append the round's coalitions (member lists); the file exists only for such methods."""
        record = {"round": int(round), "coalitions": [[int(c) for c in m] for m in coalitions]}
        _append(self.path / COALITIONS_FILE, _dumps(record) + "\n")

    def log_message(self, record: dict[str, Any]) -> None:
        """Append one message's timing (it names its round; a resumed run rewrites later ones);
        the file is rotated past the retention's size."""
        path, line = self.path / MESSAGES_FILE, _compact(record) + "\n"
        if path.exists() and path.stat().st_size + len(line) > self.retention.messages_max_bytes:
            rotate(path, self.retention.messages_keep)
        _append(path, line)

    def log_failures(self, failures: list[dict[str, Any]]) -> None:
        """Append steps that failed on clients (each names its round, client and step)."""
        _append(self.path / FAILURES_FILE, "".join(_dumps(f) + "\n" for f in failures))

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Record the final summary; written last, so its presence marks a finished run."""
        write_text(self.path / SUMMARY_FILE, _dumps(summary, indent=2) + "\n", shared=True)


def _compact(obj: Any) -> str:
    """One JSON line without the spaces after separators."""
    return json.dumps(obj, default=_to_builtin, separators=(",", ":"))


def _append(path: Path, text: str) -> None:
    """Append and flush, so a crash keeps every finished round."""
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
        f.flush()


def _truncate_jsonl(path: Path, last_round: int) -> None:
    """Drop the lines of rounds after ``last_round``: a resumed run writes them again."""
    if not path.exists():
        return
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["round"] <= last_round
    ]
    write_text(path, "".join(line + "\n" for line in kept), shared=True)


@dataclass(eq=False)
class RunRecords:
    """Everything a run directory holds, parsed.

    Graphs map round -> N×N adjacency; coalitions map round -> member lists (empty for a
    method without coalitions).
    """

    config: dict[str, Any]
    rows: list[dict[str, Any]]
    graphs: dict[int, np.ndarray]
    summary: dict[str, Any] | None
    coalitions: dict[int, list[list[int]]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    """Steps that failed on clients (failures.jsonl): round, client, step, clients_sent,
    message."""


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: malformed JSON: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}, line {line_no}: malformed JSON: {e}") from e
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path}, line {line_no}: expected a JSON object, got {type(row).__name__}"
                )
            rows.append(row)
    return rows


def _read_graph(path: Path) -> tuple[int, np.ndarray]:
    record = _read_json_object(path)
    try:
        matrix = adjacency(record["num_clients"], [tuple(e) for e in record["edges"]])
        return int(record["round"]), matrix
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: invalid graph record: {e!r}") from e


def _is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_coalition_list(value: object) -> TypeGuard[list[list[int]]]:
    return isinstance(value, list) and all(
        isinstance(m, list) and all(_is_index(c) for c in m) for m in value
    )


def _read_coalitions(path: Path) -> dict[int, list[list[int]]]:
    """Round -> coalitions from coalitions.jsonl; a later line for a round replaces earlier ones."""
    if not path.exists():
        return {}
    by_round: dict[int, list[list[int]]] = {}
    for line_no, record in enumerate(_read_jsonl(path), start=1):
        round_index, coalitions = record.get("round"), record.get("coalitions")
        if not (_is_index(round_index) and _is_coalition_list(coalitions)):
            raise ValueError(
                f"{path}, record {line_no}: expected a round and a list of client index lists"
            )
        by_round[round_index] = coalitions
    return dict(sorted(by_round.items()))


def read_run(path: Path | str) -> RunRecords:
    """Parse a run directory; malformed files raise ValueError naming the file (and line)."""
    path = Path(path)
    graphs: dict[int, np.ndarray] = {}
    graphs_dir = path / GRAPHS_DIR
    if graphs_dir.is_dir():
        for graph_path in sorted(graphs_dir.glob("round_*.json")):
            round_index, matrix = _read_graph(graph_path)
            graphs[round_index] = matrix
    summary_path = path / SUMMARY_FILE
    return RunRecords(
        config=_read_json_object(path / CONFIG_FILE),
        rows=[dict.fromkeys(ROW_FIELDS) | row for row in _read_jsonl(path / METRICS_FILE)],
        graphs=graphs,
        summary=_read_json_object(summary_path) if summary_path.exists() else None,
        coalitions=_read_coalitions(path / COALITIONS_FILE),
        failures=_read_jsonl(failures) if (failures := path / FAILURES_FILE).exists() else [],
    )
