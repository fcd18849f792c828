"""Tables, value helpers and fixtures-in-functions shared by the storage tests."""

from __future__ import annotations

import uuid
from pathlib import Path

from ringflow.schema import (
    BLOB,
    INT,
    TEXT,
    CdcOptions,
    Cell,
    ClusteringOrder,
    ListType,
    LivenessInfo,
    MapType,
    Mutation,
    PreimageMode,
    Row,
    SetType,
    Table,
    TableOptions,
)
from ringflow.schema._codec import serialize
from ringflow.storage import Store

GC_GRACE_S = 100

EVENTS = Table.create(
    "ks",
    "events",
    partition_key=[("pk", INT)],
    clustering=[("ck", INT, ClusteringOrder.ASC), ("sub", TEXT, ClusteringOrder.DESC)],
    static=[("s", TEXT)],
    regular=[
        ("v", TEXT),
        ("n", INT),
        ("tags", SetType(TEXT)),
        ("attrs", MapType(INT, TEXT)),
        ("items", ListType(INT)),
    ],
    options=TableOptions(gc_grace_seconds=GC_GRACE_S),
    table_id=uuid.UUID(int=1),
)

KV = Table.create(
    "ks", "kv", partition_key=[("k", TEXT)], regular=[("v", BLOB)], table_id=uuid.UUID(int=2)
)

COMPOSITE = Table.create(
    "ks",
    "composite",
    partition_key=[("a", INT), ("b", TEXT)],
    clustering=[("c", INT, ClusteringOrder.ASC)],
    regular=[("v", TEXT)],
    table_id=uuid.UUID(int=3),
)

CDC_BASE = Table.create(
    "ks",
    "orders",
    partition_key=[("pk", INT)],
    clustering=[("ck", INT, ClusteringOrder.ASC)],
    regular=[("v", TEXT), ("w", INT)],
    options=TableOptions(
        cdc=CdcOptions(enabled=True, preimage=PreimageMode.FULL, postimage=True, ttl_s=0)
    ),
    table_id=uuid.UUID(int=4),
)


def i32(value: int) -> bytes:
    return serialize(INT, value)


def txt(value: str) -> bytes:
    return serialize(TEXT, value)


def open_store(path: Path, *tables: Table) -> Store:
    store = Store(path / "node.sqlite", synchronous="NORMAL")
    for table in tables:
        store.register_table(table)
    return store


def insert(
    table: Table,
    pk: tuple[bytes, ...],
    clustering: tuple[bytes, ...],
    values: dict[str, bytes],
    timestamp_us: int = 10,
) -> Mutation:
    """An INSERT: row marker plus live cells."""
    cells = {name: Cell.live(timestamp_us, value) for name, value in values.items()}
    row = Row(clustering, LivenessInfo(timestamp_us), None, cells)
    return Mutation(table.keyspace, table.name, pk, rows=(row,))
