"""The suite's xdist layout: the slowest files go to the workers first, as listed."""

import tomllib
from pathlib import Path

from conftest import SLOWEST_FIRST

TESTS = Path(__file__).resolve().parent


def test_every_listed_file_exists_once():
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
    assert [name for name in SLOWEST_FIRST if not (TESTS / name).is_file()] == []


def test_xdist_keeps_the_collection_order_of_files():
    """Without this flag ``--dist loadfile`` hands out the files with the most tests first."""
    pyproject = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())
    addopts = pyproject["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert "--no-loadscope-reorder" in addopts
