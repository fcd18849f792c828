"""Stores that capture, their writes, and what they hold: shared by the capture tests."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from ringflow.cdc._log_rows import CdcCapture
from ringflow.cdc._log_schema import cdc_log_table
from ringflow.replication import Origin, SliceSettings
from ringflow.schema import CdcOptions, Cell, Mutation, Row, TableOptions
from ringflow.storage import WHOLE_RING, CaptureCap, CaptureConfig, Store
from tests.unit.storage._tables import CDC_BASE, i32, insert, txt

NOW_S = 1_700_000_000
NOW_MS = NOW_S * 1000
NODE = uuid.UUID(int=77)
SETTINGS = SliceSettings(slice_width_s=1, slice_count=2)
DELTA_BASE = replace(CDC_BASE, options=TableOptions(cdc=CdcOptions(enabled=True)))
"""A delta-only CDC table: its log rows take the store's direct path."""
DELTA_LOG = cdc_log_table(DELTA_BASE)
IMAGE_BASE = replace(CDC_BASE, name="images", id=uuid.UUID(int=5))
"""Pre-images (full) and post-images: its log rows are built by the general path."""
IMAGE_LOG = cdc_log_table(IMAGE_BASE)
STREAMS = [bytes([n]) * 8 + bytes(7) + b"\x10" for n in (9, 3, 7)]
RANGES = {STREAMS[0]: (-10, 700), STREAMS[1]: (700, -10), STREAMS[2]: (-10, 700)}
"""Two ranges; the streams' real tokens do not matter to the store."""


@dataclass
class Clock:
    """The node's clock, set by the test."""

    now_ms: int = NOW_MS

    def __call__(self) -> int:
        return self.now_ms


def resolve(_keyspace: str, stream_id: bytes, _timestamp_us: int) -> tuple[int, int] | None:
    return RANGES.get(stream_id)


def capture_store(
    path: Path,
    clock: Clock,
    *,
    name: str = "node.sqlite",
    cap: CaptureCap = CaptureCap(),  # noqa: B008 - frozen value object
    settings: SliceSettings = SETTINGS,
) -> Store:
    """A store of the two CDC tables and their logs, capturing with ``clock``."""
    store = Store(path / name, synchronous="NORMAL")
    for table in (DELTA_BASE, DELTA_LOG, IMAGE_BASE, IMAGE_LOG):
        store.register_table(table)
    store.capture.enable(CaptureConfig(NODE, resolve, clock, settings, cap=cap))
    return store


def write(number: int, timestamp_us: int, table: str = "orders") -> tuple[Mutation, CdcCapture]:
    """Write ``number`` of ``table``: an insert or an update, its stream and cdc$time fixed."""
    keyspace = "ks"
    if number % 2:
        base = DELTA_BASE if table == "orders" else IMAGE_BASE
        mutation = insert(base, (i32(number % 5),), (i32(1),), {"v": txt(f"v{number}")})
        mutation = _at(mutation, timestamp_us)
    else:
        row = Row((i32(1),), None, None, {"w": Cell.live(timestamp_us, i32(number))})
        mutation = Mutation(keyspace, table, (i32(number % 5),), rows=(row,))
    return mutation, CdcCapture(STREAMS[number % 3], number)


def _at(mutation: Mutation, timestamp_us: int) -> Mutation:
    (row,) = mutation.rows
    cells = {name: replace(cell, timestamp_us=timestamp_us) for name, cell in row.cells.items()}
    liveness = None if row.liveness is None else replace(row.liveness, timestamp_us=timestamp_us)
    return replace(mutation, rows=(Row(row.clustering, liveness, None, cells),))


def apply_writes(
    store: Store,
    numbers: list[int],
    timestamp_us: int,
    table: str = "orders",
    origin: Origin = Origin.WRITE,
) -> None:
    writes = [write(number, timestamp_us, table) for number in numbers]
    store.apply(
        [m for m, _ in writes],
        now_s=NOW_S,
        cdc={i: c for i, (_, c) in enumerate(writes)},
        origin=origin,
    )


Columns = tuple[tuple[str, bytes | None], ...]


def log_rows(store: Store) -> Counter[Columns]:
    """Every row of both log tables, as its columns (keys included)."""
    found: Counter[Columns] = Counter()
    for log in (DELTA_LOG, IMAGE_LOG):
        state = None
        while True:
            page = store.scan(log, *WHOLE_RING, page_size=1000, paging_state=state, now_s=NOW_S)
            for row in page.rows:
                (stream,) = row.partition_key
                time, seq_no = row.clustering
                columns = dict(row.values)
                keys = {"cdc$stream_id": stream, "cdc$time": time, "cdc$batch_seq_no": seq_no}
                columns.update(keys)
                found[tuple(sorted(columns.items()))] += 1
            state = page.paging_state
            if state is None:
                break
    return found


def captured_rows(store: Store) -> Counter[Columns]:
    """Every captured row of every slice, as its columns."""
    found: Counter[Columns] = Counter()
    for captured in store.capture.slices(limit=10_000):
        for row in store.capture.rows(captured.key, limit=10_000):
            found[tuple(sorted(row.columns.items()))] += 1
    return found
