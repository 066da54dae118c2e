"""Demo data that `collabfl federation up` and `federation prepare` write is a participant's
training data: 0600 files in a 0700 folder, whatever the umask.

Before, each `client-K.npz` was 0644 under the usual umask 022: any local user could read
every client's training data.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app


@pytest.fixture
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_prepared_client_files_are_private(tmp_path, usual_umask):
    out = tmp_path / "data"
    result = CliRunner().invoke(app, ["federation", "prepare", "--out", str(out), "--clients", "2"])
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("client-*.npz"))
    assert [f.name for f in files] == ["client-0.npz", "client-1.npz"]
    assert {oct(stat.S_IMODE(f.stat().st_mode)) for f in files} == {"0o600"}
    assert oct(stat.S_IMODE(out.stat().st_mode)) == "0o700"
