"""Experiment configuration: pydantic models, TOML files and ``--set key=value`` overrides.

Every value is validated before anything starts; an invalid one is reported with its dotted
path, the value given and the allowed range.
"""

from __future__ import annotations

import logging
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from collabfl.engine.registry import REGISTRY
from collabfl.kernel.devices import DEVICE_FORMS, check_spec
from collabfl.kernel.model_names import DEFAULT_MODEL, ZOO
from collabfl.kernel.training_config import TrainingConfig
from collabfl.kernel.user_code import check_import_path, is_import_path
from collabfl.kernel.validation import problems

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration that must not start: the message names the field and the rule."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(_Section):
    """Which dataset, how many clients, and how samples are divided among them."""

    dataset: Literal["mnist1d", "cifar10", "cinic10", "femnist"] = "mnist1d"
    root: Path | None = Field(None, description="folder of a path-based dataset")
    cache_dir: Path = Field(Path.home() / ".cache" / "collabfl", description="MNIST-1D cache")
    num_train: int = Field(16000, ge=100, le=10_000_000, description="MNIST-1D pool size")
    num_test: int = Field(8000, ge=100, le=10_000_000)
    num_clients: int = Field(20, ge=1, le=100_000)
    partition: Literal[
        "iid",
        "dirichlet",
        "pathological",
        "natural",
        "label_groups",
        "feature_groups",
        "concept_groups",
    ] = "dirichlet"
    alpha: float = Field(0.1, gt=0, le=1e6, description="Dirichlet concentration")
    classes_per_client: int = Field(3, ge=1, le=1000)
    val_fraction: float = Field(0.2, gt=0, lt=1)
    test_ratio: float = Field(1.0, gt=0, le=100)
    label_flip_fraction: float = Field(0.0, ge=0, le=1)
    size_ratio: float = Field(
        4.0,
        gt=0,
        le=1000,
        description="*_groups partitions: samples of a large client per sample of a small one",
    )
    partition_file: Path | None = Field(None, description="reuse a saved partition")
    source: Annotated[str, AfterValidator(check_import_path)] | None = Field(
        None,
        description="pkg.mod:factory, factory(client_id) -> {train, val (optional), test, "
        "num_classes}: each client's data from your own loader instead of dataset and "
        "partition (client/data/source.py)",
    )
    workers: int = Field(
        0,
        ge=0,
        le=256,
        description="DataLoader processes reading a data.source's Datasets once up front "
        "(0: the run's own; spawned, so a Dataset must pickle)",
    )


def _model_name(name: str) -> str:
    """A zoo model, "auto", or an import path of the user's own model factory."""
    if is_import_path(name):
        return check_import_path(name)
    if name != "auto" and name not in ZOO:
        choices = ", ".join(["auto", *ZOO])
        raise PydanticCustomError(
            "unknown_model",
            "unknown model; choose from {choices} or give pkg.mod:factory",
            {"choices": choices},
        )
    return name


class ModelConfig(_Section):
    name: Annotated[str, AfterValidator(_model_name)] = Field(
        "auto",
        description="auto (the dataset's model), a zoo model, or pkg.mod:factory (no arguments)",
    )


def _infinity_is_unlimited(value: Any) -> Any:
    """TOML reads ``budget=inf`` as a float; it means unlimited. A bool is no budget."""
    if isinstance(value, bool):
        raise ValueError("budget must be an integer >= 1, a fraction in (0, 1) or 'inf'")
    return "inf" if isinstance(value, float) and math.isinf(value) and value > 0 else value


def _check_budget(value: Any) -> Any:
    """An integer counts peers; a float is a fraction of N, and only in (0, 1): ``1`` is
    one peer, so ``1.0`` (every client) would read as the same number meaning N."""
    if isinstance(value, int) and value < 1:
        raise ValueError(
            "an integer budget counts peers and must be at least 1 peer "
            "(0 peers is local training: run 'local')"
        )
    if isinstance(value, float) and not 0 < value < 1:
        raise ValueError(
            "a fractional budget is a fraction of the clients in (0, 1); "
            "give 'inf' for every peer or an integer number of peers"
        )
    return value


Budget = Annotated[
    int | float | Literal["inf"],
    BeforeValidator(_infinity_is_unlimited),
    AfterValidator(_check_budget),
]
"""Peers held at once: an integer >= 1, a fraction of N in (0, 1), or "inf" (unlimited)."""


def _registered_method(name: str) -> str:
    """Method names are whatever the registry holds, so they are checked, not typed."""
    if name not in REGISTRY:
        raise PydanticCustomError(
            "unknown_method",
            "unknown method; choose from {choices}",
            {"choices": REGISTRY.choices()},
        )
    return name


def _coalition_base(name: str) -> str:
    if name not in REGISTRY.names(coalition_base=True):
        raise PydanticCustomError(
            "not_a_base_method",
            "not a method a coalition can run; choose from {choices}",
            {"choices": REGISTRY.choices(coalition_base=True)},
        )
    return name


def _device_spec(spec: str) -> str:
    """The spelling only: the coordinator may have no GPU where its clients have one."""
    try:
        return check_spec(spec)
    except ValueError:
        raise PydanticCustomError(
            "device_spec", "not a device; give {forms}", {"forms": DEVICE_FORMS}
        ) from None


MethodName = Annotated[str, AfterValidator(_registered_method)]
"""The name of a registered method (engine/registry.py)."""

BaseMethodName = Annotated[str, AfterValidator(_coalition_base)]
"""A registered method that FedCollab and the equilibrium may run inside a coalition."""


class DPFLConfig(_Section):
    """DPFL's knobs. ``budget``: an integer number of peers (1 to N-1), a fraction of N in
    (0, 1), or "inf" (unlimited)."""

    budget: Budget = 0.2
    init_epochs: float = Field(5.0, gt=0, le=1000, description="τ_init")
    select_every: int = Field(1, ge=1, le=100_000, description="run GGC every P rounds")
    collaborate_every: int = Field(
        1, ge=1, le=100_000, description="average every P rounds; the others are local"
    )
    ggc_tie: Literal["add", "larger"] = Field(
        "add", description="neither gain positive: add (the paper), or add if it hurts less"
    )
    budget_counts_owner: bool = Field(
        False, description="Bc counts the client itself (Algorithms 2-3), not only peers (Eq. 3)"
    )
    peers_on: Literal["device", "host"] = Field(
        "device", description="where a client holds peer models and the search's sums"
    )
    reward_samples: int | None = Field(
        None, ge=1, le=10**9, description="GGC's rewards on this many validation samples (all)"
    )
    batched_rewards: Literal["auto", "on", "off"] = Field(
        "auto", description="GGC reads rewards six models at a time: auto = on CUDA devices"
    )


class FedProxConfig(_Section):
    mu: float = Field(0.1, ge=0, le=1e4)


class DittoConfig(_Section):
    lam: float = Field(0.75, ge=0, le=1e4)


class PFedGraphConfig(_Section):
    """pFedGraph's knobs; ``alpha`` in the paper's convention (strategies/pfedgraph.py)."""

    alpha: float | None = Field(
        None, gt=0, le=1e6, description="default: 1/(0.08·N), the official guidance"
    )
    lam: float = Field(0.01, ge=0, le=1e4, description="regulariser weight λ")
    regularizer: Literal["normalized", "cosine"] = "normalized"
    similarity: Literal["all", "head"] = Field(
        "all", description="compare all parameters, or only the final fully connected layers"
    )
    local_steps: int = Field(
        0, ge=0, le=1_000_000, description="SGD steps per round; 0 = `epochs` (official: 200)"
    )


class AttackConfig(_Section):
    """Simulated model poisoning for robustness experiments: a share of the clients upload
    corrupted weights (FedAvg, FedProx, pFedGraph). iPFL's attackers are its own role."""

    kind: Literal["none", "shuffle", "all_ones", "sign_flip", "gaussian"] = "none"
    fraction: float = Field(0.0, ge=0, le=1, description="share of poisoning clients")


class IPFLConfig(_Section):
    """iPFL's market. Profiles: every client reports ``cost`` and ``eagerness`` unless its
    daemon reports its own; the role shares turn some clients into pure buyers (c = ∞),
    sellers (K = 0, c = 0) or random-weight attackers (K = 0, c = 0)."""

    lam: float = Field(0.1, ge=0, le=1e6, description="distance weight λ")
    eta: float = Field(1.0, gt=0, le=1e6, description="proximal step η (client prox λ/η)")
    distance: Literal["cosine", "l2"] = "cosine"
    cost: float = Field(1.0, ge=0, le=1e12, description="sharing cost c per importer per round")
    eagerness: float = Field(2e4, ge=0, le=1e12, description="data eagerness K")
    buyers: float = Field(0.0, ge=0, le=1)
    sellers: float = Field(0.0, ge=0, le=1)
    attackers: float = Field(0.0, ge=0, le=1)


class FedCollabConfig(_Section):
    """FedCollab: coalitions from estimated distances (discriminator knobs: distance_*)."""

    c: float = Field(10.0, ge=0, le=1e6, description="generalisation weight C (paper: 8–10)")
    restarts: int = Field(100, ge=1, le=100_000, description="solver restarts (official: 100)")
    base: BaseMethodName = "fedavg"
    distance_rounds: int = Field(200, ge=1, le=1_000_000, description="most estimation steps")
    distance_local_steps: int = Field(10, ge=1, le=100_000, description="SGD steps per step")
    distance_lr: float = Field(0.01, gt=0, le=100)
    distance_batch_size: int = Field(32, ge=1, le=1_000_000)
    distance_hidden: int = Field(200, ge=1, le=100_000, description="discriminator width")
    distance_patience: int = Field(20, ge=1, le=1_000_000, description="steps without gain")
    distance_features: Literal["raw", "initial_model"] = Field(
        "raw", description="initial_model: a frozen feature extractor for image inputs"
    )
    distance_eval_every: int = Field(
        1, ge=1, le=1_000_000, description="steps between evaluations (official: 10)"
    )
    distance_scale_label: bool = Field(
        False, description="one-hot label × 2·L/√(L−1), as the official discriminator"
    )


class EquilibriumConfig(_Section):
    """Collaboration equilibrium: stable coalitions from estimated benefit graphs. ``ocs``
    picks the estimator: greedy (GGC over warm-up models; ``init_epochs``, ``budget``) or the
    paper's SPO (a Pareto hypernetwork on the coordinator; the ``spo_*`` knobs)."""

    base: BaseMethodName = "fedavg"
    ocs: Literal["greedy", "spo"] = "greedy"
    init_epochs: float = Field(5.0, gt=0, le=1000, description="warm-up before the search")
    budget: Budget = Field("inf", description="peer models held at once during the search")
    spo_hidden: int = Field(100, ge=1, le=100_000, description="hypernetwork width")
    spo_hypernet_steps: int = Field(1000, ge=1, le=1_000_000, description="per client set")
    spo_hypernet_lr: float = Field(
        1e-4, gt=0, le=100, description="Adam; 1e-3 and up failed on the MNIST-1D CNN"
    )
    spo_search_steps: int = Field(100, ge=1, le=1_000_000, description="per client set")
    spo_search_lr: float = Field(1e-2, gt=0, le=100)
    spo_threshold: float = Field(0.7, gt=0, le=1, description="ratio rule d_j / d_i")
    spo_start_ray: Literal["uniform", "last_ray"] = Field(
        "uniform", description="where the d search begins (official: the last training ray)"
    )
    spo_upper_clip: bool = Field(False, description="also clip d at 1 − 1/(3|C|) (official)")
    spo_batch_size: int = Field(
        64, ge=0, le=1_000_000, description="train samples per client per step; 0 = all"
    )


Candidates = Literal["auto", "aggregate", "both"]

SCORES_LOCAL_BY_DEFAULT = frozenset({"dpfl", "dpfl_random", "pfedgraph"})
"""Methods whose official code also checkpoints the post-training model ("auto")."""


class EvaluationConfig(_Section):
    """Which models compete for a client's reported (best-validation) model each round:
    the post-collaboration model only ("aggregate"), or the post-training local model too
    ("both"); "auto" does what each method's official code does."""

    candidates: Candidates = "auto"


def scores_local(config: ExperimentConfig, method: str) -> bool:
    """Whether ``method`` lets the post-training model compete, under ``config``."""
    candidates = config.evaluation.candidates
    return method in SCORES_LOCAL_BY_DEFAULT if candidates == "auto" else candidates == "both"


class FinetuneConfig(_Section):
    epochs: float | None = Field(None, gt=0, le=1000, description="default: 2 × epochs")


PAPER_PRESET: dict[str, dict[str, Any]] = {
    "dpfl": {"collaborate_every": 2, "budget_counts_owner": True},
    "pfedgraph": {"local_steps": 200},
    "ipfl": {"lam": 1.0, "eta": 5.0},
    "fedcollab": {
        "distance_rounds": 2000,
        "distance_local_steps": 1,
        "distance_patience": 100,
        "distance_eval_every": 10,
        "distance_scale_label": True,
    },
    "equilibrium": {"spo_start_ray": "last_ray", "spo_upper_clip": True},
}
"""``preset = "paper"``: the official code's values where they differ from our defaults
(docs/fidelity.md lists each with its source, and what stays different and why)."""


class FederationConfig(_Section):
    """How a run on a real federation treats participants that go away and what it believes
    of the sample counts they report (the in-process runtime's clients never go away and are
    trusted: it does not read this section; engine/quorum.py, flower/reported_sizes.py)."""

    quorum: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="fewest clients online for a round to run; below it the run pauses "
        "(default: 1, or 2 for methods that learn from peers, at most the clients asked for)",
    )
    quorum_wait_s: float = Field(
        300.0,
        gt=0,
        le=7 * 24 * 3600,
        description="how long a paused run waits for its quorum before it fails",
    )
    declared_sizes: dict[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict,
        description="client id -> training samples the operator vouches for; a report "
        "outside size_tolerance of it is replaced by it, with an anomaly event",
    )
    size_tolerance: float = Field(
        0.1, ge=0, le=10, description="how far a report may stray, as a fraction of its size"
    )
    require_declared_sizes: bool = Field(
        False,
        description="refuse to start a method that weighs sample counts while a member has "
        "no declared size (admin invite --samples, or declared_sizes): else an event says so",
    )
    max_share: Annotated[float, Field(gt=0, le=1)] | Literal["auto"] = Field(
        "auto",
        description="the most of the total sample count one member may weigh (1: no cap; "
        "auto: min(0.6, 3/N)); never below an equal share 1/N",
    )


class RetentionConfig(_Section):
    """What a run folder keeps of what grows with every round, so a run of many rounds
    (a federation up for weeks) does not fill its disk (engine/report/run_dir.py;
    docs/deployment.md#retention); the coordinator's database keeps a federated run's round
    records for the same rounds as its graph files. metrics.jsonl, the run's result, is
    always kept whole."""

    graphs_keep_last: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="per-round graph files (and coordinator round records) kept for the "
        "latest rounds",
    )
    graphs_keep_every: int = Field(
        100,
        ge=1,
        le=100_000,
        description="older graph files kept only for every n-th round (round % n == 0); "
        "1 keeps every round's graph",
    )
    messages_max_mib: float = Field(
        16.0,
        gt=0,
        le=100_000,
        description="messages.jsonl (a federation's message timings) is rotated past this size",
    )
    messages_keep: int = Field(
        2, ge=0, le=100, description="rotated messages.jsonl files kept (0: none)"
    )


class TrackingConfig(_Section):
    """Experiment-tracking sinks written beside metrics.jsonl (in-process runtime)."""

    tensorboard: Path | None = Field(
        None,
        description="folder for TensorBoard event files, one run per method and seed "
        "(needs the tensorboard package: pip install 'collabfl[tracking]')",
    )


class AggregationConfig(_Section):
    """How the coordinator combines uploads in the methods it averages (FedAvg, FedProx, their
    +FT variants, Ditto, and coalition methods over them; pFedGraph's per-client aggregates,
    weighted by its graph; strategies/robust.py)."""

    rule: Literal["mean", "median", "trimmed_mean"] = Field(
        "mean", description="mean: sample-weighted (FedAvg); median, trimmed_mean: coordinate-wise"
    )
    trim: float = Field(0.2, ge=0, lt=0.5, description="trimmed_mean: share cut at each end")
    clip_norm: float | None = Field(
        None, gt=0, le=1e6, description="largest L2 norm of an update (upload - model sent)"
    )


def _under(preset: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with every section value it leaves out taken from ``preset``."""
    merged = dict(given)
    for section, values in preset.items():
        own = given.get(section)
        if own is None:
            merged[section] = dict(values)
        elif isinstance(own, Mapping):
            merged[section] = {**values, **own}
    return merged


class ExperimentConfig(_Section):
    """One experiment: a federation, a method (or several to compare) and how long to run."""

    preset: Literal["default", "paper"] = Field(
        "default", description="paper: the official code's values for what is not set"
    )
    name: str = "experiment"
    seed: int = Field(0, ge=0, le=2**31 - 1)
    rounds: int = Field(20, ge=1, le=100_000)
    epochs: float = Field(1.0, gt=0, le=1000, description="local epochs per round (τ_train)")
    device: Annotated[str, AfterValidator(_device_spec)] = Field(
        "cpu",
        description=f"where tensors live: {DEVICE_FORMS} (a client daemon's --device wins)",
    )
    threads: int = Field(1, ge=0, le=1024, description="torch CPU threads; 0 = torch default")
    jobs: int = Field(
        0, ge=0, le=1024, description="methods run in parallel by compare; 0 = one per core"
    )
    method: MethodName = "dpfl"
    methods: list[str] = Field(
        default_factory=lambda: ["local", "fedavg", "fedavg_ft", "fedprox", "ditto", "dpfl"],
        description="what `collabfl compare` runs when --methods is not given",
    )
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    dpfl: DPFLConfig = Field(default_factory=DPFLConfig)
    fedprox: FedProxConfig = Field(default_factory=FedProxConfig)
    ditto: DittoConfig = Field(default_factory=DittoConfig)
    pfedgraph: PFedGraphConfig = Field(default_factory=PFedGraphConfig)
    ipfl: IPFLConfig = Field(default_factory=IPFLConfig)
    fedcollab: FedCollabConfig = Field(default_factory=FedCollabConfig)
    equilibrium: EquilibriumConfig = Field(default_factory=EquilibriumConfig)
    attack: AttackConfig = Field(default_factory=AttackConfig)
    finetune: FinetuneConfig = Field(default_factory=FinetuneConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    federation: FederationConfig = Field(default_factory=FederationConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    aggregation: AggregationConfig = Field(default_factory=AggregationConfig)

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("preset") == "paper":
            return _under(PAPER_PRESET, data)
        return data


def model_name(config: ExperimentConfig) -> str:
    """The model a config asks for (``auto``: the dataset's default model), as
    ``build_model`` takes it."""
    name = config.model.name
    return DEFAULT_MODEL[config.data.dataset] if name == "auto" else name


def user_code(config: ExperimentConfig) -> list[str]:
    """The import paths of user code a config names (model, loss, optimiser)."""
    training = config.training
    named = (model_name(config), training.loss, training.optimizer)
    return [name for name in named if is_import_path(name)]


def resolve_budget(budget: Budget, num_clients: int) -> int | None:
    """The budget Bc as a number of peers (None: unlimited)."""
    if budget == "inf":
        return None
    if isinstance(budget, float):
        return max(1, math.floor(budget * num_clients + 0.5))
    return int(budget)


def budget_peers(
    budget: Budget, num_clients: int, field: str, *, counts_owner: bool = False
) -> int | None:
    """The peers a client may hold at once among ``num_clients`` (None: unlimited), kept
    within the 1 to N-1 peers there are: validation (``check_budgets``) refuses an integer
    outside that range for the config's N, and a federation or coalition smaller than the
    config said holds all its peers. ``counts_owner``: Bc counts the client itself."""
    bc = resolve_budget(budget, num_clients)
    if bc is None:
        return None
    most = num_clients - 1
    if most < 1:
        raise ConfigError(f"{field}: {num_clients} client has no peers; run 'local'")
    peers = min(max(bc - 1 if counts_owner else bc, 1), most)
    if isinstance(budget, int) and peers < (bc - 1 if counts_owner else bc):
        log.info(
            "%s=%s: %d clients have %d peers each; holding all", field, budget, num_clients, most
        )
    return peers


def check_budgets(config: ExperimentConfig) -> None:
    """Refuse a budget the config's federation cannot hold (ConfigError)."""
    clients = config.data.num_clients
    if clients < 2:
        return  # one client has no peers to budget; a method that needs them says so
    owner = config.dpfl.budget_counts_owner
    _check_peers(config.dpfl.budget, clients, "dpfl.budget", owner)
    _check_peers(config.equilibrium.budget, clients, "equilibrium.budget", False)


def _check_peers(budget: Budget, num_clients: int, field: str, counts_owner: bool) -> None:
    if not isinstance(budget, int):
        return  # a fraction or 'inf' fits any federation
    peers, most = budget - 1 if counts_owner else budget, num_clients - 1
    owner = " (budget_counts_owner: Bc counts the client itself)" if counts_owner else ""
    if peers < 1:
        raise ConfigError(
            f"{field}: {budget} leaves 0 peers{owner}; give at least 1 peer "
            "(0 peers is local training: run 'local')"
        )
    if peers > most:
        limit = most + 1 if counts_owner else most
        raise ConfigError(
            f"{field}: {budget} peers{owner} but data.num_clients={num_clients} clients have "
            f"{most} peers each; give at most {limit}, a fraction in (0, 1) or 'inf'"
        )


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b=value`` into a path and a value read as TOML (bare words stay strings)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key=value (e.g. data.alpha=0.5)")
    key, raw = text.split("=", 1)
    path = [part.strip() for part in key.strip().split(".")]
    if not all(path):
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return path, value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key=value`` overrides to a raw (not yet validated) config dict."""
    for text in overrides:
        path, value = parse_override(text)
        set_value(raw, path, value, f"override {text!r}")
    return raw


def set_value(raw: dict[str, Any], path: list[str], value: Any, what: str) -> None:
    """Set ``raw[path[0]][path[1]]...`` to ``value``, making sections on the way; ``what``
    names the override in the error when a section on the path is a value."""
    node = raw
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{what}: {part!r} is a value, not a section")
        node = child
    node[path[-1]] = value


def load_config(path: Path | None = None, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read, override and validate a config; raise ConfigError with a readable message."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"config file {path} is not valid TOML: {error}") from None
    raw = apply_overrides(raw, list(overrides or []))
    return validate_config(raw)


def validate_config(raw: dict[str, Any]) -> ExperimentConfig:
    try:
        config = ExperimentConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from None
    check_budgets(config)
    if config.device == "cpu" and config.training.amp != "off":  # off runs anywhere
        import torch  # only here: a config that asks for no autocast is checked without it

        check_compute(config, torch.device("cpu"))  # other specs: where they resolve
    return config


def check_partition_file(config: ExperimentConfig) -> None:
    """Refuse a ``data.partition_file`` that is not there (ConfigError): the command line
    asks before it loads the runtimes, a run again when it reads the file."""
    path = config.data.partition_file
    if path is not None and not path.is_file():
        raise ConfigError(
            f"data.partition_file: {path} does not exist (a partition.npz "
            "that an earlier run wrote, or leave the key out to make a new partition)"
        )


def check_compute(config: ExperimentConfig, device: torch.device) -> None:
    """Refuse training settings ``device`` cannot run (ConfigError), before any training."""
    from collabfl.kernel.compute import amp_problem  # torch's, imported once a device is

    problem = amp_problem(config.training.amp, device)
    if problem is not None:
        raise ConfigError(problem)


def format_validation_error(error: ValidationError) -> str:
    """One line: each problem's dotted path, what is wrong, and the value given."""
    return "invalid configuration: " + "; ".join(problems(error, ExperimentConfig))
