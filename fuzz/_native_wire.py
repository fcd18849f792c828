"""Native-protocol bytes for the fuzzers: real driver frames, one exchange, its answers checked.

* ``driver_frames(version)``: request frames encoded by the real Python driver's own message
  classes (``cassandra.protocol``: STARTUP, OPTIONS, QUERY, PREPARE, EXECUTE, BATCH, REGISTER)
  at protocol v4 and v5, so the corpus is what a real client sends, byte for byte.
* ``exchange``: one connection: send, half-close, read until the server closes, bounded by a
  deadline (the half-close makes the server finish what it received, answer it, and close).
* ``expected_answers``: the frames the server must answer, split from the sent bytes by the
  server's own decoding rules (``ringflow.cql.FrameDecoder``, native_protocol_v4.spec §2):
  every frame with a known boundary gets exactly one answer on its stream; after a header
  error (version not 4, negative or huge length) only that error is owed; frames after one
  announcing over ``FATAL_FRAME_BYTES`` are optional (a server may refuse it and close), and
  so is an answer to a frame cut short by the half-close.
* ``decode_answers``: every byte received must split into response frames that the real
  driver decodes (``ProtocolHandler.decode_message``); their class ("RESULT", "ERROR 0x2200
  InvalidRequest", ...) is counted.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from dataclasses import dataclass

from cassandra.protocol import (
    BatchMessage,
    ErrorMessage,
    ExecuteMessage,
    OptionsMessage,
    PrepareMessage,
    ProtocolHandler,
    QueryMessage,
    RegisterMessage,
    StartupMessage,
)
from cassandra.protocol_features import ProtocolFeatures
from cassandra.query import BatchType

from fuzz._core import check
from fuzz._schema import KEYSPACE, TABLE, WIDE
from ringflow.cql import FrameDecoder, FrameError, decompress_lz4, prepared_id

EXCHANGE_DEADLINE_S = 10.0
"""Answer or close within this long (statements on a loaded 2-core machine included)."""
FATAL_FRAME_BYTES = 16 * 1024 * 1024
"""A frame announcing more may be refused with an error and a close (Cassandra's default
``native_transport_max_frame_size``): what follows it is not owed an answer."""
_LENIENT_ANSWERS = 64
_EVENT = 0x0C
_ERROR = 0x00
_COMPRESSION = 0x01
_ONE = 1
_QUORUM = 4

INSERT = f"INSERT INTO {KEYSPACE}.{TABLE} (k, c_text, c_int, c_list) VALUES (?, ?, ?, ?)"
SELECT = f"SELECT * FROM {KEYSPACE}.{TABLE} WHERE k = ?"
WIDE_SELECT = f"SELECT p, c1, s, v FROM {KEYSPACE}.{WIDE} WHERE p = ? AND c1 > ?"
PREPARED = (INSERT, SELECT, WIDE_SELECT)
CONTROL_QUERIES = (
    "SELECT * FROM system.local WHERE key='local'",
    "SELECT * FROM system.peers",
    "SELECT * FROM system_schema.keyspaces",
    "SELECT * FROM system_schema.tables",
    "SELECT * FROM system_schema.columns",
    "SELECT * FROM system_schema.types",
    f"SELECT k, c_text, c_map FROM {KEYSPACE}.{TABLE} LIMIT 10",
    f"INSERT INTO {KEYSPACE}.{TABLE} (k, c_text) VALUES (1, 'x') USING TTL 100",
    f"UPDATE {KEYSPACE}.{WIDE} SET v = 'a', s = 1 WHERE p = 'p' AND c1 = 1 AND c2 = now()",
    f"DELETE FROM {KEYSPACE}.{TABLE} WHERE k = 2",
)


def _int(value: int) -> bytes:
    return value.to_bytes(4, "big", signed=True)


def driver_messages(version: int) -> list[object]:
    """The messages a real driver session sends (handshake, control queries, statements)."""
    insert_values = [_int(7), b"seven", _int(-7), _int(1) + _int(4) + _int(1)]
    execute_options = {"result_metadata_id": b"\x00" * 16} if version >= 5 else {}
    return [
        OptionsMessage(),
        StartupMessage("3.0.0", {}),
        StartupMessage("3.0.0", {"DRIVER_NAME": "fuzz", "COMPRESSION": "lz4"}),
        RegisterMessage(["TOPOLOGY_CHANGE", "STATUS_CHANGE", "SCHEMA_CHANGE"]),
        *(QueryMessage(q, _ONE, fetch_size=5000) for q in CONTROL_QUERIES),
        QueryMessage(f"SELECT * FROM {KEYSPACE}.{TABLE}", _QUORUM, fetch_size=2),
        PrepareMessage(INSERT),
        PrepareMessage(SELECT),
        PrepareMessage(WIDE_SELECT),
        ExecuteMessage(prepared_id(INSERT, None), insert_values, _ONE, **execute_options),
        ExecuteMessage(prepared_id(SELECT, None), [_int(7)], _ONE, **execute_options),
        ExecuteMessage(prepared_id(WIDE_SELECT, None), [b"p", _int(0)], _ONE, **execute_options),
        BatchMessage(
            BatchType.LOGGED,
            [
                (False, f"INSERT INTO {KEYSPACE}.{TABLE} (k, c_int) VALUES (?, ?)", [_int(3)] * 2),
                (True, prepared_id(INSERT, None), insert_values),
            ],
            _ONE,
        ),
        BatchMessage(
            BatchType.UNLOGGED,
            [(False, f"DELETE FROM {KEYSPACE}.{TABLE} WHERE k = 3", [])],
            _QUORUM,
        ),
    ]


def encode_driver_message(message: object, stream_id: int, version: int) -> bytes:
    frame: bytes = ProtocolHandler.encode_message(message, stream_id, version, None, False, None)
    return frame


def driver_frames(version: int) -> list[bytes]:
    """Each message of ``driver_messages`` as the driver frames it (stream ids 1, 2, ...)."""
    return [
        encode_driver_message(message, index + 1, version)
        for index, message in enumerate(driver_messages(version))
    ]


STARTUP_V4 = encode_driver_message(StartupMessage("3.0.0", {}), 0, 4)


# -- one exchange -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Exchange:
    received: bytes
    closed: bool
    """The server closed (EOF or reset) before the deadline."""


def exchange(
    address: str, port: int, data: bytes, deadline_s: float = EXCHANGE_DEADLINE_S
) -> Exchange:
    """Send ``data``, half-close, read until the server closes or ``deadline_s`` passes."""
    deadline = time.monotonic() + deadline_s
    received = bytearray()
    with socket.create_connection((address, port), timeout=deadline_s) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may close first (a fatal error on the first bytes)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Exchange(bytes(received), False)
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                return Exchange(bytes(received), True)
            except TimeoutError:
                return Exchange(bytes(received), False)
            if not chunk:
                return Exchange(bytes(received), True)
            received += chunk


# -- what is owed -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owed:
    required: Counter[int]
    """Stream ids that must be answered (with multiplicity)."""
    optional: int
    """How many more answers may come (frames after one the server may refuse and close on)."""


def expected_answers(sent: bytes) -> Owed:
    """The answers the server owes for ``sent`` (module docstring)."""
    decoder = FrameDecoder(expected_version=4)
    decoder.feed(sent)
    required: Counter[int] = Counter()
    optional = 0
    lenient = False  # after a frame the server may refuse and close on, nothing more is owed
    consumed = 0
    while True:
        try:
            frame = decoder.next_frame()
        except FrameError as error:
            if lenient:
                optional += 1
            else:
                required[error.stream_id] += 1
            # A skipped body, or no frame boundary left: what follows may or may not be read.
            optional += _LENIENT_ANSWERS
            break
        if frame is None:
            # A cut frame at EOF: a server may answer it (e.g. refuse its announced size).
            optional += 1 if consumed < len(sent) else 0
            break
        consumed += frame.header.size + frame.header.body_length
        if lenient:
            optional += 1
        else:
            required[frame.header.stream_id] += 1
        lenient = lenient or frame.header.body_length > FATAL_FRAME_BYTES
    return Owed(required, optional)


# -- what came back ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    stream_id: int
    opcode: int
    label: str
    error_code: int | None


def _split(received: bytes) -> list[tuple[int, int, int, int, bytes]]:
    """(version, flags, stream, opcode, body) of each response frame; fails the invariant
    "every byte answered is a whole response frame" otherwise."""
    frames = []
    position = 0
    name = "every byte answered is a whole response frame"
    while position < len(received):
        first = received[position]
        check(bool(first & 0x80), name, f"byte {first:#x} at {position} is not a response")
        version = first & 0x7F
        legacy = version < 3
        size = 8 if legacy else 9
        header = received[position : position + size]
        check(len(header) == size, name, f"truncated header at {position}")
        flags = header[1]
        stream = int.from_bytes(header[2:3] if legacy else header[2:4], "big", signed=True)
        opcode = header[size - 5]
        length = int.from_bytes(header[size - 4 :], "big", signed=True)
        body = received[position + size : position + size + length]
        check(length >= 0 and len(body) == length, name, f"cut frame at {position}")
        frames.append((version, flags, stream, opcode, body))
        position += size + length
    return frames


def decode_answers(received: bytes) -> list[Answer]:
    """Every response in ``received``, decoded by the real driver (invariant: it can)."""
    answers = []
    for version, flags, stream, opcode, body in _split(received):
        if flags & _COMPRESSION and body:
            body = decompress_lz4(body, 1 << 30)
        try:
            message = ProtocolHandler.decode_message(
                max(version, 3),
                ProtocolFeatures(),
                {},
                stream,
                flags & ~_COMPRESSION,
                opcode,
                body,
                None,
                None,
            )
        except Exception as error:
            check(
                False,
                "every answer decodes with the real driver",
                f"{type(error).__name__}: {error}",
            )
        code = message.code if isinstance(message, ErrorMessage) else None
        label = type(message).__name__.removesuffix("Message").removeprefix("Fast")
        if code is not None:
            label = f"ERROR {code:#06x} {label}"
        answers.append(Answer(stream, opcode, label, code))
    return answers


def check_answers(sent: bytes, result: Exchange, answers: list[Answer]) -> None:
    """The per-exchange invariants of the native and CQL fuzzers."""
    # The client half-closed: the server owes its answers, then a close.
    check(result.closed, "answer or close within the deadline", f"{sent[:300]!r}")
    server_errors = [a for a in answers if a.error_code == 0]
    check(not server_errors, "never ServerError 0x0000", f"{server_errors[:3]} for {sent[:300]!r}")
    owed = expected_answers(sent)
    got = Counter(a.stream_id for a in answers if a.opcode != _EVENT)
    missing = owed.required - got
    check(
        not missing,
        "every request frame gets an answer on its stream",
        f"streams {dict(missing)} unanswered ({len(sent)} bytes sent: {sent[:300]!r})",
    )
    extra = sum((got - owed.required).values())
    check(
        extra <= owed.optional,
        "no answer without a request",
        f"{extra} extra answers for {sent[:300]!r}",
    )


# -- a persistent connection (the CQL fuzzer) -------------------------------------------------


def query_frame(statement: bytes, stream_id: int, *, prepare: bool = False) -> bytes:
    """A v4 QUERY (consistency ONE, no flags) or PREPARE of raw statement bytes, framed by hand
    so invalid UTF-8 goes out as it is."""
    body = len(statement).to_bytes(4, "big") + statement
    if not prepare:
        body += b"\x00\x01\x00"
    opcode = 0x09 if prepare else 0x07
    return (
        bytes([4, 0])
        + stream_id.to_bytes(2, "big")
        + bytes([opcode])
        + len(body).to_bytes(4, "big")
        + body
    )


class StatementConnection:
    """One connection after STARTUP; ``request`` sends a frame and waits for its answer."""

    def __init__(self, address: str, port: int, deadline_s: float = EXCHANGE_DEADLINE_S) -> None:
        self.deadline_s = deadline_s
        self.sock = socket.create_connection((address, port), timeout=deadline_s)
        self.buffer = bytearray()
        answers, closed = self.request(STARTUP_V4, 0)
        check(not closed and answers[-1].label == "Ready", "STARTUP gets READY", str(answers))

    def request(self, frame: bytes, stream_id: int) -> tuple[list[Answer], bool]:
        """Every response read until the one on ``stream_id``; ``closed`` if the server closed
        first. An answer that does not come within the deadline fails the invariant."""
        self.sock.sendall(frame)
        deadline = time.monotonic() + self.deadline_s
        answers: list[Answer] = []
        while True:
            complete = _complete_prefix(self.buffer)
            if complete:
                for answer in decode_answers(bytes(self.buffer[:complete])):
                    answers.append(answer)
                del self.buffer[:complete]
                if any(a.stream_id == stream_id and a.opcode != _EVENT for a in answers):
                    return answers, False
            remaining = deadline - time.monotonic()
            check(remaining > 0, "answer or close within the deadline", f"{frame[:300]!r}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            except TimeoutError:
                continue
            if not chunk:
                return answers, True
            self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


def _complete_prefix(buffer: bytearray) -> int:
    """Bytes of ``buffer`` that form whole v3+ response frames."""
    position = 0
    while len(buffer) - position >= 9:
        length = int.from_bytes(buffer[position + 5 : position + 9], "big", signed=True)
        if length < 0 or len(buffer) - position - 9 < length:
            break
        position += 9 + length
    return position
