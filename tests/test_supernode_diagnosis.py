"""Why a SuperNode cannot join, in one clean line with the fix, from Flower's own words.

The logs in tests/data/supernode_logs are what Flower 1.41's SuperNode wrote (colour codes
and all) when refused by a real TLS coordinator (SuperNode auth on) for each reason: a key
nobody registered, a key whose killed predecessor still counted as online, the
coordinator's certificate dialled by a name it does not hold (an IP, a host name), a CA
that did not sign it, a closed port, a name that does not resolve; and, from stand-in
servers, an expired certificate and a port that does not speak TLS. The network facts a
message adds (certificate names, why a connect fails) come from a stand-in probe here; the
integration tests (tests/test_client_waits.py) use the real one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collabfl.flower.supernode_diagnosis import Probe, SupernodeReasons, Where

LOGS = Path(__file__).parent / "data" / "supernode_logs"
WHERE = Where(
    superlink="10.77.3.1:9093",
    client_id=2,
    host="lab-b.example.org",
    coordinator="10.77.3.1:9093",
    root_certificates=Path("/etc/collabfl/ca.pem"),
)


class FakeProbe(Probe):
    def __init__(self, unreachable: str | None = None, names: list[str] | None = None) -> None:
        self.reason = unreachable
        self.names = names or []
        self.calls: list[tuple[str, int]] = []

    def unreachable(self, host: str, port: int) -> str | None:
        self.calls.append((host, port))
        return self.reason

    def certificate_names(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        return self.names


def _exited(name: str, probe: Probe | None = None) -> str:
    return SupernodeReasons(WHERE, probe or FakeProbe()).exited((LOGS / name).read_text())


def _one_clean_line(said: str) -> None:
    assert "\n" not in said and "\x1b" not in said
    assert "Uvicorn" not in said and "lifespan" not in said


@pytest.mark.parametrize("name", ["unregistered.log", "killed_then_restarted.log"])
def test_an_unregistered_key_says_how_to_enrol(name):
    said = _exited(name)
    _one_clean_line(said)
    assert said.startswith("the coordinator has not registered this SuperNode's key (client 2)")
    assert "[code: 2004] Failed to activate SuperNode." in said
    assert "`COLLABFL_JOIN_TOKEN=<token> collabfl-client join 10.77.3.1:9093`" in said
    assert "`collabfl admin invite --client-id 2 --host lab-b.example.org`" in said


@pytest.mark.parametrize(
    ("name", "dialled"),
    [("ip_mismatch.log", "'127.0.0.1'"), ("hostname_mismatch.log", "'localhost'")],
)
def test_a_name_the_certificate_lacks_says_which_names_it_has(name, dialled):
    probe = FakeProbe(names=["coord.example.org", "10.77.3.9"])
    said = _exited(name, probe)
    _one_clean_line(said)
    assert said.startswith(
        "the coordinator's certificate names coord.example.org, 10.77.3.9, you dialled 10.77.3.1"
    )
    assert f"certificate is not valid for {dialled}" in said  # Flower's own line
    assert said.endswith("use one of those names in --superlink (e.g. --superlink "
                         "coord.example.org:9093)")  # fmt: skip
    assert probe.calls == [("10.77.3.1", 9093)]


def test_a_certificate_of_another_ca_says_which_ca_was_used():
    said = _exited("wrong_ca.log")
    _one_clean_line(said)
    assert "is not signed by the CA in /etc/collabfl/ca.pem" in said
    assert "certificate verify failed: certificate signature failure" in said
    assert "give --root-certificates the federation's CA" in said


def test_an_expired_certificate_and_a_port_without_tls_say_so():
    expired = _exited("expired.log")
    _one_clean_line(expired)
    assert expired.startswith("the coordinator's certificate at 10.77.3.1:9093 has expired: ")
    assert "certificate verify failed: certificate has expired" in expired
    plain = _exited("not_tls.log")
    _one_clean_line(plain)
    assert plain.startswith("10.77.3.1:9093 did not answer as the coordinator's TLS Fleet")
    assert "[SSL: WRONG_VERSION_NUMBER]" in plain and "not its service port" in plain


@pytest.mark.parametrize(
    ("name", "reason"),
    [("refused.log", "connection refused"), ("dns.log", "cannot resolve x: name unknown")],
)
def test_a_superlink_out_of_reach_is_said_while_the_supernode_retries(name, reason):
    probe = FakeProbe(unreachable=reason)
    reasons = SupernodeReasons(WHERE, probe)
    said = reasons.refused((LOGS / name).read_text())
    assert said is not None
    _one_clean_line(said)
    assert said.startswith("cannot reach the SuperLink at 10.77.3.1:9093: Connection attempt")
    assert f"({reason}); check the address and that port 9093 is open on the coordinator" in said
    # Flower retries every few seconds; the daemon says it once, not at every retry.
    assert reasons.refused("WARNING :   Connection attempt failed, retrying in 3 s\n") is None


def test_retries_of_something_else_are_not_blamed_on_the_superlink():
    """The SuperExec beside the SuperNode retries the SuperNode's local port with the same
    words: when the SuperLink answers, the line is not about it."""
    reasons = SupernodeReasons(WHERE, FakeProbe(unreachable=None))
    assert reasons.refused((LOGS / "refused.log").read_text()) is None
    # ... and an exit explained by an earlier line is explained by that line.
    assert "Failed to activate SuperNode" in reasons.exited((LOGS / "unregistered.log").read_text())


def test_an_exit_no_rule_explains_gives_flowers_last_words_without_the_chatter():
    output = (
        "\x1b[92mINFO \x1b[0m:      Starting Flower SuperNode\n"
        "INFO:     Started server process [6842]\n"
        "\x1b[91mERROR \x1b[0m:     Exit Code: 999\n"
        "Something new went wrong.\n"
        "INFO:     Shutting down\n"
        "\x1b[92mINFO \x1b[0m:      FastAPI lifespan: shutdown\n"
    )
    said = SupernodeReasons(WHERE, FakeProbe()).exited(output)
    assert said == "Exit Code: 999 | Something new went wrong."


def test_a_revoked_member_is_told_so_not_how_to_enrol():
    """Flower says only "failed to activate"; a daemon that knows it was revoked says that,
    and the one command that brings it back (issue #42, 7)."""
    line = "client 2 was revoked by the federation's operator; ask the operator for a new invite"
    log = (LOGS / "unregistered.log").read_text()
    said = SupernodeReasons(WHERE, FakeProbe(), lambda: True, line).exited(log)
    _one_clean_line(said)
    assert said.startswith(line) and "enrol this machine" not in said
    assert SupernodeReasons(WHERE, FakeProbe(), lambda: False, line).exited(log) == _exited(
        "unregistered.log"
    )
