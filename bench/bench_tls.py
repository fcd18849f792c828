"""TLS on the native port against plaintext, side by side (issue 18): a script.

Run with the project venv: ``.venv/bin/python bench/bench_tls.py [--quick]``.

One real ``ringflow node start`` subprocess on a free loopback address with
``client_encryption_options`` ``enabled=true,optional=true``: the same port serves TLS and
plaintext (the first byte sniffed), so both are measured against the same node in the same
run. Certificates: a CA and a node certificate made by ``ringflow.runtime`` (EC P-256).

1. Connection set-up: ``--connections`` sequential connections each way, from this process,
   with ringflow's own codec: TCP connect (+ TLS handshake, full, no session resumption) +
   STARTUP -> READY; p50 and p99 per mode, the ratio of the TLS p50 to the plaintext p50.
2. Request throughput: the real Python driver (one session per mode, the same settings),
   ``--requests`` ``INSERT`` statements with ``--concurrency`` in flight
   (``execute_concurrent``), rounds alternating plaintext and TLS (``--rounds`` each); the
   median rate per mode and the ratio plaintext/TLS (target: TLS costs at most 1.3x).

A measurement, not a test: figures go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.policies import RoundRobinPolicy

from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from ringflow.cql import FrameDecoder, Ready, Startup, decode_message, encode_message
from ringflow.runtime import client_context, issue_certificate, make_ca, write_pair

STARTUP = encode_message(Startup({"CQL_VERSION": "3.4.5"}), 0)
TIMEOUT_S = 30.0


def connect_once(address: str, port: int, context: ssl.SSLContext | None) -> float:
    """Seconds from connect to READY on a fresh connection."""
    started = time.perf_counter()
    raw = socket.create_connection((address, port), timeout=TIMEOUT_S)
    sock: socket.socket = raw
    try:
        if context is not None:
            sock = context.wrap_socket(raw, server_hostname=address)
        sock.sendall(STARTUP)
        decoder = FrameDecoder(expected_version=None)
        while (frame := decoder.next_frame()) is None:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("closed before READY")
            decoder.feed(data)
        assert decode_message(frame).message == Ready()
        return time.perf_counter() - started
    finally:
        sock.close()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def setup_times(node: NodeProcess, context: ssl.SSLContext, count: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"plain": [], "tls": []}
    for _ in range(count):  # interleaved, so load drifts hit both alike
        times["plain"].append(connect_once(node.address, node.port, None))
        times["tls"].append(connect_once(node.address, node.port, context))
    return times


def session(node: NodeProcess, context: ssl.SSLContext | None) -> tuple[Cluster, Session]:
    cluster = Cluster(
        [node.address],
        port=node.port,
        protocol_version=4,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(load_balancing_policy=RoundRobinPolicy())
        },
        connect_timeout=10,
        ssl_context=context,
    )
    return cluster, cluster.connect()


def rate(target: Session, requests: int, concurrency: int, offset: int) -> float:
    statement = target.prepare("INSERT INTO bench_tls.t (k, v) VALUES (?, ?)")
    values = [(offset + i, "x" * 100) for i in range(requests)]
    started = time.perf_counter()
    results = execute_concurrent_with_args(
        target, statement, values, concurrency=concurrency, raise_on_first_error=True
    )
    elapsed = time.perf_counter() - started
    assert all(ok for ok, _ in results)
    return requests / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.connections, arguments.requests, arguments.rounds = 40, 1000, 2
    base = Path(tempfile.mkdtemp(prefix="ringflow-bench-tls-"))
    address = random_loopback_address()
    ca = make_ca("bench CA")
    ca_file, _ = write_pair(base, "ca", ca)
    certificate, key = write_pair(
        base, "node", issue_certificate(ca, "node", ip_addresses=[address])
    )
    tls = f"enabled=true,optional=true,certificate={certificate},keyfile={key}"
    node = NodeProcess(base / "node", address, "--client-encryption-options", tls).start()
    context = client_context(ca_file)
    try:
        times = setup_times(node, context, arguments.connections)
        p50 = {mode: percentile(values, 0.5) * 1000 for mode, values in times.items()}
        p99 = {mode: percentile(values, 0.99) * 1000 for mode, values in times.items()}
        print(f"connection set-up ({arguments.connections} each, TCP + [TLS] + STARTUP/READY):")
        for mode in ("plain", "tls"):
            print(f"  {mode:<5} p50 {p50[mode]:.2f} ms  p99 {p99[mode]:.2f} ms")
        print(f"  TLS/plain p50 ratio {p50['tls'] / p50['plain']:.2f}x")

        drivers = {mode: session(node, ctx) for mode, ctx in (("plain", None), ("tls", context))}
        first = drivers["plain"][1]
        first.execute(
            "CREATE KEYSPACE IF NOT EXISTS bench_tls WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        first.execute("CREATE TABLE IF NOT EXISTS bench_tls.t (k int PRIMARY KEY, v text)")
        rates: dict[str, list[float]] = {"plain": [], "tls": []}
        offset = 0
        for mode in ("plain", "tls"):  # warm-up: prepare, pools, JIT-free but caches warm
            rate(drivers[mode][1], 200, arguments.concurrency, offset)
            offset += 200
        for _ in range(arguments.rounds):
            for mode in ("plain", "tls"):
                rates[mode].append(
                    rate(drivers[mode][1], arguments.requests, arguments.concurrency, offset)
                )
                offset += arguments.requests
        median = {mode: statistics.median(values) for mode, values in rates.items()}
        print(
            f"throughput ({arguments.requests} INSERTs x {arguments.rounds} rounds, "
            f"{arguments.concurrency} in flight):"
        )
        for mode in ("plain", "tls"):
            runs = ", ".join(f"{value:.0f}" for value in rates[mode])
            print(f"  {mode:<5} median {median[mode]:.0f} req/s  (rounds: {runs})")
        cost = median["plain"] / median["tls"]
        print(
            f"  TLS cost {cost:.2f}x (target at most 1.3x): {'met' if cost <= 1.3 else 'NOT met'}"
        )
        for cluster, _ in drivers.values():
            cluster.shutdown()
    finally:
        node.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
