"""Payloads of the data verbs between cluster nodes: writes, reads, hints and schema pulls.

Owns the bytes inside an ``Envelope`` whose verb is not a gossip verb (the envelope itself is
``ringflow.cluster._messages``). msgpack arrays, decoded defensively: anything malformed raises
``InternodeProtocolError`` (a peer's fault), never a bare ``KeyError``/``TypeError``.

* MUTATION_REQ / HINT_REQ: ``[[mutation bytes...], [[index, stream id, cdc$time low bits]...]]``
  (a ``WriteUnit``: base mutations and their CDC captures travel together, so a replica writes
  both or neither; seed 000 "Vnode-colocation").
* READ_REQ: ``[keyspace, table, [partition key components], "data" | "digest"]``, plus, for a
  read of a clustering slice, ``[[start prefix], start inclusive, [end prefix], end inclusive]``
  (the replica answers with that slice of the partition, its static row and all its tombstones;
  without it, the whole partition), plus, when the coordinator names the columns it reads (its
  table's static and regular columns), that slice or nil and ``[column...]``: the replica
  answers with the cells of those columns only. READ_RSP: ``[kind, mutation bytes | digest |
  nil]``, plus ``[column...]`` when the replica does not know some of the columns asked for
  (a schema change that has not reached it, or has reached it and not the coordinator yet).
* SCHEMA_PUSH_REQ / SCHEMA_PULL_RSP: ``[mutation bytes...]`` (``system_schema`` partitions).
* FAILURE_RSP: ``[verb, reason]``: the verb of the request that failed, and why (at most
  ``FAILURE_REASON_MAX_CHARS`` characters).
* RANGE_READ carries both directions: the request ``["req", keyspace, table, low, high,
  limit]`` (the raw partitions of the token range ``(low, high]``, ``low < high``, at most
  ``limit``) and the answer ``["rsp", [mutation bytes...], more]`` (``more``: the replica holds
  further partitions in the range after the last one sent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgpack

from ringflow.cdc import CdcCapture
from ringflow.cluster._messages import InternodeProtocolError, Verb
from ringflow.cluster._read_path import ReadKind
from ringflow.cluster._write_path import WriteUnit
from ringflow.schema import ClusteringBound, Mutation
from ringflow.storage import decode_mutation, encode_mutation

_NO_BOUND = ClusteringBound()
FAILURE_REASON_MAX_CHARS = 500


def _unpack(data: bytes, what: str) -> object:
    try:
        return msgpack.unpackb(data, raw=False)
    except Exception as error:  # msgpack raises several unrelated types
        raise InternodeProtocolError(f"malformed {what} payload: {error}") from None


def _list(value: object, what: str, length: int | None = None) -> list[object]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        raise InternodeProtocolError(f"{what}: expected an array of {length}, got {value!r:.80}")
    return value


def _bytes(value: object, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise InternodeProtocolError(f"{what}: expected bytes, got {type(value).__name__}")
    return value


def _mutation(value: object, what: str) -> Mutation:
    try:
        return decode_mutation(_bytes(value, what))
    except InternodeProtocolError:
        raise
    except Exception as error:
        raise InternodeProtocolError(f"{what}: undecodable mutation: {error}") from None


def encode_failure(verb: Verb, reason: str) -> bytes:
    payload: bytes = msgpack.packb(
        [int(verb), reason[:FAILURE_REASON_MAX_CHARS]], use_bin_type=True
    )
    return payload


def decode_failure(data: bytes) -> tuple[Verb, str]:
    """A FAILURE_RSP payload: the failed request's verb and the reason."""
    verb_code, reason = _list(_unpack(data, "failure"), "failure", 2)
    if not isinstance(verb_code, int) or isinstance(verb_code, bool):
        raise InternodeProtocolError(f"failure: bad verb {verb_code!r:.40}")
    try:
        verb = Verb(verb_code)
    except ValueError:
        raise InternodeProtocolError(f"failure: unknown verb {verb_code!r:.40}") from None
    if not isinstance(reason, str) or len(reason) > FAILURE_REASON_MAX_CHARS:
        raise InternodeProtocolError(f"failure: bad reason {reason!r:.40}")
    return verb, reason


def encode_mutations_payload(mutations: Sequence[Mutation]) -> bytes:
    payload: bytes = msgpack.packb([encode_mutation(m) for m in mutations], use_bin_type=True)
    return payload


def decode_mutations_payload(data: bytes) -> list[Mutation]:
    items = _list(_unpack(data, "mutations"), "mutations")
    return [_mutation(item, "mutations") for item in items]


def encode_unit(unit: WriteUnit) -> bytes:
    captures = [[i, *c.fields()] for i, c in unit.cdc_captures]
    mutations = [encode_mutation(m) for m in unit.mutations]
    payload: bytes = msgpack.packb([mutations, captures], use_bin_type=True)
    return payload


def decode_unit(data: bytes) -> WriteUnit:
    mutations, captures = _list(_unpack(data, "write unit"), "write unit", 2)
    decoded = [_mutation(item, "write unit") for item in _list(mutations, "mutations")]
    pairs: list[tuple[int, CdcCapture]] = []
    for item in _list(captures, "captures"):
        fields = _list(item, "capture")
        if not fields or not isinstance(fields[0], int):
            raise InternodeProtocolError(f"capture: bad index {item!r:.80}")
        try:
            pairs.append((fields[0], CdcCapture.from_fields(fields[1:])))
        except InternodeProtocolError:
            raise
        except Exception as error:
            raise InternodeProtocolError(f"capture: {error}") from None
    try:
        return WriteUnit(tuple(decoded), tuple(pairs))
    except Exception as error:
        raise InternodeProtocolError(f"write unit: {error}") from None


@dataclass(frozen=True, slots=True)
class ReadCommand:
    """What a READ_REQ asks a replica for: one partition (or the clustering slice ``start`` ..
    ``end`` of it; unbounded: all of it), its data or its digest."""

    keyspace: str
    table: str
    partition_key: tuple[bytes, ...]
    kind: ReadKind
    start: ClusteringBound = _NO_BOUND
    end: ClusteringBound = _NO_BOUND
    columns: tuple[str, ...] | None = None
    """The static and regular columns the coordinator reads (its table's); None: every column
    the replica knows."""

    def with_kind(self, kind: ReadKind) -> ReadCommand:
        return ReadCommand(
            self.keyspace,
            self.table,
            self.partition_key,
            kind,
            self.start,
            self.end,
            self.columns,
        )


def encode_read(command: ReadCommand) -> bytes:
    body: list[object] = [
        command.keyspace,
        command.table,
        list(command.partition_key),
        command.kind.value,
    ]
    start, end = command.start, command.end
    bounded = not (start.is_unbounded and end.is_unbounded)
    if bounded or command.columns is not None:
        body.append(
            [list(start.prefix), start.inclusive, list(end.prefix), end.inclusive]
            if bounded
            else None
        )
    if command.columns is not None:
        body.append(list(command.columns))
    payload: bytes = msgpack.packb(body, use_bin_type=True)
    return payload


def decode_read(data: bytes) -> ReadCommand:
    items = _list(_unpack(data, "read"), "read")
    if len(items) not in (4, 5, 6):
        raise InternodeProtocolError(f"read: expected an array of 4 to 6, got {items!r:.80}")
    keyspace, table, key, kind = items[:4]
    if (
        not isinstance(keyspace, str)
        or not isinstance(table, str)
        or kind not in ("data", "digest")
    ):
        raise InternodeProtocolError(f"read: bad command {keyspace!r:.40} {table!r:.40} {kind!r}")
    parts = tuple(_bytes(part, "read key") for part in _list(key, "read key"))
    start = end = _NO_BOUND
    if len(items) >= 5 and items[4] is not None:
        low, low_inclusive, high, high_inclusive = _list(items[4], "read slice", 4)
        start = _bound(low, low_inclusive)
        end = _bound(high, high_inclusive)
    columns = _names(items[5], "read columns") if len(items) == 6 else None
    return ReadCommand(keyspace, table, parts, ReadKind(kind), start, end, columns)


def _names(value: object, what: str) -> tuple[str, ...]:
    names = _list(value, what)
    if not all(isinstance(name, str) for name in names):
        raise InternodeProtocolError(f"{what}: expected column names, got {value!r:.80}")
    return tuple(str(name) for name in names)


def _bound(prefix: object, inclusive: object) -> ClusteringBound:
    if not isinstance(inclusive, bool):
        raise InternodeProtocolError(f"read slice: bad inclusive flag {inclusive!r:.40}")
    values = tuple(_bytes(value, "read slice") for value in _list(prefix, "read slice"))
    return ClusteringBound(values, inclusive)


def encode_read_response(
    kind: ReadKind, partition: Mutation | None, digest: bytes, unknown: Sequence[str] = ()
) -> bytes:
    """A READ_RSP; ``unknown``: the columns asked for that the replica does not know."""
    body: object = digest if kind is ReadKind.DIGEST else None
    if kind is ReadKind.DATA and partition is not None:
        body = encode_mutation(partition)
    answer: list[object] = [kind.value, body]
    if unknown:
        answer.append(list(unknown))
    payload: bytes = msgpack.packb(answer, use_bin_type=True)
    return payload


def decode_read_response(
    data: bytes,
) -> tuple[ReadKind, Mutation | None, bytes, frozenset[str]]:
    """``(kind, partition, digest, unknown columns)``: ``partition`` for data answers,
    ``digest`` for digests."""
    items = _list(_unpack(data, "read response"), "read response")
    if len(items) not in (2, 3):
        raise InternodeProtocolError(f"read response: expected 2 or 3 items, got {items!r:.80}")
    kind, body = items[:2]
    unknown = frozenset(_names(items[2], "unknown columns")) if len(items) == 3 else frozenset()
    if kind == "digest":
        return ReadKind.DIGEST, None, _bytes(body, "digest"), unknown
    if kind != "data":
        raise InternodeProtocolError(f"read response: unknown kind {kind!r:.40}")
    return ReadKind.DATA, None if body is None else _mutation(body, "read data"), b"", unknown


RANGE_REQUEST = "req"
RANGE_ANSWER = "rsp"


@dataclass(frozen=True, slots=True)
class RangeCommand:
    """What a RANGE_READ asks a replica for: at most ``limit`` raw partitions of ``(low, high]``."""

    keyspace: str
    table: str
    low: int
    high: int
    limit: int


@dataclass(frozen=True, slots=True)
class RangeAnswer:
    """A replica's partitions of a range in token order; ``more``: it stopped before the end."""

    partitions: tuple[Mutation, ...]
    more: bool


def encode_range_read(command: RangeCommand) -> bytes:
    body = [
        RANGE_REQUEST,
        command.keyspace,
        command.table,
        command.low,
        command.high,
        command.limit,
    ]
    payload: bytes = msgpack.packb(body, use_bin_type=True)
    return payload


def encode_range_answer(answer: RangeAnswer, max_bytes: int) -> bytes:
    """The answer, cut after the partition that reaches ``max_bytes`` (then ``more`` is set);
    at least one partition is always kept so the reader makes progress."""
    encoded: list[bytes] = []
    size = 0
    more = answer.more
    for index, partition in enumerate(answer.partitions):
        if encoded and size >= max_bytes:
            more = more or index < len(answer.partitions)
            break
        data = encode_mutation(partition)
        encoded.append(data)
        size += len(data)
    payload: bytes = msgpack.packb([RANGE_ANSWER, encoded, more], use_bin_type=True)
    return payload


def _int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InternodeProtocolError(f"{what}: expected an int, got {value!r:.40}")
    return value


def decode_range_message(data: bytes) -> RangeCommand | RangeAnswer:
    """A RANGE_READ payload: the request or the answer (see the module docstring)."""
    value = _list(_unpack(data, "range read"), "range read")
    if value and value[0] == RANGE_REQUEST:
        _, keyspace, table, low, high, limit = _list(value, "range read", 6)
        if not isinstance(keyspace, str) or not isinstance(table, str):
            raise InternodeProtocolError(f"range read: bad table {keyspace!r:.40} {table!r:.40}")
        low, high, limit = _int(low, "range low"), _int(high, "range high"), _int(limit, "limit")
        if not -(2**63) <= low < high < 2**63 or limit < 1:
            raise InternodeProtocolError(f"range read: bad range ({low}, {high}] limit {limit}")
        return RangeCommand(keyspace, table, low, high, limit)
    if value and value[0] == RANGE_ANSWER:
        _, items, more = _list(value, "range answer", 3)
        if not isinstance(more, bool):
            raise InternodeProtocolError(f"range answer: bad more flag {more!r:.40}")
        partitions = tuple(_mutation(item, "range answer") for item in _list(items, "partitions"))
        return RangeAnswer(partitions, more)
    raise InternodeProtocolError(f"range read: unknown message {value!r:.80}")
