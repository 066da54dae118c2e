"""What a participant reports besides its size (issue #30, finding 4).

A real federation's coordinator refuses reply values outside their domain (an accuracy
outside [0, 1], a negative or non-finite loss, a model or gradient that is not finite, above
the 1e4 magnitude limit or of another size than the model the step carried) with an
``anomaly`` event naming the member and the value; the member is absent from that step, as
one that did not answer, and the run goes on. Inside the domain, FedAvg's average can be
made robust (``aggregation.rule = "median" | "trimmed_mean"``, ``aggregation.clip_norm``):
one client scaling its upload to just under the magnitude limit ruins FedAvg's mean and not
the median, the trimmed mean or norm clipping (synthetic clients: a trained MNIST-1D version
took minutes on the shared test machine).

Before: every decoded reply reached the method as sent (an accuracy of 7 or a NaN loss
included), and FedAvg had only the weighted mean.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pytest
import torch
from flwr.app import Message
from support.ledger import FakeLedger

from collabfl.apps.pool import FlowerClientPool
from collabfl.apps.reply_checks import refusal
from collabfl.coordinator.store.state import Member
from collabfl.engine.builders import build_method
from collabfl.engine.config import ConfigError, load_config, validate_config
from collabfl.engine.methods import parse_method_spec
from collabfl.flower.codec import (
    PROGRAM_MESSAGE,
    decode_instruction,
    decode_program,
    encode_replies,
    encode_reply,
)
from collabfl.kernel.flat import FlatModel
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.robust import graph_aggregates
from collabfl.strategies.verbs import Collaborate, Evaluate, Gradient
from tests.test_node_binding import flower_task  # noqa: F401  (autouse fixture)


class AnsweringGrid:
    """Nodes 10, 11, 12 answer at once with what ``answer`` makes of (client, step)."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.replies: dict[str, Message] = {}

    def get_node_ids(self) -> list[int]:
        return [10, 11, 12]

    def push_messages(self, messages: list[Message]) -> list[str]:
        for message in messages:
            message.metadata.__dict__["_message_id"] = message.object_id
            client = message.metadata.dst_node_id - 10
            if message.metadata.message_type == PROGRAM_MESSAGE:
                steps = decode_program(message.content)
                content = encode_replies([self.answer(client, s) for s in steps])
            else:
                content = encode_reply(self.answer(client, decode_instruction(message.content)))
            self.replies[message.metadata.message_id] = Message(content, reply_to=message)
        return [m.metadata.message_id for m in messages]

    def pull_messages(self, ids: list[str]) -> list[Message]:
        return [self.replies.pop(i) for i in ids if i in self.replies]


def _send(lies: Mapping[int, Reply], instruction: Instruction):
    """Send ``instruction`` to three members; clients in ``lies`` answer with their lie,
    the others honestly. Returns the replies and the events."""
    honest = Reply(ClientMetrics(val_acc=0.8, val_loss=0.5, train_loss=0.4))
    ledger = FakeLedger()
    pool = FlowerClientPool(
        AnsweringGrid(lambda client, step: lies.get(client, honest)),
        [Member(k, 10 + k, f"h:{k}", 100) for k in range(3)],
        ledger,
    )
    replies = pool.send(dict.fromkeys(range(3), instruction))
    return replies, [(e.kind, e.client_id, e.message) for e in ledger.events]


@pytest.mark.parametrize(
    ("lie", "named"),
    [
        (ClientMetrics(val_acc=7.0), "val_acc 7"),
        (ClientMetrics(test_acc=-0.1), "test_acc -0.1"),
        (ClientMetrics(disc_acc=(0.5, 1.5)), "disc_acc 1.5"),
        (ClientMetrics(val_loss=-1.0), "val_loss -1"),
        (ClientMetrics(train_loss=math.nan), "train_loss nan"),
        (ClientMetrics(loss=math.inf), "loss inf"),
    ],
)
def test_a_metric_outside_its_domain_is_refused_and_recorded(lie, named):
    replies, events = _send({0: Reply(lie)}, Instruction(0, Evaluate()))
    assert sorted(replies) == [1, 2]  # the liar is absent from the step
    [anomaly] = [e for e in events if e[0] == "anomaly"]
    assert anomaly[1] == 0 and named in anomaly[2], anomaly


@pytest.mark.parametrize(
    ("vector", "named"),
    [
        (torch.tensor([0.0, math.nan, 0.0, 0.0]), "not finite"),
        (torch.tensor([0.0, 2e4, 0.0, 0.0]), "magnitude 2e+04"),
        (torch.zeros(5), "5 values, the step carried 4"),
    ],
)
def test_a_gradient_that_is_not_finite_too_large_or_of_the_wrong_size_is_refused(vector, named):
    step = Instruction(0, Gradient("val"), torch.zeros(4))
    lie = Reply(ClientMetrics(loss=0.3, samples=10), vector)
    replies, events = _send({2: lie}, step)
    assert sorted(replies) == [0, 1]
    [anomaly] = [e for e in events if e[0] == "anomaly"]
    assert anomaly[1] == 2 and named in anomaly[2], anomaly


TARGET = torch.linspace(-1.0, 1.0, 50)
"""The model every honest client's training converges to (a stand-in for a trained model)."""


def test_a_collaborator_the_step_did_not_offer_is_refused():
    """DPFL offers (and grants) a client the peers it reported choosing: naming others would
    get it grants to their models."""
    step = Instruction(1, Collaborate("greedy", (1,), (100.0,), None))
    replies, events = _send({0: Reply(ClientMetrics(chosen=(1, 2)))}, step)
    assert sorted(replies) == [1, 2]
    [anomaly] = [e for e in events if e[0] == "anomaly"]
    assert anomaly[1] == 0 and "refused chosen peers [2]" in anomaly[2], anomaly


class SyntheticClients:
    """Five clients whose TRAIN uploads the target plus their own small noise, and whose
    EVALUATE reports how close the model sent is to the target (1: on it); client 0 uploads
    the honest model scaled to just under the 1e4 magnitude limit of the coordinator's
    checks (a finite, in-bounds lie that passes apps/reply_checks.py)."""

    sample_counts = dict.fromkeys(range(5), 100)

    def send(self, instructions):
        replies = {}
        for k, instruction in instructions.items():
            if isinstance(instruction.task, Evaluate):
                distance = float((instruction.model - TARGET).norm())
                replies[k] = Reply(ClientMetrics(test_acc=1.0 / (1.0 + distance)))
                continue
            noise = torch.randn(TARGET.shape, generator=torch.Generator().manual_seed(k)) * 0.01
            upload = TARGET + noise
            if k == 0:
                upload = upload * (9_999.0 / float(upload.abs().max()))
            replies[k] = Reply(ClientMetrics(train_loss=0.1), upload)
            assert refusal(replies[k], instruction) is None
        return replies


WORKSPACE = FlatModel(torch.nn.Linear(1, 1))
"""FedAvg's builder takes the shared model; these clients do not use it."""


def _fedavg_under_attack(*aggregation: str) -> float:
    """The honest clients' mean closeness to the target after 3 FedAvg rounds."""
    config = load_config(None, ["rounds=3", *aggregation])
    method = build_method(
        parse_method_spec("fedavg", config), SyntheticClients.sample_counts, WORKSPACE
    )
    outcomes = list(method.rounds(SyntheticClients(), config.rounds))
    final = outcomes[-1].metrics
    return sum(final[k].test_acc for k in range(1, 5)) / 4


def test_fedavg_collapses_under_a_scaled_upload_with_the_mean_and_holds_with_a_robust_rule():
    assert _fedavg_under_attack() < 1e-3  # the mean sits thousands away from the target
    for rule in ("rule=median", "rule=trimmed_mean", "clip_norm=1"):
        assert _fedavg_under_attack(f"aggregation.{rule}") > 0.5, rule


def test_aggregation_section_is_checked():
    assert validate_config({"aggregation": {"rule": "median"}}).aggregation.rule == "median"
    for bad in ({"rule": "mode"}, {"clip_norm": 0}, {"trim": 0.5}):
        with pytest.raises(ConfigError, match="aggregation"):
            validate_config({"aggregation": bad})


def _pfedgraph_under_attack(*aggregation: str) -> float:
    """The honest clients' mean closeness to the target after 3 pFedGraph rounds: each is
    sent its own graph-weighted aggregate."""
    config = load_config(None, ["rounds=3", *aggregation])
    workspace = FlatModel(torch.nn.Linear(49, 1))  # as many parameters as TARGET
    method = build_method(
        parse_method_spec("pfedgraph", config), SyntheticClients.sample_counts, workspace
    )
    outcomes = list(method.rounds(SyntheticClients(), config.rounds))
    final = outcomes[-1].metrics
    return sum(final[k].test_acc for k in range(1, 5)) / 4


def test_pfedgraph_aggregates_hold_under_a_scaled_upload_with_a_robust_rule():
    """pFedGraph weighs uploads by its graph, not by sample count: a scaled honest update
    is as similar (cosine) to the others as theirs, so the mean drags every aggregate."""
    assert _pfedgraph_under_attack() < 1e-3
    for rule in ("rule=median", "rule=trimmed_mean", "clip_norm=1"):
        assert _pfedgraph_under_attack(f"aggregation.{rule}") > 0.5, rule


def test_graph_weighted_median_and_trimmed_mean_follow_the_weight_mass():
    models = np.array([[0.0], [1.0], [2.0], [3.0], [1000.0]])
    weights = np.array([[0.2] * 5, [0.6, 0.1, 0.1, 0.1, 0.1]])
    assert graph_aggregates(weights, models, "median", 0.2).ravel().tolist() == [2.0, 0.0]
    trimmed = graph_aggregates(weights, models, "trimmed_mean", 0.2).ravel()
    # row 1 keeps 0.4 of the 0 (0.2 cut below), the 1 and the 2; 3 and 1000 are cut above
    assert trimmed.tolist() == pytest.approx([2.0, 0.5])
    assert graph_aggregates(weights, models, "mean", 0.2).ravel().tolist() == pytest.approx(
        (weights @ models).ravel().tolist()
    )
