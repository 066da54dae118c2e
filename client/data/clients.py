"""Materializing a partition: each client's actual samples, with flipped labels applied."""

from __future__ import annotations

from dataclasses import dataclass

from .arrays import ArrayDataset, DataPool
from .splits import ClientSplit, Partition


@dataclass(frozen=True)
class ClientData:
    """One client's samples. ``malicious`` clients see permuted labels in every split."""

    client_id: int
    train: ArrayDataset
    val: ArrayDataset
    test: ArrayDataset
    malicious: bool


def client_datasets(pool: DataPool, partition: Partition) -> list[ClientData]:
    """Every client's datasets; ``ValueError`` if the partition was made for another pool."""
    _check_pool(pool, partition)
    return [_client(k, pool, split) for k, split in enumerate(partition.clients)]


def _client(k: int, pool: DataPool, split: ClientSplit) -> ClientData:
    train, val, test = (
        pool.train.subset(split.train),
        pool.train.subset(split.val),
        pool.test.subset(split.test),
    )
    perm = split.label_permutation
    if perm is not None:
        train, val, test = (ArrayDataset(d.x, perm[d.y]) for d in (train, val, test))
    return ClientData(client_id=k, train=train, val=val, test=test, malicious=perm is not None)


def _check_pool(pool: DataPool, partition: Partition) -> None:
    made_for = partition.meta.get("pool", {})
    actual = {
        "name": pool.name,
        "num_train": len(pool.train),
        "num_test": len(pool.test),
        "num_classes": pool.num_classes,
    }
    mismatched = [k for k, v in actual.items() if made_for.get(k) != v]
    if mismatched:
        raise ValueError(
            f"partition was made for pool {made_for} but got {actual} "
            f"(differs in {', '.join(mismatched)})"
        )
    for k, split in enumerate(partition.clients):
        for name, idx, size in (
            ("train", split.train, len(pool.train)),
            ("val", split.val, len(pool.train)),
            ("test", split.test, len(pool.test)),
        ):
            if len(idx) and (idx.min() < 0 or idx.max() >= size):
                raise ValueError(f"client {k}: {name} indices fall outside the pool (size {size})")
        perm = split.label_permutation
        if perm is not None and sorted(perm.tolist()) != list(range(pool.num_classes)):
            raise ValueError(f"client {k}: label_permutation is not a permutation of the classes")
