"""A participant's data file is checked on load: a bad one stops the daemon with one line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from collabfl.client.data.client_file import load_client_file
from tests.support.client_data import spoil, write_client_data

BAD_FILES = {
    "num-classes-text": ({"meta": {"num_classes": "10"}}, "num_classes must be an int"),
    "num-classes-float": ({"meta": {"num_classes": 10.0}}, "num_classes must be an int"),
    "client-id-text": ({"meta": {"client_id": "0"}}, "client_id must be an int"),
    "shape-text": ({"meta": {"input_shape": ["1", 40]}}, "input_shape must be a list"),
    "malicious-text": ({"meta": {"malicious": "no"}}, "malicious must be true or false"),
    "partition-two-lines": ({"meta": {"partition": "IID\nα"}}, "partition must be one line"),
    "partition-huge": ({"meta": {"partition": "x" * 101}}, "partition must be one line"),
    "dataset-number": ({"meta": {"dataset": 7}}, "dataset must be one line"),
    "nan-samples": (
        {"x_train": np.full((8, 1, 40), np.nan, np.float32)},
        "train samples hold NaN or Inf",
    ),
    "inf-samples": ({"x_val": np.full((8, 1, 40), np.inf, np.float32)}, "val samples hold NaN"),
    "other-shape": ({"x_test": np.zeros((8, 1, 41), np.float32)}, "test samples have shape"),
    "float-labels": ({"y_train": np.zeros(8, np.float64)}, "train split: y must be a 1-D int64"),
    "label-out-of-range": ({"y_val": np.full(8, 10, np.int64)}, r"val labels outside 0\.\.9"),
    "negative-label": ({"y_test": np.full(8, -1, np.int64)}, "test labels outside"),
    "length-mismatch": ({"y_train": np.zeros(7, np.int64)}, "x has 8 samples but y has 7"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_malformed_client_file_is_refused_with_its_name(tmp_path, case):
    changes, reason = BAD_FILES[case]
    path = spoil(write_client_data(tmp_path / "c.npz"), **changes)
    with pytest.raises(ValueError, match=reason) as error:
        load_client_file(path)
    assert str(error.value).startswith(f"{path}: ")


def test_valid_client_file_loads(tmp_path):
    client, meta = load_client_file(write_client_data(tmp_path / "c.npz"))
    assert (len(client.train), meta["num_classes"]) == (8, 10)


def test_daemon_exits_2_with_one_line_on_a_bad_data_file(tmp_path):
    path = spoil(write_client_data(tmp_path / "c.npz"), meta={"num_classes": "10"})
    (tmp_path / "grant.pub").write_bytes(b"")
    command = [sys.executable, "-m", "collabfl.client.daemon", "--client-id", "0"]
    command += ["--data", str(path), "--state-dir", str(tmp_path / "state"), "--insecure"]
    command += ["--superlink", "127.0.0.1:1", "--peer-address", "localhost:1"]
    command += ["--coordinator-key", str(tmp_path / "grant.pub")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("collabfl-client:")]
    assert len(errors) == 1, result.stderr
    assert f"{path}: num_classes must be an int >= 2, got '10'" in errors[0]
