"""An operator's credential for ``collabfl admin``: where the coordinator is, and the
certificate that proves the operator role, in one file readable by its owner only.

``collabfl admin login`` writes it to the user's config folder (``default_path``); the
coordinator writes one for its own machine on first start. ``collabfl admin`` uses it when
no ``--ca/--cert/--key`` are given, so an operator types addresses and paths once.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from collabfl.kernel.atomic import write_bytes

FILE_NAME = "operator.json"


def default_path() -> Path:
    """``$XDG_CONFIG_HOME/collabfl/operator.json`` (``~/.config`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "collabfl" / FILE_NAME


@dataclass(frozen=True)
class OperatorCredential:
    coordinator: str
    """The coordinator service's HOST:PORT."""
    ca: bytes
    cert: bytes
    key: bytes

    def save(self, path: Path) -> None:
        """Write it mode 0600 in a 0700 folder, whatever the umask."""
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        document = {
            "coordinator": self.coordinator,
            "ca": self.ca.decode(),
            "cert": self.cert.decode(),
            "key": self.key.decode(),
        }
        write_bytes(path, json.dumps(document, indent=1).encode())

    @classmethod
    def load(cls, path: Path) -> OperatorCredential:
        try:
            document = json.loads(path.read_text())
            return cls(
                document["coordinator"],
                document["ca"].encode(),
                document["cert"].encode(),
                document["key"].encode(),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(
                f"{path} is not an operator credential ({error}): log in again with "
                "`collabfl admin login`"
            ) from None
