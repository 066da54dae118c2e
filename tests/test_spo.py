"""SPO: the Pareto hypernetwork, the clipped d search, oracle checks, and the paper's
synthetic linear-regression outcome (Cui et al. 2022, Table 1)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pytest
import torch

from collabfl.strategies.equilibrium import collaboration_equilibrium
from collabfl.strategies.spo import (
    OracleError,
    ParetoHypernetwork,
    SpoSettings,
    clip_to_simplex,
    search_directions,
    spo_directions,
    spo_estimator,
    start_rays,
    train_hypernetwork,
)
from tests.support.spo_oracles import InMemoryOracle, linear_regression_oracle
from tests.support.synthetic import NUM_CLIENTS, SyntheticRegression, make_synthetic_regression

pytestmark = pytest.mark.slow

QUICK = SpoSettings(hidden=16, hypernet_steps=30, search_steps=10)


def oracle_for(data: SyntheticRegression) -> InMemoryOracle:
    return linear_regression_oracle({c: data.client_arrays(c) for c in range(data.num_clients)})


@pytest.fixture(scope="module")
def small() -> SyntheticRegression:
    return make_synthetic_regression(0.1, 120, seed=3, dim=4)


def test_synthetic_data_layout_and_seed():
    data = make_synthetic_regression(0.1, 600, seed=1)
    assert data.num_clients == NUM_CLIENTS and data.dim == 20
    assert [len(s) for s in (data.train[0], data.val[0], data.test[0])] == [500, 100, 300]
    assert data.train[0].x.dtype == np.float32 and data.train[0].y.dtype == np.float32
    # Clients 3–5 regress on the flipped task: their true weights point the other way.
    assert np.all(data.weights[:3] @ data.weights[3:].T < 0)
    again = make_synthetic_regression(0.1, 600, seed=1)
    assert np.array_equal(again.val[4].y, data.val[4].y)
    assert not np.array_equal(make_synthetic_regression(0.1, 600, seed=2).val[4].y, data.val[4].y)
    with pytest.raises(ValueError, match="samples"):
        make_synthetic_regression(0.1, 5, seed=0)
    with pytest.raises(ValueError, match="rho"):
        make_synthetic_regression(-1.0, 600, seed=0)
    with pytest.raises(ValueError, match="split"):
        data.split(0, "holdout")


def test_hypernetwork_output_shape():
    net = ParetoHypernetwork(num_clients=4, numel=7, hidden=16)
    assert net(torch.full((4,), 0.25)).shape == (7,)
    assert net(torch.rand(3, 4)).shape == (3, 7)


def test_hypernetwork_begins_near_its_start_model():
    torch.manual_seed(0)
    start = torch.randn(7) * 5
    net = ParetoHypernetwork(num_clients=4, numel=7, hidden=16, start=start)
    for d in (torch.full((4,), 0.25), torch.tensor([1.0, 0, 0, 0])):
        torch.testing.assert_close(net(d).detach(), start, rtol=0, atol=0.05)
    with pytest.raises(ValueError, match="start model has shape"):
        ParetoHypernetwork(num_clients=4, numel=7, hidden=16, start=torch.zeros(6))


def test_clip_keeps_rows_on_the_clipped_simplex():
    floor = 1 / 12
    raw = torch.tensor([[5.0, -3.0, 0.2, 0.0], [1e-9, 1e-9, 1e-9, 2.0], [0.25] * 4])
    d = clip_to_simplex(raw, floor)
    assert torch.allclose(d.sum(dim=1), torch.ones(3))
    ratio = d.min(dim=1).values / d.max(dim=1).values
    assert torch.all(ratio >= floor - 1e-7)  # clipping to [floor, 1] bounds every ratio
    assert torch.allclose(d[2], torch.full((4,), 0.25))


def test_upper_clip_caps_then_renormalises():
    floor, ceiling = 1 / 9, 8 / 9  # three clients: [1/(3n), 1 − 1/(3n)]
    raw = torch.tensor([[-1.0, -1.0, 3.0], [0.5, 0.3, 0.2], [2.0, 2.0, 0.0]])
    d = clip_to_simplex(raw, floor, ceiling)
    # Row 0 clips to (1/9, 1/9, 8/9), which sums to 10/9: renormalised to (0.1, 0.1, 0.8).
    torch.testing.assert_close(d[0], torch.tensor([0.1, 0.1, 0.8]))
    torch.testing.assert_close(d[1], raw[1])  # inside the box and on the simplex: unchanged
    # Row 2 clips to (8/9, 8/9, 1/9) and renormalises to (8/17, 8/17, 1/17).
    torch.testing.assert_close(d[2], torch.tensor([8 / 17, 8 / 17, 1 / 17]))
    # Without the ceiling (Eq. 24): (1/9, 1/9, 1) renormalised, the large weight keeps more.
    torch.testing.assert_close(clip_to_simplex(raw, floor)[0], torch.tensor([1.0, 1.0, 9.0]) / 11)


def test_official_settings_take_the_official_code_values():
    official = SpoSettings.official()
    assert (official.start_ray, official.upper_clip, official.linear) == ("last_ray", True, True)
    assert official.search_steps == 200 and official.search_lr == 0.01
    assert SpoSettings.official(search_steps=5).search_steps == 5
    ours = SpoSettings()
    assert (ours.start_ray, ours.upper_clip, ours.linear) == ("uniform", False, False)
    with pytest.raises(ValueError, match="start_ray"):
        SpoSettings(start_ray="middle")  # type: ignore[arg-type]


def test_linear_hypernetwork_is_affine_in_d():
    torch.manual_seed(0)
    a, b = torch.tensor([0.7, 0.1, 0.1, 0.1]), torch.tensor([0.1, 0.2, 0.3, 0.4])
    linear = ParetoHypernetwork(num_clients=4, numel=7, hidden=16, linear=True)
    assert not any(isinstance(m, torch.nn.ReLU) for m in linear.modules())
    with torch.no_grad():
        torch.testing.assert_close(linear(0.3 * a + 0.7 * b), 0.3 * linear(a) + 0.7 * linear(b))
        ours = ParetoHypernetwork(num_clients=4, numel=7, hidden=16)
        assert not torch.allclose(ours(0.3 * a + 0.7 * b), 0.3 * ours(a) + 0.7 * ours(b))


def test_search_starts_from_the_last_training_ray(small):
    oracle, clients = oracle_for(small), [0, 2, 3, 5]
    hypernet = train_hypernetwork(oracle, clients, small.dim + 1, QUICK, np.random.default_rng(0))
    assert hypernet.last_ray is not None and math.isclose(float(hypernet.last_ray.sum()), 1.0)
    starts = start_rays(hypernet, 4, "last_ray")
    assert starts.shape == (4, 4) and all(torch.equal(row, hypernet.last_ray) for row in starts)
    torch.testing.assert_close(start_rays(hypernet, 4, "uniform"), torch.full((4, 4), 0.25))
    # No search step: each target's d is its start ray, clipped into the box.
    still = SpoSettings.official(search_steps=1, search_lr=1e-12)
    directions = search_directions(oracle, hypernet, clients, small.dim + 1, still)
    expected = clip_to_simplex(hypernet.last_ray, 1 / 12, 11 / 12)
    for weights in directions.values():
        assert list(weights.values()) == pytest.approx(expected.tolist(), abs=1e-6)
    with pytest.raises(ValueError, match="last_ray"):
        start_rays(ParetoHypernetwork(4, 7, 16), 4, "last_ray")


def test_search_stays_on_the_clipped_simplex(small):
    oracle, clients = oracle_for(small), [0, 2, 3, 5]
    hypernet = train_hypernetwork(oracle, clients, small.dim + 1, QUICK, np.random.default_rng(0))
    settings = SpoSettings(hidden=16, search_steps=40, search_lr=1.0)  # big steps hit the clip
    directions = search_directions(oracle, hypernet, clients, small.dim + 1, settings)
    floor = 1 / (3 * len(clients))
    assert sorted(directions) == clients
    for weights in directions.values():
        assert sorted(weights) == clients
        assert math.isclose(sum(weights.values()), 1.0, rel_tol=1e-6)
        assert min(weights.values()) / max(weights.values()) >= floor - 1e-6


def test_in_memory_oracle_gradient_matches_the_closed_form(small):
    oracle = oracle_for(small)
    theta = torch.randn(small.dim + 1)
    (loss, grad), *_ = oracle.loss_and_grad({2: theta}, "val").values()
    x = np.c_[small.val[2].x, np.ones(len(small.val[2]))].astype(np.float64)
    residual = x @ theta.double().numpy() - small.val[2].y
    assert loss == pytest.approx(np.mean(residual**2), rel=1e-4)
    assert np.allclose(grad.numpy(), 2 * x.T @ residual / len(x), rtol=1e-4, atol=1e-4)
    assert oracle.calls == 1
    with pytest.raises(ValueError, match="split"):
        oracle.loss_and_grad({2: theta}, "test")


@pytest.mark.parametrize(
    "settings", [SpoSettings(), SpoSettings.official()], ids=["ours", "official"]
)
@pytest.mark.parametrize(
    ("rho", "samples", "expected"),
    [
        (0.1, 2000, [{0, 1, 2}, {3, 4, 5}]),
        (1.0, 20000, [{c} for c in range(NUM_CLIENTS)]),
    ],
)
def test_paper_synthetic_equilibrium(rho, samples, expected, settings):
    data = make_synthetic_regression(rho, samples, seed=0)
    estimator = spo_estimator(oracle_for(data), data.dim + 1, settings, seed=0)
    assert collaboration_equilibrium(range(NUM_CLIENTS), estimator) == expected


def test_deterministic_for_a_seed(small):
    def run(seed: int) -> dict[int, dict[int, float]]:
        return spo_directions(oracle_for(small), small.dim + 1, QUICK, seed)(frozenset(range(6)))

    torch.manual_seed(1)
    before = torch.random.get_rng_state()
    first = run(0)
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's stream is untouched
    torch.manual_seed(99)  # and plays no part
    assert run(0) == first
    assert run(1) != first


def test_the_multi_tensor_adam_gives_the_per_tensor_bits(small, monkeypatch):
    """train_hypernetwork asks Adam for its multi-tensor (foreach) update, faster on the CPU;
    a torch whose foreach path rounds differently would change every SPO result."""
    clients = list(range(small.num_clients))

    def trained() -> list[torch.Tensor]:
        with torch.random.fork_rng():
            torch.manual_seed(0)  # the hypernetwork's initial weights
            rng = np.random.default_rng(0)
            hypernet = train_hypernetwork(oracle_for(small), clients, small.dim + 1, QUICK, rng)
        return [p.detach().clone() for p in hypernet.parameters()]

    multi = trained()
    per_tensor = torch.optim.Adam

    def single(*args, **kwargs):  # what torch picks on the CPU when not asked
        return per_tensor(*args, **{**kwargs, "foreach": False})

    monkeypatch.setattr(torch.optim, "Adam", single)
    assert all(torch.equal(a, b) for a, b in zip(multi, trained(), strict=True))


def test_each_remaining_set_gets_its_own_hypernetwork(small):
    class Recording(InMemoryOracle):
        def __init__(self, losses) -> None:
            super().__init__(losses)
            self.sets: list[frozenset[int]] = []

        def loss_and_grad(self, models, split):
            self.sets.append(frozenset(models))
            return super().loss_and_grad(models, split)

    base = oracle_for(small)
    oracle = Recording(base.losses)
    estimate = spo_estimator(oracle, small.dim + 1, QUICK, seed=0)
    ocs = estimate(frozenset({1, 4, 5}))
    assert set(ocs) == {1, 4, 5} and all(i in s and s <= {1, 4, 5} for i, s in ocs.items())
    assert set(oracle.sets) == {frozenset({1, 4, 5})}
    assert len(oracle.sets) == QUICK.hypernet_steps + QUICK.search_steps
    assert estimate(frozenset({2})) == {2: frozenset({2})}  # alone: nothing to learn
    assert len(oracle.sets) == QUICK.hypernet_steps + QUICK.search_steps


class Tampered:
    """Answers like the real oracle, then spoils one client's reply."""

    def __init__(self, inner: InMemoryOracle, spoil) -> None:
        self.inner, self.spoil = inner, spoil

    def loss_and_grad(self, models: Mapping[int, torch.Tensor], split: str):
        reply = self.inner.loss_and_grad(models, split)
        client = min(reply)
        reply[client] = self.spoil(*reply[client])
        if reply[client] is None:
            del reply[client]
        return reply


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda loss, grad: (math.nan, grad), "non-finite train loss"),
        (lambda loss, grad: (loss, torch.full_like(grad, math.inf)), "non-finite train gradient"),
        (lambda loss, grad: (loss, grad[:-1]), "gradient of shape"),
        (lambda loss, grad: (loss, grad.numpy()), "ndarray gradient"),
        (lambda loss, grad: (torch.ones(2), grad), "no \\(scalar loss, gradient\\) pair"),
        (lambda loss, grad: None, "answered for"),
    ],
)
def test_bad_oracle_reply_raises(small, spoil, message):
    oracle = Tampered(oracle_for(small), spoil)
    with pytest.raises(OracleError, match=message) as error:
        spo_estimator(oracle, small.dim + 1, QUICK)(frozenset(range(6)))
    assert error.value.clients == {0}  # the client at fault is named


@pytest.mark.parametrize(
    "bad",
    [
        {"hidden": 0},
        {"hypernet_steps": 0},
        {"search_steps": -1},
        {"search_steps": 2.5},
        {"hypernet_lr": 0.0},
        {"search_lr": math.nan},
        {"dirichlet_alpha": -1.0},
        {"threshold": 0.0},
        {"threshold": 1.5},
    ],
)
def test_settings_validation(bad):
    with pytest.raises(ValueError):
        SpoSettings(**bad)


def test_numel_must_be_positive(small):
    with pytest.raises(ValueError, match="numel"):
        spo_estimator(oracle_for(small), 0)
