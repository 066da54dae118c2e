"""The method registry is the one place a method is added: config, specs and CLI follow it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.engine.config import ConfigError, ExperimentConfig, load_config
from collabfl.engine.experiment import costliest_first
from collabfl.engine.methods import MethodSpec, parse_method_spec
from collabfl.engine.registry import REGISTRY, FederationContext
from collabfl.engine.report.run_dir import read_run
from collabfl.strategies.local import Local
from tests.support.cli_runs import invoke, set_args, without_timings

TOY = "half_local"

TINY = [
    "data.num_train=800",
    "data.num_test=400",
    "data.num_clients=3",
    "rounds=2",
    "epochs=1",
    "jobs=1",  # a method registered in a test exists only in this process, not in workers
]


def _half_local(spec: MethodSpec, federation: FederationContext) -> Local:
    """Local training with half the configured epochs: an existing building block."""
    return Local(spec.config.epochs / 2, name=spec.label)


@pytest.fixture
def toy_method() -> Iterator[str]:
    REGISTRY.register(TOY, _half_local)
    try:
        yield TOY
    finally:
        REGISTRY.unregister(TOY)


def _args(cache: Path) -> list[str]:
    return set_args(TINY, cache)


def test_a_registered_method_runs_from_the_cli(mnist1d_cache, toy_method, tmp_path):
    simulated = tmp_path / "simulate"
    invoke(
        "simulate", *_args(mnist1d_cache), "--set", f"method={toy_method}", "--out", str(simulated)
    )
    run = read_run(simulated / toy_method)
    assert run.summary["method"] == toy_method
    assert sorted({row["round"] for row in run.rows}) == [0, 1]

    compared = tmp_path / "compare"
    methods = f"local,local:epochs=0.5,{toy_method}"
    result = invoke("compare", *_args(mnist1d_cache), "--methods", methods, "--out", str(compared))
    summaries = json.loads((compared / "summary.json").read_text())
    assert [s["method"] for s in summaries] == methods.split(",")
    assert toy_method in result.output
    toy = read_run(compared / toy_method).rows
    assert without_timings(toy) == without_timings(read_run(compared / "local_epochs_0.5").rows)
    assert without_timings(toy) == without_timings(run.rows)
    assert without_timings(toy) != without_timings(read_run(compared / "local").rows)


def test_the_registry_is_the_only_place_a_name_is_added():
    with pytest.raises(ConfigError, match="unknown method"):
        load_config(None, [f"method={TOY}"])
    REGISTRY.register(TOY, _half_local, coalition_base=True)
    try:
        config = load_config(None, [f"method={TOY}", f"equilibrium.base={TOY}"])
        assert config.method == TOY and config.equilibrium.base == TOY
        assert parse_method_spec(TOY, config).name == TOY
    finally:
        REGISTRY.unregister(TOY)
    with pytest.raises(ConfigError, match="unknown method"):
        parse_method_spec(TOY, ExperimentConfig())


def test_unknown_method_lists_the_registered_choices(tmp_path):
    names = REGISTRY.names()
    with pytest.raises(ConfigError) as spec_error:
        parse_method_spec("fedsomething", ExperimentConfig())
    with pytest.raises(ConfigError) as config_error:
        load_config(None, ["method=fedsomething"])
    for message in (str(spec_error.value), str(config_error.value)):
        assert f"choose from {', '.join(names)}" in message
    assert "method: unknown method; choose from" in str(config_error.value)
    assert "(got 'fedsomething')" in str(config_error.value)

    with pytest.raises(ConfigError) as base_error:
        load_config(None, ["fedcollab.base=local"])
    bases = ", ".join(REGISTRY.names(coalition_base=True))
    assert f"fedcollab.base: not a method a coalition can run; choose from {bases}" in str(
        base_error.value
    )

    out = tmp_path / "never"
    args = ["simulate", "--set", "method=fedsomething", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "unknown method" in result.output
    assert not out.exists()


def test_every_section_is_a_config_section():
    for name in REGISTRY.names():
        section = REGISTRY.entry(name).section
        assert section is None or section in ExperimentConfig.model_fields, name
    assert REGISTRY.names(coalition_base=True) == ("fedavg", "fedprox", "ditto", "dpfl")


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        REGISTRY.register("local", _half_local)
    with pytest.raises(ValueError, match="letters, digits and underscores"):
        REGISTRY.register("bad:name", _half_local)


def test_readme_lists_every_registered_method() -> None:
    """The user-facing list of methods is checked against the registry, so it cannot drift."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    listed = readme.split("## What it is", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in REGISTRY.names() if f"`{name}`" not in listed]
    assert not missing, f"README's method list lacks {missing}"


def test_compare_hands_its_workers_the_costliest_methods_first():
    # The pool starts methods first come, first served: DPFL (the longest in the README's
    # job) listed last must not start last; equal costs keep the order given.
    config = load_config(None, ["data.num_clients=4"])
    names = ["local", "fedavg", "ditto", "dpfl"]
    specs = [parse_method_spec(name, config) for name in names]
    assert [s.label for s in costliest_first(specs)] == ["dpfl", "ditto", "local", "fedavg"]
    longer = parse_method_spec("local:rounds=200", config)
    assert costliest_first([*specs, longer])[0] is longer


def test_a_method_cost_must_be_positive():
    with pytest.raises(ValueError, match="cost must be > 0"):
        REGISTRY.register(TOY, _half_local, cost=0)
