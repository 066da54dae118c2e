"""``stream=True``: Dataset inputs read a batch at a time give the run the stacked split gives."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

import collabfl.api as cf
from collabfl.api.data import client_splits
from collabfl.engine.step_failures import RunFailed
from collabfl.kernel.streamed import StreamedData
from tests.support.user_code import make_net
from tests.test_python_api import FAST, arrays

pytestmark = pytest.mark.slow


class Counted(Dataset[Any]):
    """A map-style Dataset over arrays that counts the inputs it hands out."""

    def __init__(self, split: tuple[Any, Any]) -> None:
        self.x, self.y = torch.from_numpy(split[0]), torch.from_numpy(split[1])
        self.reads = 0
        self.reshaped_after: int | None = None

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads += 1
        x = self.x[i]
        if self.reshaped_after is not None and self.reads > self.reshaped_after:
            x = x[:-1]  # the data changed under the run
        return x, self.y[i]


def datasets(clients: int = 3) -> dict[str, list[Counted]]:
    return {name: [Counted(s) for s in splits] for name, splits in arrays(clients).items()}


def without_times(result: cf.RunResult) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in result.history]


SPO = "equilibrium:ocs=spo,spo_hypernet_steps=20,spo_search_steps=5,spo_batch_size=8"
"""SPO's gradient oracle reads train batches too (client/gradient.py); a short search."""


@pytest.mark.parametrize("method", ["dpfl", "fedcollab:distance_rounds=3", SPO])
def test_a_streamed_run_equals_the_stacked_run(method):
    overrides = {**FAST, "fedcollab.restarts": 2}
    stacked = cf.run(method, model=make_net, overrides=overrides, **datasets())
    streamed = cf.run(method, model=make_net, overrides=overrides, stream=True, **datasets())
    assert without_times(streamed) == without_times(stacked)


def test_streamed_inputs_are_read_while_training_not_once():
    stacked, streamed = datasets(), datasets()
    cf.run("local", model=make_net, overrides=FAST, **stacked)
    cf.run("local", model=make_net, overrides=FAST, stream=True, **streamed)
    for name in ("train", "test"):
        for before, after in zip(stacked[name], streamed[name], strict=True):
            assert before.reads == len(before)  # stacked: one pass, before the first round
            assert after.reads > 2 * len(after)  # the load's pass, then every round's reads
    assert [d.reads for d in streamed["val"]] == [len(d) for d in streamed["val"]]


def test_only_labels_are_kept_and_val_is_carved_in_memory():
    data = datasets(clients=2)
    splits = client_splits(
        data["train"], None, data["test"], torch.device("cpu"), 0.25, seed=0, stream=True
    )
    for client in splits:
        assert isinstance(client.train, StreamedData) and isinstance(client.test, StreamedData)
        assert not isinstance(client.val, StreamedData)
        assert len(client.train) + len(client.val) == 24
    carved = cf.run(
        "local", model=make_net, overrides=FAST, val=None, val_fraction=0.25, stream=True,
        train=datasets()["train"], test=datasets()["test"],
    )  # fmt: skip
    held = cf.run(
        "local", model=make_net, overrides=FAST, val=None, val_fraction=0.25,
        train=datasets()["train"], test=datasets()["test"],
    )  # fmt: skip
    assert without_times(carved) == without_times(held)


def test_a_streamed_item_whose_shape_changed_fails_the_run_naming_it():
    data = datasets()
    for dataset in data["train"]:
        dataset.reshaped_after = len(dataset) + 1  # right for the load and the model check
    with pytest.raises(RunFailed, match=r"has an input of shape \(39,\), not \(40,\)"):
        cf.run("local", model=make_net, overrides=FAST, stream=True, **data)


def test_compare_streams_and_agrees_with_the_stacked_comparison():
    kwargs = {"model": make_net, "overrides": FAST, "seeds": [0, 1]}
    stacked = cf.compare(["local", "dpfl"], **datasets(), **kwargs)
    streamed = cf.compare(["local", "dpfl"], **datasets(), stream=True, **kwargs)
    assert [m.mean_test_acc for m in streamed.methods] == [m.mean_test_acc for m in stacked.methods]
