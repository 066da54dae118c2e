"""Config validation, overrides and method specs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from collabfl.engine.builders import build_method
from collabfl.engine.config import (
    ConfigError,
    ExperimentConfig,
    budget_peers,
    load_config,
    parse_override,
    resolve_budget,
)
from collabfl.engine.methods import parse_method_spec
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.strategies.dpfl import DPFL
from collabfl.strategies.fedavg import FedAvg

ROOT = Path(__file__).resolve().parents[1]
COUNTS20 = dict.fromkeys(range(20), 100)


def test_quickstart_file_spells_out_the_defaults_but_the_federation_size():
    quickstart = load_config(ROOT / "examples" / "quickstart.toml")
    defaults = ExperimentConfig()
    assert quickstart.data.num_clients == 50 != defaults.data.num_clients  # see the file's note
    same_size = quickstart.model_copy(update={"data": defaults.data})
    assert quickstart.data.model_dump(exclude={"num_clients"}) == defaults.data.model_dump(
        exclude={"num_clients"}
    )
    assert same_size.model_dump(exclude={"name"}) == defaults.model_dump(exclude={"name"})


@pytest.mark.parametrize(
    ("override", "field", "rule"),
    [
        ("data.alpha=-1", "data.alpha", "greater than 0"),
        ("rounds=0", "rounds", "greater than or equal to 1"),
        ("dpfl.budget=1.5", "dpfl.budget", "(0, 1)"),
        ("dpfl.budget=1.0", "dpfl.budget", "give 'inf' for every peer"),
        ("dpfl.budget=-3", "dpfl.budget", "at least 1 peer"),
        ("dpfl.budget=0", "dpfl.budget", "0 peers is local training"),
        ("dpfl.budget=20", "dpfl.budget", "give at most 19"),
        ("equilibrium.budget=0", "equilibrium.budget", "at least 1 peer"),
        ("data.partition=zipf", "data.partition", "'dirichlet'"),
        ("training.momentum=1.0", "training.momentum", "less than 1"),
        ("data.nonsense=1", "data.nonsense", "Extra inputs"),
    ],
)
def test_invalid_values_name_the_field_and_rule(override, field, rule):
    with pytest.raises(ConfigError) as error:
        load_config(None, [override])
    message = str(error.value)
    assert f"{field}:" in message
    assert rule in message


def test_overrides_parse_toml_values():
    assert parse_override("data.alpha=0.5") == (["data", "alpha"], 0.5)
    assert parse_override("dpfl.budget=inf")[1] == float("inf")
    assert parse_override("data.dataset=cifar10") == (["data", "dataset"], "cifar10")
    assert parse_override("methods=['a', 'b']")[1] == ["a", "b"]
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("no-equals-sign")


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("rounds = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(broken)
    section_clash = tmp_path / "clash.toml"
    section_clash.write_text("data = 3")
    with pytest.raises(ConfigError, match="data"):
        load_config(section_clash)


@pytest.mark.parametrize(
    ("budget", "n", "expected"),
    [("inf", 50, None), (0.2, 50, 10), (0.05, 50, 3), (0.01, 20, 1), (7, 50, 7), (0, 5, 0)],
)
def test_resolve_budget(budget, n, expected):
    assert resolve_budget(budget, n) == expected


@pytest.mark.parametrize(
    ("budget", "n", "owner", "peers"),
    [
        (0.99, 10, False, 9),
        (0.99, 10, True, 9),
        (0.01, 10, True, 1),
        (5, 3, False, 2),
        (9, 10, True, 8),
    ],
)
def test_a_federation_smaller_than_the_config_holds_the_peers_it_has(budget, n, owner, peers):
    """Validation refuses an integer beyond the config's N; a smaller federation or a
    coalition (N known only when it runs) holds every peer it has, never more."""
    assert budget_peers(budget, n, "dpfl.budget", counts_owner=owner) == peers


def test_a_clamped_integer_budget_is_said(caplog):
    with caplog.at_level("INFO", logger="collabfl.engine.config"):
        assert budget_peers(5, 3, "dpfl.budget") == 2
    assert "dpfl.budget=5: 3 clients have 2 peers each; holding all" in caplog.text


def test_the_budget_limit_counts_the_owner_when_bc_does():
    assert load_config(None, ["data.num_clients=10", "dpfl.budget=10", "preset=paper"])
    with pytest.raises(ConfigError, match=r"budget_counts_owner.*give at most 10"):
        load_config(None, ["data.num_clients=10", "dpfl.budget=11", "preset=paper"])


def test_method_specs_route_options_to_their_section():
    base = load_config()
    workspace = FlatModel(build_model("mnist1d_cnn", 10, seed=0))
    spec = parse_method_spec("dpfl:budget=inf,select_every=5", base)
    method = build_method(spec, COUNTS20, workspace)
    assert isinstance(method, DPFL) and method.budget is None and method.select_every == 5
    assert method.name == "dpfl:budget=inf,select_every=5"
    prox = build_method(parse_method_spec("fedprox_ft:mu=0.01", base), COUNTS20, workspace)
    assert isinstance(prox, FedAvg) and prox.prox_mu == 0.01 and prox.finetune_epochs == 2.0
    ditto = parse_method_spec("ditto:training.lr=0.01", base)
    assert ditto.config.training.lr == 0.01
    random_graph = build_method(parse_method_spec("dpfl_random", base), COUNTS20, workspace)
    assert random_graph.graph == "random" and random_graph.budget == 4
    with pytest.raises(ConfigError, match="unknown method"):
        parse_method_spec("fedsomething", base)
    with pytest.raises(ConfigError, match=r"dpfl\.budget"):
        parse_method_spec("dpfl:budget=2.5", base)


def test_readme_quickstart_and_examples_are_valid():
    for path in (ROOT / "examples").glob("*.toml"):
        load_config(path)
        assert tomllib.loads(path.read_text())


def test_ipfl_profiles_from_roles_and_reports():
    from collabfl.strategies.ipfl_method import IPFL

    base = load_config(None, ["ipfl.sellers=0.25", "ipfl.buyers=0.25", "ipfl.attackers=0.25"])
    workspace = FlatModel(build_model("mnist1d_cnn", 10, seed=0))
    counts = dict.fromkeys(range(8), 100)
    spec = parse_method_spec("ipfl", base)
    method = build_method(spec, counts, workspace)
    assert isinstance(method, IPFL)
    roles = [method.profiles[k].role for k in range(8)]
    expected = ["attacker"] * 2 + ["seller"] * 2 + ["buyer"] * 2 + ["trader"] * 2
    assert sorted(roles) == sorted(expected)
    assert method.attackers.clients == {k for k in range(8) if roles[k] == "attacker"}
    assert method.attackers.kind == "gaussian"
    trader = roles.index("trader")
    reported = build_method(spec, counts, workspace, {trader: {"cost": 2.0, "eagerness": 5.0}})
    assert (reported.profiles[trader].cost, reported.profiles[trader].eagerness) == (2.0, 5.0)
    with pytest.raises(ConfigError, match="client 5 reported an invalid iPFL profile: cost"):
        build_method(spec, counts, workspace, {5: {"cost": -1.0}})
