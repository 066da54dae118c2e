"""benchmarks/readme_table.py: the README's quickstart table comes from a fresh run.

The quickstart itself takes 100-110 s on 2 idle cores (docs/performance.md), too long for
the suite, so the check runs the same script on a tiny federation: a fresh run rewrites a
stale table, a second fresh run agrees with it, and the README's own table has the markers
and the columns the script renders.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import readme_table  # noqa: E402

pytestmark = pytest.mark.slow

TINY = [
    "data.num_train=600",
    "data.num_test=300",
    "data.num_clients=3",
    "rounds=1",
    "jobs=1",
    "methods=['local', 'dpfl']",
]


def test_the_readme_table_sits_between_the_markers_with_the_rendered_columns():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_table.replace_table(readme, "X\n") != readme
    inside = readme.split(readme_table.BEGIN)[1].split(readme_table.END)[0].strip().splitlines()
    header = readme_table.table([]).splitlines()
    assert inside[:2] == header
    rows, machine = readme_table.recorded(readme)
    assert [row[0] for row in rows] == ["local", "fedavg", "fedavg_ft", "fedprox", "ditto", "dpfl"]
    assert all(len(row) == readme_table.COLUMNS for row in rows)
    assert machine and "torch" in machine  # the line under the table names where it ran


def test_a_fresh_run_rewrites_a_stale_table_and_a_second_run_agrees(
    mnist1d_cache, tmp_path, capsys
):
    readme = tmp_path / "README.md"
    stale = "| Method | Test acc (%) |\n| local | 99.99 ± 0.00 |\n"
    readme.write_text(f"# title\n{readme_table.BEGIN}\n{stale}{readme_table.END}\nafter\n")
    cache = json.dumps(str(mnist1d_cache))
    args = [
        "--readme",
        str(readme),
        *(a for s in [*TINY, f"data.cache_dir={cache}"] for a in ("--set", s)),
    ]
    assert readme_table.main([*args, "--check"]) == 1
    assert "99.99" in readme.read_text()
    first_run = capsys.readouterr().out.split("differs from the run's:\n", 1)[1]
    assert readme_table.main(args) == 0
    written = readme.read_text()
    assert "99.99" not in written and written.endswith(f"{readme_table.END}\nafter\n")
    rows, machine = readme_table.recorded(written)
    assert [row[0] for row in rows] == ["local", "dpfl"] and machine == readme_table.machine()
    # A second fresh run agrees: the table the check's run printed is the one written, so a
    # check against that run would pass (main's test: the README unchanged by its table).
    here = readme_table.machine()
    assert (
        readme_table.replace_table(written, readme_table.block(first_run.rstrip("\n") + "\n", here))
        == written
    )
