"""iPFL's market: profiles, gains, thresholds, the import graph, payments and incentives."""

from __future__ import annotations

import math

import numpy as np
import pytest

from collabfl.strategies.ipfl import (
    ClientProfile,
    collaboration_gain,
    cosine_distance_grad,
    cosine_distance_matrix,
    gain,
    import_prices,
    marginal_gain,
    market_graph,
    payments,
    proximal_center,
    proximal_centers,
    squared_l2_distance_matrix,
    squared_l2_grad,
    threshold,
    utilities,
)

pytestmark = pytest.mark.slow

NUM_MARKETS = 150
TOL = 1e-9


def random_market(
    rng: np.random.Generator,
) -> tuple[list[ClientProfile], np.ndarray, float]:
    """A seeded market of 2–12 traders, buyers and sellers with clustered model updates."""
    size = int(rng.integers(2, 13))
    profiles = []
    for _ in range(size):
        role = rng.choice(["trader", "trader", "buyer", "seller"])
        n = float(rng.integers(20, 3000))
        eagerness = 0.0 if role == "seller" else float(rng.uniform(1e2, 1e5))
        if role == "buyer":
            cost = math.inf
        elif role == "seller" and rng.random() < 0.5:
            cost = 0.0
        else:
            cost = float(rng.uniform(0.0, 5.0))
        profiles.append(ClientProfile(n, cost, eagerness))
    centers = rng.normal(size=(3, 16))
    updates = centers[rng.integers(0, 3, size)]
    updates = updates + rng.normal(scale=rng.uniform(0.1, 2.0), size=(size, 16))
    lam = float(rng.choice([0.0, 0.1, 1.0, 5.0]))
    return profiles, cosine_distance_matrix(updates), lam


def honest(n: float = 200.0, cost: float = 1.0, eagerness: float = 2e4) -> ClientProfile:
    return ClientProfile(n, cost, eagerness)


# --- profiles -------------------------------------------------------------------------------


def test_roles_are_derived_from_the_profile() -> None:
    assert ClientProfile(100, 1.0, 5.0).role == "trader"
    assert ClientProfile(100, 0.0, 5.0).role == "trader"
    assert ClientProfile(100, math.inf, 5.0).role == "buyer"
    assert ClientProfile(100, 0.0, 0.0).role == "seller"
    assert ClientProfile(100, 0.0, 0.0, role="attacker").role == "attacker"
    assert ClientProfile(100, 2.0, 3.0, role="attacker").role == "attacker"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n": 0}, "n"),
        ({"n": -5}, "n"),
        ({"n": math.inf}, "n"),
        ({"n": math.nan}, "n"),
        ({"cost": -1.0}, "cost"),
        ({"cost": math.nan}, "cost"),
        ({"cost": -math.inf}, "cost"),
        ({"eagerness": -1.0}, "eagerness"),
        ({"eagerness": math.inf}, "eagerness"),
        ({"eagerness": math.nan}, "eagerness"),
    ],
)
def test_invalid_profiles_name_the_field(kwargs: dict[str, float], field: str) -> None:
    values = {"n": 100.0, "cost": 1.0, "eagerness": 10.0, **kwargs}
    with pytest.raises(ValueError, match=f"^{field} "):
        ClientProfile(**values)


def test_a_given_role_must_match_the_numbers() -> None:
    with pytest.raises(ValueError, match="role"):
        ClientProfile(100, 1.0, 5.0, role="buyer")
    with pytest.raises(ValueError, match="role"):
        ClientProfile(100, 1.0, 0.0, role="trader")
    with pytest.raises(ValueError, match="role"):
        ClientProfile(100, 1.0, 0.0, role="banker")  # type: ignore[arg-type]


# --- gains ----------------------------------------------------------------------------------


def test_gain_formula_and_shape() -> None:
    p = ClientProfile(200, 1.0, 2e4)
    assert gain(p, 0) == 0.0
    assert gain(p, 1000) == pytest.approx(10 - math.sqrt(2e4 / 1200), rel=1e-14)
    xs = np.linspace(0, 1e5, 1001)
    g = gain(p, xs)
    assert np.all(np.diff(g) > 0) and np.all(np.diff(g, 2) < 0)  # increasing, concave
    assert g[-1] < math.sqrt(2e4 / 200)
    assert gain(ClientProfile(200, 1.0, 0.0), 1e6) == 0.0
    row = np.array([0, 1, 1, 0])
    n = np.array([200.0, 300.0, 500.0, 1000.0])
    assert collaboration_gain(p, row, n) == pytest.approx(gain(p, 800))


def test_marginal_gain_matches_the_plain_difference_and_stays_accurate() -> None:
    p = ClientProfile(150, 1.0, 3e4)
    for total, m in [(300.0, 100.0), (5000.0, 250.0), (100.0, 100.0)]:
        naive = gain(p, total) - gain(p, total - m)
        assert marginal_gain(p, total, m) == pytest.approx(naive, rel=1e-12)
    # Far out the plain difference cancels to nothing; the stable form keeps the asymptote
    # sqrt(K)·m / (2 u^1.5).
    total, m = 1e14, 1.0
    expected = math.sqrt(3e4) * m / (2 * (150 + total) ** 1.5)
    assert marginal_gain(p, total, m) == pytest.approx(expected, rel=1e-6)


# --- distances ------------------------------------------------------------------------------


def test_cosine_distance_matrix() -> None:
    updates = np.array([[1.0, 0.0], [0.0, 3.0], [-2.0, 0.0], [0.0, 0.0]])
    d = cosine_distance_matrix(updates)
    np.testing.assert_allclose(np.diag(d), 0.0)
    assert d[0, 1] == pytest.approx(1.0) and d[0, 2] == pytest.approx(2.0)
    np.testing.assert_allclose(np.delete(d[3], 3), 1.0)  # a zero update: cosine 0
    np.testing.assert_allclose(d, d.T)
    assert np.all((d >= 0) & (d <= 2))


def test_squared_l2_distance_matrix() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 7)) + 1e4  # far from the origin: the Gram trick would cancel
    x[3] = x[1] + 1e-6
    d = squared_l2_distance_matrix(x)
    naive = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(d, naive, rtol=1e-12)
    assert d[1, 3] == pytest.approx(7e-12, rel=1e-3)
    np.testing.assert_array_equal(np.diag(d), 0.0)


# --- thresholds -----------------------------------------------------------------------------


def brute_force_crossings(
    profile: ClientProfile, n_j: float, b_j: float, upper: float
) -> tuple[np.ndarray, np.ndarray]:
    """Grid T ∈ [n_j, upper] (log-spaced) and the cells where h(T) − b_j changes sign."""
    grid = n_j + np.concatenate([[0.0], np.geomspace(1e-6, upper - n_j, 200_000)])
    excess = marginal_gain(profile, grid, np.full(grid.shape, n_j)) - b_j
    return grid, np.flatnonzero(np.sign(excess[:-1]) != np.sign(excess[1:]))


def test_thresholds_agree_with_a_brute_force_grid() -> None:
    rng = np.random.default_rng(1)
    checked_roots = 0
    for _ in range(60):
        p = ClientProfile(float(rng.integers(10, 5000)), 1.0, float(rng.uniform(10, 1e5)))
        n_j = float(rng.integers(1, 5000))
        alone = float(gain(p, n_j))
        ratio = rng.choice([rng.uniform(0.001, 0.999), 1.0, 1.5, 0.0], p=[0.7, 0.1, 0.1, 0.1])
        b_j = alone * float(ratio)
        t = threshold(p, n_j, b_j)
        grid, crossings = brute_force_crossings(p, n_j, b_j, upper=1e12)
        if 0 < b_j < alone:
            assert len(crossings) == 1  # exactly one root, and ours lies in its grid cell
            k = crossings[0]
            assert grid[k] * (1 - 1e-12) <= t <= grid[k + 1] * (1 + 1e-12)
            assert marginal_gain(p, t, n_j) == pytest.approx(b_j, rel=1e-9)
            checked_roots += 1
        elif b_j <= 0:
            assert t == math.inf
        else:
            assert t == 0.0
            assert len(crossings) == 0 or (b_j == alone and crossings.tolist() == [0])
    assert checked_roots > 20


def test_threshold_edge_cases() -> None:
    p = ClientProfile(200, 1.0, 2e4)
    assert threshold(p, 200, math.inf) == 0.0  # a peer with c = ∞
    assert threshold(p, 200, float(gain(p, 200))) == 0.0  # worth its price only at T = n_j
    assert threshold(ClientProfile(200, 1.0, 0.0), 200, 0.0) == 0.0  # K = 0 wants nothing
    # The sanity market's threshold: sqrt(2e4/T) − sqrt(2e4/(T + 200)) = 1.
    t = threshold(p, 200, 1.0)
    assert math.sqrt(2e4 / t) - math.sqrt(2e4 / (t + 200)) == pytest.approx(1.0, rel=1e-12)


# --- the graph ------------------------------------------------------------------------------


def test_graph_follows_the_greedy_on_a_hand_checked_market() -> None:
    """Six equal clients, λ-term 0: T ≈ 491.9 for everyone, so each imports 200 + 200 < T
    but not a third (600 ≥ T); ties go to the lowest indices."""
    profiles = [honest() for _ in range(6)]
    a = market_graph(profiles, np.zeros((6, 6)), 0.0)
    expected = np.zeros((6, 6), dtype=np.int8)
    expected[0, [1, 2]] = expected[1, [0, 2]] = 1
    expected[2:, [0, 1]] = 1
    np.testing.assert_array_equal(a, expected)


def test_graph_is_binary_without_self_imports_and_respects_thresholds() -> None:
    rng = np.random.default_rng(2)
    for _ in range(NUM_MARKETS):
        profiles, d, lam = random_market(rng)
        a = market_graph(profiles, d, lam)
        assert set(np.unique(a)) <= {0, 1}
        assert not np.any(np.diag(a))
        n = np.array([p.n for p in profiles])
        for i, p in enumerate(profiles):
            peers = np.flatnonzero(a[i])
            if p.eagerness == 0:
                assert peers.size == 0
                continue
            limits = np.array(
                [threshold(p, n[j], b) for j, b in enumerate(import_prices(i, profiles, d, lam))]
            )
            total = n[peers].sum()
            assert np.all(total < limits[peers])  # every import still pays at the final size


def test_a_seller_imports_nothing_and_a_buyer_is_never_imported() -> None:
    rng = np.random.default_rng(3)
    for _ in range(NUM_MARKETS):
        profiles, d, lam = random_market(rng)
        a = market_graph(profiles, d, lam)
        for i, p in enumerate(profiles):
            if p.role == "seller":
                assert not a[i].any()
            if p.role == "buyer":
                assert not a[:, i].any()


def test_free_peers_at_distance_zero_are_always_worth_importing() -> None:
    """Our reading of a rootless threshold with price 0: T = ∞ (the paper would say 0)."""
    profiles = [honest(cost=1.0), ClientProfile(300, 0.0, 0.0), ClientProfile(300, 0.0, 0.0)]
    a = market_graph(profiles, np.zeros((3, 3)), 0.0)
    np.testing.assert_array_equal(a[0], [0, 1, 1])


def test_an_absurdly_large_reported_n_gets_no_importers() -> None:
    rng = np.random.default_rng(4)
    for _ in range(50):
        profiles, d, _ = random_market(rng)
        if len(profiles) < 3:
            continue
        liar = int(rng.integers(len(profiles)))
        p = profiles[liar]
        profiles[liar] = ClientProfile(1e12, p.cost, p.eagerness)
        a = market_graph(profiles, np.maximum(d, 1e-3), lam=0.5)
        assert not a[:, liar].any()


def test_a_client_far_from_everyone_ends_with_no_importers() -> None:
    """A random-weights attacker: its distance to every honest model is huge."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        profiles, d, _ = random_market(rng)
        attacker = len(profiles)
        profiles.append(ClientProfile(500, 0.0, 0.0, role="attacker"))
        far = np.full((attacker + 1, attacker + 1), 1e6)
        far[:attacker, :attacker] = d
        np.fill_diagonal(far, 0.0)
        assert not market_graph(profiles, far, lam=1.0)[:, attacker].any()


def test_a_random_direction_attacker_is_isolated_while_honest_clients_trade() -> None:
    """Cosine distances: honest updates share a direction (d ≈ 0.01–0.1), the attacker's
    random update is orthogonal-ish (d ≈ 1); with λ = 10 its price beats every gain."""
    rng = np.random.default_rng(6)
    direction = rng.normal(size=1000)
    updates = direction + 0.2 * rng.normal(size=(8, 1000))
    updates[7] = rng.normal(size=1000) * 5.0
    d = cosine_distance_matrix(updates)
    profiles = [honest(cost=0.5) for _ in range(7)] + [
        ClientProfile(200, 0.0, 0.0, role="attacker")
    ]
    a = market_graph(profiles, d, lam=10.0)
    assert not a[:, 7].any()
    assert a[:7, :7].sum(axis=1).min() >= 1


# --- payments and utilities -----------------------------------------------------------------


def test_payments_balance_and_live_on_edges() -> None:
    rng = np.random.default_rng(7)
    for _ in range(NUM_MARKETS):
        profiles, d, lam = random_market(rng)
        a = market_graph(profiles, d, lam)
        r, pay = payments(a, profiles, d, lam)
        assert abs(pay.sum()) <= TOL
        assert np.all(r[a == 0] == 0)
        np.testing.assert_allclose(pay, r.sum(axis=1) - r.sum(axis=0))
        cost = np.array([p.cost for p in profiles])
        rows, cols = np.nonzero(a)
        assert np.all(r[rows, cols] > cost[cols])  # every seller is paid more than its cost


def test_payment_is_the_marginal_gain_less_the_distance_discount() -> None:
    profiles = [ClientProfile(100, 0.5, 1e4), ClientProfile(300, 0.5, 0.0)]
    d = np.array([[0.0, 0.2], [0.2, 0.0]])
    a = np.array([[0, 1], [0, 0]])
    r, pay = payments(a, profiles, d, lam=2.0)
    expected = float(gain(profiles[0], 300)) - 2.0 * (300 / 100) * 0.2
    assert r[0, 1] == pytest.approx(expected)
    np.testing.assert_allclose(pay, [expected, -expected])
    u = utilities(a, profiles, d, lam=2.0)
    np.testing.assert_allclose(u, [2.0 * 3 * 0.2, expected - 0.5])


def test_individual_rationality_for_honest_clients() -> None:
    rng = np.random.default_rng(8)
    worst = math.inf
    for _ in range(NUM_MARKETS * 2):
        profiles, d, lam = random_market(rng)
        u = utilities(market_graph(profiles, d, lam), profiles, d, lam)
        worst = min(worst, float(u.min()))
        assert np.all(u >= -TOL)
    assert worst >= -TOL


def test_over_reporting_cost_never_raises_the_liars_utility() -> None:
    """Theorem 2: the graph is built from the lie, the utility scored at the true cost."""
    rng = np.random.default_rng(9)
    lies = 0
    for _ in range(100):
        profiles, d, lam = random_market(rng)
        truthful = utilities(market_graph(profiles, d, lam), profiles, d, lam)
        for i, p in enumerate(profiles):
            if not math.isfinite(p.cost):
                continue
            for reported in (p.cost * 1.5, p.cost + 0.3, p.cost * 10 + 1, math.inf):
                told = list(profiles)
                told[i] = ClientProfile(p.n, reported, p.eagerness)
                scored = utilities(market_graph(told, d, lam), profiles, d, lam)
                assert scored[i] <= truthful[i] + TOL
                lies += 1
    assert lies > 300


def test_utility_counts_sharing_cost_per_importer_and_none_without_importers() -> None:
    profiles = [honest(), honest(), ClientProfile(200, math.inf, 2e4)]
    a = np.array([[0, 1, 0], [1, 0, 0], [1, 1, 0]])
    u = utilities(a, profiles, None, 0.0, with_payments=False)
    np.testing.assert_allclose(u[:2], float(gain(honest(), 200)) - 2.0)
    assert u[2] == pytest.approx(float(gain(honest(), 400)))  # c = ∞ but nobody imports it


def test_sanity_figure_full_graph_for_fifty_rounds() -> None:
    """Six clients, n = 200, K = 2e4, c = 1, λ-term 0, everyone imports the other five.

    Per round G = g(1000) = 10 − sqrt(2e4/1200) = 5.9175171, minus 5 importers × 1 = 0.9175171;
    over 50 rounds 45.8758548, which rounds to 45.88 (45.87 would be truncation, not
    rounding). Payments cancel in the mean, so it is 45.88 with them too.
    """
    profiles = [honest() for _ in range(6)]
    full = np.ones((6, 6), dtype=int) - np.eye(6, dtype=int)
    per_round = utilities(full, profiles, None, 0.0, with_payments=False)
    total = 50 * per_round
    assert per_round[0] == pytest.approx(10 - math.sqrt(2e4 / 1200) - 5, rel=1e-14)
    assert total.mean() == pytest.approx(45.8758548, abs=1e-7)
    assert round(float(total.mean()), 2) == 45.88
    with_payments = 50 * utilities(full, profiles, np.zeros((6, 6)), 0.0)
    assert round(float(with_payments.mean()), 2) == 45.88


def test_market_functions_reject_bad_input() -> None:
    profiles = [honest(), honest()]
    with pytest.raises(ValueError, match="lam"):
        market_graph(profiles, np.zeros((2, 2)), -1.0)
    with pytest.raises(ValueError, match="distances"):
        market_graph(profiles, np.full((2, 2), -0.5), 1.0)
    with pytest.raises(ValueError, match="distances"):
        market_graph(profiles, np.zeros((3, 3)), 1.0)
    with pytest.raises(ValueError, match="diagonal"):
        payments(np.eye(2, dtype=int), profiles, np.zeros((2, 2)), 0.0)
    with pytest.raises(ValueError, match="0 or 1"):
        utilities(np.array([[0, 2], [0, 0]]), profiles, None, 0.0)


# --- proximal centre ------------------------------------------------------------------------


def test_cosine_distance_grad_matches_finite_differences() -> None:
    rng = np.random.default_rng(10)
    x, ys = rng.normal(size=6), rng.normal(size=(3, 6))

    def dist(v: np.ndarray, y: np.ndarray) -> float:
        return 1 - v @ y / (np.linalg.norm(v) * np.linalg.norm(y))

    grad = cosine_distance_grad(x, ys)
    h = 1e-6
    for k, y in enumerate(ys):
        numeric = [(dist(x + h * e, y) - dist(x - h * e, y)) / (2 * h) for e in np.eye(6)]
        np.testing.assert_allclose(grad[k], numeric, atol=1e-8)
    np.testing.assert_allclose(grad @ x, 0.0, atol=1e-12)  # scale-invariant: ⟂ x
    ys[1] = 0.0
    assert not cosine_distance_grad(x, ys)[1].any()
    assert not cosine_distance_grad(np.zeros(6), ys).any()


def test_proximal_center_with_squared_l2() -> None:
    models = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, -1.0]])
    n = np.array([100.0, 200.0, 50.0])
    a = np.array([[0, 1, 1], [0, 0, 0], [1, 0, 0]])
    centre = proximal_center(0, models, a, n, 0.1, squared_l2_grad)
    step = (0.1 / 100) * (200 * 2 * (models[0] - models[1]) + 50 * 2 * (models[0] - models[2]))
    np.testing.assert_allclose(centre, models[0] - step)
    np.testing.assert_array_equal(proximal_center(1, models, a, n, 0.1, squared_l2_grad), models[1])
    shifted = proximal_center(0, models, a, n, 0.1, squared_l2_grad, origin=np.array([5.0, 5.0]))
    np.testing.assert_allclose(shifted, centre)  # ‖·‖² of differences ignores the origin
    all_centres = proximal_centers(models, a, n, 0.1, squared_l2_grad)
    np.testing.assert_allclose(all_centres[0], centre)


def test_proximal_center_with_cosine_distance_on_updates() -> None:
    rng = np.random.default_rng(11)
    origin = rng.normal(size=5)
    models = origin + rng.normal(size=(3, 5))
    n = np.array([100.0, 300.0, 200.0])
    a = np.array([[0, 1, 1], [1, 0, 0], [0, 0, 0]])
    centre = proximal_center(0, models, a, n, 0.5, cosine_distance_grad, origin=origin)
    updates = models - origin
    grads = cosine_distance_grad(updates[0], updates[[1, 2]])
    np.testing.assert_allclose(centre, models[0] - (0.5 / 100) * (n[[1, 2]] @ grads))

    # A small step towards the peers lowers the weighted cosine distance to them.
    def weighted(v: np.ndarray) -> float:
        u = v - origin
        cos = updates[[1, 2]] @ u / (np.linalg.norm(updates[[1, 2]], axis=1) * np.linalg.norm(u))
        return float(n[[1, 2]] @ (1 - cos))

    small = proximal_center(0, models, a, n, 1e-3, cosine_distance_grad, origin=origin)
    assert weighted(small) < weighted(models[0])
