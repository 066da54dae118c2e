"""The node config the client daemon gives its SuperNode survives any path: Flower reads it
from a TOML file, so a backslash, a double quote or a space arrives as written (they were
TOML escapes, a parse error and a split value when quoted by hand on the command line).
Flower's own parser reads it here, as the SuperNode does."""

from __future__ import annotations

import stat
from pathlib import Path
from types import SimpleNamespace

from flwr.common.config import parse_config_args

from collabfl.apps.client_app import NodeSettings
from collabfl.client import daemon
from collabfl.client.settings import ParticipantSettings, parser
from tests.support.client_data import write_client_data

AWKWARD = 'lab \\backup "new"'


def _args(root: Path) -> list[str]:
    root.mkdir(parents=True)
    write_client_data(root / "data.npz")
    (root / "grant.pub").write_bytes(b"")
    return [
        "--client-id", "3",
        "--data", str(root / "data.npz"),
        "--state-dir", str(root / "state"),
        "--superlink", "127.0.0.1:9092",
        "--peer-address", "localhost:9200",
        "--coordinator-key", str(root / "grant.pub"),
        "--allow-import", "tests.support.user_code:make_net",
        "--cost", "0.5",
        "--insecure",
    ]  # fmt: skip


def test_paths_with_backslashes_quotes_and_spaces_reach_the_client_app(tmp_path):
    root = tmp_path / AWKWARD
    settings = ParticipantSettings.from_flags(parser().parse_args(_args(root)))
    command = daemon.supernode_command(settings)
    given = command[command.index("--node-config") + 1]
    config = parse_config_args([given])
    settings = NodeSettings.from_context(SimpleNamespace(node_config=config))
    assert settings.client_id == 3
    assert settings.state_dir == (root / "state").resolve()
    assert Path(str(settings.data)) == (root / "data.npz").resolve()
    assert settings.allowed_imports == frozenset({"tests.support.user_code:make_net"})
    assert settings.market == {"cost": 0.5}
    assert config["coordinator-key"] == str((root / "grant.pub").resolve())
    assert stat.S_IMODE(Path(given).stat().st_mode) == 0o600  # it names this lab's files
