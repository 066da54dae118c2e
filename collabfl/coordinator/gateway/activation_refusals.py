"""Refused SuperNode activations, recorded as ``impostor`` events the operator sees.

Flower refuses a SuperNode whose key is not registered, or whose key's node is already
active (a copied member key), when it asks to activate, before any ServerApp meets it; so
the binding check that records impostors (flower/binding.py) never sees it. The Fleet
gateway does: it hands each refused ``activate-node`` call here, which names the member
whose registered key was shown, when it was one, and keeps a federation-wide event.

While a restarted SuperLink is being given the keys again
(coordinator/superlink/supernode_restore.py) a member's own SuperNode is refused too, for no
fault of anyone's: that refusal is an ``info`` event of its own kind, ``key_not_back``, not an
impostor.

The activation call is open to anyone who reaches the port, so events are rationed: at most
one per key every ``per_key_s`` and ``max_per_minute`` in all; the rest are counted in the
next event's message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from flwr.proto.fleet_pb2 import ActivateNodeRequest
from google.protobuf.message import DecodeError

from collabfl.coordinator.store.state import CoordinatorState

log = logging.getLogger(__name__)

KIND = "impostor"
NOT_BACK = "key_not_back"
MAX_REASON = 200
"""Characters of the SuperLink's answer kept in the event."""


def key_fingerprint(key: bytes) -> bytes | None:
    """The key's DER SubjectPublicKeyInfo, whether given in PEM (as a SuperNode sends it) or
    OpenSSH form (as the operator registers it); None when it is neither."""
    try:
        loaded = (
            serialization.load_ssh_public_key(key)
            if key.startswith(b"ssh-") or key.startswith(b"ecdsa-")
            else serialization.load_pem_public_key(key)
        )
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None
    return loaded.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


class ActivationRefusals:
    """Records the refused activations the gateway reports (``record``, any thread)."""

    def __init__(
        self,
        state: CoordinatorState,
        per_key_s: float = 60.0,
        max_per_minute: int = 10,
        keys_ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self._state = state
        self._keys_ready = keys_ready
        self._per_key_s = per_key_s
        self._max_per_minute = max_per_minute
        self._lock = threading.Lock()
        self._last: dict[bytes, float] = {}
        self._recent: deque[float] = deque()
        self._unrecorded = 0

    def record(self, body: bytes, status: int, answer: str) -> None:
        """A refused ``activate-node`` call: its request ``body`` and the SuperLink's
        ``status`` and ``answer``."""
        try:
            shown = ActivateNodeRequest.FromString(body).public_key
        except DecodeError:
            shown = b""
        fingerprint = key_fingerprint(shown) if shown else None
        if not self._admit(fingerprint or b"", time.monotonic()):
            return
        client_id = self._member_of(fingerprint)
        kind, level = KIND, "warning"
        if client_id is None:
            who = "a SuperNode key no operator registered" if fingerprint else "no readable key"
        elif not self._keys_ready():
            kind, level = NOT_BACK, "info"
            who = (
                f"client {client_id}'s registered key, which the restarted SuperLink does not "
                "have back yet (being registered again; the SuperNode retries)"
            )
        else:
            who = f"client {client_id}'s registered key (its node is active: a copied key?)"
        message = f"SuperNode activation refused by the SuperLink ({status}) for {who}"
        message += f": {answer.strip()[:MAX_REASON]}"
        with self._lock:
            if self._unrecorded:
                message += f"; {self._unrecorded} more refusals not recorded"
                self._unrecorded = 0
        log.log(logging.WARNING if level == "warning" else logging.INFO, "%s", message)
        self._state.record_event("", kind, message, level, client_id=client_id)

    def _admit(self, key: bytes, now: float) -> bool:
        """Whether this refusal gets an event (the ration in the module doc)."""
        with self._lock:
            while self._recent and now - self._recent[0] > 60.0:
                self._recent.popleft()
            last = self._last.get(key)
            if len(self._recent) >= self._max_per_minute or (
                last is not None and now - last < self._per_key_s
            ):
                self._unrecorded += 1
                return False
            if len(self._last) > 4 * self._max_per_minute:  # forget keys of long ago
                self._last = {k: t for k, t in self._last.items() if now - t < self._per_key_s}
            self._last[key] = now
            self._recent.append(now)
            return True

    def _member_of(self, fingerprint: bytes | None) -> int | None:
        if fingerprint is None:
            return None
        for registered, client_id in self._state.supernode_keys().items():
            if key_fingerprint(registered.encode()) == fingerprint:
                return client_id
        return None
