"""The store's direct route to a CDC delta row gives exactly what the general route gives.

Checks: the uniform row encoding (``0x02``) round-trips, is chosen canonically by ``encode_row``
(a row has one encoding, so re-writing it is a no-op) and rejects malformed input like the
``0x01`` one; ``DeltaRowBuilder`` + ``delta_row_atom`` give the atom that flattening the general
builder's log mutation gives, for the writes the direct route takes (insert, update, TTL, cell
tombstone), and decline the writes it must not take.
"""

from __future__ import annotations

from dataclasses import replace

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cdc._log_rows import (
    CdcCapture,
    build_log_mutations,
    delta_row_builder,
    single_row_delta,
)
from ringflow.cdc._log_schema import cdc_log_table
from ringflow.schema import (
    CdcOptions,
    Cell,
    ColumnData,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    Row,
    TableOptions,
)
from ringflow.storage import MutationDecodeError, decode_mutation
from ringflow.storage._catalog import TableInfo
from ringflow.storage._mutation_codec import (
    UNIFORM_ROW_VERSION,
    decode_row,
    encode_row,
    encode_uniform_row,
)
from ringflow.storage._write import delta_row_atom, flatten_built_log, flatten_mutation
from tests.unit.storage._tables import CDC_BASE, i32, txt

NOW = 1_000
int64 = st.integers(-(2**63), 2**63 - 1)
values = st.dictionaries(st.text(min_size=1, max_size=5), st.binary(max_size=6), min_size=1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=6), max_size=3), int64, st.integers(0, 2**31), int64, values)
def test_uniform_rows_round_trip_and_are_canonical(
    clustering: list[bytes], ts: int, ttl: int, ldt: int, cells: dict[str, bytes]
) -> None:
    row = Row(tuple(clustering), None, None, {n: Cell(ts, v, ttl, ldt) for n, v in cells.items()})
    encoded = encode_row(row)
    assert encoded[0] == UNIFORM_ROW_VERSION
    assert encoded == encode_uniform_row(clustering, cells, ts, ttl, ldt)
    decoded = decode_row(encoded)
    assert decoded == row and list(decoded.cells) == list(row.cells)


_PLAIN: dict[str, ColumnData] = {"v": Cell.live(5, txt("x")), "n": Cell.live(5, i32(1))}


@pytest.mark.parametrize(
    "row",
    [
        Row((), None, None, {}),
        Row((i32(1),), LivenessInfo(5), None, _PLAIN),
        Row((i32(1),), None, DeletionTime(4, 9), _PLAIN),
        Row((i32(1),), None, None, {"v": Cell.live(5, b"x"), "n": Cell.live(6, b"y")}),
        Row((i32(1),), None, None, {"v": Cell.live(5, b"x"), "n": Cell.expiring(5, 7, 1, b"y")}),
        Row((i32(1),), None, None, {"v": Cell.live(5, b"x"), "t": Cell.live(5, b"", b"p")}),
        Row((i32(1),), None, None, {"t": ComplexColumn((Cell.live(5, b"", b"p"),))}),
    ],
)
def test_other_rows_keep_the_general_encoding(row: Row) -> None:
    encoded = encode_row(row)
    assert encoded[0] == 1 and decode_row(encoded) == row


@pytest.mark.parametrize(
    "data",
    [
        b"\x02",
        b"\x02\xc1",
        b"\x02" + msgpack.packb([[], 1, 0, 5]),
        b"\x02" + msgpack.packb([[], 1, 0, 5, {}]),
        b"\x02" + msgpack.packb([[], 1, 0, 5, [b"v", b"x"]]),
        b"\x02" + msgpack.packb([[], 1, 0, 5, {"v": "text"}]),
        b"\x02" + msgpack.packb([[], 2**64 - 1, 0, 5, {"v": b"x"}]),
        b"\x02" + msgpack.packb([["ck"], 1, 0, 5, {"v": b"x"}]),
        b"\x02" + msgpack.packb([[], 1, 0, 5, {1: b"x"}]),
        b"\x03" + msgpack.packb([[], 1, 0, 5, {"v": b"x"}]),
    ],
)
def test_malformed_uniform_rows_are_decode_errors(data: bytes) -> None:
    with pytest.raises(MutationDecodeError):
        decode_row(data)


def test_a_uniform_row_is_not_a_mutation() -> None:
    with pytest.raises(MutationDecodeError):
        decode_mutation(encode_uniform_row([], {"v": b"x"}, 1, 0, 5))


DELTA_BASE = replace(CDC_BASE, options=TableOptions(cdc=CdcOptions(enabled=True, ttl_s=600)))
DELTA_LOG = cdc_log_table(DELTA_BASE)
LOG_INFO = TableInfo.of(3, DELTA_LOG, packed_rows=True)
CAPTURE = CdcCapture(bytes(range(16)), 0x1234_5678_9ABC)


def _write(marker: LivenessInfo | None, cells: dict[str, ColumnData]) -> Mutation:
    row = Row((i32(2),), marker, None, cells)
    return Mutation("ks", "orders", (i32(1),), rows=(row,))


_DIRECT = {
    "insert": _write(LivenessInfo(10), {"v": Cell.live(10, txt("a")), "w": Cell.live(10, i32(3))}),
    "update": _write(None, {"v": Cell.live(10, txt("b"))}),
    "insert with ttl": _write(
        LivenessInfo(10, 30, NOW + 30), {"v": Cell.expiring(10, 30, NOW, txt("c"))}
    ),
    "cell tombstone": _write(None, {"v": Cell.tombstone(10, NOW), "w": Cell.live(10, i32(4))}),
    "marker only": _write(LivenessInfo(10), {}),
}


@pytest.mark.parametrize("name", sorted(_DIRECT))
def test_direct_delta_atom_is_the_general_routes_atom(name: str) -> None:
    mutation = _DIRECT[name]
    builder = delta_row_builder(DELTA_BASE, DELTA_LOG)
    assert builder is not None
    delta = builder(mutation, CAPTURE, NOW)
    assert delta is not None and delta == single_row_delta(
        DELTA_BASE, DELTA_LOG, mutation, CAPTURE, NOW
    )
    atom = delta_row_atom(LOG_INFO, delta)
    (log_mutation,) = build_log_mutations(DELTA_BASE, DELTA_LOG, mutation, CAPTURE, NOW)
    (general,) = flatten_built_log(LOG_INFO, log_mutation).atoms
    (checked,) = flatten_mutation(LOG_INFO, log_mutation).atoms
    assert atom == general == checked
    assert decode_row(general[10]) == log_mutation.rows[0]


@pytest.mark.parametrize(
    "mutation",
    [
        _write(None, {"v": Cell.live(10, txt("a")), "w": Cell.live(11, i32(3))}),  # two changes
        _write(LivenessInfo(10), {"v": Cell.expiring(10, 30, NOW, txt("c"))}),  # two TTLs
        Mutation("ks", "orders", (i32(1),), partition_deletion=DeletionTime(10, NOW)),
        Mutation("ks", "other", (i32(1),), rows=(Row((i32(2),), LivenessInfo(10), None, {}),)),
        _write(None, {"nope": Cell.live(10, b"")}),
    ],
)
def test_direct_route_declines_other_writes(mutation: Mutation) -> None:
    builder = delta_row_builder(DELTA_BASE, DELTA_LOG)
    assert builder is not None and builder(mutation, CAPTURE, NOW) is None


def test_tables_with_images_have_no_direct_route() -> None:
    assert delta_row_builder(CDC_BASE, cdc_log_table(CDC_BASE)) is None
    assert delta_row_builder(DELTA_BASE, DELTA_LOG) is not None
