"""A real (insecure, loopback) federation of 3 clients asked for 4 by a config written for 50:
the run waits for the fourth with a status line, starts without it with a ``fewer_clients``
event, and its records and plot titles describe the 3 clients and their data files.

Before, the run showed "running, last round —" with no hint while it waited, started with 3
without an event, and titled its plots "mnist1d, N=50, Dirichlet α=0.1" from the TOML.
"""

from __future__ import annotations

import pytest
from federation_faults import fault_config, make_federation, wait_for

from collabfl.engine.methods import parse_method_spec, run_request
from collabfl.engine.report.run_dir import read_run
from collabfl.engine.report.setting import partition_text, setting_title
from collabfl.engine.run_options import RunOptions

pytestmark = pytest.mark.federation

CLIENTS = 3
ASKED = 4
JOIN_TIMEOUT_S = 20.0


def test_a_short_federation_says_so_and_records_what_happened(tmp_path) -> None:
    config, federation = make_federation(tmp_path, clients=CLIENTS, rounds=1)
    asked = fault_config(tmp_path, clients=50, rounds=1)  # the operator's TOML said 50
    spec = parse_method_spec("dpfl", asked)
    out = tmp_path / "out"
    options = RunOptions(expected_clients=ASKED, join_timeout_s=JOIN_TIMEOUT_S, out_dir=str(out))
    with federation:
        with federation.client() as client:
            client.create_run("short", spec.label, run_request(spec, options))
        waiting = wait_for(federation, "short", lambda r: r.message.startswith("waiting"))
        run = wait_for(federation, "short", lambda r: not r.active)
        with federation.client() as client:
            events = client.list_events("short")
    assert waiting.message.startswith(f"waiting for clients: {CLIENTS}/{ASKED} joined, ")
    assert waiting.message.endswith(" s left")
    assert run.status == "finished", run.message
    [short] = [e for e in events if e.kind == "fewer_clients"]
    assert short.level == "warning"
    assert f"started with {CLIENTS} of the {ASKED} clients" in short.message
    [rewrite] = [e for e in events if e.kind == "config_rewritten"]
    assert f"data.num_clients 50 -> {CLIENTS}" in rewrite.message

    records = read_run(out / "dpfl")
    expected = {
        "num_clients": CLIENTS,
        "dataset": config.data.dataset,
        "partition": partition_text(config.data.model_dump()),
    }
    assert records.config["data"] == expected
    assert setting_title(records.config) == f"mnist1d, N={CLIENTS}, {expected['partition']}"
