"""FedCollab's collaboration structure: the coalition objective, its solver, new-client placement.

The server partitions clients into disjoint coalitions before any training, by minimising the
sum of the clients' error bounds (the paper's Eq. 10 with α from Eq. 9):

    L = Σ_k [ |C_k| · C / sqrt(m_{C_k})  +  Σ_{i∈C_k} Σ_{j∈C_k} (m_j / m_{C_k}) · D_ij ]

m_i is client i's sample count, m_{C_k} the coalition's total, D the estimated pairwise
distribution distance (row i = the client whose bound it is) and C trades generalisation
against dataset shift (C = 0: everyone trains locally; C → ∞: one global coalition).

Checked against the paper: with α_ij = β_j / β_{C_k} (β_j = m_j / m), the quantity term
C/sqrt(m) · sqrt(Σ_j α_ij² / β_j) of the first line of Eq. 10 equals C / sqrt(m_{C_k}) for every
member, which is the formula above and ALGORITHMS.md §3; the official code computes exactly
this (then divides by N, which changes no minimiser). The second line of Eq. 10 writes the
*squared* norm without the root, which contradicts the first line, Eq. 3 and the code: a typo,
not followed here. The factor 2 of Theorem 3.3 and the VC constant are absorbed into C.

The solver is the paper's Algorithm 2 with the official restarts; ``CoalitionState`` keeps
per-coalition aggregates so that the change of L for moving one client costs O(N), not the
O(N²) of re-evaluating L (the official code re-evaluates for each of the N candidate ids).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

_RELATIVE_TOLERANCE = 1e-12
"""A move must lower L by more than this × (1 + |L|): rounding noise in the incremental
deltas must not make the greedy cycle between equivalent partitions."""


def _validate_problem(
    m: ArrayLike, distances: ArrayLike, c: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Check sizes, distances and C; return float copies with D clipped at 0, diagonal 0."""
    sizes = np.asarray(m, dtype=float)
    if sizes.ndim != 1 or sizes.size == 0:
        raise ValueError(f"sizes must be a non-empty 1-D array, got shape {sizes.shape}")
    if not np.all(np.isfinite(sizes)) or np.any(sizes <= 0):
        raise ValueError("sizes must be finite and positive (C / sqrt(m_C) needs m_C > 0)")
    n = sizes.size
    dist = np.array(distances, dtype=float)  # a copy: clipped and zeroed below
    if dist.shape != (n, n):
        raise ValueError(f"distances must be {n}×{n} for {n} clients, got shape {dist.shape}")
    if not np.all(np.isfinite(dist)):
        raise ValueError("distances must be finite")
    np.maximum(dist, 0.0, out=dist)  # estimated distances (2·BalAcc − 1) can dip below 0
    np.fill_diagonal(dist, 0.0)
    c = float(c)
    if not np.isfinite(c) or c < 0:
        raise ValueError(f"C must be finite and >= 0, got {c}")
    return sizes, dist, c


def _validate_assignment(assignment: ArrayLike, num_clients: int) -> np.ndarray:
    labels = np.asarray(assignment)
    if labels.ndim != 1 or labels.size != num_clients:
        raise ValueError(
            f"assignment must hold one coalition id per client ({num_clients}), "
            f"got shape {labels.shape}"
        )
    if labels.dtype == bool or not (
        np.issubdtype(labels.dtype, np.integer)
        or (np.issubdtype(labels.dtype, np.floating) and np.all(labels == np.round(labels)))
    ):
        raise ValueError("assignment must hold integer coalition ids")
    return labels.astype(np.int64)


def canonical_labels(assignment: ArrayLike) -> np.ndarray:
    """Relabel coalitions 0..K−1 in order of their first member (client 0's coalition is 0)."""
    labels = np.asarray(assignment)
    mapping: dict[int, int] = {}
    return np.array([mapping.setdefault(int(k), len(mapping)) for k in labels], dtype=np.int64)


def coalitions_of(assignment: ArrayLike) -> list[list[int]]:
    """The coalitions as sorted member lists, in order of their first member."""
    labels = canonical_labels(assignment)
    groups: list[list[int]] = [[] for _ in range(int(labels.max()) + 1)] if labels.size else []
    for client, k in enumerate(labels):
        groups[k].append(client)
    return groups


def coalition_objective(
    assignment: ArrayLike, m: ArrayLike, distances: ArrayLike, c: float
) -> float:
    """L of a partition given as one coalition id per client (ids are arbitrary integers).

    Evaluated directly, O(N²): the reference the incremental evaluator is tested against.
    """
    sizes, dist, c = _validate_problem(m, distances, c)
    labels = _validate_assignment(assignment, sizes.size)
    total = 0.0
    for k in np.unique(labels):
        members = np.flatnonzero(labels == k)
        mass = sizes[members].sum()
        shift = float((dist[np.ix_(members, members)] @ sizes[members]).sum())
        total += members.size * c / np.sqrt(mass) + shift / mass
    return float(total)


class CoalitionState:
    """A partition with the aggregates that make a single-client move cost O(N).

    Coalition ids live in 0..N−1 (the paper's p(k) ∈ 1..N); an id with no members stands for a
    new singleton. Per id k: member count n_k, total size M_k, S_k = Σ_{i,j∈k} m_j D_ij and its
    term f_k = n_k C / sqrt(M_k) + S_k / M_k. Per client x and id k: the row sum
    Σ_{j∈k} m_j D_xj and the column sum Σ_{i∈k} D_ix, the two parts of S that involve x (D may
    be asymmetric). Moving x from a to b then changes only f_a and f_b:
    S_a loses row[x, a] + m_x · col[x, a], S_b gains row[x, b] + m_x · col[x, b]; after the
    move two columns of each N×N table change. Memory: two N×N float tables.
    """

    def __init__(self, assignment: ArrayLike, m: ArrayLike, distances: ArrayLike, c: float):
        sizes, dist, c = _validate_problem(m, distances, c)
        n = sizes.size
        labels = _validate_assignment(assignment, n)
        if np.any(labels < 0) or np.any(labels >= n):
            raise ValueError(
                f"coalition ids must lie in 0..{n - 1} (one id per possible coalition)"
            )
        self.sizes, self.distances, self.c = sizes, dist, c
        self.labels = labels.copy()
        members = np.zeros((n, n))
        members[np.arange(n), labels] = 1.0
        self.count = members.sum(axis=0).astype(np.int64)
        self.mass = sizes @ members
        self.row = (dist * sizes[None, :]) @ members  # row[x, k] = Σ_{j∈k} m_j D_xj
        self.col = dist.T @ members  # col[x, k] = Σ_{i∈k} D_ix
        self.shift = np.einsum("xk,xk->k", members, self.row)
        self.cost = np.zeros(n)
        used = self.count > 0
        self.cost[used] = self._term(self.count[used], self.mass[used], self.shift[used])
        self.objective = float(self.cost.sum())

    @classmethod
    def singletons(cls, m: ArrayLike, distances: ArrayLike, c: float) -> CoalitionState:
        """Every client alone (local training): the paper's starting point."""
        return cls(np.arange(np.asarray(m).size), m, distances, c)

    def _term(self, count: np.ndarray, mass: np.ndarray, shift: np.ndarray) -> np.ndarray:
        """f_k of the given ids (elementwise; numpy scalars work alike)."""
        term: np.ndarray = count * self.c / np.sqrt(mass) + shift / mass
        return term

    def _removal(self, x: int) -> tuple[float, float]:
        """(S, f) of x's coalition once x has left it (0, 0 when it becomes empty)."""
        a = self.labels[x]
        if self.count[a] == 1:
            return 0.0, 0.0
        m_x = self.sizes[x]
        shift = self.shift[a] - self.row[x, a] - m_x * self.col[x, a]
        return shift, float(self._term(self.count[a] - 1, self.mass[a] - m_x, shift))

    def deltas(self, x: int) -> np.ndarray:
        """Change of L for moving client x to each id (own id: 0; an empty id: a new singleton)."""
        a = self.labels[x]
        m_x = self.sizes[x]
        _, removed_cost = self._removal(x)
        mass = self.mass + m_x
        shift = self.shift + self.row[x] + m_x * self.col[x]
        added = (self.count + 1) * self.c / np.sqrt(mass) + shift / mass
        result: np.ndarray = added - self.cost + (removed_cost - self.cost[a])
        result[a] = 0.0
        return result

    def delta(self, x: int, target: int) -> float:
        """Change of L for moving client x to coalition id ``target``."""
        return float(self.deltas(x)[target])

    def move(self, x: int, target: int) -> None:
        """Move client x to coalition id ``target`` (an empty id makes it a singleton)."""
        a = int(self.labels[x])
        b = int(target)
        if not 0 <= b < self.labels.size:
            raise ValueError(f"coalition id {b} outside 0..{self.labels.size - 1}")
        if a == b:
            return
        m_x = self.sizes[x]
        shift_a, cost_a = self._removal(x)
        shift_b = self.shift[b] + self.row[x, b] + m_x * self.col[x, b]
        count_b, mass_b = self.count[b] + 1, self.mass[b] + m_x
        cost_b = float(self._term(count_b, mass_b, shift_b))
        self.objective += cost_a - self.cost[a] + cost_b - self.cost[b]
        self.count[a] -= 1
        self.count[b] = count_b
        self.mass[b], self.shift[b], self.cost[b] = mass_b, shift_b, cost_b
        self.row[:, b] += m_x * self.distances[:, x]
        self.col[:, b] += self.distances[x, :]
        if self.count[a] == 0:  # reset exactly, so rounding does not linger in an empty id
            self.mass[a] = self.shift[a] = self.cost[a] = 0.0
            self.row[:, a] = 0.0
            self.col[:, a] = 0.0
        else:
            self.mass[a] -= m_x
            self.shift[a], self.cost[a] = shift_a, cost_a
            self.row[:, a] -= m_x * self.distances[:, x]
            self.col[:, a] -= self.distances[x, :]
        self.labels[x] = b

    def best_move(self, x: int) -> tuple[int, float]:
        """The id that lowers L most for client x, and by how much (ties: the lowest id).

        Candidates are the other non-empty coalitions and, unless x is already alone, the
        lowest empty id (a new singleton); all empty ids are the same move.
        """
        change = self.deltas(x)
        a = self.labels[x]
        empty = self.count == 0
        if self.count[a] > 1 and empty.any():
            empty[np.argmax(empty)] = False
        change[empty] = np.inf
        change[a] = np.inf
        target = int(np.argmin(change))
        return target, float(change[target])

    def copy(self) -> CoalitionState:
        """An independent copy (cheaper than rebuilding the aggregates)."""
        other = object.__new__(CoalitionState)
        other.sizes, other.distances, other.c = self.sizes, self.distances, self.c
        for name in ("labels", "count", "mass", "row", "col", "shift", "cost"):
            setattr(other, name, getattr(self, name).copy())
        other.objective = self.objective
        return other


def descend(state: CoalitionState, rng: np.random.Generator, max_passes: int = 100) -> int:
    """One run of Algorithm 2 from ``state`` (modified in place); returns the passes made.

    Each pass visits the clients in a fresh random order and moves each to its best id if that
    lowers L strictly (beyond rounding, see _RELATIVE_TOLERANCE). Stops after a pass without a
    move or after ``max_passes``. Any starting partition works, e.g. a previous solution.
    """
    n = state.labels.size
    for passes in range(1, max_passes + 1):
        moved = False
        for x in rng.permutation(n):
            target, change = state.best_move(int(x))
            if change < -_RELATIVE_TOLERANCE * (1.0 + abs(state.objective)):
                state.move(int(x), target)
                moved = True
        if not moved:
            return passes
    return max_passes


def solve_coalitions(
    m: ArrayLike,
    distances: ArrayLike,
    c: float,
    rng: np.random.Generator | int,
    restarts: int = 100,
    max_passes: int = 100,
) -> tuple[np.ndarray, float]:
    """Minimise L by the paper's Algorithm 2, restarted ``restarts`` times (official: 100).

    Each run starts from all singletons and makes passes over the clients in a new random
    order; each client moves to the coalition id (existing, or a new singleton) with the lowest
    L if that is strictly lower (best improvement; ties: lowest id, as the official loop over
    ids). A run stops after a pass without a move, or after ``max_passes``. The lowest L over
    runs wins (ties: the earliest run). Returns the assignment relabelled 0..K−1 by first member
    and its L, evaluated directly. Deterministic for a given seed or generator state (a
    Generator passed in is advanced).
    """
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    if max_passes < 1:
        raise ValueError(f"max_passes must be >= 1, got {max_passes}")
    sizes, dist, c = _validate_problem(m, distances, c)
    generator = np.random.default_rng(rng)
    start = CoalitionState.singletons(sizes, dist, c)
    best_labels, best_value = None, np.inf
    for _ in range(restarts):
        state = start.copy()
        descend(state, generator, max_passes)
        labels = canonical_labels(state.labels)
        value = coalition_objective(labels, sizes, dist, c)
        if value < best_value:
            best_labels, best_value = labels, value
    assert best_labels is not None
    return best_labels, float(best_value)


def place_new_client(
    assignment: ArrayLike,
    m: ArrayLike,
    distances: ArrayLike,
    c: float,
    allow_singleton: bool = True,
) -> int:
    """Coalition id for a newly arrived client (the last index of ``m`` and ``distances``).

    ``assignment`` holds the N existing clients' ids (arbitrary integers, kept fixed: nobody
    else moves, so only the joined coalition's term changes); ``m`` and ``distances`` cover all
    N + 1 clients. Returns the existing id whose coalition gives the lowest L (ties: the one
    whose first member comes first) or, if staying alone gives a strictly lower L and
    ``allow_singleton``, a new id max(assignment) + 1. The paper (and ALGORITHMS.md) place the
    newcomer in an existing coalition; ``allow_singleton=False`` does exactly that.
    """
    sizes, dist, c = _validate_problem(m, distances, c)
    n_old = sizes.size - 1
    labels = _validate_assignment(assignment, n_old)
    if n_old == 0:
        if not allow_singleton:
            raise ValueError("no existing coalition to join")
        return 0
    canonical = canonical_labels(labels)
    num_coalitions = int(canonical.max()) + 1
    state = CoalitionState(np.append(canonical, num_coalitions), sizes, dist, c)
    change = state.deltas(n_old)[:num_coalitions]
    best = int(np.argmin(change))
    if allow_singleton and not change[best] < 0:
        return int(labels.max()) + 1
    return int(labels[np.argmax(canonical == best)])
