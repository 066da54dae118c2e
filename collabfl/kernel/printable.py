"""Text from elsewhere made safe to show in a terminal or a log.

A participant's or peer's words (an error reply, a gRPC status's details, a host name)
reach the operator's terminal through the CLI and the logs. A terminal obeys the escape
sequences in them: clear the screen, rewrite the lines above, set the clipboard. ``shown``
writes every control character a terminal may act on out as ``\\xNN``.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What a terminal may act on: C0 controls but newline and tab, DEL, C1 controls."""


def shown(text: str) -> str:
    """``text`` with each control character written out as ``\\xNN``."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)
