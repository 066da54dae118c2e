"""collabfl.api.run: a user's model, data, loss and optimiser in the in-process runtime."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset
from typer.testing import CliRunner

import collabfl.api as cf
from collabfl.cli.main import app
from collabfl.engine.config import ConfigError, load_config
from tests.support.cli_runs import invoke, set_args
from tests.support.user_code import make_net

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
FAST = {"rounds": 2, "epochs": 1, "training.batch_size": 8, "dpfl.init_epochs": 1}


def arrays(clients: int = 3, seed: int = 0) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Every client's (x, y) splits: 40 features, 10 classes, a little signal."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(10, 40))

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 10, n)
        return (centres[y] + rng.normal(size=(n, 40))).astype(np.float32), y.astype(np.int64)

    return {
        name: [split(n) for _ in range(clients)]
        for name, n in (("train", 24), ("val", 12), ("test", 12))
    }


def run(method: str = "local", **kwargs) -> cf.RunResult:
    data = arrays()
    kwargs.setdefault("model", make_net)
    return cf.run(method, overrides=FAST, **{**data, **kwargs})


def finite(result: cf.RunResult) -> bool:
    values = [c.best_test_acc for c in result.clients] + [c.train_loss for c in result.clients]
    return all(v is not None and math.isfinite(v) for v in values)


@pytest.mark.parametrize("method", ["local", "fedavg", "dpfl"])
def test_a_model_factory_trains_every_client(method):
    result = run(method)
    assert result.status == "finished" and result.rounds == 2
    assert [c.client for c in result.clients] == [0, 1, 2]
    assert finite(result)
    assert result.mean_test_acc == pytest.approx(np.mean([c.best_test_acc for c in result.clients]))
    assert len(result.history) == 2 * 3 and result.run_dir is None


def test_an_import_path_names_the_model(tmp_path):
    result = run(model="tests.support.user_code:make_net", out=tmp_path / "run")
    assert finite(result)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["model"]["name"] == "tests.support.user_code:make_net"
    assert result.run_dir == tmp_path / "run"
    assert (tmp_path / "run" / "summary.json").exists()


def test_the_optimizer_factory_steps_every_local_training():
    made: list[torch.optim.Optimizer] = []

    def adam(params):
        made.append(torch.optim.Adam(params, lr=0.01))
        return made[-1]

    result = run(optimizer=adam)
    assert finite(result)
    assert len(made) == 3 * 2  # a fresh optimiser per client per round
    assert all(opt.state and all("exp_avg" in s for s in opt.state.values()) for opt in made)
    assert result.summary is not None


def test_an_lr_schedule_returned_with_the_optimizer_is_stepped():
    schedules = []

    def sgd_with_decay(params):
        optimizer = torch.optim.SGD(params, lr=0.1)
        schedules.append(torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5))
        return optimizer, schedules[-1]

    run(optimizer=sgd_with_decay)
    steps = math.ceil(24 / 8)  # one epoch of 24 samples in batches of 8
    assert all(s.last_epoch == steps for s in schedules)
    assert all(s.get_last_lr() == [0.1 * 0.5**steps] for s in schedules)


def test_the_optimizer_changes_the_result():
    plain = run()
    adam = run(optimizer="tests.support.user_code:make_adam")
    assert [c.train_loss for c in plain.clients] != [c.train_loss for c in adam.clients]


def test_the_loss_trains_and_evaluates():
    calls = {"train": 0, "eval": 0}

    def counted(outputs, labels):
        calls["train" if torch.is_grad_enabled() else "eval"] += 1
        return F.cross_entropy(outputs, labels, label_smoothing=0.1)

    result = run(loss=counted)
    assert calls["train"] == 3 * 2 * 3  # clients × rounds × steps
    assert calls["eval"] > 0
    named = run(loss="tests.support.user_code:smoothed_loss")
    assert [c.val_loss for c in named.clients] == [c.val_loss for c in result.clients]
    assert [c.val_loss for c in named.clients] != [c.val_loss for c in run().clients]


def test_datasets_and_arrays_give_the_same_run():
    data = arrays()

    def dataset(split):
        x, y = split
        return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

    datasets = {name: [dataset(s) for s in splits] for name, splits in data.items()}
    from_arrays = cf.run("dpfl", model=make_net, overrides=FAST, **data)
    from_datasets = cf.run("dpfl", model=make_net, overrides=FAST, **datasets)
    strip = [{k: v for k, v in row.items() if not k.endswith("_s")} for row in from_arrays.history]
    assert strip == [
        {k: v for k, v in row.items() if not k.endswith("_s")} for row in from_datasets.history
    ]


def test_a_zoo_model_name_and_the_caller_threads_are_kept():
    threads = torch.get_num_threads()
    data = {k: [(x.reshape(-1, 1, 40), y) for x, y in v] for k, v in arrays().items()}
    result = cf.run("local", model="mnist1d_cnn", overrides={**FAST, "threads": 1}, **data)
    assert finite(result)
    assert torch.get_num_threads() == threads


def test_a_coalition_method_runs_on_user_data():
    result = cf.run(
        "fedcollab:distance_rounds=3",
        model=make_net,
        overrides={**FAST, "fedcollab.restarts": 2},
        **arrays(),
    )
    assert finite(result)


def test_an_existing_run_directory_is_kept_unless_overwrite(tmp_path):
    run(out=tmp_path / "run")
    with pytest.raises(ValueError, match="holds an earlier run"):
        run(out=tmp_path / "run")
    assert finite(run(out=tmp_path / "run", overwrite=True))


class NotAModule:
    pass


def _one_client_wider(client: int, split: str = "train") -> list[tuple[np.ndarray, np.ndarray]]:
    """The default clients' ``split`` with 30 features instead of 40 at ``client``."""
    splits = list(arrays()[split])
    y = splits[client][1]
    splits[client] = (np.zeros((len(y), 30), np.float32), y)
    return splits


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": NotAModule}, "returned a NotAModule object, not a torch.nn.Module"),
        ({"model": "tests.support.user_code:not_a_module"}, "returned a int object, not a torch"),
        ({"model": "tests.support.no_such_module:make"}, "cannot import 'tests.support.no_such"),
        ({"model": "tests.support.user_code:nothing"}, "user_code has no 'nothing'"),
        ({"model": "tests.support.user_code:LIST_NOT_CALLABLE"}, "is not callable"),
        ({"model": "tests support:make"}, "model.name: .*not an import path"),
        ({"model": "tests.support.user_code.make_net"}, "model.name: unknown model"),
        ({"loss": "not valid:"}, "training.loss: .*not an import path"),
        ({"optimizer": "tests.support.user_code:nothing"}, "has no 'nothing'"),
        (
            {"optimizer": lambda params: "adam"},
            "returned a str object, not a torch.optim.Optimizer",
        ),
        ({"model": lambda: nn.Linear(40, 3)}, "one output per class"),
        ({"train": arrays()["train"][:2]}, "same clients; got {'train': 2, 'val': 3"),
        (
            {"train": [(np.zeros((4, 40), np.float32), np.zeros(3, np.int64))] * 3},
            r"train\[0\]: x has 4",
        ),
        (
            {"val": [(np.zeros((4, 40), np.float32), np.zeros(4) + 0.5)] * 3},
            "labels must be integers",
        ),
        (
            {"test": [(np.zeros((0, 40), np.float32), np.zeros(0, np.int64))] * 3},
            r"test\[0\] is empty",
        ),
        ({"test": [np.zeros(3)] * 3}, "expected a torch Dataset or a pair of arrays"),
        (
            {"optimizer": torch.optim.Adam(nn.Linear(2, 2).parameters())},
            r"optimizer is an? Adam instance.*lambda params: torch.optim.Adam\(params",
        ),
        ({"loss": nn.CrossEntropyLoss}, r"loss is the class CrossEntropyLoss.*Loss\(\)"),
        ({"loss": 3}, "loss must be a function"),
        ({"train": _one_client_wider(1)}, r"client 1's train inputs of shape \(30,\) do not fit"),
        (
            {"test": _one_client_wider(2, "test"), "loss": nn.CrossEntropyLoss()},
            r"client 2's test inputs of shape \(30,\) do not fit",
        ),
    ],
)
def test_bad_input_is_one_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message) as raised:
        run(**kwargs)
    assert "\n" not in str(raised.value).strip() or isinstance(raised.value, ConfigError)


def test_the_example_runs():
    done = subprocess.run(
        [sys.executable, "examples/custom_model.py", "--rounds", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["local", "dpfl"]
    assert all("mean test acc" in line for line in lines)


SMALL_CLI = ["data.num_train=600", "data.num_test=300", "data.num_clients=3", "rounds=1"]


def test_a_toml_config_names_user_code(mnist1d_cache, tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text(
        '[model]\nname = "tests.support.user_code:make_net"\n'
        '[training]\noptimizer = "tests.support.user_code:make_adam"\n'
    )
    config = load_config(toml)
    assert config.model.name == "tests.support.user_code:make_net"
    out = tmp_path / "out"
    invoke("simulate", str(toml), *set_args(SMALL_CLI, mnist1d_cache), "--out", str(out))
    resolved = json.loads((out / "dpfl" / "config.json").read_text())["resolved"]
    assert resolved["model"] == "tests.support.user_code:make_net"
    assert resolved["model_bytes"] == (40 * 10 + 10) * 4


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.name=tests.support.no_such_module:make", "cannot import"),
        ("training.loss=tests.support.user_code:nothing", "has no 'nothing'"),
        ("model.name=tests.support.user_code:not_a_module", "not a torch.nn.Module"),
    ],
)
def test_the_cli_refuses_user_code_that_does_not_resolve_before_writing(
    mnist1d_cache: Path, tmp_path, override, message
):
    out = tmp_path / "out"
    args = set_args([*SMALL_CLI, override], mnist1d_cache)
    result = CliRunner().invoke(app, ["simulate", *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not out.exists()
