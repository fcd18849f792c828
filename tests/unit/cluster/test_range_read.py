"""Range reads in cluster mode: the requested token range is cut by the ring (wrap-around
unwrapped) into pieces in scan order, neighbours with the same replicas are joined, the
replicas' answers are merged per partition and cut where a short answer stops, the RANGE_READ
payloads round-trip, and the coordinated reader pages a range chunk by chunk to exactly the
rows of the range."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pytest

from ringflow.cluster import InternodeProtocolError
from ringflow.cluster._coordinator import base_token
from ringflow.cluster.service import _codec, _plane
from ringflow.cluster.service._node import join_pieces, reconcile_range, split_range
from ringflow.cql import Consistency, RowsNotHeld
from ringflow.errors import InvalidRequest
from ringflow.ring import MAX_TOKEN, MIN_TOKEN, Host, TokenRange
from ringflow.schema import INT, TEXT, Cell, ClusteringOrder, Mutation, Row, Table
from ringflow.schema._codec import serialize
from ringflow.storage import HeldTable, ScanPage, Store

RING = (-100, 0, 100)
TABLE = Table.create(
    "ks",
    "t",
    partition_key=[("k", INT)],
    clustering=[("c", INT, ClusteringOrder.ASC)],
    regular=[("v", TEXT)],
    table_id=uuid.UUID(int=9),
)


def _host(n: int) -> Host:
    return Host(uuid.UUID(int=n), f"127.0.0.{n}:7000", "dc1", "r1")


def _tokens(pieces: list[tuple[int, int]]) -> set[int]:
    probes = {MIN_TOKEN + 1, MAX_TOKEN, -101, -100, -99, -1, 0, 1, 50, 99, 100, 101, 7, -7}
    return {t for t in probes if any(low < t <= high for low, high in pieces)}


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (MIN_TOKEN, MIN_TOKEN),
        (-50, 50),
        (0, 100),
        (5, 6),
        (50, -50),
        (100, 100),
        (MAX_TOKEN, MIN_TOKEN),
        (-100, MIN_TOKEN),
        (MIN_TOKEN, -100),
    ],
)
def test_split_covers_exactly_the_range_in_scan_order(left: int, right: int) -> None:
    pieces = split_range(left, right, RING)
    assert all(low < high for low, high in pieces)
    for (_, high), (low, _) in itertools.pairwise(pieces):
        assert low == high or (high == MAX_TOKEN and low == MIN_TOKEN)
    # no piece crosses a ring token, and the pieces hold exactly the range's key tokens
    assert not any(low < token < high for low, high in pieces for token in RING)
    wanted = TokenRange(left, right)
    probes = {MIN_TOKEN + 1, MAX_TOKEN, -101, -100, -99, -1, 0, 1, 50, 99, 100, 101, 7, -7}
    assert _tokens(pieces) == {t for t in probes if t in wanted}
    if pieces:
        assert pieces[0][0] == left


def test_split_examples() -> None:
    assert split_range(MIN_TOKEN, MIN_TOKEN, RING) == [
        (MIN_TOKEN, -100),
        (-100, 0),
        (0, 100),
        (100, MAX_TOKEN),
    ]
    assert split_range(50, -50, RING) == [
        (50, 100),
        (100, MAX_TOKEN),
        (MIN_TOKEN, -100),
        (-100, -50),
    ]
    assert split_range(MAX_TOKEN, MIN_TOKEN, RING) == []
    assert split_range(10, 20, RING) == [(10, 20)]


def test_neighbours_with_the_same_replicas_are_joined() -> None:
    a, b = _host(1), _host(2)
    owners = {-100: (a,), 0: (a,), 100: (b, a), MAX_TOKEN: (a, b), -50: (a,)}
    pieces = split_range(MIN_TOKEN, MIN_TOKEN, RING)
    joined = join_pieces(pieces, lambda token: owners[token])
    assert joined == [(MIN_TOKEN, 0, (a,)), (0, MAX_TOKEN, (b, a))]
    # across the unwrap point (MAX then MIN) pieces are never joined
    wrapped = join_pieces(split_range(100, -50, RING), lambda token: owners[token])
    assert [(low, high) for low, high, _ in wrapped] == [(100, MAX_TOKEN), (MIN_TOKEN, -50)]


def _partition(key: int, value: str, timestamp: int) -> Mutation:
    row = Row((serialize(INT, 1),), None, None, {"v": Cell.live(timestamp, value.encode())})
    return Mutation("ks", "t", (serialize(INT, key),), rows=(row,))


def _sorted(partitions: list[Mutation]) -> list[Mutation]:
    return sorted(partitions, key=base_token)


def test_answers_merge_per_partition_newest_wins_in_token_order() -> None:
    old = [_partition(k, "old", 1) for k in range(10)]
    new = [_partition(k, "new", 2) for k in range(0, 10, 2)]
    extra = [_partition(k, "extra", 1) for k in range(10, 13)]
    merged, covered = reconcile_range(
        [
            _codec.RangeAnswer(tuple(_sorted(old)), False),
            _codec.RangeAnswer(tuple(_sorted(new + extra)), False),
        ]
    )
    assert covered is None
    assert [base_token(m) for m in merged] == sorted(base_token(m) for m in merged)
    values = {m.partition_key: m.rows[0].cells["v"].value for m in merged}
    assert len(values) == 13
    for k in range(13):
        expected = b"new" if k < 10 and k % 2 == 0 else (b"extra" if k >= 10 else b"old")
        assert values[(serialize(INT, k),)] == expected


def test_a_short_answer_cuts_the_result_before_its_last_token() -> None:
    everything = _sorted([_partition(k, "v", 1) for k in range(20)])
    short = everything[:5]
    merged, covered = reconcile_range(
        [_codec.RangeAnswer(tuple(everything), False), _codec.RangeAnswer(tuple(short), True)]
    )
    cut = base_token(short[-1])
    assert covered == cut - 1
    assert merged == everything[:4]
    # one partition only: it is kept (progress), covered up to its token
    merged, covered = reconcile_range([_codec.RangeAnswer(tuple(everything[:1]), True)])
    assert merged == everything[:1] and covered == base_token(everything[0])


def test_range_payloads_round_trip_and_bound_their_size() -> None:
    command = _codec.RangeCommand("ks", "t", -5, 77, 100)
    assert _codec.decode_range_message(_codec.encode_range_read(command)) == command
    partitions = tuple(_sorted([_partition(k, "x" * 100, 1) for k in range(10)]))
    answer = _codec.RangeAnswer(partitions, False)
    assert _codec.decode_range_message(_codec.encode_range_answer(answer, 1 << 20)) == answer
    cut = _codec.decode_range_message(_codec.encode_range_answer(answer, 1))
    assert cut == _codec.RangeAnswer(partitions[:1], True)
    for payload in (b"", b"\xc1", b"\x91\xa3req", b"\x96\xa3req\xa1k\xa1t\x05\x01\x01"):
        with pytest.raises(InternodeProtocolError):
            _codec.decode_range_message(payload)


class _FakePlane:
    """Answers range reads from a source store, ``limit`` partitions at a time."""

    def __init__(self, source: Store) -> None:
        self.source = source
        self.calls = 0

    def coordinated(self, keyspace: str) -> bool:
        return keyspace == "ks"

    def held_table(self, table: Table) -> HeldTable:
        return HeldTable(table, self.source.limits)

    def read_range(
        self, table: Table, left: int, right: int, limit: int
    ) -> tuple[list[Mutation], int | None]:
        self.calls += 1
        page = self.source.scan_mutations(table, left, right, page_size=limit)
        if page.paging_state is None or not page.mutations:
            return page.mutations, None
        covered = base_token(page.mutations[-1])
        return page.mutations, None if covered == right else covered

    def read_chunk(self, read: object) -> tuple[list[Mutation], int | None]:
        """What the plane's chunk read finds (``ClusterDataPlane._read_chunk``): a first chunk
        in one range read, a whole chunk again in range reads until its high token."""
        assert isinstance(read, _plane._ChunkRead)
        if read.limit is not None:
            return self.read_range(read.table, read.low, read.high, read.limit)
        partitions: list[Mutation] = []
        cursor = read.low
        while True:
            found, covered = self.read_range(
                read.table, cursor, read.high, _plane.RANGE_CHUNK_PARTITIONS
            )
            partitions.extend(found)
            if covered is None or covered == read.high:
                return partitions, read.high
            cursor = covered

    def scan(
        self,
        reader: _plane.CoordinatedReader,
        left: int,
        right: int,
        page_size: int,
        state: bytes | None,
    ) -> ScanPage:
        """A page of ``TABLE`` through ``reader``, gone on with where it lacks chunks, as a
        SELECT in steps does."""
        reader.suspending = True
        while True:
            try:
                page: ScanPage = reader.scan(
                    TABLE, left, right, page_size=page_size, paging_state=state, now_s=2
                )
                return page
            except RowsNotHeld as lacking:
                reader.hold(lacking.reads, [self.read_chunk(read) for read in lacking.reads])  # type: ignore[arg-type]


def _fill(store: Store, keys: range) -> None:
    store.register_table(TABLE)
    batch = []
    for k in keys:
        rows = tuple(
            Row((serialize(INT, c),), None, None, {"v": Cell.live(1, f"{k}/{c}".encode())})
            for c in range(3)
        )
        batch.append(Mutation("ks", "t", (serialize(INT, k),), rows=rows))
    store.apply(batch, now_s=1)


@pytest.mark.parametrize(
    ("left", "right", "page_size"),
    [
        (MIN_TOKEN, MIN_TOKEN, 10),
        (MIN_TOKEN, MIN_TOKEN, 1),
        (-(2**62), 2**62, 7),
        (2**62, -(2**62), 4),
    ],
)
def test_coordinated_scan_pages_chunk_by_chunk_to_exactly_the_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, left: int, right: int, page_size: int
) -> None:
    monkeypatch.setattr(_plane, "RANGE_CHUNK_PARTITIONS", 6)
    monkeypatch.setattr(_plane, "MIN_RANGE_CHUNK_PARTITIONS", 5)
    source = Store(tmp_path / "source.sqlite")
    local = Store(tmp_path / "local.sqlite")
    _fill(source, range(60))
    local.register_table(TABLE)
    plane = _FakePlane(source)
    expected = []
    state: bytes | None = None
    while True:
        page = source.scan(TABLE, left, right, page_size=1000, paging_state=state, now_s=2)
        expected.extend(page.rows)
        state = page.paging_state
        if state is None:
            break
    got = []
    state = None
    for _statement in range(10_000):
        # every page a statement of its own, with a reader of its own: chunks are read again
        reader = _plane.CoordinatedReader(plane, local, Consistency.QUORUM)  # type: ignore[arg-type]
        page = plane.scan(reader, left, right, page_size, state)
        assert len(page.rows) <= page_size
        got.extend(page.rows)
        state = page.paging_state
        if state is None:
            break
    assert [(r.partition_key, r.clustering) for r in got] == [
        (r.partition_key, r.clustering) for r in expected
    ]
    assert got == expected
    assert plane.calls > 1
    per_statement_calls, plane.calls = plane.calls, 0
    # one statement reading every page: each chunk is read once and kept while it is paged
    reader = _plane.CoordinatedReader(plane, local, Consistency.QUORUM)  # type: ignore[arg-type]
    again: list[object] = []
    state = None
    for _page in range(10_000):
        page = plane.scan(reader, left, right, page_size, state)
        again.extend(page.rows)
        state = page.paging_state
        if state is None:
            break
    assert again == expected
    assert plane.calls < per_statement_calls
    with pytest.raises(InvalidRequest):
        reader.scan(TABLE, left, right, page_size=5, paging_state=b"junk", now_s=2)
    for store in (local, source):
        store.close()
