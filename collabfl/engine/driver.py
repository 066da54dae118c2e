"""The round driver both runtimes share: run a method, meter it, record every round.

The in-process runtime and the Flower ServerApp differ only in what happens between rounds
(a progress bar; a checkpoint, the coordinator service and operator stops), which they pass
in as a hook. Coordinator traffic is metered here, around the pool, so the two runtimes
count it identically.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from collabfl.engine.quorum import QuorumLost
from collabfl.engine.recording import MethodRecorder
from collabfl.engine.step_failures import KeepsStepLedger, StepLedger, fatal
from collabfl.strategies.protocol import (
    ClientPool,
    FlatVector,
    Instruction,
    Program,
    Reply,
    run_programs,
)
from collabfl.strategies.rounds import Method, Resume, RoundOutcome


class RunStopped(Exception):
    """Raised by an after-round hook when an operator stopped the run: not an error, the
    run ends with what it has."""


AfterRound = Callable[[RoundOutcome, list[dict[str, Any]]], None]
"""Called after each recorded round with its outcome and metrics rows; may raise to end
the run (``RunStopped`` when an operator stopped it)."""


class MeteredPool:
    """A ClientPool that counts the model bytes each client exchanges with the coordinator:
    the model an instruction carries to a client that answered, plus its reply's model.
    A client that did not answer is not charged: nothing says its message arrived."""

    def __init__(self, pool: ClientPool) -> None:
        self.pool = pool
        self._bytes: dict[int, int] = {}

    @property
    def sample_counts(self) -> Mapping[int, int]:
        return self.pool.sample_counts

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        replies = self.pool.send(instructions)
        for k, reply in replies.items():
            self._charge(k, instructions[k], reply)
        return replies

    def send_programs(self, programs: Mapping[int, Program]) -> dict[int, list[Reply]]:
        """Programs as the wrapped pool runs them (one message each, or step by step)."""
        by_step = run_programs(self.pool, programs)
        answered = sorted(by_step[-1]) if by_step else []
        for i, replies in enumerate(by_step):
            for k, reply in replies.items():
                self._charge(k, programs[k][i], reply)
        return {k: [replies[k] for replies in by_step] for k in answered}

    def _charge(self, client: int, instruction: Instruction, reply: Reply) -> None:
        moved = _model_bytes(instruction.model) + _model_bytes(reply.model)
        self._bytes[client] = self._bytes.get(client, 0) + moved

    def take_coordinator_bytes(self) -> dict[int, int]:
        """Model bytes per client since the last call (the round just finished)."""
        counts, self._bytes = self._bytes, {}
        return counts


def _model_bytes(model: FlatVector | None) -> int:
    """Payload size of a flat model vector."""
    return 0 if model is None else model.numel() * model.element_size()


def drive(
    method: Method,
    pool: ClientPool,
    rounds: int,
    recorder: MethodRecorder,
    after_round: AfterRound,
    resume: Resume | None = None,
) -> dict[str, Any]:
    """Run ``method`` to the end (or from ``resume``), recording every round; return the
    run's summary. A hook (or a pool waiting for its quorum) raising ``RunStopped`` ends the
    run early with a summary marked "stopped"; any other exception marks it "interrupted"
    and propagates. A round in which a step failed on every client it was sent to is the
    run's last: its summary is marked "failed" with the sentence saying which step did not
    happen (engine/step_failures); so is a run that lost its quorum
    (engine/quorum.py). A run stopped or failed before any round it recorded has
    nothing to summarise: ``RunStopped`` or ``QuorumLost`` propagates."""
    metered = MeteredPool(pool)
    ledger = pool.step_ledger if isinstance(pool, KeepsStepLedger) else StepLedger()
    started = time.perf_counter()
    recorded = False
    try:
        for outcome in method.rounds(metered, rounds, resume):
            rows = recorder.record(outcome, metered.take_coordinator_bytes())
            recorded = True
            failures = [failure.record() for failure in ledger.take()]
            if failures:
                recorder.record_failures(failures)
            after_round(outcome, rows)
            failed = fatal(recorder.spec.label, failures) if failures else None
            if failed is not None:
                return recorder.finish(time.perf_counter() - started, "failed", failed)
    except (RunStopped, QuorumLost) as cut:
        if not (recorded or resume is not None):
            raise  # the caller records how the run ended
        if isinstance(cut, RunStopped):
            return recorder.finish(time.perf_counter() - started, "stopped")
        return recorder.finish(time.perf_counter() - started, "failed", f"the run {cut}")
    except BaseException:
        # A run cut short still gets a summary of what it did, marked so that nobody
        # mistakes it for a finished one; a resumed run replaces it.
        if recorded:
            with contextlib.suppress(Exception):
                recorder.finish(time.perf_counter() - started, "interrupted")
        raise
    return recorder.finish(time.perf_counter() - started)
