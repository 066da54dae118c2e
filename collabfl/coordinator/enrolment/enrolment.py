"""Enrolment by join token: how a participant or an operator gets its identity.

The operator mints a token for one identity (``collabfl admin invite --client-id K --host
lab-a.example.org``, or ``--operator bob``). The token is one string,
``cfj1.<id>.<secret>.<pin>``: ``secret`` is 128 random bits the coordinator keeps only
as a hash, and ``pin`` is the SHA-256 of the federation CA's public key, so the joining
machine can tell the genuine coordinator from anyone who stands in for it (kubeadm's
discovery hash does the same). The joining machine makes its own TLS key and, for a member,
its SuperNode key; it sends a certificate signing request and the SuperNode's public key,
and gets back its certificate, the CA, the grant verification key and a registered
SuperNode. No private key crosses the network, and no file is copied by hand.

A token is single use, bound to one identity, and expires; a replayed, expired or unknown
token is refused and recorded as an event (ten a minute in all, the rest counted in the next
one: coordinator/store/event_ration.py), and an address that keeps failing is refused for a while
(``JoinThrottle``). ``revoke`` takes an identity out everywhere: its
SuperNode key is unregistered from the SuperLink and its certificate's serial goes on the
deny list that the coordinator service and every peer consult (kernel/revocation.py).
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import serialization

from collabfl.coordinator.enrolment.coordinator_pki import CoordinatorTLSFiles
from collabfl.coordinator.store.enrolment_store import (
    Enrolment,
    EnrolmentStore,
    JoinToken,
    TokenRefused,
)
from collabfl.coordinator.store.event_ration import EventRation
from collabfl.coordinator.store.state import CoordinatorState, NotFound
from collabfl.flower.supernode_key import supernode_key_pem
from collabfl.kernel.identity import Identity, Role
from collabfl.kernel.join_token import TokenParts
from collabfl.kernel.pki import ca_pin, issue_for_csr
from collabfl.kernel.revocation import DENIED, serial_hex

log = logging.getLogger(__name__)

DEFAULT_TOKEN_TTL_S = 24 * 3600.0
MAX_TOKEN_TTL_S = 30 * 24 * 3600.0
MEMBER_CERT_DAYS = 365
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})|\[?[0-9a-fA-F:.]{2,45}\]?")
_OPERATOR_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Invitation:
    token: str
    token_id: str
    role: str
    subject: str
    expires_at: float


@dataclass(frozen=True)
class JoinRequest:
    """What a joining machine sends: its token, a CSR, and a member's SuperNode key."""

    token: str
    csr_pem: bytes
    supernode_public_key: str = ""

    @classmethod
    def from_json(cls, document: Any) -> JoinRequest:
        if not isinstance(document, dict):
            raise ValueError("a join request is a JSON object")
        token, csr, key = (document.get(k, "") for k in ("token", "csr", "supernode_key"))
        if not all(isinstance(v, str) for v in (token, csr, key)):
            raise ValueError("token, csr and supernode_key are strings")
        return cls(token, csr.encode(), key)


@dataclass(frozen=True)
class JoinReply:
    """What a joined machine gets: its identity, certificate and where the federation is."""

    role: str
    subject: str
    certificate: str
    ca: str
    grant_key: str
    service: str
    hosts: list[str]
    flower_node_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "subject": self.subject,
            "certificate": self.certificate,
            "ca": self.ca,
            "grant_key": self.grant_key,
            "service": self.service,
            "hosts": self.hosts,
            "flower_node_id": self.flower_node_id,
        }


class JoinRefused(PermissionError):
    """A join that is not allowed; the message is what the joining machine is told."""


class TooManyAttempts(JoinRefused):
    pass


class EnrolmentUnavailable(RuntimeError):
    """The coordinator cannot complete joins right now (its SuperLink is not answering);
    the joining machine asks again."""


@dataclass
class JoinThrottle:
    """At most ``max_failures`` failed joins per address within ``window_s``; beyond, the
    address is refused until its oldest failure leaves the window. Only addresses that
    failed are kept, and those whose failures all left the window are forgotten once the
    table has grown (a flood from many addresses once grew it for good)."""

    max_failures: int = 5
    window_s: float = 300.0
    forget_at: int = 4096
    """Table size at which addresses of long ago are swept out (doubles while all are recent)."""
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, address: str, now: float) -> None:
        with self._lock:
            recent = self._recent(address, now)
            if len(recent) >= self.max_failures:
                wait = recent[0] + self.window_s - now
                raise TooManyAttempts(
                    f"too many failed join attempts from {address}; try again in {wait:.0f} s"
                )

    def failed(self, address: str, now: float) -> None:
        with self._lock:
            self._failures.setdefault(address, deque()).append(now)
            if len(self._failures) >= self.forget_at:
                since = now - self.window_s
                self._failures = {a: d for a, d in self._failures.items() if d[-1] > since}
                self.forget_at = max(self.forget_at, 2 * len(self._failures))

    def _recent(self, address: str, now: float) -> deque[float]:
        recent = self._failures.get(address, deque())
        while recent and recent[0] <= now - self.window_s:
            recent.popleft()
        return recent


@dataclass(frozen=True)
class SuperNodeRegistry:
    """The SuperLink's registered SuperNode keys: ``register`` an OpenSSH public key (the
    Flower node id comes back), ``unregister`` a node id."""

    register: Callable[[str], int]
    unregister: Callable[[int], None]


class Enroller:
    """Mints join tokens, admits joins, and revokes identities."""

    def __init__(
        self,
        tls: CoordinatorTLSFiles,
        store: EnrolmentStore,
        state: CoordinatorState,
        supernodes: SuperNodeRegistry,
        grant_public_pem: bytes,
        service_address: str,
        join_address: str,
        throttle: JoinThrottle | None = None,
        clock: Callable[[], float] = time.time,
        refusals: EventRation | None = None,
    ) -> None:
        self.tls = tls
        self.store = store
        self.state = state
        self.supernodes = supernodes
        self.grant_public_pem = grant_public_pem
        self.service_address = service_address
        self.join_address = join_address
        self.throttle = throttle or JoinThrottle()
        self.refusals = refusals or EventRation()
        """Failed joins' events and log lines, across addresses (the throttle is per address)."""
        self.clock = clock
        self._lock = threading.Lock()
        DENIED.replace(store.revoked_serials())

    @property
    def ca_pem(self) -> bytes:
        return self.tls.ca.read_bytes()

    def invite(
        self,
        role: Role,
        subject: str,
        hosts: list[str],
        ttl_s: float = DEFAULT_TOKEN_TTL_S,
        samples: int | None = None,
    ) -> Invitation:
        """A fresh single-use token for ``role``/``subject``; its certificate names ``hosts``;
        ``samples``: the member's training samples the operator vouches for, kept with its
        enrolment."""
        _check_subject(role, subject)
        if samples is not None and (role is not Role.MEMBER or samples < 1):
            raise ValueError(
                f"--samples {samples}: a member's declared training samples are a positive "
                "count, and only members have them"
            )
        for host in hosts:
            if not _HOST.fullmatch(host):
                raise ValueError(f"--host {host!r} is not a host name or IP address")
        if role is Role.MEMBER and not hosts:
            raise ValueError("a member's invitation needs --host: the name its peers dial")
        if not 0 < ttl_s <= MAX_TOKEN_TTL_S:
            raise ValueError(f"a token's lifetime must be in (0, {MAX_TOKEN_TTL_S:g}] s")
        self.tls.signing_ca()  # fails now, with the remedy, when this coordinator cannot issue
        now = self.clock()
        parts = TokenParts(secrets.token_hex(4), secrets.token_urlsafe(16), ca_pin(self.ca_pem))
        token = JoinToken(
            parts.token_id, role.value, subject, tuple(hosts), now, now + ttl_s, samples=samples
        )
        self.store.add_token(token, secret_hash(parts.secret))
        self._event("invited", f"join token {parts.token_id} minted for {role.value} {subject}")
        return Invitation(parts.text(), parts.token_id, role.value, subject, token.expires_at)

    def join(self, address: str, request: JoinRequest) -> JoinReply:
        """Admit a join from ``address``; JoinRefused (recorded) when it may not."""
        now = self.clock()
        self.throttle.check(address, now)
        try:
            parts = TokenParts.parse(request.token)
            with self._lock:  # one join at a time: a token is spent exactly once
                token = self.store.valid_token(parts.token_id, secret_hash(parts.secret), now)
                reply = self._admit(token, request)  # a bad CSR or key leaves it unspent
                self.store.spend_token(token.token_id, now)
                return reply
        except (TokenRefused, ValueError) as error:
            self.throttle.failed(address, now)
            unwritten = self.refusals.admit(now)
            if unwritten is not None:
                message = f"join from {address} refused: {error}"
                if unwritten:
                    message += f"; {unwritten} more failed joins since the last one recorded"
                self._event("join_refused", message, "warning")
            raise JoinRefused(str(error)) from None

    def _admit(self, token: JoinToken, request: JoinRequest) -> JoinReply:
        role = Role(token.role)
        identity = (
            Identity.member(int(token.subject))
            if role is Role.MEMBER
            else Identity(role, token.subject)
        )
        ca_key, ca_cert = self.tls.signing_ca()
        cert = issue_for_csr(request.csr_pem, identity, list(token.hosts), ca_key, ca_cert,
                             MEMBER_CERT_DAYS)  # fmt: skip
        node_id = None
        if role is Role.MEMBER:
            node_id, _ = self.register_supernode(int(token.subject), request.supernode_public_key)
        self.store.record_enrolment(
            Enrolment(
                role.value,
                token.subject,
                token.hosts[0] if token.hosts else "",
                serial_hex(cert),
                cert.not_valid_after_utc.timestamp(),
                self.clock(),
                samples=token.samples,
            )
        )
        self._event("joined", f"{identity} joined with token {token.token_id}", "info", identity)
        return JoinReply(
            role.value,
            token.subject,
            cert.public_bytes(serialization.Encoding.PEM).decode(),
            self.ca_pem.decode(),
            self.grant_public_pem.decode(),
            self.service_address,
            list(token.hosts),
            node_id,
        )

    def register_supernode(self, client_id: int, public_key: str) -> tuple[int, int | None]:
        """Register the member's SuperNode key (at enrolment, or by an operator's hand); a
        key registered for the member before goes. The node id Flower gave the key, and the
        old key's node id (None: it had none)."""
        supernode_key_pem(public_key)  # ValueError for a key Flower cannot read
        old = self._node_of(client_id)
        try:
            if old is not None:
                self.supernodes.unregister(old)
            node_id = self.supernodes.register(public_key)
        except RuntimeError as error:  # a ControlError: the SuperLink is not up, or refused
            raise EnrolmentUnavailable(f"the SuperLink did not register the key: {error}") from None
        self.state.bind_supernode(client_id, node_id, public_key.strip())
        return node_id, old

    def revoke(self, role: Role, subject: str) -> Enrolment:
        """Take the identity out: deny its certificate everywhere, unregister its SuperNode."""
        _check_subject(role, subject)
        revoked = self.store.revoke(role.value, subject, self.clock())
        if revoked is None:
            raise NotFound(f"{role.value} {subject} never enrolled")
        DENIED.replace(self.store.revoked_serials())
        if role is Role.MEMBER:
            client_id = int(subject)
            node = self._node_of(client_id)
            if node is not None:
                self.supernodes.unregister(node)
                self.state.unbind_supernode(client_id)
        self._event("revoked", f"{role.value} {subject} revoked (serial {revoked.cert_serial})")
        return revoked

    def _node_of(self, client_id: int) -> int | None:
        """The Flower node id of the client's registered SuperNode key, if any."""
        bound = (n for n, c in self.state.supernode_bindings().items() if c == client_id)
        return next(bound, None)

    def revoked_serials(self) -> list[str]:
        return sorted(self.store.revoked_serials())

    def _event(
        self, kind: str, message: str, level: str = "info", identity: Identity | None = None
    ) -> None:
        log.log(logging.WARNING if level != "info" else logging.INFO, "%s", message)
        client_id = identity.client_id if identity is not None else None
        self.state.record_event("", kind, message, level, client_id=client_id)


def enrolling_role(text: str) -> Role:
    """The role a token enrols, from its name: ``member`` or ``operator``."""
    if text not in (Role.MEMBER.value, Role.OPERATOR.value):
        raise ValueError(f"role {text!r}: only members and operators enrol by token")
    return Role(text)


def _check_subject(role: Role, subject: str) -> None:
    if role is Role.MEMBER:
        Identity.parse(f"collabfl://member/{subject}")  # a canonical client id
    elif role is Role.OPERATOR:
        if not _OPERATOR_NAME.fullmatch(subject):
            raise ValueError(
                f"operator name {subject!r}: lowercase letters, digits, - and _, "
                "starting with a letter"
            )
    else:
        raise ValueError(f"only members and operators enrol by token, not {role.value}")
