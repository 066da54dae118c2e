"""benchmarks/readme_table.py --check on a machine other than the one the README's table
names: the same seeds round differently on another processor, so the accuracies are compared
within a stated margin and the byte columns exactly; on the named machine the check stays
exact."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import readme_table  # noqa: E402

HEADER = (
    "| Method | Test acc (%) | Variance (%²) | Peer bytes/client/round | "
    "Coordinator bytes/client/round |\n|:---|---:|---:|---:|---:|\n"
)
WRITTEN = HEADER + (
    "| local | 82.05 ± 16.76 | 280.88 | 0 B | 0 B |\n"
    "| dpfl | 90.92 ± 8.13 | 66.03 | 1.4 MiB | 0 B |\n"
)
OTHER_CPU = HEADER + (
    "| local | 82.01 ± 16.75 | 280.59 | 0 B | 0 B |\n"
    "| dpfl | 90.84 ± 8.86 | 78.46 | 1.4 MiB | 0 B |\n"
)


def _readme(tmp_path: Path, table: str, machine: str) -> Path:
    readme = tmp_path / "README.md"
    inside = readme_table.block(table, machine)
    readme.write_text(f"# t\n{readme_table.BEGIN}\n{inside}{readme_table.END}\n", encoding="utf-8")
    return readme


def _check(tmp_path: Path, readme: Path, printed: str, monkeypatch: pytest.MonkeyPatch) -> int:
    summary = tmp_path / "summary.json"
    summary.write_text("[]")
    monkeypatch.setattr(readme_table, "table", lambda summaries: printed)
    return readme_table.main(["--check", "--summary", str(summary), "--readme", str(readme)])


def test_another_machines_rounding_passes_within_the_margin(tmp_path, monkeypatch, capsys):
    readme = _readme(tmp_path, WRITTEN, "Some Xeon, torch 2.13.0+cpu with its AVX2 kernels")
    assert _check(tmp_path, readme, OTHER_CPU, monkeypatch) == 0
    said = capsys.readouterr().out
    assert "was printed on Some Xeon" in said and readme_table.machine() in said
    assert readme.read_text(encoding="utf-8").count("82.05") == 1  # --check writes nothing


def test_on_the_named_machine_the_check_is_exact(tmp_path, monkeypatch, capsys):
    readme = _readme(tmp_path, WRITTEN, readme_table.machine())
    assert _check(tmp_path, readme, OTHER_CPU, monkeypatch) == 1
    assert "differs from the run's" in capsys.readouterr().out
    assert _check(tmp_path, readme, WRITTEN, monkeypatch) == 0


@pytest.mark.parametrize(
    ("printed", "named"),
    [
        (OTHER_CPU.replace("90.84 ± 8.86", "87.90 ± 8.86"), "dpfl: test accuracy"),
        (OTHER_CPU.replace("78.46", "160.00"), "dpfl: variance"),
        (OTHER_CPU.replace("1.4 MiB", "1.5 MiB"), "dpfl: bytes"),
        (OTHER_CPU.replace("| dpfl |", "| ditto |"), "methods"),
    ],
)
def test_beyond_what_another_machine_explains_fails_and_says_where(
    tmp_path, monkeypatch, capsys, printed, named
):
    readme = _readme(tmp_path, WRITTEN, "Some Xeon, torch 2.13.0+cpu with its AVX2 kernels")
    assert _check(tmp_path, readme, printed, monkeypatch) == 1
    assert named in capsys.readouterr().out


def test_a_table_naming_no_machine_is_checked_exactly(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(f"{readme_table.BEGIN}\n{WRITTEN}{readme_table.END}\n", encoding="utf-8")
    assert _check(tmp_path, readme, OTHER_CPU, monkeypatch) == 1
