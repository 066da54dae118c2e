"""Consoles that print text as it is given, and nothing a terminal would obey.

By default rich reads ``[...]`` in printed text as markup and ``:name:`` as an emoji code:
a message's ``[train]`` vanished, and ``data.source mylab.data:factory: client 1`` came out
as ``mylab.data🏭 client 1``. And rich passes escape sequences through: a participant's
words in an event (an error reply, its host name) could clear the operator's screen, rewrite
the lines above or set the clipboard. Much of what collabfl prints comes from users and
participants (paths, labels, import paths, events), so its consoles read no markup or emoji
codes, and show control characters as ``\\xNN``. Style is given as ``style=`` or ``Text``,
never as markup inside a string.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.text import Text

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What a terminal may act on: C0 controls but newline and tab, DEL, C1 controls."""


def shown(text: str) -> str:
    """``text`` with each control character written out as ``\\xNN``."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


class PlainConsole(Console):
    """A rich console whose strings, printed or in a table's cells, are shown as written."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(shown(text), **options)


def plain_console(**options: Any) -> Console:
    """A console (``options`` as ``Console`` takes them) that prints strings literally: no
    markup, no emoji codes, no control characters."""
    return PlainConsole(markup=False, emoji=False, **options)
