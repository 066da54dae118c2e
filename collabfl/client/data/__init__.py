"""Datasets, partitions and per-client data.

``load_pool`` gives a whole dataset, ``make_partition`` decides which samples each client
holds (index arrays only, saved with ``Partition.save``), and ``client_datasets`` turns the
two into every client's train/validation/test arrays.
"""

from .arrays import ArrayDataset, DataPool
from .clients import ClientData, client_datasets
from .partition import SCHEMES, make_partition, true_groups
from .pools import POOLS, load_pool
from .splits import ClientSplit, Partition

__all__ = [
    "POOLS",
    "SCHEMES",
    "ArrayDataset",
    "ClientData",
    "ClientSplit",
    "DataPool",
    "Partition",
    "client_datasets",
    "load_pool",
    "make_partition",
    "true_groups",
]
