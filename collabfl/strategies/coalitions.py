"""Training inside disjoint coalitions: any base method, one copy per coalition, in lockstep.

FedCollab and collaboration equilibrium decide *who* trains together; *how* is any method of
the project, run separately inside each coalition (singletons train locally). Each coalition's
method sees a view of the pool restricted to its members, so every method works unchanged.

Running the coalitions one after another would multiply a real federation's round time by
their number (each send is a network round trip). Instead each coalition's method runs in its
own thread, and an exchange merges their sends: once every coalition is waiting on a send (or
has finished its round), the exchange makes one ``pool.send`` with all their instructions and
hands each its replies. Methods of one kind issue the same sends per round, so a round costs as
many round trips as the base method alone. Replies are split by client, so the result does not
depend on thread timing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from collabfl.kernel.graph_edges import Edge
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import ClientPool, Instruction, Reply
from collabfl.strategies.rounds import Method, Resume, RoundOutcome

MethodFactory = Callable[[Sequence[int]], Method]
"""Builds the method a coalition runs, given its members."""


class _Exchange:
    """Merges the sends of concurrently advancing coalition methods into single pool sends."""

    def __init__(self, pool: ClientPool) -> None:
        self.pool = pool
        self._condition = threading.Condition()
        self._waiting: dict[int, Mapping[int, Instruction]] = {}
        self._answers: dict[int, dict[int, Reply] | None] = {}
        self._running = 0

    def submit(self, key: int, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        """Called from a coalition's thread: wait for the merged send, return its replies."""
        with self._condition:
            self._waiting[key] = instructions
            self._condition.notify_all()
            self._condition.wait_for(lambda: key in self._answers)
            answer = self._answers.pop(key)
        if answer is None:
            raise RuntimeError("the merged send failed; see the coordinator's error")
        return answer

    def advance(self, iterators: Mapping[int, Iterator[RoundOutcome]]) -> dict[int, RoundOutcome]:
        """``next()`` on every iterator at once; returns the outcomes of those that yielded."""
        outcomes: dict[int, RoundOutcome] = {}
        errors: dict[int, BaseException] = {}

        def run(key: int, iterator: Iterator[RoundOutcome]) -> None:
            try:
                outcomes[key] = next(iterator)
            except StopIteration:
                pass
            except BaseException as error:  # re-raised in the caller's thread below
                errors[key] = error
            finally:
                with self._condition:
                    self._running -= 1
                    self._condition.notify_all()

        with self._condition:
            self._running = len(iterators)
        threads = [
            threading.Thread(target=run, args=item, daemon=True, name=f"coalition-{item[0]}")
            for item in iterators.items()
        ]
        for thread in threads:
            thread.start()
        failure = self._serve()
        for thread in threads:
            thread.join()
        if failure is not None:
            raise failure
        if errors:
            raise errors[min(errors)]
        return outcomes

    def _serve(self) -> BaseException | None:
        """Make merged sends until every coalition has finished its round."""
        failure: BaseException | None = None
        with self._condition:
            while True:
                self._condition.wait_for(lambda: len(self._waiting) == self._running)
                if self._running == 0:
                    return failure
                merged: dict[int, Instruction] = {}
                for key in sorted(self._waiting):
                    merged.update(self._waiting[key])
                try:
                    replies = self.pool.send(merged) if failure is None else {}
                except Exception as error:  # every waiting coalition must be released
                    failure, replies = error, {}
                for key, sent in self._waiting.items():
                    self._answers[key] = (
                        None if failure else {k: replies[k] for k in sent if k in replies}
                    )
                self._waiting.clear()
                self._condition.notify_all()


class _CoalitionPool:
    """A coalition's view of the federation: its members only, sends through the exchange."""

    def __init__(self, exchange: _Exchange, key: int, members: set[int]) -> None:
        self.exchange = exchange
        self.key = key
        self.members = members

    @property
    def sample_counts(self) -> Mapping[int, int]:
        counts = self.exchange.pool.sample_counts
        return {k: counts[k] for k in sorted(self.members) if k in counts}

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        outsiders = sorted(set(instructions) - self.members)
        if outsiders:
            raise ValueError(f"coalition {sorted(self.members)} sent to non-members {outsiders}")
        return self.exchange.submit(self.key, instructions)


class CoalitionTrainer:
    """Runs ``base`` inside every coalition of two or more clients and ``single`` (local
    training) for singletons, round by round, yielding one merged outcome per round."""

    def __init__(
        self, pool: ClientPool, base: MethodFactory, single: MethodFactory, num_rounds: int
    ) -> None:
        self.pool = pool
        self.base = base
        self.single = single
        self.num_rounds = num_rounds
        self._exchange = _Exchange(pool)
        self._pools: list[_CoalitionPool] = []
        self._iterators: dict[int, Iterator[RoundOutcome]] = {}

    @property
    def coalitions(self) -> list[list[int]]:
        """The coalitions as sorted member lists, sorted by first member."""
        return sorted(sorted(p.members) for p in self._pools if p.members)

    def add(self, members: Sequence[int], resume: Resume | None = None) -> None:
        """Start training a new coalition (from ``resume`` if given)."""
        taken = {k for p in self._pools for k in p.members} & set(members)
        if taken:
            raise ValueError(f"clients {sorted(taken)} are already in a coalition")
        if not members:
            raise ValueError("a coalition needs at least one member")
        key = len(self._pools)
        view = _CoalitionPool(self._exchange, key, set(members))
        self._pools.append(view)
        method = (self.single if len(members) == 1 else self.base)(sorted(members))
        self._iterators[key] = method.rounds(view, self.num_rounds, resume)

    def join(self, client: int, coalition: int, round_index: int) -> None:
        """Put a late joiner into ``coalitions[coalition]`` from ``round_index`` on.

        A coalition of two or more runs its method on a live view of its members, so the
        newcomer simply appears in it. A singleton was training locally: it restarts as a
        base-method coalition of two at this round (its local progress is not carried over).
        """
        members = self.coalitions[coalition]
        view = next(p for p in self._pools if sorted(p.members) == members)
        if len(members) > 1:
            view.members.add(client)
            return
        self._iterators.pop(view.key)
        view.members.clear()
        self.add([*members, client], Resume(round_index - 1, {}))

    def step(self) -> tuple[dict[int, RoundOutcome], dict[int, list[int]]] | None:
        """One round of every coalition: (outcome per coalition key, members per key), or None
        once every coalition's method has finished."""
        outcomes = self._exchange.advance(self._iterators)
        for key in set(self._iterators) - set(outcomes):
            del self._iterators[key]
        if not outcomes:
            return None
        rounds = {o.round for o in outcomes.values()}
        if len(rounds) != 1:
            raise RuntimeError(f"coalitions are out of step: rounds {sorted(rounds)}")
        members = {key: sorted(self._pools[key].members) for key in outcomes}
        return outcomes, members

    def restore(self, resume: Resume) -> None:
        """Restart every coalition a checkpoint saved (its "coalitions" and "states")."""
        saved = resume.checkpoint["coalitions"]
        for members, state in zip(saved, resume.checkpoint["states"], strict=True):
            self.add([int(k) for k in members], Resume(resume.last_round, state))

    def checkpoints(self, outcomes: Mapping[int, RoundOutcome]) -> list[dict[str, Any]]:
        """Each coalition's checkpoint, in ``coalitions`` order (for a restart)."""
        by_members = {
            tuple(sorted(self._pools[k].members)): o.checkpoint for k, o in outcomes.items()
        }
        return [by_members.get(tuple(c), {}) for c in self.coalitions]


def merged_outcome(
    outcomes: Mapping[int, RoundOutcome],
    members: Mapping[int, list[int]],
    coalitions: list[list[int]],
    sample_counts: Mapping[int, int],
    checkpoint: dict[str, Any],
) -> RoundOutcome:
    """One round of all coalitions as a single outcome.

    Metrics gain each client's coalition index. The graph is each coalition's own when its
    method has one (DPFL), else FedAvg's weights inside the coalition: i uses j with
    m_j / m_C (a singleton has no edges).
    """
    index = {k: n for n, c in enumerate(coalitions) for k in c}
    metrics: dict[int, ClientMetrics] = {}
    graph: list[Edge] = []
    round_index = next(iter(outcomes.values())).round
    for key, outcome in sorted(outcomes.items()):
        for client, values in outcome.metrics.items():
            metrics[client] = replace(values, coalition=index.get(client, -1))
        if outcome.graph is not None:
            graph.extend(outcome.graph)
        else:
            graph.extend(_average_edges(members[key], sample_counts))
    return RoundOutcome(
        round_index,
        dict(sorted(metrics.items())),
        sorted(graph),
        coalitions=coalitions,
        checkpoint=checkpoint,
    )


def _average_edges(members: Sequence[int], sample_counts: Mapping[int, int]) -> list[Edge]:
    present = [k for k in members if k in sample_counts]
    total = sum(sample_counts[k] for k in present)
    return [(i, j, sample_counts[j] / total) for i in present for j in present if j != i]
