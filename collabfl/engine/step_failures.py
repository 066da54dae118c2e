"""Steps that failed on clients: counted against the clients that were sent them, recorded
with their round, and said in words, because a failed step is never a result.

Both runtimes' pools tell a ``StepLedger`` what they sent and what failed (a step raised on
the client). The round driver takes the failures after every round and records them; a step
that failed on every client it was sent to ends the run ``failed`` with a sentence that says
which step did not happen, e.g. "dpfl collaboration failed on 2/2 clients in round 0; no peer
model was used". A failure on some clients only is kept in the records, the summary and the
results table, and the run goes on without those clients' step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from collabfl.strategies.protocol import Instruction, failed_verb

UNKNOWN_STEP = "step"
"""What a failure is called when its text names no verb (a relay seat that broke)."""

_WORDS: dict[str, tuple[str, str, str]] = {
    "train": ("training", "no client trained", "they did not train"),
    "collaborate": ("collaboration", "no peer model was used", "they used no peer model"),
    "evaluate": ("evaluation", "no client was evaluated", "they were not evaluated"),
    "discriminate": (
        "distance estimation",
        "no distance was estimated",
        "their distances were not estimated",
    ),
    "gradient": ("loss oracle", "no loss or gradient came back", "they sent no gradient"),
    UNKNOWN_STEP: ("step", "the round's steps did not happen", "their steps did not happen"),
}
"""Per step: its noun, what did not happen when it failed everywhere, and where only some."""


class RunFailed(ValueError):
    """A run ended ``failed`` (the Python API raises it with the run's sentence): most often
    bad input, such as user code that raises on every client."""


@dataclass(frozen=True)
class StepFailure:
    """One client's step that raised: ``clients_sent`` clients were sent that step in the
    round."""

    round: int
    client: int
    step: str
    clients_sent: int
    message: str

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepLedger:
    """What a pool sent per (round, step) and which clients' steps failed, since the last
    ``take``."""

    _sent: dict[tuple[int, str], set[int]] = field(default_factory=dict)
    _failed: list[tuple[int, int, str, str]] = field(default_factory=list)

    def sent(self, programs: Mapping[int, Sequence[Instruction]]) -> None:
        """Note every step of every client's program (one step: a lone instruction)."""
        for client, program in programs.items():
            for step in program:
                self._sent.setdefault((step.round, step.verb.value), set()).add(client)

    def failed(self, round_index: int, client: int, message: str) -> None:
        """Note that ``client``'s message of ``round_index`` failed with ``message``."""
        verb = failed_verb(message)
        step = UNKNOWN_STEP if verb is None else verb.value
        self._failed.append((round_index, client, step, message))

    def take(self) -> list[StepFailure]:
        """The failures since the last call, each with how many clients were sent its step;
        starts a new count."""
        taken = []
        for round_index, client, step, message in self._failed:
            sent = self._sent.get((round_index, step), set()) | {client}
            if step == UNKNOWN_STEP:
                sent |= {c for (r, _), cs in self._sent.items() if r == round_index for c in cs}
            taken.append(StepFailure(round_index, client, step, len(sent), message))
        self._sent, self._failed = {}, []
        return taken


@runtime_checkable
class KeepsStepLedger(Protocol):
    """A pool that reports its clients' failed steps (both runtimes' pools)."""

    step_ledger: StepLedger


@dataclass(frozen=True)
class FailedStep:
    """One step of one round that failed on ``clients`` of the ``sent`` clients sent it."""

    round: int
    step: str
    clients: tuple[int, ...]
    sent: int
    first_error: str
    """The first failed client's error, as it reported it (shortened)."""

    @property
    def everywhere(self) -> bool:
        return len(self.clients) >= self.sent

    def sentence(self, method: str) -> str:
        noun, everywhere, somewhere = _WORDS.get(self.step, _WORDS[UNKNOWN_STEP])
        where = f"{len(self.clients)}/{self.sent} clients in round {self.round}"
        why = f" (client {self.clients[0]}: {self.first_error})"
        if self.everywhere:
            return f"{method} {noun} failed on {where}; {everywhere}{why}"
        named = ", ".join(str(c) for c in self.clients)
        return f"{method} {noun} failed on {where} (client {named}); {somewhere}{why}"


def failed_steps(failures: Iterable[dict[str, Any]]) -> list[FailedStep]:
    """The failure records grouped by (round, step), in round order."""
    grouped: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for failure in failures:
        grouped.setdefault((int(failure["round"]), str(failure["step"])), []).append(failure)
    return [
        FailedStep(
            round_index,
            step,
            tuple(sorted({int(f["client"]) for f in group})),
            max(int(f["clients_sent"]) for f in group),
            _shortened(str(min(group, key=lambda f: int(f["client"]))["message"])),
        )
        for (round_index, step), group in sorted(grouped.items())
    ]


def _shortened(error: str, limit: int = 200) -> str:
    """An error on one line, from the step's own words where it has them."""
    line = " ".join(error.split())
    verb = failed_verb(line)
    if verb is not None:
        line = line[line.index(f"{verb.value} step failed: ") :].rstrip("'>")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def fatal(method: str, failures: Iterable[dict[str, Any]]) -> str | None:
    """The sentence of the first step that failed on every client it was sent to, if any."""
    for failed in failed_steps(failures):
        if failed.everywhere:
            return failed.sentence(method)
    return None


def summary_of(method: str, failures: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What summary.json says about failed steps: counts per round and per client, and the
    sentences."""
    return {
        "count": len(failures),
        "per_round": {
            str(r): n for r, n in sorted(Counter(int(f["round"]) for f in failures).items())
        },
        "per_client": {
            str(c): n for c, n in sorted(Counter(int(f["client"]) for f in failures).items())
        },
        "notes": [failed.sentence(method) for failed in failed_steps(failures)],
    }
