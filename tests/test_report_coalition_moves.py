"""Coalition changes between rounds follow members, not coalition indices."""

import pytest

from collabfl.engine.report.coalition_moves import (
    CoalitionMove,
    coalition_moves,
    coalitions_document,
    describe_moves,
)


@pytest.mark.parametrize(
    ("before", "after", "changes"),
    [
        ([[0], [1, 2]], [[1, 2]], ["client 0 left coalition 0"]),  # renumbered, not moved
        ([[0, 1], [2, 3]], [[0, 1, 2, 3]], ["clients 2, 3 moved from coalition 1 to coalition 0"]),
        ([[0, 1, 2, 3]], [[0, 1], [2, 3]], ["clients 2, 3 moved from coalition 0 to coalition 1"]),
        ([[0, 1], [2]], [[0, 1], [2], [3, 4]], ["clients 3, 4 joined coalition 2"]),
        ([[0, 1], [2]], [[0, 1], [2]], []),
    ],
)
def test_coalition_changes_follow_members_not_indices(
    before: list[list[int]], after: list[list[int]], changes: list[str]
) -> None:
    assert describe_moves(coalition_moves(before, after)) == changes


def test_split_moves_the_smaller_part_only() -> None:
    moves = coalition_moves([[0, 1, 2], [3, 4, 5]], [[0, 1], [2], [3, 4, 5]])
    assert moves == [CoalitionMove(2, 0, 1)]
    assert describe_moves(moves) == ["client 2 moved from coalition 0 to coalition 1"]


def test_merge_moves_the_smaller_coalition_only() -> None:
    moves = coalition_moves([[0, 1, 2], [3], [4, 5]], [[0, 1, 2, 3], [4, 5]])
    assert moves == [CoalitionMove(3, 1, 0)]
    assert describe_moves(moves) == ["client 3 moved from coalition 1 to coalition 0"]


def test_one_client_moving_between_kept_coalitions() -> None:
    moves = coalition_moves([[0, 1, 2], [3, 4]], [[0, 1], [2, 3, 4]])
    assert moves == [CoalitionMove(2, 0, 1)]


def test_document_lists_the_round_and_its_changes() -> None:
    history = {3: [[0, 1], [2]], 5: [[0], [1, 2]]}
    moves = coalition_moves(history[3], history[5])
    assert coalitions_document("r", 5, history, 3, moves) == {
        "run_id": "r",
        "round": 5,
        "coalitions": [[0], [1, 2]],
        "previous_round": 3,
        "changes": [{"client": 1, "from": 0, "to": 1}],
    }
