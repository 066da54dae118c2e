"""Where a join token comes from: never the command line.

A process's arguments are readable by every local user (``ps``, ``/proc/PID/cmdline``) for
as long as it runs, and a join retries an unreachable coordinator for minutes: another user
read the token there and spent it first, enrolling as the victim's member id with keys of
its own. So the token comes from a file (``--token-file PATH``; ``-`` reads standard input)
or from the environment (``COLLABFL_JOIN_TOKEN``), which ``/proc`` shows only to the same
user; ``--token`` is refused with the safe forms named.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import TextIO

ENV_VAR = "COLLABFL_JOIN_TOKEN"
STDIN = "-"
SAFE_FORMS = (
    f"give it as `{ENV_VAR}=cfj1.… COMMAND`, or with --token-file FILE (a file only you can "
    "read) or --token-file - (standard input)"
)
ON_ARGV = (
    "--token puts the join token where every local user can read it (`ps`) while the command "
    f"runs: {SAFE_FORMS}"
)


def read_token(
    token_file: str | None,
    environ: MutableMapping[str, str] = os.environ,
    stdin: TextIO = sys.stdin,
) -> str:
    """The token from ``token_file`` (a path, or ``-`` for ``stdin``), else from
    ``ENV_VAR``, which is removed from ``environ`` either way so that what this process
    starts later (a daemon, its SuperNode) does not inherit it. ValueError naming the safe
    forms when neither holds one."""
    text = environ.pop(ENV_VAR, "")
    if token_file == STDIN:
        text = stdin.readline()
    elif token_file is not None:
        try:
            text = Path(token_file).read_text()
        except OSError as error:
            raise ValueError(f"--token-file {token_file}: {error.strerror}") from None
    token = text.strip()
    if not token:
        source = f"--token-file {token_file}" if token_file else ENV_VAR
        raise ValueError(f"no join token in {source}: {SAFE_FORMS}")
    return token
