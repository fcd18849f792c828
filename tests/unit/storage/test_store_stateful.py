"""The store against a model of Cassandra semantics, driven by Hypothesis' state machine.

Rules write through ``Store.apply`` and into ``TableModel`` (tests/unit/storage/_model.py, which
keeps every write and resolves reads from scratch with §6's rules, independently of the SQL
upsert): inserts and updates with and without TTL, explicit timestamps from a small pool (ties
are common), cell, row, range and partition deletions, set element adds and removes, whole-set
overwrites, static cells, a fake clock moving forward, gc_grace compaction and store reopening.
The same machine runs on a ``packed_rows`` table, where each write is one packed atom.
After every step every partition must read the same in both (values, write times, TTLs), at the
current second and a little later; slices, reverse reads and a paged full-ring scan are checked
by rules. Each read is also answered by ``HeldTable`` from the partition's raw state
(``Store.read_mutation`` of the slice, what a coordinator reconciles): it must return exactly the
store's rows, with any column subset.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ringflow.ring import MIN_TOKEN, murmur3_token
from ringflow.schema import (
    INT,
    TEXT,
    Cell,
    ClusteringBound,
    ClusteringOrder,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
    SetType,
    Table,
    TableOptions,
)
from ringflow.schema._codec import serialize
from ringflow.storage import HeldPartition, HeldTable, ResultRow, ScanPage, Store, StoreLimits
from tests.unit.storage._model import STATIC, Bound, ModelRow, TableModel, inside

GC_GRACE_S = 6
TABLE = Table.create(
    "ks",
    "model",
    partition_key=[("pk", INT)],
    clustering=[("ck", INT, ClusteringOrder.ASC)],
    static=[("s", TEXT)],
    regular=[("v", TEXT), ("n", INT), ("tags", SetType(INT))],
    options=TableOptions(gc_grace_seconds=GC_GRACE_S),
    table_id=uuid.UUID(int=77),
)

HELD = HeldTable(TABLE, StoreLimits())
UNBOUNDED = ClusteringBound()
partitions = st.integers(0, 1)
column_sets = st.none() | st.lists(
    st.sampled_from(["s", "v", "n", "tags"]), unique=True, min_size=1
)
clusterings = st.integers(0, 3)
timestamps = st.integers(1, 6)
ttls = st.none() | st.integers(1, 12)
elements = st.integers(-2, 2)
bounds: st.SearchStrategy[Bound] = st.none() | st.tuples(clusterings, st.booleans())
values = {
    "v": st.sampled_from(["", "a", "b"]).map(lambda s: serialize(TEXT, s)),
    "n": st.integers(-1, 1).map(lambda n: serialize(INT, n)),
}


def i32(value: int) -> bytes:
    return serialize(INT, value)


def _bound(bound: Bound) -> ClusteringBound:
    return ClusteringBound() if bound is None else ClusteringBound((i32(bound[0]),), bound[1])


def _as_model(row: ResultRow) -> ModelRow:
    clustering = None if row.static_only else int.from_bytes(row.clustering[0], "big", signed=True)
    return ModelRow(clustering, dict(row.values), dict(row.writetime_us), dict(row.ttl_s))


class StoreMachine(RuleBasedStateMachine):
    PACKED_ROWS = False

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="ringflow-stateful-"))
        self.store = Store(self.directory / "node.sqlite", synchronous="NORMAL")
        self.store.register_table(TABLE, packed_rows=self.PACKED_ROWS)
        self.model = TableModel()
        self.now_s = 1_000

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _cell(
        self, timestamp_us: int, value: bytes, ttl: int | None, path: bytes | None = None
    ) -> Cell:
        if ttl is None:
            return Cell.live(timestamp_us, value, path)
        return Cell.expiring(timestamp_us, ttl, self.now_s, value, path)

    def _apply(self, pk: int, **parts: object) -> None:
        self.store.apply([Mutation("ks", "model", (i32(pk),), **parts)], now_s=self.now_s)  # type: ignore[arg-type]

    # --- writes ---------------------------------------------------------------------------------

    @rule(pk=partitions, ck=clusterings, ts=timestamps, ttl=ttls, data=st.data())
    def insert(self, pk: int, ck: int, ts: int, ttl: int | None, data: st.DataObject) -> None:
        columns = data.draw(st.lists(st.sampled_from(["v", "n"]), unique=True))
        cells = {name: self._cell(ts, data.draw(values[name]), ttl) for name in columns}
        marker = LivenessInfo(ts) if ttl is None else LivenessInfo(ts, ttl, self.now_s + ttl)
        self._apply(pk, rows=(Row((i32(ck),), marker, None, cells),))
        part = self.model.partitions[pk]
        part.liveness[ck].append(marker)
        for name, cell in cells.items():
            part.cells[(ck, name, None)].append(cell)

    @rule(
        pk=partitions,
        ck=clusterings,
        ts=timestamps,
        ttl=ttls,
        name=st.sampled_from(["v", "n"]),
        data=st.data(),
    )
    def update(
        self, pk: int, ck: int, ts: int, ttl: int | None, name: str, data: st.DataObject
    ) -> None:
        cell = self._cell(ts, data.draw(values[name]), ttl)
        self._apply(pk, rows=(Row((i32(ck),), None, None, {name: cell}),))
        self.model.partitions[pk].cells[(ck, name, None)].append(cell)

    @rule(
        pk=partitions,
        ts=timestamps,
        ttl=ttls,
        text=st.sampled_from(["", "s", "t"]),
        delete=st.booleans(),
    )
    def write_static(self, pk: int, ts: int, ttl: int | None, text: str, delete: bool) -> None:
        cell = (
            Cell.tombstone(ts, self.now_s) if delete else self._cell(ts, serialize(TEXT, text), ttl)
        )
        self._apply(pk, static_row=Row((), None, None, {"s": cell}))
        self.model.partitions[pk].cells[(STATIC, "s", None)].append(cell)

    @rule(pk=partitions, ck=clusterings, ts=timestamps, name=st.sampled_from(["v", "n"]))
    def delete_cell(self, pk: int, ck: int, ts: int, name: str) -> None:
        cell = Cell.tombstone(ts, self.now_s)
        self._apply(pk, rows=(Row((i32(ck),), None, None, {name: cell}),))
        self.model.partitions[pk].cells[(ck, name, None)].append(cell)

    @rule(pk=partitions, ck=clusterings, ts=timestamps)
    def delete_row(self, pk: int, ck: int, ts: int) -> None:
        deletion = DeletionTime(ts, self.now_s)
        self._apply(pk, rows=(Row((i32(ck),), None, deletion),))
        self.model.partitions[pk].row_deletions[ck].append(deletion)

    @rule(pk=partitions, start=bounds, end=bounds, ts=timestamps)
    def delete_range(self, pk: int, start: Bound, end: Bound, ts: int) -> None:
        deletion = DeletionTime(ts, self.now_s)
        self._apply(pk, range_tombstones=(RangeTombstone(_bound(start), _bound(end), deletion),))
        self.model.partitions[pk].ranges[(start, end)].append(deletion)

    @rule(pk=partitions, ts=timestamps)
    def delete_partition(self, pk: int, ts: int) -> None:
        deletion = DeletionTime(ts, self.now_s)
        self._apply(pk, partition_deletion=deletion)
        self.model.partitions[pk].deletions.append(deletion)

    @rule(
        pk=partitions,
        ck=clusterings,
        ts=timestamps,
        ttl=ttls,
        element=elements,
        remove=st.booleans(),
    )
    def change_element(
        self, pk: int, ck: int, ts: int, ttl: int | None, element: int, remove: bool
    ) -> None:
        path = i32(element)
        cell = Cell.tombstone(ts, self.now_s, path) if remove else self._cell(ts, b"", ttl, path)
        self._apply(pk, rows=(Row((i32(ck),), None, None, {"tags": ComplexColumn((cell,))}),))
        self.model.partitions[pk].cells[(ck, "tags", element)].append(cell)

    @rule(
        pk=partitions,
        ck=clusterings,
        ts=timestamps,
        new=st.lists(elements, unique=True, max_size=3),
    )
    def overwrite_set(self, pk: int, ck: int, ts: int, new: list[int]) -> None:
        """``SET tags = {...}``: a collection tombstone at ts - 1 and the new elements at ts."""
        deletion = DeletionTime(ts - 1, self.now_s)
        cells = tuple(Cell.live(ts, b"", i32(e)) for e in sorted(new))
        self._apply(
            pk, rows=(Row((i32(ck),), None, None, {"tags": ComplexColumn(cells, deletion)}),)
        )
        part = self.model.partitions[pk]
        part.set_deletions[ck].append(deletion)
        for element, cell in zip(sorted(new), cells, strict=True):
            part.cells[(ck, "tags", element)].append(cell)

    # --- time, compaction, restarts -----------------------------------------------------------

    @rule(seconds=st.integers(1, 20))
    def advance_clock(self, seconds: int) -> None:
        self.now_s += seconds

    @rule()
    def compact(self) -> None:
        self.store.compact(TABLE, self.now_s, partitions_per_transaction=1)
        self.model.compact(self.now_s, self.now_s - GC_GRACE_S)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = Store(self.directory / "node.sqlite", synchronous="NORMAL")
        assert self.store.tables() == [TABLE]

    # --- checks ---------------------------------------------------------------------------------

    def _held(
        self,
        pk: int,
        start: ClusteringBound = UNBOUNDED,
        end: ClusteringBound = UNBOUNDED,
    ) -> HeldPartition | None:
        raw = self.store.read_mutation(TABLE, (i32(pk),), start=start, end=end)
        return None if raw is None else HELD.hold(raw)

    @invariant()
    def partitions_read_like_the_model(self) -> None:
        for pk in (0, 1):
            held = self._held(pk)
            for now_s in (self.now_s, self.now_s + 5):
                stored = self.store.read_partition(TABLE, (i32(pk),), now_s=now_s)
                assert [_as_model(row) for row in stored] == self.model.read(pk, now_s), (pk, now_s)
                assert HELD.read_partition(held, now_s=now_s) == stored

    @rule(
        pk=partitions,
        start=bounds,
        end=bounds,
        reverse=st.booleans(),
        limit=st.none() | st.integers(1, 3),
        columns=column_sets,
    )
    def slice_reads_like_the_model(
        self,
        pk: int,
        start: Bound,
        end: Bound,
        reverse: bool,
        limit: int | None,
        columns: list[str] | None,
    ) -> None:
        expected = [
            row
            for row in self.model.read(pk, self.now_s)
            if row.clustering is not None and inside(row.clustering, start, end)
        ]
        if start is None and end is None:
            expected = self.model.read(pk, self.now_s)
        if reverse:
            expected.reverse()
        if limit is not None:
            expected = expected[:limit]
        stored = self.store.read_partition(
            TABLE,
            (i32(pk),),
            start=_bound(start),
            end=_bound(end),
            reverse=reverse,
            limit=limit,
            now_s=self.now_s,
        )
        assert [_as_model(row) for row in stored] == expected
        low, high = _bound(start), _bound(end)
        readers = (
            partial(self.store.read_partition, TABLE, (i32(pk),)),
            partial(HELD.read_partition, self._held(pk, low, high)),
        )
        for chosen in (None, columns):
            wanted, found = (
                read(
                    start=low,
                    end=high,
                    columns=chosen,
                    reverse=reverse,
                    limit=limit,
                    now_s=self.now_s,
                )
                for read in readers
            )
            assert found == wanted

    @rule(page_size=st.integers(1, 4), columns=column_sets)
    def scan_reads_like_the_model(self, page_size: int, columns: list[str] | None) -> None:
        expected = []
        for pk in sorted((0, 1), key=lambda pk: murmur3_token(i32(pk))):
            expected += self.model.read(pk, self.now_s)
        found: list[ResultRow] = []
        state = None
        for _ in range(100):
            page = self.store.scan(
                TABLE,
                MIN_TOKEN,
                MIN_TOKEN,
                page_size=page_size,
                paging_state=state,
                now_s=self.now_s,
            )
            found += page.rows
            state = page.paging_state
            if state is None:
                break
        assert [_as_model(row) for row in found] == expected
        held = [p for p in (self._held(0), self._held(1)) if p is not None]
        for chosen in (None, columns):
            wanted = _pages(partial(self.store.scan, TABLE), page_size, chosen, self.now_s)
            got = _pages(partial(HELD.scan, held), page_size, chosen, self.now_s)
            assert got == wanted


def _pages(
    scan: Callable[..., ScanPage], page_size: int, columns: list[str] | None, now_s: int
) -> list[list[ResultRow]]:
    """Every page of a full-ring scan (so that page boundaries are compared too)."""
    pages: list[list[ResultRow]] = []
    state = None
    for _ in range(100):
        page = scan(
            MIN_TOKEN,
            MIN_TOKEN,
            page_size=page_size,
            paging_state=state,
            columns=columns,
            now_s=now_s,
        )
        pages.append(page.rows)
        state = page.paging_state
        if state is None:
            return pages
    raise AssertionError("the scan did not end in 100 pages")


class PackedRowsMachine(StoreMachine):
    """The same rules on a table whose rows are stored packed (one atom per written row, the
    CDC log tables' form): versions of a row must merge exactly as per-cell LWW does."""

    PACKED_ROWS = True


StoreMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=35, deadline=None)
PackedRowsMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=35, deadline=None
)
TestStoreAgainstModel = StoreMachine.TestCase
TestPackedRowsAgainstModel = PackedRowsMachine.TestCase
