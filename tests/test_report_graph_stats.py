"""Graph statistics on hand-made matrices whose values are known."""

import numpy as np
import pytest

from collabfl.engine.report.graph_stats import (
    adjacency,
    edges_to_group,
    mean_out_degree,
    sparsity,
    symmetry,
)

CYCLE_3 = adjacency(3, [(0, 1, 1.0), (1, 2, 1.0), (2, 0, 1.0)])


def test_three_cycle() -> None:
    assert sparsity(CYCLE_3) == pytest.approx(0.5)
    assert symmetry(CYCLE_3) == 0.0
    assert mean_out_degree(CYCLE_3) == 1.0


def test_symmetric_pair_with_different_weights() -> None:
    matrix = adjacency(3, [(0, 1, 0.9), (1, 0, 0.1)])
    assert sparsity(matrix) == pytest.approx(4 / 6)
    assert symmetry(matrix) == 1.0
    assert mean_out_degree(matrix) == pytest.approx(2 / 3)


def test_one_way_edge_among_four() -> None:
    matrix = adjacency(4, [(0, 1, 1.0)])
    assert sparsity(matrix) == pytest.approx(11 / 12)
    assert symmetry(matrix) == pytest.approx(5 / 6)


def test_empty_and_complete_graphs() -> None:
    empty = np.zeros((4, 4))
    assert sparsity(empty) == 1.0
    assert symmetry(empty) == 1.0
    assert mean_out_degree(empty) == 0.0
    complete = np.ones((4, 4))  # the diagonal (self weight) is ignored
    assert sparsity(complete) == 0.0
    assert symmetry(complete) == 1.0
    assert mean_out_degree(complete) == 3.0


def test_single_client_has_no_pairs() -> None:
    one = np.ones((1, 1))
    assert sparsity(one) == 0.0
    assert symmetry(one) == 1.0
    assert mean_out_degree(one) == 0.0


def test_adjacency_rejects_bad_edges() -> None:
    with pytest.raises(ValueError, match="outside"):
        adjacency(2, [(0, 2, 1.0)])
    with pytest.raises(ValueError, match="twice"):
        adjacency(2, [(0, 1, 1.0), (0, 1, 0.5)])


def test_edges_to_group() -> None:
    # Clients 0, 1 benign; 2, 3 malicious. Benign rows put 0.25 + 0.5 of their 2.0 on the
    # group; the malicious rows (3 -> 2 included) and the diagonal must not count.
    matrix = np.array(
        [
            [5.0, 0.75, 0.25, 0.0],
            [0.5, 0.0, 0.0, 0.5],
            [1.0, 1.0, 9.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
        ]
    )
    group = np.array([False, False, True, True])
    assert edges_to_group(matrix, group) == pytest.approx(0.75 / 2.0)
    assert edges_to_group(np.zeros((4, 4)), group) == 0.0
    with pytest.raises(ValueError, match="shape"):
        edges_to_group(matrix, np.array([True, False]))
