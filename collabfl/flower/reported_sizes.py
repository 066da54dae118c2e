"""What a real federation believes of the sample counts its members report.

A count comes from the client's own set-up reply, and every method weighs members by it
(FedAvg's and Ditto's averages, DPFL's p_j, pFedGraph's graph, FedCollab's coalition sizes,
iPFL's gains and payments). Two defences, both applied by the ServerApp: a count outside the
size the operator declared for that member (at its enrolment, ``admin invite --samples``, or
in the run config, ``federation.declared_sizes``, which wins: ``declared_sizes``) is
replaced by the declared one (the caller records an ``anomaly``), and the counts every
method reads are capped so that no member weighs more than a share of their total
(``capped_counts``, read through the pool's ``sample_counts``). The in-process runtime
trusts its clients and applies neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

MaxShare = float | Literal["auto"]

AUTO_SHARE = 0.6
"""``auto``: no member above 60 % of the total, ..."""
AUTO_EQUAL_SHARES = 3.0
"""... nor above three equal shares (3/N). MNIST-1D split by Dirichlet(0.1) gives honest
members up to about 2.6 equal shares (54 % of 3 clients, 13 % of 20), which this keeps."""


def share_cap(max_share: MaxShare, members: int) -> float:
    """The most one of ``members`` may weigh; never below an equal share (1/N), where a
    cap is met by equal weights."""
    if members < 1:
        return 1.0
    cap = min(AUTO_SHARE, AUTO_EQUAL_SHARES / members) if max_share == "auto" else max_share
    return max(cap, 1.0 / members)


def capped_counts(counts: Mapping[int, int], max_share: MaxShare) -> dict[int, int]:
    """``counts`` with the largest lowered to one common ceiling, so that none exceeds
    ``share_cap`` of the new total; the others are kept, so honest members keep their
    relative weights."""
    cap = share_cap(max_share, len(counts))
    if cap >= 1.0:
        return dict(counts)
    ordered = sorted(counts.values(), reverse=True)
    rest = sum(ordered)
    ceiling = float(ordered[-1]) if ordered else 0.0
    for lowered, top in enumerate(ordered):
        # With the ``lowered`` largest at ceiling T: T = cap * (lowered * T + rest).
        ceiling = cap * rest / (1.0 - lowered * cap)
        if top <= ceiling:
            break
        rest -= top
    return {k: n if n <= ceiling else max(1, int(ceiling)) for k, n in counts.items()}


@dataclass(frozen=True)
class DeclaredSizes:
    """The training samples the operator vouches for, per client id, and how far a report
    may stray from them (a fraction of the declared size)."""

    sizes: Mapping[int, int] = field(default_factory=dict)
    tolerance: float = 0.1

    def admit(self, client_id: int, reported: int) -> tuple[int, str | None]:
        """The count to use for ``client_id`` and, when its report was replaced, why."""
        declared = self.sizes.get(client_id)
        if declared is None or abs(reported - declared) <= self.tolerance * declared:
            return reported, None
        return declared, (
            f"reported {reported} training samples, declared {declared} "
            f"(± {self.tolerance:.0%}): using {declared}"
        )


def declared_sizes(
    enrolled: Mapping[int, int], configured: Mapping[int, int]
) -> tuple[dict[int, int], dict[int, str]]:
    """The sizes a run holds reports to, and a sentence per member whose two declarations
    disagree.

    A size declared at enrolment holds for every run; the run config's
    (``federation.declared_sizes``) is the operator's word for this run (e.g. a subset of the
    member's data) and wins. A disagreement is not refused, but said, so that a typo in
    either is seen.
    """
    conflicts = {
        client: (
            f"the run config declares {configured[client]} training samples, its enrolment "
            f"{samples}: this run uses {configured[client]}"
        )
        for client, samples in enrolled.items()
        if client in configured and configured[client] != samples
    }
    return {**enrolled, **configured}, conflicts


def undeclared(method: str, members: Iterable[int], declared: Mapping[int, int]) -> list[int]:
    """The members whose size nobody vouches for, when ``method`` weighs sizes (every
    built-in method but ``local``): their own reports weigh them, up to the share cap."""
    if method == "local":
        return []
    return sorted(set(members) - set(declared))


def undeclared_message(clients: Iterable[int]) -> str:
    """The sentence an operator reads for members whose sizes are undeclared."""
    names = ", ".join(str(k) for k in clients)
    return (
        f"no declared training-sample count for client(s) {names}: their own reports weigh "
        "them (up to federation.max_share); declare them with `collabfl admin invite "
        "--samples N` or federation.declared_sizes, or refuse such starts with "
        "federation.require_declared_sizes = true"
    )
