"""How a run's setting is named in titles: dataset, number of clients, partition.

Light on purpose (no plotting): a federation's data files carry the partition's name too,
so that a federation's records describe the data its participants actually brought.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from collabfl.client.data.opening import OWN_LOADER


def dataset_text(data: Mapping[str, Any]) -> str:
    """The dataset a caption names: the ``data.source`` factory when there is one."""
    return str(data.get("source") or data.get("dataset"))


def partition_text(data: Mapping[str, Any]) -> str:
    """A config's ``data`` partition as a caption names it ("Dirichlet α=0.1", "IID"); a
    partition already named so (a federation's, from its data files) as it is."""
    if data.get("source"):
        return OWN_LOADER
    scheme = data.get("partition", "")
    return {
        "dirichlet": f"Dirichlet α={data.get('alpha')}",
        "pathological": f"{data.get('classes_per_client')} classes per client",
        "iid": "IID",
    }.get(scheme, str(scheme).replace("_", " "))


def setting_title(config: Mapping[str, Any], method: str | None = None) -> str:
    """The setting a figure shows, as a paper's caption names it: dataset, N, partition."""
    data = config.get("data") or {}
    if not data:
        return method or ""
    setting = f"{dataset_text(data)}, N={data.get('num_clients')}, {partition_text(data)}"
    return f"{method}: {setting}" if method else setting


def seeds_text(configs: Sequence[Mapping[str, Any]]) -> str:
    """ ", seed 0" or ", seeds 0, 1": which seed(s) the figure's runs are, so a seed's
    figure is never taken for another's or for the aggregate; "" when none is recorded."""
    seeds = sorted({int(c["seed"]) for c in configs if c.get("seed") is not None})
    if not seeds:
        return ""
    return f", seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
