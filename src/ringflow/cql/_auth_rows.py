"""``AuthRows`` over the processor's data plane: ``system_auth`` reads and writes go where the
statement's would (the local store on a single node, the coordinator on a cluster node).

Reads use the plane's ``read`` with a closure over the rows it hands out (a cluster node's
coordinated reader), so a role read at QUORUM is a coordinated read with read repair like any
SELECT's; writes are one ``DataPlane.write`` without CDC.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ringflow.cql._auth_tables import SYSTEM_AUTH_KEYSPACE
from ringflow.cql._results import VoidResult
from ringflow.errors import Consistency
from ringflow.ring import MIN_TOKEN
from ringflow.schema import TEXT, Mutation, Table, serialize
from ringflow.storage import ResultRow

if TYPE_CHECKING:
    from ringflow.cql._exec_select import RowReader
    from ringflow.cql._executor import DataPlane

SCAN_PAGE_ROWS = 1000
MAX_SCAN_ROWS = 100_000
"""A scan of a ``system_auth`` table stops here (a bound; Cassandra has no such table size)."""


class PlaneAuthRows:
    def __init__(self, plane: Callable[[], DataPlane], clock_us: Callable[[], int]) -> None:
        self._plane = plane
        self._clock_us = clock_us

    def table(self, name: str) -> Table:
        from ringflow.cql._exec_system import DISTRIBUTED_TABLES

        return DISTRIBUTED_TABLES[(SYSTEM_AUTH_KEYSPACE, name)]

    def read(self, table: Table, key: str, consistency: Consistency) -> list[ResultRow]:
        found: list[ResultRow] = []
        now_s = self._clock_us() // 1_000_000

        def run(rows: RowReader) -> VoidResult:
            found.extend(rows.read_partition(table, [serialize(TEXT, key)], now_s=now_s))
            return VoidResult()

        self._plane().read(consistency, run)
        return [row for row in found if not row.static_only]

    def scan(self, table: Table, consistency: Consistency) -> list[ResultRow]:
        found: list[ResultRow] = []
        now_s = self._clock_us() // 1_000_000

        def run(rows: RowReader) -> VoidResult:
            state: bytes | None = None
            while len(found) < MAX_SCAN_ROWS:
                page = rows.scan(
                    table,
                    MIN_TOKEN,
                    MIN_TOKEN,
                    page_size=SCAN_PAGE_ROWS,
                    paging_state=state,
                    now_s=now_s,
                )
                found.extend(page.rows)
                state = page.paging_state
                if state is None:
                    break
            return VoidResult()

        self._plane().read(consistency, run)
        return found

    def write(self, mutations: Sequence[Mutation], consistency: Consistency) -> None:
        self._plane().write(mutations, {}, consistency, self._clock_us())
