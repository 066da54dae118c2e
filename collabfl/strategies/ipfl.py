"""iPFL's market math: gains, the server's import graph, payments, utilities, prox centres.

Every client reports once its sample count n_i, its sharing cost c_i (what it loses each
time one peer imports its model in a round; c_i = ∞ never shares) and its data eagerness
K_i (K_i = 0 never buys). Per round the server builds a directed 0/1 graph A (a_ij = 1: i
imports j's model), settles payments between clients, and sends each importer a proximal
centre. Everything here is numpy on reported numbers, distance matrices and flattened model
vectors (rows of an N×D array).

Gain of importing peers with Σ n_j = x:  g_i(x) = sqrt(K_i/n_i) − sqrt(K_i/(n_i + x)),
G_i(a_i) = g_i(Σ_j a_ij n_j). Concave in x, so each extra peer is worth less than the last.
Differences of g are computed in the cancellation-free form
g_i(x) − g_i(x − m) = sqrt(K_i)·m / (sqrt(u − m)·sqrt(u)·(sqrt(u − m) + sqrt(u))), u = n_i + x,
so tiny marginal gains (large markets, absurd reported n) keep full relative precision.

How the distance term λ (n_j/n_i) d_ij enters (paper, Definition 1 and Eqs. 8–10): it is a
price the *importer* i attaches to j's model when choosing (the threshold uses
b_j = c_j + λ (n_j/n_i) d_ij) and it is deducted from what i pays j (r_ij). It is not part of
the utility U_i = G_i(a_i) − c_i·#(importers of i) − pay_i itself, which is how the paper
defines and reports utility; so a distant peer is cheaper to import, never a utility loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from collabfl.strategies.pfedgraph import model_similarity

Role = Literal["trader", "buyer", "seller", "attacker"]
DistanceGrad = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""grad(x, ys): row k = ∇_x d(x, ys[k]) for one vector x and a matrix ys."""

_BISECTION_STEPS = 200
_PAYMENT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ClientProfile:
    """What a client reports to the market: samples ``n``, sharing ``cost`` c, ``eagerness`` K.

    ``role`` is derived when not given: trader (K > 0, c finite), buyer (K > 0, c = ∞),
    seller (K = 0; with c = ∞ one nobody can afford). An attacker reports like anyone else,
    so that role can only be given (it labels the client for experiments; the market treats
    it by its numbers).
    """

    n: float
    cost: float
    eagerness: float
    role: Role | None = None

    def __post_init__(self) -> None:
        _require(math.isfinite(self.n) and self.n > 0, "n", "finite and > 0", self.n)
        _require(
            not math.isnan(self.cost) and self.cost >= 0, "cost", ">= 0 (inf allowed)", self.cost
        )
        _require(
            math.isfinite(self.eagerness) and self.eagerness >= 0,
            "eagerness",
            "finite and >= 0",
            self.eagerness,
        )
        derived = _derive_role(self.eagerness, self.cost)
        if self.role is None:
            object.__setattr__(self, "role", derived)
        elif self.role not in ("trader", "buyer", "seller", "attacker"):
            raise ValueError(f"role must be trader, buyer, seller or attacker, got {self.role!r}")
        elif self.role != "attacker" and self.role != derived:
            raise ValueError(
                f"role {self.role!r} contradicts eagerness={self.eagerness}, cost={self.cost} "
                f"(those make a {derived})"
            )


def gain(profile: ClientProfile, x: float | np.ndarray) -> float | np.ndarray:
    """g_i(x) = sqrt(K/n) − sqrt(K/(n + x)) for imported sample counts x ≥ 0."""
    xs = np.asarray(x, dtype=np.float64)
    value = _gain_difference(profile, xs, xs)
    return float(value) if value.ndim == 0 else value


def marginal_gain(
    profile: ClientProfile, total: float | np.ndarray, n_j: float | np.ndarray
) -> float | np.ndarray:
    """g_i(total) − g_i(total − n_j): what the peer with n_j samples adds on top of the rest."""
    value = _gain_difference(profile, np.asarray(total, float), np.asarray(n_j, float))
    return float(value) if value.ndim == 0 else value


def collaboration_gain(profile: ClientProfile, row: np.ndarray, n: np.ndarray) -> float:
    """G_i(a_i) = g_i(Σ_j a_ij n_j)."""
    return float(gain(profile, float(np.dot(np.asarray(row, float), np.asarray(n, float)))))


def cosine_distance_matrix(updates: np.ndarray) -> np.ndarray:
    """d_ij = 1 − cos(Δ_i, Δ_j) on updates Δ_i = θ_i − θ^0 (the official code's distance).

    In [0, 2], zero diagonal. A zero update has no direction: distance 1 to every other
    client (cosine 0).
    """
    return np.clip(1.0 - model_similarity(updates, clip_above=None), 0.0, 2.0)


def squared_l2_distance_matrix(models: np.ndarray) -> np.ndarray:
    """d_ij = ‖θ_i − θ_j‖² (the paper's alternative), from explicit differences.

    Row by row rather than through the Gram matrix, which loses the small distances between
    similar models to cancellation.
    """
    x = np.asarray(models, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"models must be a non-empty 2-D array, got shape {x.shape}")
    out = np.empty((x.shape[0], x.shape[0]))
    for i in range(x.shape[0]):
        diff = x - x[i]
        out[i] = np.einsum("ij,ij->i", diff, diff)
    return out


def threshold(profile: ClientProfile, n_j: float, b_j: float) -> float:
    """The size T_j at which importing peer j (n_j samples, price b_j) stops paying for i.

    Solves g_i(T) − g_i(T − n_j) = b_j for T ≥ n_j: the left side is j's marginal gain when
    i's imports total T, decreasing from g_i(n_j) at T = n_j towards 0. So a root exists iff
    0 < b_j < g_i(n_j), found by bisection. Otherwise:

    * b_j ≥ g_i(n_j): j is not worth its price even alone, T_j = 0 (the paper's "no
      solution": never imported);
    * b_j ≤ 0 (a free peer at distance 0): j's marginal gain beats its price at any size,
      T_j = ∞. The paper sets every rootless case to 0, which would make free sellers
      unsellable when λ = 0; this is the one place we read it differently.
    """
    return float(_thresholds(profile, np.array([n_j], float), np.array([b_j], float))[0])


def import_prices(
    buyer: int, profiles: Sequence[ClientProfile], distances: np.ndarray, lam: float
) -> np.ndarray:
    """b_j = c_j + λ (n_j/n_i) d_ij for buyer i and every j (entry i is ∞: never itself)."""
    _check_lambda(lam)
    cost = np.array([p.cost for p in profiles], dtype=np.float64)
    d = _distances(distances, len(profiles))
    return _prices(buyer, _counts(profiles), cost, d, lam)


def market_graph(
    profiles: Sequence[ClientProfile], distances: np.ndarray, lam: float
) -> np.ndarray:
    """The import graph A (N×N 0/1 int8, a_ij = 1: i imports j) of Algorithm 2.

    Per buyer i with K_i > 0: thresholds T_j from b_j = c_j + λ (n_j/n_i) d_ij, then peers are
    taken in order of decreasing T_j, importing j while (Σ n of those taken) + n_j < T_j; the
    first peer that fails ends i's search (the paper's ``break``), even if a later, smaller
    peer would still fit. Ties in T_j go to the lower index. Since every taken peer had the
    largest remaining threshold, the final total stays below each taken peer's T_j, so each
    one's marginal gain exceeds its price: that is what makes payments individually rational.
    """
    _check_lambda(lam)
    n = _counts(profiles)
    cost = np.array([p.cost for p in profiles], dtype=np.float64)
    d = _distances(distances, len(profiles))
    eagerness = np.array([p.eagerness for p in profiles], dtype=np.float64)
    prices = np.stack([_prices(i, n, cost, d, lam) for i in range(n.size)])
    limits = _threshold_table(n[:, None], eagerness[:, None], n[None, :], prices)
    graph = np.zeros((n.size, n.size), dtype=np.int8)
    for i in np.flatnonzero(eagerness > 0):
        total = 0.0
        for j in np.argsort(-limits[i], kind="stable"):
            if j == i:  # never itself (its price is ∞, so its threshold is 0 anyway)
                continue
            if not total + n[j] < limits[i, j]:
                break
            graph[i, j] = 1
            total += n[j]
    return graph


def payments(
    graph: np.ndarray, profiles: Sequence[ClientProfile], distances: np.ndarray, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """Remittances r (r_ij: what i pays j this round) and net payments pay (pay_i = what i pays).

    On an edge, r_ij = G_i(a_i) − G_i(a_i − e_j) − λ (n_j/n_i) d_ij (paper Eq. 10): the
    importer hands over j's marginal gain less the distance discount. pay_i = Σ_j r_ij −
    Σ_j r_ji; money only moves between clients, so Σ_i pay_i = 0 (checked).
    """
    _check_lambda(lam)
    a = _graph(graph, len(profiles))
    n = _counts(profiles)
    d = _distances(distances, len(profiles))
    totals = a @ n
    r = np.zeros(a.shape)
    for i, buyer in enumerate(profiles):
        peers = np.flatnonzero(a[i])
        if peers.size == 0:
            continue
        marginal = _gain_difference(buyer, np.full(peers.size, totals[i]), n[peers])
        discount = lam * (n[peers] / n[i]) * d[i, peers] if lam > 0 else 0.0
        r[i, peers] = marginal - discount
    pay = r.sum(axis=1) - r.sum(axis=0)
    if abs(pay.sum()) > _PAYMENT_TOLERANCE * (1.0 + np.abs(r).sum()):
        raise RuntimeError(f"payments do not balance: Σ pay = {pay.sum()}")
    return r, pay


def utilities(
    graph: np.ndarray,
    profiles: Sequence[ClientProfile],
    distances: np.ndarray | None,
    lam: float,
    with_payments: bool = True,
) -> np.ndarray:
    """Per-round U_i = G_i(a_i) − c_i·#(importers of i) − pay_i (paper Definition 1).

    Costs and gains are those in ``profiles``: to score a liar, build the graph from its
    reports and pass the true profiles here (payments do not depend on the costs). A client
    nobody imports pays no sharing cost, even with c = ∞. ``distances`` is only read for the
    payments (None: no distance term).
    """
    size = len(profiles)
    a = _graph(graph, size)
    n = _counts(profiles)
    totals = a @ n
    gains = np.array([gain(p, totals[i]) for i, p in enumerate(profiles)])
    importers = a.sum(axis=0)
    cost = np.array([p.cost for p in profiles], dtype=np.float64)
    sharing = np.where(importers > 0, cost * np.maximum(importers, 1), 0.0)
    utility = gains - sharing
    if with_payments:
        d = np.zeros((size, size)) if distances is None else distances
        utility -= payments(a, profiles, d, lam if distances is not None else 0.0)[1]
    return utility


def cosine_distance_grad(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Row k = ∇_x (1 − cos(x, y_k)) = −(y_k/(‖x‖‖y_k‖) − cos(x, y_k)·x/‖x‖²).

    Undefined where x or y_k is zero; those rows are 0 (no pull either way).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.atleast_2d(np.asarray(ys, dtype=np.float64))
    nx = float(np.linalg.norm(x))
    ny = np.linalg.norm(y, axis=1)
    if nx == 0.0:
        return np.zeros_like(y)
    safe = np.where(ny > 0, ny, 1.0)
    cos = (y @ x) / (nx * safe)
    grad: np.ndarray = -(y / (nx * safe)[:, None] - cos[:, None] * x[None, :] / nx**2)
    grad[ny == 0] = 0.0
    return grad


def squared_l2_grad(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Row k = ∇_x ‖x − y_k‖² = 2 (x − y_k)."""
    x = np.asarray(x, dtype=np.float64)
    return 2.0 * (x[None, :] - np.atleast_2d(np.asarray(ys, dtype=np.float64)))


def proximal_center(
    i: int,
    models: np.ndarray,
    graph: np.ndarray,
    n: np.ndarray,
    eta: float,
    grad_distance: DistanceGrad,
    origin: np.ndarray | None = None,
) -> np.ndarray:
    """θ̄_i = θ_i − (η/n_i) Σ_j a_ij n_j ∇_θi d(θ_i, θ_j) (paper Eq. 6), sent to client i.

    One gradient step on i's distance term, so the client can train against a single
    centre instead of every imported model. With ``origin`` (θ^0) the distance is measured
    between updates θ − θ^0, as for ``cosine_distance_grad`` in the official code; since
    ∂(θ_i − θ^0)/∂θ_i = I the gradient is the same expression evaluated on the updates.
    Without imports θ̄_i = θ_i.
    """
    x = np.asarray(models, dtype=np.float64)
    counts = np.asarray(n, dtype=np.float64)
    a = _graph(graph, x.shape[0])
    if counts.shape != (x.shape[0],) or not np.all(counts > 0):
        raise ValueError(f"n must hold {x.shape[0]} positive counts, got {counts}")
    if not math.isfinite(eta) or eta < 0:
        raise ValueError(f"eta must be finite and >= 0, got {eta}")
    peers = np.flatnonzero(a[i])
    if peers.size == 0:
        alone: np.ndarray = x[i].copy()
        return alone
    own, others = x[i], x[peers]
    if origin is not None:
        base = np.asarray(origin, dtype=np.float64)
        own, others = own - base, others - base[None, :]
    grads = grad_distance(own, others)
    centre: np.ndarray = x[i] - (eta / counts[i]) * (counts[peers] @ grads)
    return centre


def proximal_centers(
    models: np.ndarray,
    graph: np.ndarray,
    n: np.ndarray,
    eta: float,
    grad_distance: DistanceGrad,
    origin: np.ndarray | None = None,
) -> np.ndarray:
    """``proximal_center`` for every client (row i = θ̄_i)."""
    x = np.asarray(models, dtype=np.float64)
    return np.stack(
        [proximal_center(i, x, graph, n, eta, grad_distance, origin) for i in range(x.shape[0])]
    )


def _gain_difference(profile: ClientProfile, total: np.ndarray, m: np.ndarray) -> np.ndarray:
    """g(total) − g(total − m) for one client (with m = total it is g(total))."""
    return _marginal(profile.n, math.sqrt(profile.eagerness), total, m)


def _marginal(
    n_own: np.ndarray | float, root_k: np.ndarray | float, total: np.ndarray, m: np.ndarray
) -> np.ndarray:
    """sqrt(K/(u − m)) − sqrt(K/u) with u = n_own + total, in the cancellation-free form."""
    u = n_own + total
    low = np.sqrt(u - m)
    high = np.sqrt(u)
    marginal: np.ndarray = root_k * m / (low * high * (low + high))
    return marginal


def _thresholds(profile: ClientProfile, n_j: np.ndarray, b_j: np.ndarray) -> np.ndarray:
    """``threshold`` for one buyer and many peers."""
    return _threshold_table(np.float64(profile.n), np.float64(profile.eagerness), n_j, b_j)


def _threshold_table(
    n_own: ArrayLike, eagerness: ArrayLike, n_peer: ArrayLike, price: ArrayLike
) -> np.ndarray:
    """Thresholds for buyers × peers at once (arrays broadcast together), by bisection.

    One vectorised bracketing-and-bisection pass for every (buyer, peer) pair: the market
    graph needs N² thresholds per round, and a Python loop per buyer would dominate.
    """
    arrays = np.broadcast_arrays(n_own, np.sqrt(eagerness), n_peer, price)
    shape = arrays[0].shape
    n_own, root_k, m, b = (np.array(a, dtype=np.float64).ravel() for a in arrays)
    alone = _marginal(n_own, root_k, m, m)  # g_i(n_j), the largest marginal gain
    out = np.zeros_like(b)
    out[(b <= 0) & (alone > 0)] = math.inf
    solve = np.flatnonzero((b > 0) & (b < alone))
    if solve.size == 0:
        return out.reshape(shape)
    own, k, m, b = n_own[solve], root_k[solve], m[solve], b[solve]
    lo, hi = m.copy(), 2.0 * m
    # Grow the bracket until the marginal gain at hi drops below the price; for b > 0 this
    # ends (the marginal gain tends to 0), at the latest when hi overflows to inf.
    while True:
        short = _marginal(own, k, hi, m) >= b
        if not np.any(short):
            break
        lo = np.where(short, hi, lo)
        hi = np.where(short, 2.0 * hi, hi)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        above = _marginal(own, k, mid, m) >= b
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
        if np.all(hi - lo <= 4 * np.spacing(hi)):
            break
    out[solve] = 0.5 * (lo + hi)
    return out.reshape(shape)


def _prices(buyer: int, n: np.ndarray, cost: np.ndarray, d: np.ndarray, lam: float) -> np.ndarray:
    distance_term = lam * (n / n[buyer]) * d[buyer] if lam > 0 else np.zeros_like(n)
    b: np.ndarray = cost + distance_term
    b[buyer] = math.inf
    return b


def _derive_role(eagerness: float, cost: float) -> Role:
    if eagerness > 0:
        return "trader" if math.isfinite(cost) else "buyer"
    return "seller"


def _require(ok: bool, field: str, rule: str, value: float) -> None:
    if not ok:
        raise ValueError(f"{field} must be {rule}, got {value}")


def _counts(profiles: Sequence[ClientProfile]) -> np.ndarray:
    if not profiles:
        raise ValueError("the market needs at least one client")
    return np.array([p.n for p in profiles], dtype=np.float64)


def _check_lambda(lam: float) -> None:
    if not math.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be finite and >= 0, got {lam}")


def _distances(distances: np.ndarray, size: int) -> np.ndarray:
    d = np.asarray(distances, dtype=np.float64)
    if d.shape != (size, size):
        raise ValueError(f"distances must be {size}×{size}, got shape {d.shape}")
    off = ~np.eye(size, dtype=bool)
    if not np.all(np.isfinite(d[off])) or np.any(d[off] < 0):
        raise ValueError("distances must be finite and >= 0")
    return d


def _graph(graph: np.ndarray, size: int) -> np.ndarray:
    a = np.asarray(graph)
    if a.shape != (size, size):
        raise ValueError(f"graph must be {size}×{size}, got shape {a.shape}")
    if not np.all((a == 0) | (a == 1)):
        raise ValueError("graph entries must be 0 or 1")
    if np.any(np.diag(a)):
        raise ValueError("a client cannot import its own model (diagonal must be 0)")
    return a.astype(np.float64)
