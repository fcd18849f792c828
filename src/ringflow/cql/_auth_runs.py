"""Auth work run with no thread waiting for the cluster (issue 21 §1).

A login's role read, a role or permission statement, a DDL's grants, a statement's grants and
the default superuser's set-up are ordinary code over ``AuthRows`` (``AuthService``,
``RoleStatements``). On a cluster node their reads and writes go through the coordinator, and
no thread may wait for them. ``run_auth`` runs such work over ``HeldAuthRows``:

* A read is answered from what the work's earlier runs had read. The first one not held ends
  the run (``AuthRowsMissing``): that read is started through ``AuthIO`` (a future; no thread
  waits for it) and, once it is here, the work runs again from its start, on ``submit`` (a
  thread that waits for nothing: a login's or a role's bcrypt is CPU), until a run needs no new
  read.
* The writes of a run are collected, not made. Those of the last run are made in their order,
  each once the one before is acknowledged (QUORUM), then the service's caches are dropped, as
  after any change made through this node. A failed write fails the work; nothing after it is
  written.
* Only the last run's outcome counts. A run that ended early made no write; the timestamps it
  took are never used. The work must otherwise be pure (counters such as failed logins move
  only on an outcome, and no run ends on one before its reads are held).
* Bounded: at most ``MAX_AUTH_RUNS`` runs (each but the last adds one read; a role graph is
  read one role per run), else InternalError naming the bound.

With an ``AuthIO`` whose futures are done at once (a single node: the local store) every run is
made on the calling thread, in a loop (no recursion however many runs).
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from ringflow.cql._auth_tables import AuthRows
from ringflow.errors import Consistency, InternalError
from ringflow.schema import Mutation, Table
from ringflow.storage import ResultRow

_T = TypeVar("_T")

MAX_AUTH_RUNS = 512
"""Runs of one piece of auth work at most (each run but the last reads one more partition:
a role graph of at most ``MAX_ROLE_DEPTH`` levels and ``roles_cache_max_entries`` roles is read
in fewer)."""

AuthRead = tuple[str, str, str | None, Consistency]
"""A read of auth rows: ``("read", table, key, consistency)`` or ``("scan", table, None, ...)``."""
Submit = Callable[[Callable[[], None]], object]
"""Runs its argument on a thread that waits for nothing (an executor's ``submit``)."""


class AuthRowsMissing(Exception):
    """A run of auth work read rows not held yet (``HeldAuthRows``): the run ends here."""

    def __init__(self, read: AuthRead, table: Table) -> None:
        super().__init__(f"auth rows not held yet: {read}")
        self.read = read
        self.table = table


class AuthIO(Protocol):
    """Reads and writes of ``system_auth`` rows, started at once, answered by a future."""

    def read(
        self, table: Table, key: str, consistency: Consistency
    ) -> concurrent.futures.Future[list[ResultRow]]: ...

    def scan(
        self, table: Table, consistency: Consistency
    ) -> concurrent.futures.Future[list[ResultRow]]: ...

    def write(
        self, mutations: Sequence[Mutation], consistency: Consistency
    ) -> concurrent.futures.Future[None]: ...


class HeldAuthRows:
    """``AuthRows`` of one run: reads answered from ``held`` (AuthRowsMissing otherwise),
    writes collected in ``writes``."""

    def __init__(self, tables: AuthRows, held: dict[AuthRead, list[ResultRow]]) -> None:
        self._tables = tables
        self._held = held
        self.writes: list[tuple[list[Mutation], Consistency]] = []

    def table(self, name: str) -> Table:
        return self._tables.table(name)

    def _held_rows(self, read: AuthRead, table: Table) -> list[ResultRow]:
        rows = self._held.get(read)
        if rows is None:
            raise AuthRowsMissing(read, table)
        return list(rows)

    def read(self, table: Table, key: str, consistency: Consistency) -> list[ResultRow]:
        return self._held_rows(("read", table.name, key, consistency), table)

    def scan(self, table: Table, consistency: Consistency) -> list[ResultRow]:
        return self._held_rows(("scan", table.name, None, consistency), table)

    def write(self, mutations: Sequence[Mutation], consistency: Consistency) -> None:
        self.writes.append((list(mutations), consistency))


def _start(io: AuthIO, missing: AuthRowsMissing) -> concurrent.futures.Future[list[ResultRow]]:
    kind, _name, key, consistency = missing.read
    if kind == "scan":
        return io.scan(missing.table, consistency)
    assert key is not None
    return io.read(missing.table, key, consistency)


def run_auth(
    work: Callable[[HeldAuthRows], _T],
    tables: AuthRows,
    io: AuthIO,
    submit: Submit | None = None,
    written: Callable[[], None] | None = None,
) -> concurrent.futures.Future[_T]:
    """Run ``work`` over held rows until a run needs no new read, then make its writes (module
    docstring). The first run is made on this thread, the later ones on ``submit`` (this
    thread, or the one that finished a read, without it); ``written`` is called once the
    writes are acknowledged (the caches dropped). The future holds the last run's outcome, or
    the error that ended the work."""
    outcome: concurrent.futures.Future[_T] = concurrent.futures.Future()
    held: dict[AuthRead, list[ResultRow]] = {}

    def fail(error: BaseException) -> None:
        if not outcome.done():
            outcome.set_exception(error)

    def runs_from(first: int) -> None:
        runs = first
        while True:
            rows = HeldAuthRows(tables, held)
            try:
                answer = work(rows)
            except AuthRowsMissing as missing:
                if runs >= MAX_AUTH_RUNS:
                    fail(InternalError(f"auth work still lacked rows after {runs} runs"))
                    return
                try:
                    reading = _start(io, missing)
                except Exception as error:  # shutting down
                    fail(error)
                    return
                if not reading.done():
                    reading.add_done_callback(functools.partial(arrived, missing, runs))
                    return
                if not hold(reading, missing):
                    return
                runs += 1
                continue
            except BaseException as error:
                fail(error)
                return
            write_all(rows.writes, answer)
            return

    def hold(done: concurrent.futures.Future[list[ResultRow]], missing: AuthRowsMissing) -> bool:
        try:
            held[missing.read] = done.result()
        except BaseException as error:
            fail(error)
            return False
        return True

    def arrived(
        missing: AuthRowsMissing, runs: int, done: concurrent.futures.Future[list[ResultRow]]
    ) -> None:
        if not hold(done, missing):
            return
        try:
            (submit or _inline)(lambda: runs_from(runs + 1))
        except Exception as error:  # shutting down
            fail(error)

    def write_all(writes: list[tuple[list[Mutation], Consistency]], answer: _T) -> None:
        def step(index: int) -> None:
            while index < len(writes):
                mutations, consistency = writes[index]
                try:
                    writing = io.write(mutations, consistency)
                except Exception as error:
                    finish(error)
                    return
                if not writing.done():
                    writing.add_done_callback(functools.partial(acknowledged, index))
                    return
                if (refused := writing.exception()) is not None:
                    finish(refused)
                    return
                index += 1
            finish(None)

        def acknowledged(index: int, done: concurrent.futures.Future[None]) -> None:
            if (error := done.exception()) is not None:
                finish(error)
            else:
                step(index + 1)

        def finish(error: BaseException | None) -> None:
            if writes and written is not None:
                written()  # a failed write may still have been applied somewhere
            if error is not None:
                fail(error)
            elif not outcome.done():
                outcome.set_result(answer)

        step(0)

    runs_from(1)
    return outcome


def _inline(run: Callable[[], None]) -> None:
    run()
