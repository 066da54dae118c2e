"""The typed protocol on the wire: every verb, the reply metrics and the set-up exchange
through the one validating codec (strategies.wire) and the Flower message codec."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, RecordDict

from collabfl.apps.run_setup import (
    Description,
    RunSettings,
    decode_description,
    decode_settings,
    encode_description,
    encode_settings,
)
from collabfl.engine.recording import ROW_KEYS
from collabfl.flower.codec import (
    decode_instruction,
    decode_reply,
    encode_instruction,
    encode_reply,
)
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.rounds import merge_metrics
from collabfl.strategies.verbs import (
    TASK_TYPES,
    Collaborate,
    Discriminate,
    Evaluate,
    Gradient,
    Task,
    Train,
    Verb,
)
from collabfl.strategies.wire import decode, encode


def _slot(rng: np.random.Generator) -> str:
    return str(rng.choice(["model", "global", "personal", "warm up", "ü"]))


def _maybe(rng: np.random.Generator, value: object) -> object:
    return value if rng.random() < 0.5 else None


def random_task(verb: Verb, rng: np.random.Generator) -> Task:
    """A valid task of ``verb`` with every field drawn at random."""
    if verb is Verb.TRAIN:
        align = float(rng.choice([0.0, rng.random()]))
        return Train(
            epochs=float(rng.choice([0, 1, rng.random() * 5])),
            slot=_slot(rng),
            model_into=_maybe(rng, _slot(rng)),
            from_best=_maybe(rng, _slot(rng)),
            prox_mu=float(rng.random()),
            prox_slot=_maybe(rng, _slot(rng)),
            align_lam=align,
            align_slot=_slot(rng) if align else _maybe(rng, _slot(rng)),
            align_mode=str(rng.choice(["normalized", "cosine"])),
            publish=bool(rng.random() < 0.5),
            upload=bool(rng.random() < 0.5),
            attack=_maybe(rng, str(rng.choice(["shuffle", "all_ones", "sign_flip", "gaussian"]))),
        )
    if verb is Verb.COLLABORATE:
        count = int(rng.integers(0, 6))
        candidates = tuple(int(j) for j in rng.permutation(50)[:count])
        attached = rng.random() < 0.5
        return Collaborate(
            search=str(rng.choice(["greedy", "random", "none"])),
            candidates=candidates,
            weights=tuple(float(w) for w in rng.integers(1, 1000, count)),
            budget=_maybe(rng, int(rng.integers(0, 10))),
            slot=_slot(rng),
            assign=bool(rng.random() < 0.5),
            step=_maybe(rng, int(rng.integers(0, 100))),
            peer_addresses=tuple(f"10.0.0.{j}:7000" for j in candidates) if attached else (),
            peer_grants=tuple(bytes(rng.bytes(16)) for _ in candidates) if attached else (),
        )
    if verb is Verb.EVALUATE:
        return Evaluate(slot=_slot(rng), keep_best=bool(rng.random() < 0.5))
    if verb is Verb.DISCRIMINATE:
        count = int(rng.integers(1, 6))
        return Discriminate(
            peers=tuple(int(j) for j in rng.permutation(50)[:count]),
            targets=tuple(int(t) for t in rng.integers(0, 2, count)),
            samples=int(rng.integers(1, 500)),
            step=int(rng.integers(0, 200)),
            local_steps=int(rng.integers(0, 20)),
            lr=float(rng.random() + 1e-3),
            batch_size=int(rng.integers(1, 64)),
            hidden=int(rng.integers(1, 300)),
            features=str(rng.choice(["raw", "initial_model"])),
        )
    return Gradient(
        split=str(rng.choice(["train", "val"])),
        batch_size=int(rng.integers(0, 64)),
        step=int(rng.integers(0, 1000)),
    )


@pytest.mark.parametrize("verb", list(Verb))
def test_every_verb_survives_the_round_trip(verb):
    rng = np.random.default_rng(list(Verb).index(verb))
    for _ in range(200):
        task = random_task(verb, rng)
        assert task.verb is verb
        assert decode(type(task), encode(task)) == task
        model = None if verb is not Verb.GRADIENT and rng.random() < 0.5 else torch.randn(7)
        instruction = Instruction(int(rng.integers(0, 1000)), task, model)
        again = decode_instruction(encode_instruction(instruction))
        assert (again.round, again.task, again.verb) == (instruction.round, task, verb)
        assert (again.model is None) == (model is None)
        if model is not None:
            assert torch.equal(again.model, model)


def test_none_is_never_on_the_wire():
    task = Train(epochs=1.0)
    record = encode(task)
    assert None not in record.values()
    assert not {"model_into", "from_best", "prox_slot", "align_slot", "attack"} & set(record)
    assert record["epochs"] == 1.0 and isinstance(record["epochs"], float)


@pytest.mark.parametrize("budget", [None, 0, 3])
def test_a_budget_has_one_encoding(budget):
    task = Collaborate("greedy", (1, 2), (10.0, 20.0), budget=budget)
    record = encode(task)
    assert ("budget" in record) == (budget is not None)
    if budget is not None:
        assert record["budget"] == budget
    assert decode(Collaborate, record).budget == budget
    sent = decode_instruction(encode_instruction(Instruction(4, task)))
    assert sent.task == task


def test_the_old_unlimited_sentinel_is_refused():
    record = encode(Collaborate("greedy", (1,), (1.0,)))
    with pytest.raises(ValueError, match=r"Collaborate: budget must be >= 0 or None"):
        decode(Collaborate, {**record, "budget": -1})


@pytest.mark.parametrize(
    ("cls", "change", "message"),
    [
        (Train, {"epoch": 1.0}, r"Train: unknown field 'epoch'"),
        (Train, {"epochs": None}, r"Train: missing required field 'epochs'"),
        (Train, {"epochs": "1"}, r"Train\.epochs: expected float, got str"),
        (Train, {"publish": 1}, r"Train\.publish: expected bool, got int"),
        (Train, {"align_mode": "sideways"}, r"Train\.align_mode: 'sideways' is not one of"),
        (Collaborate, {"candidates": [1, "2"]}, r"Collaborate\.candidates\[1\]: expected int"),
        (Collaborate, {"candidates": 1}, r"Collaborate\.candidates: expected a list"),
        (Collaborate, {"budget": True}, r"Collaborate\.budget: expected int, got bool"),
        (Collaborate, {"weights": [1.0]}, r"Collaborate: 1 weights for 2 candidates"),
        (Discriminate, {"hidden": 2.0}, r"Discriminate\.hidden: expected int, got float"),
        (Discriminate, {"targets": [2]}, r"Discriminate: targets must be 0 or 1"),
        (Gradient, {"split": "test"}, r"Gradient\.split: 'test' is not one of"),
        (ClientMetrics, {"chosen": [1.5]}, r"ClientMetrics\.chosen\[0\]: expected int"),
        (ClientMetrics, {"accuracy": 0.5}, r"ClientMetrics: unknown field 'accuracy'"),
    ],
)
def test_bad_records_name_the_class_and_field(cls, change, message):
    examples = {
        Train: Train(epochs=1.0),
        Collaborate: Collaborate("greedy", (1, 2), (1.0, 1.0)),
        Discriminate: Discriminate((1,), (0,), 10, 0, 1, 0.1, 8, 4),
        Gradient: Gradient("val"),
        ClientMetrics: ClientMetrics(chosen=(1,)),
    }
    record: dict[str, object] = {**encode(examples[cls]), **change}
    record = {k: v for k, v in record.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        decode(cls, record)


def test_encoding_refuses_what_a_record_cannot_hold():
    with pytest.raises(ValueError, match=r"Evaluate\.slot: expected str, got int"):
        encode(Evaluate(slot=3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ClientMetrics\.importers: expected int, got int64"):
        encode(ClientMetrics(importers=np.int64(2)))  # type: ignore[arg-type]


def test_malformed_messages_are_value_errors():
    content = encode_instruction(Instruction(1, Evaluate()))
    content["config"] = ConfigRecord({**content["config"], "_verb": "dance"})
    with pytest.raises(ValueError, match="unknown verb 'dance'"):
        decode_instruction(content)
    with pytest.raises(ValueError, match="no 'config'"):
        decode_instruction(RecordDict({}))
    with pytest.raises(ValueError, match="no 'metrics'"):
        decode_reply(RecordDict({}))
    gradient = encode_instruction(Instruction(0, Gradient("val"), torch.zeros(3)))
    del gradient["model"]
    with pytest.raises(ValueError, match="must carry the model"):
        decode_instruction(gradient)


def test_reply_metrics_and_vector_survive_the_round_trip():
    metrics = ClientMetrics(
        train_loss=0.25,
        malicious=False,
        imports=(3, 1),
        paid_to=(0.5, 1.5),
        chosen=(),
        skipped_peers=("peer 3: gone",),
        disc_acc=(1.0, 0.0),
        best_test_acc=math.inf,
    )
    reply = Reply(metrics, torch.arange(5, dtype=torch.float32))
    again = decode_reply(encode_reply(reply))
    assert again.metrics == metrics
    assert torch.equal(again.model, reply.model)
    assert decode_reply(encode_reply(Reply())).metrics == ClientMetrics()


@pytest.mark.parametrize(
    "model", [np.ones(3, dtype=np.float32), torch.ones(3, 1), torch.ones(3).double()]
)
def test_only_flat_float32_vectors_cross_the_seam(model):
    with pytest.raises((TypeError, ValueError), match=r"1-D float32|torch\.Tensor"):
        Reply(ClientMetrics(loss=1.0), model)
    with pytest.raises((TypeError, ValueError), match=r"1-D float32|torch\.Tensor"):
        Instruction(0, Evaluate(), model)


def test_recorded_metrics_are_the_metrics_jsonl_columns():
    assert ROW_KEYS == (
        "train_loss",
        "val_loss",
        "val_acc",
        "test_loss",
        "test_acc",
        "best_val_acc",
        "best_test_acc",
        "best_candidate",
        "local_val_acc",
        "local_test_acc",
        "bytes_fetched",
        "peak_peer_models",
        "num_collaborators",
        "reward_evaluations",
        "fetch_failures",
        "malicious",
        "train_s",
        "collaborate_s",
        "fetch_s",
        "evaluate_s",
        "gain",
        "sharing_cost",
        "payment",
        "utility",
        "importers",
        "imports",
        "paid_to",
        "coalition",
    )
    assert set(ROW_KEYS) < {f.name for f in fields(ClientMetrics)}


def test_merge_keeps_the_last_clients_and_lets_later_replies_win():
    trained = {0: Reply(ClientMetrics(train_loss=1.0, num_samples=5)), 1: Reply()}
    evaluated = {0: Reply(ClientMetrics(test_acc=0.5, train_loss=2.0))}
    assert merge_metrics(trained, evaluated) == {
        0: ClientMetrics(train_loss=2.0, num_samples=5, test_acc=0.5)
    }
    later_unset = {0: Reply(ClientMetrics(test_acc=0.75))}
    assert merge_metrics(evaluated, later_unset)[0] == ClientMetrics(test_acc=0.75, train_loss=2.0)


def test_every_verb_has_its_task_type():
    assert {verb: cls.verb for verb, cls in TASK_TYPES.items()} == {v: v for v in Verb}


def test_setup_exchange_round_trip():
    settings = RunSettings("run-1", 3, "mnist1d_cnn", "cpu", 2, TrainingConfig(lr=0.1))
    assert decode_settings(encode_settings(settings)) == settings
    described = Description(4, 120, 10, "127.0.0.1:7001", cost=0.5)
    assert decode_description(encode_description(described)) == described
    assert described.market == {"cost": 0.5}
    with pytest.raises(ValueError, match="Description: missing required field 'num_samples'"):
        decode_description(RecordDict({"description": ConfigRecord({"client_id": 4})}))
    unchanged = replace(described, eagerness=None, cost=None)
    assert decode_description(encode_description(unchanged)).market == {}
