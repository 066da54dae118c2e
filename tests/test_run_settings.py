"""The run settings that cross from the ServerApp to every client (and into its state dir) are
validated like the user's config: a wrong type, a missing or an unknown key is one clear
error naming the field, never a bare TypeError or a seed that is a string."""

from __future__ import annotations

import json

import pytest

from collabfl.apps.run_setup import RunSettings
from collabfl.kernel.training import TrainingConfig

GOOD = RunSettings("r1", 7, "mnist1d_cnn", "cpu", 2, TrainingConfig(batch_size=8))


def _with(**changes: object) -> str:
    values = json.loads(GOOD.to_json())
    values.update(changes)
    return json.dumps({k: v for k, v in values.items() if v is not None})


def test_settings_survive_the_round_trip() -> None:
    assert RunSettings.from_json(GOOD.to_json()) == GOOD


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (_with(seed="7"), r"seed: .*integer.*'7'"),
        (_with(threads=1.5), r"threads: .*integer.*1\.5"),
        (_with(model=None), r"model: Field required"),
        (_with(colour="red"), r"colour: Unexpected"),
        (_with(training={"batch_size": 0}), r"training\.batch_size: .*greater than or equal"),
        ("[1, 2]", r"run settings: \(whole document\): .*object"),
        ("{", r"run settings: .*JSON"),
    ],
)
def test_a_malformed_field_is_named_in_one_line(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named) as caught:
        RunSettings.from_json(text)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("run settings: ")
