"""Child process of the crash-safety test: applies numbered batches and acks each one.

Run as ``python crash_child.py DB_PATH FIRST_BATCH``. Batch ``i`` is fully determined by ``i``
(keys, values, timestamps, CDC capture), so re-applying a batch that committed without its ack
is idempotent. Each batch is one ``Store.apply``: a base mutation on a CDC-enabled table (with
pre- and post-images on, so the transaction also reads) captured into its log, plus a second
base mutation on another table. After COMMIT returns the child prints ``ack i`` and flushes.
The parent kills it with SIGKILL at random moments.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from ringflow.cdc._log_rows import CdcCapture
from ringflow.cdc._log_schema import cdc_log_table
from ringflow.schema import (
    BLOB,
    INT,
    TEXT,
    CdcOptions,
    Cell,
    ClusteringOrder,
    LivenessInfo,
    Mutation,
    PreimageMode,
    Row,
    Table,
    TableOptions,
)
from ringflow.schema._codec import serialize
from ringflow.storage import Store

NOW_S = 1_700_000_000
ROWS_PER_BATCH = 4
PAYLOAD_BYTES = 3000
BASE = Table.create(
    "crash",
    "base",
    partition_key=[("pk", INT)],
    clustering=[("ck", INT, ClusteringOrder.ASC)],
    regular=[("v", TEXT), ("payload", BLOB)],
    options=TableOptions(
        cdc=CdcOptions(enabled=True, preimage=PreimageMode.FULL, postimage=True, ttl_s=0)
    ),
    table_id=uuid.UUID(int=0xC0),
)
LOG = cdc_log_table(BASE)
OTHER = Table.create(
    "crash",
    "other",
    partition_key=[("k", INT)],
    regular=[("v", TEXT)],
    table_id=uuid.UUID(int=0xC1),
)
EXPECTED_LOG_ROWS = 2 * ROWS_PER_BATCH  # per new row: an insert delta and a post-image


def stream_id(batch: int) -> bytes:
    return batch.to_bytes(16, "big")


def base_value(batch: int, row: int) -> bytes:
    return serialize(TEXT, f"batch {batch} row {row}")


def batch_mutations(batch: int) -> tuple[list[Mutation], CdcCapture]:
    timestamp_us = NOW_S * 1_000_000 + batch
    payload = bytes([batch % 251]) * PAYLOAD_BYTES
    rows = tuple(
        Row(
            (serialize(INT, row),),
            LivenessInfo(timestamp_us),
            None,
            {
                "v": Cell.live(timestamp_us, base_value(batch, row)),
                "payload": Cell.live(timestamp_us, payload),
            },
        )
        for row in range(ROWS_PER_BATCH)
    )
    base = Mutation("crash", "base", (serialize(INT, batch),), rows=rows)
    other_row = Row(
        (), LivenessInfo(timestamp_us), None, {"v": Cell.live(timestamp_us, base_value(batch, -1))}
    )
    other = Mutation("crash", "other", (serialize(INT, batch),), rows=(other_row,))
    return [base, other], CdcCapture(stream_id(batch), batch)


def open_store(path: Path) -> Store:
    store = Store(path)  # synchronous=FULL, the default
    known = {(table.keyspace, table.name) for table in store.tables()}
    for table in (BASE, LOG, OTHER):
        if (table.keyspace, table.name) not in known:
            store.register_table(table)
    return store


def main(path: str, first_batch: str) -> None:
    store = open_store(Path(path))
    print("ready", flush=True)
    for batch in range(int(first_batch), int(first_batch) + 100_000):
        mutations, capture = batch_mutations(batch)
        store.apply(mutations, now_s=NOW_S, cdc={0: capture})
        print(f"ack {batch}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
