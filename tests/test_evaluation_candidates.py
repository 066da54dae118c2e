"""The reported model is the best-validation one over the post-training and the
post-collaboration candidates, where a method scores both (DPFL's and pFedGraph's code)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from collabfl.client.data import ArrayDataset, ClientData
from collabfl.client.node import ClientSplits
from collabfl.engine.builders import build_method
from collabfl.engine.config import validate_config
from collabfl.engine.inprocess import build_federation
from collabfl.engine.methods import parse_method_spec
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.rounds import merge_metrics
from collabfl.strategies.verbs import Collaborate, Evaluate, Train


def _learnable_client(seed: int) -> ClientSplits:
    """Class = sign of the signal's mean: a CNN learns it in a few epochs."""
    rng = np.random.default_rng(seed)

    def split(n: int) -> ArrayDataset:
        y = rng.integers(0, 2, n)
        x = rng.normal(size=(n, 1, 40)) + np.where(y == 1, 1.5, -1.5)[:, None, None]
        return ArrayDataset(x.astype(np.float32), y)

    data = ClientData(seed, split(200), split(60), split(60), malicious=False)
    return ClientSplits.from_data(data, torch.device("cpu"))


def _federation():
    torch.manual_seed(0)
    workspace = FlatModel(build_model("mnist1d_cnn", num_classes=10, seed=0))
    splits = [_learnable_client(0), _learnable_client(1)]
    return build_federation(splits, workspace, TrainingConfig(batch_size=32, lr=0.05), seed=0)


def _round(federation, score_local: bool):
    """Client 0 trains, then averages with a peer that published a wrecked model."""
    node = federation.nodes[0]
    trained = node.handle(Instruction(0, Train(3.0, publish=True, score_local=score_local)))
    wrecked = torch.randn_like(node.slot("model")) * 5.0
    node.publisher.publish(1, 0, wrecked)
    node.handle(Instruction(0, Collaborate("none", (1,), (1000.0,), None)))
    evaluated = node.handle(Instruction(0, Evaluate()))
    return trained.metrics, evaluated.metrics


def test_a_client_hurt_by_its_collaborators_ends_with_its_local_model():
    trained, evaluated = _round(_federation(), score_local=True)
    assert trained.local_val_acc is not None and trained.local_val_acc > 0.9
    assert evaluated.val_acc is not None and evaluated.val_acc < trained.local_val_acc
    assert evaluated.best_candidate == "local"
    assert evaluated.best_val_acc == trained.local_val_acc
    assert evaluated.best_test_acc == trained.local_test_acc


def test_without_the_local_candidate_the_aggregate_is_reported():
    trained, evaluated = _round(_federation(), score_local=False)
    assert trained.local_val_acc is None
    assert evaluated.best_candidate is None
    assert evaluated.best_test_acc == evaluated.test_acc


def test_a_better_aggregate_wins_over_the_local_model():
    federation = _federation()
    node = federation.nodes[0]
    trained = node.handle(Instruction(0, Train(0.2, publish=True, score_local=True)))
    node.handle(Instruction(0, Collaborate("none", (), (), None)))  # aggregate = own model
    evaluated = node.handle(Instruction(0, Evaluate())).metrics  # a tie keeps the earlier one
    assert evaluated.best_candidate == "local"
    later = node.handle(Instruction(1, Train(3.0, publish=True)))  # not scored
    evaluated = node.handle(Instruction(1, Evaluate())).metrics
    assert later.metrics.local_val_acc is None
    assert evaluated.best_candidate == "aggregate"
    assert evaluated.best_val_acc >= trained.metrics.local_val_acc


@pytest.mark.parametrize(
    ("method", "candidates", "expected"),
    [
        ("dpfl", "auto", True),
        ("dpfl_random", "auto", True),
        ("pfedgraph", "auto", True),
        ("dpfl", "aggregate", False),
        ("pfedgraph", "aggregate", False),
    ],
)
def test_the_candidates_setting_reaches_the_method(method, candidates, expected):
    config = validate_config({"evaluation": {"candidates": candidates}})
    workspace = FlatModel(build_model("mnist1d_cnn", num_classes=10, seed=0))
    strategy = build_method(parse_method_spec(method, config), {0: 10, 1: 10}, workspace)
    assert strategy.score_local is expected


def test_an_unknown_candidates_value_is_refused():
    with pytest.raises(ValueError, match="candidates"):
        validate_config({"evaluation": {"candidates": "local"}})


def test_the_paper_preset_sets_the_official_values_and_keeps_what_is_given():
    config = validate_config({"preset": "paper", "ipfl": {"lam": 3.0}})
    assert (config.dpfl.collaborate_every, config.dpfl.budget_counts_owner) == (2, True)
    assert config.pfedgraph.local_steps == 200
    assert (config.ipfl.lam, config.ipfl.eta) == (3.0, 5.0)  # λ given, η from the preset
    assert (config.fedcollab.distance_local_steps, config.fedcollab.distance_patience) == (1, 100)
    again = validate_config(config.model_dump(mode="json"))
    assert again == config
    plain = validate_config({})
    assert (plain.dpfl.collaborate_every, plain.pfedgraph.local_steps, plain.ipfl.lam) == (
        1,
        0,
        0.1,
    )


def test_the_paper_preset_takes_the_official_spo_and_discriminator_details():
    workspace = FlatModel(build_model("mnist1d_cnn", num_classes=10, seed=0))
    counts = dict.fromkeys(range(4), 10)
    paper = validate_config({"preset": "paper", "fedcollab": {"distance_rounds": 50}})
    fedcollab = build_method(parse_method_spec("fedcollab", paper), counts, workspace)
    distance = fedcollab.distance  # type: ignore[attr-defined]
    assert (distance.rounds, distance.local_steps, distance.patience) == (50, 1, 100)
    assert (distance.eval_every, distance.scale_label) == (10, True)
    equilibrium = build_method(parse_method_spec("equilibrium:ocs=spo", paper), counts, workspace)
    spo = equilibrium.spo.settings  # type: ignore[attr-defined]
    assert (spo.start_ray, spo.upper_clip, spo.linear) == ("last_ray", True, False)
    assert validate_config({"preset": "paper"}).fedcollab.distance_rounds == 2000
    plain = validate_config({})
    assert (plain.fedcollab.distance_eval_every, plain.fedcollab.distance_scale_label) == (1, False)
    assert (plain.equilibrium.spo_start_ray, plain.equilibrium.spo_upper_clip) == (
        "uniform",
        False,
    )


def test_a_bad_section_under_the_paper_preset_is_still_reported():
    with pytest.raises(ValueError, match="dpfl"):
        validate_config({"preset": "paper", "dpfl": "fast"})


def test_budget_counting_the_owner_leaves_one_peer_fewer():
    workspace = FlatModel(build_model("mnist1d_cnn", num_classes=10, seed=0))
    counts = dict.fromkeys(range(10), 10)
    for counts_owner, expected in ((False, 2), (True, 1)):
        config = validate_config({"dpfl": {"budget": 2, "budget_counts_owner": counts_owner}})
        assert build_method(parse_method_spec("dpfl", config), counts, workspace).budget == expected


class _Clock:
    """Stands in for the node's ``time``: still, except while a model is scored."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


def test_scoring_the_trained_model_is_reported_as_evaluation_not_training(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr("collabfl.client.node.time", clock)
    node = _federation().nodes[0]
    score = node._score

    def slow_score(*args, **kwargs):
        clock.now += 5.0  # the scoring's seconds; training takes none on this clock
        return score(*args, **kwargs)

    monkeypatch.setattr(node, "_score", slow_score)
    trained = node.handle(Instruction(0, Train(1.0, score_local=True))).metrics
    assert (trained.train_s, trained.evaluate_s) == (0.0, 5.0)
    evaluated = node.handle(Instruction(0, Evaluate())).metrics  # it scores too: 5 s more
    assert evaluated.evaluate_s == 5.0
    row = merge_metrics({0: Reply(trained, None)}, {0: Reply(evaluated, None)})[0]
    assert (row.train_s, row.evaluate_s) == (0.0, 10.0)
