"""The cluster service's data-verb payloads and CDC-carrying hints round-trip exactly, and a
malformed payload is a peer's protocol error, nothing else."""

from __future__ import annotations

import uuid
from pathlib import Path

import msgpack
import pytest

from ringflow.cdc import CdcCapture
from ringflow.cluster import InternodeProtocolError, ReadKind, WriteUnit
from ringflow.cluster.service import _codec
from ringflow.schema import Cell, ClusteringBound, Mutation, Row
from ringflow.storage import Store

CAPTURE = CdcCapture(bytes(range(16)), 12345, 1_700_000_123)
OLD_CAPTURE = CdcCapture(bytes(range(16)), 12345)
"""A capture without the coordinator's clock: what a peer that does not send it gives."""


def _mutation(n: int) -> Mutation:
    row = Row((), None, None, {"v": Cell.live(n, b"x")})
    return Mutation("ks", "t", (str(n).encode(),), rows=(row,))


def test_write_unit_round_trips_with_its_captures() -> None:
    unit = WriteUnit((_mutation(1), _mutation(2)), ((1, CAPTURE),))
    assert _codec.decode_unit(_codec.encode_unit(unit)) == unit


def test_a_capture_carries_the_coordinators_clock_and_one_without_it_still_decodes() -> None:
    """``[index, stream, low bits, now_s]``; a peer that sends ``[index, stream, low bits]``
    gives a capture whose log rows count their TTL from the replica's clock (as before); any
    other shape is a protocol error."""
    unit = WriteUnit((_mutation(1),), ((0, OLD_CAPTURE),))
    mutations, captures = msgpack.unpackb(_codec.encode_unit(unit))
    assert captures == [[0, bytes(range(16)), 12345]]
    assert _codec.decode_unit(_codec.encode_unit(unit)).cdc_captures == ((0, OLD_CAPTURE),)
    with_clock = msgpack.unpackb(_codec.encode_unit(WriteUnit((_mutation(1),), ((0, CAPTURE),))))
    assert with_clock[1] == [[0, bytes(range(16)), 12345, 1_700_000_123]]
    assert CAPTURE.clock_s(5) == 1_700_000_123 and OLD_CAPTURE.clock_s(5) == 5
    for bad in ([0, bytes(range(16)), 12345, "soon"], [0, bytes(range(16)), 12345, 1, 2]):
        with pytest.raises(InternodeProtocolError):
            _codec.decode_unit(msgpack.packb([mutations, [bad]]))


def test_read_command_and_answers_round_trip() -> None:
    command = _codec.ReadCommand("ks", "t", (b"a", b"b"), ReadKind.DIGEST)
    assert _codec.decode_read(_codec.encode_read(command)) == command
    none: frozenset[str] = frozenset()
    data = _codec.encode_read_response(ReadKind.DATA, _mutation(3), b"")
    assert _codec.decode_read_response(data) == (ReadKind.DATA, _mutation(3), b"", none)
    empty = _codec.encode_read_response(ReadKind.DATA, None, b"")
    assert _codec.decode_read_response(empty) == (ReadKind.DATA, None, b"", none)
    digest = _codec.encode_read_response(ReadKind.DIGEST, None, b"d" * 16)
    assert _codec.decode_read_response(digest) == (ReadKind.DIGEST, None, b"d" * 16, none)


def test_a_read_names_its_columns_and_an_answer_the_columns_its_replica_does_not_know() -> None:
    start, end = ClusteringBound((b"\x01",), True), ClusteringBound((b"\x05",), True)
    whole = _codec.ReadCommand("ks", "t", (b"a",), ReadKind.DATA, columns=("v", "w"))
    sliced = _codec.ReadCommand("ks", "t", (b"a",), ReadKind.DATA, start, end, ("v",))
    nothing = _codec.ReadCommand("ks", "t", (b"a",), ReadKind.DATA, columns=())
    for command in (whole, sliced, nothing):
        assert _codec.decode_read(_codec.encode_read(command)) == command
        assert command.with_kind(ReadKind.DIGEST).columns == command.columns
    answer = _codec.encode_read_response(ReadKind.DATA, _mutation(3), b"", ("w",))
    assert _codec.decode_read_response(answer) == (
        ReadKind.DATA,
        _mutation(3),
        b"",
        frozenset({"w"}),
    )
    bad = msgpack.packb(["ks", "t", [b"a"], "data", None, ["v", 3]])
    with pytest.raises(InternodeProtocolError):
        _codec.decode_read(bad)


def test_a_slice_read_command_round_trips_and_keeps_its_bounds_across_kinds() -> None:
    start, end = ClusteringBound((b"\x01", b"x"), False), ClusteringBound((b"\x05",), True)
    command = _codec.ReadCommand("ks", "t", (b"a",), ReadKind.DATA, start, end)
    assert _codec.decode_read(_codec.encode_read(command)) == command
    digest = command.with_kind(ReadKind.DIGEST)
    assert (digest.kind, digest.start, digest.end) == (ReadKind.DIGEST, start, end)
    open_end = _codec.ReadCommand("ks", "t", (b"a",), ReadKind.DATA, start)
    assert _codec.decode_read(_codec.encode_read(open_end)) == open_end
    whole = _codec.ReadCommand("ks", "t", (b"a",), ReadKind.DATA)
    assert len(msgpack.unpackb(_codec.encode_read(whole))) == 4  # the whole-partition form
    bad = msgpack.packb(["ks", "t", [b"a"], "data", [[b"\x01"], 1, [], True]])
    with pytest.raises(InternodeProtocolError):
        _codec.decode_read(bad)


@pytest.mark.parametrize("payload", [b"", b"\xc1", b"\x93\x01\x02\x03", b"\x92\x90\x91\x01"])
def test_malformed_payloads_are_protocol_errors(payload: bytes) -> None:
    for decode in (_codec.decode_unit, _codec.decode_read, _codec.decode_read_response):
        with pytest.raises(InternodeProtocolError):
            decode(payload)


def test_hints_keep_cdc_captures_across_reopen(tmp_path: Path) -> None:
    target = uuid.UUID(int=7)
    store = Store(tmp_path / "s.sqlite")
    with_cdc = store.store_hint(target, [_mutation(1), _mutation(2)], 10, captures={1: CAPTURE})
    old = store.store_hint(target, [_mutation(4)], 12, captures={0: OLD_CAPTURE})
    plain = store.store_hint(target, [_mutation(3)], 11)
    store.close()
    store = Store(tmp_path / "s.sqlite")
    hints = {hint.hint_id: hint for hint in store.hints_for(target, 10)}
    assert hints[with_cdc].captures == ((1, CAPTURE),)  # the coordinator's clock kept
    assert hints[old].captures == ((0, OLD_CAPTURE),)
    assert hints[with_cdc].mutations == (_mutation(1), _mutation(2))
    assert hints[plain].captures == () and hints[plain].mutations == (_mutation(3),)
    store.close()
