"""Round protocols of the methods, driven against a scripted ClientPool (no training, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
import torch

from collabfl.strategies.attacks import Attackers
from collabfl.strategies.ditto import Ditto
from collabfl.strategies.dpfl import DPFL, collaboration_edges
from collabfl.strategies.fedavg import FedAvg
from collabfl.strategies.ipfl import ClientProfile
from collabfl.strategies.ipfl_method import IPFL
from collabfl.strategies.local import Local
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.pfedgraph_method import PFedGraph
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.rounds import Resume, weighted_average
from collabfl.strategies.verbs import Collaborate, Train, Verb


class ScriptedPool:
    """Clients whose 'training' adds their id to the model; records every instruction.

    A collaboration can only choose peers that published a model in that round, as a real
    fetch can only get those."""

    def __init__(self, counts: Mapping[int, int], vanish_after: dict[int, int] | None = None):
        self._counts = dict(counts)
        self.models = {k: torch.zeros(2) for k in counts}
        self.log: list[tuple[int, Instruction]] = []
        self.vanish_after = vanish_after or {}
        self.published: set[tuple[int, int]] = set()

    @property
    def sample_counts(self) -> Mapping[int, int]:
        return self._counts

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        replies = {}
        for k, ins in instructions.items():
            if ins.round > self.vanish_after.get(k, 10**9):
                continue
            self.log.append((k, ins))
            if ins.model is not None:
                self.models[k] = ins.model.clone()
            task = ins.task
            if isinstance(task, Train):
                self.models[k] = self.models[k] + k
                if task.publish:
                    self.published.add((k, ins.round))
                upload = self.models[k].clone() if task.upload else None
                replies[k] = Reply(ClientMetrics(train_loss=1.0), upload)
            elif isinstance(task, Collaborate):
                candidates = tuple(j for j in task.candidates if (j, ins.round) in self.published)
                chosen = candidates if task.budget is None else candidates[: task.budget]
                replies[k] = Reply(ClientMetrics(chosen=chosen, num_collaborators=len(chosen)))
            else:
                replies[k] = Reply(ClientMetrics(test_acc=0.5, best_test_acc=0.5))
        return replies


COUNTS = {0: 10, 1: 30, 2: 60}


def test_fedavg_averages_by_sample_count_and_finetunes():
    pool = ScriptedPool(COUNTS)
    outcomes = list(FedAvg(epochs=1, finetune_epochs=2).rounds(pool, 2))
    assert [o.round for o in outcomes] == [0, 1, 2]
    # Round 0: clients train from zeros to k; average = (0*10 + 1*30 + 2*60) / 100 = 1.5.
    evaluations = [ins for _, ins in pool.log if ins.verb is Verb.EVALUATE and ins.round == 0]
    np.testing.assert_allclose(evaluations[0].model, [1.5, 1.5])
    finetune = [ins for _, ins in pool.log if ins.round == 2 and ins.verb is Verb.TRAIN]
    assert len(finetune) == 3 and finetune[0].task.from_best == "global"
    assert all(o.graph is None for o in outcomes)


def test_fedavg_goes_on_without_a_vanished_client():
    pool = ScriptedPool(COUNTS, vanish_after={2: 0})
    outcomes = list(FedAvg(epochs=1).rounds(pool, 2))
    assert sorted(outcomes[1].metrics) == [0, 1]
    round_one = [ins for _, ins in pool.log if ins.verb is Verb.EVALUATE and ins.round == 1]
    # Round 1 starts from 1.5; clients 0 and 1 add their ids: (1.5*10 + 2.5*30) / 40 = 2.25.
    np.testing.assert_allclose(round_one[0].model, [2.25, 2.25])


def test_dpfl_sends_only_indices_and_sizes():
    pool = ScriptedPool(COUNTS)
    outcomes = list(DPFL(epochs=1, init_epochs=3, budget=1).rounds(pool, 3))
    assert all(ins.model is None for _, ins in pool.log)
    first = {k: ins for k, ins in pool.log if ins.verb is Verb.COLLABORATE and ins.round == 0}
    assert first[1].task.candidates == (0, 2)
    assert first[1].task.weights == (10.0, 60.0)
    assert first[1].task.search == "greedy"
    init_train = [ins for _, ins in pool.log if ins.verb is Verb.TRAIN and ins.round == 0]
    assert all(ins.task.epochs == 3 and ins.task.publish for ins in init_train)
    later = {k: ins for k, ins in pool.log if ins.verb is Verb.COLLABORATE and ins.round == 1}
    # Later rounds search only within Ω_k chosen in round 0 (the first candidate here).
    assert later[1].task.candidates == (0,)
    assert outcomes[0].graph == [(0, 1, 30 / 40), (1, 0, 10 / 40), (2, 0, 10 / 70)]


def test_dpfl_select_every_reuses_the_last_choice():
    pool = ScriptedPool(COUNTS)
    list(DPFL(epochs=1, init_epochs=1, budget=None, select_every=2).rounds(pool, 4))
    searches = [ins.task.search for k, ins in pool.log if ins.verb is Verb.COLLABORATE and k == 0]
    assert searches == ["greedy", "greedy", "none", "greedy"]


def test_dpfl_collaborate_every_leaves_the_rounds_between_purely_local():
    pool = ScriptedPool(COUNTS)
    outcomes = list(DPFL(epochs=1, init_epochs=1, budget=None, collaborate_every=2).rounds(pool, 5))
    collaborated = sorted({ins.round for _, ins in pool.log if ins.verb is Verb.COLLABORATE})
    assert collaborated == [0, 2, 4]
    assert [o.graph is None for o in outcomes] == [False, True, False, True, False]
    local_trains = [ins.task for _, ins in pool.log if ins.verb is Verb.TRAIN and ins.round == 1]
    assert local_trains and not any(task.publish for task in local_trains)
    assert all(o.metrics for o in outcomes)  # every round still evaluates every client
    resumed = list(
        DPFL(epochs=1, init_epochs=1, budget=None, collaborate_every=2).rounds(
            ScriptedPool(COUNTS), 5, Resume(1, outcomes[1].checkpoint)
        )
    )
    assert [o.round for o in resumed] == [2, 3, 4] and resumed[0].graph is not None


def test_dpfl_scores_the_post_training_model_when_asked():
    pool = ScriptedPool(COUNTS)
    list(DPFL(epochs=1, init_epochs=1, budget=None, score_local=True).rounds(pool, 2))
    trains = [ins.task for _, ins in pool.log if ins.verb is Verb.TRAIN]
    assert trains and all(task.score_local for task in trains)


def test_dpfl_tie_rule_reaches_every_search():
    pool = ScriptedPool(COUNTS)
    list(DPFL(epochs=1, init_epochs=1, budget=None, tie="larger").rounds(pool, 2))
    searches = [ins.task for _, ins in pool.log if ins.verb is Verb.COLLABORATE]
    assert searches and all(task.tie == "larger" for task in searches)


def test_pfedgraph_local_steps_reach_every_train():
    pool = ScriptedPool(COUNTS)
    method = PFedGraph(epochs=1, initial_model=np.zeros(2), alpha=0.8, local_steps=200)
    list(method.rounds(pool, 2))
    trains = [ins.task for _, ins in pool.log if ins.verb is Verb.TRAIN]
    assert len(trains) == 6 and all(task.steps == 200 for task in trains)


def test_dpfl_random_graph_and_vanished_peer():
    pool = ScriptedPool(COUNTS, vanish_after={2: 0})
    outcomes = list(DPFL(epochs=1, init_epochs=1, budget=None, graph="random").rounds(pool, 2))
    first = [ins.task.search for _, ins in pool.log if ins.verb is Verb.COLLABORATE]
    assert first[:3] == ["random"] * 3
    round_one = {k: ins for k, ins in pool.log if ins.verb is Verb.COLLABORATE and ins.round == 1}
    assert sorted(round_one) == [0, 1]
    # Client 2 published nothing in round 1: nobody can choose it, and the graph says so.
    assert {j for _, j, _ in outcomes[1].graph} == {0, 1}


def test_ditto_evaluates_the_personal_model_with_prox_to_global():
    pool = ScriptedPool(COUNTS)
    list(Ditto(epochs=1, lam=0.5).rounds(pool, 1))
    personal = [ins for _, ins in pool.log if getattr(ins.task, "slot", None) == "personal"]
    assert personal[0].task.prox_mu == 0.5 and personal[0].task.prox_slot == "global"
    assert personal[-1].verb is Verb.EVALUATE


def test_local_never_moves_models():
    pool = ScriptedPool(COUNTS)
    list(Local(epochs=1).rounds(pool, 2))
    assert all(ins.model is None and not getattr(ins.task, "upload", False) for _, ins in pool.log)


def test_edges_weight_by_sample_count():
    replies = {0: Reply(ClientMetrics(chosen=(1, 2))), 1: Reply(ClientMetrics(chosen=()))}
    assert collaboration_edges(replies, COUNTS) == [(0, 1, 0.3), (0, 2, 0.6)]


def test_weighted_average_validates_input():
    np.testing.assert_allclose(
        weighted_average([torch.ones(2), torch.zeros(2)], [1, 3]), [0.25, 0.25]
    )
    with pytest.raises(ValueError, match="empty"):
        weighted_average([], [])
    with pytest.raises(ValueError, match="positive"):
        weighted_average([torch.ones(2)], [0])


@pytest.mark.parametrize(
    "method",
    [
        DPFL(epochs=1, init_epochs=2, budget=1, select_every=2),
        FedAvg(epochs=1, finetune_epochs=1),
        Ditto(epochs=1),
        Local(epochs=1),
        PFedGraph(epochs=1, initial_model=np.zeros(2), alpha=1.0),
        IPFL(
            epochs=1,
            initial_model=np.ones(2),
            profiles={k: ClientProfile(n, 0.5, 1e4) for k, n in COUNTS.items()},
        ),
    ],
    ids=lambda m: type(m).__name__,
)
def test_resume_continues_exactly_where_the_checkpoint_left(method):
    """A run resumed from round 1's checkpoint sends what the uninterrupted run sent."""
    whole = ScriptedPool(COUNTS)
    list(method.rounds(whole, 4))
    first = ScriptedPool(COUNTS)
    outcomes = method.rounds(first, 4)
    checkpoint = [next(outcomes), next(outcomes)][-1].checkpoint
    outcomes.close()
    resumed = ScriptedPool(COUNTS)
    resumed.models = {k: v.clone() for k, v in first.models.items()}
    later = list(method.rounds(resumed, 4, Resume(1, checkpoint)))
    assert later[0].round == 2

    def sent(pool):
        return [
            (
                k,
                ins.verb,
                ins.round,
                ins.task,
                None if ins.model is None else ins.model.tolist(),
            )
            for k, ins in pool.log
            if ins.round >= 2
        ]

    assert sent(resumed) == sent(whole)


class ShuffledPool(ScriptedPool):
    """Replies arrive in reverse order, as they may in a real federation."""

    def send(self, instructions):
        return dict(reversed(list(super().send(instructions).items())))


def test_dpfl_candidate_order_does_not_depend_on_reply_order():
    ordered, shuffled = ScriptedPool(COUNTS), ShuffledPool(COUNTS)
    list(DPFL(epochs=1, init_epochs=1, budget=None).rounds(ordered, 2))
    list(DPFL(epochs=1, init_epochs=1, budget=None).rounds(shuffled, 2))

    def candidates(pool):
        return sorted(
            (k, ins.round, list(ins.task.candidates))
            for k, ins in pool.log
            if ins.verb is Verb.COLLABORATE
        )

    assert candidates(ordered) == candidates(shuffled)


def test_pfedgraph_sends_each_client_its_aggregate_and_regulariser_target():
    from collabfl.strategies.pfedgraph import collaboration_graph, model_similarity

    pool = ScriptedPool(COUNTS)
    method = PFedGraph(
        epochs=1,
        initial_model=np.array([0.5, -0.5]),
        alpha=0.5,
        attackers=Attackers("sign_flip", frozenset({2})),
    )
    outcomes = list(method.rounds(pool, 2))
    trains = {(k, ins.round): ins for k, ins in pool.log if ins.verb is Verb.TRAIN}
    assert trains[(0, 0)].model is None and trains[(0, 0)].task.align_lam == 0.0
    assert trains[(0, 1)].task.align_lam == 0.01 and trains[(0, 1)].model is not None
    assert trains[(2, 0)].task.attack == "sign_flip" and trains[(0, 0)].task.attack is None
    # Round 0 uploads are 0, 1, 2 (the scripted training adds the client id to zeros).
    uploads = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    prior = np.array([10, 30, 60]) / 100
    weights = collaboration_graph(model_similarity(uploads - [0.5, -0.5]), prior, 0.5)
    evaluations = {k: ins for k, ins in pool.log if ins.verb is Verb.EVALUATE and ins.round == 0}
    for k in range(3):
        np.testing.assert_allclose(evaluations[k].model, weights[k] @ uploads, rtol=1e-6)
    graph = {(i, j): w for i, j, w in outcomes[0].graph}
    assert all(i != j for i, j in graph)
    assert graph.get((0, 1), 0.0) == pytest.approx(weights[0, 1])
    assert outcomes[0].metrics[2].malicious is True
    assert outcomes[0].metrics[0].malicious is None


def test_ipfl_prices_imports_and_sends_proximal_centres():
    pool = ScriptedPool(COUNTS)
    profiles = {k: ClientProfile(n, 1.0, 2e4) for k, n in COUNTS.items()}
    method = IPFL(epochs=1, initial_model=np.array([0.3, -0.1]), profiles=profiles, lam=0.1)
    outcomes = list(method.rounds(pool, 2))
    trains = {(k, ins.round): ins for k, ins in pool.log if ins.verb is Verb.TRAIN}
    assert trains[(0, 0)].task.prox_mu == 0.0 and trains[(0, 0)].model is None
    assert trains[(0, 1)].task.prox_mu == pytest.approx(0.1)
    assert trains[(0, 1)].task.prox_slot == "centre" and trains[(0, 1)].model is not None
    first = outcomes[0]
    assert sum(first.metrics[k].payment for k in COUNTS) == pytest.approx(0.0, abs=1e-9)
    for k, metrics in first.metrics.items():
        expected = metrics.gain - metrics.sharing_cost - metrics.payment
        assert metrics.utility == pytest.approx(expected)
        assert list(metrics.imports) == sorted(j for i, j, _ in first.graph if i == k)
    evaluations = [ins for _, ins in pool.log if ins.verb is Verb.EVALUATE]
    assert all(ins.model is None for ins in evaluations)  # each client keeps its own model


def test_fedavg_attackers_poison_their_uploads_and_are_reported():
    pool = ScriptedPool(COUNTS)
    outcomes = list(
        FedAvg(epochs=1, attackers=Attackers("all_ones", frozenset({1}))).rounds(pool, 1)
    )
    trains = {k: ins for k, ins in pool.log if ins.verb is Verb.TRAIN}
    assert trains[1].task.attack == "all_ones" and trains[0].task.attack is None
    assert outcomes[0].metrics[1].malicious is True and outcomes[0].metrics[0].malicious is None


def test_attackers_are_a_seeded_share():
    first = Attackers.chosen("sign_flip", 0.4, 10, seed=3)
    assert len(first.clients) == 4 and first == Attackers.chosen("sign_flip", 0.4, 10, seed=3)
    assert Attackers.chosen(None, 0.4, 10, seed=3).clients == frozenset()
