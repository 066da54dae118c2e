"""SPO (Cui et al. 2022, §4.2 and App. B): optimal collaborator sets from a learned Pareto front.

For the clients C still in play, a Pareto hypernetwork h maps a weight vector d on the simplex
over C to a target model θ = h(d). It is trained by linear scalarisation: draw d from a
Dirichlet, ask every client for its training-loss gradient g_j at θ = h(d), and backpropagate
Σ_j d_j g_j through h, so h(d) approaches the minimiser of Σ_j d_j L_j. Then, for each target
client i, gradient descent on i's validation loss L_i(h(d)) over d (clipped to [1/(3|C|), 1]
and renormalised after each step, the paper's Eq. 24) finds the point of the front best for i;
the clients j with d_j ≥ threshold · d_i form OCS_C(i) (equilibrium.ocs_from_ratio_rule).

The clip floor matters: every client keeps at least about 1/(3|C|) of the weight, so a target
can never fully drop a harmful one. On the synthetic benchmark at the official noise level it
is what groups clients 0–2 and 3–5 when ρ = 0.1: exhaustive search leaves every client alone
there, and so does this search run on the exact front (weighted least squares, true loss)
with a floor of 1e-4, while with the paper's floor the same search keeps some or all of the
client's own group in every OCS (seeds 0–2).

``SpoSettings.official()`` takes the official code's choices where the paper is silent or
differs: the search starts from the last training ray, clips above at 1 − 1/(3|C|) too, and
the synthetic hypernetwork has no activation.

Nothing here touches data: every loss comes from a ``LossOracle``, one call per step covering
all clients (train) or all targets (val), so a federated client pool can answer in its place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

import numpy as np
import torch
from torch import nn

from collabfl.strategies.equilibrium import OcsEstimator, ratio_rule_estimator
from collabfl.strategies.verbs import Split

SPLITS: tuple[Split, ...] = get_args(Split)

StartRay = Literal["uniform", "last_ray"]

OracleAnswer = Mapping[int, tuple[float | None, torch.Tensor | None]]
"""Per client, (mean loss, gradient wrt the flat vector); a remote client may leave either
out, and the search refuses such an answer (``OracleError``)."""


class LossOracle(Protocol):
    def loss_and_grad(self, models: Mapping[int, torch.Tensor], split: Split) -> OracleAnswer:
        """Each named client evaluates the flat model vector given for it on its own `split`
        and returns (mean loss, gradient wrt the flat vector)."""
        ...


class OracleError(ValueError):
    """An oracle reply that SPO cannot use (missing client, non-finite value, wrong shape).

    ``clients`` names the clients at fault when they are known, so that a caller can go on
    without them.
    """

    def __init__(self, message: str, clients: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.clients = frozenset(clients)


@dataclass(frozen=True)
class SpoSettings:
    """SPO's knobs; the defaults give the paper's outcome in both synthetic settings
    (tests/support/synthetic.py) for every seed we tried."""

    hidden: int = 100
    """Width of the hypernetwork's hidden layers (official code: hidden_dim = 100)."""
    hypernet_steps: int = 1000
    """Scalarised training steps per client set, one Dirichlet draw each (our choice)."""
    hypernet_lr: float = 1e-2
    """Initial Adam learning rate, cosine-annealed to 0 over the steps (our choice; the official
    code uses SGD at 0.01). The annealing cuts the front's error about fourfold. Right for the
    linear synthetic task; neural-network clients need about 1e-4 (coordinator config)."""
    search_steps: int = 100
    """Gradient steps on d per target (our choice; the paper says "until convergence". On the
    synthetic benchmark 3000 steps give the same coalitions as 100)."""
    search_lr: float = 1e-2
    """Step size η of Eq. 24 (official code: lr_prefer = 0.01)."""
    threshold: float = 0.7
    """Ratio rule d_j / d_i ≥ threshold (official code)."""
    dirichlet_alpha: float = 1.0
    """Concentration of the d draws: 1 is uniform on the simplex (our choice; official 1/n)."""
    start_ray: StartRay = "uniform"
    """Where every target's search begins: the uniform ray (our choice; the paper leaves d0
    open), or the last d the hypernetwork was trained on (official code: the hypernetwork
    keeps its last input ray and the search moves it)."""
    upper_clip: bool = False
    """Also clip each weight to at most 1 − 1/(3|C|) before renormalising (official code);
    the paper's Eq. 24 clips to [1/(3|C|), 1]."""
    linear: bool = False
    """One hidden layer and no activation, so h is affine in d (the official synthetic
    hypernetwork, ``--n_hidden 1``); otherwise two ReLU hidden layers (our choice)."""

    def __post_init__(self) -> None:
        for name in ("hidden", "hypernet_steps", "search_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("hypernet_lr", "search_lr", "dirichlet_alpha"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must lie in (0, 1], got {self.threshold!r}")
        if self.start_ray not in get_args(StartRay):
            choices = get_args(StartRay)
            raise ValueError(f"start_ray must be one of {choices}, got {self.start_ray!r}")

    @classmethod
    def official(cls, **overrides: object) -> SpoSettings:
        """The official code's search (start from the last training ray, clip to
        [1/(3|C|), 1 − 1/(3|C|)]) and synthetic hypernetwork (no activation), 200 search
        steps as its synthetic example runs; other knobs as given or our defaults."""
        values: dict[str, object] = {
            "start_ray": "last_ray",
            "upper_clip": True,
            "linear": True,
            "search_steps": 200,
        }
        return cls(**(values | overrides))  # type: ignore[arg-type]


START_SCALE = 0.01
"""With a start model, the output layer's weights shrink by this factor: the front begins
nearly flat around the start and the d-dependence is learned."""


class ParetoHypernetwork(nn.Module):
    """MLP from simplex weights d (one per client) to a flat target-model vector.

    ``start``: a model to begin the front at (the output bias). For neural-network clients it
    matters: from PyTorch's default output initialisation the hypernetwork emits random-scale
    networks whose losses stay far above a locally trained model's for a thousand steps, and
    every d then looks alike to the search.
    """

    def __init__(
        self,
        num_clients: int,
        numel: int,
        hidden: int,
        start: torch.Tensor | None = None,
        linear: bool = False,
    ) -> None:
        super().__init__()
        output = nn.Linear(hidden, numel)
        hidden_layers: list[nn.Module] = (
            [nn.Linear(num_clients, hidden)]
            if linear
            else [nn.Linear(num_clients, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()]
        )
        self.net = nn.Sequential(*hidden_layers, output)
        self.last_ray: torch.Tensor | None = None
        """The last d it was trained on (``train_hypernetwork``), where an official search
        begins."""
        if start is not None:
            if tuple(start.shape) != (numel,):
                raise ValueError(f"start model has shape {tuple(start.shape)}, not ({numel},)")
            with torch.no_grad():
                output.bias.copy_(start)
                output.weight.mul_(START_SCALE)

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        theta: torch.Tensor = self.net(d)
        return theta


def _ask(
    oracle: LossOracle, models: Mapping[int, torch.Tensor], split: Split, numel: int
) -> dict[int, tuple[float, torch.Tensor]]:
    """Query the oracle and reject replies that would silently corrupt the search."""
    reply = oracle.loss_and_grad(models, split)
    if set(reply) != set(models):
        missing = set(models) - set(reply)
        message = f"oracle answered for {sorted(reply)}, asked for {sorted(models)}"
        raise OracleError(message, missing)
    checked = {}
    for client, answer in reply.items():
        usable = _usable(answer, split, numel)
        if isinstance(usable, str):
            raise OracleError(f"client {client} {usable}", [client])
        checked[client] = usable
    return checked


def _usable(answer: object, split: str, numel: int) -> tuple[float, torch.Tensor] | str:
    """One client's answer as (loss, float32 gradient), or why it is unusable."""
    if not isinstance(answer, tuple) or len(answer) != 2:
        return f"sent no (scalar loss, gradient) pair: {answer!r}"
    loss, grad = answer
    try:
        loss = float(loss)
    except (TypeError, ValueError) as e:
        return f"sent no (scalar loss, gradient) pair: {e}"
    if not math.isfinite(loss):
        return f"returned a non-finite {split} loss {loss}"
    if not isinstance(grad, torch.Tensor):
        return f"returned a {type(grad).__name__} gradient"
    if tuple(grad.shape) != (numel,):
        return f"returned a gradient of shape {tuple(grad.shape)}, not {numel}"
    if not torch.isfinite(grad).all():
        return f"returned a non-finite {split} gradient"
    return loss, grad.detach().to(torch.float32)


def train_hypernetwork(
    oracle: LossOracle,
    clients: list[int],
    numel: int,
    settings: SpoSettings,
    rng: np.random.Generator,
    start: torch.Tensor | None = None,
) -> ParetoHypernetwork:
    """Fit h so that h(d) minimises Σ_j d_j L_j^train, for d drawn over the whole simplex."""
    hypernet = ParetoHypernetwork(len(clients), numel, settings.hidden, start, settings.linear)
    # foreach: the multi-tensor update CUDA takes by default; on the CPU it gives the same
    # bits as the per-tensor loop torch picks there, in about 0.6 of its time
    optimizer = torch.optim.Adam(hypernet.parameters(), lr=settings.hypernet_lr, foreach=True)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, settings.hypernet_steps)
    alpha = np.full(len(clients), settings.dirichlet_alpha)
    for _ in range(settings.hypernet_steps):
        d = torch.as_tensor(rng.dirichlet(alpha), dtype=torch.float32)
        theta = hypernet(d)
        reply = _ask(oracle, {j: theta.detach() for j in clients}, "train", numel)
        # d/dφ Σ_j d_j L_j(h_φ(d)) = J_φᵀ Σ_j d_j g_j: the oracle's gradients stand in for
        # the losses' autograd graph, which lives on the clients.
        direction = sum(w * reply[j][1] for w, j in zip(d.tolist(), clients, strict=True))
        optimizer.zero_grad()
        theta.backward(direction)
        optimizer.step()
        schedule.step()
        hypernet.last_ray = d
    return hypernet


def clip_to_simplex(d: torch.Tensor, floor: float, ceiling: float = 1.0) -> torch.Tensor:
    """Eq. 24's projection: clip each weight to [floor, ceiling] (the paper: ceiling 1), then
    rescale each row to sum 1."""
    clipped = d.clamp(min=floor, max=ceiling)
    return clipped / clipped.sum(dim=-1, keepdim=True)


def start_rays(hypernet: ParetoHypernetwork, n: int, start_ray: StartRay) -> torch.Tensor:
    """One starting d per target (n rows): the uniform ray or the last training ray."""
    if start_ray == "uniform":
        return torch.full((n, n), 1.0 / n)
    if hypernet.last_ray is None or tuple(hypernet.last_ray.shape) != (n,):
        raise ValueError("start_ray = 'last_ray' needs a hypernetwork trained on these clients")
    return hypernet.last_ray.detach().to(torch.float32).expand(n, n).clone()


def search_directions(
    oracle: LossOracle,
    hypernet: ParetoHypernetwork,
    clients: list[int],
    numel: int,
    settings: SpoSettings,
) -> dict[int, dict[int, float]]:
    """Every target's d* (from ``settings.start_ray``): descent on its own validation loss
    of h(d), clipped and renormalised after each step."""
    n = len(clients)
    floor = 1.0 / (3 * n)
    ceiling = 1.0 - floor if settings.upper_clip else 1.0
    d = start_rays(hypernet, n, settings.start_ray)
    hypernet.requires_grad_(False)
    for _ in range(settings.search_steps):
        d.requires_grad_(True)
        thetas = hypernet(d)
        reply = _ask(oracle, {i: thetas[k].detach() for k, i in enumerate(clients)}, "val", numel)
        (gradient,) = torch.autograd.grad(thetas, d, torch.stack([reply[i][1] for i in clients]))
        with torch.no_grad():
            d = clip_to_simplex(d - settings.search_lr * gradient, floor, ceiling)
    return {
        i: dict(zip(clients, row, strict=True)) for i, row in zip(clients, d.tolist(), strict=True)
    }


def _set_seed(seed: int, clients: list[int]) -> int:
    """One seed per (seed, client set): each re-estimation is reproducible on its own."""
    return int(np.random.SeedSequence([seed, *clients]).generate_state(1)[0])


def spo_directions(
    oracle: LossOracle,
    numel: int,
    settings: SpoSettings,
    seed: int,
    start: torch.Tensor | None = None,
) -> Callable[[frozenset[int]], dict[int, dict[int, float]]]:
    """All targets' d* for a client set: a fresh hypernetwork per set, then the search."""

    def directions(clients: frozenset[int]) -> dict[int, dict[int, float]]:
        ids = sorted(clients)
        if len(ids) == 1:
            return {ids[0]: {ids[0]: 1.0}}
        set_seed = _set_seed(seed, ids)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(set_seed)
            hypernet = train_hypernetwork(
                oracle, ids, numel, settings, np.random.default_rng(set_seed), start
            )
        return search_directions(oracle, hypernet, ids, numel, settings)

    return directions


def spo_estimator(
    oracle: LossOracle,
    numel: int,
    settings: SpoSettings | None = None,
    seed: int = 0,
    start: torch.Tensor | None = None,
) -> OcsEstimator:
    """OCS estimator for collaboration_equilibrium: SPO on each remaining set, ratio rule.

    The equilibrium asks for every client of a set in turn; the set's directions are computed
    once (one hypernetwork, begun at ``start`` when given) and reused for its members.
    """
    settings = settings or SpoSettings()
    if numel < 1:
        raise ValueError(f"numel must be >= 1, got {numel}")
    compute = spo_directions(oracle, numel, settings, seed, start)
    last: dict[frozenset[int], dict[int, dict[int, float]]] = {}

    def direction(i: int, clients: frozenset[int]) -> Mapping[int, float]:
        if clients not in last:
            last.clear()
            last[clients] = compute(clients)
        return last[clients][i]

    return ratio_rule_estimator(direction, settings.threshold)
