"""A run's whole collaboration-graph history as one document: JSON or a NetworkX multigraph.

The JSON document lists, per round, the same record as a run directory's graphs/ files; it
comes from the coordinator's database, which keeps every round's graph even where the run
folder's retention (config ``retention``) pruned the files. The
multigraph keeps the history together in one directed graph for GraphML: nodes are the
client indices, and every edge carries ``round`` and ``weight`` attributes (edge key
``r<round>:<i>-<j>``), so any GraphML tool can filter it per round; networkx reads it back
with ``read_graphml(path, node_type=int, force_multigraph=True)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import networkx as nx

from collabfl.coordinator.store.records import RoundGraph, Run


def history_document(run: Run, history: Sequence[RoundGraph]) -> dict[str, Any]:
    """Run id, method and per round its client count and edge list (JSON-ready)."""
    return {
        "run_id": run.run_id,
        "method": run.method,
        "rounds": [
            {"round": g.round, "num_clients": g.num_clients, "edges": [list(e) for e in g.edges]}
            for g in history
        ],
    }


def history_multigraph(run: Run, history: Sequence[RoundGraph]) -> nx.MultiDiGraph:
    """Every round's edges in one directed multigraph, told apart by their ``round``."""
    graph = nx.MultiDiGraph(run_id=run.run_id, method=run.method)
    graph.add_nodes_from(range(max((g.num_clients for g in history), default=0)))
    for g in history:
        for i, j, w in g.edges:
            graph.add_edge(i, j, key=f"r{g.round}:{i}-{j}", round=g.round, weight=w)
    return graph
