"""The README's quickstart table, produced by a fresh run rather than typed.

A fresh ``collabfl compare examples/quickstart.toml`` (about 85 s on 2 cores) writes
summary.json; its first five results columns, rendered as the run's results.md renders
them, replace the table between the README's quickstart-table markers. ``--check`` writes
nothing and exits 1 when the README's table is not what the run printed.

Run: python benchmarks/readme_table.py [--check] [--summary runs/x/summary.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import REPO_ROOT
from quickstart_time import QUICKSTART, collabfl_executable

from collabfl.engine.report.table import results_markdown

BEGIN = "<!-- quickstart-table: benchmarks/readme_table.py writes this table -->"
END = "<!-- /quickstart-table -->"
COLUMNS = 5
"""Method, test accuracy, variance, peer bytes and coordinator bytes."""


def table(summaries: list[dict[str, Any]]) -> str:
    """The README's table: the results.md table's first ``COLUMNS`` columns."""
    lines = results_markdown(summaries).splitlines()
    rows = [line for line in lines if line.startswith("|")]
    return "\n".join("|".join(row.split("|")[: COLUMNS + 1]) + "|" for row in rows) + "\n"


def replace_table(readme: str, new_table: str) -> str:
    """``readme`` with the text between the markers replaced; ValueError without them."""
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise ValueError(f"the README must hold the markers {BEGIN!r} and {END!r} once each")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{new_table}{END}{tail}"


def fresh_summaries(config: Path, sets: list[str], out: Path) -> list[dict[str, Any]]:
    """Run ``collabfl compare`` as a user would type it; its summary.json."""
    args = [collabfl_executable(), "compare", str(config), "--out", str(out)]
    args += [arg for setting in sets for arg in ("--set", setting)]
    subprocess.run(args, cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL)
    return list(json.loads((out / "summary.json").read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the README differs")
    parser.add_argument("--summary", type=Path, help="a run's summary.json instead of a run")
    parser.add_argument("--config", type=Path, default=QUICKSTART)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--readme", type=Path, default=REPO_ROOT / "README.md")
    args = parser.parse_args(argv)
    if args.summary is not None:
        summaries = list(json.loads(args.summary.read_text()))
    else:
        with tempfile.TemporaryDirectory(prefix="collabfl-readme-") as folder:
            summaries = fresh_summaries(args.config, args.sets, Path(folder) / "run")
    readme = args.readme.read_text(encoding="utf-8")
    produced = replace_table(readme, table(summaries))
    if produced == readme:
        print(f"{args.readme}: the quickstart table is what the run printed")
        return 0
    if args.check:
        print(f"{args.readme}: the quickstart table differs from the run's:\n{table(summaries)}")
        return 1
    args.readme.write_text(produced, encoding="utf-8")
    print(f"{args.readme}: quickstart table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
