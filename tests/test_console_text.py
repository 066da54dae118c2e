"""What the command line prints is the text as written: rich reads neither markup nor emoji
codes in it, and a control character is written out, not sent to the terminal
(engine/report/console.py): paths, labels, import paths and participants' words reach it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rich.table import Table
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.engine.report.console import plain_console

TRICKY = "lab[bold]-x[/bold]:factory:[link=http://example.invalid]y"


def test_a_plain_console_prints_markup_and_emoji_codes_as_written():
    console = plain_console(record=True, width=200)
    console.print(TRICKY)
    assert console.export_text().strip() == TRICKY


def test_an_error_names_the_users_path_as_written(tmp_path):
    missing = tmp_path / f"{TRICKY.replace('/', '_')}.toml"
    result = CliRunner().invoke(app, ["simulate", str(missing)])
    assert result.exit_code != 0
    assert result.output == f"error: config file {missing} does not exist\n"


def test_doctor_names_a_factory_called_factory(tmp_path):
    # ":factory:" is an emoji code: the line once read "mod🏭 client 0".
    (tmp_path / "lab_source.py").write_text(
        "import numpy as np\n"
        "def factory(client_id):\n"
        "    x, y = np.zeros((8, 1, 40), np.float32), np.arange(8) % 2\n"
        "    return {'train': (x, y), 'test': (x, y), 'num_classes': 2}\n"
    )
    doctor = Path(sys.executable).with_name("collabfl")
    checked = subprocess.run(
        [str(doctor), "doctor", "--data", "lab_source:factory"],
        env={"PYTHONPATH": str(tmp_path), "PATH": ""}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert "✓ data.source lab_source:factory: client 0" in checked.stdout, checked.stderr


def test_a_participants_control_characters_reach_no_terminal():
    # An event message or host name a participant sent: shown, not obeyed.
    console = plain_console(record=True, width=200, force_terminal=True)
    console.print("evil \x1b]52;c;aGk=\x07 then \x1b[2J\x9b")
    assert console.export_text().strip() == "evil \\x1b]52;c;aGk=\\x07 then \\x1b[2J\\x9b"
    table = Table("message")
    table.add_row("row\x1b[1A\rspoofed")
    console.print(table)
    assert "row\\x1b[1A\\x0dspoofed" in console.export_text()
