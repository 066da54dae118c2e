"""Who may call which coordinator RPC: the service's access policy, in one table.

Callers prove a role with the client certificate the federation's CA issued them
(``collabfl.kernel.identity``):

- the operator administers the federation and reads everything;
- the coordinator's own certificate, which the ServerApp it launches presents, records what
  a run produces and issues peer-fetch grants (each write also needs the launch token, and
  grants only the active run's current round: ``service`` checks both);
- members call one RPC here, the sub-step relay's Poll, and reach with it only their own
  seat in a session their run's ServerApp opened (the seat's token came to their node in a
  Flower message; ``substep_service`` also checks the certificate names that client). A
  stolen member certificate alone reads and writes nothing.

Without TLS (``--insecure``, loopback tests) no caller has an identity and the table is not
applied; the launch token still is.
"""

from __future__ import annotations

from collections.abc import Mapping

from collabfl.kernel.identity import Identity, Role

OPERATOR = frozenset({Role.OPERATOR})
SERVER_APP = frozenset({Role.COORDINATOR})
OPERATOR_OR_SERVER_APP = OPERATOR | SERVER_APP
MEMBER = frozenset({Role.MEMBER})

POLICY: Mapping[str, frozenset[Role]] = {
    # Federation membership: the ServerApp registers the clients that joined its run.
    "RegisterMembers": OPERATOR_OR_SERVER_APP,
    "ListMembers": OPERATOR,
    # Runs: operators start and stop them; the ServerApp reads its own and ends it.
    "CreateRun": OPERATOR,
    "GetRun": OPERATOR_OR_SERVER_APP,
    "ListRuns": OPERATOR,
    "StopRun": OPERATOR,
    "FinishRun": SERVER_APP,
    "SetRunMessage": SERVER_APP,
    # What a run produces: written by its ServerApp only, read by operators.
    "RecordRound": SERVER_APP,
    "RecordEvent": SERVER_APP,
    "IssueGrants": SERVER_APP,
    "ListEvents": OPERATOR,
    "GetRound": OPERATOR,
    "GetGraphHistory": OPERATOR,
    "GetMetrics": OPERATOR,
    "GetCoalitions": OPERATOR,
    "GetRunResults": OPERATOR,
    "ReadRunFile": OPERATOR,
    "Status": OPERATOR,
    # The Flower transport's signals: the ServerApp's, about its own run.
    "MessagesPushed": SERVER_APP,
    "AwaitReplies": SERVER_APP,
    # The sub-step relay (substeps.proto): the ServerApp runs sessions, members poll.
    "OpenSession": SERVER_APP,
    "Relay": SERVER_APP,
    "CloseSession": SERVER_APP,
    "Poll": MEMBER,
    # Enrolment: operators invite and revoke members and other operators.
    "Invite": OPERATOR,
    "Revoke": OPERATOR,
    "ListEnrolments": OPERATOR,
    "RegisterSupernode": OPERATOR,
}


class Unauthenticated(PermissionError):
    """The caller presented no certificate naming a collabfl identity."""


class Forbidden(PermissionError):
    """The caller's role may not call this RPC."""


def authorize(rpc: str, caller: Identity | None) -> Identity:
    """The caller, if its role may call ``rpc``; an RPC missing from POLICY admits no one."""
    if caller is None:
        raise Unauthenticated(
            f"{rpc} needs a client certificate naming a collabfl identity, issued by the "
            "federation's CA"
        )
    allowed = POLICY.get(rpc, frozenset())
    if caller.role not in allowed:
        names = ", ".join(sorted(role.value for role in allowed)) or "nobody"
        raise Forbidden(f"{caller} may not call {rpc} (allowed: {names})")
    return caller
