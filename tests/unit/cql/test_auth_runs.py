"""``run_auth``: auth work over held rows, its reads and writes started with no thread waiting
(issue 21 §1). The IO here is a recording fake whose futures the test completes, standing for
the cluster's coordinator; the auth logic run over it is the real ``AuthService``."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Sequence

import pytest

from ringflow.cql._auth_rows import auth_table
from ringflow.cql._auth_runs import MAX_AUTH_RUNS, HeldAuthRows, run_auth
from ringflow.cql._auth_tables import ROLES, role_mutation
from ringflow.errors import Consistency, InternalError, Unavailable
from ringflow.schema import Mutation, Table
from ringflow.storage import ResultRow


class Tables:
    def table(self, name: str) -> Table:
        return auth_table(name)

    def read(self, table: Table, key: str, consistency: Consistency) -> list[ResultRow]:
        raise AssertionError("held rows only")

    def scan(self, table: Table, consistency: Consistency) -> list[ResultRow]:
        raise AssertionError("held rows only")

    def write(self, mutations: Sequence[Mutation], consistency: Consistency) -> None:
        raise AssertionError("held rows only")


class RecordingIO:
    """Reads and writes started, each a future the test completes (``at_once``: completed
    with no rows / acknowledged as they are started)."""

    def __init__(self, *, at_once: bool = False) -> None:
        self.at_once = at_once
        self.reads: list[tuple[str, str | None, concurrent.futures.Future[list[ResultRow]]]] = []
        self.writes: list[tuple[list[Mutation], concurrent.futures.Future[None]]] = []

    def read(
        self, table: Table, key: str, consistency: Consistency
    ) -> concurrent.futures.Future[list[ResultRow]]:
        return self._reading(table.name, key)

    def scan(
        self, table: Table, consistency: Consistency
    ) -> concurrent.futures.Future[list[ResultRow]]:
        return self._reading(table.name, None)

    def _reading(self, name: str, key: str | None) -> concurrent.futures.Future[list[ResultRow]]:
        future: concurrent.futures.Future[list[ResultRow]] = concurrent.futures.Future()
        if self.at_once:
            future.set_result([])
        self.reads.append((name, key, future))
        return future

    def write(
        self, mutations: Sequence[Mutation], consistency: Consistency
    ) -> concurrent.futures.Future[None]:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self.at_once:
            future.set_result(None)
        self.writes.append((list(mutations), future))
        return future


def _role(name: str, timestamp: int) -> Mutation:
    return role_mutation(auth_table(ROLES), name, timestamp, superuser=False, login=True)


def _reading_roles(names: Sequence[str], runs: list[int]) -> Callable[[HeldAuthRows], str]:
    """Work that reads each role in turn, then writes one mutation per role read."""

    def work(rows: HeldAuthRows) -> str:
        runs.append(1)
        table = rows.table(ROLES)
        for name in names:
            rows.read(table, name, Consistency.QUORUM)
        rows.write([_role(name, 1) for name in names], Consistency.QUORUM)
        rows.write([_role("after", 2)], Consistency.QUORUM)
        return "answer"

    return work


def test_reads_are_started_one_run_at_a_time_and_writes_follow_the_last_run() -> None:
    io, runs, written = RecordingIO(), [], []
    outcome = run_auth(
        _reading_roles(["a", "b"], runs), Tables(), io, written=lambda: written.append(1)
    )
    assert [(name, key) for name, key, _ in io.reads] == [("roles", "a")]
    assert not outcome.done() and runs == [1] and not io.writes
    io.reads[0][2].set_result([])  # the first read arrives: the work runs again
    assert [(name, key) for name, key, _ in io.reads] == [("roles", "a"), ("roles", "b")]
    assert not io.writes, "a run that lacked rows wrote nothing"
    io.reads[1][2].set_result([])
    assert len(runs) == 3
    assert len(io.writes) == 1, "the second write waits for the first one's acknowledgement"
    assert not outcome.done() and not written
    io.writes[0][1].set_result(None)
    assert len(io.writes) == 2
    io.writes[1][1].set_result(None)
    assert outcome.result(0) == "answer"
    assert written == [1], "the caches are dropped once the writes are acknowledged"


def test_a_refused_write_fails_the_work_and_nothing_after_it_is_written() -> None:
    io, written = RecordingIO(), []
    outcome = run_auth(_reading_roles([], []), Tables(), io, written=lambda: written.append(1))
    io.writes[0][1].set_exception(Unavailable(Consistency.QUORUM, 2, 1))
    with pytest.raises(Unavailable):
        outcome.result(0)
    assert len(io.writes) == 1
    assert written == [1], "a refused write may still have been applied somewhere"


def test_a_failed_read_fails_the_work_and_writes_nothing() -> None:
    io = RecordingIO()
    outcome = run_auth(_reading_roles(["a"], []), Tables(), io)
    io.reads[0][2].set_exception(Unavailable(Consistency.QUORUM, 2, 1))
    with pytest.raises(Unavailable):
        outcome.result(0)
    assert not io.writes


def _until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("not true after 5 s")


def test_later_runs_are_made_on_submit() -> None:
    io, threads, runs = RecordingIO(), [], []
    work = _reading_roles(["a"], runs)

    def recording(rows: HeldAuthRows) -> str:
        threads.append(threading.current_thread().name)
        return work(rows)

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="auth") as pool:
        outcome = run_auth(recording, Tables(), io, pool.submit)
        io.reads[0][2].set_result([])
        _until(lambda: len(io.writes) == 1)
        io.writes[0][1].set_result(None)
        _until(lambda: len(io.writes) == 2)
        assert not outcome.done()
        io.writes[1][1].set_result(None)
        assert outcome.result(5) == "answer"
    assert threads[0] == threading.current_thread().name
    assert threads[1].startswith("auth")


def test_done_futures_run_in_a_loop_not_a_recursion_and_the_runs_are_bounded() -> None:
    names = [f"r{index}" for index in range(MAX_AUTH_RUNS - 1)]
    runs: list[int] = []
    io = RecordingIO(at_once=True)
    outcome = run_auth(_reading_roles(names, runs), Tables(), io)
    assert outcome.result(0) == "answer"
    assert len(runs) == MAX_AUTH_RUNS
    assert len(io.reads) == MAX_AUTH_RUNS - 1 and len(io.writes) == 2

    too_many = run_auth(
        _reading_roles([*names, "one more"], []), Tables(), RecordingIO(at_once=True)
    )
    with pytest.raises(InternalError, match=f"after {MAX_AUTH_RUNS} runs"):
        too_many.result(0)


def test_an_error_of_the_last_run_is_the_outcome_and_writes_nothing() -> None:
    io = RecordingIO(at_once=True)

    def work(rows: HeldAuthRows) -> None:
        rows.read(rows.table(ROLES), "a", Consistency.QUORUM)
        rows.write([_role("a", 1)], Consistency.QUORUM)
        raise ValueError("refused after reading")

    with pytest.raises(ValueError, match="refused after reading"):
        run_auth(work, Tables(), io).result(0)
    assert not io.writes
