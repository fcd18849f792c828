"""``AuthRows`` over the processor's data plane: ``system_auth`` reads and writes go where the
statement's would (the local store on a single node, the coordinator on a cluster node).

Reads use the plane's ``read`` (``submit_read`` on a cluster node) with a closure over the
rows it hands out (a cluster node's coordinated reader), so a role read at QUORUM is a
coordinated read with read repair like any SELECT's; writes are one ``DataPlane.write``
(``submit_write``) without CDC. ``PlaneAuthIO`` starts them and answers with futures (what
``_auth_runs`` runs auth work over); ``PlaneAuthRows`` waits for them on the calling thread
(a single node's own store).
"""

from __future__ import annotations

import concurrent.futures
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
    from ringflow.cql._executor import DataPlane, SubmitRead, SubmitWrite
    from ringflow.cql._responses import Response

SCAN_PAGE_ROWS = 1000
MAX_SCAN_ROWS = 100_000
"""A scan of a ``system_auth`` table stops here (a bound; Cassandra has no such table size)."""


class PlaneAuthRows:
    """``AuthRows`` over the plane, each read and write waited for on the calling thread (a
    single node: its own store, nothing waits for the cluster): ``PlaneAuthIO`` without the
    plane's submit functions, whose futures are done at once."""

    def __init__(self, plane: Callable[[], DataPlane], clock_us: Callable[[], int]) -> None:
        self._io = PlaneAuthIO(lambda: (plane(), None, None), clock_us)

    def table(self, name: str) -> Table:
        return auth_table(name)

    def read(self, table: Table, key: str, consistency: Consistency) -> list[ResultRow]:
        return self._io.read(table, key, consistency).result()

    def scan(self, table: Table, consistency: Consistency) -> list[ResultRow]:
        return self._io.scan(table, consistency).result()

    def write(self, mutations: Sequence[Mutation], consistency: Consistency) -> None:
        self._io.write(mutations, consistency).result()


class PlaneAuthIO:
    """``AuthIO`` (``_auth_runs``) over the processor's plane: with its ``submit_read`` and
    ``submit_write`` (a cluster node) a read or write is only started and its future answers
    when the coordinator has; without them (a single node) it is made at once."""

    def __init__(
        self,
        plane: Callable[[], tuple[DataPlane, SubmitRead | None, SubmitWrite | None]],
        clock_us: Callable[[], int],
    ) -> None:
        self._plane = plane
        self._clock_us = clock_us

    def read(
        self, table: Table, key: str, consistency: Consistency
    ) -> concurrent.futures.Future[list[ResultRow]]:
        found: list[ResultRow] = []
        run = partition_run(table, key, self._clock_us(), found)
        return self._reading(consistency, run, lambda: [r for r in found if not r.static_only])

    def scan(
        self, table: Table, consistency: Consistency
    ) -> concurrent.futures.Future[list[ResultRow]]:
        found: list[ResultRow] = []
        return self._reading(consistency, scan_run(table, self._clock_us(), found), found.copy)

    def _reading(
        self,
        consistency: Consistency,
        run: Callable[[RowReader], Response],
        rows: Callable[[], list[ResultRow]],
    ) -> concurrent.futures.Future[list[ResultRow]]:
        plane, submit_read, _ = self._plane()
        answer: concurrent.futures.Future[list[ResultRow]] = concurrent.futures.Future()
        if submit_read is None:
            try:
                plane.read(consistency, run)
            except Exception as error:
                answer.set_exception(error)
            else:
                answer.set_result(rows())
            return answer

        def done(read: concurrent.futures.Future[Response]) -> None:
            if (error := read.exception()) is not None:
                answer.set_exception(error)
            else:
                answer.set_result(rows())

        submit_read(consistency, run).add_done_callback(done)
        return answer

    def write(
        self, mutations: Sequence[Mutation], consistency: Consistency
    ) -> concurrent.futures.Future[None]:
        plane, _, submit_write = self._plane()
        if submit_write is not None:
            return submit_write(mutations, {}, consistency, self._clock_us())
        written: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            plane.write(mutations, {}, consistency, self._clock_us())
        except Exception as error:
            written.set_exception(error)
        else:
            written.set_result(None)
        return written


def auth_table(name: str) -> Table:
    from ringflow.cql._exec_system import DISTRIBUTED_TABLES

    return DISTRIBUTED_TABLES[(SYSTEM_AUTH_KEYSPACE, name)]


def partition_run(
    table: Table, key: str, now_us: int, found: list[ResultRow]
) -> Callable[[RowReader], Response]:
    """A read's run over a plane's rows: the partition ``key`` of ``table`` into ``found`` (a
    run made again starts afresh)."""
    now_s = now_us // 1_000_000

    def run(rows: RowReader) -> VoidResult:
        found[:] = rows.read_partition(table, [serialize(TEXT, key)], now_s=now_s)
        return VoidResult()

    return run


def scan_run(table: Table, now_us: int, found: list[ResultRow]) -> Callable[[RowReader], Response]:
    """A scan's run: every row of ``table`` (at most ``MAX_SCAN_ROWS``) into ``found``."""
    now_s = now_us // 1_000_000

    def run(rows: RowReader) -> VoidResult:
        found.clear()
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

    return run
