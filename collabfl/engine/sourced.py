"""Clients whose data comes from a ``data.source`` factory rather than a dataset and a
partition: checked on a sample before a run, then opened per client through the same
``load_client`` a participant daemon uses (client/data/source.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from collabfl.client.data.source import SourceError, check_model, check_sample, load_client
from collabfl.client.node import ClientSplits
from collabfl.engine.config import ConfigError, ExperimentConfig, model_name
from collabfl.kernel.models import build_model


@dataclass(frozen=True)
class SourcedData:
    """Every client's data as ``source`` gives it; no pool and no partition."""

    source: str
    num_clients: int
    num_classes: int
    val_fraction: float
    seed: int
    workers: int

    def splits(self, device: torch.device) -> list[ClientSplits]:
        """Clients 0..N-1 on ``device``, each from ``factory(client_id)``."""
        try:
            return [
                load_client(
                    self.source, k, device, self.val_fraction, self.seed, workers=self.workers
                )[0]
                for k in range(self.num_clients)
            ]
        except SourceError as error:
            raise ConfigError(str(error)) from None


def sourced_data(config: ExperimentConfig, configs: Sequence[ExperimentConfig]) -> SourcedData:
    """``config``'s clients, their factory's sample checked against each other and against
    the model of every config in ``configs`` (ConfigError in one line otherwise)."""
    source = config.data.source
    if source is None:
        raise ConfigError("data.source is not set")
    try:
        sample = check_sample(source, range(config.data.num_clients))
        for name in sorted({model_name(c) for c in configs}):
            module = build_model(name, sample.num_classes, seed=config.seed)
            check_model(source, module, sample.inputs, sample.num_classes, name)
    except ValueError as error:  # SourceError, or user code that does not import
        raise ConfigError(str(error)) from None
    data = config.data
    return SourcedData(
        source, data.num_clients, sample.num_classes, data.val_fraction, config.seed, data.workers
    )
