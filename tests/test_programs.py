"""A round's steps as one unit: the program codec, and run_programs on both kinds of pool.

A real federation sends a client's train, collaborate and evaluate of a round as one Flower
message; any other pool runs them step by step across clients. Both must give the replies
the methods expect, and a malformed program must be refused whole.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch
from flwr.app import ConfigRecord, RecordDict

from collabfl.flower.codec import (
    MAX_PROGRAM_STEPS,
    decode_program,
    decode_replies,
    encode_program,
    encode_replies,
)
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import Instruction, Program, Reply, run_programs
from collabfl.strategies.verbs import Collaborate, Evaluate, Train


def _program(round_index: int = 3) -> list[Instruction]:
    return [
        Instruction(round_index, Train(1.0, publish=True), torch.arange(4, dtype=torch.float32)),
        Instruction(round_index, Collaborate("greedy", (1, 2), (10.0, 20.0), budget=1)),
        Instruction(round_index, Evaluate()),
    ]


def test_a_program_travels_whole_and_in_order():
    program = _program()
    decoded = decode_program(encode_program(program))
    assert [step.task for step in decoded] == [step.task for step in program]
    assert [step.round for step in decoded] == [3, 3, 3]
    assert torch.equal(decoded[0].model, program[0].model)
    assert decoded[1].model is None and decoded[2].model is None


def test_program_replies_travel_in_order_and_their_count_is_checked():
    replies = [Reply(ClientMetrics(train_loss=0.5)), Reply(ClientMetrics(chosen=(2,))), Reply()]
    content = encode_replies(replies)
    assert [r.metrics for r in decode_replies(content, 3)] == [r.metrics for r in replies]
    with pytest.raises(ValueError, match="2 steps, expected 3"):
        decode_replies(encode_replies(replies[:2]), 3)


def _steps(content: RecordDict) -> ConfigRecord:
    return content.config_records["config"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda c: [
            _steps(c).__delitem__(k) for k in list(_steps(c)) if k.startswith("1.")
        ],  # a gap
        lambda c: _steps(c).__setitem__("3._verb", "evaluate"),  # a step beyond the count
        lambda c: _steps(c).__setitem__("01._verb", "evaluate"),  # a non-canonical index
        lambda c: _steps(c).__setitem__("x._verb", "evaluate"),  # no index
        lambda c: _steps(c).__setitem__("_steps", True),  # a count that is not a number
        lambda c: _steps(c).__delitem__("_steps"),  # no count
        lambda c: c.__setitem__("extra.0", ConfigRecord({})),  # a stray record
        lambda c: c.__setitem__("model.3", c["model.0"]),  # a vector for no step
        lambda c: c.__setitem__("model.1", ConfigRecord({})),  # a vector that is not an array
    ],
)
def test_a_malformed_program_is_refused(tamper):
    content = encode_program(_program())
    tamper(content)
    with pytest.raises(ValueError):
        decode_program(content)


def test_a_program_is_one_record_besides_its_vectors():
    """Every record is one more object for Flower to move: steps share one."""
    content = encode_program(_program())
    assert sorted(content) == ["config", "model.0"]
    assert sorted(encode_replies([Reply(), Reply(), Reply()])) == ["metrics"]


def test_a_program_longer_than_any_round_is_refused():
    content = encode_program([Instruction(0, Evaluate())] * (MAX_PROGRAM_STEPS + 1))
    with pytest.raises(ValueError, match="steps must be"):
        decode_program(content)


class StepPool:
    """Answers each step with the client's id and the step's verb; may fail one step."""

    def __init__(self, fail: tuple[int, int] | None = None) -> None:
        self.sent: list[dict[int, str]] = []
        self.fail = fail

    @property
    def sample_counts(self) -> Mapping[int, int]:
        return {0: 1, 1: 1, 2: 1}

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        step = len(self.sent)
        self.sent.append({k: ins.verb.value for k, ins in instructions.items()})
        return {
            k: Reply(ClientMetrics(num_samples=k)) for k in instructions if (k, step) != self.fail
        }


class WholePool(StepPool):
    """A pool that takes programs whole (as the Flower pool does)."""

    def __init__(self) -> None:
        super().__init__()
        self.programs: list[dict[int, int]] = []

    def send_programs(self, programs: Mapping[int, Program]) -> dict[int, list[Reply]]:
        self.programs.append({k: len(p) for k, p in programs.items()})
        return {k: [Reply(ClientMetrics(num_samples=k)) for _ in p] for k, p in programs.items()}


def _round() -> dict[int, list[Instruction]]:
    return {k: [Instruction(0, Train(1.0)), Instruction(0, Evaluate())] for k in (0, 1, 2)}


def test_a_plain_pool_runs_programs_step_by_step():
    pool = StepPool()
    trained, evaluated = run_programs(pool, _round())
    every = (0, 1, 2)
    assert pool.sent == [dict.fromkeys(every, "train"), dict.fromkeys(every, "evaluate")]
    assert sorted(trained) == sorted(evaluated) == [0, 1, 2]


def test_a_client_that_fails_a_step_takes_no_further_step():
    pool = StepPool(fail=(1, 0))
    trained, evaluated = run_programs(pool, _round())
    assert sorted(trained) == [0, 2] and sorted(evaluated) == [0, 2]
    assert sorted(pool.sent[1]) == [0, 2]


def test_a_program_pool_gets_each_program_once():
    pool = WholePool()
    trained, evaluated = run_programs(pool, _round())
    assert pool.programs == [{0: 2, 1: 2, 2: 2}] and pool.sent == []
    assert sorted(trained) == sorted(evaluated) == [0, 1, 2]


def test_programs_of_one_round_have_one_length():
    programs = _round()
    programs[2] = programs[2][:1]
    with pytest.raises(ValueError, match="same length"):
        run_programs(StepPool(), programs)
