"""A participant: its private data, its models, and the verbs the coordinator may ask for.

A ``ClientNode`` is method-agnostic: methods differ only in which tasks the coordinator sends
(strategies/). It trains, collaborates and evaluates itself and hands the verbs that serve
one method's search to that method's client side (client/discriminator.py for FedCollab's
distances, client/gradient.py for SPO's oracle). The same node class serves the in-process
runtime and, wrapped by a Flower ClientApp, a real federation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from collabfl.client.data import ArrayDataset, ClientData
from collabfl.client.discriminator import ClientDiscriminators
from collabfl.client.gradient import GradientOracle
from collabfl.client.peers import ModelPublisher, PeerFetcher
from collabfl.client.randomness import batch_generator
from collabfl.kernel.batched_eval import CandidateModels
from collabfl.kernel.compute import Compute
from collabfl.kernel.devices import place
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.objective import DEFAULT_OBJECTIVE, Objective
from collabfl.kernel.samples import Samples, TensorData
from collabfl.kernel.training import evaluate, train
from collabfl.kernel.training_config import TrainingConfig
from collabfl.strategies.greedy import LOOKAHEAD_ROWS, bggc
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.pfedgraph import Attack, poison
from collabfl.strategies.protocol import FlatVector, Instruction, Reply, StepFailed
from collabfl.strategies.streaming import streaming_average
from collabfl.strategies.verbs import (
    BatchedRewards,
    Collaborate,
    Discriminate,
    Evaluate,
    Gradient,
    Task,
    Train,
)


@dataclass(frozen=True)
class ClientSplits:
    """A client's private data on the compute device."""

    train: Samples
    val: Samples
    test: Samples
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


@dataclass
class BestModel:
    """The best-validation model of one slot so far (DPFL's reported model)."""

    val_acc: float = -1.0
    val_loss: float = float("inf")
    test_acc: float = float("nan")
    round: int = -1
    vector: torch.Tensor | None = None
    candidate: str = "aggregate"
    """Which candidate holds the record: "local" (post-training) or "aggregate"."""
    scores_local: bool = False
    """Whether post-training models compete for this record (then the winner is reported)."""


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
        objective: Objective = DEFAULT_OBJECTIVE,
    ) -> None:
        self.client_id = client_id
        self.data = data
        self.workspace = workspace
        self.initial_model = initial_model
        self.training = training
        self.seed = seed
        self.publisher = publisher
        self.fetcher = fetcher
        self.objective = objective
        self.slots: dict[str, torch.Tensor] = {}
        self.best: dict[str, BestModel] = {}
        self._reward_subset: Samples | None = None
        self._scalers: dict[str, torch.amp.GradScaler] = {}
        self.discriminators = ClientDiscriminators(
            client_id, seed, data.train, data.val, workspace, initial_model
        )
        self.gradients = GradientOracle(
            client_id, seed, {"train": data.train, "val": data.val}, workspace, objective
        )

    @property
    def num_samples(self) -> int:
        return len(self.data.train)

    @property
    def device(self) -> torch.device:
        """Where this node's math runs: every tensor that enters it is placed here."""
        return self.workspace.vector.device

    def handle(self, instruction: Instruction) -> Reply:
        """Run one instruction and return the reply for the coordinator."""
        round_index, model = instruction.round, instruction.model
        fetch_before = self.fetcher.stats.fetch_seconds
        started = time.perf_counter()
        task = instruction.task
        reply = self._run(round_index, task, model)
        # The seconds fields are named after the verb: train_s, collaborate_s, ... What a
        # step spent evaluating (a Train's score_local) it reports as evaluate_s itself.
        elapsed = time.perf_counter() - started - (reply.metrics.evaluate_s or 0.0)
        timing: dict[str, Any] = {f"{task.verb.value}_s": elapsed}
        if isinstance(task, Collaborate):
            timing["fetch_s"] = self.fetcher.stats.fetch_seconds - fetch_before
        return Reply(replace(reply.metrics, **timing), reply.model)

    def answer(self, instruction: Instruction) -> Reply:
        """``handle``, for a runtime: an error becomes ``StepFailed``, whose text names the
        step, so the coordinator can say which step did not happen."""
        try:
            return self.handle(instruction)
        except Exception as error:
            raise StepFailed(instruction.verb, error) from error

    def _run(self, round_index: int, task: Task, model: FlatVector | None) -> Reply:
        match task:
            case Train():
                return self._train(round_index, task, model)
            case Collaborate():
                return self._collaborate(round_index, task)
            case Evaluate():
                return self._evaluate(round_index, task, model)
            case Discriminate():
                batch = self.training.eval_batch_size
                return self.discriminators.step(round_index, task, model, batch)
            case Gradient():
                assert model is not None  # an Instruction refuses a GRADIENT without one
                batch = self.training.eval_batch_size
                return self.gradients.answer(round_index, task, model, batch)
        raise ValueError(f"no client step for {type(task).__name__}")

    def slot(self, name: str) -> torch.Tensor:
        """The model in slot ``name``; a slot starts as the shared initial model."""
        if name not in self.slots:
            self.slots[name] = self.initial_model
        return self.slots[name]

    def _receive(self, model: FlatVector | None, into: str) -> None:
        if model is not None:
            self.slots[into] = place(model, self.device)

    def _train(self, round_index: int, task: Train, model: FlatVector | None) -> Reply:
        slot = task.slot
        self._receive(model, task.model_into or slot)
        if task.from_best is not None:
            self.slots[slot] = self._best_vector(task.from_best)
        start = self.slot(slot)
        prox_ref = self.slot(task.prox_slot) if task.prox_slot else start
        align_to = None
        if task.align_lam > 0 and task.align_slot is not None:
            align_to = self.slot(task.align_slot)
            if task.align_mode == "cosine":
                align_to = align_to / align_to.norm().clamp_min(1e-12)
        self.workspace.load(start)
        loss = train(
            self.workspace,
            self.data.train,
            task.epochs,
            self.training,
            self._generator(round_index, slot),
            prox_mu=task.prox_mu,
            prox_ref=prox_ref if task.prox_mu > 0 else None,
            align_lam=task.align_lam,
            align_to=align_to,
            steps=task.steps or None,
            objective=self.objective,
            scaler=self._scaler(slot),
        )
        self.slots[slot] = self.workspace.get()
        if task.publish:
            self.publisher.publish(self.client_id, round_index, self.slots[slot])
        upload = self.slots[slot] if task.upload else None
        if upload is not None and task.attack is not None:
            upload = self._poisoned(upload, task.attack, round_index)
        metrics = ClientMetrics(train_loss=loss, num_samples=self.num_samples)
        if task.score_local:
            scoring = time.perf_counter()
            _, local_val_acc, _, local_test_acc = self._score(round_index, slot, "local", False)
            metrics = replace(
                metrics,
                local_val_acc=local_val_acc,
                local_test_acc=local_test_acc,
                evaluate_s=time.perf_counter() - scoring,
            )
        return Reply(metrics, upload)

    def _scaler(self, slot: str) -> torch.amp.GradScaler | None:
        """fp16's loss scaler of ``slot``, kept from round to round: a fresh one starts at
        2^16 and skips the steps that overflow until it has come down, every round."""
        if self.training.amp != "fp16":
            return None
        if slot not in self._scalers:
            scaler = Compute.of(self.training).scaler(self.device)
            assert scaler is not None  # fp16 always has one
            self._scalers[slot] = scaler
        return self._scalers[slot]

    def _poisoned(self, vector: torch.Tensor, attack: Attack, round_index: int) -> torch.Tensor:
        """A model-poisoning client's upload (simulated attacks of the pFedGraph paper)."""
        rng = np.random.default_rng([self.seed, self.client_id, round_index, 5])
        poisoned = poison(vector.detach().cpu().numpy(), attack, rng)
        return torch.as_tensor(poisoned, dtype=torch.float32, device=vector.device)

    def _collaborate(self, round_index: int, task: Collaborate) -> Reply:
        slot, budget = task.slot, task.budget
        candidates = list(task.candidates)
        weights = dict(zip(candidates, task.weights, strict=True))
        rng = np.random.default_rng([self.seed, self.client_id, round_index, 1])
        where = self.device if task.peers_on == "device" else torch.device("cpu")

        @contextmanager
        def load(ids: Sequence[int]) -> Iterator[dict[int, torch.Tensor]]:
            """The peers' models, fetched under the budget, where ``peers_on`` keeps them (a
            model read from the network arrives on the CPU). Each replaces the fetched one
            in the fetcher's own mapping, so that no second copy stays alive."""
            with self.fetcher.hold(ids, round_index, limit=budget) as models:
                for j, model in models.items():
                    models[j] = place(model, where)
                yield models

        own, own_weight = place(self.slot(slot), where), float(self.num_samples)
        evaluations = 0
        if task.search == "greedy":
            rewarded = self._reward_split(task.reward_samples)
            selection = bggc(
                own,
                own_weight,
                candidates,
                weights,
                load,
                lambda vector: self._val_loss(vector, rewarded),
                budget,
                budget,
                rng,
                task.tie,
                scratch=self.workspace.vector,
                lookahead=self._lookahead(task.batched_rewards, rewarded),
            )
            aggregate, chosen = selection.aggregate, selection.chosen
            evaluations = selection.reward_evaluations
        else:
            if task.search == "random":
                size = len(candidates) if budget is None else min(budget, len(candidates))
                candidates = [int(j) for j in rng.choice(candidates, size=size, replace=False)]
            aggregate, chosen = streaming_average(
                own, own_weight, candidates, weights, load, budget
            )
        if task.assign:
            self.slots[slot] = place(aggregate, self.device)
        metrics = ClientMetrics(
            chosen=tuple(chosen),
            num_collaborators=len(chosen),
            reward_evaluations=evaluations,
            skipped_peers=tuple(self.fetcher.take_skipped()),
        )
        return Reply(metrics)

    def _evaluate(self, round_index: int, task: Evaluate, model: FlatVector | None) -> Reply:
        slot = task.slot
        self._receive(model, slot)
        val_loss, val_acc, test_loss, test_acc = self._score(
            round_index, slot, "aggregate", task.keep_best
        )
        best = self.best[slot]
        stats = self.fetcher.take_stats()
        metrics = ClientMetrics(
            val_loss=val_loss,
            val_acc=val_acc,
            test_loss=test_loss,
            test_acc=test_acc,
            best_val_acc=best.val_acc,
            best_test_acc=best.test_acc,
            best_candidate=best.candidate if best.scores_local else None,
            bytes_fetched=stats.bytes_fetched,
            peak_peer_models=stats.peak_resident,
            fetch_failures=stats.failures,
            malicious=self.data.malicious,
        )
        return Reply(metrics)

    def _score(
        self, round_index: int, slot: str, candidate: str, keep: bool
    ) -> tuple[float, float, float, float]:
        """Validation and test loss/accuracy of ``slot``'s model, which then competes as
        ``candidate`` for the slot's best-validation record (ties keep the earlier model)."""
        self.workspace.load(self.slot(slot))
        batch, compute = self.training.eval_batch_size, Compute.of(self.training)
        val_loss, val_acc = evaluate(
            self.workspace, self.data.val, batch, self.objective, compute=compute
        )
        test_loss, test_acc = evaluate(
            self.workspace, self.data.test, batch, self.objective, compute=compute
        )
        best = self.best.setdefault(slot, BestModel())
        best.scores_local |= candidate == "local"
        if (val_acc, -val_loss) > (best.val_acc, -best.val_loss):
            best.val_acc, best.val_loss, best.test_acc = val_acc, val_loss, test_acc
            best.round, best.candidate = round_index, candidate
            best.vector = self.slots[slot] if keep else None
        return val_loss, val_acc, test_loss, test_acc

    def _val_loss(self, vector: torch.Tensor, data: Samples) -> float:
        """F_k^V: the reward GGC maximises is minus this."""
        self.workspace.load(vector)
        batch = self.training.eval_batch_size
        loss, _ = evaluate(
            self.workspace,
            data,
            batch,
            self.objective,
            accuracy=False,
            compute=Compute.of(self.training),
        )
        return loss

    def _lookahead(self, mode: BatchedRewards, data: Samples) -> CandidateModels | None:
        """Rows for GGC's six-at-a-time rewards on the workspace's device, when ``mode``
        asks for them (``auto``: on a CUDA device only, where they pay)."""
        if mode == "off" or (mode == "auto" and self.workspace.vector.device.type != "cuda"):
            return None
        return CandidateModels(
            self.workspace,
            data,
            LOOKAHEAD_ROWS,
            self.training.eval_batch_size,
            self.objective,
            Compute.of(self.training),
            fallback=lambda vector: self._val_loss(vector, data),
        )

    def _reward_split(self, samples: int | None) -> Samples:
        """The validation samples GGC's rewards are measured on: all of them, or ``samples``
        drawn once per client (seeded by seed and client alone), so every round and runtime
        compares candidates on the same ones, in the split's order."""
        val = self.data.val
        if samples is None or samples >= len(val):
            return val
        if self._reward_subset is None or len(self._reward_subset) != samples:
            generator = batch_generator(self.seed, self.client_id, 0, "reward_samples")
            rows = torch.randperm(len(val), generator=generator)[:samples].sort().values
            self._reward_subset = val.subset(rows.to(val.y.device))
        return self._reward_subset

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
        return batch_generator(self.seed, self.client_id, round_index, slot)
