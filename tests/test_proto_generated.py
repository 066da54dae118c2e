"""The committed protobuf/gRPC modules match the .proto sources."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GENERATE = Path(__file__).resolve().parents[1] / "proto" / "generate.py"


def test_generated_modules_are_up_to_date():
    result = subprocess.run(
        [sys.executable, str(GENERATE), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"run `python proto/generate.py`:\n{result.stderr}"
