"""collabfl.api.run refuses what cannot run before anything runs, and its records describe
the user's data (issue #26, defects 1-4).

Before: ``dpfl:budget=0`` crashed in round 0 and left a run dir without a summary; budgets
above the peers there are ran silently; a model instance failed inside torch; config.json
and the heatmap titles named mnist1d and α=0.1 for the user's own data; overrides that
cannot apply (``method``, ``data.*``) were ignored and a CLI-style list raised AttributeError.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

import collabfl.api as cf
from collabfl.engine.config import ConfigError, load_config
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.report.run_dir import read_run
from collabfl.engine.report.setting import setting_title
from tests.support.user_code import make_net
from tests.test_python_api import FAST, arrays, finite


def run(method: str = "dpfl", overrides=None, **kwargs) -> cf.RunResult:
    kwargs.setdefault("model", make_net)
    given = FAST if overrides is None else overrides
    return cf.run(method, overrides=given, **{**arrays(), **kwargs})


@pytest.mark.parametrize(
    ("method", "message"),
    [
        ("dpfl:budget=0", r"dpfl\.budget: .*at least 1 peer.*run 'local'"),
        ("dpfl:budget=3", r"dpfl\.budget: 3 peers .*num_clients=3.*at most 2"),
        ("dpfl:budget=50", r"at most 2"),
        ("dpfl:budget=1.0", r"dpfl\.budget: .*fraction .*\(0, 1\).*'inf'"),
        ("dpfl:budget=1,budget_counts_owner=true", r"at least 1 peer"),
        ("equilibrium:budget=0", r"equilibrium\.budget: .*at least 1 peer"),
    ],
)
def test_a_budget_that_cannot_run_is_refused_before_anything_runs(tmp_path, method, message):
    with pytest.raises(ConfigError, match=message):
        run(method, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_integer_budget_is_peers_and_the_most_there_are_runs():
    assert run("dpfl:budget=1").summary["budget"] == 1
    assert run("dpfl:budget=2").summary["budget"] == 2


@pytest.mark.parametrize(
    ("method", "message"),
    [
        ("fedavg:budget=3", "fedavg takes no options of its own.*budget belongs to dpfl"),
        ("fedprox:budget=3", "fedprox has no option 'budget' .*mu.*budget belongs to dpfl"),
        ("dpfl:nonsense=3", "dpfl has no option 'nonsense'"),
    ],
)
def test_an_option_of_another_method_says_whose_it_is(method, message):
    with pytest.raises(ConfigError, match=message) as raised:
        run(method)
    assert "\n" not in str(raised.value)


def test_a_model_instance_is_the_initial_model_and_is_not_changed():
    instance = make_net()
    before = copy.deepcopy(instance.state_dict())
    result = run("fedavg", model=instance)
    assert finite(result)
    after = instance.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    same_weights = run("fedavg", model=lambda: copy.deepcopy(instance))
    assert [c.best_test_acc for c in result.clients] == [
        c.best_test_acc for c in same_weights.clients
    ]


def test_the_records_describe_the_users_data(tmp_path):
    result = run("dpfl:budget=2", out=tmp_path / "run")
    config = read_run(tmp_path / "run").config
    data = config["data"]
    assert data["dataset"] == "user data" and data["num_clients"] == 3
    assert data["train_samples"] == [24, 24, 24] and data["test_samples"] == [12, 12, 12]
    recorded = json.dumps(data)
    assert "mnist1d" not in recorded and "alpha" not in recorded and "16000" not in recorded
    title = setting_title(config, result.method)
    assert title.startswith("dpfl:budget=2: user data, N=3") and "α" not in title


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"method": "fedavg"}, r"overrides\['method'\]: .*first argument"),
        ({"data.num_clients": 3}, r"overrides\['data.num_clients'\]: .*your own"),
        ({"data.dataset": "cifar10"}, r"overrides\['data.dataset'\]: .*your own"),
        ({"methods": ["fedavg"]}, r"overrides\['methods'\]"),
        ({"dpfl.budget": 2}, r"dpfl\.budget.*both.*method spec.*overrides"),
        (["rounds"], "key=value"),
        ("rounds=2", "a dict or a list"),
    ],
)
def test_overrides_that_cannot_apply_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message) as raised:
        run("dpfl:budget=1", overrides=overrides, out=tmp_path / "run")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "run").exists()


def test_the_same_budget_in_the_spec_and_the_overrides_is_not_a_conflict():
    assert run("dpfl:budget=1", overrides={**FAST, "dpfl.budget": 1}).summary["budget"] == 1


def test_cli_style_overrides_are_accepted():
    listed = [f"{key}={value}" for key, value in FAST.items()]
    result = run("local", overrides=listed)
    assert result.rounds == 2
    assert _untimed(result.history) == _untimed(run("local").history)


def _untimed(rows):
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]


def test_keyword_settings_set_their_config_keys(tmp_path):
    kwargs = {"rounds": 3, "seed": 1, "epochs": 0.5, "lr": 0.1, "batch_size": 6, "device": "cpu"}
    result = run("local", overrides={}, out=tmp_path / "run", **kwargs)
    config = read_run(tmp_path / "run").config
    assert (config["rounds"], config["seed"], config["epochs"]) == (3, 1, 0.5)
    assert (config["training"]["lr"], config["training"]["batch_size"]) == (0.1, 6)
    dotted = {"rounds": 3, "seed": 1, "epochs": 0.5, "training.lr": 0.1, "training.batch_size": 6}
    assert _untimed(result.history) == _untimed(run("local", overrides=dotted).history)
    with pytest.raises(ValueError, match=r"rounds is set both as rounds=3 and in overrides \(2\)"):
        run("local", overrides={"rounds": 2}, rounds=3)


def test_typed_methods_are_their_specs():
    assert cf.DPFL(budget=2, ggc_tie="larger").spec == "dpfl:budget=2,ggc_tie=larger"
    assert str(cf.DPFL(budget=float("inf"))) == "dpfl:budget=inf"
    assert cf.FedAvg().spec == "fedavg" and cf.FedProxFT(mu=0.01).spec == "fedprox_ft:mu=0.01"
    assert run(cf.DPFL(budget=2)).summary["budget"] == 2
    with pytest.raises(TypeError, match="spec string or a method object"):
        run(3)


def test_every_typed_method_is_registered_with_its_options():
    from collabfl.api.methods import TYPED_METHODS
    from collabfl.engine.registry import REGISTRY

    assert {m.name for m in TYPED_METHODS} <= set(REGISTRY.names())
    base = load_config(None, ["data.num_clients=10"])
    for typed in TYPED_METHODS:
        section = REGISTRY.entry(typed.name).section
        own = getattr(base, section).model_dump() if section else {}
        options = {f.name: own[f.name] for f in dataclasses.fields(typed)}
        if typed.name == "equilibrium":
            options["budget"] = 2  # its default "inf" is spelled the same
        spec = parse_method_spec(typed(**options).spec, base)
        assert all(getattr(getattr(spec.config, section), k) == v for k, v in options.items()), (
            typed
        )


def test_val_fraction_holds_out_part_of_each_train_split(tmp_path):
    result = run("local", val=None, val_fraction=0.25, out=tmp_path / "run")
    data = read_run(tmp_path / "run").config["data"]
    assert data["train_samples"] == [18] * 3 and data["val_samples"] == [6] * 3
    again = run("local", val=None, val_fraction=0.25)
    assert _untimed(result.history) == _untimed(again.history)
    other_seed = run("local", val=None, val_fraction=0.25, seed=1)
    assert _untimed(result.history) != _untimed(other_seed.history)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"val_fraction": 0.2}, "either val .* or val_fraction"),
        ({"val": None}, "either val .* or val_fraction"),
        ({"val": None, "val_fraction": 1.0}, r"val_fraction must be in \(0, 1\)"),
        ({"val": None, "val_fraction": 0.99}, r"train\[0\] has 24 samples: too few"),
    ],
)
def test_a_val_fraction_that_cannot_hold_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run("local", **kwargs)
