"""Peer fetch over a shaped link: does it fill the link a deployment has?

The fetcher and each peer server run in their own network namespace (tests/support/netns.py's
``NetworkBed``), every host's link capped both ways with ``tc ... tbf`` at the chosen rate, so
a transfer crosses two capped hops (the server's egress, then the fetcher's ingress) as on a
switched network. For each rate and model size one peer host runs the real
``PeerModelServer`` (grant check, file read from disk, its digest checked on the way; plain
gRPC, or mutual TLS with ``--tls``) beside a bare gRPC server that streams the same file
bytes in 1 MiB messages (benchmarks/peer_fetch.py's baseline, always plain) and a raw TCP
sender of those bytes (one socket, ``sendall``; the fetcher receives them into one buffer:
what the link gives with no protocol at all); the fetcher times ``GrpcPeerSource.fetch``,
the bare stream, raw TCP, and the fetch's digest (BLAKE3) and SHA-256 (the digest before
it) over as many bytes in memory, in turn (medians): a fetch checks the digest of every byte,
so on a machine whose one core hashes slower than the link carries, the hash is its ceiling.
Reported: throughput as a fraction of the nominal link rate, of the bare stream and of raw
TCP over the same link, and the fetch's extra peak memory as a multiple of the model
(peer_fetch.py's fresh-process measure, run in the fetcher's namespace: a warm process, so
one more fetch's cost). Then a BGGC batch: Bc concurrent
fetches, one from each of Bc peer hosts, all through the fetcher's one capped link; the
aggregate throughput against the link rate. The fetcher's processes run with the
environment a client daemon gives its executor (``executor_env``: one malloc arena).

Targets (issue 27): fetch >= 0.9x link and >= 0.9x the bare stream, extra memory <= 1.5x the
model, batch aggregate >= 0.9x link. Issue 41, at 10 Gbit with ``--tls`` and a 200 MB model:
fetch >= 0.8x raw TCP, extra memory <= 1.2x the model. Needs root (namespaces); the namespaces
are deleted on exit, on Ctrl-C and on SIGTERM.

    sudo .venv/bin/python benchmarks/peer_link.py [--rates 100mbit,1gbit] [--sizes 10,100]
        [--tls] [--no-batch] [--name peer_link-10gbit]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import torch
from _common import exit_on_sigterm, format_table, median, write_results
from peer_fetch import (
    BARE_CHUNK_BYTES,
    BARE_OPTIONS,
    MB,
    OWNER,
    ROUND,
    RUN,
    WARM_NUMEL,
    WARM_ROUND,
    bare_server,
    client_tls,
    drain_bare,
    run_child,
    split,
    timed,
)

from collabfl.client.background_hash import weights_digest
from collabfl.client.model_store import PublishedModels
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_server import PeerModelServer
from collabfl.flower.processes import executor_env
from collabfl.kernel.grants import GrantSigner, GrantVerifier, generate_private_key
from collabfl.kernel.supervisor import stop_group
from collabfl.kernel.tls import ServerTLS
from tests.support.netns import Link, NetworkBed, unavailable_reason
from tests.support.pki import TestCA

READY = "PEER-LINK-READY "
RESULT = "PEER-LINK-RESULT "
FETCHER = 0
BITS_PER_RATE = {"mbit": 1e6, "gbit": 1e9}


def rate_bytes_per_s(rate: str) -> float:
    """``100mbit`` -> 12.5e6 bytes/s (tc's units)."""
    for unit, bits in BITS_PER_RATE.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * bits / 8
    raise argparse.ArgumentTypeError(f"rate {rate!r}: write it as tc does, e.g. 100mbit, 1gbit")


def tcp_sender(payload: bytes, host: str) -> int:
    """Send ``payload`` whole to every connection on ``host``'s returned port (a daemon
    thread per connection): the raw TCP baseline."""
    listener = socket.create_server((host, 0))

    def accept() -> None:
        while True:
            connection, _ = listener.accept()
            threading.Thread(target=send, args=(connection,), daemon=True).start()

    def send(connection: socket.socket) -> None:
        with connection:
            connection.sendall(payload)

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1])


def drain_tcp(address: str, size: int) -> None:
    """Receive ``size`` bytes from a ``tcp_sender`` into one preallocated buffer."""
    host, port = address.rsplit(":", 1)
    buffer = memoryview(bytearray(size))
    with socket.create_connection((host, int(port))) as connection:
        at = 0
        while at < size:
            got = connection.recv_into(buffer[at:])
            if got == 0:
                raise ConnectionError(f"raw TCP stream ended after {at} of {size} bytes")
            at += got


def pki_pems(ca: TestCA, host: str, owner: int) -> dict[str, Any]:
    """PEM strings for a peer host (``owner`` at ``host``) and the fetcher, from ``ca``."""
    server, fetcher = ca.member(owner, host), ca.member(FETCHER)
    return {
        "ca": ca.cert_pem.decode(),
        "server": {"cert": server.cert.decode(), "key": server.key.decode()},
        "cert": fetcher.cert.decode(),
        "key": fetcher.key.decode(),
    }


def serve(spec: dict[str, Any]) -> None:
    """Peer host: publish a model of ``size_mb`` as ``owner``, serve it (real server, bare
    stream, raw TCP) on ``host``, print the ports and grants, and serve until SIGTERM (the
    bed's stop)."""
    exit_on_sigterm()  # so that the published files' folder is removed
    numel = spec["size_mb"] * MB // 4
    owner = spec["owner"]
    signer = GrantSigner(generate_private_key())
    with tempfile.TemporaryDirectory(prefix="collabfl-peer-link-") as tmp:
        published = PublishedModels(Path(tmp), owner=owner)
        store = published.for_publishing(RUN)
        store.publish(owner, ROUND, torch.randn(numel))
        store.publish(owner, WARM_ROUND, torch.randn(WARM_NUMEL))
        payload = store.path(ROUND).read_bytes()
        pems = spec.get("tls")
        server_tls: ServerTLS | None = None
        if pems is not None:
            own = pems["server"]
            server_tls = ServerTLS(own["cert"].encode(), own["key"].encode(), pems["ca"].encode())
        server = PeerModelServer(
            published, GrantVerifier(signer.public_key_bytes()), f"{spec['host']}:0", server_tls
        )
        port = server.start()
        bare, bare_port = bare_server(split(payload, BARE_CHUNK_BYTES), spec["host"])
        tcp_port = tcp_sender(payload, spec["host"])
        ready = {
            "address": f"{spec['host']}:{port}",
            "bare_address": f"{spec['host']}:{bare_port}",
            "tcp_address": f"{spec['host']}:{tcp_port}",
            "grant": signer.issue(RUN, FETCHER, owner, ROUND, ttl_s=3600).hex(),
            "warm_grant": signer.issue(RUN, FETCHER, owner, WARM_ROUND, ttl_s=3600).hex(),
            "payload_bytes": len(payload),
        }
        print(READY + json.dumps(ready), flush=True)
        try:
            signal.pause()
        finally:
            bare.stop(None)
            server.stop(None)


def fetch_times(spec: dict[str, Any]) -> dict[str, Any]:
    """Fetcher host: alternate timed fetches and bare drains from one peer (after a warm-up
    of each); or, with several peers, time concurrent fetches, one per peer (the batch)."""
    peers = spec["peers"]
    numel, timeout_s = spec["numel"], spec["timeout_s"]
    addresses = {p["owner"]: p["address"] for p in peers}
    grants = {p["owner"]: bytes.fromhex(p["grant"]) for p in peers}
    credential = client_tls(spec.get("tls"))
    max_bytes = 4 * numel + MB
    with GrpcPeerSource(
        addresses, grants, numel, max_bytes, timeout_s, credential, run=RUN
    ) as source:
        if len(peers) > 1:
            with ThreadPoolExecutor(len(peers)) as pool:

                def batch() -> None:
                    list(pool.map(lambda owner: source.fetch(owner, ROUND), addresses))

                batch()
                return {"batch": [timed(batch) for _ in range(spec["repeats"])]}
        owner = peers[0]["owner"]
        hashed = bytes(peers[0]["payload_bytes"])
        with grpc.insecure_channel(peers[0]["bare_address"], options=BARE_OPTIONS) as channel:
            runs = {
                "fetch": lambda: source.fetch(owner, ROUND),
                "bare": lambda: drain_bare(channel, timeout_s),
                "tcp": lambda: drain_tcp(peers[0]["tcp_address"], peers[0]["payload_bytes"]),
                "digest": lambda: weights_digest(hashed),
                "sha256": lambda: hashlib.sha256(hashed).digest(),
            }
            for run in runs.values():
                run()
            times: dict[str, list[float]] = {name: [] for name in runs}
            for rep in range(spec["repeats"]):
                order = list(runs.items())
                for name, run in order if rep % 2 == 0 else order[::-1]:
                    times[name].append(timed(run))
            return times


def start_peer(
    bed: NetworkBed, host: str, owner: int, size_mb: int, log: Path, ca: TestCA | None
) -> dict[str, Any]:
    """Start a peer server in ``host`` (over mutual TLS from ``ca`` if given); its READY
    record once it serves (the bed stops it)."""
    spec: dict[str, Any] = {"owner": owner, "size_mb": size_mb, "host": bed.address(host)}
    if ca is not None:
        spec["tls"] = pki_pems(ca, bed.address(host), owner)
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve", json.dumps(spec)]
    process = bed.popen(host, argv, log)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith(READY):
                return {"owner": owner, **json.loads(line[len(READY) :]), "tls": spec.get("tls")}
        if process.poll() is not None:
            raise RuntimeError(f"peer server in {host} exited:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"peer server in {host} not ready after 300 s")


def as_executor(argv: list[str]) -> list[str]:
    """``argv`` with the environment a client daemon gives its executor, the process that
    fetches peer models (flower/processes.py, ``executor_env``)."""
    return ["env", *(f"{key}={value}" for key, value in executor_env({}).items()), *argv]


def in_host(bed: NetworkBed, host: str, mode: str, spec: dict[str, Any]) -> Any:
    """This script's ``mode`` run to completion in ``host`` (as an executor runs); its
    RESULT record."""
    argv = [sys.executable, str(Path(__file__).resolve()), mode, json.dumps(spec)]
    done = bed.run(host, as_executor(argv), timeout_s=1800)
    lines = [x for x in done.stdout.splitlines() if x.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} in {host} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT) :])


def bench_rate(rate: str, sizes: list[int], batch: int, batch_mb: int, args: Any) -> dict:
    """One shaped bed: each size's fetch vs bare vs raw TCP vs link and its memory; then the
    batch (unless ``args.no_batch``)."""
    ca = TestCA() if args.tls else None
    link_bytes = rate_bytes_per_s(rate)
    hosts = ["fetcher", *(f"peer{k}" for k in range(1, batch + 1))]
    result: dict[str, Any] = {"rate": rate, "link_mb_per_s": link_bytes / MB, "sizes": []}
    with tempfile.TemporaryDirectory() as tmp, NetworkBed(hosts, Link(rate=rate)) as bed:
        logs = Path(tmp)
        for size_mb in sizes:
            peer = start_peer(bed, "peer1", OWNER, size_mb, logs / f"peer1-{size_mb}.log", ca)
            numel = size_mb * MB // 4
            spec = {
                "peers": [peer],
                "numel": numel,
                "timeout_s": args.timeout,
                "tls": fetcher_tls(peer),
            }
            times = in_host(bed, "fetcher", "--times", {**spec, "repeats": args.repeats})
            child = {"numel": numel, "max_bytes": 4 * numel + MB, "timeout_s": args.timeout}
            child |= {"address": peer["address"], "grant": peer["grant"], "tls": fetcher_tls(peer)}
            extras = [
                run_child(
                    {**child, "kind": "fetch_warm", "warm_grant": peer["warm_grant"]},
                    lambda argv: bed.command("fetcher", as_executor(argv)),
                )["extra_bytes"]
                for _ in range(args.memory_repeats)
            ]
            stop_group(bed.processes.pop(), grace_s=10.0)  # the next size gets its own
            payload = peer["payload_bytes"]
            fetch_rate = payload / median(times["fetch"])
            bare_rate = payload / median(times["bare"])
            tcp_rate = payload / median(times["tcp"])
            digest_rate = payload / median(times["digest"])
            sha_rate = payload / median(times["sha256"])
            result["sizes"].append(
                {
                    "size_mb": size_mb,
                    "payload_bytes": payload,
                    "times_s": times,
                    "fetch_mb_per_s": fetch_rate / MB,
                    "bare_mb_per_s": bare_rate / MB,
                    "tcp_mb_per_s": tcp_rate / MB,
                    "digest_mb_per_s": digest_rate / MB,
                    "sha256_mb_per_s": sha_rate / MB,
                    "fetch_to_link": fetch_rate / link_bytes,
                    "bare_to_link": bare_rate / link_bytes,
                    "fetch_to_bare": fetch_rate / bare_rate,
                    "fetch_to_tcp": fetch_rate / tcp_rate,
                    "tcp_to_link": tcp_rate / link_bytes,
                    "extra_bytes": extras,
                    "extra_memory_ratio": median(extras) / payload,
                }
            )
            print(f"  {rate} {size_mb} MB done", flush=True)
        if args.no_batch:
            return result
        peers = [
            start_peer(bed, f"peer{k}", k, batch_mb, logs / f"batch-peer{k}.log", ca)
            for k in range(1, batch + 1)
        ]
        spec = {"peers": peers, "numel": batch_mb * MB // 4, "timeout_s": args.timeout}
        spec["tls"] = fetcher_tls(peers[0])
        batch_times = in_host(bed, "fetcher", "--times", {**spec, "repeats": args.repeats})
        total = sum(p["payload_bytes"] for p in peers)
        aggregate = total / median(batch_times["batch"])
        result["batch"] = {
            "peers": batch,
            "model_mb": batch_mb,
            "times_s": batch_times["batch"],
            "aggregate_mb_per_s": aggregate / MB,
            "aggregate_to_link": aggregate / link_bytes,
        }
        print(f"  {rate} batch of {batch} done", flush=True)
    return result


def fetcher_tls(peer: dict[str, Any]) -> dict[str, str] | None:
    """The fetcher's side of a peer's TLS material (None: plain gRPC)."""
    pems = peer["tls"]
    return None if pems is None else {key: pems[key] for key in ("ca", "cert", "key")}


def report(results: list[dict[str, Any]]) -> None:
    rows = [
        [
            r["rate"],
            s["size_mb"],
            f"{s['fetch_mb_per_s']:.1f}",
            f"{s['bare_mb_per_s']:.1f}",
            f"{s['tcp_mb_per_s']:.1f}",
            f"{s['digest_mb_per_s']:.1f}",
            f"{s['sha256_mb_per_s']:.1f}",
            f"{r['link_mb_per_s']:.1f}",
            f"{s['fetch_to_link']:.2f}",
            f"{s['fetch_to_bare']:.2f}",
            f"{s['fetch_to_tcp']:.2f}",
            f"{s['bare_to_link']:.2f}",
            f"{s['extra_memory_ratio']:.2f}",
        ]
        for r in results
        for s in r["sizes"]
    ]
    headers = ["link", "MB", "fetch MB/s", "bare MB/s", "TCP MB/s", "BLAKE3 MB/s"]
    headers += ["SHA-256 MB/s", "link MB/s"]
    headers += ["fetch/link"]
    headers += ["fetch/bare", "fetch/TCP"]
    headers += ["bare/link", "extra/model"]
    print(format_table(headers, rows))
    for r in results:
        if "batch" not in r:
            continue
        b = r["batch"]
        print(
            f"{r['rate']}: batch of {b['peers']} x {b['model_mb']} MB: "
            f"{b['aggregate_mb_per_s']:.1f} MB/s, {b['aggregate_to_link']:.2f} of the link"
        )
    print("targets: fetch/link >= 0.9, fetch/bare >= 0.9, extra/model <= 1.5, batch >= 0.9")
    print("issue 41 at 10gbit, --tls, 200 MB: fetch/TCP >= 0.8, extra/model <= 1.2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="100mbit,1gbit", help="tc tbf rates (comma separated)")
    parser.add_argument("--sizes", default="10,100", help="model sizes in MB (comma separated)")
    parser.add_argument("--repeats", type=int, default=3, help="timed transfers per size and kind")
    parser.add_argument("--memory-repeats", type=int, default=2, help="memory children per size")
    parser.add_argument("--batch", type=int, default=2, help="Bc: concurrent fetches, one a peer")
    parser.add_argument("--batch-mb", type=int, default=10, help="model size of the batch, MB")
    parser.add_argument("--timeout", type=float, default=300.0, help="deadline of one fetch, s")
    parser.add_argument("--tls", action="store_true", help="mutual TLS on the peer link")
    parser.add_argument("--no-batch", action="store_true", help="skip the BGGC batch")
    parser.add_argument("--name", default="peer_link", help="results/<name>.json")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--times", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.getLogger("collabfl.client.peer_server").setLevel(logging.ERROR)
    if args.serve is not None:
        serve(json.loads(args.serve))
        return
    if args.times is not None:
        print(RESULT + json.dumps(fetch_times(json.loads(args.times))), flush=True)
        return
    reason = unavailable_reason()
    if reason is not None:
        parser.error(f"cannot build network namespaces here: {reason}")
    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    for rate in rates:
        rate_bytes_per_s(rate)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.batch < 2:
        parser.error(f"--batch {args.batch}: a batch needs at least 2 peers")
    exit_on_sigterm()
    load_before = os.getloadavg()
    results = [bench_rate(rate, sizes, args.batch, args.batch_mb, args) for rate in rates]
    report(results)
    settings = {**vars(args), "load_average_before": load_before}
    settings["load_average_after"] = os.getloadavg()
    print(f"\nwrote {write_results(args.name, {'rates': results}, settings)}")


if __name__ == "__main__":
    main()
