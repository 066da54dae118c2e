"""The shared round driver: metering coordinator traffic, recording, the after-round hook."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import torch

from collabfl.engine.driver import MeteredPool, RunStopped, drive
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import ClientPool, Instruction, Reply, broadcast
from collabfl.strategies.rounds import Resume, RoundOutcome, first_round
from collabfl.strategies.verbs import Evaluate, Train

MODEL = torch.zeros(8, dtype=torch.float32)  # 32 bytes


class ScriptedPool:
    """Client 0 uploads half a model, client 1 answers without one, client 2 never answers."""

    sample_counts: Mapping[int, int] = {0: 10, 1: 10, 2: 10}

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        uploads = {0: MODEL[:4], 1: None}
        return {k: Reply(ClientMetrics(), uploads[k]) for k in instructions if k in uploads}


class SendsTheModel:
    """Each round: the coordinator sends every client the model; replies become metrics."""

    name = "scripted"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        for t in range(first_round(resume), num_rounds):
            replies = broadcast(pool, t, Train(epochs=1.0), model=MODEL)
            yield RoundOutcome(t, {k: ClientMetrics() for k in replies})


class ListRecorder:
    def __init__(self) -> None:
        self.recorded: list[tuple[int, dict[int, int]]] = []
        self.finished: list[str] = []

    def record(self, outcome: RoundOutcome, coordinator_bytes: dict[int, int]) -> list[dict]:
        self.recorded.append((outcome.round, coordinator_bytes))
        return [{"client": k} for k in outcome.metrics]

    def finish(self, wall_time_s: float, status: str = "finished") -> dict[str, Any]:
        self.finished.append(status)
        return {"rounds": len(self.recorded), "status": status}


def test_metered_pool_charges_what_moved_to_and_from_clients_that_answered():
    pool = MeteredPool(ScriptedPool())
    instruction = Instruction(0, Train(epochs=1.0), MODEL)
    replies = pool.send(dict.fromkeys((0, 1, 2), instruction))
    assert sorted(replies) == [0, 1]
    assert pool.take_coordinator_bytes() == {0: 32 + 16, 1: 32}
    assert pool.take_coordinator_bytes() == {}
    pool.send({1: Instruction(1, Evaluate())})
    assert pool.take_coordinator_bytes() == {1: 0}


def test_drive_records_every_round_and_calls_the_hook_after_it():
    recorder = ListRecorder()
    seen: list[tuple[int, list[dict]]] = []
    summary = drive(
        SendsTheModel(),
        ScriptedPool(),
        3,
        recorder,  # type: ignore[arg-type]
        lambda outcome, rows: seen.append((outcome.round, rows)),
        resume=Resume(0, {}),
    )
    assert summary == {"rounds": 2, "status": "finished"}
    assert recorder.recorded == [(1, {0: 48, 1: 32}), (2, {0: 48, 1: 32})]
    assert seen == [(1, [{"client": 0}, {"client": 1}]), (2, [{"client": 0}, {"client": 1}])]


def test_a_hook_that_raises_ends_the_run_after_that_round():
    class Stop(Exception):
        pass

    def stop_after_first(outcome: RoundOutcome, rows: list[dict]) -> None:
        raise Stop

    recorder = ListRecorder()
    with pytest.raises(Stop):
        drive(SendsTheModel(), ScriptedPool(), 3, recorder, stop_after_first)  # type: ignore[arg-type]
    assert [r for r, _ in recorder.recorded] == [0]


def test_an_operator_stop_ends_the_run_with_a_summary_marked_stopped():
    def stop_after_second(outcome: RoundOutcome, rows: list[dict]) -> None:
        if outcome.round == 1:
            raise RunStopped

    recorder = ListRecorder()
    summary = drive(SendsTheModel(), ScriptedPool(), 5, recorder, stop_after_second)  # type: ignore[arg-type]
    assert summary == {"rounds": 2, "status": "stopped"}
    assert recorder.finished == ["stopped"]


def test_a_run_cut_short_leaves_a_summary_marked_interrupted():
    def interrupt(outcome: RoundOutcome, rows: list[dict]) -> None:
        raise KeyboardInterrupt

    recorder = ListRecorder()
    with pytest.raises(KeyboardInterrupt):
        drive(SendsTheModel(), ScriptedPool(), 3, recorder, interrupt)  # type: ignore[arg-type]
    assert recorder.finished == ["interrupted"]


def test_a_run_that_recorded_nothing_writes_no_summary():
    class Broken:
        name = "broken"

        def rounds(self, pool, num_rounds, resume=None):
            raise RuntimeError("the federation is empty")
            yield

    recorder = ListRecorder()
    with pytest.raises(RuntimeError):
        drive(Broken(), ScriptedPool(), 3, recorder, lambda o, r: None)  # type: ignore[arg-type]
    assert recorder.finished == []
