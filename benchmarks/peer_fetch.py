"""Peer fetch over loopback: throughput against bare gRPC streaming, and peak extra memory.

For each model size a ``DiskModelStore`` publishes a random float32 vector and two servers
run in this process: the real ``PeerModelServer`` (grant check, file read from disk) and a
bare gRPC server that streams the same file bytes, pre-split into 1 MiB messages with no
protobuf at all: the fastest a server-streaming transfer can go here. Throughput is the
payload size over the median wall time of ``GrpcPeerSource.fetch`` (manifest, parse, SHA-256,
copy into the result tensor) and of draining the bare stream; repetitions alternate which
goes first. Target: ratio >= 0.5.

Memory: a fresh subprocess (this script with ``--child``) makes one refused fetch (a round
its grant does not cover) to open the connection, resets its RSS high-water mark
(/proc/self/clear_refs), then fetches the model once; the figure is VmHWM after minus VmRSS
before, the result tensor included. Target: <= 1.5x the model size.

Run: python benchmarks/peer_fetch.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import torch
from _common import format_table, median, write_results

from collabfl.client.grants import GrantSigner, GrantVerifier, generate_private_key
from collabfl.client.model_store import DiskModelStore
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_server import CHUNK_BYTES, PeerModelServer
from collabfl.client.peers import PeerUnavailable

RESULT_PREFIX = "PEER-FETCH-RESULT "
OWNER, ROUND = 1, 0
BARE_METHOD = "/bare.Bytes/Stream"
MB = 1_000_000


def bare_server(chunks: list[bytes]) -> tuple[grpc.Server, int]:
    """A server-streaming RPC that sends ``chunks`` as raw messages (no (de)serialisation)."""

    def stream(request: bytes, context: grpc.ServicerContext):
        yield from chunks

    handler = grpc.method_handlers_generic_handler(
        "bare.Bytes", {"Stream": grpc.unary_stream_rpc_method_handler(stream)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def drain_bare(channel: grpc.Channel, timeout_s: float) -> int:
    call = channel.unary_stream(BARE_METHOD)(b"", timeout=timeout_s)
    return sum(len(message) for message in call)


def proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One measured fetch in this fresh process; returns the memory figures in bytes."""
    grants = {OWNER: bytes.fromhex(spec["grant"])}
    addresses = {OWNER: spec["address"]}
    with GrpcPeerSource(
        addresses, grants, spec["numel"], spec["max_bytes"], spec["timeout_s"]
    ) as source:
        # Refused (the grant is for ROUND): opens the connection, transfers nothing.
        with contextlib.suppress(PeerUnavailable):
            source.fetch(OWNER, ROUND + 1)
        before = proc_status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
        hwm_reset = proc_status_kib("VmHWM")
        vector = source.fetch(OWNER, ROUND)
        after = proc_status_kib("VmHWM")
    return {
        "rss_before_bytes": before * 1024,
        "hwm_after_bytes": after * 1024,
        "hwm_reset_ok": hwm_reset <= before + 1024,
        "extra_bytes": (after - before) * 1024,
        "result_bytes": vector.numel() * vector.element_size(),
    }


def measure_memory(address: str, grant: bytes, numel: int, timeout_s: float) -> dict[str, Any]:
    spec = {
        "address": address,
        "grant": grant.hex(),
        "numel": numel,
        "max_bytes": 8 * numel + MB,
        "timeout_s": timeout_s,
    }
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"memory child failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT_PREFIX) :])


def bench_size(size_mb: int, repeats: int, timeout_s: float) -> dict[str, Any]:
    numel = size_mb * MB // 4
    signer = GrantSigner(generate_private_key())
    with tempfile.TemporaryDirectory(prefix="collabfl-peer-fetch-") as tmp:
        store = DiskModelStore(Path(tmp), owner=OWNER)
        store.publish(OWNER, ROUND, torch.randn(numel))
        payload = store.path(ROUND).read_bytes()
        chunks = [payload[at : at + CHUNK_BYTES] for at in range(0, len(payload), CHUNK_BYTES)]
        del payload
        server = PeerModelServer(store, GrantVerifier(signer.public_key_bytes()))
        address = f"127.0.0.1:{server.start()}"
        bare, bare_port = bare_server(chunks)
        grants = {OWNER: signer.issue("bench", 0, OWNER, ROUND, ttl_s=3600)}
        byte_size = store.describe(ROUND).byte_size
        source = GrpcPeerSource({OWNER: address}, grants, numel, 8 * numel + MB, timeout_s)
        bare_channel = grpc.insecure_channel(
            f"127.0.0.1:{bare_port}", options=[("grpc.max_receive_message_length", 2 << 20)]
        )

        def ours() -> float:
            started = time.perf_counter()
            vector = source.fetch(OWNER, ROUND)
            elapsed = time.perf_counter() - started
            assert vector.numel() == numel
            return elapsed

        def bare_run() -> float:
            started = time.perf_counter()
            received = drain_bare(bare_channel, timeout_s)
            elapsed = time.perf_counter() - started
            assert received == byte_size
            return elapsed

        ours(), bare_run()  # warm-up: connections, page cache, allocator
        times: dict[str, list[float]] = {"ours": [], "bare": []}
        for rep in range(repeats):
            order = [("ours", ours), ("bare", bare_run)]
            for name, run in order if rep % 2 == 0 else order[::-1]:
                times[name].append(run())
        memory = measure_memory(address, grants[OWNER], numel, timeout_s)
        source.close()
        bare_channel.close()
        bare.stop(None)
        server.stop(None)
    ours_s, bare_s = median(times["ours"]), median(times["bare"])
    return {
        "size_mb": size_mb,
        "payload_bytes": byte_size,
        "repeats": repeats,
        "ours_s": times["ours"],
        "bare_s": times["bare"],
        "ours_median_s": ours_s,
        "bare_median_s": bare_s,
        "ours_mb_per_s": byte_size / MB / ours_s,
        "bare_mb_per_s": byte_size / MB / bare_s,
        "throughput_ratio": bare_s / ours_s,
        "memory": memory,
        "extra_memory_ratio": memory["extra_bytes"] / byte_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,10,100", help="model sizes in MB (comma separated)")
    parser.add_argument("--repeats", type=int, default=7, help="timed fetches per size and side")
    parser.add_argument("--timeout", type=float, default=120.0, help="deadline of one fetch, s")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 and 4 MB, 3 repeats")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(RESULT_PREFIX + json.dumps(child(json.loads(args.child))), flush=True)
        return
    if args.quick:
        args.sizes, args.repeats = "1,4", 3
    # The memory child's deliberate warm-up refusal is expected; keep it off the output.
    logging.getLogger("collabfl.client.peer_server").setLevel(logging.ERROR)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    results = []
    for size in sizes:
        results.append(bench_size(size, args.repeats, args.timeout))
        print(f"  {size} MB done", flush=True)
    rows = [
        [
            f"{r['size_mb']}",
            f"{r['ours_mb_per_s']:.0f}",
            f"{r['bare_mb_per_s']:.0f}",
            f"{r['throughput_ratio']:.2f}",
            f"{r['memory']['extra_bytes'] / MB:.1f}",
            f"{r['extra_memory_ratio']:.2f}",
        ]
        for r in results
    ]
    headers = ["MB", "fetch MB/s", "bare MB/s", "ratio", "extra MB", "extra/model"]
    print()
    print(format_table(headers, rows))
    print("targets: ratio >= 0.5, extra/model <= 1.5")
    settings = {"sizes_mb": sizes, "repeats": args.repeats, "chunk_bytes": CHUNK_BYTES}
    path = write_results(
        "peer_fetch-quick" if args.quick else "peer_fetch", {"sizes": results}, settings
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
