"""Property: CQL writes with client timestamps read back as a last-write-wins model says.

A random sequence of INSERT, UPDATE, column/row/range/partition DELETE, each ``USING TIMESTAMP``
drawn from a small range (so ties are frequent), applied in any order; then a paged full scan
must equal the model: per cell the highest timestamp wins, a tombstone beats a live cell at the
same timestamp, the greater value wins between live cells; a deletion shadows everything written
at or before its timestamp; a row exists while its row marker or a cell is live
(cassandra-core.md §6).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.cql._exec_harness import ExecNode, node_with_keyspace

KEYS = st.integers(0, 2)
CLUSTERINGS = st.integers(0, 3)
TIMESTAMPS = st.integers(1, 6)
VALUES = st.sampled_from(["a", "b", "c"])


@dataclass
class Model:
    markers: dict[tuple[int, int], int] = field(default_factory=dict)
    cells: dict[tuple[int, int], tuple[int, bool, str]] = field(default_factory=dict)
    row_deletions: dict[tuple[int, int], int] = field(default_factory=dict)
    partition_deletions: dict[int, int] = field(default_factory=dict)
    ranges: list[tuple[int, int, int, int]] = field(default_factory=list)  # k, low, high, ts

    def write_cell(self, key: tuple[int, int], ts: int, value: str | None) -> None:
        new = (ts, value is None, value or "")
        old = self.cells.get(key)
        if old is None or new > old:  # timestamp, then tombstone, then greater value
            self.cells[key] = new

    def deleted_at(self, k: int, c: int) -> int:
        covering = [ts for kk, low, high, ts in self.ranges if kk == k and low <= c < high]
        return max(
            [self.partition_deletions.get(k, 0), self.row_deletions.get((k, c), 0), *covering]
        )

    def rows(self) -> set[tuple[int, int, str | None]]:
        found = set()
        for key in set(self.markers) | set(self.cells):
            deleted = self.deleted_at(*key)
            marker = self.markers.get(key, 0) > deleted
            cell = self.cells.get(key)
            value = cell[2] if cell and cell[0] > deleted and not cell[1] else None
            if marker or value is not None:
                found.add((*key, value))
        return found


@st.composite
def operations(draw: st.DrawFn) -> tuple[str, tuple[object, ...]]:
    kind = draw(st.sampled_from(["insert", "update", "delete_v", "row", "range", "partition"]))
    k, c, ts = draw(KEYS), draw(CLUSTERINGS), draw(TIMESTAMPS)
    if kind in ("insert", "update"):
        return kind, (k, c, ts, draw(st.one_of(VALUES, st.none())))
    if kind == "range":
        low = draw(CLUSTERINGS)
        return kind, (k, low, low + draw(st.integers(0, 3)), ts)
    return kind, (k, c, ts)


def apply(node: ExecNode, model: Model, table: str, kind: str, args: tuple[object, ...]) -> None:
    if kind in ("insert", "update"):
        k, c, ts, value = args
        assert isinstance(k, int) and isinstance(c, int) and isinstance(ts, int)
        literal = "null" if value is None else f"'{value}'"
        if kind == "insert":
            node.ok(
                f"INSERT INTO {table} (k, c, v) VALUES ({k}, {c}, {literal}) USING TIMESTAMP {ts}"
            )
            model.markers[(k, c)] = max(model.markers.get((k, c), 0), ts)
        else:
            node.ok(
                f"UPDATE {table} USING TIMESTAMP {ts} SET v = {literal} WHERE k = {k} AND c = {c}"
            )
        model.write_cell((k, c), ts, value if isinstance(value, str) else None)
        return
    if kind == "range":
        k, low, high, ts = args
        node.ok(
            f"DELETE FROM {table} USING TIMESTAMP {ts} WHERE k = {k} AND c >= {low} AND c < {high}"
        )
        model.ranges.append((k, low, high, ts))  # type: ignore[arg-type]
        return
    k, c, ts = args
    assert isinstance(k, int) and isinstance(c, int) and isinstance(ts, int)
    if kind == "delete_v":
        node.ok(f"DELETE v FROM {table} USING TIMESTAMP {ts} WHERE k = {k} AND c = {c}")
        model.write_cell((k, c), ts, None)
    elif kind == "row":
        node.ok(f"DELETE FROM {table} USING TIMESTAMP {ts} WHERE k = {k} AND c = {c}")
        model.row_deletions[(k, c)] = max(model.row_deletions.get((k, c), 0), ts)
    else:
        node.ok(f"DELETE FROM {table} USING TIMESTAMP {ts} WHERE k = {k}")
        model.partition_deletions[k] = max(model.partition_deletions.get(k, 0), ts)


@pytest.fixture(scope="module")
def model_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path_factory.mktemp("model"), with_cdc=False)
    yield node
    node.close()


_TABLES = itertools.count()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(operations(), max_size=25), page_size=st.integers(1, 7))
def test_reads_match_the_last_write_wins_model(
    model_node: ExecNode, steps: list[tuple[str, tuple[object, ...]]], page_size: int
) -> None:
    table = f"m{next(_TABLES)}"
    model_node.ok(f"CREATE TABLE {table} (k int, c int, v text, PRIMARY KEY (k, c))")
    model = Model()
    for kind, args in steps:
        apply(model_node, model, table, kind, args)
    rows, _ = model_node.all_pages(f"SELECT k, c, v FROM {table}", page_size=page_size)
    assert len(rows) == len(set(rows))
    assert set(rows) == model.rows()
    model_node.ok(f"DROP TABLE {table}")
    assert model_node.processor.internal_errors == 0
