"""Consoles that print text as it is given.

By default rich reads ``[...]`` in printed text as markup and ``:name:`` as an emoji code:
a message's ``[train]`` vanished, and ``data.source mylab.data:factory: client 1`` came out
as ``mylab.data🏭 client 1``. Much of what collabfl prints comes from users and
participants (paths, labels, import paths, events), so its consoles read neither, and style
is given as ``style=`` or ``Text``, never as markup inside a string.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console


def plain_console(**options: Any) -> Console:
    """A rich console (``options`` as ``Console`` takes them) that prints strings literally:
    no markup, no emoji codes."""
    return Console(markup=False, emoji=False, **options)
