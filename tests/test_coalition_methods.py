"""FedCollab and collaboration equilibrium end to end in the in-process runtime.

Real ClientNodes on small synthetic data: client discriminators, coalition training through
the lockstep exchange, late joiners, vanishing clients, and resuming from a checkpoint.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pytest
import torch

from collabfl.client.discriminator import (
    accuracies,
    discriminator_numel,
    initial_discriminator,
    labelled_features,
    official_label_scale,
    sgd_step,
)
from collabfl.client.node import ClientSplits
from collabfl.coordinator.store.checkpoints import load_checkpoint, save_checkpoint
from collabfl.engine.inprocess import InProcessFederation, build_federation
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.distances import (
    DistanceEstimate,
    DistanceSettings,
    all_pairs,
    estimate_distances,
    pairs_with,
)
from collabfl.strategies.equilibrium_method import CollaborationEquilibrium
from collabfl.strategies.fedavg import FedAvg
from collabfl.strategies.fedcollab import coalition_objective, place_new_client
from collabfl.strategies.fedcollab_method import FedCollab
from collabfl.strategies.local import Local
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.verbs import Discriminate, Verb

pytestmark = pytest.mark.slow

LENGTH = 40  # MNIST-1D's signal length, so the project's CNN applies
FAST = DistanceSettings(rounds=60, local_steps=5, lr=0.05, patience=60, hidden=32)


def _client(classes: list[int], n: int, seed: int) -> ClientSplits:
    """Samples of ``classes`` drawn from fixed class means (shared by every client)."""
    means = np.random.default_rng(1234).normal(size=(10, LENGTH)) * 2.0
    rng = np.random.default_rng(seed)

    def split(size: int) -> TensorData:
        y = rng.choice(classes, size=size)
        x = means[y] + rng.normal(size=(size, LENGTH))
        return TensorData(
            torch.tensor(x[:, None, :], dtype=torch.float32), torch.tensor(y, dtype=torch.long)
        )

    return ClientSplits(split(n), split(n // 4), split(n // 4))


GROUPS = {0: [0, 1, 2], 1: [0, 1, 2], 2: [0, 1, 2], 3: [6, 7, 8], 4: [6, 7, 8]}


def _federation(groups: Mapping[int, list[int]] = GROUPS, n: int = 160) -> InProcessFederation:
    splits = [_client(groups[k], n, seed=k) for k in sorted(groups)]
    workspace = FlatModel(build_model("mnist1d_cnn", 10, seed=0))
    return build_federation(splits, workspace, TrainingConfig(lr=0.05), seed=0)


def _fedavg(members) -> FedAvg:
    return FedAvg(epochs=1.0)


def _local(members) -> Local:
    return Local(epochs=1.0)


def _fedcollab(c: float = 1.0, distance: DistanceSettings = FAST) -> FedCollab:
    return FedCollab(_fedavg, _local, c=c, distance=distance, restarts=10, seed=0)


class CountingPool:
    """Wraps a pool: counts sends, hides clients until a round starts, or makes them vanish."""

    def __init__(self, inner, hidden_until: dict[int, int] | None = None, gone=()):
        self.inner = inner
        self.hidden_until = hidden_until or {}
        self.gone = set(gone)
        self.sends: list[dict[int, Instruction]] = []
        self.round = 0

    @property
    def sample_counts(self) -> Mapping[int, int]:
        counts = self.inner.sample_counts
        return {k: v for k, v in counts.items() if self.round >= self.hidden_until.get(k, 0)}

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        self.sends.append(dict(instructions))
        for instruction in instructions.values():  # after an evaluation the next round starts
            if instruction.verb is Verb.EVALUATE:
                self.round = max(self.round, instruction.round + 1)
        live = {k: i for k, i in instructions.items() if k not in self.gone}
        return self.inner.send(live)


# --- the batched discriminator ---------------------------------------------------------------


def test_batched_step_equals_one_discriminator_at_a_time():
    generator = torch.Generator().manual_seed(0)
    rows = torch.stack([initial_discriminator(6, 5, generator) for _ in range(3)])
    features = torch.randn(8, 6, generator=generator)
    targets = torch.tensor([1.0, 0.0, 1.0])
    together = sgd_step(rows, features, targets, 0.1, hidden=5)
    for n in range(3):
        alone = sgd_step(rows[n : n + 1], features, targets[n : n + 1], 0.1, hidden=5)
        torch.testing.assert_close(together[n], alone[0])


def test_discriminator_matches_the_equivalent_torch_mlp():
    generator = torch.Generator().manual_seed(1)
    weights = initial_discriminator(4, 3, generator)
    assert weights.numel() == discriminator_numel(4, 3)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    with torch.no_grad():
        mlp[0].weight.copy_(weights[:12].view(4, 3).T)
        mlp[0].bias.copy_(weights[12:15])
        mlp[2].weight.copy_(weights[15:18][None, :])
        mlp[2].bias.copy_(weights[18:])
    features = torch.randn(5, 4, generator=generator)
    expected = (mlp(features)[:, 0] > 0).float().mean()
    assert accuracies(weights[None], features, torch.tensor([1.0]), 3)[0] == expected
    loss = torch.nn.functional.binary_cross_entropy_with_logits(mlp(features)[:, 0], torch.ones(5))
    loss.backward()
    stepped = sgd_step(weights[None], features, torch.tensor([1.0]), 0.5, 3)[0]
    torch.testing.assert_close(stepped[:12], weights[:12] - 0.5 * mlp[0].weight.grad.T.reshape(-1))
    torch.testing.assert_close(stepped[-1:], weights[-1:] - 0.5 * mlp[2].bias.grad)


def test_scaled_label_input_equals_the_official_two_branch_discriminator():
    """The official net: h = W_x x + b_x + 2 (W_y (ν · onehot) + b_y), ν = L/√(L−1), then
    ReLU and a linear layer. Ours reads [x, 2ν · onehot] with W1 = [W_x; W_y] and one bias."""
    labels = 10
    assert official_label_scale(labels) == pytest.approx(2 * 10 / 3)
    with pytest.raises(ValueError, match="2 classes"):
        official_label_scale(1)
    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(6, 1, 5, generator=generator), torch.tensor([0, 3, 9, 3, 1, 0])
    feat, label, head = torch.nn.Linear(5, 4), torch.nn.Linear(labels, 4), torch.nn.Linear(4, 1)
    nu = labels / math.sqrt(labels - 1)
    onehot = torch.nn.functional.one_hot(y, labels).float()
    hidden = torch.relu(feat(x.flatten(1)) + 2 * label(nu * onehot))
    official = head(hidden)[:, 0]
    with torch.no_grad():
        w1 = torch.cat([feat.weight.T, label.weight.T])  # (D + L, H), our row-major layout
        b1 = feat.bias + 2 * label.bias
        ours = torch.cat([w1.reshape(-1), b1, head.weight[0], head.bias])
        inputs = labelled_features(x, y, labels, official_label_scale(labels))
        torch.testing.assert_close(inputs[:, 5:], 2 * nu * onehot)
        for target in (0.0, 1.0):
            expected = ((official > 0).float() == target).float().mean()
            assert accuracies(ours[None], inputs, torch.tensor([target]), 4)[0] == expected
    plain = labelled_features(x, y, labels)
    torch.testing.assert_close(plain[:, 5:], onehot)


def test_a_client_scales_the_label_only_when_the_task_asks():
    node = _federation().nodes[0]
    task = replace(DISCRIMINATE_ONE_PEER, local_steps=0)
    for scale_label, weight in ((False, 1.0), (True, official_label_scale(10))):
        node.handle(Instruction(0, replace(task, scale_label=scale_label)))
        inputs = node.discriminators._inputs[("raw", task.samples, scale_label)]
        onehots = inputs.train[:, LENGTH:]
        assert torch.all(onehots.sum(dim=1) == weight)
        assert onehots.unique().tolist() == pytest.approx([0.0, weight])


# --- distance estimation ---------------------------------------------------------------------


class ScriptedPool:
    """Two clients whose reports follow a script: the accuracy each reports at a step."""

    def __init__(self, accuracy) -> None:
        self.accuracy = accuracy
        self.steps: list[int] = []

    @property
    def sample_counts(self) -> Mapping[int, int]:
        return {0: 100, 1: 100}

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        step = next(iter(instructions.values())).task.step
        self.steps.append(step)
        metrics = ClientMetrics(disc_acc=(self.accuracy(step),))
        return {k: Reply(metrics, torch.zeros(5)) for k in instructions}


def test_evaluation_every_k_steps_counts_only_those_reports():
    # Evaluated reports come after 1, 11, 21, ... steps; the others (0.99) must not count.
    script = {1: 0.6, 11: 0.7, 21: 0.65, 31: 0.66}
    pool = ScriptedPool(lambda step: script.get(step, 0.99))
    every = DistanceSettings(rounds=500, eval_every=10, patience=20, hidden=4)
    estimate = estimate_distances(pool, [(0, 1)], every, 0)
    # Step 11 is the best; 21 and 31 add 10 steps each without gain: stop after step 31.
    assert pool.steps == list(range(32)) and estimate.steps == 32
    assert estimate.balanced_accuracy == {(0, 1): 0.66}  # the last evaluation, not the best
    assert estimate.distances[(0, 1)] == pytest.approx(2 * 0.66 - 1)
    each_step = DistanceSettings(rounds=50, patience=3, hidden=4)
    each = estimate_distances(ScriptedPool(lambda step: 0.6), [(0, 1)], each_step, 0)
    assert each.steps == 4  # every step evaluated: step 0's report is the best, 3 more stop it
    with pytest.raises(ValueError, match="eval_every"):
        DistanceSettings(rounds=1, eval_every=10)
    with pytest.raises(ValueError, match="eval_every"):
        DistanceSettings(eval_every=0)


def test_distances_separate_same_and_disjoint_label_clients():
    pool = CountingPool(_federation())
    estimate = estimate_distances(pool, all_pairs(range(5)), FAST, 0)
    matrix = estimate.matrix(list(range(5)))
    same = [matrix[0, 1], matrix[0, 2], matrix[1, 2], matrix[3, 4]]
    apart = [matrix[i, j] for i in range(3) for j in (3, 4)]
    assert max(same) < 0.35, matrix
    assert min(apart) > 0.9, matrix
    assert np.allclose(matrix, matrix.T) and np.all(np.diag(matrix) == 0)
    # All ten pairs advance together: one message per client per step.
    assert len(pool.sends) == estimate.steps == FAST.rounds
    assert all(len(sent) == 5 for sent in pool.sends)
    assert all(len(i.task.peers) == 4 for i in pool.sends[0].values())
    numel = pool.sends[1][0].model.numel() // 4
    assert estimate.model_bytes == (FAST.rounds * 2 - 1) * 10 * 2 * numel * 4


def test_early_stopping_drops_converged_pairs():
    patient = DistanceSettings(rounds=200, local_steps=5, lr=0.05, patience=3, hidden=32)
    estimate = estimate_distances(_federation(), all_pairs(range(5)), patient, 0)
    assert estimate.steps < 200
    assert set(estimate.distances) == set(all_pairs(range(5)))


def test_a_vanished_client_loses_its_pairs_and_nothing_else():
    pool = CountingPool(_federation(), gone={4})
    estimate = estimate_distances(pool, all_pairs(range(5)), FAST, 0)
    assert estimate.failed == [4]
    assert set(estimate.unresolved) == {(k, 4) for k in range(4)}
    assert set(estimate.distances) == set(all_pairs(range(4)))
    assert any("client 4 did not answer" in p for p in estimate.problems)


class MangledPool(CountingPool):
    """Client 1 answers with one value too few."""

    def send(self, instructions):
        replies = super().send(instructions)
        if 1 in replies and replies[1].model is not None:
            replies[1] = Reply(replies[1].metrics, replies[1].model[:-1])
        return replies


def test_a_malformed_reply_is_reported_and_its_pairs_dropped():
    estimate = estimate_distances(MangledPool(_federation()), all_pairs(range(3)), FAST, 0)
    assert estimate.failed == [1]
    assert set(estimate.distances) == {(0, 2)}
    assert any("client 1" in p and "discriminators" in p for p in estimate.problems)


def test_pairs_with_a_newcomer_and_json_round_trip():
    assert pairs_with([5], [0, 2, 5]) == [(0, 5), (2, 5)]
    assert pairs_with([5, 1], [0]) == [(0, 1), (0, 5), (1, 5)]
    estimate = DistanceEstimate({(0, 1): 0.5}, {(0, 1): 0.75}, 3, 100, [(1, 2)], [2], ["x"])
    assert DistanceEstimate.from_json(json.loads(json.dumps(estimate.to_json()))) == estimate


DISCRIMINATE_ONE_PEER = Discriminate(
    peers=(1,), targets=(1,), samples=50, step=0, local_steps=1, lr=0.1, batch_size=8, hidden=4
)
"""A DISCRIMINATE task for client 0 against client 1 (``features`` replaced per test)."""


def test_node_rejects_discriminators_of_the_wrong_size():
    node = _federation().nodes[0]
    task = replace(DISCRIMINATE_ONE_PEER, features="raw")
    with pytest.raises(ValueError, match="expected 1 discriminators"):
        node.handle(Instruction(0, task, torch.zeros(7)))
    with pytest.raises(ValueError, match="cannot train a discriminator"):
        node.handle(Instruction(0, replace(task, samples=10_000)))
    with pytest.raises(ValueError, match="unknown discriminator features"):
        node.handle(Instruction(0, replace(task, features="pixels")))


def test_frozen_feature_extractor_feeds_the_last_layers_input():
    node = _federation().nodes[0]
    task = DISCRIMINATE_ONE_PEER
    raw = node.handle(Instruction(0, replace(task, features="raw")))
    embedded = node.handle(Instruction(0, replace(task, features="initial_model")))
    assert raw.model.numel() == discriminator_numel(LENGTH + 10, 4)
    last = [m for m in node.workspace.module.modules() if isinstance(m, torch.nn.Linear)][-1]
    assert embedded.model.numel() == discriminator_numel(last.in_features + 10, 4)


# --- FedCollab ---------------------------------------------------------------------------------


def test_fedcollab_groups_alike_clients_and_trains_inside_coalitions():
    pool = CountingPool(_federation())
    outcomes = list(_fedcollab().rounds(pool, 2))
    assert [o.coalitions for o in outcomes] == [[[0, 1, 2], [3, 4]]] * 2
    metrics = outcomes[-1].metrics
    assert [metrics[k].coalition for k in range(5)] == [0, 0, 0, 1, 1]
    edges = {(i, j) for i, j, _ in outcomes[-1].graph}
    assert edges == {(i, j) for c in ([0, 1, 2], [3, 4]) for i in c for j in c if i != j}
    # Lockstep: one merged send per FedAvg phase (train, evaluate) per round.
    training = pool.sends[FAST.rounds :]
    assert len(training) == 2 * 2
    models = {k: i.model for k, i in training[2].items()}  # round 1's train carries averages
    torch.testing.assert_close(models[0], models[2])
    torch.testing.assert_close(models[3], models[4])
    assert not torch.equal(models[0], models[3])


def test_fedcollab_c_zero_keeps_everyone_alone_and_local():
    pool = CountingPool(_federation())
    outcome = next(iter(_fedcollab(c=0.0).rounds(pool, 1)))
    assert outcome.coalitions == [[k] for k in range(5)]
    train = pool.sends[FAST.rounds]
    assert all(i.task.slot == "model" and i.model is None for i in train.values())
    assert outcome.graph == []


def test_fedcollab_resumes_without_estimating_again(tmp_path):
    first = list(_fedcollab().rounds(CountingPool(_federation()), 1))[-1]
    save_checkpoint(tmp_path, 0, first.checkpoint)
    pool = CountingPool(_federation())
    resumed = list(_fedcollab().rounds(pool, 3, load_checkpoint(tmp_path, 0)))
    assert [o.round for o in resumed] == [1, 2]
    assert all(i.verb is not Verb.DISCRIMINATE for sent in pool.sends for i in sent.values())
    assert resumed[-1].coalitions == first.coalitions


def test_a_late_joiner_is_placed_where_the_objective_is_lowest():
    pool = CountingPool(_federation(), hidden_until={4: 1})
    outcomes = list(_fedcollab().rounds(pool, 3))
    assert outcomes[0].coalitions == [[0, 1, 2], [3]]
    estimate = DistanceEstimate.from_json(outcomes[-1].checkpoint["distances"])
    order = [0, 1, 2, 3, 4]
    expected = place_new_client(
        [0, 0, 0, 1], [pool.inner.sample_counts[k] for k in order], estimate.matrix(order), 1.0
    )
    assert expected == 1
    assert outcomes[1].coalitions == outcomes[2].coalitions == [[0, 1, 2], [3, 4]]
    # Only the newcomer's pairs were estimated at round 1.
    late = [
        s
        for s in pool.sends
        if any(i.verb is Verb.DISCRIMINATE and i.round == 1 for i in s.values())
    ]
    assert late and all(sorted(s) == [0, 1, 2, 3, 4] for s in late)
    assert sorted(late[0][4].task.peers) == [0, 1, 2, 3]
    assert late[0][0].task.peers == (4,)
    assert outcomes[2].metrics[4].coalition == 1


def test_objective_of_the_found_coalitions_is_no_worse_than_alternatives():
    method = _fedcollab()
    pool = CountingPool(_federation())
    estimate = estimate_distances(pool, all_pairs(range(5)), FAST, 0)
    counts = [pool.sample_counts[k] for k in range(5)]
    found = method.solve(list(range(5)), pool.sample_counts, estimate)
    labels = [n for k in range(5) for n, c in enumerate(found) if k in c]
    value = coalition_objective(labels, counts, estimate.matrix(range(5)), 1.0)
    for other in ([0, 0, 0, 0, 0], [0, 1, 2, 3, 4], [0, 0, 1, 1, 1]):
        assert value <= coalition_objective(other, counts, estimate.matrix(range(5)), 1.0)


# --- collaboration equilibrium ---------------------------------------------------------------


def _equilibrium() -> CollaborationEquilibrium:
    return CollaborationEquilibrium(_fedavg, _local, init_epochs=3.0)


def test_equilibrium_coalitions_follow_from_the_clients_ocs():
    pool = CountingPool(_federation())
    outcomes = list(_equilibrium().rounds(pool, 2))
    search = outcomes[0].checkpoint["search"]
    coalitions = outcomes[0].coalitions
    assert sorted(k for c in coalitions for k in c) == list(range(5))
    first = {int(k): set(v) for k, v in search["iterations"][0].items()}
    for members in coalitions:  # a coalition never mixes the two label groups
        assert {GROUPS[k][0] for k in members} in ({0}, {6})
        for k in members:  # everyone's first OCS stays inside its label group
            assert {GROUPS[j][0] for j in first[k]} == {GROUPS[k][0]}
    searches = [s for s in pool.sends if next(iter(s.values())).verb is Verb.COLLABORATE]
    assert len(searches) == len(search["iterations"])
    assert [next(iter(s.values())).task.step for s in searches] == list(range(len(searches)))
    assert all(i.task.assign is False for s in searches for i in s.values())
    assert outcomes[1].coalitions == coalitions


def test_equilibrium_search_leaves_the_training_slots_untouched():
    federation = _federation()
    list(_equilibrium().rounds(CountingPool(federation), 1))
    node = federation.nodes[0]
    assert "warmup" in node.slots
    assert not torch.equal(node.slots["warmup"], node.slots["global"])


def test_a_client_that_misses_the_search_trains_alone():
    pool = CountingPool(_federation(), gone={4})
    outcome = next(iter(_equilibrium().rounds(pool, 1)))
    assert [4] in outcome.coalitions
    assert 4 not in outcome.metrics  # it never answered, so it has no result
    search = outcome.checkpoint["search"]
    assert search["failed"] == [4]
    assert search["problems"] == ["client 4 did not train its warm-up model"]


def test_a_checkpoint_saved_ahead_of_the_coordinator_record_keeps_the_previous_one(tmp_path):
    """Round t is saved before the coordinator records it; a failed record resumes at t-1."""
    save_checkpoint(tmp_path, 0, {"chosen": {"0": [1]}})
    save_checkpoint(tmp_path, 1, {"chosen": {"0": [2]}})
    save_checkpoint(tmp_path, 2, {"chosen": {"0": [3]}})  # its record failed
    assert load_checkpoint(tmp_path, 1).checkpoint == {"chosen": {"0": [2]}}
    assert load_checkpoint(tmp_path, 2).checkpoint == {"chosen": {"0": [3]}}
    assert not (tmp_path / "round-0").exists()  # only the last two rounds are kept
    with pytest.raises(ValueError, match="resume round 1"):
        load_checkpoint(tmp_path, 0)
