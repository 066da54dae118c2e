"""A federation across hosts, TLS everywhere, attacked from a host of its own network.

A coordinator and 3 client daemons each run in their own network namespace (own address on
a bridge, each link capped by tc tbf), started by ``federation up``'s launcher with
``--tls``: a CA and role certificates, the launcher's service calls as the operator. A short
DPFL run must give the in-process runtime's per-client results. Then a fifth host, the
attacker, holding the public CA certificate and, in the "stolen" variants, member 0's
certificate and key, tries each network surface; every attempt must be refused, and the
test names how (gRPC status / HTTP status). The federation is set up once for the module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from collabfl.coordinator.cli import app
from collabfl.coordinator.config import load_config
from collabfl.coordinator.federation import (
    LocalFederation,
    run_on_federation,
    write_client_files,
)
from collabfl.coordinator.methods import parse_method_spec
from collabfl.coordinator.report.run_dir import read_run
from collabfl.flower.processes import flower_binary, flower_env
from collabfl.kernel.grants import GrantSigner, load_private_key
from tests.support.netns import Link, NetworkBed, unavailable_reason
from tests.support.runtime_equality import CLIENTS, ROUNDS, SETTINGS, assert_same_rows

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

CLIENT_HOSTS = [f"client-{k}" for k in range(CLIENTS)]
HOSTS = ["coordinator", *CLIENT_HOSTS, "attacker"]
LINK = Link(rate="50mbit", burst="128kb")

# How each surface refuses (the flags and surfaces of wt-svc/wt-peer/wt-flower):
NO_CERT_AT_MTLS = "UNAVAILABLE"  # a server that requires a client certificate: no handshake
WRONG_ROLE = "PERMISSION_DENIED"  # a genuine member certificate used for what it may not do
CONTROL_API_REFUSALS = {"connection refused", "http 403", "http 404"}  # not on the network


@dataclass
class Bed:
    net: NetworkBed
    federation: LocalFederation
    real: Path
    inprocess: Path
    run_id: str


def _overrides(root: Path) -> list[str]:
    return [*SETTINGS, f"data.cache_dir={json.dumps(str(root / 'cache'))}"]


@pytest.fixture(scope="module")
def bed(tmp_path_factory) -> Iterator[Bed]:
    root = tmp_path_factory.mktemp("multihost")
    settings = load_config(None, _overrides(root))
    spec = parse_method_spec("dpfl", settings)
    real = root / "real"
    files = write_client_files(settings, root / "data", partition_path=real / "partition.npz")
    with NetworkBed(HOSTS, link=LINK) as net:
        federation = LocalFederation(root / "work", files, runtime="warm", hosts=net, tls=True)
        with federation:
            run_on_federation(federation, spec, real, Console(quiet=True), timeout_s=300)
            with federation.client() as client:
                run_id = next(r.run_id for r in client.list_runs() if r.method == "dpfl")
            flags = [arg for o in _overrides(root) for arg in ("--set", o)]
            inprocess = root / "inprocess"
            result = CliRunner().invoke(
                app, ["compare", *flags, "--methods", "dpfl", "--out", str(inprocess)]
            )
            assert result.exit_code == 0, result.output
            yield Bed(net, federation, real, inprocess, run_id)


def _attack(bed: Bed, attack: str, stolen: bool, **spec: object) -> dict:
    """Run one attack of tests/support/attacks.py on the attacker's host; its outcome."""
    tls = bed.federation.credentials
    assert tls is not None
    member = tls.members[0]
    spec = {
        "attack": attack,
        "ca": str(tls.ca),
        "cert": str(member.cert) if stolen else None,
        "key": str(member.key) if stolen else None,
        **spec,
    }
    argv = [sys.executable, "-m", "tests.support.attacks", json.dumps(spec)]
    done = bed.net.run("attacker", argv)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _peer(bed: Bed, k: int) -> str:
    return f"{bed.net.address(f'client-{k}')}:{bed.federation.peer_ports[k]}"


def test_each_daemon_runs_on_its_own_host_behind_a_capped_link(bed):
    with bed.federation.client() as client:
        members = {m.client_id: m.peer_address for m in client.list_members()}
    assert members == {k: _peer(bed, k) for k in range(CLIENTS)}
    assert len({bed.net.address(h) for h in HOSTS}) == len(HOSTS)
    for host in HOSTS:
        assert "tbf" in bed.net.qdiscs(host) and "50Mbit" in bed.net.qdiscs(host)


def test_dpfl_across_hosts_with_tls_equals_in_process_runtime(bed):
    assert_same_rows(bed.real / "dpfl", bed.inprocess / "dpfl", "dpfl")
    rows = read_run(bed.real / "dpfl").rows
    assert sum(row["bytes_fetched"] for row in rows) > 0  # models went peer to peer
    assert all(row["coordinator_bytes"] == 0 for row in rows)
    assert max(row["round"] for row in rows) == ROUNDS - 1


@pytest.mark.parametrize("stolen", [False, True], ids=["no_cert", "stolen_member_cert"])
def test_attacker_cannot_administer_the_coordinator(bed, stolen):
    address = bed.federation.service
    outcomes = _attack(bed, "coordinator_admin", stolen, address=address)
    expected = WRONG_ROLE if stolen else NO_CERT_AT_MTLS
    assert outcomes == dict.fromkeys(outcomes, expected)
    with bed.federation.client() as client:
        assert [r.run_id for r in client.list_runs()] == [bed.run_id]


def test_attacker_without_cert_cannot_reach_a_peer(bed):
    outcomes = _attack(bed, "peer_fetch", False, address=_peer(bed, 1), owner=1, round=0,
                       grant="forged")  # fmt: skip
    assert outcomes == {"FetchModel": NO_CERT_AT_MTLS}


def test_stolen_member_cert_with_forged_grant_fetches_nothing(bed):
    outcomes = _attack(bed, "peer_fetch", True, address=_peer(bed, 1), owner=1,
                       round=ROUNDS - 1, grant="forged")  # fmt: skip
    assert outcomes == {"FetchModel": WRONG_ROLE}


def test_stolen_member_cert_with_replayed_grant_fetches_nothing(bed):
    """A genuine grant for member 2 (as captured from its fetch) replayed as member 0."""
    signer = GrantSigner(load_private_key(bed.federation.coordinator_dir / "grant_key.pem"))
    grant = signer.issue(bed.run_id, fetcher=2, owner=1, round=ROUNDS - 1, ttl_s=600)
    outcomes = _attack(bed, "peer_fetch", True, address=_peer(bed, 1), owner=1,
                       round=ROUNDS - 1, grant=grant.decode())  # fmt: skip
    assert outcomes == {"FetchModel": WRONG_ROLE}


def test_anonymous_health_reveals_nothing(bed):
    assert _attack(bed, "peer_health", False, address=_peer(bed, 0)) == {"Health": NO_CERT_AT_MTLS}


@pytest.mark.parametrize("stolen", [False, True], ids=["no_cert", "stolen_member_cert"])
def test_attacker_cannot_reach_the_control_api(bed, stolen):
    url = f"https://{bed.federation.superlink}/v1/control/list-runs"
    assert _attack(bed, "http", stolen, url=url)["outcome"] in CONTROL_API_REFUSALS


def test_attacker_cannot_flwr_run_an_app(bed, tmp_path):
    """``flwr run`` of an app from the attacker's host, trusting the public CA."""
    home = tmp_path / "flwr"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "target"\n[superlink.target]\n'
        f'address = "{bed.federation.superlink}"\n'
        f'root-certificates = "{bed.federation.credentials.ca}"\n'
    )
    app_dir = bed.federation.coordinator_dir / "app"
    before = _flower_runs(bed)
    done = subprocess.run(
        bed.net.command("attacker", [flower_binary("flwr"), "run", str(app_dir), "target"]),
        capture_output=True, text=True, timeout=60, check=False,
        env={**bed.net.env(), **flower_env(home)},
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    assert _flower_runs(bed) == before


def test_rogue_supernode_cannot_join_the_fleet(bed, tmp_path):
    """A SuperNode of the attacker's own, trusting the public CA, dials the Fleet API; with
    SuperNode authentication on, its unregistered key is refused and it never comes online."""
    command = [
        flower_binary("flower-supernode"), "--superlink", bed.federation.superlink,
        "--root-certificates", str(bed.federation.credentials.ca), "--max-retries", "2",
    ]  # fmt: skip
    rogue = bed.net.popen(
        "attacker", command, tmp_path / "rogue.log", env=flower_env(tmp_path / "flwr")
    )
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline and rogue.poll() is None:
        assert len(bed.federation.online_nodes()) == CLIENTS, (tmp_path / "rogue.log").read_text()
        time.sleep(1.0)
    assert len(bed.federation.online_nodes()) == CLIENTS


def _flower_runs(bed: Bed) -> str:
    """``flwr ls`` on the coordinator's host: the Flower runs the SuperLink knows."""
    env = {**bed.net.env(), **flower_env(bed.federation.coordinator_dir / "flwr")}
    argv = [flower_binary("flwr"), "ls", "collabfl", "--format", "json"]
    done = subprocess.run(
        bed.net.command("coordinator", argv),
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    return done.stdout
