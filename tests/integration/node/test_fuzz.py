"""Garbage on the wire: the node answers with ERROR frames or closes, never crashes or hangs.

reliability-and-style.md §A5.3: the driver is too well-behaved to exercise the server, so raw
frames go over a socket: random bytes, valid requests mutated (bit flips, truncation, junk
appended, header fields overwritten), absurd lengths, and many frames pipelined. Each case
sends its bytes, half-closes, and reads until the server closes, with a deadline: every byte
received must parse as response frames, and the connection must end (EOF makes the server
close even a half-received frame). Afterwards the process is alive and serves a real driver.
Seeded, so a failure replays.
"""

from __future__ import annotations

import random
import socket
import struct
import time

from cassandra.cluster import Cluster

from ringflow.cli._demo_cluster import NodeProcess
from ringflow.cql import (
    Batch,
    BatchStatement,
    BatchType,
    Consistency,
    Execute,
    FrameDecoder,
    Opcode,
    Options,
    Prepare,
    Query,
    QueryParameters,
    Register,
    Startup,
    decode_message,
    encode_message,
)
from ringflow.cql import EventType as CqlEventType
from tests.integration.node.conftest import make_cluster

SEED = 20240601
CASES = 300
CASE_TIMEOUT_S = 10.0
STARTUP = encode_message(Startup({"CQL_VERSION": "3.4.5"}), 0)


def _requests() -> list[bytes]:
    parameters = QueryParameters(Consistency.ONE, page_size=10)
    messages = [
        Options(),
        Startup({"CQL_VERSION": "3.4.5"}),
        Register((CqlEventType.SCHEMA_CHANGE,)),
        Query("SELECT * FROM system.local", parameters),
        Query("SELECT keyspace_name FROM system_schema.keyspaces", parameters),
        Prepare("SELECT * FROM system.local WHERE key = ?"),
        Execute(b"\x01" * 16, QueryParameters(Consistency.ONE, (b"local",))),
        Batch(
            BatchType.LOGGED,
            (BatchStatement("INSERT INTO nowhere.t (k) VALUES (1)", ()),),
            Consistency.ONE,
        ),
    ]
    return [encode_message(message, index + 1) for index, message in enumerate(messages)]


def _mutate(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    choice = rng.randrange(6)
    if choice == 0:
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(data))
            data[position] ^= 1 << rng.randrange(8)
    elif choice == 1:
        del data[rng.randrange(1, len(data)) :]
    elif choice == 2:
        data += rng.randbytes(rng.randint(1, 64))
    elif choice == 3:
        data[rng.randrange(min(9, len(data)))] = rng.randrange(256)
    elif choice == 4:
        struct.pack_into(">i", data, 5, rng.choice([-1, 2**31 - 1, len(data), 0, 10**9]))
    else:
        body_start = 9 + rng.randrange(max(1, len(data) - 9))
        data[body_start:] = rng.randbytes(len(data) - body_start)
    return bytes(data)


def _case(rng: random.Random, requests: list[bytes]) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return rng.randbytes(rng.randint(1, 300))
    if kind == 1:
        return _mutate(rng.choice(requests), rng)
    if kind == 2:
        return STARTUP + _mutate(rng.choice(requests), rng)
    return STARTUP + b"".join(rng.choice(requests) for _ in range(rng.randint(2, 20)))


def _exchange(address: str, port: int, data: bytes) -> bytes:
    """Send ``data``, half-close, and read until the server closes (bounded)."""
    deadline = time.monotonic() + CASE_TIMEOUT_S
    received = bytearray()
    with socket.create_connection((address, port), timeout=CASE_TIMEOUT_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may close first (a fatal error on the first bytes)
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                raise AssertionError(
                    f"server neither answered nor closed for {data!r:.200}"
                ) from None
            if not chunk:
                break
            received += chunk
    return bytes(received)


def _check_responses(received: bytes, sent: bytes) -> list[int]:
    """Split ``received`` into whole response frames (v1/v2 ones, answering a legacy header,
    have an 8-byte header) and decode the v4 ones; their opcodes."""
    opcodes = []
    position = 0
    while position < len(received):
        first = received[position]
        assert first & 0x80, f"non-response frame for {sent!r:.200}"
        header_size = 8 if first & 0x7F < 3 else 9
        header = received[position : position + header_size]
        assert len(header) == header_size, f"truncated header for {sent!r:.200}"
        length = int.from_bytes(header[-4:], "big", signed=True)
        frame = received[position : position + header_size + length]
        assert length >= 0 and len(frame) == header_size + length, f"cut frame: {sent!r:.200}"
        if first & 0x7F == 4 and not header[1] & 0x01:  # compressed bodies are not decoded
            decoder = FrameDecoder(expected_version=None)
            decoder.feed(frame)
            decoded = decoder.next_frame()
            assert decoded is not None
            decode_message(decoded)
        opcodes.append(header[-5])
        position += len(frame)
    return opcodes


def test_garbage_gets_errors_or_a_close_and_the_node_keeps_serving(node: NodeProcess) -> None:
    rng = random.Random(SEED)
    requests = _requests()
    errors = 0
    for _ in range(CASES):
        data = _case(rng, requests)
        opcodes = _check_responses(_exchange(node.address, node.port, data), data)
        errors += opcodes.count(Opcode.ERROR)
        assert node.alive(), f"the node died on {data!r:.200}: {node.log()}"
    assert errors > CASES // 3, "most garbage must be answered with ERROR frames"
    cluster: Cluster = make_cluster(node)
    try:
        session = cluster.connect()
        assert session.execute("SELECT release_version FROM system.local").one()[0] == "3.0.8"
    finally:
        cluster.shutdown()
    assert "Traceback" not in node.log(), node.log()


def test_unsupported_protocol_version_is_answered_in_that_version(node: NodeProcess) -> None:
    frame = bytearray(encode_message(Options(), 5))
    frame[0] = 0x05
    received = _exchange(node.address, node.port, bytes(frame))
    assert received[0] == 0x85, "the error is framed in the client's version"
    assert received[4] == Opcode.ERROR
    assert b"Invalid or unsupported protocol version (5)" in received
