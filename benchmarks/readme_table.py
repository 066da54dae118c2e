"""The README's quickstart table, produced by a fresh run rather than typed.

A fresh ``collabfl compare examples/quickstart.toml`` (about 85 s on 2 cores) writes
summary.json; its first five results columns, rendered as the run's results.md renders
them, and a line naming the machine that printed them replace the text between the README's
quickstart-table markers. ``--check`` writes nothing and exits 1 when the README's table is
not what the run printed.

The seeds fix the data, the splits and the batch order, not the processor's rounding: the
same command on another processor (or with torch's AVX2 kernels in place of its AVX-512
ones) trains with other last bits and prints figures up to about a point apart. So the check
is exact on the machine the table names, and on any other one compares the accuracies
within ``OTHER_MACHINE_POINTS`` and the byte columns exactly, and says which it did.

Run: python benchmarks/readme_table.py [--check] [--summary runs/x/summary.json]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from _common import REPO_ROOT, cpu
from quickstart_time import QUICKSTART, collabfl_executable

from collabfl.engine.report.table import results_markdown

BEGIN = "<!-- quickstart-table: benchmarks/readme_table.py writes this table -->"
END = "<!-- /quickstart-table -->"
COLUMNS = 5
"""Method, test accuracy, variance, peer bytes and coordinator bytes."""
PRINTED_ON = "Printed on "
"""How the line under the table that names the machine begins."""
OTHER_MACHINE_POINTS = 2.0
"""How far apart (percentage points) a mean or a std of accuracy may be when the table comes
from another machine; a variance is compared as its square root. Measured on 2026-11-29:
an AMD EPYC, with torch's default kernels and with three pinned settings, printed means at
most 1.3 points and stds at most 1.0 point from the table of the machine before it."""


def machine() -> str:
    """What the table's last digits depend on: the processor and torch's kernels for it."""
    found = cpu()
    model = found.get("cpu_model") or platform.processor() or platform.machine()
    flags = " ".join(found.get("cpu_flags", []))
    kernels = torch.backends.cpu.get_cpu_capability()
    return f"{model} ({flags}), torch {torch.__version__} with its {kernels} kernels"


def block(table_text: str, machine_name: str) -> str:
    """What goes between the markers: the table, then the line naming its machine."""
    return f"{table_text}\n{PRINTED_ON}{machine_name}.\n"


def cells(table_text: str) -> list[list[str]]:
    """A rendered table's rows without the header, as cells (lines that are no row left out)."""
    lines = table_text.strip().splitlines()[2:]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines]
    return [row for row in rows if row]


def recorded(readme: str) -> tuple[list[list[str]], str | None]:
    """The README's table rows (cells without the header) and the machine it names."""
    inside = readme.split(BEGIN)[1].split(END)[0].strip()
    named = [line for line in inside.splitlines() if line.startswith(PRINTED_ON)]
    return cells(inside), named[0][len(PRINTED_ON) :].rstrip(".") if named else None


def _mean_std(cell: str) -> tuple[float, float] | None:
    mean, _, std = cell.partition("±")
    try:
        return float(mean), float(std)
    except ValueError:
        return None


def differences(written: list[list[str]], printed: list[list[str]], points: float) -> list[str]:
    """Where ``printed`` is not ``written`` within ``points`` (accuracies) and exactly (the
    methods, the byte columns, any cell that is not a number)."""
    if [row[0] for row in written] != [row[0] for row in printed]:
        return [f"methods {[row[0] for row in written]} against {[row[0] for row in printed]}"]
    found = []
    for old, new in zip(written, printed, strict=True):
        method = new[0]
        old_acc, new_acc = _mean_std(old[1]), _mean_std(new[1])
        if old_acc is None or new_acc is None:
            same_acc = old[1] == new[1]
        else:
            same_acc = all(abs(a - b) <= points for a, b in zip(old_acc, new_acc, strict=True))
        try:
            same_var = abs(math.sqrt(float(old[2])) - math.sqrt(float(new[2]))) <= points
        except ValueError:
            same_var = old[2] == new[2]
        if not same_acc:
            found.append(f"{method}: test accuracy {old[1]} against {new[1]}")
        if not same_var:
            found.append(f"{method}: variance {old[2]} against {new[2]}")
        if old[3:] != new[3:]:
            found.append(f"{method}: bytes {old[3:]} against {new[3:]}")
    return found


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
    here, printed = machine(), table(summaries)
    produced = replace_table(readme, block(printed, here))
    if produced == readme:
        print(f"{args.readme}: the quickstart table is what the run printed")
        return 0
    if args.check:
        rows, named = recorded(readme)
        if named is not None and named != here:
            found = differences(rows, cells(printed), OTHER_MACHINE_POINTS)
            if not found:
                print(
                    f"{args.readme}: the quickstart table was printed on {named}; this run, on "
                    f"{here}, agrees within {OTHER_MACHINE_POINTS:g} points of accuracy and "
                    "in every byte"
                )
                return 0
            print(f"{args.readme}: beyond what another machine explains: {'; '.join(found)}")
        print(f"{args.readme}: the quickstart table differs from the run's:\n{printed}")
        return 1
    args.readme.write_text(produced, encoding="utf-8")
    print(f"{args.readme}: quickstart table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
