"""Captured slices at rest: sealing, listing, reading, dropping, the cap and the totals.

Seed 002 "Comparing Time slices" and REPLICATION.md decisions 1-3. Functions over the store's
connection and its ``CaptureRecorder`` (``_capture``); the ``Store`` calls them under its lock,
inside its transactions. Rules:

* **Seal** (``seal_due``): every open slice whose due time is at or before ``now_ms`` gets its
  digest, ``replication.slice_digest`` of the digests of the rows it holds, its row count and
  bytes, and its seal time; ``sealed_through_ms`` moves to ``now_ms`` (never
  back) and is kept in ``_meta``. The capture queue is settled first, so every row of the slice
  is counted.
* **Table slicing** (``save_table_settings``/``load_table_settings``): the per-table slicing the
  node applies (its channels') is kept in ``_meta`` too, so a store opened again slices each
  table as it did before the restart from its first row on, not by the node's default until
  the channels are read again (hinted rows arriving meanwhile would go to other slices than
  their replicas' and their copies would differ: extra sends).
* **Read**: slices by filters in key order (``list_slices``), a slice's rows in arrival order a
  page at a time (``slice_rows``), each row checked against its digest on the way out.
* **Drop** (``drop_slice``): a sealed slice's rows and state, once it is sent everywhere (who
  decides that is not the store's business); an open slice is refused.
* **Cap** (``enforce_cap``, policy ``drop-oldest``): while the capture is over its bytes or its
  age, the oldest sealed slices (by first arrival) are dropped, each with a WARNING and counted.
  Open slices are never dropped: the open window may keep the capture over its cap, and the
  status says so. (Policy ``refuse`` acts on writes: ``CaptureRecorder.refusal``.)
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

from ringflow.errors import InvalidRequest, RingflowError
from ringflow.replication import SliceKey, SliceSettings, slice_digest
from ringflow.storage._capture import (
    CanonicalRow,
    CaptureConfig,
    CapturedRow,
    CapturedSlice,
    CapturePolicy,
    CaptureRecorder,
    CaptureTotals,
    canonical_row,
    captured_row,
    over_cap,
)
from ringflow.storage._sqlite_layout import (
    CAPTURE_ROW_OVERHEAD_BYTES,
    CAPTURE_TABLES,
    CAPTURE_TOTALS,
    CLEAR_CAPTURE_QUEUE,
    COUNT_CAPTURE_QUEUE,
    DELETE_SLICE,
    DELETE_SLICE_ROWS,
    MARK_PUBLISHED,
    MAX_CAPTURE_SEQ,
    OPEN_CAPTURE_ROWS,
    SEAL_SLICE,
    SELECT_CANONICAL_ROWS,
    SELECT_DUE_SLICES,
    SELECT_META,
    SELECT_OLDEST_SEALED,
    SELECT_SLICE_BY_KEY,
    SELECT_SLICE_DIGESTS,
    SELECT_SLICE_ROWS,
    SELECT_SLICES,
    SELECT_UNPUBLISHED,
    SETTLE_CAPTURE_QUEUE,
    UNPUBLISHED_DUES,
    UPSERT_META,
)

_log = logging.getLogger(__name__)

SEALED_THROUGH_KEY: Final = "capture_sealed_through_ms"
TABLE_SETTINGS_KEY: Final = "capture_table_settings"
_DROP_PAGE = 64
SliceRecord = tuple[int, CapturedSlice]
"""A slice and its ``sid``."""


@dataclass(frozen=True, slots=True)
class CaptureStatus:
    """What ``Store.capture_status`` reports (for the node's status and metrics)."""

    enabled: bool
    slices_open: int
    slices_sealed: int
    rows: int
    size_bytes: int
    oldest_age_ms: int | None
    """Age of the oldest slice kept (all kept data is not yet sent everywhere)."""
    over_cap: bool
    cap_bytes: int
    cap_age_s: int
    policy: str
    sealed_through_ms: int
    refused_batches: int
    dropped_slices: int
    dropped_rows: int
    dropped_bytes: int
    unresolved_rows: int
    redirected_rows: int
    duplicate_rows: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def settle_queue(connection: sqlite3.Connection) -> None:
    """Move the queued capture rows into ``capture_rows`` (inside a transaction; the caller
    zeroes its recorder's ``queued`` once that commits)."""
    connection.execute(SETTLE_CAPTURE_QUEUE)
    connection.execute(CLEAR_CAPTURE_QUEUE)


def save_table_settings(
    connection: sqlite3.Connection, table_settings: Mapping[tuple[str, str], SliceSettings]
) -> None:
    """Keep the per-table slicing in ``_meta`` (module docstring)."""
    entries = [
        [keyspace, table, settings.slice_width_s, settings.slice_count]
        for (keyspace, table), settings in sorted(table_settings.items())
    ]
    connection.execute(UPSERT_META, (TABLE_SETTINGS_KEY, json.dumps(entries)))


def load_table_settings(connection: sqlite3.Connection) -> dict[tuple[str, str], SliceSettings]:
    """The per-table slicing kept by :func:`save_table_settings` (empty when none, or when what
    is kept does not read: logged, the node's default applies until its channels are read)."""
    found = connection.execute(SELECT_META, (TABLE_SETTINGS_KEY,)).fetchone()
    if found is None:
        return {}
    try:
        return {
            (str(keyspace), str(table)): SliceSettings(int(width), int(count))
            for keyspace, table, width, count in json.loads(found[0])
        }
    except (ValueError, TypeError, RingflowError) as error:
        _log.warning("the capture's kept table slicing does not read (ignored): %s", error)
        return {}


def load_recorder(connection: sqlite3.Connection, config: CaptureConfig) -> CaptureRecorder:
    """The recorder of a store opened again: totals, next sequence and seal horizon from SQL;
    the kept table slicing when ``config`` names none."""
    if not config.table_settings:
        config = replace(config, table_settings=load_table_settings(connection))
    (last_seq,) = connection.execute(MAX_CAPTURE_SEQ).fetchone()
    found = connection.execute(SELECT_META, (SEALED_THROUGH_KEY,)).fetchone()
    sealed_through_ms = 0 if found is None else int(found[0])
    recorder = CaptureRecorder(
        config, sql_totals(connection), (last_seq or 0) + 1, sealed_through_ms
    )
    (recorder.queued,) = connection.execute(COUNT_CAPTURE_QUEUE).fetchone()
    return recorder


def _record(row: tuple[Any, ...]) -> SliceRecord:
    sid, keyspace, table, range_start, range_end, start, out_of_sequence = row[:7]
    due_ms, opened_ms, row_count, size_bytes, sealed_ms, digest, published_ms = row[7:]
    key = SliceKey(keyspace, table, range_start, range_end, start, bool(out_of_sequence))
    captured = CapturedSlice(
        key, row_count, size_bytes, opened_ms, due_ms, sealed_ms,
        None if digest is None else bytes(digest), published_ms,
    )  # fmt: skip
    return sid, captured


def seal_due(
    connection: sqlite3.Connection, recorder: CaptureRecorder, now_ms: int
) -> list[CapturedSlice]:
    """Seal every open slice due at ``now_ms`` (module docstring); the slices sealed."""
    now_ms = max(now_ms, recorder.sealed_through_ms)
    settle_queue(connection)
    sealed: list[CapturedSlice] = []
    for row in connection.execute(SELECT_DUE_SLICES, (now_ms,)).fetchall():
        sid, captured = _record(row)
        found = connection.execute(SELECT_SLICE_DIGESTS, (sid,)).fetchall()
        digests = [digest for digest, _ in found]
        row_count = len(found)
        size_bytes = sum(length for _, length in found) + CAPTURE_ROW_OVERHEAD_BYTES * row_count
        digest = slice_digest(digests)
        connection.execute(SEAL_SLICE, (now_ms, digest, row_count, size_bytes, sid))
        sealed.append(
            CapturedSlice(
                captured.key, row_count, size_bytes, captured.opened_ms, captured.due_ms,
                now_ms, digest,
            )
        )  # fmt: skip
    connection.execute(UPSERT_META, (SEALED_THROUGH_KEY, str(now_ms)))
    return sealed


def advance_sealed_through(connection: sqlite3.Connection, now_ms: int) -> None:
    """Keep the seal horizon at ``now_ms`` when nothing was open to seal (inside a
    transaction; the caller moves its recorder's once it commits)."""
    connection.execute(UPSERT_META, (SEALED_THROUGH_KEY, str(now_ms)))


def sealed(recorder: CaptureRecorder, slices: Sequence[CapturedSlice], now_ms: int) -> None:
    """Count ``slices`` sealed at ``now_ms`` once their transaction committed."""
    recorder.queued = 0
    recorder.sealed_through_ms = max(recorder.sealed_through_ms, now_ms)
    for captured in slices:
        key = captured.key
        recorder.open_slots.pop(
            (key.keyspace, key.table, key.range_start, key.range_end, key.slice_start_ms,
             key.out_of_sequence),
            None,
        )  # fmt: skip
    recorder.totals.slices_open -= len(slices)
    recorder.totals.slices_sealed += len(slices)


def list_slices(
    connection: sqlite3.Connection,
    *,
    keyspace: str | None,
    table: str | None,
    sealed: bool | None,
    out_of_sequence: bool | None,
    after: SliceKey | None,
    limit: int,
) -> list[CapturedSlice]:
    """Slices matching the filters (None: any), in (slice start, keyspace, table, range,
    out-of-sequence) order, after ``after``, at most ``limit``."""
    clauses: list[str] = []
    arguments: list[object] = []
    for column, value in (("keyspace", keyspace), ("table_name", table)):
        if value is not None:
            clauses.append(f"{column} = ?")
            arguments.append(value)
    if sealed is not None:
        clauses.append("sealed_ms IS NOT NULL" if sealed else "sealed_ms IS NULL")
    if out_of_sequence is not None:
        clauses.append("out_of_sequence = ?")
        arguments.append(int(out_of_sequence))
    order = "slice_start_ms, keyspace, table_name, range_start, range_end, out_of_sequence"
    if after is not None:
        clauses.append(f"({order}) > (?, ?, ?, ?, ?, ?)")
        arguments += [
            after.slice_start_ms, after.keyspace, after.table, after.range_start,
            after.range_end, int(after.out_of_sequence),
        ]  # fmt: skip
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    sql = f"{SELECT_SLICES}{where} ORDER BY {order} LIMIT ?"
    return [_record(row)[1] for row in connection.execute(sql, (*arguments, limit))]


def find_slice(connection: sqlite3.Connection, key: SliceKey) -> SliceRecord | None:
    row = connection.execute(
        SELECT_SLICE_BY_KEY,
        (key.keyspace, key.table, key.range_start, key.range_end, key.slice_start_ms,
         int(key.out_of_sequence)),
    ).fetchone()  # fmt: skip
    return None if row is None else _record(row)


def canonical_rows(
    connection: sqlite3.Connection, key: SliceKey, after_seq: int, through_seq: int, limit: int
) -> list[CanonicalRow] | None:
    """At most ``limit`` rows of slice ``key`` with ``after_seq < seq <= through_seq``, in
    arrival order, as stored (queue settled already); None if the store does not hold it."""
    found = find_slice(connection, key)
    if found is None:
        return None
    arguments = (found[0], after_seq, through_seq, limit)
    return [canonical_row(*row) for row in connection.execute(SELECT_CANONICAL_ROWS, arguments)]


def unpublished_slices(connection: sqlite3.Connection, limit: int) -> list[CapturedSlice]:
    """At most ``limit`` sealed slices not yet published, oldest seal first."""
    return [_record(row)[1] for row in connection.execute(SELECT_UNPUBLISHED, (limit,))]


def mark_published(connection: sqlite3.Connection, keys: Sequence[SliceKey], now_ms: int) -> int:
    """Record that the sealed slices ``keys`` are published (at ``now_ms``); how many were
    sealed, held and not marked yet."""
    marked = 0
    for key in keys:
        arguments = (
            now_ms, key.keyspace, key.table, key.range_start, key.range_end,
            key.slice_start_ms, int(key.out_of_sequence),
        )  # fmt: skip
        marked += connection.execute(MARK_PUBLISHED, arguments).rowcount
    return marked


@dataclass(frozen=True, slots=True)
class PublicationState:
    """What the node may promise per table (``StoreCapture.publication_state``): every slice
    due at or before ``sealed_through_ms`` is sealed; the sealed slices not yet published, per
    (keyspace, base table), with the earliest due time among them."""

    sealed_through_ms: int
    unpublished_due_ms: Mapping[tuple[str, str], int]
    unpublished: Mapping[tuple[str, str], int]

    def watermark_ms(self, keyspace: str, table: str) -> int:
        """The seal watermark the node may publish for a table: ``sealed_through_ms``, or just
        before the due time of its oldest unpublished slice (every slice due at or before it
        is then sealed *and* published)."""
        due = self.unpublished_due_ms.get((keyspace, table))
        return self.sealed_through_ms if due is None else min(self.sealed_through_ms, due - 1)


def publication_state(connection: sqlite3.Connection, sealed_through_ms: int) -> PublicationState:
    dues: dict[tuple[str, str], int] = {}
    counts: dict[tuple[str, str], int] = {}
    for keyspace, table, due_ms, count in connection.execute(UNPUBLISHED_DUES):
        dues[keyspace, table] = int(due_ms)
        counts[keyspace, table] = int(count)
    return PublicationState(sealed_through_ms, dues, counts)


def capture_tables(connection: sqlite3.Connection) -> list[tuple[str, str]]:
    """The (keyspace, base table) pairs the capture holds slices of, in order."""
    return [(str(keyspace), str(table)) for keyspace, table in connection.execute(CAPTURE_TABLES)]


def slice_rows(
    connection: sqlite3.Connection, key: SliceKey, after_seq: int, limit: int
) -> list[CapturedRow]:
    """At most ``limit`` rows of slice ``key`` after sequence ``after_seq``, in arrival order
    (the queue settled already); InvalidRequest for a slice the store does not hold."""
    found = find_slice(connection, key)
    if found is None:
        raise InvalidRequest(f"no captured slice {key}")
    rows = connection.execute(SELECT_SLICE_ROWS, (found[0], after_seq, limit)).fetchall()
    return [captured_row(*row) for row in rows]


def delete_slice(connection: sqlite3.Connection, sid: int) -> None:
    connection.execute(DELETE_SLICE_ROWS, (sid,))
    connection.execute(DELETE_SLICE, (sid,))


def dropped(recorder: CaptureRecorder, slices: Sequence[CapturedSlice], oldest: int | None) -> None:
    """Count sealed ``slices`` dropped once their transaction committed; ``oldest`` is the first
    arrival of the oldest slice left."""
    totals = recorder.totals
    totals.slices_sealed -= len(slices)
    totals.rows -= sum(s.row_count for s in slices)
    totals.size_bytes -= sum(s.size_bytes for s in slices)
    totals.oldest_opened_ms = oldest


def oldest_opened_ms(connection: sqlite3.Connection) -> int | None:
    found: int | None = connection.execute(CAPTURE_TOTALS).fetchone()[4]
    return found


def drop_slice(connection: sqlite3.Connection, key: SliceKey) -> CapturedSlice | None:
    """Delete sealed slice ``key`` (queue settled already); None if the store does not hold it;
    InvalidRequest if it is open."""
    found = find_slice(connection, key)
    if found is None:
        return None
    sid, captured = found
    if not captured.sealed:
        raise InvalidRequest(f"slice {key} is open: only a sealed slice is dropped")
    delete_slice(connection, sid)
    return captured


def enforce_cap(
    connection: sqlite3.Connection, recorder: CaptureRecorder, now_ms: int
) -> tuple[list[CapturedSlice], int | None]:
    """Policy ``drop-oldest``: drop the oldest sealed slices while over the cap (module
    docstring). The slices dropped, and the first arrival of the oldest slice left (for
    ``dropped``). Nothing under ``refuse`` or under the cap."""
    totals = CaptureTotals(**asdict(recorder.totals))
    cap = recorder.config.cap
    dropped_slices: list[CapturedSlice] = []
    if cap.policy is not CapturePolicy.DROP_OLDEST:
        return dropped_slices, totals.oldest_opened_ms
    while over_cap(totals, cap, now_ms):
        page = connection.execute(SELECT_OLDEST_SEALED, (_DROP_PAGE,)).fetchall()
        if not page:
            break
        for row in page:
            sid, captured = _record(row)
            delete_slice(connection, sid)
            dropped_slices.append(captured)
            totals.size_bytes -= captured.size_bytes
            totals.oldest_opened_ms = oldest_opened_ms(connection)
            if not over_cap(totals, cap, now_ms):
                break
    return dropped_slices, totals.oldest_opened_ms


def log_dropped(recorder: CaptureRecorder, slices: Sequence[CapturedSlice]) -> None:
    """The loud part of ``drop-oldest``: a WARNING per slice, and the counters."""
    counters = recorder.counters
    for captured in slices:
        _log.warning(
            "replica capture over its cap (policy drop-oldest): dropped slice %s with %d rows, "
            "%d bytes, never sent everywhere",
            captured.key,
            captured.row_count,
            captured.size_bytes,
        )
        counters.dropped_slices += 1
        counters.dropped_rows += captured.row_count
        counters.dropped_bytes += captured.size_bytes


def status(recorder: CaptureRecorder | None, totals: CaptureTotals, now_ms: int) -> CaptureStatus:
    """The capture's status: ``totals`` (the recorder's, or read from SQL when capture is not
    enabled) with the recorder's counters and cap."""
    oldest = totals.oldest_opened_ms
    age_ms = None if oldest is None else max(0, now_ms - oldest)
    if recorder is None:
        return CaptureStatus(
            False, totals.slices_open, totals.slices_sealed, totals.rows, totals.size_bytes,
            age_ms, False, 0, 0, "", 0, 0, 0, 0, 0, 0, 0, 0,
        )  # fmt: skip
    cap, counters = recorder.config.cap, recorder.counters
    return CaptureStatus(
        enabled=True,
        slices_open=totals.slices_open,
        slices_sealed=totals.slices_sealed,
        rows=totals.rows,
        size_bytes=totals.size_bytes,
        oldest_age_ms=age_ms,
        over_cap=recorder.over_cap(now_ms),
        cap_bytes=cap.max_bytes,
        cap_age_s=cap.max_age_s,
        policy=cap.policy.value,
        sealed_through_ms=recorder.sealed_through_ms,
        refused_batches=counters.refused_batches,
        dropped_slices=counters.dropped_slices,
        dropped_rows=counters.dropped_rows,
        dropped_bytes=counters.dropped_bytes,
        unresolved_rows=counters.unresolved_rows,
        redirected_rows=counters.redirected_rows,
        duplicate_rows=counters.duplicate_rows,
    )


def sql_totals(connection: sqlite3.Connection) -> CaptureTotals:
    """The totals as the tables hold them (the recorder's ``totals`` must equal these)."""
    open_count, sealed_count, rows, size_bytes, oldest = connection.execute(
        CAPTURE_TOTALS
    ).fetchone()
    open_rows, open_bytes = connection.execute(OPEN_CAPTURE_ROWS).fetchone()
    return CaptureTotals(
        open_count, sealed_count, rows + open_rows, size_bytes + open_bytes, oldest
    )
