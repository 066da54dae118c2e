"""pFedGraph's server-side math: model similarity, the collaboration graph and aggregates.

Per round the server compares the clients' updates Δ_i = θ_i − θ^0 (θ^0 the initial model of
round 0), solves one small quadratic program per client for its row of the collaboration
matrix W, and sends client i the aggregate θ̃_i = Σ_j W_ij θ_j. Everything here works on
flattened model vectors (rows of an N×D array) and N×N matrices; no torch.

The graph problem, for client i with similarity row s_i and prior p (p_j = n_j / Σ n):

    minimise_w  ‖w − p‖² − α s_iᵀw    subject to  w ≥ 0, Σ_j w_j = 1.

Completing the square, ‖w − p‖² − α sᵀw = ‖w − (p + (α/2) s)‖² + const, so the minimiser is
the Euclidean projection of p + (α/2) s_i onto the probability simplex: exact and
O(N log N) per row by sorting. ``collaboration_graph`` does that for all rows at once; the
CVXPY formulation the paper names is kept as the reference solver.

The two conventions for α (stated here once; everything else uses the paper's α):

* Paper, Eq. (2): ‖w − p‖² − α sᵀw, as above. Larger α trusts similarity more.
* Official code: α_c ‖w‖² − (2 α_c p + s)ᵀw = α_c (‖w − p‖² − (1/α_c) sᵀw) + const, so the
  same minimiser with α = 1/α_c. Its guidance α_c = 0.08·N (0.8 for 10 clients) is what
  the paper's appendix and its tuning range α ∈ {0.7, …, 1.0} refer to, so those numbers
  are α_c values. ``alpha_from_official`` converts; ``default_alpha`` applies the guidance.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Solver = Literal["fast", "cvxpy"]
Attack = Literal["shuffle", "all_ones", "sign_flip", "gaussian"]
ATTACKS: tuple[Attack, ...] = ("shuffle", "all_ones", "sign_flip", "gaussian")

OFFICIAL_ALPHA_PER_CLIENT = 0.08
"""The official code's guidance α_c = 0.08·N (its convention, see the module docstring)."""

DEFAULT_SIMILARITY_CLIP = 0.9


def alpha_from_official(alpha_c: float) -> float:
    """The paper's α for the official code's α_c (α = 1/α_c)."""
    if not np.isfinite(alpha_c) or alpha_c <= 0:
        raise ValueError(f"alpha_c must be finite and > 0, got {alpha_c}")
    return 1.0 / alpha_c


def default_alpha(num_clients: int) -> float:
    """The paper's α that the official guidance α_c = 0.08·N gives for N clients."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    return alpha_from_official(OFFICIAL_ALPHA_PER_CLIENT * num_clients)


def model_similarity(
    updates: np.ndarray, clip_above: float | None = DEFAULT_SIMILARITY_CLIP
) -> np.ndarray:
    """Pairwise cosine similarity of the rows of ``updates`` (N×D, row i = θ_i − θ^0).

    Values above ``clip_above`` become 1 (the official code's rule: two models that similar
    count as fully shareable); None keeps the raw cosines. A zero row (a client that did not
    move, or sent zeros) has no direction: its similarity to every other client is 0 and to
    itself 1, so it neither attracts nor repels weight beyond its prior. The diagonal is
    always 1. To compare only the last layers (the paper's cheaper option), pass those
    columns.
    """
    x = _as_matrix(updates, "updates")
    norms = np.linalg.norm(x, axis=1)
    safe = np.where(norms > 0, norms, 1.0)
    unit = x / safe[:, None]  # zero rows stay zero, so their cosines come out 0
    sim = np.clip(unit @ unit.T, -1.0, 1.0)
    np.fill_diagonal(sim, 1.0)
    if clip_above is not None:
        sim[sim > clip_above] = 1.0
    return sim


def project_to_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex {w ≥ 0, Σ w = 1}.

    A 1-D ``v`` gives one projection; a 2-D ``v`` projects each row. Sort-based: with u the
    entries sorted descending, the support size ρ is the largest k with
    u_k > (Σ_{l≤k} u_l − 1)/k, the threshold is τ = (Σ_{l≤ρ} u_l − 1)/ρ, and w = max(v − τ, 0).
    """
    arr = np.asarray(v, dtype=np.float64)
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ValueError(f"expected a non-empty vector or matrix, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("cannot project a vector with non-finite entries")
    rows = np.atleast_2d(arr)
    u = -np.sort(-rows, axis=1)
    cumulative = np.cumsum(u, axis=1) - 1.0
    k = np.arange(1, rows.shape[1] + 1)
    # ρ = the largest k meeting the condition; k = 1 always does, so ρ ≥ 1.
    rho = np.max(np.where(u * k > cumulative, k, 0), axis=1)
    tau = cumulative[np.arange(rows.shape[0]), rho - 1] / rho
    w: np.ndarray = np.maximum(rows - tau[:, None], 0.0)
    return w[0] if arr.ndim == 1 else w


def graph_row_fast(prior: np.ndarray, similarity_row: np.ndarray, alpha: float) -> np.ndarray:
    """One client's row of W: the minimiser of ‖w − p‖² − α sᵀw on the simplex."""
    p, s = _row_inputs(prior, similarity_row, alpha)
    return project_to_simplex(p + 0.5 * alpha * s)


def graph_row_cvxpy(prior: np.ndarray, similarity_row: np.ndarray, alpha: float) -> np.ndarray:
    """The same row solved as a QP with CVXPY (the paper's solver; reference for tests)."""
    p, s = _row_inputs(prior, similarity_row, alpha)
    return CvxpyRowSolver(p).solve(alpha * s)


def collaboration_graph(
    similarity: np.ndarray, prior: np.ndarray, alpha: float, solver: Solver = "fast"
) -> np.ndarray:
    """The row-stochastic N×N collaboration matrix W, row i solving client i's problem.

    ``similarity`` is N×N (row i = s_i, diagonal 1), ``prior`` the length-N vector p. The
    fast path projects all rows at once; ``solver="cvxpy"`` compiles one parametrised QP and
    re-solves it per row.
    """
    sim = _as_matrix(similarity, "similarity")
    n = sim.shape[0]
    if sim.shape != (n, n):
        raise ValueError(f"similarity must be square, got shape {sim.shape}")
    p, _ = _row_inputs(prior, sim[0], alpha)
    if solver == "fast":
        return project_to_simplex(p[None, :] + 0.5 * alpha * sim)
    if solver == "cvxpy":
        rows = CvxpyRowSolver(p)
        return np.stack([rows.solve(alpha * sim[i]) for i in range(n)])
    raise ValueError(f"unknown solver {solver!r}; expected 'fast' or 'cvxpy'")


def personalized_aggregates(weights: np.ndarray, models: np.ndarray) -> np.ndarray:
    """θ̃_i = Σ_j W_ij θ_j for every client (row i of the result), the model sent to i."""
    w, x = _graph_and_models(weights, models)
    aggregates: np.ndarray = w @ x
    return aggregates


def normalized_aggregate(weights: np.ndarray, models: np.ndarray) -> np.ndarray:
    """θ̄_i = Σ_j W_ij θ_j/‖θ_j‖ for every client: the direction the regulariser pulls to.

    Client i's objective adds −(λ/2)⟨θ/‖θ‖, θ̄_i⟩ (paper Eq. 3). A zero model has no
    direction and contributes nothing.
    """
    w, x = _graph_and_models(weights, models)
    norms = np.linalg.norm(x, axis=1)
    unit = x / np.where(norms > 0, norms, 1.0)[:, None]
    return w @ unit


def poison(
    vector: np.ndarray,
    attack: Attack,
    rng: np.random.Generator,
    *,
    scale: float = 1.0,
    sigma: float = 1.0,
) -> np.ndarray:
    """A malicious client's upload in place of ``vector`` (a new array; the input is kept).

    The four model-poisoning attacks of the pFedGraph and iPFL experiments:

    * ``shuffle``: the same entries in a random order.
    * ``all_ones``: every entry 1 (the "same value" attack).
    * ``sign_flip``: −scale·θ.
    * ``gaussian``: fresh N(0, sigma²) entries replacing the weights.

    ``scale`` and ``sigma`` only affect their own attack. Only the two random attacks draw
    from ``rng``, so a seeded generator makes them reproducible.
    """
    x = np.asarray(vector)
    if attack == "shuffle":
        return rng.permutation(x.ravel()).reshape(x.shape)
    if attack == "all_ones":
        return np.ones_like(x)
    if attack == "sign_flip":
        if not np.isfinite(scale):
            raise ValueError(f"scale must be finite, got {scale}")
        return -scale * x
    if attack == "gaussian":
        if not np.isfinite(sigma) or sigma < 0:
            raise ValueError(f"sigma must be finite and >= 0, got {sigma}")
        dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
        return rng.normal(0.0, sigma, size=x.shape).astype(dtype, copy=False)
    raise ValueError(f"unknown attack {attack!r}; expected one of {ATTACKS}")


class CvxpyRowSolver:
    """One compiled QP, minimise ‖w − p‖² − cᵀw on the simplex, re-solved for each c = α s_i.

    CVXPY is imported here so the fast path does not need it. Clarabel (an interior-point
    solver shipped with CVXPY) is asked for tight tolerances so the result is a reference.
    """

    def __init__(self, prior: np.ndarray) -> None:
        import cvxpy as cp

        self._cp = cp
        self._w = cp.Variable(prior.shape[0])
        self._c = cp.Parameter(prior.shape[0])
        objective = cp.Minimize(cp.sum_squares(self._w - prior) - self._c @ self._w)
        self._problem = cp.Problem(objective, [self._w >= 0, cp.sum(self._w) == 1])

    def solve(self, linear: np.ndarray) -> np.ndarray:
        self._c.value = linear
        cp = self._cp
        if cp.CLARABEL in cp.installed_solvers():
            self._problem.solve(
                solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12
            )
        else:
            self._problem.solve()
        if self._w.value is None or self._problem.status not in ("optimal", "optimal_inaccurate"):
            raise RuntimeError(f"CVXPY could not solve the graph row: {self._problem.status}")
        # Round-off may leave tiny negatives; clip and renormalise onto the simplex.
        w = np.maximum(np.asarray(self._w.value, dtype=np.float64), 0.0)
        row: np.ndarray = w / w.sum()
        return row


def _as_matrix(values: np.ndarray, name: str) -> np.ndarray:
    return _check_matrix(np.asarray(values, dtype=np.float64), name)


def _check_matrix(x: np.ndarray, name: str) -> np.ndarray:
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} has non-finite entries")
    return x


def _row_inputs(
    prior: np.ndarray, similarity_row: np.ndarray, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(prior, dtype=np.float64)
    s = np.asarray(similarity_row, dtype=np.float64)
    if p.ndim != 1 or p.shape != s.shape or p.size == 0:
        raise ValueError(f"prior {p.shape} and similarity row {s.shape} must be equal 1-D")
    if not (np.all(np.isfinite(p)) and np.all(np.isfinite(s))):
        raise ValueError("prior and similarity must be finite")
    if not np.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be finite and >= 0, got {alpha}")
    return p, s


def _graph_and_models(weights: np.ndarray, models: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """W and the models as matrices; float32 models stay float32 (W is cast to match)."""
    w = _as_matrix(weights, "weights")
    x = np.asarray(models)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    x = _check_matrix(x, "models")
    if w.shape != (x.shape[0], x.shape[0]):
        raise ValueError(f"weights {w.shape} do not match {x.shape[0]} models")
    return w.astype(x.dtype, copy=False), x
