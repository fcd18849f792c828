"""What every part of the CQL executor shares: limits, errors, the statement context, names.

Rules:

* Every bound on the executor's work (prepared cache, page sizes, IN products, rows examined per
  page, aggregated rows) is a field of :class:`ExecutorLimits`, passed to the processor.
* A statement runs with one :class:`StatementContext`: its bound values by marker index, the
  clock and the random generator (``now()``, ``uuid()``, list paths), so every function of the
  executor is deterministic given the context.
* The error classes here complete ``ringflow.errors`` for the executor's own cases: an unknown
  prepared id (0x2500, carrying the id) and a change to a system keyspace (0x2100, as Cassandra's
  ``UnauthorizedException`` "system keyspace is not user-modifiable").
* Keyspace names the executor reserves: ``system`` and ``system_schema`` (node-local, written by
  the node itself), the CDC description keyspaces ``system_distributed`` and
  ``system_distributed_everywhere`` and the replica-side replication keyspace
  ``system_replication`` and the roles keyspace ``system_auth`` (readable and writable, never
  altered by DDL).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ringflow.cql._wire import CqlValue
from ringflow.errors import ClientError, ErrorCode, InvalidRequest
from ringflow.schema import SchemaAlreadyExists

SYSTEM_KEYSPACE = "system"
SYSTEM_SCHEMA_KEYSPACE = "system_schema"
SYSTEM_DISTRIBUTED_KEYSPACE = "system_distributed"
SYSTEM_DISTRIBUTED_EVERYWHERE_KEYSPACE = "system_distributed_everywhere"
SYSTEM_REPLICATION_KEYSPACE = "system_replication"
SYSTEM_AUTH_KEYSPACE = "system_auth"
LOCAL_KEYSPACES = frozenset({SYSTEM_KEYSPACE, SYSTEM_SCHEMA_KEYSPACE})
DISTRIBUTED_KEYSPACES = frozenset(
    {
        SYSTEM_DISTRIBUTED_KEYSPACE,
        SYSTEM_DISTRIBUTED_EVERYWHERE_KEYSPACE,
        SYSTEM_REPLICATION_KEYSPACE,
        SYSTEM_AUTH_KEYSPACE,
    }
)
RESERVED_KEYSPACES = LOCAL_KEYSPACES | DISTRIBUTED_KEYSPACES

FILTERING_MESSAGE = (
    "Cannot execute this query as it might involve data filtering and thus may have "
    "unpredictable performance. If you want to execute this query despite the performance "
    "unpredictability, use ALLOW FILTERING"
)
NO_KEYSPACE_MESSAGE = (
    "No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename"
)


@dataclass(frozen=True, slots=True)
class ExecutorLimits:
    """Bounds on the executor's caches and on the work one request may cause."""

    max_prepared_statements: int = 10_000
    max_prepared_query_chars: int = 64 * 1024 * 1024
    max_page_size_rows: int = 10_000
    max_unpaged_rows: int = 100_000
    max_rows_examined_per_page: int = 200_000
    max_partition_keys: int = 1_000
    max_clustering_prefixes: int = 1_000
    max_aggregate_rows: int = 1_000_000
    max_batch_statements: int = 10_000
    batch_size_warn_bytes: int = 5 * 1024
    """Cassandra's ``batch_size_warn_threshold`` (5 KiB): a protocol warning above it."""
    batch_size_fail_bytes: int = 50 * 1024
    """Cassandra's ``batch_size_fail_threshold`` (50 KiB): ``Batch too large`` above it."""
    max_list_elements_read: int = 100_000

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidRequest(f"ExecutorLimits.{name} must be a positive int, got {value!r}")


DEFAULT_EXECUTOR_LIMITS = ExecutorLimits()


class UnpreparedStatement(ClientError):
    """EXECUTE or BATCH named a prepared id this node does not hold (0x2500)."""

    code = ErrorCode.UNPREPARED

    def __init__(self, statement_id: bytes) -> None:
        super().__init__(
            f"Prepared query with ID {statement_id.hex()} not found (either the query was not "
            "prepared on this host (maybe the host has been restarted?) or you have prepared "
            "too many queries and it has been evicted from the internal cache)"
        )
        self.statement_id = statement_id


class Unauthorized(ClientError):
    """A change to a keyspace users may not modify (0x2100)."""

    code = ErrorCode.UNAUTHORIZED


class TypeAlreadyExists(SchemaAlreadyExists):
    """CREATE TYPE of a type that exists (0x2400; the type's name rides in the table field, as
    Cassandra sends it)."""

    def __init__(self, keyspace: str, name: str) -> None:
        super().__init__(keyspace, name)
        self.args = (f"cannot create type {keyspace}.{name}: it already exists",)


def refuse_reserved_keyspace(keyspace: str) -> None:
    """Unauthorized for DDL on a reserved keyspace."""
    if keyspace in RESERVED_KEYSPACES:
        raise Unauthorized(f"{keyspace} keyspace is not user-modifiable.")


def refuse_local_writes(keyspace: str) -> None:
    """Unauthorized for client writes to the node-local system keyspaces."""
    if keyspace in LOCAL_KEYSPACES:
        raise Unauthorized(f"{keyspace} keyspace is not user-modifiable.")


@dataclass(slots=True)
class TimestampSource:
    """The coordinator's write timestamps: ``max(now_us, last + 1)``, monotonic (cassandra-core.md
    §6.1 "Coordinator timestamps")."""

    clock_us: Callable[[], int]
    last_us: int = -(2**63)

    def next(self) -> int:
        now = self.clock_us()
        self.last_us = max(now, self.last_us + 1)
        return self.last_us


@dataclass(slots=True)
class StatementContext:
    """One statement's bound values (by marker index) and its sources of time and randomness."""

    values: Mapping[int, CqlValue]
    clock_us: Callable[[], int]
    rng: random.Random
    keyspace: str | None = None
    now_us: int = field(default=0)

    def __post_init__(self) -> None:
        if self.now_us == 0:
            self.now_us = self.clock_us()

    @property
    def now_s(self) -> int:
        return self.now_us // 1_000_000


def require_keyspace(keyspace: str | None, session_keyspace: str | None) -> str:
    """The statement's keyspace, or the session's; Invalid when there is none."""
    found = keyspace if keyspace is not None else session_keyspace
    if found is None:
        raise InvalidRequest(NO_KEYSPACE_MESSAGE)
    return found
