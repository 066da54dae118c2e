"""A participant: its private data, its models, and the verbs the coordinator may ask for.

A ``ClientNode`` is method-agnostic: methods differ only in which instructions the
coordinator sends (strategies/). The same node class serves the in-process runtime and,
wrapped by a Flower ClientApp, a real federation.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from collabfl.client.data import ArrayDataset, ClientData
from collabfl.client.discriminator import (
    accuracies,
    discriminator_numel,
    initial_discriminator,
    labelled_features,
    penultimate_features,
    sgd_step,
)
from collabfl.client.peers import ModelPublisher, PeerFetcher
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.training import TensorData, TrainingConfig, evaluate, train
from collabfl.strategies.greedy import bggc
from collabfl.strategies.pfedgraph import poison
from collabfl.strategies.protocol import ConfigValue, Instruction, Reply, Verb
from collabfl.strategies.streaming import streaming_average


@dataclass(frozen=True)
class ClientSplits:
    """A client's private data on the compute device."""

    train: TensorData
    val: TensorData
    test: TensorData
    malicious: bool = False

    @classmethod
    def from_data(cls, data: ClientData, device: torch.device) -> ClientSplits:
        """Move a client's arrays to ``device`` once, before any round."""

        def tensors(split: ArrayDataset) -> TensorData:
            return TensorData(
                torch.as_tensor(split.x, dtype=torch.float32, device=device),
                torch.as_tensor(split.y, dtype=torch.long, device=device),
            )

        return cls(tensors(data.train), tensors(data.val), tensors(data.test), data.malicious)


@dataclass(frozen=True)
class DiscriminatorData:
    """A client's discriminator inputs (features with one-hot labels): train and held-out."""

    train: torch.Tensor
    held_out: torch.Tensor


@dataclass
class BestModel:
    """The best-validation model of one slot so far (DPFL's reported model)."""

    val_acc: float = -1.0
    val_loss: float = float("inf")
    test_acc: float = float("nan")
    round: int = -1
    vector: torch.Tensor | None = None


class ClientNode:
    """Executes coordinator instructions on one client's data and models.

    Models live in named slots ("model", "global", "personal", ...) as flat vectors; one
    shared ``workspace`` module does the compute, so a process can host many clients.
    """

    def __init__(
        self,
        client_id: int,
        data: ClientSplits,
        workspace: FlatModel,
        initial_model: torch.Tensor,
        training: TrainingConfig,
        seed: int,
        publisher: ModelPublisher,
        fetcher: PeerFetcher,
    ) -> None:
        self.client_id = client_id
        self.data = data
        self.workspace = workspace
        self.initial_model = initial_model
        self.training = training
        self.seed = seed
        self.publisher = publisher
        self.fetcher = fetcher
        self.slots: dict[str, torch.Tensor] = {}
        self.best: dict[str, BestModel] = {}
        self._discriminator_data: dict[tuple[str, int], DiscriminatorData] = {}

    @property
    def num_samples(self) -> int:
        return len(self.data.train)

    def handle(self, instruction: Instruction) -> Reply:
        """Run one instruction and return the reply for the coordinator."""
        handlers: dict[Verb, Callable[[Instruction], Reply]] = {
            Verb.TRAIN: self._train,
            Verb.COLLABORATE: self._collaborate,
            Verb.EVALUATE: self._evaluate,
            Verb.DISCRIMINATE: self._discriminate,
            Verb.GRADIENT: self._gradient,
        }
        verb = Verb(instruction.verb)
        fetch_before = self.fetcher.stats.fetch_seconds
        started = time.perf_counter()
        reply = handlers[verb](instruction)
        timing: dict[str, ConfigValue] = {f"{verb.value}_s": time.perf_counter() - started}
        if verb is Verb.COLLABORATE:
            timing["fetch_s"] = self.fetcher.stats.fetch_seconds - fetch_before
        return Reply({**reply.metrics, **timing}, reply.model)

    def slot(self, name: str) -> torch.Tensor:
        """The model in slot ``name``; a slot starts as the shared initial model."""
        if name not in self.slots:
            self.slots[name] = self.initial_model
        return self.slots[name]

    def _receive(self, instruction: Instruction, default_slot: str) -> None:
        if instruction.model is not None:
            into = str(instruction.config.get("model_into", default_slot))
            self.slots[into] = torch.as_tensor(instruction.model).to(self.workspace.vector.device)

    def _train(self, instruction: Instruction) -> Reply:
        config = instruction.config
        slot = str(config.get("slot", "model"))
        self._receive(instruction, slot)
        if "from_best" in config:
            self.slots[slot] = self._best_vector(str(config["from_best"]))
        start = self.slot(slot)
        prox_mu = float(config.get("prox_mu", 0.0))
        prox_slot = config.get("prox_slot")
        prox_ref = self.slot(str(prox_slot)) if prox_slot else start
        align_lam = float(config.get("align_lam", 0.0))
        align_to = None
        if align_lam > 0:
            align_to = self.slot(str(config["align_slot"]))
            if config.get("align_mode", "normalized") == "cosine":
                align_to = align_to / align_to.norm().clamp_min(1e-12)
        self.workspace.load(start)
        loss = train(
            self.workspace,
            self.data.train,
            float(config["epochs"]),
            self.training,
            self._generator(instruction.round, slot),
            prox_mu=prox_mu,
            prox_ref=prox_ref if prox_mu > 0 else None,
            align_lam=align_lam,
            align_to=align_to,
        )
        self.slots[slot] = self.workspace.get()
        if config.get("publish", False):
            self.publisher.publish(self.client_id, instruction.round, self.slots[slot])
        upload = self.slots[slot] if config.get("upload", False) else None
        if upload is not None and config.get("attack"):
            upload = self._poisoned(upload, str(config["attack"]), instruction.round)
        return Reply({"train_loss": loss, "num_samples": self.num_samples}, upload)

    def _poisoned(self, vector: torch.Tensor, attack: str, round_index: int) -> torch.Tensor:
        """A model-poisoning client's upload (simulated attacks of the pFedGraph paper)."""
        rng = np.random.default_rng([self.seed, self.client_id, round_index, 5])
        poisoned = poison(vector.detach().cpu().numpy(), attack, rng)  # type: ignore[arg-type]
        return torch.as_tensor(poisoned, dtype=torch.float32, device=vector.device)

    def _collaborate(self, instruction: Instruction) -> Reply:
        config = instruction.config
        slot = str(config.get("slot", "model"))
        candidates = [int(j) for j in config["candidates"]]
        weights = dict(zip(candidates, (float(w) for w in config["weights"]), strict=True))
        budget = None if int(config["budget"]) < 0 else int(config["budget"])
        search = str(config["search"])
        rng = np.random.default_rng([self.seed, self.client_id, instruction.round, 1])

        def load(ids):
            return self.fetcher.hold(ids, instruction.round, limit=budget)

        own, own_weight = self.slot(slot), float(self.num_samples)
        evaluations = 0
        if search == "greedy":
            selection = bggc(
                own, own_weight, candidates, weights, load, self._val_loss, budget, budget, rng
            )
            aggregate, chosen = selection.aggregate, selection.chosen
            evaluations = selection.reward_evaluations
        elif search in ("random", "none"):
            if search == "random":
                size = len(candidates) if budget is None else min(budget, len(candidates))
                candidates = [int(j) for j in rng.choice(candidates, size=size, replace=False)]
            aggregate, chosen = streaming_average(
                own, own_weight, candidates, weights, load, budget
            )
        else:
            raise ValueError(f"unknown search {search!r}; expected greedy, random or none")
        if config.get("assign", True):
            self.slots[slot] = aggregate
        metrics: dict[str, ConfigValue] = {
            "chosen": chosen,
            "num_collaborators": len(chosen),
            "reward_evaluations": evaluations,
            "skipped_peers": self.fetcher.take_skipped(),
        }
        return Reply(metrics)

    def _evaluate(self, instruction: Instruction) -> Reply:
        config = instruction.config
        slot = str(config.get("slot", "model"))
        self._receive(instruction, slot)
        self.workspace.load(self.slot(slot))
        batch = self.training.eval_batch_size
        val_loss, val_acc = evaluate(self.workspace, self.data.val, batch)
        test_loss, test_acc = evaluate(self.workspace, self.data.test, batch)
        best = self.best.setdefault(slot, BestModel())
        if (val_acc, -val_loss) > (best.val_acc, -best.val_loss):
            best.val_acc, best.val_loss, best.test_acc = val_acc, val_loss, test_acc
            best.round = instruction.round
            best.vector = self.slots[slot] if config.get("keep_best", False) else None
        stats = self.fetcher.take_stats()
        return Reply(
            {
                "val_loss": val_loss,
                "val_acc": val_acc,
                "test_loss": test_loss,
                "test_acc": test_acc,
                "best_val_acc": best.val_acc,
                "best_test_acc": best.test_acc,
                "bytes_fetched": stats.bytes_fetched,
                "peak_peer_models": stats.peak_resident,
                "fetch_failures": stats.failures,
                "malicious": self.data.malicious,
            }
        )

    def _discriminate(self, instruction: Instruction) -> Reply:
        config = instruction.config
        peers = [int(j) for j in config["peers"]]
        targets = torch.tensor([float(t) for t in config["targets"]])
        hidden = int(config["hidden"])
        data = self._discriminator_inputs(str(config["features"]), int(config["samples"]))
        targets = targets.to(data.train.device)
        in_dim = data.train.shape[1]
        if instruction.model is None:
            weights = torch.stack([self._fresh_discriminator(j, in_dim, hidden) for j in peers]).to(
                data.train.device
            )
        else:
            received = torch.as_tensor(instruction.model, dtype=torch.float32)
            expected = len(peers) * discriminator_numel(in_dim, hidden)
            if received.ndim != 1 or received.numel() != expected:
                raise ValueError(
                    f"expected {len(peers)} discriminators of {in_dim} inputs "
                    f"({expected} values), got shape {tuple(received.shape)}"
                )
            weights = received.view(len(peers), -1).to(data.train.device)
        held_out = accuracies(weights, data.held_out, targets, hidden)
        generator = self._generator(instruction.round, f"discriminate:{config['step']}")
        batch = min(int(config["batch_size"]), data.train.shape[0])
        for _ in range(int(config["local_steps"])):
            rows = torch.randperm(data.train.shape[0], generator=generator)[:batch]
            weights = sgd_step(weights, data.train[rows], targets, float(config["lr"]), hidden)
        metrics: dict[str, ConfigValue] = {
            "disc_acc": [float(a) for a in held_out],
            "disc_held_out": int(data.held_out.shape[0]),
        }
        return Reply(metrics, weights.reshape(-1))

    def _gradient(self, instruction: Instruction) -> Reply:
        """Mean cross-entropy of the attached model on a split, and its flat gradient.

        Float buffers have no gradient; their entries are zero (no model in the zoo has any).
        """
        if instruction.model is None:
            raise ValueError("a gradient instruction must carry the model to differentiate")
        config = instruction.config
        split = str(config["split"])
        if split not in ("train", "val"):
            raise ValueError(f"gradient split must be 'train' or 'val', got {split!r}")
        data = self.data.train if split == "train" else self.data.val
        if len(data) == 0:
            raise ValueError(f"client {self.client_id} has no {split} samples")
        self.workspace.load(torch.as_tensor(instruction.model, dtype=torch.float32))
        rows = torch.arange(len(data), device=data.y.device)
        batch = int(config.get("batch_size", 0))
        if split == "train" and 0 < batch < len(data):
            generator = self._generator(instruction.round, f"gradient:{config.get('step', 0)}")
            rows = torch.randperm(len(data), generator=generator)[:batch].to(data.y.device)
        module = self.workspace.module
        module.train(split == "train")
        self.workspace.grad.zero_()
        total = torch.zeros((), device=data.y.device)
        chunk = self.training.eval_batch_size
        for start in range(0, len(rows), chunk):
            index = rows[start : start + chunk]
            loss = F.cross_entropy(module(data.x[index]), data.y[index], reduction="sum")
            (loss / len(rows)).backward()
            total += loss.detach()
        gradient = torch.zeros_like(self.workspace.vector)
        gradient[: self.workspace.num_parameters] = self.workspace.grad
        metrics: dict[str, ConfigValue] = {"loss": float(total) / len(rows), "samples": len(rows)}
        return Reply(metrics, gradient)

    def _discriminator_inputs(self, features: str, samples: int) -> DiscriminatorData:
        """Train and held-out discriminator inputs, built once per (features, samples).

        The first ``samples`` of a seeded shuffle of the train split train the discriminator
        (FedCollab uses the same count on every client); the rest of it and the validation
        split are held out.
        """
        key = (features, samples)
        if key not in self._discriminator_data:
            train, val = self.data.train, self.data.val
            if not 1 <= samples < len(train):
                raise ValueError(
                    f"client {self.client_id} has {len(train)} train samples; "
                    f"cannot train a discriminator on {samples} and hold out the rest"
                )
            order = torch.randperm(len(train), generator=self._generator(0, "discriminator"))
            order = order.to(train.y.device)
            x = torch.cat([train.x[order], val.x])
            y = torch.cat([train.y[order], val.y])
            self.workspace.load(self.initial_model)
            with torch.no_grad():
                num_classes = int(self.workspace.module(x[:1]).shape[-1])
            if features == "initial_model":
                x = penultimate_features(self.workspace.module, x, self.training.eval_batch_size)
            elif features != "raw":
                raise ValueError(f"unknown discriminator features {features!r}")
            inputs = labelled_features(x, y, num_classes)
            self._discriminator_data[key] = DiscriminatorData(inputs[:samples], inputs[samples:])
        return self._discriminator_data[key]

    def _fresh_discriminator(self, peer: int, in_dim: int, hidden: int) -> torch.Tensor:
        """Both clients of a pair derive the same initial weights from (seed, pair)."""
        first, second = sorted((self.client_id, peer))
        state = np.random.SeedSequence([self.seed, first, second, 7]).generate_state(2)
        generator = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
        return initial_discriminator(in_dim, hidden, generator)

    def _val_loss(self, vector: torch.Tensor) -> float:
        """F_k^V: the reward GGC maximises is minus this."""
        self.workspace.load(vector)
        loss, _ = evaluate(self.workspace, self.data.val, self.training.eval_batch_size)
        return loss

    def _best_vector(self, slot: str) -> torch.Tensor:
        best = self.best.get(slot)
        if best is None or best.vector is None:
            raise RuntimeError(
                f"client {self.client_id} kept no best model for slot {slot!r}; "
                "evaluate it with keep_best=True first"
            )
        return best.vector

    def _generator(self, round_index: int, slot: str) -> torch.Generator:
        """Batch-order randomness that depends only on (seed, client, round, slot)."""
        entropy = [self.seed, self.client_id, round_index, zlib.crc32(slot.encode())]
        state = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
        return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
