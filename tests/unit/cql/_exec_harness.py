"""An in-process node for executor tests: a Store in a temporary directory, a settable clock, a
seeded random generator and CDC metadata with one generation, plus helpers that run CQL text and
decode the answers into Python values (the codec's forms)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringflow.cdc import CdcMetadata, generate_topology_description
from ringflow.cql._error_responses import AlreadyExistsResponse, ErrorResponse, UnpreparedResponse
from ringflow.cql._executor import NodeIdentity, QueryProcessor, SessionState
from ringflow.cql._requests import Execute, Prepare, Query, QueryParameters
from ringflow.cql._results import PreparedResult, RowsResult
from ringflow.cql._wire import Consistency, CqlValue
from ringflow.schema import CqlType, deserialize, serialize
from ringflow.storage import Store

START_US = 1_700_000_000_000_000
"""The test clock's start: 2023-11-14T22:13:20Z, in µs."""
GENERATION_MS = 1_600_000_000_000
RING = [-(10**18), 0, 10**18]

ErrorLike = ErrorResponse | AlreadyExistsResponse | UnpreparedResponse


def cdc_metadata(now_us: int = START_US) -> CdcMetadata:
    """CDC metadata with one generation (3 vnodes, 2 shards each) operating since 2020."""
    metadata = CdcMetadata()
    description = generate_topology_description(RING, lambda token: (2, 12), random.Random(7))
    assert metadata.insert(GENERATION_MS, description, now_us)
    return metadata


@dataclass
class TestClock:
    now_us: int = START_US

    def __call__(self) -> int:
        return self.now_us

    def advance(self, seconds: float) -> None:
        self.now_us += round(seconds * 1_000_000)


@dataclass
class ExecNode:
    """One processor over one store; ``q`` runs CQL text in ``session``."""

    path: Path
    clock: TestClock = field(default_factory=TestClock)
    seed: int = 1
    with_cdc: bool = True
    store: Store = field(init=False)
    processor: QueryProcessor = field(init=False)
    session: SessionState = field(default_factory=SessionState)

    def __post_init__(self) -> None:
        self.store = Store(self.path / "node.sqlite", synchronous="NORMAL")
        self.open()

    def open(self) -> None:
        cdc = cdc_metadata(self.clock.now_us) if self.with_cdc else None
        self.processor = QueryProcessor(
            self.store,
            node=NodeIdentity(uuid.UUID(int=1)),
            clock=self.clock,
            cdc=cdc,
            rng=random.Random(self.seed),
        )

    def restart(self) -> None:
        self.store.close()
        self.store = Store(self.path / "node.sqlite", synchronous="NORMAL")
        self.session = SessionState()
        self.open()

    def close(self) -> None:
        self.processor.validate()
        self.store.close()

    # --- requests ------------------------------------------------------------------------------

    def raw(
        self,
        text: str,
        values: Sequence[CqlValue] = (),
        *,
        names: Sequence[str] | None = None,
        page_size: int | None = None,
        paging_state: bytes | None = None,
        consistency: Consistency = Consistency.ONE,
        timestamp: int | None = None,
    ) -> Any:
        parameters = QueryParameters(
            consistency,
            values=tuple(values),
            names=None if names is None else tuple(names),
            page_size=page_size,
            paging_state=paging_state,
            default_timestamp=timestamp,
        )
        return self.processor.query(Query(text, parameters), self.session)

    def q(self, text: str, *values: CqlValue, **options: Any) -> Any:
        """Run ``text``; rows as tuples of Python values, or the non-row response."""
        response = self.raw(text, values, **options)
        if isinstance(response, RowsResult):
            return decode_rows(response)
        return response

    def ok(self, text: str, *values: CqlValue, **options: Any) -> Any:
        """Like :meth:`q`, failing the test on an error response."""
        response = self.q(text, *values, **options)
        assert not isinstance(response, ErrorLike), f"{text!r} failed: {response}"
        return response

    def error(self, text: str, *values: CqlValue, **options: Any) -> ErrorLike:
        response = self.raw(text, values, **options)
        assert isinstance(response, ErrorLike), f"{text!r} did not fail: {response}"
        return response

    def prepare(self, text: str) -> PreparedResult:
        response = self.processor.prepare(Prepare(text), self.session)
        assert isinstance(response, PreparedResult), response
        return response

    def execute(
        self,
        statement_id: bytes,
        values: Sequence[CqlValue] = (),
        *,
        names: Sequence[str] | None = None,
        page_size: int | None = None,
        skip_metadata: bool = False,
    ) -> Any:
        parameters = QueryParameters(
            Consistency.ONE,
            values=tuple(values),
            names=None if names is None else tuple(names),
            page_size=page_size,
            skip_metadata=skip_metadata,
        )
        return self.processor.execute(Execute(statement_id, parameters), self.session)

    def all_pages(self, text: str, *values: CqlValue, page_size: int) -> tuple[list[Any], int]:
        """Every row of ``text`` fetched ``page_size`` at a time, and the number of pages."""
        rows: list[Any] = []
        state = None
        pages = 0
        while True:
            response = self.raw(text, values, page_size=page_size, paging_state=state)
            assert isinstance(response, RowsResult), response
            rows.extend(decode_rows(response))
            pages += 1
            state = response.metadata.paging_state
            if state is None:
                return rows, pages


def decode_rows(response: RowsResult) -> list[tuple[Any, ...]]:
    columns = response.metadata.columns
    assert columns is not None
    return [
        tuple(
            None if cell is None else deserialize(c.type, cell)
            for cell, c in zip(row, columns, strict=True)
        )
        for row in response.rows
    ]


def column_names(response: RowsResult) -> list[str]:
    assert response.metadata.columns is not None
    return [column.name for column in response.metadata.columns]


def value(cql_type: CqlType, python: object) -> bytes:
    """A bound value as a driver would send it."""
    return serialize(cql_type, python)


KEYSPACE_CQL = (
    "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
)


def node_with_keyspace(path: Path, **options: Any) -> ExecNode:
    node = ExecNode(path, **options)
    node.ok(KEYSPACE_CQL)
    node.ok("USE ks")
    return node
