"""cf.compare(resume=True): a comparison cut short continues where it stopped, as
`collabfl compare --seeds --resume` does (tests/test_compare_resume.py)."""

from __future__ import annotations

import importlib
import json

import pytest

import collabfl.api as cf
from collabfl.engine.config import ConfigError
from tests.support.user_code import make_net
from tests.test_python_api import FAST, arrays
from tests.test_python_api_compare import untimed

pytestmark = pytest.mark.slow

api_compare = importlib.import_module("collabfl.api.compare")  # cf.compare is its function


def compare(out, **kwargs) -> cf.Comparison:
    return cf.compare(
        ["local", "fedavg"], make_net, overrides=FAST, seeds=[0], out=out, **arrays(), **kwargs
    )


def test_resume_keeps_the_finished_runs_and_runs_the_rest(tmp_path, monkeypatch):
    out = tmp_path / "cmp"
    first = compare(out)
    (out / "seed_0" / "fedavg" / "summary.json").unlink()  # as if cut short in its last round
    ran = []
    real_run = api_compare.run
    monkeypatch.setattr(
        api_compare, "run", lambda spec, *a, **k: ran.append(spec) or real_run(spec, *a, **k)
    )
    again = compare(out, resume=True)
    assert ran == ["fedavg"]
    for method in ("local", "fedavg"):
        assert again[method].mean_test_acc == pytest.approx(first[method].mean_test_acc)
        assert untimed(again[method].runs[0].history) == untimed(first[method].runs[0].history)
    aggregate = {s["method"] for s in json.loads((out / "summary.json").read_text())}
    assert aggregate == {"local", "fedavg"}


def test_resume_refuses_other_settings_and_a_missing_out_before_running(tmp_path, monkeypatch):
    out = tmp_path / "cmp"
    compare(out)
    monkeypatch.setattr(api_compare, "run", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(ConfigError, match=r"other settings.*lr"):
        compare(out, resume=True, lr=0.5)
    with pytest.raises(ValueError, match="resume needs out"):
        compare(None, resume=True)
    with pytest.raises(ValueError, match="pick one"):
        compare(out, resume=True, overwrite=True)
