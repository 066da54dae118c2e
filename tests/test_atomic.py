"""Crash-safe writes: durable (file and folder synced); state is 0600, shared outputs follow
the user's umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from collabfl.client.data.atomic import save_npz_atomic
from collabfl.engine.report.run_dir import RunWriter
from collabfl.kernel.atomic import current_umask, replacing, write_text


@pytest.fixture
def umask_027() -> Iterator[None]:
    previous = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_umask_is_read_without_changing_it(umask_027: None) -> None:
    assert current_umask() == 0o027
    assert current_umask() == 0o027


def test_state_is_owner_only_by_default_and_shared_outputs_follow_the_umask(
    tmp_path: Path, umask_027: None
) -> None:
    write_text(tmp_path / "summary.json", "{}", shared=True)
    write_text(tmp_path / "slots.json", "{}")
    assert _mode(tmp_path / "summary.json") == 0o640
    assert _mode(tmp_path / "slots.json") == 0o600


def test_run_files_and_partitions_follow_the_umask(tmp_path: Path, umask_027: None) -> None:
    writer = RunWriter(tmp_path / "run")
    writer.write_config({"seed": 0})
    writer.write_summary({"mean_test_acc": 0.5})
    save_npz_atomic(tmp_path / "partition.npz", {"client_0": np.arange(3)})
    for name in ("config.json", "summary.json", "metrics.jsonl"):
        assert _mode(tmp_path / "run" / name) == 0o640, name
    assert _mode(tmp_path / "partition.npz") == 0o640


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    write_text(target, "old")
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_the_rename_is_flushed_to_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a sync of the folder, a power cut after the rename can lose the new entry."""
    synced: list[tuple[int, int]] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            synced.append((info.st_dev, info.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    write_text(tmp_path / "checkpoint.json", "{}")
    folder = tmp_path.stat()
    assert (folder.st_dev, folder.st_ino) in synced
