"""The command line that runs one of our modules in a fresh interpreter of this installation.

``python -m`` puts its working directory first on ``sys.path``. A daemon started in a folder
that another user can write (``/tmp``, a shared project folder) would then import that
user's ``argparse.py`` or ``numpy/`` instead of the real one, and run it as the participant
or the coordinator, next to their data and keys. ``-P`` (Python 3.11+) leaves the working
directory out, as a console script does, so every process of a daemon imports user code
(``--allow-import``, ``data.source``) from the same place: the Python path (``PYTHONPATH``
and installed packages).
"""

from __future__ import annotations

import sys


def module_command(module: str, *args: str) -> list[str]:
    """``python -P -m module args`` with this interpreter."""
    return [sys.executable, "-P", "-m", module, *args]
