"""``--out``: an earlier run is never overwritten by accident, and default folders are unique."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import _output_dir, app
from collabfl.engine.config import load_config
from tests.support.cli_runs import invoke, set_args

TINY = ["data.num_train=400", "data.num_test=200", "data.num_clients=3", "rounds=1", "jobs=1"]


def _compare(out: Path, cache: Path, *extra: str):
    args = ["compare", "--methods", "local", *set_args(TINY, cache), "--out", str(out), *extra]
    return CliRunner().invoke(app, args)


def test_a_second_run_into_the_same_out_is_refused_before_writing(
    mnist1d_cache: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    invoke("compare", "--methods", "local", *set_args(TINY, mnist1d_cache), "--out", str(out))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    refused = _compare(out, mnist1d_cache)
    assert refused.exit_code == 2, refused.output
    assert refused.exception is None or isinstance(refused.exception, SystemExit)
    assert "holds an earlier run" in refused.output and "--overwrite" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_overwrite_replaces_the_earlier_run(mnist1d_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    invoke("compare", "--methods", "local", *set_args(TINY, mnist1d_cache), "--out", str(out))
    (out / "left-by-the-first-run.txt").write_text("x")
    replaced = _compare(out, mnist1d_cache, "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert (out / "summary.json").exists() and (out / "partition.npz").exists()
    assert not (out / "left-by-the-first-run.txt").exists()


def test_a_folder_without_a_run_is_never_deleted(mnist1d_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "notes"
    out.mkdir()
    (out / "thesis.tex").write_text("keep me")
    refused = _compare(out, mnist1d_cache, "--overwrite")
    assert refused.exit_code == 2, refused.output
    assert "holds no collabfl run" in refused.output
    assert (out / "thesis.tex").read_text() == "keep me"


def test_default_folders_are_unique_within_one_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None, [])
    first = _output_dir(None, False, config, "compare")
    first.mkdir(parents=True)
    second = _output_dir(None, False, config, "compare")
    assert second != first and not second.exists()
