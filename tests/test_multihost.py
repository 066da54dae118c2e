"""The README's multi-machine section, command by command, on hosts of their own.

A coordinator, three labs, an operator's laptop and an attacker each run in their own
network namespace (own address, own /etc/hosts naming the others, each link capped by tc
tbf, each with its own home folder). The setup types exactly what the README says: one
start on the coordinator, one ``collabfl admin invite`` per participant there, and on each
lab the one join command the invite printed; the operator logs in the same way. No file
is copied between hosts: every path a host's command names lies in that host's own folder,
which the test checks. A short DPFL run must give the in-process runtime's per-client
results. Then the attacker tries every network surface, and the enrolment's own attacks
(a replayed, expired or forged token, a fake coordinator with another CA, a revoked
member); every attempt must be refused, and the test names how.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.engine.config import load_config
from collabfl.flower.app_gate import verify_ticket
from collabfl.flower.processes import flower_binary, flower_env
from collabfl.kernel.grants import GrantSigner, load_private_key
from collabfl.kernel.join_token import TokenParts
from collabfl.kernel.tickets import InvalidTicket, TicketSigner, run_key
from collabfl.kernel.token_source import ENV_VAR
from collabfl.launcher.federation import write_client_files
from tests.support.netns import Link, NetworkBed, unavailable_reason
from tests.support.runtime_equality import CLIENTS, ROUNDS, SETTINGS, assert_same_rows

REASON = unavailable_reason()
pytestmark = [
    pytest.mark.federation,
    pytest.mark.netns,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
]

COORDINATOR = "coord.example.org"
LABS = [f"lab-{k}" for k in range(CLIENTS)]
HOSTS = ["coordinator", *LABS, "laptop", "attacker", "spoofed-lab"]
NAMES = {COORDINATOR: "coordinator", **{f"{lab}.example.org": lab for lab in LABS}}
LINK = Link(rate="50mbit", burst="128kb")
FLEET, SERVICE, PEER = 9093, 9300, 9200  # the daemons' defaults, as in the README
RUN_TIMEOUT_S = 300.0

NO_CERT_AT_MTLS = "UNAVAILABLE"  # a server that requires a client certificate: no handshake
WRONG_ROLE = "PERMISSION_DENIED"  # a genuine member certificate used for what it may not do
CONTROL_API_REFUSALS = {"connection refused", "http 403", "http 404"}  # not on the network


@dataclass
class Bed:
    net: NetworkBed
    root: Path
    real: Path
    inprocess: Path
    run_id: str
    tokens: dict[int, str]
    typed: list[tuple[str, list[str], dict[str, str]]] = field(default_factory=list)
    """What was typed on each host: the command and the variables set before it."""

    def folder(self, host: str) -> Path:
        return self.root / host

    def env(self, host: str) -> dict[str, str]:
        """Each host is its own machine: its own home and config folder."""
        home = self.folder(host) / "home"
        return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}

    def run(
        self, host: str, argv: list[str], typed: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """``argv`` on ``host`` to completion, with ``env`` set for it; ``typed``: one of the
        README's commands."""
        if typed:
            self.typed.append((host, argv, env or {}))
        command = [flower_binary(argv[0]), *argv[1:]]
        return subprocess.run(
            self.net.command(host, command), capture_output=True, text=True, timeout=120,
            env={**self.net.env(), **self.env(host), **(env or {})}, check=False,
        )  # fmt: skip

    def start(
        self, host: str, argv: list[str], log: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """A daemon the README starts on ``host`` (typed), with ``env`` set for it."""
        self.typed.append((host, argv, env or {}))
        command = [flower_binary(argv[0]), *argv[1:]]
        return self.net.popen(host, command, self.folder(host) / log,
                              env={**self.env(host), **(env or {})})  # fmt: skip

    def admin_json(self, host: str, *args: str) -> object:
        done = self.run(host, ["collabfl", "admin", *args, "--json"])
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def _wait(condition, what: str, timeout_s: float = 120.0, every_s: float = 1.0):
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def _invite(bed: Bed, *flags: str) -> tuple[dict[str, str], list[str]]:
    """``collabfl admin invite`` on the coordinator; the command it printed, as the variables
    it sets (the token) and its arguments (never the token)."""
    done = bed.run("coordinator", ["collabfl", "admin", "invite", *flags], typed=True)
    assert done.returncode == 0, done.stderr
    assignment, *argv = shlex.split(done.stdout.strip().splitlines()[-1])
    name, _, token = assignment.partition("=")
    assert name == ENV_VAR and not any("cfj1" in w for w in argv), (assignment, argv)
    return {name: token}, argv


def _coordinator_up(bed: Bed) -> bool:
    return bed.run("coordinator", ["collabfl", "admin", "status"]).returncode == 0


@pytest.fixture(scope="module")
def bed(tmp_path_factory) -> Iterator[Bed]:
    root = tmp_path_factory.mktemp("multihost")
    overrides = [*SETTINGS, f"data.cache_dir={json.dumps(str(root / 'cache'))}"]
    settings = load_config(None, overrides)
    # Each lab brings its own data file (made here, once, into each lab's own folder).
    files = write_client_files(settings, root / "made", partition_path=root / "partition.npz")
    with NetworkBed(HOSTS, link=LINK) as net:
        net.resolve(NAMES)
        net.resolve({**NAMES, COORDINATOR: "attacker"}, hosts=["spoofed-lab"])
        bed = Bed(net, root, root / "coordinator" / "state" / "runs" / "fed", root / "inprocess",
                  "", {})  # fmt: skip
        for host in HOSTS:
            (bed.folder(host) / "home").mkdir(parents=True)
        for k, lab in enumerate(LABS):
            files[k].rename(bed.folder(lab) / "data.npz")
        # Coordinator machine: one command.
        state = bed.folder("coordinator") / "state"
        start = ["collabfl-coordinator", "--state-dir", str(state), "--host", "0.0.0.0",
                 "--name", COORDINATOR]  # fmt: skip
        bed.start("coordinator", start, "coordinator.log")
        _wait(lambda: _coordinator_up(bed), "the coordinator to answer")
        # One invite per participant; each lab runs the command it printed.
        for k, lab in enumerate(LABS):
            env, argv = _invite(bed, "--client-id", str(k), "--host", f"{lab}.example.org",
                                "--data", str(bed.folder(lab) / "data.npz"),
                                "--state-dir", str(bed.folder(lab) / "state"))  # fmt: skip
            bed.tokens[k] = env[ENV_VAR]
            bed.start(lab, argv, "client.log", env)
        # The operator's laptop: invited the same way, then logs in.
        env, login = _invite(bed, "--operator", "bob")
        done = bed.run("laptop", login, typed=True, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        _wait(lambda: len(_online(bed)) == CLIENTS, f"{CLIENTS} SuperNodes online", 180)
        flags = [arg for o in overrides for arg in ("--set", o)]
        started = bed.run("laptop", ["collabfl", "admin", "start", "--clients", str(CLIENTS),
                                     "--method", "dpfl", *flags, "--out", "fed"])  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr
        bed.run_id = started.stdout.split()[1]
        _wait(lambda: _run_status(bed) in ("finished", "failed"), "the run to end", RUN_TIMEOUT_S)
        assert _run_status(bed) == "finished", _events(bed)
        result = CliRunner().invoke(
            app, ["compare", *flags, "--methods", "dpfl", "--out", str(bed.inprocess)]
        )
        assert result.exit_code == 0, result.output
        yield bed


def _online(bed: Bed) -> list[dict]:
    """The SuperNodes online, as ``flwr`` on the coordinator's host sees them."""
    env = {**bed.net.env(), **flower_env(bed.folder("coordinator") / "state" / "flwr")}
    argv = [flower_binary("flwr"), "supernode", "list", "collabfl", "--format", "json"]
    done = subprocess.run(bed.net.command("coordinator", argv), capture_output=True, text=True,
                          timeout=60, check=False, env=env)  # fmt: skip
    try:
        nodes = json.loads(done.stdout).get("nodes", [])
    except json.JSONDecodeError:
        return []
    return [node for node in nodes if node.get("status") == "online"]


def _run_status(bed: Bed) -> str:
    runs = bed.admin_json("laptop", "runs")
    assert isinstance(runs, list)
    return next((r["status"] for r in runs if r["run_id"] == bed.run_id), "missing")


def _events(bed: Bed) -> str:
    return bed.run("laptop", ["collabfl", "admin", "events", bed.run_id]).stdout


def test_setup_took_one_command_per_machine_and_no_file_copies(bed):
    by_host: dict[str, int] = {}
    for host, argv, _ in bed.typed:
        by_host[host] = by_host.get(host, 0) + 1
        if argv[:3] == ["collabfl", "admin", "invite"]:
            continue  # its --data/--state-dir are the participant's, text for the printout
        for arg in argv:  # every path a host's command reads is that host's own
            if arg.startswith(str(bed.root)):
                assert Path(arg).is_relative_to(bed.folder(host)), (host, arg)
    tokens = [value for _, _, env in bed.typed for value in env.values() if "cfj1." in value]
    assert not [arg for _, argv, _ in bed.typed for arg in argv if "cfj1." in arg]
    print(f"\ncommands typed per host: {by_host}; token strings: {len(tokens)}; files copied: 0")
    assert by_host == {"coordinator": 1 + CLIENTS + 1, **dict.fromkeys(LABS, 1), "laptop": 1}
    assert len(tokens) == CLIENTS + 1  # one per participant, one for the operator


def test_dpfl_across_hosts_equals_in_process_runtime(bed):
    assert_same_rows(bed.real / "dpfl", bed.inprocess / "dpfl", "dpfl")
    rows = json.loads((bed.real / "summary.json").read_text())
    assert rows  # the coordinator wrote the run's record where the operator asked
    assert max(r["round"] for r in _rows(bed)) == ROUNDS - 1
    assert sum(r["bytes_fetched"] for r in _rows(bed)) > 0  # models went peer to peer


def _rows(bed: Bed) -> list[dict]:
    from collabfl.engine.report.run_dir import read_run

    return read_run(bed.real / "dpfl").rows


def test_the_operator_sees_members_by_client_id_and_host(bed):
    enrolled = bed.admin_json("laptop", "enrolments")
    assert isinstance(enrolled, list)
    members = {e["subject"]: e["host"] for e in enrolled if e["role"] == "member"}
    assert members == {str(k): f"{lab}.example.org" for k, lab in enumerate(LABS)}
    wanted = {k: (f"{lab}.example.org", "online", True) for k, lab in enumerate(LABS)}

    def members() -> dict:  # from the laptop, through the service
        status = bed.admin_json("laptop", "status")
        assert isinstance(status, dict)
        return {m["client_id"]: (m["host"], m["presence"], m["supernode_registered"])
                for m in status["members"]}  # fmt: skip

    # Presence comes from the SuperLink's node list, read in the background: poll for it.
    _wait(lambda: members() == wanted, f"admin status to show {wanted}", 60, 2.0)


def test_doctor_passes_on_the_coordinator_and_on_a_lab(bed):
    """On the coordinator, `doctor --members` finds every participant's peer port; on a lab,
    `doctor --state-dir` checks what its saved settings name: each check ✓ (or ! for a
    certificate that expires within 14 days: none here)."""
    done = bed.run("coordinator", ["collabfl", "doctor", "--members"])
    assert done.returncode == 0, done.stdout + done.stderr
    peers = [line for line in done.stdout.splitlines() if line.startswith("✓ peer ")]
    assert len(peers) == CLIENTS, done.stdout
    done = bed.run("lab-0", ["collabfl", "doctor", "--state-dir",
                             str(bed.folder("lab-0") / "state")])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith("✓") for line in lines), lines
    assert any(f"Fleet gateway {COORDINATOR}:{FLEET}: certificate valid" in x for x in lines)
    assert any("this member's certificate" in line for line in lines)


def test_no_other_local_user_can_read_a_daemons_state(bed):
    """Everything under the coordinator's and each lab's state folder (published models,
    databases with run tickets, keys, logs, Flower's own files) is for the daemon's user
    only, whatever the umask the daemon was started with."""
    folders = [bed.folder("coordinator") / "state", *(bed.folder(lab) / "state" for lab in LABS)]
    found = [p for folder in folders for p in (folder, *folder.rglob("*")) if not p.is_symlink()]
    assert any("published" in p.parts for p in found)  # the models the peer server guards
    open_to_others = [f"{oct(p.stat().st_mode & 0o777)} {p}" for p in found
                      if p.stat().st_mode & 0o077]  # fmt: skip
    assert open_to_others == []


def test_each_lab_refuses_the_finished_runs_ticket(bed):
    """Each lab's daemon learns from the coordinator's public list that the run ended and
    keeps it in its state folder, where its gate reads it: a ticket the coordinator signed
    before the end is refused there, long before its TTL."""
    key = run_key(bed.run_id)
    signing_key = load_private_key(bed.folder("coordinator") / "state" / "grant_key.pem")
    for lab in LABS:
        state = bed.folder(lab) / "state"
        ended = state / "ended-runs.json"

        def learnt(ended: Path = ended) -> bool:
            return ended.exists() and key in json.loads(ended.read_text())

        _wait(learnt, f"{lab} to learn that the run ended", 60)
        status, ended_at = json.loads(ended.read_text())[key]
        assert status == "finished"
        before_end = TicketSigner(signing_key, clock=lambda at=ended_at: at - 1.0)
        node = {"coordinator-key": str(state / "grant_key.pub.pem"), "ended-runs": str(ended)}
        run = {"run-id": bed.run_id, "run-ticket": before_end.issue(bed.run_id, 3600.0)}
        with pytest.raises(InvalidTicket, match=r"has ended \(finished at"):
            verify_ticket(node, run)


def test_restart_takes_the_state_dir_alone(bed):
    saved = json.loads((bed.folder("lab-0") / "state" / "daemon-settings.json").read_text())
    assert "client_id" in saved
    assert saved["superlink"] == f"{COORDINATOR}:{FLEET}"


def _attack(bed: Bed, attack: str, stolen_from: str | None, **spec: object) -> dict:
    """One attack of tests/support/attacks.py from the attacker's host; its outcome. The
    attacker holds the public CA and, when ``stolen_from`` names a lab, that lab's
    certificate and key."""
    tls = bed.folder("lab-0") / "state" / "tls"
    stolen = bed.folder(stolen_from) / "state" / "tls" if stolen_from else None
    spec = {
        "attack": attack,
        "ca": str(tls / "ca.pem"),
        "cert": str(stolen / "member.pem") if stolen else None,
        "key": str(stolen / "member.key") if stolen else None,
        **spec,
    }
    argv = [sys.executable, "-m", "tests.support.attacks", json.dumps(spec)]
    done = bed.net.run("attacker", argv)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _peer(bed: Bed, k: int) -> str:
    """Lab ``k``'s peer server, by the name its certificate carries."""
    return f"lab-{k}.example.org:{PEER}"


@pytest.mark.parametrize("stolen", [None, "lab-0"], ids=["no_cert", "stolen_member_cert"])
def test_attacker_cannot_administer_the_coordinator(bed, stolen):
    address = f"{COORDINATOR}:{SERVICE}"
    outcomes = _attack(bed, "coordinator_admin", stolen, address=address)
    expected = WRONG_ROLE if stolen else NO_CERT_AT_MTLS
    assert outcomes == dict.fromkeys(outcomes, expected)


def test_attacker_without_cert_cannot_reach_a_peer(bed):
    outcomes = _attack(bed, "peer_fetch", None, address=_peer(bed, 1), owner=1, round=0,
                       grant="forged")  # fmt: skip
    assert outcomes == {"FetchModel": NO_CERT_AT_MTLS}


def test_stolen_member_cert_with_replayed_grant_fetches_nothing(bed):
    """A genuine grant for member 2 replayed as member 0."""
    key = bed.folder("coordinator") / "state" / "grant_key.pem"
    grant = GrantSigner(load_private_key(key)).issue(bed.run_id, fetcher=2, owner=1,
                                                     round=ROUNDS - 1, ttl_s=600)  # fmt: skip
    outcomes = _attack(bed, "peer_fetch", "lab-0", address=_peer(bed, 1), owner=1,
                       round=ROUNDS - 1, grant=grant.decode())  # fmt: skip
    assert outcomes == {"FetchModel": WRONG_ROLE}


@pytest.mark.parametrize("stolen", [None, "lab-0"], ids=["no_cert", "stolen_member_cert"])
def test_attacker_cannot_reach_the_control_api(bed, stolen):
    url = f"https://{COORDINATOR}:{FLEET}/v1/control/list-runs"
    assert _attack(bed, "http", stolen, url=url)["outcome"] in CONTROL_API_REFUSALS


def test_rogue_supernode_cannot_join_the_fleet(bed):
    ca = bed.folder("lab-0") / "state" / "tls" / "ca.pem"
    command = ["flower-supernode", "--superlink", f"{COORDINATOR}:{FLEET}",
               "--root-certificates", str(ca), "--max-retries", "2"]  # fmt: skip
    rogue = bed.net.popen("attacker", [flower_binary(command[0]), *command[1:]],
                          bed.folder("attacker") / "rogue.log",
                          env=flower_env(bed.folder("attacker") / "flwr"))  # fmt: skip
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline and rogue.poll() is None:
        assert len(_online(bed)) == CLIENTS
        time.sleep(1.0)
    assert len(_online(bed)) == CLIENTS


def _join(bed: Bed, host: str, token: str) -> subprocess.CompletedProcess:
    folder = bed.folder(host) / f"join-{time.monotonic_ns()}"
    return bed.run(host, ["collabfl-client", "join", f"{COORDINATOR}:{FLEET}",
                          "--data", str(bed.folder("lab-0") / "data.npz"),
                          "--state-dir", str(folder)], env={ENV_VAR: token})  # fmt: skip


def test_a_replayed_token_is_refused(bed):
    done = _join(bed, "attacker", bed.tokens[0])
    assert done.returncode == 2
    assert "already used" in done.stderr


def test_an_expired_token_is_refused(bed):
    env, _ = _invite(bed, "--client-id", "8", "--host", "x.example.org", "--ttl", "1s")
    time.sleep(1.5)  # the token's lifetime is wall-clock time: let it pass
    done = _join(bed, "attacker", env[ENV_VAR])
    assert done.returncode == 2
    assert "expired" in done.stderr


def test_a_token_edited_to_another_id_is_refused(bed):
    mine = TokenParts.parse(_invite(bed, "--client-id", "9", "--host", "y.example.org")[0][ENV_VAR])
    theirs = TokenParts.parse(bed.tokens[1])
    forged = TokenParts(theirs.token_id, mine.secret, mine.pin).text()
    done = _join(bed, "attacker", forged)
    assert done.returncode == 2
    assert "unknown join token" in done.stderr


def test_a_join_against_a_fake_coordinator_sends_nothing(bed):
    """The attacker runs a coordinator of its own CA at the address a lab resolves for
    coord.example.org; the lab's join stops at the pin, and its token stays unspent."""
    state = bed.folder("attacker") / "fake-coordinator"
    fake = bed.net.popen("attacker", [flower_binary("collabfl-coordinator"), "--state-dir",
                                      str(state), "--host", "0.0.0.0", "--name", COORDINATOR],
                         bed.folder("attacker") / "fake.log", env=bed.env("attacker"))  # fmt: skip
    _wait(lambda: (state / "pki" / "ca.pem").exists() and _listening(bed), "the fake coordinator")
    token = _invite(bed, "--client-id", "7", "--host", "z.example.org")[0][ENV_VAR]
    done = _join(bed, "spoofed-lab", token)
    fake.terminate()
    assert done.returncode == 2
    assert "not the one the token pins" in done.stderr
    fake_log = (bed.folder("attacker") / "fake.log").read_text()
    assert "join from" not in fake_log and "joined" not in fake_log  # no request reached it
    enrolled = bed.admin_json("laptop", "enrolments")
    assert isinstance(enrolled, list)
    assert "7" not in {e["subject"] for e in enrolled}


def _listening(bed: Bed) -> bool:
    connect = f"import socket; socket.create_connection(('127.0.0.1', {FLEET}), 2)"
    probe = [sys.executable, "-c", connect]
    return bed.net.run("attacker", probe).returncode == 0


def test_zz_a_revoked_member_can_neither_fetch_nor_join(bed):
    """Last (it takes lab 2 out): revoked from the operator's laptop, lab 2's certificate is
    refused by lab 1's peer server (once lab 1 has asked for the list again), and its
    SuperNode is unregistered, so it drops out of the fleet."""
    key = bed.folder("coordinator") / "state" / "grant_key.pem"
    grant = GrantSigner(load_private_key(key)).issue(bed.run_id, fetcher=2, owner=1,
                                                     round=ROUNDS - 1, ttl_s=600)  # fmt: skip

    def fetch() -> str:
        outcome = _attack(bed, "peer_fetch", "lab-2", address=_peer(bed, 1), owner=1,
                          round=ROUNDS - 1, grant=grant.decode(), run=bed.run_id)  # fmt: skip
        return outcome["FetchModel"]

    assert fetch() == "OK"  # a genuine member with a genuine grant
    done = bed.run("laptop", ["collabfl", "admin", "revoke", "--client-id", "2"])
    assert done.returncode == 0, done.stderr
    _wait(lambda: fetch() == WRONG_ROLE, "lab 1 to refuse the revoked certificate", 90, 2.0)
    _wait(lambda: len(_online(bed)) == CLIENTS - 1, "lab 2's SuperNode to drop out", 120, 2.0)
