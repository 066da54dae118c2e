"""pFedGraph's server math: simplex projection, the graph QP (fast vs CVXPY), aggregates."""

from __future__ import annotations

import numpy as np
import pytest

from collabfl.strategies.pfedgraph import (
    ATTACKS,
    alpha_from_official,
    collaboration_graph,
    default_alpha,
    graph_row_cvxpy,
    graph_row_fast,
    model_similarity,
    normalized_aggregate,
    personalized_aggregates,
    poison,
    project_to_simplex,
)

TOL = 1e-9


def assert_on_simplex(w: np.ndarray) -> None:
    assert np.all(w >= 0)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-12)


def assert_projection_kkt(v: np.ndarray, w: np.ndarray) -> None:
    """w is the projection of v iff w = max(v − τ, 0) for one τ (KKT of min ‖w − v‖²)."""
    assert_on_simplex(w)
    support = w > 0
    taus = v[support] - w[support]
    tau = taus.mean()
    np.testing.assert_allclose(taus, tau, atol=1e-12)
    assert np.all(v[~support] <= tau + 1e-12)


def assert_qp_kkt(w: np.ndarray, prior: np.ndarray, s: np.ndarray, alpha: float) -> None:
    """KKT of min ‖w − p‖² − α sᵀw on the simplex, checked on the QP's own gradient.

    ∇ = 2(w − p) − α s; optimality: ∇_j + ν − μ_j = 0 with μ ≥ 0, μ_j w_j = 0, i.e. the
    gradient equals one value −ν on the support and is ≥ −ν off it.
    """
    assert_on_simplex(w)
    grad = 2.0 * (w - prior) - alpha * s
    support = w > 1e-12
    level = grad[support].mean()
    np.testing.assert_allclose(grad[support], level, atol=1e-8)
    assert np.all(grad[~support] >= level - 1e-8)


def random_instance(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    counts = rng.integers(1, 500, size=n).astype(float)
    sim = model_similarity(rng.normal(size=(n, 8)) + rng.normal(size=8))
    return sim, counts / counts.sum()


# --- projection -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50])
def test_projection_meets_kkt_on_random_vectors(size: int) -> None:
    rng = np.random.default_rng(size)
    for scale in (1e-3, 1.0, 100.0):
        v = rng.normal(size=size) * scale
        assert_projection_kkt(v, project_to_simplex(v))


def test_projection_handles_ties_and_points_already_on_the_simplex() -> None:
    for v in (np.full(5, 3.0), np.array([0.5, 0.5, 0.5, -1.0]), np.array([2.0, 2.0, 0.0])):
        assert_projection_kkt(v, project_to_simplex(v))
    np.testing.assert_allclose(project_to_simplex(np.full(4, 7.0)), np.full(4, 0.25))
    point = np.array([0.1, 0.6, 0.3, 0.0])
    np.testing.assert_allclose(project_to_simplex(point), point, atol=1e-15)


def test_projection_is_the_closest_simplex_point() -> None:
    rng = np.random.default_rng(1)
    v = rng.normal(size=6)
    w = project_to_simplex(v)
    others = rng.dirichlet(np.ones(6), size=2000)
    assert np.all(np.linalg.norm(others - v, axis=1) >= np.linalg.norm(w - v) - 1e-12)


def test_projection_of_a_matrix_projects_each_row() -> None:
    rng = np.random.default_rng(2)
    v = rng.normal(size=(20, 9))
    stacked = np.stack([project_to_simplex(row) for row in v])
    np.testing.assert_allclose(project_to_simplex(v), stacked, atol=1e-15)


def test_projection_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        project_to_simplex(np.array([]))
    with pytest.raises(ValueError):
        project_to_simplex(np.array([1.0, np.nan]))


# --- the graph QP ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", [2, 3, 5, 10, 25])
@pytest.mark.parametrize("alpha", [0.0, 0.1, 1.25, 10.0])
def test_fast_rows_agree_with_cvxpy(size: int, alpha: float) -> None:
    rng = np.random.default_rng(100 * size + int(alpha * 10))
    sim, prior = random_instance(rng, size)
    fast = collaboration_graph(sim, prior, alpha, solver="fast")
    reference = collaboration_graph(sim, prior, alpha, solver="cvxpy")
    np.testing.assert_allclose(fast, reference, atol=1e-6)
    for i in range(size):
        np.testing.assert_allclose(graph_row_fast(prior, sim[i], alpha), fast[i], atol=1e-15)
    np.testing.assert_allclose(graph_row_cvxpy(prior, sim[0], alpha), fast[0], atol=1e-6)


@pytest.mark.parametrize(
    "similarity",
    [
        np.ones((4, 4)),  # all equal
        np.full((4, 4), 0.3) + 0.7 * np.eye(4),  # all off-diagonal equal
        np.array([[1.0, 1.0, 0.2], [1.0, 1.0, 0.2], [0.2, 0.2, 1.0]]),  # ties inside a row
        np.array([[1.0, -1.0], [-1.0, 1.0]]),  # N = 2, opposite directions
    ],
)
@pytest.mark.parametrize("alpha", [0.5, 3.0])
def test_fast_agrees_with_cvxpy_on_degenerate_instances(
    similarity: np.ndarray, alpha: float
) -> None:
    n = similarity.shape[0]
    for prior in (np.full(n, 1.0 / n), np.arange(1, n + 1) / np.arange(1, n + 1).sum()):
        fast = collaboration_graph(similarity, prior, alpha)
        np.testing.assert_allclose(
            fast, collaboration_graph(similarity, prior, alpha, solver="cvxpy"), atol=1e-6
        )
        for i in range(n):
            assert_qp_kkt(fast[i], prior, similarity[i], alpha)


def test_rows_are_optimal_for_the_qp() -> None:
    rng = np.random.default_rng(7)
    for size in (2, 4, 9, 40):
        sim, prior = random_instance(rng, size)
        for alpha in (0.0, 0.3, 2.0, 50.0):
            w = collaboration_graph(sim, prior, alpha)
            for i in range(size):
                assert_qp_kkt(w[i], prior, sim[i], alpha)


def test_alpha_zero_gives_the_prior_and_no_similarity_gives_the_prior() -> None:
    rng = np.random.default_rng(3)
    sim, prior = random_instance(rng, 6)
    np.testing.assert_allclose(collaboration_graph(sim, prior, 0.0), np.tile(prior, (6, 1)))
    np.testing.assert_allclose(
        collaboration_graph(np.zeros((6, 6)), prior, 4.0), np.tile(prior, (6, 1)), atol=1e-15
    )


def test_identical_clients_get_identical_rows() -> None:
    rng = np.random.default_rng(4)
    updates = rng.normal(size=(6, 10))
    updates[3] = updates[1]  # clients 1 and 3: the same update
    prior = np.array([0.1, 0.2, 0.15, 0.2, 0.2, 0.15])  # and the same prior
    w = collaboration_graph(model_similarity(updates), prior, 1.5)
    np.testing.assert_array_equal(w[1], w[3])


def test_a_lone_client_keeps_more_weight_on_itself_as_alpha_grows() -> None:
    """Similarity 1 to itself, −1 to everyone else, uniform prior: self-weight rises to 1.

    By symmetry the others share one weight u, and w_00 − u = α while both are positive, so
    w_00 = (1 + (N − 1)α)/N until it reaches 1 at α = 1.
    """
    n = 6
    sim = np.ones((n, n))
    sim[0, 1:] = sim[1:, 0] = -1.0
    prior = np.full(n, 1.0 / n)
    alphas = np.array([0.0, 0.05, 0.1, 0.2, 0.5, 0.9, 1.0, 2.0, 5.0, 100.0])
    self_weight = np.array([collaboration_graph(sim, prior, a)[0, 0] for a in alphas])
    np.testing.assert_allclose(self_weight, np.minimum(1.0, (1 + (n - 1) * alphas) / n))
    assert np.all(np.diff(self_weight) >= 0)
    assert np.all(np.diff(self_weight[alphas < 1]) > 0)
    assert self_weight[-1] == 1.0


def test_graph_rejects_bad_input() -> None:
    sim, prior = random_instance(np.random.default_rng(5), 3)
    with pytest.raises(ValueError, match="alpha"):
        collaboration_graph(sim, prior, -1.0)
    with pytest.raises(ValueError):
        collaboration_graph(sim[:2], prior, 1.0)
    with pytest.raises(ValueError):
        collaboration_graph(sim, prior[:2], 1.0)
    with pytest.raises(ValueError, match="solver"):
        collaboration_graph(sim, prior, 1.0, solver="newton")  # type: ignore[arg-type]


# --- alpha conventions ----------------------------------------------------------------------


def test_official_alpha_convention_gives_the_same_rows() -> None:
    """Official objective α_c‖w‖² − (2α_c p + s)ᵀw has the paper's minimiser at α = 1/α_c."""
    import cvxpy as cp

    rng = np.random.default_rng(6)
    sim, prior = random_instance(rng, 5)
    for alpha_c in (0.4, 0.8, 4.0):
        w = cp.Variable(5)
        objective = alpha_c * cp.sum_squares(w) - (2 * alpha_c * prior + sim[2]) @ w
        cp.Problem(cp.Minimize(objective), [w >= 0, cp.sum(w) == 1]).solve(solver=cp.CLARABEL)
        fast = graph_row_fast(prior, sim[2], alpha_from_official(alpha_c))
        np.testing.assert_allclose(fast, w.value, atol=1e-6)
    assert default_alpha(10) == pytest.approx(1.0 / 0.8)
    with pytest.raises(ValueError):
        alpha_from_official(0.0)


# --- similarity -----------------------------------------------------------------------------


def test_similarity_is_cosine_with_clipping() -> None:
    updates = np.array([[1.0, 0.0], [1.0, 0.3], [0.0, 2.0], [-3.0, 0.0]])
    raw = model_similarity(updates, clip_above=None)
    expected_01 = 1.0 / np.hypot(1.0, 0.3)  # ≈ 0.958
    assert raw[0, 1] == pytest.approx(expected_01)
    assert raw[0, 2] == pytest.approx(0.0)
    assert raw[0, 3] == pytest.approx(-1.0)
    np.testing.assert_allclose(raw, raw.T)
    np.testing.assert_allclose(np.diag(raw), 1.0)
    clipped = model_similarity(updates)  # default clip 0.9
    assert clipped[0, 1] == 1.0 and clipped[1, 0] == 1.0
    assert clipped[1, 2] == pytest.approx(raw[1, 2])  # 0.287: kept
    assert model_similarity(updates, clip_above=0.99)[0, 1] == pytest.approx(expected_01)


def test_similarity_ignores_scale_and_handles_zero_updates() -> None:
    rng = np.random.default_rng(8)
    updates = rng.normal(size=(4, 6))
    scaled = updates * np.array([[1.0], [10.0], [0.01], [3.0]])
    np.testing.assert_allclose(model_similarity(updates), model_similarity(scaled), atol=1e-12)
    updates[2] = 0.0
    sim = model_similarity(updates)
    assert sim[2, 2] == 1.0
    np.testing.assert_array_equal(np.delete(sim[2], 2), 0.0)
    np.testing.assert_array_equal(np.delete(sim[:, 2], 2), 0.0)


# --- aggregates -----------------------------------------------------------------------------


def test_personalized_and_normalized_aggregates() -> None:
    rng = np.random.default_rng(9)
    models = rng.normal(size=(4, 5))
    w = collaboration_graph(model_similarity(models), np.full(4, 0.25), 1.0)
    np.testing.assert_allclose(personalized_aggregates(w, models), w @ models)
    np.testing.assert_allclose(personalized_aggregates(np.eye(4), models), models)
    units = models / np.linalg.norm(models, axis=1, keepdims=True)
    np.testing.assert_allclose(normalized_aggregate(w, models), w @ units)
    models[1] = 0.0  # no direction: contributes nothing
    expected = w @ np.where(np.arange(4)[:, None] == 1, 0.0, units)
    np.testing.assert_allclose(normalized_aggregate(w, models), expected)
    assert personalized_aggregates(w, models.astype(np.float32)).dtype == np.float32
    with pytest.raises(ValueError):
        personalized_aggregates(w[:3, :3], models)


# --- attacks --------------------------------------------------------------------------------


def test_attacks_change_the_vector_as_specified() -> None:
    theta = np.random.default_rng(10).normal(size=200)
    original = theta.copy()
    rng = np.random.default_rng(0)

    shuffled = poison(theta, "shuffle", rng)
    np.testing.assert_array_equal(np.sort(shuffled), np.sort(theta))
    assert not np.array_equal(shuffled, theta)

    np.testing.assert_array_equal(poison(theta, "all_ones", rng), np.ones(200))
    np.testing.assert_array_equal(poison(theta, "sign_flip", rng), -theta)
    np.testing.assert_allclose(poison(theta, "sign_flip", rng, scale=4.0), -4.0 * theta)

    noise = poison(np.zeros(20000), "gaussian", rng, sigma=0.5)
    assert noise.shape == (20000,)
    assert abs(noise.mean()) < 0.02 and noise.std() == pytest.approx(0.5, rel=0.03)
    np.testing.assert_array_equal(theta, original)  # the input is never modified


@pytest.mark.parametrize("attack", ATTACKS)
def test_attacks_are_deterministic_in_the_seed(attack: str) -> None:
    theta = np.random.default_rng(11).normal(size=(10, 7)).astype(np.float32)
    first = poison(theta, attack, np.random.default_rng(42))  # type: ignore[arg-type]
    again = poison(theta, attack, np.random.default_rng(42))  # type: ignore[arg-type]
    other = poison(theta, attack, np.random.default_rng(43))  # type: ignore[arg-type]
    np.testing.assert_array_equal(first, again)
    assert first.shape == theta.shape and first.dtype == theta.dtype
    if attack in ("shuffle", "gaussian"):
        assert not np.array_equal(first, other)


def test_unknown_attack_and_bad_options_raise() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="unknown attack"):
        poison(np.ones(3), "zeros", rng)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sigma"):
        poison(np.ones(3), "gaussian", rng, sigma=-1.0)
