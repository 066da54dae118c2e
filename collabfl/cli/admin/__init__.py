"""`collabfl admin`: inspect and steer a running coordinator through its gRPC service.

Exit codes: 0 done, 2 the coordinator refused the request (unknown run, run already
ended, ...), 3 no coordinator answered. Either failure is one line on stderr.

One module per command group, each registering its commands on ``admin_app``; importing
the package registers them all, in the order ``collabfl admin --help`` lists them:

- connection: the group's options (coordinator, TLS, credential) and how failures end
- members: status, members, register-supernode
- runs: runs, start, stop
- graphs: graph, export
- records: metrics, payments, coalitions, events
- enrolment: invite, login, revoke, enrolments
- results: results (and --download)
- tables: the console, JSON output, the shared tables and cell formats

Start-up stays fast (no torch, matplotlib, networkx, gRPC): a command imports what only it
needs in its own body, and `tests/test_cli_startup.py` keeps it so.
"""

from __future__ import annotations

# The order of these imports is the order of the commands in --help.
# isort: off
from collabfl.cli.admin import members  # noqa: F401 (status, members, register-supernode)
from collabfl.cli.admin import runs  # noqa: F401 (runs, start, stop)
from collabfl.cli.admin import graphs  # noqa: F401 (graph, export)
from collabfl.cli.admin import records  # noqa: F401 (metrics, payments, coalitions, events)
from collabfl.cli.admin import enrolment  # noqa: F401 (invite, login, revoke, enrolments)
from collabfl.cli.admin import results  # noqa: F401 (results)

# isort: on
from collabfl.cli.admin.connection import EXIT_REFUSED, EXIT_UNREACHABLE, admin_app

__all__ = ["EXIT_REFUSED", "EXIT_UNREACHABLE", "admin_app"]
