"""Replica-side capture in the store: every CDC log row a replica stores is also kept, durably
and in the same transaction, in time slices with digests (seed 002; ``shared/design/
REPLICATION.md`` decision 1; issue 14 §1). This module owns the configuration, the records the
store hands out, and the capture of one write transaction (``CaptureBatch``); sealing, reading,
dropping and the cap are ``_capture_slices``; the SQL is ``_sqlite_layout``.

Layering: the storage layer uses the pure ``ringflow.replication`` package (triage ``place``, the
digests, ``SliceKey``/``SealedSlice``/``Origin``), which sits *below* storage: it imports only
``errors``, ``ring``, ``schema`` and ``cdc``. Nothing here knows the cluster: the node hands in a
``CaptureConfig`` (its id, slice settings, a range resolver, its clock, the cap) with
``Store.capture.enable``. A store without it (every scratch store) captures nothing.

What is captured, once capture is enabled:

* every log row the store builds from a CDC capture in ``apply``/``apply_group`` (delta, pre-
  and post-image rows) with the batch's origin: WRITE (a coordinated write) or HINT (a hint
  replayed to this node);
* every row of a CDC log table mutation applied directly (no capture): STREAM when the batch is
  streaming's (bootstrap, decommission), else REPAIR (read repair, anything else);
* each row once per replica. A log row is identified by its key (table, stream, ``cdc$time``,
  ``cdc$batch_seq_no``), not its bytes: written again (a hint for a write the node did apply,
  a write message delivered late after a restart, a streamed or repaired row it has), it
  carries another expiry, so the log table keeps both versions and merges them on read. A row
  whose key was captured recently (the last ``RECENT_ROWS_MAX``, in memory), or, unless it is a
  timely write, whose key the log table holds already, is not captured again (counted as
  ``duplicate_rows``). What escapes this: a timely write of a row that came first as a hint
  more than ``RECENT_ROWS_MAX`` rows earlier (links are FIFO, so the write message comes
  first); it costs a digest mismatch, so a send, never a loss.

A captured row is the log row as its columns' serialized values (``None`` never occurs: absent
columns are absent), kept as its canonical bytes (``replication.canonical_row_bytes``) with its
64-bit digest, origin and arrival sequence: enough to rebuild the log row exactly (its cells'
timestamp is ``cdc$time``'s), and independent of the log table's TTL.

Triage of a row: its slice key names the base table (the CDC-enabled one); its range is
``config.range_of(keyspace, stream_id, write_ts_us)``, the vnode range of the stream's
generation, or, when the resolver does not know the stream, the whole ring ``(MIN_TOKEN,
MIN_TOKEN]`` (counted as ``unresolved_rows``; the row is never dropped, it only fails to match
its peers' slices and is then sent by each); its slice is ``replication.place`` of its write
timestamp (``cdc$time``) at the arrival clock. The arrival clock is never earlier than the last
seal (``sealed_through_ms``, kept in ``_meta``), so a clock that steps back cannot put a row in a
sealed slice; should a row's slice be sealed nonetheless (only after the slice settings
changed), it goes out of sequence (``redirected_rows``).

Transactions: the transaction's captured rows are appended to ``capture_queue`` (a slice seen
for the first time is created in ``capture_slices``) just before the write transaction's
COMMIT; a rolled-back transaction captures nothing, and after kill -9 every acknowledged log
row is in the capture. The in-memory state (totals, known open slices, recent keys) is updated
only once the transaction committed (``CaptureRecorder.committed``).
"""

from __future__ import annotations

import enum
import logging
import sqlite3
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from ringflow.cdc import BATCH_SEQ_NO_COLUMN, STREAM_ID_COLUMN, TIME_COLUMN, DeltaRow
from ringflow.errors import InternalError, InvalidRequest, invariant
from ringflow.replication import (
    Origin,
    SealedSlice,
    SliceKey,
    SliceSettings,
    canonical_digest,
    canonical_row_bytes,
    decode_canonical_row,
    place,
)
from ringflow.schema import Cell, Mutation, timeuuid_to_micros
from ringflow.storage._errors import CaptureFull
from ringflow.storage._keys import MIN_TOKEN
from ringflow.storage._sqlite_layout import (
    APPEND_CAPTURE_ROW,
    CAPTURE_ROW_OVERHEAD_BYTES,
    INSERT_CAPTURE_SLICE,
    SELECT_SLICE_STATE,
)

_log = logging.getLogger(__name__)

GIB: Final = 1024**3
WHOLE_RING: Final = (MIN_TOKEN, MIN_TOKEN)
"""The range of a row whose stream the resolver does not know."""
ORIGIN_CODES: Final = {Origin.WRITE: 0, Origin.HINT: 1, Origin.STREAM: 2, Origin.REPAIR: 3}
ORIGINS: Final = {code: origin for origin, code in ORIGIN_CODES.items()}
_REDIRECTS_MAX = 10_000
_HELD_ROW = "SELECT 1 FROM atoms WHERE tid = ? AND token = ? AND pk = ? AND ck = ? LIMIT 1"
RECENT_ROWS_MAX: Final = 100_000
"""Keys of the rows captured last, remembered to capture a row once (``CaptureRecorder``)."""

RangeResolver = Callable[[str, bytes, int], tuple[int, int] | None]
"""``range_of(keyspace, stream_id, write_ts_us)``: the ``(start, end]`` vnode range of the
stream's CDC generation, or None if unknown. Called on the store's thread inside the write
transaction: it must not call the store."""
RowKey = tuple[int, int, bytes, bytes]
"""(tid, token, pk, ck): where the store keeps a log row (its table, stream and clustering)."""
SlotKey = tuple[str, str, int, int, int, bool]
"""A slice key's fields: keyspace, table, range start, range end, slice start, out of seq."""


class CapturePolicy(enum.Enum):
    """What the cap does when exceeded (REPLICATION.md decision 1: the operator's choice)."""

    REFUSE = "refuse"
    """CDC writes (origins WRITE and HINT) to this replica fail with ``CaptureFull`` (0x1600)."""
    DROP_OLDEST = "drop-oldest"
    """The oldest sealed slices are dropped, each with a WARNING and counted."""


@dataclass(frozen=True, slots=True)
class CaptureCap:
    """A bound on captured data: ``max_bytes`` and ``max_age_s`` (age of the oldest slice's
    first row), and the ``policy`` applied past either. Defaults: Cassandra's 4 GiB of
    ``cdc_total_space``, a week, refuse (nothing is lost without the operator's say)."""

    max_bytes: int = 4 * GIB
    max_age_s: int = 7 * 24 * 3600
    policy: CapturePolicy = CapturePolicy.REFUSE

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_age_s"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise InvalidRequest(f"capture cap {name} must be a positive int, got {value!r}")
        if not isinstance(self.policy, CapturePolicy):
            raise InvalidRequest(f"capture cap policy must be a CapturePolicy: {self.policy!r}")


@dataclass(frozen=True, slots=True)
class CaptureConfig:
    """What the node gives ``Store.capture.enable``: its host id (for ``SealedSlice``), the
    range resolver, its wall clock in ms, the slice settings (``table_settings`` by
    ``(keyspace, base table)`` over ``settings``) and the cap."""

    node_id: uuid.UUID
    range_of: RangeResolver
    clock_ms: Callable[[], int]
    settings: SliceSettings = SliceSettings()  # noqa: RUF009 - frozen value object
    table_settings: Mapping[tuple[str, str], SliceSettings] = field(default_factory=dict)
    cap: CaptureCap = CaptureCap()

    def __post_init__(self) -> None:
        if not isinstance(self.node_id, uuid.UUID):
            raise InvalidRequest(f"capture node_id must be a UUID, got {self.node_id!r}")
        if not callable(self.range_of) or not callable(self.clock_ms):
            raise InvalidRequest("capture range_of and clock_ms must be callables")
        for settings in (self.settings, *self.table_settings.values()):
            if not isinstance(settings, SliceSettings):
                raise InvalidRequest(f"not SliceSettings: {settings!r}")

    def settings_for(self, keyspace: str, table: str) -> SliceSettings:
        return self.table_settings.get((keyspace, table), self.settings)


@dataclass(frozen=True, slots=True)
class CapturedSlice:
    """One slice as the store holds it. ``digest``/``sealed_ms`` are None while it is open."""

    key: SliceKey
    row_count: int
    size_bytes: int
    opened_ms: int
    """Arrival of its first row."""
    due_ms: int
    sealed_ms: int | None
    digest: bytes | None
    published_ms: int | None = None
    """When the node's publication of it to ``system_replication.slices`` was acknowledged."""

    @property
    def sealed(self) -> bool:
        return self.sealed_ms is not None

    @property
    def published(self) -> bool:
        return self.published_ms is not None

    def sealed_slice(self, node_id: uuid.UUID) -> SealedSlice:
        """What ``node_id`` publishes for this slice; InvalidRequest while it is open."""
        if self.sealed_ms is None or self.digest is None:
            raise InvalidRequest(f"slice {self.key} is open")
        return SealedSlice(self.key, node_id, self.digest, self.row_count, self.sealed_ms)


@dataclass(frozen=True, slots=True)
class CapturedRow:
    """One captured row: arrival sequence (increasing per store), digest, origin, columns."""

    seq: int
    digest: int
    origin: Origin
    columns: dict[str, bytes | None]


@dataclass(frozen=True, slots=True)
class CanonicalRow:
    """One captured row as stored: arrival sequence, digest, origin and its canonical bytes
    (``replication.decode_canonical_row`` gives its columns), for readers that pass the bytes
    on (the node-local ``system_replication.captured_rows``)."""

    seq: int
    digest: int
    origin: Origin
    data: bytes


def canonical_row(seq: int, digest: int, origin_code: int, data: bytes) -> CanonicalRow:
    """A ``capture_rows`` row as stored, checked against its digest (read-back check)."""
    invariant(canonical_digest(data) == digest, f"captured row {seq}: digest mismatch")
    return CanonicalRow(seq, digest, ORIGINS[origin_code], bytes(data))


def captured_row(seq: int, digest: int, origin_code: int, data: bytes) -> CapturedRow:
    """A ``capture_rows`` row, decoded and checked against its digest (read-back check)."""
    invariant(canonical_digest(data) == digest, f"captured row {seq}: digest mismatch")
    return CapturedRow(seq, digest, ORIGINS[origin_code], decode_canonical_row(data))


@dataclass(slots=True)
class CaptureTotals:
    """What the capture holds, kept in memory (``_capture_slices.totals`` reads it from SQL)."""

    slices_open: int = 0
    slices_sealed: int = 0
    rows: int = 0
    size_bytes: int = 0
    oldest_opened_ms: int | None = None


def over_cap(totals: CaptureTotals, cap: CaptureCap, now_ms: int) -> bool:
    """Whether ``totals`` exceed ``cap``'s bytes, or its age at ``now_ms``."""
    if totals.size_bytes > cap.max_bytes:
        return True
    oldest = totals.oldest_opened_ms
    return oldest is not None and now_ms - oldest > cap.max_age_s * 1000


@dataclass(slots=True)
class CaptureCounters:
    """Events since the store opened, for status (all loud ones are also logged)."""

    refused_batches: int = 0
    dropped_slices: int = 0
    dropped_rows: int = 0
    dropped_bytes: int = 0
    unresolved_rows: int = 0
    redirected_rows: int = 0
    duplicate_rows: int = 0
    """Rows of a non-WRITE origin the store held already (not captured again)."""


class CaptureRecorder:
    """A store's capture state: config, totals, counters, the arrival sequence and the seal
    horizon. Owned by the ``Store`` (used under its lock, on its thread)."""

    def __init__(
        self, config: CaptureConfig, totals: CaptureTotals, next_seq: int, sealed_through_ms: int
    ) -> None:
        self.config = config
        self.totals = totals
        self.counters = CaptureCounters()
        self.next_seq = next_seq
        self.sealed_through_ms = sealed_through_ms
        self.queued = 0
        """Rows in ``capture_queue`` (an upper bound, like the store's ``_appended``)."""
        self.open_slots: dict[SlotKey, int] = {}
        """Slices known to be open, with their ``sid``: a write to one needs no lookup."""
        self.recent: set[RowKey] = set()
        """Keys of the last ``RECENT_ROWS_MAX`` rows captured (``recent_order``: oldest first)."""
        self.recent_order: deque[RowKey] = deque()
        self._over_cap_logged = False

    def arrival_ms(self) -> int:
        """The clock rows are triaged by: never before the last seal."""
        return max(self.config.clock_ms(), self.sealed_through_ms)

    def over_cap(self, now_ms: int) -> bool:
        return over_cap(self.totals, self.config.cap, now_ms)

    def refusal(self, origin: Origin) -> CaptureFull | None:
        """``CaptureFull`` for a batch with CDC rows of ``origin`` when the cap is exceeded and
        the policy refuses (streamed and repaired rows are always taken: refusing them would
        stall bootstrap and repair, and they are counted in the totals like any row)."""
        cap = self.config.cap
        if cap.policy is not CapturePolicy.REFUSE or origin not in (Origin.WRITE, Origin.HINT):
            return None
        now_ms = self.config.clock_ms()
        if not self.over_cap(now_ms):
            if self._over_cap_logged:
                _log.warning("replica capture back under its cap: CDC writes accepted again")
                self._over_cap_logged = False
            return None
        self.counters.refused_batches += 1
        message = self._cap_message(now_ms)
        if not self._over_cap_logged:
            _log.error("%s; CDC writes to this replica are refused until it is", message)
            self._over_cap_logged = True
        return CaptureFull(f"{message}; the CDC write is refused (cap policy 'refuse')")

    def _cap_message(self, now_ms: int) -> str:
        totals, cap = self.totals, self.config.cap
        oldest = totals.oldest_opened_ms
        age_s = 0 if oldest is None else (now_ms - oldest) // 1000
        return (
            f"replica capture over its cap: {totals.size_bytes} bytes (cap {cap.max_bytes}), "
            f"oldest slice {age_s} s old (cap {cap.max_age_s} s), {totals.rows} rows not yet "
            "sent everywhere"
        )

    def committed(self, batch: CaptureBatch) -> None:
        """``batch``'s transaction committed: count what it added."""
        totals = self.totals
        totals.slices_open += batch.new_slices
        totals.rows += batch.rows
        totals.size_bytes += batch.size_bytes
        oldest = totals.oldest_opened_ms
        if batch.new_slices and (oldest is None or batch.now_ms < oldest):
            totals.oldest_opened_ms = batch.now_ms  # the new slices' first arrival
        self.queued += batch.rows
        self.open_slots.update(batch.new_slots)
        counters = self.counters
        counters.unresolved_rows += batch.unresolved
        counters.redirected_rows += batch.redirected
        counters.duplicate_rows += batch.duplicates
        recent, order = self.recent, self.recent_order
        recent.update(batch.keys)
        order.extend(batch.keys)
        while len(order) > RECENT_ROWS_MAX:
            recent.discard(order.popleft())


def _micros_of_timeuuid(raw: bytes) -> int:
    return timeuuid_to_micros(uuid.UUID(bytes=raw))


class CaptureBatch:
    """The captured rows of one write transaction; ``flush`` writes them before COMMIT.

    ``origin`` is the origin of the batch being written (``apply_group`` sets it per batch).
    ``settle_log_queue`` runs before the first look at the log table (``_duplicate``)."""

    def __init__(
        self,
        recorder: CaptureRecorder,
        connection: sqlite3.Connection,
        settle_log_queue: Callable[[], None],
    ) -> None:
        self._recorder = recorder
        self._config = recorder.config
        self._connection = connection
        self._settle_log_queue = settle_log_queue
        self._log_queue_settled = False
        self.origin = Origin.WRITE
        self.now_ms = recorder.arrival_ms()
        self._slots: dict[SlotKey, list[tuple[int, int, bytes]]] = {}
        """Rows by slice: (digest, origin code, canonical bytes), in arrival order."""
        self._dues: dict[SlotKey, int] = {}
        self._keys: dict[RowKey, None] = {}
        """The log rows captured by this transaction (``recent`` once it commits)."""
        self.new_slots: dict[SlotKey, int] = {}
        """Open slices this transaction looked up or created (``open_slots`` once it commits)."""
        self.rows = self.size_bytes = self.new_slices = 0
        self.unresolved = self.redirected = self.duplicates = 0

    # -- capturing ---------------------------------------------------------------------------

    def add_delta(self, keyspace: str, table: str, delta: DeltaRow, key: RowKey) -> None:
        """The one log row of a delta-only write (``cdc._log_rows.DeltaRow``) stored at
        ``key``."""
        columns: dict[str, bytes | None] = dict(delta.values)
        columns[STREAM_ID_COLUMN] = delta.stream_id
        time, seq_no = delta.clustering
        columns[TIME_COLUMN] = time
        columns[BATCH_SEQ_NO_COLUMN] = seq_no
        self._add(keyspace, table, delta.stream_id, delta.timestamp_us, columns, self.origin, key)

    def add_log_mutation(
        self,
        keyspace: str,
        table: str,
        mutation: Mutation,
        keys: list[RowKey] | None,
        *,
        direct: bool,
    ) -> None:
        """The rows of a log mutation: built by the store (``direct=False``: the batch's
        origin) or applied as given (``direct=True``: STREAM for a streaming batch, else
        REPAIR). ``keys`` are where the rows are stored, in row order, when known."""
        origin = self.origin
        if direct:
            origin = Origin.STREAM if origin is Origin.STREAM else Origin.REPAIR
        (stream_id,) = mutation.partition_key
        for index, row in enumerate(mutation.rows):
            columns: dict[str, bytes | None] = {
                name: cell.value
                for name, cell in row.cells.items()
                if type(cell) is Cell and not cell.is_tombstone
            }
            time, seq_no = row.clustering
            columns[STREAM_ID_COLUMN] = stream_id
            columns[TIME_COLUMN] = time
            columns[BATCH_SEQ_NO_COLUMN] = seq_no
            key = None if keys is None else keys[index]
            timestamp_us = _micros_of_timeuuid(time)
            self._add(keyspace, table, stream_id, timestamp_us, columns, origin, key)

    @property
    def keys(self) -> dict[RowKey, None]:
        return self._keys

    def _duplicate(self, key: RowKey, origin: Origin, out_of_sequence: bool) -> bool:
        """Whether the log row at ``key`` was captured already: earlier in this transaction,
        recently (``CaptureRecorder.recent``), or, for a row that is not a timely write, as
        the store's log table says (a row is identified by its key, not its bytes: a row
        written again carries another expiry, so other bytes)."""
        if key in self._keys or key in self._recorder.recent:
            return True
        if origin is Origin.WRITE and not out_of_sequence:
            return False
        if not self._log_queue_settled:
            self._settle_log_queue()
            self._log_queue_settled = True
        return self._connection.execute(_HELD_ROW, key).fetchone() is not None

    def _add(
        self,
        keyspace: str,
        table: str,
        stream_id: bytes,
        timestamp_us: int,
        columns: dict[str, bytes | None],
        origin: Origin,
        key: RowKey | None,
    ) -> None:
        settings = self._config.settings_for(keyspace, table)
        placement = place(timestamp_us // 1000, self.now_ms, origin, settings)
        if key is not None:
            if self._duplicate(key, origin, placement.out_of_sequence):
                self.duplicates += 1
                return
            self._keys[key] = None
        token_range = self._config.range_of(keyspace, stream_id, timestamp_us)
        if token_range is None:
            token_range = WHOLE_RING
            self.unresolved += 1
        slot = (keyspace, table, *token_range, placement.slice_start_ms, placement.out_of_sequence)
        data = canonical_row_bytes(columns)
        rows = self._slots.get(slot)
        if rows is None:
            rows = self._slots[slot] = []
            self._dues[slot] = placement.due_ms
        rows.append((canonical_digest(data), ORIGIN_CODES[origin], data))

    # -- writing -----------------------------------------------------------------------------

    def flush(self) -> None:
        """Write the captured rows (inside the write transaction): one ``executemany`` for
        all, after creating the slices not known to be open (``CaptureRecorder.open_slots``)."""
        recorder = self._recorder
        known = recorder.open_slots
        appended: list[tuple[int, int, int, int, bytes]] = []
        seq = recorder.next_seq
        for slot, rows in self._slots.items():
            sid = known.get(slot)
            if sid is None:
                sid = self.new_slots.get(slot)
                if sid is None:
                    sid = self._slice_id(slot, len(rows))
            for digest, origin, data in rows:
                appended.append((seq, sid, digest, origin, data))
                self.size_bytes += len(data)
                seq += 1
        recorder.next_seq = seq
        self._connection.executemany(APPEND_CAPTURE_ROW, appended)
        self.rows += len(appended)
        self.size_bytes += CAPTURE_ROW_OVERHEAD_BYTES * len(appended)
        self._slots.clear()

    def _slice_id(self, slot: SlotKey, count: int) -> int:
        """The open slice ``slot``, created if new (``new_slots``, ``new_slices``); a sealed
        slot's rows go out of sequence, to the first open bucket from their arrival on."""
        keyspace, table, range_start, range_end, start, out_of_sequence = slot
        due = self._dues[slot]
        width_ms = self._config.settings_for(keyspace, table).slice_width_ms
        connection = self._connection
        for _ in range(_REDIRECTS_MAX):
            key = (keyspace, table, range_start, range_end, start, out_of_sequence)
            created = connection.execute(INSERT_CAPTURE_SLICE, (*key, due, self.now_ms))
            sid, sealed_ms = connection.execute(SELECT_SLICE_STATE, key).fetchone()
            if sealed_ms is None:
                self.new_slices += created.rowcount == 1
                self.new_slots[key] = sid
                return int(sid)
            self.redirected += count
            if out_of_sequence:
                start += width_ms
            else:
                start, out_of_sequence = self.now_ms // width_ms * width_ms, True
            due = start + width_ms
        raise InternalError(f"no open capture slice for {slot} after {_REDIRECTS_MAX} tries")
