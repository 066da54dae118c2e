"""A foreign Flower app, as another local user of the coordinator host would submit one.

Each of its modules leaves a marker file in ``markers`` when it is imported (``client-PID``,
``server-PID``); its ServerApp sends every node one query and then leaves
``done-<replies>-<errors>``, so a test knows the participants have answered.
"""

from __future__ import annotations

from pathlib import Path

PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "foreign"
version = "1.0.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "stranger"

[tool.flwr.app.components]
serverapp = "foreign_app.server:app"
clientapp = "foreign_app.client:app"

[tool.flwr.app.config]
"""

MARK = """import os
from pathlib import Path
Path({markers!r}, "{side}-%d" % os.getpid()).touch()
"""

CLIENT = """from flwr.app import Message, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query()
def query(message, context):
    return Message(RecordDict(), reply_to=message)
"""

SERVER = """from flwr.app import Message, RecordDict
from flwr.serverapp import ServerApp

app = ServerApp()


@app.main()
def main(grid, context):
    nodes = list(grid.get_node_ids())
    asks = [Message(RecordDict(), dst_node_id=n, message_type="query") for n in nodes]
    replies = list(grid.send_and_receive(asks, timeout=120))
    errors = sum(reply.has_error() for reply in replies)
    Path({markers!r}, "done-%d-%d" % (len(replies), errors)).touch()
"""


def write_foreign_app(folder: Path, markers: Path) -> Path:
    """The app's folder, ready for ``flwr run`` (``markers``: where its imports leave files)."""
    package = folder / "foreign_app"
    package.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text("")
    for side, body in (("client", CLIENT), ("server", SERVER)):
        mark = MARK.format(markers=str(markers), side=side)
        (package / f"{side}.py").write_text(mark + body.replace("{markers!r}", repr(str(markers))))
    return folder
