"""FlatModel, local SGD and evaluation."""

from __future__ import annotations

import math

import pytest
import torch

from collabfl.kernel.flat import FlatModel
from collabfl.kernel.model_names import ZOO
from collabfl.kernel.models import MODELS, build_model
from collabfl.kernel.objective import Objective
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig, alignment_gradient, evaluate, steps_for, train


def _data(n: int = 96, seed: int = 0) -> TensorData:
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=generator)
    x = torch.randn(n, 1, 40, generator=generator) * 0.3
    for i, label in enumerate(y.tolist()):  # a bump whose position encodes the label
        x[i, 0, 4 * label : 4 * label + 4] += 2.0
    return TensorData(x, y)


def _flat(seed: int = 0) -> FlatModel:
    return FlatModel(build_model("mnist1d_cnn", 10, seed=seed))


def test_flat_model_views_the_module_state():
    flat = _flat()
    params = list(flat.module.parameters())
    assert flat.num_parameters == sum(p.numel() for p in params) == flat.numel
    flat.load(torch.zeros(flat.numel))
    assert sum(int(torch.count_nonzero(p)) for p in params) == 0
    x = _data().x[:4]
    flat.grad.zero_()
    flat.module(x).sum().backward()
    assert torch.equal(flat.grad, torch.cat([p.grad.reshape(-1) for p in params]))
    with pytest.raises(ValueError, match="shape"):
        flat.load(torch.zeros(3))


def test_flat_model_includes_float_buffers_only():
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    flat = FlatModel(module)
    assert flat.num_parameters == 3 * 2 + 2 + 2 + 2
    assert flat.numel == flat.num_parameters + 2 + 2  # running mean and var, not the counter


def test_same_seed_same_initial_model():
    assert torch.equal(_flat(3).get(), _flat(3).get())
    assert not torch.equal(_flat(3).get(), _flat(4).get())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_build_with_expected_outputs(name):
    shapes = {
        "mnist1d_cnn": (1, 40),
        "cifar_cnn": (3, 32, 32),
        "femnist_cnn": (1, 28, 28),
        "resnet18": (3, 32, 32),
    }
    classes = 62 if name == "femnist_cnn" else 10
    model = build_model(name, classes, seed=0)
    assert model(torch.zeros(2, *shapes[name])).shape == (2, classes)


def test_training_lowers_loss_and_is_deterministic():
    data = _data()
    config = TrainingConfig(lr=0.05, batch_size=16)
    flat_a, flat_b = _flat(), _flat()
    before, _ = evaluate(flat_a, data)
    train(flat_a, data, 5, config, torch.Generator().manual_seed(1))
    train(flat_b, data, 5, config, torch.Generator().manual_seed(1))
    after, _ = evaluate(flat_a, data)
    assert after < before * 0.8
    assert torch.equal(flat_a.get(), flat_b.get())


def test_matches_torch_sgd():
    """The flat optimiser does torch.optim.SGD's arithmetic."""
    data = _data(32)
    config = TrainingConfig(lr=0.1, momentum=0.9, weight_decay=1e-2, batch_size=32)
    flat = _flat()
    reference = build_model("mnist1d_cnn", 10, seed=0)
    optimiser = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-2)
    train(flat, data, 3, config, torch.Generator().manual_seed(0))
    for _ in range(3):  # one batch holds all samples, so the order does not matter
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(reference(data.x), data.y).backward()
        optimiser.step()
    expected = torch.cat([p.detach().reshape(-1) for p in reference.parameters()])
    torch.testing.assert_close(flat.get(), expected, rtol=1e-4, atol=1e-5)


def test_proximal_term_pulls_towards_reference():
    data = _data()
    config = TrainingConfig(lr=0.02, batch_size=16, weight_decay=0)
    reference = _flat().get()
    free, held = _flat(), _flat()
    train(free, data, 3, config, torch.Generator().manual_seed(0))
    train(held, data, 3, config, torch.Generator().manual_seed(0), 10.0, reference)
    assert (held.get() - reference).norm() < 0.5 * (free.get() - reference).norm()
    with pytest.raises(ValueError, match="reference"):
        train(held, data, 1, config, torch.Generator(), prox_mu=1.0)


def test_evaluate_counts_correct_predictions():
    flat = FlatModel(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2, 2, bias=False)))
    flat.load(torch.tensor([1.0, 0.0, 0.0, 1.0]))  # identity: predicts the larger input
    data = TensorData(
        torch.tensor([[[2.0, 0.0]], [[0.0, 2.0]], [[3.0, 1.0]]]), torch.tensor([0, 1, 1])
    )
    loss, accuracy = evaluate(flat, data, batch_size=2)
    assert accuracy == pytest.approx(2 / 3)
    assert loss > 0


def test_a_loss_only_evaluation_gives_the_same_loss_bit_for_bit():
    # GGC's reward evaluations skip the accuracy; the loss must not move by one bit, or
    # GGC's choices (and the README's figures) would.
    flat, data = _flat(seed=3), _data(n=100, seed=4)
    for batch in (2048, 32):
        loss, accuracy = evaluate(flat, data, batch_size=batch)
        loss_only, no_accuracy = evaluate(flat, data, batch_size=batch, accuracy=False)
        assert loss_only == loss
        assert math.isnan(no_accuracy)  # nothing counted
        assert 0 < accuracy <= 1


def test_a_one_batch_evaluation_gives_the_running_sums_figures_bit_for_bit():
    # Data that fits one batch skips the running sums; its figures must be what the sums
    # gave (a float32 zero plus the batch's), or GGC's choices (and the README's figures)
    # would move.
    flat, data = _flat(seed=5), _data(n=100, seed=6)
    loss_one, accuracy_one = evaluate(flat, data, batch_size=2048)
    flat.set_training(False)
    with torch.inference_mode():
        logits = flat.module(data.x)
        loss_sum = torch.zeros(()) + torch.nn.functional.cross_entropy(
            logits, data.y, reduction="sum"
        )
        correct = torch.zeros((), dtype=torch.long) + (logits.argmax(dim=1) == data.y).sum()
    assert (loss_one, accuracy_one) == (float(loss_sum) / 100, float(correct) / 100)


def test_a_loss_of_minus_zero_is_reported_as_plus_zero_in_one_batch():
    # A user's loss can come out as -0.0; the running sum (0 + -0.0) reported +0.0, and
    # the one-batch path must too (metrics files would show "-0.0").
    def minus_zero(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return outputs.abs().sum() * -0.0

    flat, data = _flat(), _data(n=10)
    loss, _ = evaluate(flat, data, objective=Objective(loss=minus_zero))
    assert math.copysign(1.0, loss) == 1.0


def test_set_training_follows_a_mode_set_elsewhere():
    flat = _flat()
    flat.module[0].eval()  # a user's half-frozen module: the first call still applies
    flat.set_training(True)
    assert all(m.training for m in flat.module.modules())
    flat.set_training(False)
    flat.module.train()  # someone else's call (the gradient oracle does this)
    flat.set_training(False)
    assert not any(m.training for m in flat.module.modules())


@pytest.mark.parametrize(
    ("epochs", "n", "batch", "steps"),
    [(1, 100, 32, 4), (0.5, 100, 32, 2), (0.01, 10, 32, 1), (2, 64, 32, 4)],
)
def test_steps_for(epochs, n, batch, steps):
    assert steps_for(epochs, n, batch) == steps


def test_alignment_gradient_matches_autograd():
    weights = torch.randn(7, dtype=torch.float64, requires_grad=True)
    direction = torch.randn(7, dtype=torch.float64)
    (weights / weights.norm() @ direction).backward()
    torch.testing.assert_close(alignment_gradient(weights.detach(), direction), weights.grad)


def test_alignment_pulls_towards_the_direction():
    data = _data()
    config = TrainingConfig(lr=0.02, batch_size=16, weight_decay=0)
    target = _flat(seed=9).get()
    free, pulled = _flat(), _flat()
    train(free, data, 2, config, torch.Generator().manual_seed(0))
    train(
        pulled,
        data,
        2,
        config,
        torch.Generator().manual_seed(0),
        align_lam=50.0,
        align_to=target / target.norm(),
    )

    def cosine(flat):
        return float(torch.nn.functional.cosine_similarity(flat.get(), target, dim=0))

    assert cosine(pulled) > cosine(free) + 0.05


def test_exact_steps_replace_epochs():
    data, config = _data(), TrainingConfig(lr=0.05, batch_size=32)  # 3 steps per epoch
    by_epoch, by_steps, longer = _flat(), _flat(), _flat()
    train(by_epoch, data, 1, config, torch.Generator().manual_seed(1))
    train(by_steps, data, 99, config, torch.Generator().manual_seed(1), steps=3)
    train(longer, data, 1, config, torch.Generator().manual_seed(1), steps=4)
    assert torch.equal(by_epoch.get(), by_steps.get())
    assert not torch.equal(by_epoch.get(), longer.get())
    with pytest.raises(ValueError, match="steps"):
        train(_flat(), data, 1, config, torch.Generator().manual_seed(1), steps=0)


def test_alignment_gradient_is_zero_at_the_origin():
    direction = torch.randn(5)
    assert torch.equal(alignment_gradient(torch.zeros(5), direction), torch.zeros(5))


def test_the_zoo_names_a_config_checks_are_the_models_built():
    assert set(ZOO) == set(MODELS)
