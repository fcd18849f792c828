"""Fuzz target ``native``: raw native-protocol frames against one real node.

Inputs (seeded): random bytes; real driver frames (``_native_wire.driver_frames``, v4 and v5)
pipelined after STARTUP; those frames mutated (bit flips, bytes set, truncation, insertion,
deletion, duplication, header fields and inner lengths overwritten with edge values); and
oversized fields (statements, identifiers, literals and ids far beyond 65,535 bytes, headers
announcing huge bodies). Each input is one connection: send, half-close, read until close.

Invariants (one line each, checked after every input; the probe every ``probe_every`` inputs):

* answer or close within the deadline
* never ServerError 0x0000
* every request frame gets an answer on its stream
* every byte answered is a whole response frame, and every answer decodes with the real driver
* the node process stays alive
* a health probe through the real driver works, and the node logs no unexpected exception
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path

from cassandra.protocol import ExecuteMessage, PrepareMessage, QueryMessage, StartupMessage

from fuzz._core import FuzzInput, Stats, check
from fuzz._native_wire import (
    PREPARED,
    STARTUP_V4,
    check_answers,
    decode_answers,
    driver_frames,
    encode_driver_message,
    exchange,
)
from fuzz._nodes import SingleNode
from fuzz._schema import KEYSPACE, TABLE
from ringflow.cql import prepared_id

INTERESTING_INTS = (
    0,
    1,
    -1,
    2,
    127,
    128,
    255,
    256,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
    2**31 - 1,
    -(2**31),
    2**24,
    16 * 1024 * 1024 + 1,
    256 * 1024 * 1024 + 1,
)


def _set_stream(frame: bytes, stream_id: int) -> bytes:
    return frame[:2] + struct.pack(">h", stream_id) + frame[4:]


def _mutate(frame: bytes, rng: random.Random) -> bytes:
    """One to three random edits of ``frame``."""
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        if not data:
            data += rng.randbytes(rng.randint(1, 16))
        choice = rng.randrange(9)
        position = rng.randrange(len(data))
        if choice == 0:
            data[position] ^= 1 << rng.randrange(8)
        elif choice == 1:
            data[position] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif choice == 2:
            del data[rng.randrange(1, len(data) + 1) :]
        elif choice == 3:
            data[position:position] = rng.randbytes(rng.randint(1, 32))
        elif choice == 4:
            del data[position : position + rng.randint(1, 16)]
        elif choice == 5:
            chunk = data[position : position + rng.randint(1, 32)]
            data[position:position] = chunk * rng.randint(1, 8)
        elif choice == 6 and len(data) >= 9:
            data[rng.randrange(9)] = rng.randrange(256)  # a header field
        elif choice == 7 and len(data) >= 9:
            value = rng.choice(INTERESTING_INTS) & 0xFFFFFFFF
            struct.pack_into(">I", data, 5, value)  # the body length
        elif len(data) >= 13:
            # An inner [short]/[int] length (or any two/four body bytes) set to an edge value.
            offset = rng.randrange(9, len(data) - 3)
            value = rng.choice(INTERESTING_INTS)
            if rng.random() < 0.5:
                struct.pack_into(">H", data, offset, value & 0xFFFF)
            else:
                struct.pack_into(">I", data, offset, value & 0xFFFFFFFF)
    return bytes(data)


def _query_frame(text: str, stream_id: int) -> bytes:
    return encode_driver_message(QueryMessage(text, 1), stream_id, 4)


def _oversized(rng: random.Random) -> bytes:
    """A frame with a field far beyond what a [short]-length field can carry back."""
    size = rng.choice((65_536, 70_000, 100_000, 300_000))
    name = "x" * size
    stream = rng.randint(1, 100)
    choice = rng.randrange(9)
    if choice == 0:
        return _query_frame(
            "SELECT * FROM system.local WHERE key = 0x" + "ab" * (size // 2), stream
        )
    if choice == 1:
        return _query_frame(f'SELECT key AS "{name}" FROM system.local', stream)
    if choice == 2:
        return _query_frame(f'USE "{name}"', stream)
    if choice == 3:
        return _query_frame(f"SELECT * FROM {KEYSPACE}.{name}", stream)
    if choice == 4:
        return encode_driver_message(PrepareMessage(f"SELECT {name} FROM system.local"), stream, 4)
    if choice == 5:
        literal = "'" + "é" * (size // 2) + "'"
        return _query_frame(
            f"INSERT INTO {KEYSPACE}.{TABLE} (k, c_int) VALUES (1, {literal})", stream
        )
    if choice == 6:
        statement = f"SELECT * FROM {KEYSPACE}.{TABLE} WHERE k = ?"
        huge = b"\x01" * size
        return encode_driver_message(
            ExecuteMessage(prepared_id(statement, None), [huge], 1), stream, 4
        )
    if choice == 7:
        options = {"CQL_VERSION": "3.0.0", "DRIVER_NAME": name[:60000], "X": name[:60000]}
        return encode_driver_message(StartupMessage("3.0.0", options), stream, 4)
    # A header announcing a huge body that never comes (the half-close ends it).
    header = bytearray(_query_frame("SELECT now() FROM system.local", stream))
    struct.pack_into(">i", header, 5, rng.choice((16 * 1024 * 1024 + 1, 2**31 - 1, 300_000_000)))
    return bytes(header)


class NativeTarget:
    name = "native"
    probe_every = 500

    def inputs(self, seed: int) -> Iterator[FuzzInput]:
        rng = random.Random(seed)
        frames = {4: driver_frames(4), 5: driver_frames(5)}
        while True:
            yield self._one(rng, frames)

    def _one(self, rng: random.Random, frames: dict[int, list[bytes]]) -> FuzzInput:
        kind = rng.choices(
            ("random", "driver", "mutated", "mutated-raw", "v5", "oversized", "pipelined"),
            weights=(10, 10, 40, 10, 5, 5, 20),
        )[0]
        if kind == "random":
            return FuzzInput(rng.randbytes(rng.randint(1, 300)), kind)
        if kind == "oversized":
            return FuzzInput(STARTUP_V4 + _oversized(rng), kind, messages=2)
        if kind == "v5":
            chosen = rng.sample(frames[5], rng.randint(1, 3))
            return FuzzInput(b"".join(chosen), kind, messages=len(chosen))
        if kind == "mutated-raw":
            return FuzzInput(_mutate(rng.choice(frames[rng.choice((4, 5))]), rng), kind)
        count = 1 if kind != "pipelined" else rng.randint(2, 40)
        body = []
        for index in range(count):
            frame = rng.choice(frames[4][1:])  # everything but OPTIONS... STARTUP comes first
            stream = index + 1 if rng.random() < 0.8 else rng.choice((0, 1, -1, 32767, -32768))
            frame = _set_stream(frame, stream)
            if kind == "mutated" or (kind == "pipelined" and rng.random() < 0.2):
                frame = _mutate(frame, rng)
            body.append(frame)
        return FuzzInput(STARTUP_V4 + b"".join(body), kind, messages=count + 1)

    def environment(self, workdir: Path | None) -> NativeEnvironment:
        return NativeEnvironment(SingleNode(workdir))


class NativeEnvironment:
    def __init__(self, node: SingleNode) -> None:
        self.node = node
        self._prepare()

    def _prepare(self) -> None:
        """Prepare what the corpus EXECUTEs (ids are node-wide), so EXECUTE frames run."""
        self.node.prepare(PREPARED)

    def execute(self, item: FuzzInput, stats: Stats) -> None:
        try:
            result = exchange(self.node.address, self.node.port, item.data)
        except OSError as error:
            self.node.check_alive()
            check(False, "the node accepts connections", f"{type(error).__name__}: {error}")
        stats.closes += int(result.closed)
        answers = decode_answers(result.received)
        stats.answers.update(answer.label for answer in answers)
        check_answers(item.data, result, answers)
        self.node.check_alive()

    def probe(self, stats: Stats) -> None:
        self.node.probe()

    def recover(self) -> None:
        self.node.recover()
        self._prepare()

    def settle(self) -> None:
        pass

    def close(self) -> None:
        self.node.close()
