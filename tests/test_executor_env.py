"""flower/processes.py ``executor_env``: the executor's malloc arenas, and the operator's say."""

from __future__ import annotations

from collabfl.flower.processes import executor_env


def test_one_arena_unless_the_operator_chose(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert executor_env({"FLWR_HOME": "/h"}) == {"FLWR_HOME": "/h", "MALLOC_ARENA_MAX": "1"}
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert executor_env({})["MALLOC_ARENA_MAX"] == "4"
