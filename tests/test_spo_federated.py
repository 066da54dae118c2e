"""SPO inside the runtimes: the clients' GRADIENT verb, the pool-backed loss oracle, and the
equilibrium estimating OCSs with SPO end to end on real ClientNodes (in-process runtime).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_coalition_methods import CountingPool, _client, _fedavg, _federation, _local

from collabfl.client.node import ClientSplits
from collabfl.engine.builders import build_method
from collabfl.engine.config import ConfigError, ExperimentConfig
from collabfl.engine.inprocess import InProcessFederation, build_federation
from collabfl.engine.methods import parse_method_spec
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.equilibrium_method import CollaborationEquilibrium
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.spo import OracleError, SpoSettings, spo_estimator
from collabfl.strategies.spo_federated import PoolLossOracle, SpoSearch
from collabfl.strategies.verbs import Gradient, Verb

pytestmark = pytest.mark.slow

QUICK = SpoSettings(hypernet_steps=100, search_steps=20, hypernet_lr=3e-4)
BRIEF = SpoSettings(hypernet_steps=10, search_steps=4, hypernet_lr=3e-4)
"""Enough steps to pass through every stage of the search, for properties (such as
reproducibility) that do not depend on how well it separates the clients."""


def _relabelled(splits: ClientSplits, shift: int) -> ClientSplits:
    def moved(data: TensorData) -> TensorData:
        return TensorData(data.x, (data.y + shift) % 10)

    return ClientSplits(moved(splits.train), moved(splits.val), moved(splits.test))


def _concept_shift() -> InProcessFederation:
    """Five clients with the same inputs; clients 3 and 4 name the classes differently, so no
    single model serves both groups."""
    splits = [_client([0, 1, 2], 160, seed=k) for k in range(5)]
    splits = splits[:3] + [_relabelled(s, 3) for s in splits[3:]]
    workspace = FlatModel(build_model("mnist1d_cnn", 10, seed=0))
    return build_federation(splits, workspace, TrainingConfig(lr=0.05), seed=0)


def _spo_equilibrium(
    federation: InProcessFederation, seed: int = 0, settings: SpoSettings = QUICK
) -> CollaborationEquilibrium:
    start = federation.nodes[0].initial_model
    spo = SpoSearch(start, settings, batch_size=64, seed=seed)
    return CollaborationEquilibrium(_fedavg, _local, init_epochs=1.0, spo=spo)


# --- the GRADIENT verb ------------------------------------------------------------------------


def _reference(vector: torch.Tensor, data: TensorData) -> tuple[float, torch.Tensor]:
    """Autograd through a separate copy of the model, on the whole split."""
    module = build_model("mnist1d_cnn", 10, seed=0)
    flat = FlatModel(module)
    flat.load(vector)
    loss = F.cross_entropy(flat.module(data.x), data.y)
    grads = torch.autograd.grad(loss, list(flat.module.parameters()))
    return float(loss.detach()), torch.cat([g.reshape(-1) for g in grads])


def test_gradient_matches_autograd_on_the_whole_split():
    node = _federation().nodes[0]
    vector = node.initial_model + 0.01 * torch.randn(node.initial_model.shape)
    for split, data in (("val", node.data.val), ("train", node.data.train)):
        task = Gradient(split, batch_size=0, step=0)
        reply = node.handle(Instruction(0, task, vector))
        loss, gradient = _reference(vector, data)
        assert reply.metrics.loss == pytest.approx(loss, rel=1e-5)
        assert reply.metrics.samples == len(data)
        torch.testing.assert_close(reply.model, gradient, rtol=1e-4, atol=1e-6)


def test_gradient_chunks_add_up_to_the_whole_split():
    node = _federation().nodes[0]
    task = Gradient("train", batch_size=0, step=0)
    whole = node.handle(Instruction(0, task, node.initial_model))
    node.training = node.training.model_copy(update={"eval_batch_size": 7})
    chunked = node.handle(Instruction(0, task, node.initial_model))
    assert chunked.metrics.loss == pytest.approx(whole.metrics.loss, rel=1e-5)
    torch.testing.assert_close(chunked.model, whole.model, rtol=1e-4, atol=1e-6)


def test_train_mini_batches_are_seeded_by_step():
    node = _federation().nodes[0]

    def ask(step: int) -> Reply:
        task = Gradient("train", batch_size=16, step=step)
        return node.handle(Instruction(0, task, node.initial_model))

    first, again, other = ask(0), ask(0), ask(1)
    assert first.metrics.samples == 16
    assert first.metrics.loss == again.metrics.loss
    torch.testing.assert_close(first.model, again.model, rtol=0, atol=0)
    assert not torch.equal(first.model, other.model)


def test_gradient_leaves_the_slots_alone():
    node = _federation().nodes[0]
    before = node.slot("model").clone()
    task = Gradient("val", batch_size=0, step=0)
    node.handle(Instruction(0, task, torch.zeros_like(before)))
    torch.testing.assert_close(node.slot("model"), before, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("split", "model", "message"),
    [
        ("val", None, "must carry the model"),
        ("test", "initial", "split must be 'train' or 'val'"),
        ("val", "short", "shape"),
    ],
)
def test_bad_gradient_instructions_are_refused(split, model, message):
    node = _federation().nodes[0]
    vector = {"initial": node.initial_model, "short": node.initial_model[:-1], None: None}[model]
    with pytest.raises(ValueError, match=message):
        node.handle(Instruction(0, Gradient(split), vector))


# --- the pool-backed oracle ---------------------------------------------------------------------


def test_pool_oracle_answers_for_every_client_with_unique_steps():
    federation = _federation()
    pool = CountingPool(federation)
    oracle = PoolLossOracle(pool, 0, batch_size=8)
    start = federation.nodes[0].initial_model
    for _ in range(2):
        reply = oracle.loss_and_grad({0: start, 3: start}, "train")
        assert sorted(reply) == [0, 3]
        assert all(grad.shape == start.shape for _, grad in reply.values())
    assert [s[0].task.step for s in pool.sends] == [0, 1]
    assert all(i.verb is Verb.GRADIENT and i.task.batch_size == 8 for i in pool.sends[0].values())


class GradientlessPool:
    """Client 0 answers with a gradient, client 1 without one."""

    def __init__(self) -> None:
        self.sample_counts = {0: 1, 1: 1}

    def send(self, instructions):
        answers = {0: torch.ones(3), 1: None}
        return {k: Reply(ClientMetrics(loss=1.0), answers[k]) for k in instructions}


def test_pool_oracle_brings_gradients_to_cpu_tensors():
    models = {0: torch.zeros(3), 1: torch.zeros(3)}
    reply = PoolLossOracle(GradientlessPool(), 0, 0).loss_and_grad(models, "val")
    assert isinstance(reply[0][1], torch.Tensor)
    assert reply[0][1].device.type == "cpu"
    assert reply[1][1] is None  # left for SPO's reply check to refuse


def test_a_vanished_client_is_named_by_the_oracle_error():
    federation = _federation()
    oracle = PoolLossOracle(CountingPool(federation, gone={2}), 0, batch_size=0)
    start = federation.nodes[0].initial_model
    with pytest.raises(OracleError, match="asked for") as error:
        spo_estimator(oracle, start.numel(), QUICK, start=start)(frozenset({0, 1, 2}))
    assert error.value.clients == {2}


# --- the equilibrium with SPO -----------------------------------------------------------------


def test_spo_separates_clients_that_no_single_model_serves():
    federation = _concept_shift()
    pool = CountingPool(federation)
    outcomes = list(_spo_equilibrium(federation).rounds(pool, 1))
    assert outcomes[0].coalitions == [[0, 1, 2], [3, 4]]
    search = outcomes[0].checkpoint["search"]
    assert search["failed"] == []
    first_ocs = {str(k): [0, 1, 2] for k in range(3)} | {str(k): [3, 4] for k in (3, 4)}
    assert search["iterations"] == [first_ocs]
    queries = [s for s in pool.sends if next(iter(s.values())).verb is Verb.GRADIENT]
    assert len(queries) == QUICK.hypernet_steps + QUICK.search_steps
    assert [next(iter(s.values())).task.step for s in queries] == list(range(len(queries)))
    # SPO needs no warm-up: the first message of the run is a gradient query.
    assert next(iter(pool.sends[0].values())).verb is Verb.GRADIENT


def test_spo_is_reproducible_for_a_seed():
    runs = [
        _spo_equilibrium(_concept_shift(), seed=3, settings=BRIEF).search(
            CountingPool(_concept_shift())
        )
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


class GarblingPool(CountingPool):
    """Client 1 answers gradient queries with one value too few."""

    def send(self, instructions):
        replies = super().send(instructions)
        if 1 in replies and replies[1].model is not None:
            replies[1] = Reply(replies[1].metrics, replies[1].model[:-1])
        return replies


@pytest.mark.parametrize(
    ("pool_of", "bad", "problem"),
    [
        (lambda f: CountingPool(f, gone={4}), 4, "asked for"),
        (GarblingPool, 1, "client 1 returned a gradient of shape"),
    ],
)
def test_a_client_that_fails_spo_ends_alone_and_the_rest_go_on(pool_of, bad, problem):
    federation = _concept_shift()
    search = _spo_equilibrium(federation).search(pool_of(federation))
    assert [bad] in search["coalitions"]
    assert search["failed"] == [bad]
    assert any(problem in p for p in search["problems"])
    assert sorted(k for c in search["coalitions"] for k in c) == list(range(5))
    for members in search["coalitions"]:  # the survivors still never mix the two concepts
        assert len({k >= 3 for k in members}) == 1


# --- configuration ----------------------------------------------------------------------------


def test_method_spec_selects_spo_with_its_settings():
    base = ExperimentConfig()
    spec = parse_method_spec("equilibrium:ocs=spo,spo_hypernet_steps=7,spo_batch_size=0", base)
    workspace = FlatModel(build_model("mnist1d_cnn", 10, seed=0))
    method = build_method(spec, {0: 10, 1: 10}, workspace)
    assert isinstance(method, CollaborationEquilibrium)
    assert method.spo is not None
    assert method.spo.settings.hypernet_steps == 7
    assert method.spo.batch_size == 0
    torch.testing.assert_close(method.spo.start, workspace.get())
    greedy = build_method(parse_method_spec("equilibrium", base), {0: 10, 1: 10}, workspace)
    assert greedy.spo is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "option", ["ocs=exact", "spo_threshold=0", "spo_hypernet_lr=-1", "spo_batch_size=-2"]
)
def test_bad_spo_options_are_rejected(option):
    with pytest.raises(ConfigError):
        parse_method_spec(f"equilibrium:{option}", ExperimentConfig())
