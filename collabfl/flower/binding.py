"""Which Flower node speaks for which client id in a run.

A client id is only a number a node states at set-up, so without a binding a second daemon
started with ``--client-id 1`` would take turns with the real one. With SuperNode
authentication the operator registered each member's SuperNode key, and Flower derives the
node id from the key, so the coordinator knows the one node allowed to be client k (the
``node-bindings`` run-config entry). Without it (insecure, loopback only) the first node to
claim an id keeps it for the run; another node may take it over once that node is offline,
or at once when it advertises the same peer address (a restarted daemon is a new Flower
node at the same address, and its old node may still count as online for a while).
Everything refused is reported, so the ServerApp records it as an event.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


class NodeBinder:
    """Grants client ids to Flower nodes for one run and remembers whom it refused."""

    def __init__(self, registered: Mapping[int, int]) -> None:
        self.registered = dict(registered)
        """Flower node id -> client id from SuperNode registration; empty: first come."""
        self.bound: dict[int, int] = {}
        """Client id -> the node currently speaking for it."""
        self.addresses: dict[int, str] = {}
        """Client id -> the peer address its node advertised."""
        self._for_good: set[int] = set()
        """Nodes whose registered key contradicts them: refused for the whole run."""
        self._waiting: dict[int, int] = {}
        """First come: node -> the client id it claimed while another online node held it."""

    def claim(
        self, node: int, client_id: int, online: Collection[int], address: str = ""
    ) -> str | None:
        """Bind ``client_id`` to ``node`` (advertising peer ``address``) and return None, or
        say why ``node`` is refused."""
        reason = self._refusal(node, client_id, online, address)
        if reason is None:
            self.bound[client_id] = node
            self.addresses[client_id] = address
            self._waiting.pop(node, None)
        elif self.registered:
            self._for_good.add(node)
        else:
            self._waiting[node] = client_id
        return reason

    def refused(self, online: Collection[int]) -> set[int]:
        """Nodes that get no instruction, no grant and no new set-up while ``online`` are
        the nodes online: those refused for good, and those whose claimed id is still held
        by an online node (once it is offline they may ask again)."""
        held = {n for n, client_id in self._waiting.items() if self.bound.get(client_id) in online}
        return self._for_good | held

    def _refusal(
        self, node: int, client_id: int, online: Collection[int], address: str
    ) -> str | None:
        if self.registered:
            owner = self.registered.get(node)
            if owner is None:
                return f"node {node} claims client {client_id} but holds no registered key"
            if owner != client_id:
                return f"node {node} claims client {client_id} but is registered as {owner}"
            return None
        current = self.bound.get(client_id)
        restarted = bool(address) and address == self.addresses.get(client_id)
        if current is not None and current != node and current in online and not restarted:
            return f"node {node} claims client {client_id}, which node {current} holds"
        return None


def format_bindings(bindings: Mapping[int, int]) -> str:
    """``node:client`` pairs separated by spaces: a plain run-config string."""
    return " ".join(f"{node}:{client}" for node, client in sorted(bindings.items()))


def parse_bindings(text: str) -> dict[int, int]:
    """The Flower node id -> client id map ``format_bindings`` wrote; ValueError if bad."""
    bindings = {}
    for pair in text.split():
        node, sep, client = pair.partition(":")
        if not sep or not node.isdigit() or not client.isdigit():
            raise ValueError(f"node binding {pair!r} is not NODE:CLIENT")
        bindings[int(node)] = int(client)
    return bindings
