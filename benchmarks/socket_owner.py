"""What the owner-gated SuperLink pays per accepted connection to learn who called.

The gate (coordinator/superlink/owner_gated_superlink.py) asks the kernel which user owns the
calling socket of every connection, on the SuperLink's event loop. This times that question
both ways kernel/socket_owner.py can ask it, for a loopback connection, while the machine
holds ``--others`` further open connections (a federation's SuperNodes, executors and peer
links; a 32-client federation on one machine held 400 established and up to 1,500 closing):
sock_diag (one socket looked up by its addresses) against reading ``/proc/net/tcp`` and
``/proc/net/tcp6``. Medians of ``--repeats`` lookups, in microseconds.

    python benchmarks/socket_owner.py [--others 0,1000] [--repeats 200]
"""

from __future__ import annotations

import argparse
import resource
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from statistics import median

from _common import format_table, write_results

from collabfl.kernel.socket_owner import diag_owner, table_owner

Lookup = Callable[[tuple[str, int], tuple[str, int]], "int | None"]


@contextmanager
def open_connections(count: int) -> Iterator[None]:
    """``count`` established loopback connections, held open (both ends)."""
    with ExitStack() as stack, socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1024)
        for _ in range(count):
            stack.enter_context(socket.create_connection(server.getsockname()))
            stack.enter_context(server.accept()[0])
        yield


def time_lookup(lookup: Lookup, repeats: int) -> float:
    """Median microseconds of ``lookup`` for a live connection (whose owner it must find)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()):
            accepted, peer = server.accept()
            with accepted:
                local = accepted.getsockname()
                if lookup(peer, local) is None:
                    raise SystemExit(f"{lookup.__name__} did not find this process's connection")
                took = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    lookup(peer, local)
                    took.append(time.perf_counter() - start)
    return median(took) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--others", default="0,1000", help="open connections held meanwhile")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--name", default="socket_owner")
    args = parser.parse_args()
    _, most = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (most, most))  # two descriptors a connection
    figures: dict[str, dict[str, float]] = {}
    rows = []
    for others in (int(n) for n in args.others.split(",")):
        with open_connections(others):
            diag = time_lookup(diag_owner, args.repeats)
            tables = time_lookup(table_owner, max(args.repeats // 10, 5))
        figures[f"{others}_others"] = {"sock_diag_us": diag, "proc_tables_us": tables}
        rows.append([others, f"{diag:.0f}", f"{tables:.0f}", f"{tables / diag:.0f}×"])
    print(format_table(["open connections", "sock_diag µs", "/proc tables µs", "ratio"], rows))
    print(f"written: {write_results(args.name, figures, vars(args))}")


if __name__ == "__main__":
    main()
