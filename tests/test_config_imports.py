"""A config error is answered before torch and Flower are imported: loading and validating a
config (the pydantic models, the method registry's names) reads neither, so a typo costs a
fraction of a second, not the seconds (minutes on a loaded machine) those imports take."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "flwr")
QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.toml"

LOAD = f"""
import sys
from collabfl.engine.config import ConfigError, load_config
from collabfl.engine.methods import parse_method_spec

config = load_config({str(QUICKSTART)!r}, ["method=ipfl", "training.amp=off"])
parse_method_spec("dpfl:budget=3", config)
for bad in (["training.lrr=1"], ["method=nope"], ["data.alpha=-1"], ["model.name=nonet"]):
    try:
        load_config(None, bad)
    except ConfigError:
        pass
    else:
        raise SystemExit(f"{{bad}} was accepted")
print(sorted(name for name in {HEAVY!r} if name in sys.modules))
"""

CLI = f"""
import sys
from collabfl.cli.main import main

sys.argv = ["collabfl", *sys.argv[1:]]
try:
    main()
finally:
    print(sorted(name for name in {HEAVY!r} if name in sys.modules))
"""


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def test_loading_and_validating_a_config_imports_neither_torch_nor_flower():
    done = _python(LOAD)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("training.lrr=1", "training.lrr: .*did you mean lr"),
        ("data.partition_file=/no/such.npz", "data.partition_file: /no/such.npz does not exist"),
    ],
)
def test_the_cli_refuses_a_bad_config_in_one_line_before_the_heavy_imports(
    tmp_path, override, said
):
    out = tmp_path / "run"
    done = _python(CLI, "simulate", "--set", override, "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert done.stdout.strip() == "[]"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert re.search(said, lines[0])
    assert not out.exists()
