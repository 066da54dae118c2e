"""Registered SuperNode keys brought back into a SuperLink that lost them.

With ``--superlink-state memory`` (the default) a SuperLink that starts again (the daemon
restarted it, or the daemon itself was restarted) knows no SuperNode key, and with SuperNode
authentication (TLS) it refuses every SuperNode's activation. coordinator.db keeps each
member's key (``supernode_keys``). On every SuperLink start the daemon registers again each
key the SuperLink does not know; Flower gives it a new, random node id, which replaces the
old one in the key's binding and the member's row at once (``rebind_supernode``), so the
next launch's node bindings, the admin CLI and the gateway's refusal events see it.

Until that is done ``ready`` is clear: the run launcher launches nothing (a ServerApp started
now would get the old node ids and refuse every node for its whole run), and the Fleet
gateway holds SuperNode activations for a while rather than letting the SuperLink refuse
them. A run the dead SuperLink was serving needs nothing here: its Flower run and messages
died with it, and the launcher relaunches it from coordinator.db with the new bindings.
A key that cannot be registered is logged and recorded as an event, and the others go on;
the SuperLink is never restarted for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from collabfl.coordinator.gateway.doorbell import Doorbell
from collabfl.coordinator.store.state import CoordinatorState

log = logging.getLogger(__name__)

REGISTER_WORKERS = 4
"""Keys registered at once (each is one Control API call of this process)."""
ASK_EVERY_S = 0.5
"""How often a SuperLink that does not answer yet is asked which nodes it knows."""


class KeyRestorer:
    """Re-registers the bound SuperNode keys after each SuperLink start (``started``).

    ``known_nodes``: the node ids the SuperLink knows (raises while it does not answer);
    ``register``: registers a public key, returns its new node id; ``unregister``: removes a
    node id (a key registered for a client whose key changed meanwhile); ``holder``: the node
    id the SuperLink holds a public key under, None if it holds none (asked when
    ``register`` failed).
    """

    def __init__(
        self,
        state: CoordinatorState,
        known_nodes: Callable[[], Iterable[int]],
        register: Callable[[str], int],
        unregister: Callable[[int], None],
        holder: Callable[[str], int | None],
        workers: int = REGISTER_WORKERS,
    ) -> None:
        self.state = state
        self.known_nodes = known_nodes
        self.register = register
        self.unregister = unregister
        self.holder = holder
        self.workers = workers
        self.ready = threading.Event()
        """Set once the running SuperLink knows every bound key that could be registered."""
        self._starts = Doorbell()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="key-restorer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._starts.ring()

    def gone(self) -> None:
        """The SuperLink exited: nothing launches until its successor has the keys."""
        self.ready.clear()

    def started(self) -> None:
        """A SuperLink (first or new) is starting: restore the keys once it answers."""
        self.ready.clear()
        self._starts.ring()

    def _loop(self) -> None:
        seen = 0
        while not self._stopping.is_set():
            count = self._starts.wait(seen, 3600.0)
            if count == seen or self._stopping.is_set():
                continue
            seen = count
            try:
                if self.restore(partial(self._superseded, seen)):
                    self.ready.set()
            except Exception:  # e.g. coordinator.db unreadable: say why, hold nothing up
                log.exception("restoring SuperNode keys failed")
                self.ready.set()

    def _superseded(self, start: int) -> bool:
        """Whether another SuperLink start than the ``start``-th came, or stopping."""
        return self._starts.count != start or self._stopping.is_set()

    def restore(self, superseded: Callable[[], bool] = lambda: False) -> bool:
        """Register every bound key the SuperLink does not know and rebind it; False when
        ``superseded`` (another SuperLink start, or stopping) came first."""
        while True:
            try:
                known = set(self.known_nodes())
                break
            except Exception as error:  # not answering yet
                log.debug("SuperLink not answering yet: %s", error)
            if superseded():
                return False
            time.sleep(ASK_EVERY_S)
        lost = [b for b in self.state.bound_supernodes() if b[1] not in known]
        if not lost:
            return True
        begun = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="register") as pool:
            done = list(pool.map(lambda bound: self._restore_one(*bound), lost))
        log.info(
            "SuperLink: %d of %d SuperNode keys registered again in %.1f s",
            sum(done), len(lost), time.monotonic() - begun,
        )  # fmt: skip
        return not superseded()

    def _restore_one(self, client_id: int, old_node: int, public_key: str) -> bool:
        try:
            node = self.register(public_key)
        except Exception as error:
            held = self._held_as(public_key)
            owner = None if held is None else self.state.supernode_bindings().get(held)
            if held is None or owner not in (None, client_id):
                reason = str(error)
                if owner is not None:  # the operator registered this key for another client
                    reason = f"the SuperLink holds it as client {owner}'s node {held}"
                self._lost(client_id, old_node, public_key, reason)
                return False
            # Flower refuses a key it holds: registered meanwhile (`admin register-supernode`,
            # whose binding may not be written yet), or by a restore that stopped before it
            # rebound the key. Either way it is back, under ``held``.
            log.info("client %s's SuperNode key is registered already, as node %s",
                     client_id, held)  # fmt: skip
            node = held
        if not self.state.rebind_supernode(client_id, public_key, node):
            log.info("client %s's key changed while it was registered; node %s removed",
                     client_id, node)  # fmt: skip
            try:
                self.unregister(node)
            except Exception as error:
                log.warning("node %s not removed: %s", node, error)
            return False
        log.info("client %s: SuperNode key registered again as node %s (was %s)",
                 client_id, node, old_node)  # fmt: skip
        return True

    def _held_as(self, public_key: str) -> int | None:
        """The node the SuperLink holds ``public_key`` under; None if none, or unknown."""
        try:
            return self.holder(public_key)
        except Exception as error:
            log.warning("could not ask the SuperLink which node holds a key: %s", error)
            return None

    def _lost(self, client_id: int, old_node: int, public_key: str, reason: str) -> None:
        """Record that the key of ``client_id`` could not be registered, unless it is no
        longer bound as it was (re-enrolled or revoked meanwhile: nothing was lost)."""
        if self._binding(client_id) != (old_node, public_key):
            log.info("client %s's SuperNode key changed while it was registered again (%s); "
                     "left as it is", client_id, reason)  # fmt: skip
            return
        message = (
            f"client {client_id}'s SuperNode key (Flower node {old_node}) was not "
            f"registered again after the SuperLink restarted: {reason}; its SuperNode is "
            "refused until `collabfl admin register-supernode` registers it"
        )
        log.error("%s", message)
        self.state.record_event("", "supernode_key_lost", message, "error", client_id=client_id)

    def _binding(self, client_id: int) -> tuple[int, str] | None:
        """Client ``client_id``'s (node id, key) in coordinator.db now; None if unbound."""
        bound = {client: (node, key) for client, node, key in self.state.bound_supernodes()}
        return bound.get(client_id)
