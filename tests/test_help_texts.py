"""Help texts are written for users: every default shown, no module paths or reST markup.

Covers the three argparse programs (coordinator, client daemon, join) and every command of
``collabfl``, whose help is what a user reads before anything else.
"""

from __future__ import annotations

import argparse
import re

import click
import pytest
import typer
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.client import join
from collabfl.client import settings as client_settings
from collabfl.coordinator import settings as coordinator_settings

INTERNALS = re.compile(r"\b[a-z_]+/[a-z_/]+\.py\b|``")
PARSERS = {
    "collabfl-coordinator": coordinator_settings.parser,
    "collabfl-client": client_settings.parser,
    "collabfl-client join": join.parser,
}


@pytest.mark.parametrize("make", PARSERS.values(), ids=PARSERS.keys())
def test_a_daemon_help_shows_each_default_and_no_internals(make) -> None:
    parser: argparse.ArgumentParser = make()
    text = parser.format_help()
    assert not INTERNALS.findall(text), INTERNALS.findall(text)
    assert "Exit status:" in text and "example:" in text
    for action in parser._actions:
        if not action.option_strings or action.default in (None, False, "", [], "==SUPPRESS=="):
            continue
        line = parser._get_formatter()._expand_help(action) if action.help else ""
        assert "default" in line.lower(), f"{action.option_strings[0]} hides its default"


def _commands(group: click.Group, path: str = "collabfl"):
    for name, command in group.commands.items():
        yield f"{path} {name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")


def test_every_collabfl_command_help_is_plain() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, click.Group)
    paths = [path.split()[1:] for path, _ in _commands(root)]
    assert len(paths) > 20
    for args in [[], *paths]:
        result = CliRunner().invoke(app, [*args, "--help"], terminal_width=100)
        assert result.exit_code == 0 and "Usage:" in result.output, args
        found = INTERNALS.findall(result.output)
        assert not found, f"collabfl {' '.join(args)} --help: {found}"


def test_methods_lists_every_method_with_one_line_on_it() -> None:
    from collabfl.engine.registry import REGISTRY

    result = CliRunner().invoke(app, ["methods"], terminal_width=60)
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines] == list(REGISTRY.names())
    for name, line in zip(REGISTRY.names(), lines, strict=True):
        assert REGISTRY.entry(name).summary and line.endswith(REGISTRY.entry(name).summary)
