"""Why a client's SuperNode cannot join, in one line with the fix.

Flower's SuperNode writes the reason it was refused into its own log, in colour, among
uvicorn's start and shutdown lines; an operator reading the client daemon's log saw only
that noise. ``RULES`` maps Flower's error lines (as Flower 1.41 prints them; the unit tests
hold real ones) to what went wrong and what to do about it; facts a line lacks (the names
the coordinator's certificate holds, why a connection fails) come from probing the
SuperLink's address (kernel/netprobe.py). ``SupernodeReasons`` gives the supervisor
(kernel/supervisor.py) the line for a SuperNode that exited and for one that keeps
retrying by itself.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from collabfl.kernel import netprobe
from collabfl.kernel.supervisor import plain_lines

LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*:\s*")
"""Flower's level prefix, dropped from the line quoted: the daemon's line has its own."""
REPEAT_S = 60.0
"""A problem the running SuperNode keeps retrying is said again at most this often."""


@dataclass(frozen=True)
class Where:
    """What the daemon dialled, and who it is: the words of every message and fix."""

    superlink: str
    client_id: int
    host: str
    coordinator: str
    root_certificates: Path | None = None


class Probe:
    """The network facts a message needs; tests pass a stand-in."""

    def unreachable(self, host: str, port: int) -> str | None:
        return netprobe.unreachable(host, port)

    def certificate_names(self, host: str, port: int) -> list[str]:
        try:
            return netprobe.certificate_names(netprobe.presented_certificate(host, port))
        except (OSError, ValueError):
            return []


@dataclass(frozen=True)
class Rule:
    """A Flower line (``pattern``) and what it means (``message``) with the ``fix``.

    Both are ``str.format`` templates over ``Where``'s fields, ``port``, ``dialled`` (the
    host of --superlink) and what ``facts`` finds; ``facts`` returns None when the probe
    shows the line is not about the SuperLink after all. ``running``: the SuperNode retries
    this itself instead of exiting, so it is reported while it runs.
    """

    pattern: re.Pattern[str]
    message: str
    fix: str
    facts: Callable[[Probe, str, int], dict[str, str] | None] = lambda probe, host, port: {}
    running: bool = False


def _names(probe: Probe, host: str, port: int) -> dict[str, str]:
    names = probe.certificate_names(host, port)
    return {"names": ", ".join(names) or "no host name", "first": names[0] if names else host}


def _unreachable(probe: Probe, host: str, port: int) -> dict[str, str] | None:
    reason = probe.unreachable(host, port)
    return None if reason is None else {"reason": reason}


ACTIVATION = Rule(
    re.compile(r"Failed to activate SuperNode"),
    "the coordinator has not registered this SuperNode's key (client {client_id}), or "
    "another SuperNode with this key is online",
    "enrol this machine with `COLLABFL_JOIN_TOKEN=<token> collabfl-client join "
    "{coordinator}` (the "
    "operator makes the token with `collabfl admin invite --client-id {client_id} "
    "--host {host}`)",
)
"""Flower's refusal of a key it does not know: also what a revoked member sees."""

RULES: tuple[Rule, ...] = (
    Rule(
        re.compile(r"clock is \d+ s (ahead of|behind) the coordinator's"),
        "this machine's clock is too far off the coordinator's for Flower",
        "synchronise this machine's clock (NTP: `timedatectl set-ntp true`); "
        "`collabfl doctor --coordinator {superlink}` measures the offset",
    ),
    ACTIVATION,
    Rule(
        re.compile(r"(IP address|Hostname) mismatch"),
        "the coordinator's certificate names {names}, you dialled {dialled}",
        "use one of those names in --superlink (e.g. --superlink {first}:{port})",
        _names,
    ),
    Rule(
        re.compile(r"certificate has expired"),
        "the coordinator's certificate at {superlink} has expired",
        "the operator renews the coordinator's certificate; check this machine's clock too",
    ),
    Rule(
        re.compile(r"CERTIFICATE_VERIFY_FAILED"),
        "the coordinator's certificate at {superlink} is not signed by the CA in "
        "{root_certificates}",
        "give --root-certificates the federation's CA (enrolling with a join token fetches "
        "the right one)",
    ),
    Rule(
        re.compile(r"WRONG_VERSION_NUMBER|record layer failure|UNEXPECTED_EOF|http_request"),
        "{superlink} did not answer as the coordinator's TLS Fleet gateway",
        "--superlink names the coordinator's Fleet port (9093 by default), not its service port",
    ),
    Rule(
        re.compile(r"Connection attempt failed"),
        "cannot reach the SuperLink at {superlink}",
        "check the address and that port {port} is open on the coordinator",
        _unreachable,
        running=True,
    ),
)


def diagnose(
    output: str, where: Where, probe: Probe, running: bool = False
) -> tuple[Rule, str] | None:
    """The one line for the last of ``output``'s lines a rule explains, with that rule.

    ``running``: only the rules for problems a running SuperNode retries by itself.
    """
    host, port = netprobe.split_address(where.superlink)
    for line in reversed(plain_lines(output)):
        for rule in RULES:
            if (running and not rule.running) or not rule.pattern.search(line):
                continue
            facts = rule.facts(probe, host, port)
            if facts is None:  # the probe shows this line is not about the SuperLink
                break
            words = {**vars(where), "port": str(port), "dialled": host, **facts}
            line = LEVEL.sub("", line)
            if "reason" in words:
                line = f"{line} ({words['reason']})"
            return rule, f"{rule.message.format(**words)}: {line}; {rule.fix.format(**words)}"
    return None


class SupernodeReasons:
    """The supervisor's reasons (kernel/supervisor.py's ``Reasons``) for a SuperNode.

    ``revoked``: whether this member is known to be revoked, and ``revoked_line`` the words
    for it; Flower cannot tell a revoked key from one never registered, this daemon can
    (client/revocations.py), and then says so instead of how to enrol.
    """

    def __init__(
        self,
        where: Where,
        probe: Probe | None = None,
        revoked: Callable[[], bool] = lambda: False,
        revoked_line: str = "",
    ) -> None:
        self.where = where
        self.probe = probe or Probe()
        self.revoked = revoked
        self.revoked_line = revoked_line
        self._said: tuple[Rule, float] | None = None

    def exited(self, output: str) -> str:
        found = diagnose(output, self.where, self.probe)
        if found is not None and found[0] is ACTIVATION and self.revoked():
            return f"{self.revoked_line} (Flower: failed to activate the SuperNode)"
        if found is not None:
            return found[1]
        last = [LEVEL.sub("", line) for line in plain_lines(output, keep_info=False)[-3:]]
        return " | ".join(last) or "it said nothing"

    def refused(self, output: str) -> str | None:
        found = diagnose(output, self.where, self.probe, running=True)
        if found is None:
            return None
        rule, line = found
        now = time.monotonic()
        if self._said is not None and self._said[0] is rule and now - self._said[1] < REPEAT_S:
            return None
        self._said = (rule, now)
        return line
