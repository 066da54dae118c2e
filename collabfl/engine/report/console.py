"""Consoles that print text as it is given, and nothing a terminal would obey.

By default rich reads ``[...]`` in printed text as markup and ``:name:`` as an emoji code:
a message's ``[train]`` vanished, and ``data.source mylab.data:factory: client 1`` came out
as ``mylab.data🏭 client 1``. And rich passes escape sequences through, which a
participant's words in an event could carry (kernel/printable.py). Much of what collabfl
prints comes from users and participants (paths, labels, import paths, events), so its
consoles read no markup or emoji codes, and show control characters as ``\\xNN``. Style is
given as ``style=`` or ``Text``, never as markup inside a string.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from collabfl.kernel.printable import shown


class PlainConsole(Console):
    """A rich console whose strings, printed or in a table's cells, are shown as written."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(shown(text), **options)


def plain_console(**options: Any) -> Console:
    """A console (``options`` as ``Console`` takes them) that prints strings literally: no
    markup, no emoji codes, no control characters."""
    return PlainConsole(markup=False, emoji=False, **options)
