"""The client-side seam for peer models: fetch under a budget, validate, account.

A client never touches another client's model except through a ``PeerFetcher``. The
fetcher asks a ``PeerModelSource`` (the in-process store here, the gRPC peer client in a
real federation) for a batch of models at once, each in its own thread, refuses to hold
more than the budget at once, rejects malformed models before they can reach an aggregate,
and counts what it moved. What it returns and records follows the order of the batch it was
asked for, never the order in which models arrived.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import torch

from collabfl.client.peer_limits import MAX_PEER_WEIGHT

log = logging.getLogger(__name__)


MAX_PARALLEL_FETCHES = 8
"""Fetches of one batch in flight at once (the budget bounds a batch's size anyway)."""


class PeerUnavailable(Exception):
    """The peer's model for that round cannot be had (peer gone, round not published)."""


class InvalidPeerModel(Exception):
    """The peer sent something that must not be aggregated."""


class BudgetExceeded(RuntimeError):
    """A caller tried to hold more peer models at once than the budget allows."""


class PeerModelSource(Protocol):
    """Where peer models come from (an adapter: memory store, gRPC client, ...)."""

    def fetch(self, owner: int, round_index: int) -> torch.Tensor:
        """The flat model vector ``owner`` published for ``round_index``.

        Raises PeerUnavailable when it cannot be had. Called from several threads at once.
        """
        ...


class ModelPublisher(Protocol):
    """Where a client puts its own model for peers to fetch."""

    def publish(self, owner: int, round_index: int, vector: torch.Tensor) -> None: ...


@dataclass
class FetchStats:
    """Traffic since the last ``take_stats``: what a round's metrics report."""

    bytes_fetched: int = 0
    models_fetched: int = 0
    peak_resident: int = 0
    failures: int = 0
    fetch_seconds: float = 0.0
    """Wall time spent fetching batches (a batch's fetches overlap)."""


class PeerFetcher:
    """Fetches batches of peer models while enforcing a cap on resident models.

    A peer model is refused (the peer skipped for the round) unless every weight is finite
    and at most ``max_weight`` in magnitude.
    """

    def __init__(
        self, source: PeerModelSource, expected_numel: int, max_weight: float = MAX_PEER_WEIGHT
    ) -> None:
        if not max_weight > 0:
            raise ValueError(f"max_weight must be positive, got {max_weight}")
        self.source = source
        self.expected_numel = expected_numel
        self.max_weight = max_weight
        self.resident = 0
        self.stats = FetchStats()
        self.skipped: list[str] = []
        """Why peers were skipped since the last ``take_skipped`` (one line each)."""
        self._pool: ThreadPoolExecutor | None = None
        """Fetch threads, kept between batches: a greedy search holds one small batch after
        another, and starting threads for each cost more than the fetches (at Bc = 2, N = 20
        a fifth of the search). Idle threads end when the fetcher is collected."""

    @contextmanager
    def hold(
        self, owners: Sequence[int], round_index: int, limit: int | None
    ) -> Iterator[dict[int, torch.Tensor]]:
        """Fetch ``owners``' models concurrently and keep them resident for the ``with`` block.

        Raises BudgetExceeded before fetching anything if that would make more than ``limit``
        peer models resident, so no more than ``limit`` are ever held, in flight included.
        Peers that are unavailable or send an invalid model are logged, counted and left out
        of the mapping. The mapping, the log and the counters follow the order of ``owners``.
        """
        if limit is not None and self.resident + len(owners) > limit:
            raise BudgetExceeded(
                f"holding {self.resident + len(owners)} peer models would exceed the budget "
                f"of {limit}"
            )
        started = time.perf_counter()
        outcomes = self._fetch_batch(owners, round_index)
        self.stats.fetch_seconds += time.perf_counter() - started
        models: dict[int, torch.Tensor] = {}
        try:
            models.update(self._admit(owners, outcomes, round_index))
            # The mapping alone holds the models from here: a caller that replaces one (with
            # its copy on another device, client/node.py) lets the fetched one go.
            del outcomes
            self.resident += len(models)
            self.stats.peak_resident = max(self.stats.peak_resident, self.resident)
            yield models
        finally:
            self.resident -= len(models)
            models.clear()

    def _admit(
        self,
        owners: Sequence[int],
        outcomes: list[torch.Tensor | PeerUnavailable | InvalidPeerModel],
        round_index: int,
    ) -> dict[int, torch.Tensor]:
        """The fetched models by owner; each failure logged, counted and left out."""
        models: dict[int, torch.Tensor] = {}
        for owner, outcome in zip(owners, outcomes, strict=True):
            if not isinstance(outcome, torch.Tensor):
                log.warning("skipping peer %s in round %s: %s", owner, round_index, outcome)
                self.stats.failures += 1
                self.skipped.append(f"peer {owner}: {outcome}")
                continue
            models[owner] = outcome
            self.stats.models_fetched += 1
            self.stats.bytes_fetched += outcome.numel() * outcome.element_size()
        return models

    def _fetch_batch(
        self, owners: Sequence[int], round_index: int
    ) -> list[torch.Tensor | PeerUnavailable | InvalidPeerModel]:
        """Each owner's valid model, or why there is none, in ``owners``' order.

        Any other error is raised once every fetch of the batch has ended.
        """
        if len(owners) <= 1 or not getattr(self.source, "fetches_wait", True):
            return [self._fetch_one(owner, round_index) for owner in owners]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_PARALLEL_FETCHES, thread_name_prefix="peer-fetch")
        return list(self._pool.map(lambda owner: self._fetch_one(owner, round_index), owners))

    def _fetch_one(
        self, owner: int, round_index: int
    ) -> torch.Tensor | PeerUnavailable | InvalidPeerModel:
        try:
            vector = self.source.fetch(owner, round_index)
            self._validate(owner, vector)
        except (PeerUnavailable, InvalidPeerModel) as error:
            return error
        return vector

    def take_skipped(self) -> list[str]:
        """The skip reasons collected so far, and start a new list."""
        skipped, self.skipped = self.skipped, []
        return skipped

    def take_stats(self) -> FetchStats:
        """Return the traffic counters and start new ones."""
        stats, self.stats = self.stats, FetchStats()
        return stats

    def _validate(self, owner: int, vector: torch.Tensor) -> None:
        if not isinstance(vector, torch.Tensor):
            raise InvalidPeerModel(f"peer {owner} sent a {type(vector).__name__}, not a tensor")
        if vector.dtype != torch.float32 or vector.dim() != 1:
            raise InvalidPeerModel(
                f"peer {owner} sent dtype {vector.dtype} shape {tuple(vector.shape)}, "
                f"expected float32 ({self.expected_numel},)"
            )
        if vector.numel() != self.expected_numel:
            raise InvalidPeerModel(
                f"peer {owner} sent {vector.numel()} values, expected {self.expected_numel}"
            )
        # One pass and no model-sized temporary (the budget counts every model held):
        # the extremes are NaN when any weight is, and infinite when any weight is.
        low, high = (float(v) for v in torch.aminmax(vector)) if vector.numel() else (0.0, 0.0)
        if not (math.isfinite(low) and math.isfinite(high)):
            raise InvalidPeerModel(f"peer {owner} sent NaN or Inf weights")
        largest = max(-low, high)
        if largest > self.max_weight:
            raise InvalidPeerModel(
                f"peer {owner} sent a weight of magnitude {largest:.3g}, above the limit "
                f"of {self.max_weight:g}"
            )


class MemoryModelStore:
    """Published models kept in memory: the in-process runtime's peer exchange.

    Keeps the last ``keep_rounds`` rounds per owner; older ones are dropped on publish.
    """

    fetches_wait = False
    """A fetch is a lookup: the fetcher makes it in its own thread, as handing it to a fetch
    thread costs more (a source without this attribute is fetched in threads)."""

    def __init__(self, keep_rounds: int = 2) -> None:
        if keep_rounds < 1:
            raise ValueError(f"keep_rounds must be >= 1, got {keep_rounds}")
        self.keep_rounds = keep_rounds
        self._models: dict[int, dict[int, torch.Tensor]] = {}

    def publish(self, owner: int, round_index: int, vector: torch.Tensor) -> None:
        rounds = self._models.setdefault(owner, {})
        rounds[round_index] = vector.detach()
        for old in sorted(rounds)[: -self.keep_rounds]:
            del rounds[old]

    def fetch(self, owner: int, round_index: int) -> torch.Tensor:
        try:
            return self._models[owner][round_index]
        except KeyError:
            raise PeerUnavailable(
                f"client {owner} has not published a model for round {round_index}"
            ) from None

    def forget(self, owner: int) -> None:
        """Drop everything ``owner`` published (the client left)."""
        self._models.pop(owner, None)
