"""How long a restarted in-memory SuperLink takes to get the SuperNode keys back.

Starts the SuperLink as the TLS coordinator daemon does (tests/support/tls_superlink.py),
registers and binds ``--keys`` SuperNode keys in a coordinator.db, SIGKILLs the SuperLink
and starts a fresh one, then times the daemon's key restorer (coordinator/
supernode_restore.py) from the fresh SuperLink's start until every key is bound to its new
node id, registering one key at a time (``--workers 1``) and a few at once (the daemon's
REGISTER_WORKERS). Each registration is one Control API call of the daemon's process
(coordinator/superlink/superlink_control.py); before, each was a ``flwr supernode register`` process
(benchmarks/results/key_restore-flwr-cli.json).

    python benchmarks/key_restore.py [--keys 4,16] [--workers 1,4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import exit_on_sigterm, format_table, median, write_results

from collabfl.coordinator.store.state import CoordinatorState
from collabfl.flower.supernode_key import ensure_supernode_key
from tests.support.tls_superlink import TlsSuperLink


def restore_once(root: Path, keys: int, workers: int) -> dict[str, float]:
    """Seconds from a fresh SuperLink's start to its first answer and to every key back."""
    state = CoordinatorState(root / "coordinator.db")
    with TlsSuperLink(root / "coordinator") as superlink:
        restorer = superlink.restorer(state, workers)
        superlink.nodes()
        for client in range(keys):
            public = ensure_supernode_key(root / f"client-{client}")[1].read_text().strip()
            state.bind_supernode(client, restorer.register(public), public)
        old = dict(state.supernode_bindings())
        superlink.restart()
        started = time.perf_counter()
        superlink.nodes()
        answered = time.perf_counter() - started
        assert restorer.restore()
        total = time.perf_counter() - started
        assert not set(state.supernode_bindings()) & set(old), "every key has a new node id"
        assert len(superlink.nodes()) == keys
    state.close()
    return {"answers_s": answered, "keys_back_s": total, "registering_s": total - answered}


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", default="4,16", help="numbers of keys, comma-separated")
    parser.add_argument("--workers", default="1,4", help="registrations at once, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    table = []
    for keys in (int(k) for k in args.keys.split(",")):
        for workers in (int(w) for w in args.workers.split(",")):
            runs = []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    runs.append(restore_once(Path(tmp), keys, workers))
            row = {k: median([r[k] for r in runs]) for k in runs[0]}
            figures[f"{keys}_keys_{workers}_workers"] = {"median": row, "runs": runs}
            table.append([str(keys), str(workers), *(f"{row[k]:.2f}" for k in row)])
            print(table[-1], flush=True)
    headers = ["keys", "workers", "SuperLink answers (s)", "keys back (s)", "registering (s)"]
    print(format_table(headers, table))
    write_results("key_restore", figures, vars(args))


if __name__ == "__main__":
    main()
