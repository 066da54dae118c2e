"""A SuperNode's node config, written as a TOML file that ``flower-supernode --node-config``
reads.

Flower parses a ``--node-config`` string as ``key=value`` pairs whose values are TOML, so a
value built by hand must be quoted for TOML: a ``\\`` in a path became an escape and a ``"``
could not pass at all. Given a path ending in ``.toml`` (a documented form of the flag),
Flower reads the file with a TOML parser instead; a TOML writer quotes every value here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import tomli_w

from collabfl.kernel.atomic import write_text

NodeValue = str | int | float | bool
FILE_NAME = "node-config.toml"


def write_node_config(state_dir: Path, values: Mapping[str, NodeValue]) -> Path:
    """Write ``values`` to the state dir's node config file (owner-only) and return its path,
    the argument ``--node-config`` takes."""
    path = state_dir.resolve() / FILE_NAME
    write_text(path, tomli_w.dumps(dict(values)))
    return path
