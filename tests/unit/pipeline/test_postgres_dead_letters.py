"""The PostgreSQL sink's fallback without a server: a flush PostgreSQL refuses with a data error
is rolled back and applied change by change; the refused changes go to the dead letters with the
reason, the others are committed, and any other error still fails the task.

The connection is a fake with psycopg's transaction semantics (a failed block leaves nothing)
that refuses, as psycopg does before sending, a text parameter holding U+0000."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

from ringflow.cdc import CdcOperation
from ringflow.pipeline import Change, table_to_json
from ringflow.pipeline import _postgres as postgres
from ringflow.pipeline._postgres import PostgresConfig, _TaskWriter, parse_options
from ringflow.schema import INT, TEXT, Table, timeuuid_from_micros

TABLE = Table.create("shop", "orders", partition_key=[("id", INT)], regular=[("note", TEXT)])


class FakeConnection:
    """Committed parameter rows; a transaction that raises leaves none of its rows."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.committed: list[tuple[object, ...]] = []
        self.transactions = 0
        self.failure = failure
        self._open: list[tuple[object, ...]] | None = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.transactions += 1
        self._open = []
        try:
            yield
        finally:
            rows, self._open = self._open, None
        self.committed.extend(rows)

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)


class FakeCursor:
    def __init__(self, connection: FakeConnection) -> None:
        self.connection = connection

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *_: Any) -> None:
        pass

    def executemany(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        if self.connection.failure is not None:
            raise self.connection.failure
        for row in rows:
            if any(isinstance(value, str) and "\x00" in value for value in row):
                raise pg_errors.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        assert self.connection._open is not None
        self.connection._open.extend(rows)


def change(key: int, note: str) -> Change:
    time = timeuuid_from_micros(1_700_000_000_000_000 + key, key)
    return Change("shop", "orders", CdcOperation.INSERT, time, {"id": key}, values={"note": note})


def config(rows_per_transaction: int = 100, dead_letters: bool = True) -> PostgresConfig:
    options = {
        "url": "postgresql://u@127.0.0.1:1/db",
        "table": "shop_orders",
        "schema": table_to_json(TABLE),
        "rows_per_transaction": str(rows_per_transaction),
    }
    if dead_letters:
        options.update(dead_letters="127.0.0.5,127.0.0.6:9142", channel="postgres")
    return parse_options(options)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str, list[tuple[Change, str]]]]:
    calls: list[tuple[Any, str, list[tuple[Change, str]]]] = []

    def record(options: Any, channel: str, refused: list[tuple[Change, str]]) -> int:
        calls.append((options, channel, list(refused)))
        return len(refused)

    monkeypatch.setattr(postgres, "record_dead_letters", record)
    return calls


def committed_keys(connection: FakeConnection) -> list[object]:
    return sorted(row[0] for row in connection.committed)


def test_a_refused_row_becomes_a_dead_letter_and_the_rest_is_applied(
    recorded: list[tuple[Any, str, list[tuple[Change, str]]]],
) -> None:
    connection = FakeConnection()
    writer = _TaskWriter(config(rows_per_transaction=4), connection)  # type: ignore[arg-type]
    bad = change(3, "nul\x00here")
    for item in [change(1, "a"), change(2, "b"), bad, change(4, "d"), change(5, "e")]:
        writer.add(item)
    writer.flush()

    assert committed_keys(connection) == [1, 2, 4, 5]
    assert (writer.applied, writer.refused) == (4, 1)
    ((options, channel, refused),) = recorded
    assert (options.contact_points, options.port, options.keyspace) == (
        ("127.0.0.5", "127.0.0.6"),
        9142,
        "system_replication",
    )
    assert channel == "postgres"
    assert refused[0][0] == bad
    assert "DataError" in refused[0][1] and "NUL (0x00)" in refused[0][1]
    # the first flush of 4 failed whole, then 4 transactions of one; the last flush of 1 passed
    assert connection.transactions == 1 + 4 + 1


def test_without_dead_letters_a_refused_row_still_fails_the_task(
    recorded: list[tuple[Any, str, list[tuple[Change, str]]]],
) -> None:
    connection = FakeConnection()
    writer = _TaskWriter(config(dead_letters=False), connection)  # type: ignore[arg-type]
    writer.add(change(1, "a"))
    writer.add(change(2, "\x00"))
    with pytest.raises(psycopg.DataError):
        writer.flush()
    assert connection.committed == [] and recorded == []


@pytest.mark.parametrize(
    "failure",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        pg_errors.UniqueViolation("duplicate key"),
    ],
)
def test_other_failures_fail_the_task_and_record_nothing(
    failure: Exception, recorded: list[tuple[Any, str, list[tuple[Change, str]]]]
) -> None:
    connection = FakeConnection(failure)
    writer = _TaskWriter(config(), connection)  # type: ignore[arg-type]
    writer.add(change(1, "a"))
    with pytest.raises(type(failure)):
        writer.flush()
    assert recorded == []


def test_dead_letter_options_are_checked() -> None:
    with pytest.raises(postgres.PipelineConfigError, match="channel"):
        parse_options({**_base(), "dead_letters": "127.0.0.1"})
    with pytest.raises(postgres.PipelineConfigError, match="dead_letters"):
        parse_options({**_base(), "dead_letters": "a:b:c/d", "channel": "pg"})


def _base() -> dict[str, str]:
    return {"url": "postgresql://u@h/db", "table": "t", "schema": table_to_json(TABLE)}
