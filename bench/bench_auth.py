"""What password authentication and permission checks cost (issue 18 part 1): a script.

Run with the project venv: ``.venv/bin/python bench/bench_auth.py [--quick]``.

Two real ``ringflow node start`` processes side by side, in one run: one with the defaults (no
auth), one with ``--authenticator PasswordAuthenticator --authorizer CassandraAuthorizer``
(default roles validity 2000 ms). On each:

1. **connection set-up**: ``--connections`` times, a raw socket does STARTUP (then, with auth,
   AUTH_RESPONSE for a non-superuser role) until READY / AUTH_SUCCESS; timed one after the
   other (bcrypt at Cassandra's cost 10 is the expected cost);
2. **request throughput**: the real Python driver logged in as that role, ``SELECT`` of one
   row by key of a table the role may read, ``--requests`` of them, 32 in flight
   (``execute_concurrent_with_args``): requests per second, and the node process's CPU time.

Printed: the medians and p99 of the set-up, the requests per second, and the ratios auth /
no-auth for both. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.policies import RoundRobinPolicy

from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from ringflow.cql import (
    Authenticate,
    AuthResponse,
    AuthSuccess,
    FrameDecoder,
    Ready,
    Startup,
    decode_message,
    encode_message,
    encode_plain_token,
)

STARTUP = encode_message(Startup({"CQL_VERSION": "3.4.5"}), 0)
AUTH = ("--authenticator", "PasswordAuthenticator", "--authorizer", "CassandraAuthorizer")
USER, PASSWORD = "bench", "bench-password"


def _reply(sock: socket.socket, decoder: FrameDecoder) -> object:
    while True:
        frame = decoder.next_frame()
        if frame is not None:
            return decode_message(frame).message
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed by the node")
        decoder.feed(data)


def connect_once(node: NodeProcess, auth: bool) -> float:
    """Seconds from connect() to READY / AUTH_SUCCESS."""
    start = time.perf_counter()
    with socket.create_connection((node.address, node.port), timeout=30) as sock:
        decoder = FrameDecoder(expected_version=None)
        sock.sendall(STARTUP)
        answer = _reply(sock, decoder)
        if auth:
            assert isinstance(answer, Authenticate), answer
            sock.sendall(encode_message(AuthResponse(encode_plain_token(USER, PASSWORD)), 1))
            answer = _reply(sock, decoder)
            assert answer == AuthSuccess(None), answer
        else:
            assert answer == Ready(), answer
    return time.perf_counter() - start


def session(node: NodeProcess, user: str | None, password: str | None) -> tuple[Cluster, Session]:
    provider = None if user is None else PlainTextAuthProvider(user, password)
    cluster = Cluster(
        [node.address],
        port=node.port,
        protocol_version=4,
        auth_provider=provider,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(load_balancing_policy=RoundRobinPolicy())
        },
    )
    return cluster, cluster.connect()


def prepare(node: NodeProcess, auth: bool) -> None:
    admin_cluster, admin = session(node, "cassandra" if auth else None, "cassandra")
    admin.execute(
        "CREATE KEYSPACE IF NOT EXISTS b WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    admin.execute("CREATE TABLE IF NOT EXISTS b.t (k int PRIMARY KEY, v text)")
    insert = admin.prepare("INSERT INTO b.t (k, v) VALUES (?, ?)")
    execute_concurrent_with_args(admin, insert, [(k, "x" * 32) for k in range(1000)])
    if auth:
        admin.execute(
            f"CREATE ROLE IF NOT EXISTS {USER} WITH PASSWORD = '{PASSWORD}' AND LOGIN = true"
        )
        admin.execute(f"GRANT SELECT ON KEYSPACE b TO {USER}")
    admin_cluster.shutdown()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(node: NodeProcess, auth: bool, requests: int) -> tuple[float, float]:
    """(requests per second, node CPU ms per 1000 requests)."""
    cluster, client = session(node, USER if auth else None, PASSWORD)
    select = client.prepare("SELECT v FROM b.t WHERE k = ?")
    keys = [(k % 1000,) for k in range(requests)]
    execute_concurrent_with_args(client, select, keys[:200], concurrency=32)  # warm up
    assert node.process is not None
    cpu_before, start = cpu_s(node.process.pid), time.perf_counter()
    results = execute_concurrent_with_args(client, select, keys, concurrency=32)
    wall, cpu = time.perf_counter() - start, cpu_s(node.process.pid) - cpu_before
    assert all(ok for ok, _ in results)
    cluster.shutdown()
    return requests / wall, cpu * 1e6 / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--requests", type=int, default=20_000)
    arguments = parser.parse_args()
    connections = 20 if arguments.quick else arguments.connections
    requests = 2_000 if arguments.quick else arguments.requests
    base = Path(tempfile.mkdtemp(prefix="bench-auth-"))
    plain = NodeProcess(base / "plain", random_loopback_address()).start()
    secured = NodeProcess(base / "auth", random_loopback_address(), *AUTH).start()
    try:
        prepare(plain, False)
        prepare(secured, True)
        time.sleep(2.5)  # past the roles validity: the first request pays a cache load
        rows = {}
        for name, node, auth in (("no auth", plain, False), ("auth", secured, True)):
            times = sorted(connect_once(node, auth) for _ in range(connections))
            rate, cpu_us = throughput(node, auth, requests)
            p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
            rows[name] = (statistics.median(times) * 1e3, p99 * 1e3, rate, cpu_us)
            print(
                f"{name:8} set-up median {rows[name][0]:7.2f} ms p99 {rows[name][1]:7.2f} ms | "
                f"{rate:8.0f} requests/s, node CPU {cpu_us:6.1f} us/request",
                flush=True,
            )
        a, n = rows["auth"], rows["no auth"]
        print(
            f"ratios auth/no-auth: set-up median {a[0] / n[0]:.1f}x, throughput "
            f"{a[2] / n[2]:.2f}x, node CPU per request {a[3] / n[3]:.2f}x"
        )
    finally:
        plain.kill()
        secured.kill()


if __name__ == "__main__":
    main()
