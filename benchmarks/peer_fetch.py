"""Peer fetch over loopback: throughput against bare gRPC streaming, and peak extra memory.

For each model size a run's ``DiskModelStore`` publishes a random float32 vector and three
servers run in this process: the real ``PeerModelServer`` (grant check, file read from disk,
its digest checked on the way) and two bare gRPC servers that stream the same file bytes
with no protobuf at all, pre-split into 1 MiB messages (the fastest a server-streaming
transfer went here) and into messages of the peer server's own ``CHUNK_BYTES``. Throughput
is the payload size over the median wall time of ``GrpcPeerSource.fetch`` (one call:
manifest on the first chunk, parse, BLAKE3 at the fetcher, copy into the result tensor) and
of draining each bare stream; repetitions alternate which goes first. "fetch" is a fetch of
a file the server has checked already (what every fetcher of a round but the first gets);
"first fetch" forgets that check before each call, so the server hashes the file too.
Target: ratio >= 0.8 against the 1 MiB stream (the ratio against the same-size messages is
reported beside it).
For context, "new tensor" is the rate at which this machine can merely allocate a fresh
tensor of the model's size and copy bytes into it, a floor under any fetch that returns a
new tensor (page faults dominate it in a VM).

Memory: a fresh subprocess (this script with ``--child``) makes one call that transfers
nothing to open the connection, resets its RSS high-water mark (/proc/self/clear_refs), then
fetches the model once; the figure is VmHWM after minus VmRSS before, the result tensor
included (median of a few children). Target: <= 1.5x the model size. "fresh" is the first
fetch of a process that never used torch or a model stream before (one-time costs included:
torch's first operations alone take about 1.2 MB); "warm" first fetches a tiny model (a
second round of 16 values), as a client that trained and fetched before, so the figure is
what one more fetch costs. The same is measured for draining the bare stream after a ping,
which shows what gRPC itself buffers (for both message sizes).

Run: python benchmarks/peer_fetch.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import torch
from _common import format_table, median, write_results

from collabfl.client.model_store import PublishedModels, VerifiedFiles
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_server import CHUNK_BYTES, PeerModelServer
from collabfl.client.peers import PeerUnavailable
from collabfl.kernel.grants import GrantSigner, GrantVerifier, generate_private_key
from collabfl.kernel.tls import ClientTLS

RESULT_PREFIX = "PEER-FETCH-RESULT "
OWNER, ROUND, RUN = 1, 0, "bench"
WARM_ROUND, WARM_NUMEL = 1, 16
MB = 1_000_000
BARE_CHUNK_BYTES = 1 << 20
"""The bare stream's message size: the fastest for gRPC here, whatever the peer server uses."""
BARE_OPTIONS = [("grpc.max_receive_message_length", 2 * BARE_CHUNK_BYTES)]


def bare_server(chunks: list[bytes], host: str = "127.0.0.1") -> tuple[grpc.Server, int]:
    """Raw-bytes RPCs on ``host``: ``Stream`` sends ``chunks`` as they are, ``Ping`` answers
    at once."""

    def stream(request: bytes, context: grpc.ServicerContext):
        yield from chunks

    handler = grpc.method_handlers_generic_handler(
        "bare.Bytes",
        {
            "Stream": grpc.unary_stream_rpc_method_handler(stream),
            "Ping": grpc.unary_unary_rpc_method_handler(lambda request, context: b""),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(f"{host}:0")
    server.start()
    return server, port


def drain_bare(channel: grpc.Channel, timeout_s: float) -> int:
    call = channel.unary_stream("/bare.Bytes/Stream")(b"", timeout=timeout_s)
    return sum(len(message) for message in call)


def proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_extra(warm_up: Callable[[], object], run: Callable[[], object]) -> dict[str, Any]:
    """RSS high-water mark reached by ``run`` above the RSS before it, in bytes."""
    warm_up()
    before = proc_status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    reset = proc_status_kib("VmHWM")
    run()
    after = proc_status_kib("VmHWM")
    return {
        "rss_before_bytes": before * 1024,
        "hwm_after_bytes": after * 1024,
        "hwm_reset_ok": reset <= before + 1024,
        "extra_bytes": (after - before) * 1024,
    }


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One measured transfer (a fetch or a bare stream) in this fresh process."""
    if spec["kind"].startswith("bare"):
        with grpc.insecure_channel(spec["address"], options=BARE_OPTIONS) as channel:
            ping = channel.unary_unary("/bare.Bytes/Ping")
            return peak_extra(
                lambda: ping(b"", timeout=spec["timeout_s"]),
                lambda: drain_bare(channel, spec["timeout_s"]),
            )
    addresses = {OWNER: spec["address"]}
    grants = {OWNER: bytes.fromhex(spec["grant"])}
    timeout_s = spec["timeout_s"]
    tls = client_tls(spec.get("tls"))
    with GrpcPeerSource(
        addresses, grants, spec["numel"], spec["max_bytes"], timeout_s, tls, run=RUN
    ) as source:

        def warm_up() -> None:
            with contextlib.suppress(PeerUnavailable):  # the grant is for ROUND only
                source.fetch(OWNER, WARM_ROUND)
            if spec["kind"] == "fetch_warm":
                warm_grants = {OWNER: bytes.fromhex(spec["warm_grant"])}
                with GrpcPeerSource(
                    addresses, warm_grants, WARM_NUMEL, spec["max_bytes"], timeout_s, tls, run=RUN
                ) as tiny:
                    tiny.fetch(OWNER, WARM_ROUND)

        return peak_extra(warm_up, lambda: source.fetch(OWNER, ROUND))


def client_tls(pems: dict[str, str] | None) -> ClientTLS | None:
    """The fetcher's mutual-TLS credential from a child spec's PEM strings (None: plain)."""
    if pems is None:
        return None
    return ClientTLS(pems["ca"].encode(), pems["cert"].encode(), pems["key"].encode())


def run_child(
    spec: dict[str, Any], wrap: Callable[[list[str]], list[str]] = lambda argv: argv
) -> dict[str, Any]:
    """``child(spec)`` in a fresh process; ``wrap`` may place it elsewhere (a namespace)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    done = subprocess.run(wrap(command), capture_output=True, text=True, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"memory child failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT_PREFIX) :])


def split(payload: bytes, step: int) -> list[bytes]:
    return [payload[at : at + step] for at in range(0, len(payload), step)]


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def fill_new_tensor(numel: int, chunks: list[bytes]) -> torch.Tensor:
    """Allocate a float32 tensor and copy ``chunks`` into it: the floor of returning one."""
    tensor = torch.empty(numel, dtype=torch.float32)
    dest = memoryview(tensor.numpy()).cast("B")
    at = 0
    for chunk in chunks:
        n = min(len(chunk), len(dest) - at)
        dest[at : at + n] = memoryview(chunk)[:n]
        at += n
    return tensor


def bench_size(size_mb: int, repeats: int, memory_repeats: int, timeout_s: float) -> dict[str, Any]:
    numel = size_mb * MB // 4
    max_bytes = 4 * numel + MB
    signer = GrantSigner(generate_private_key())
    with tempfile.TemporaryDirectory(prefix="collabfl-peer-fetch-") as tmp:
        published = PublishedModels(Path(tmp), owner=OWNER)
        store = published.for_publishing(RUN)
        store.publish(OWNER, ROUND, torch.randn(numel))
        store.publish(OWNER, WARM_ROUND, torch.randn(WARM_NUMEL))
        payload = store.path(ROUND).read_bytes()
        byte_size = len(payload)
        chunks = split(payload, BARE_CHUNK_BYTES)
        same_chunks = split(payload, CHUNK_BYTES)
        del payload
        server = PeerModelServer(published, GrantVerifier(signer.public_key_bytes()))
        address = f"127.0.0.1:{server.start()}"
        bare, bare_port = bare_server(chunks)
        bare_address = f"127.0.0.1:{bare_port}"
        bare_same, bare_same_port = bare_server(same_chunks)
        bare_same_address = f"127.0.0.1:{bare_same_port}"
        grant = signer.issue(RUN, 0, OWNER, ROUND, ttl_s=3600)
        source = GrpcPeerSource(
            {OWNER: address}, {OWNER: grant}, numel, max_bytes, timeout_s, run=RUN
        )
        bare_channel = grpc.insecure_channel(bare_address, options=BARE_OPTIONS)
        bare_same_channel = grpc.insecure_channel(bare_same_address, options=BARE_OPTIONS)

        def first_fetch() -> None:
            published.verified = VerifiedFiles()  # as for the round's first fetcher
            source.fetch(OWNER, ROUND)

        runs = {
            "fetch": lambda: source.fetch(OWNER, ROUND),
            "first_fetch": first_fetch,
            "bare": lambda: drain_bare(bare_channel, timeout_s),
            "bare_same_chunk": lambda: drain_bare(bare_same_channel, timeout_s),
            "new_tensor": lambda: fill_new_tensor(numel, chunks),
        }
        for run in runs.values():
            run()  # warm-up: connections, page cache, allocator
        times: dict[str, list[float]] = {name: [] for name in runs}
        for rep in range(repeats):
            order = list(runs.items())
            for name, run in order if rep % 2 == 0 else order[::-1]:
                times[name].append(timed(run))
        child_spec = {"numel": numel, "max_bytes": max_bytes, "timeout_s": timeout_s}
        fetch_spec = {**child_spec, "address": address, "grant": grant.hex()}
        warm_grant = signer.issue(RUN, 0, OWNER, WARM_ROUND, ttl_s=3600).hex()
        specs = {
            "fetch": {**fetch_spec, "kind": "fetch"},
            "fetch_warm": {**fetch_spec, "kind": "fetch_warm", "warm_grant": warm_grant},
            "bare": {**child_spec, "kind": "bare", "address": bare_address},
            "bare_same_chunk": {
                **child_spec,
                "kind": "bare_same_chunk",
                "address": bare_same_address,
            },
        }
        memory = {}
        for kind, spec in specs.items():
            reports = [run_child(spec) for _ in range(memory_repeats)]
            extras = [report["extra_bytes"] for report in reports]
            memory[kind] = {"extra_bytes": median(extras), "children": reports}
        source.close()
        bare_channel.close()
        bare_same_channel.close()
        bare.stop(None)
        bare_same.stop(None)
        server.stop(None)
    rates = {name: byte_size / MB / median(values) for name, values in times.items()}
    return {
        "size_mb": size_mb,
        "payload_bytes": byte_size,
        "times_s": times,
        "mb_per_s": rates,
        "throughput_ratio": rates["fetch"] / rates["bare"],
        "throughput_ratio_first_fetch": rates["first_fetch"] / rates["bare"],
        "throughput_ratio_same_chunk": rates["fetch"] / rates["bare_same_chunk"],
        "memory": memory,
        "extra_memory_ratio": memory["fetch"]["extra_bytes"] / byte_size,
        "extra_memory_ratio_warm": memory["fetch_warm"]["extra_bytes"] / byte_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,10,100", help="model sizes in MB (comma separated)")
    parser.add_argument("--repeats", type=int, default=7, help="timed transfers per size and kind")
    parser.add_argument(
        "--memory-repeats", type=int, default=3, help="fresh memory children per size and kind"
    )
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
    load_before = os.getloadavg()
    results = []
    for size in sizes:
        results.append(bench_size(size, args.repeats, args.memory_repeats, args.timeout))
        print(f"  {size} MB done", flush=True)
    rows = []
    for r in results:
        fetch_extra = r["memory"]["fetch"]["extra_bytes"]
        warm_extra = r["memory"]["fetch_warm"]["extra_bytes"]
        bare_extra = r["memory"]["bare"]["extra_bytes"]
        bare_same_extra = r["memory"]["bare_same_chunk"]["extra_bytes"]
        rows.append(
            [
                f"{r['size_mb']}",
                f"{r['mb_per_s']['fetch']:.0f}",
                f"{r['mb_per_s']['bare']:.0f}",
                f"{r['mb_per_s']['bare_same_chunk']:.0f}",
                f"{r['throughput_ratio']:.2f}",
                f"{r['throughput_ratio_first_fetch']:.2f}",
                f"{r['throughput_ratio_same_chunk']:.2f}",
                f"{r['mb_per_s']['new_tensor']:.0f}",
                f"{fetch_extra / MB:.1f}",
                f"{warm_extra / MB:.1f}",
                f"{bare_extra / MB:.1f}",
                f"{bare_same_extra / MB:.1f}",
                f"{r['extra_memory_ratio']:.2f}",
                f"{r['extra_memory_ratio_warm']:.2f}",
            ]
        )
    same = f"{CHUNK_BYTES // 1024}K"
    headers = ["MB", "fetch MB/s", "bare 1M MB/s", f"bare {same} MB/s", "ratio 1M", "first 1M"]
    headers += [f"ratio {same}", "new tensor MB/s", "extra MB fresh", "extra MB warm"]
    headers += ["bare 1M extra MB", f"bare {same} extra MB"]
    headers += ["extra/model fresh", "extra/model warm"]
    print()
    print(format_table(headers, rows))
    print("targets: ratio >= 0.8, fetch extra/model <= 1.5")
    settings = {
        "sizes_mb": sizes,
        "repeats": args.repeats,
        "memory_repeats": args.memory_repeats,
        "chunk_bytes": CHUNK_BYTES,
        "bare_chunk_bytes": BARE_CHUNK_BYTES,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    name = "peer_fetch-quick" if args.quick else "peer_fetch"
    path = write_results(name, {"sizes": results}, settings)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
