"""Spend a join token: the joining machine's side of enrolment (coordinator/enrolment/enrolment.py).

Two HTTPS calls to the coordinator's public port. The first reads the federation CA over
a connection that trusts nothing yet, and accepts it only if its public key hashes to the
token's pin: an attacker who stands in for the coordinator cannot produce a CA with that
hash. The second, over TLS verified against that CA and the name dialled, sends the token,
a certificate signing request for a key made here, and a member's SuperNode public key.
Only public material leaves this machine.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ec

from collabfl.kernel.join_token import TokenParts
from collabfl.kernel.netprobe import split_address
from collabfl.kernel.pki import ca_pin, make_csr

CA_PATH, JOIN_PATH = "/collabfl/v1/ca", "/collabfl/v1/join"
TIMEOUT_S = 60.0
"""A join registers a SuperNode with the SuperLink (a ``flwr`` command): seconds, not ms."""


WAIT_S = math.inf
"""How long a join keeps asking a coordinator that is not reachable or not ready yet: for
ever by default (a participant may be set up before the coordinator is), until Ctrl-C."""
_FOR = re.compile(r"\bfor (member|operator) (\S+)")
"""How the coordinator's refusal names the identity a token was for (enrolment_store)."""
MAX_BACKOFF_S = 15.0


def new_invite(role: str = "member", subject: str = "K") -> str:
    """What a lab (or operator) refused for good can do: the one line that gets it back."""
    flag = "--client-id" if role == "member" else "--operator"
    return f"ask the operator for a new invite: `collabfl admin invite {flag} {subject}`"


def refused_remedy(reason: str) -> str:
    """``new_invite`` for the identity the coordinator's refusal names (K when none)."""
    named = _FOR.search(reason)
    return new_invite(*named.groups()) if named else new_invite()


class JoinFailed(RuntimeError):
    """The join did not happen; the message says why and what to do."""


class NotYet(JoinFailed):
    """The coordinator cannot be reached, or is not ready: asking again may succeed."""


@dataclass(frozen=True)
class Joined:
    """What the coordinator gave this machine."""

    role: str
    subject: str
    certificate: bytes
    ca: bytes
    grant_key: bytes
    service: str
    hosts: list[str]


def coordinator_address(address: str) -> tuple[str, int]:
    """The coordinator's public ``HOST:PORT`` as (host, port); JoinFailed if malformed."""
    try:
        return split_address(address)
    except ValueError as error:
        raise JoinFailed(f"{error}: give the coordinator's Fleet port, e.g. HOST:9093") from None


def fetch_ca(address: str, pin: str) -> bytes:
    """The federation CA the coordinator at ``address`` presents, if it matches ``pin``."""
    host, port = coordinator_address(address)
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE  # nothing is trusted yet: the pin decides
    status, body = _request(host, port, unverified, "GET", CA_PATH)
    if status == 503:
        raise NotYet(f"the coordinator at {address} is busy or not ready (503)")
    if status != 200:
        raise JoinFailed(f"{address} answered {status} for the CA: is it a collabfl coordinator?")
    try:
        presented = ca_pin(body)
    except ValueError:
        raise JoinFailed(f"{address} sent no certificate as its CA") from None
    if presented != pin:
        raise JoinFailed(
            f"the coordinator at {address} presented a CA ({presented}) that is not the one "
            f"the token pins ({pin}): it is not your federation's coordinator, or the token is "
            "for another federation. Nothing was sent."
        )
    return body


def join(
    address: str,
    token: str,
    key: ec.EllipticCurvePrivateKey,
    supernode_key: str = "",
    wait_s: float = WAIT_S,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> Joined:
    """Spend ``token`` at ``address`` for a certificate on ``key`` (and, for a member, the
    registration of ``supernode_key``, an OpenSSH public key). A coordinator that cannot
    be reached or is not ready is asked again, with a growing pause, for ``wait_s``;
    ``say`` is told each time why."""
    deadline, pause = time.monotonic() + wait_s, 1.0
    while True:
        try:
            return _join_once(address, token, key, supernode_key)
        except NotYet as error:
            if time.monotonic() + pause > deadline:
                raise
            say(
                f"{time.strftime('%Y-%m-%d %H:%M:%S')} {error}; asking again in {pause:.0f} s "
                "(check the address and that this machine reaches the coordinator's port; "
                "Ctrl-C stops)"
            )
            time.sleep(pause)
            pause = min(pause * 2, MAX_BACKOFF_S)


def _join_once(
    address: str, token: str, key: ec.EllipticCurvePrivateKey, supernode_key: str
) -> Joined:
    try:
        parts = TokenParts.parse(token)
    except ValueError as error:
        raise JoinFailed(str(error)) from None
    ca = fetch_ca(address, parts.pin)
    host, port = coordinator_address(address)
    verified = ssl.create_default_context(cadata=ca.decode())
    request = {"token": token.strip(), "csr": make_csr(key, host).decode(),
               "supernode_key": supernode_key}  # fmt: skip
    status, body = _request(host, port, verified, "POST", JOIN_PATH, json.dumps(request).encode())
    reason = body.decode(errors="replace").strip()[:300]
    if status == 503:
        raise NotYet(f"the coordinator is not ready ({reason})")
    if status != 200:
        remedy = f"; {refused_remedy(reason)}" if status == 403 else ""
        raise JoinFailed(f"the coordinator refused the join ({status}): {reason}{remedy}")
    reply = json.loads(body)
    return Joined(
        reply["role"],
        reply["subject"],
        reply["certificate"].encode(),
        reply["ca"].encode(),
        reply["grant_key"].encode(),
        reply["service"],
        list(reply["hosts"]),
    )


def _request(
    host: str, port: int, context: ssl.SSLContext, method: str, path: str, body: bytes = b""
) -> tuple[int, bytes]:
    connection = http.client.HTTPSConnection(host, port, timeout=TIMEOUT_S, context=context)
    headers = {"Content-Type": "application/json"} if body else {}
    try:
        connection.request(method, path, body=body or None, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(1 << 20)
    except ssl.SSLCertVerificationError as error:
        raise JoinFailed(
            f"{host}:{port}'s certificate does not verify ({error.verify_message}): dial the "
            "coordinator by a name its certificate carries (`collabfl doctor` lists them)"
        ) from None
    except OSError as error:
        raise NotYet(f"cannot reach the coordinator at {host}:{port}: {error}") from None
    finally:
        connection.close()
