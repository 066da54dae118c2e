"""Every benchmark's results name the processor they ran on (benchmarks/_common.py): the
shared 2-core machine is not always the same hardware, and its figures move with it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu sse2 aes avx2 sha_ni avx512f avx512vl

processor\t: 1
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu sse2 aes avx2 sha_ni avx512f avx512vl
"""


def test_the_environment_names_the_processor_and_its_instruction_sets(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    assert _common.cpu(info) == {
        "cpu_model": "AMD EPYC 9654 96-Core Processor",
        "cpu_flags": ["aes", "avx2", "avx512f", "sha_ni"],
    }
    info.write_text(CPUINFO.replace(" sha_ni", "").replace(" avx512f", ""))
    assert _common.cpu(info)["cpu_flags"] == ["aes", "avx2"]
    assert _common.cpu(tmp_path / "absent") == {}


def test_results_carry_it() -> None:
    assert set(_common.cpu()) <= set(_common.environment())
