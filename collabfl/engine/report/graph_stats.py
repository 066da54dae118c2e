"""Statistics of a collaboration graph, given as an N×N weighted adjacency matrix.

Row i holds the weights client i puts on its peers' models (A[i, j] > 0: client i uses
client j's model). Every statistic ignores the diagonal: a client always uses its own
model, so self weight says nothing about collaboration.
"""

from collections.abc import Iterable

import numpy as np


def adjacency(num_clients: int, edges: Iterable[tuple[int, int, float]]) -> np.ndarray:
    """Build the dense matrix from an edge list, so statistics can work on whole rows.

    Raises ValueError on an index outside [0, num_clients) or an edge listed twice, since
    either means the record is corrupt rather than a graph we could summarise.
    """
    if num_clients < 0:
        raise ValueError(f"num_clients must be >= 0, got {num_clients}")
    matrix = np.zeros((num_clients, num_clients), dtype=float)
    seen: set[tuple[int, int]] = set()
    for i, j, w in edges:
        if not (0 <= i < num_clients and 0 <= j < num_clients):
            raise ValueError(f"edge ({i}, {j}) outside a graph of {num_clients} clients")
        if (i, j) in seen:
            raise ValueError(f"edge ({i}, {j}) listed twice")
        seen.add((i, j))
        matrix[i, j] = w
    return matrix


def _off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """Mask of the off-diagonal entries."""
    return ~np.eye(matrix.shape[0], dtype=bool)


def sparsity(matrix: np.ndarray) -> float:
    """Share of the N·(N−1) off-diagonal entries that are zero (no edge).

    1.0 is the empty graph, 0.0 the complete one. With N <= 1 there are no off-diagonal
    entries and we return 0.0: nothing that could be an edge is missing.
    """
    n = matrix.shape[0]
    if n <= 1:
        return 0.0
    return float(np.count_nonzero(matrix[_off_diagonal(matrix)] == 0) / (n * (n - 1)))


def symmetry(matrix: np.ndarray) -> float:
    """Share of the N·(N−1)/2 unordered pairs {i, j}, i ≠ j, where (A_ij > 0) == (A_ji > 0).

    Only the presence of an edge counts, not its weight; this is the binary symmetry the
    DPFL paper reports (80–88%). A pair with no edge either way counts as symmetric, so
    the empty graph scores 1.0 and a directed 3-cycle 0.0. With N <= 1 there are no
    pairs and we return 1.0 (nothing is asymmetric).
    """
    n = matrix.shape[0]
    if n <= 1:
        return 1.0
    present = matrix > 0
    upper = np.triu_indices(n, k=1)
    agree = present[upper] == present.T[upper]
    return float(np.count_nonzero(agree) / agree.size)


def mean_out_degree(matrix: np.ndarray) -> float:
    """Mean over clients of how many peers each uses (positive off-diagonal entries in its row).

    This is the average collaborator count; 0.0 for an empty matrix.
    """
    n = matrix.shape[0]
    if n == 0:
        return 0.0
    edges = (matrix > 0) & _off_diagonal(matrix)
    return float(np.count_nonzero(edges) / n)


def edges_to_group(matrix: np.ndarray, group: np.ndarray) -> float:
    """Share of the edge weight leaving clients outside `group` that lands on clients in it.

    Sums off-diagonal weights over rows i not in `group`; of that total, returns the part
    in columns j in `group`. With group = malicious clients this measures how much benign
    clients still lean on attackers (0.0 = fully isolated). Returns 0.0 when clients
    outside the group put no weight on any peer.
    """
    group = np.asarray(group, dtype=bool)
    if group.shape != (matrix.shape[0],):
        raise ValueError(f"group has shape {group.shape}, expected ({matrix.shape[0]},)")
    weights = np.where(_off_diagonal(matrix), matrix, 0.0)[~group]
    total = weights.sum()
    if total <= 0:
        return 0.0
    return float(weights[:, group].sum() / total)
