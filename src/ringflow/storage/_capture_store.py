"""``Store.capture``: the replica-side capture API of a store (seed 002; issue 14 §1).

The write path captures inside ``Store.apply_group`` (``_capture``); this object is the rest,
for the node and the transmission built on it. Every method takes the store's lock; the ones
that write run in a transaction of their own; reads settle the capture queue first (a small
write). API (the ``now_ms`` arguments default to the configured clock):

* ``enable(config)``: start capturing every CDC log row the store writes (``CaptureConfig``:
  node id, slice settings, range resolver, clock, cap). Reading, sealing and dropping also work
  on a store that does not capture (a tool reading a node's file).
* ``seal_due(now_ms)``: seal every slice due at ``now_ms``; the ``SealedSlice`` of each, for the
  node to publish. The seal horizon (``sealed_through_ms``) moves to ``now_ms`` and is kept,
  also when nothing is open (a one-row transaction: the node promises it in its seal
  watermarks, so it must hold across a restart whatever the clock does).
* ``enforce_cap(now_ms)``: the ``drop-oldest`` policy (WARNING per dropped slice, counted).
* ``slices(...)``: slices by keyspace, table, sealed, out-of-sequence, in key order, paged.
* ``rows(key, after_seq, limit)``: one slice's rows in arrival order, paged.
* ``canonical_rows(key, after_seq, through_seq, limit)``: the same rows as stored (canonical
  bytes), None for a slice not held: what the node-local ``captured_rows`` table serves.
* ``unpublished(limit)``, ``mark_published(keys)``, ``publication_state()``: the node's
  publication of its sealed slices to ``system_replication.slices`` (a durable marker per
  slice, so a restart publishes again what was not acknowledged) and of its seal watermarks.
* ``update_settings(table_settings)``: per-table slicing from the channels, from now on.
* ``tables()``: the tables the capture holds slices of.
* ``drop(key)``: a sealed slice's rows and state, once it is sent everywhere.
* ``status(now_ms)``: slices open and sealed, rows, bytes, age of the oldest, the cap and
  every counter.
* ``validate()``: the recorder's totals equal what the tables hold.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Final

from ringflow.errors import InvalidRequest, invariant
from ringflow.replication import SealedSlice, SliceKey, SliceSettings
from ringflow.storage import _capture_slices as slices
from ringflow.storage._capture import (
    CanonicalRow,
    CaptureConfig,
    CapturedRow,
    CapturedSlice,
    CaptureRecorder,
)
from ringflow.storage._capture_slices import CaptureStatus, PublicationState

MAX_PAGE: Final = 10_000
"""Most slices or rows one call returns."""
Transaction = Callable[[], AbstractContextManager[sqlite3.Connection]]


def _limit(limit: int) -> int:
    if type(limit) is not int or not 0 < limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be in 1..{MAX_PAGE}, got {limit!r}")
    return limit


class StoreCapture:
    """The capture API of one ``Store`` (module docstring)."""

    def __init__(
        self,
        path: Path,
        lock: threading.RLock,
        connection: sqlite3.Connection,
        transaction: Transaction,
    ) -> None:
        self._path = path
        self._lock = lock
        self._connection = connection
        self._transaction = transaction
        self.recorder: CaptureRecorder | None = None
        """Set by ``enable``; the write path captures when it is."""

    @property
    def enabled(self) -> bool:
        return self.recorder is not None

    def enable(self, config: CaptureConfig) -> None:
        """Capture every CDC log row written from now on (again: new settings, same data)."""
        if not isinstance(config, CaptureConfig):
            raise InvalidRequest(f"capture.enable needs a CaptureConfig, got {config!r:.80}")
        with self._lock:
            self.recorder = slices.load_recorder(self._connection, config)

    def _now_ms(self, now_ms: int | None) -> int:
        if now_ms is None:
            recorder = self.recorder
            if recorder is None:
                raise InvalidRequest(f"{self._path}: capture is not enabled; pass now_ms")
            return recorder.config.clock_ms()
        if type(now_ms) is not int or now_ms < 0:
            raise InvalidRequest(f"now_ms must be a non-negative int, got {now_ms!r}")
        return now_ms

    def _enabled(self) -> CaptureRecorder:
        recorder = self.recorder
        if recorder is None:
            raise InvalidRequest(f"{self._path}: capture is not enabled")
        return recorder

    def seal_due(self, now_ms: int | None = None) -> list[SealedSlice]:
        """Seal every slice due at ``now_ms`` (never before the last seal); their states."""
        with self._lock:
            recorder = self._enabled()
            now_ms = max(self._now_ms(now_ms), recorder.sealed_through_ms)
            if recorder.totals.slices_open == 0:  # nothing to seal: only the horizon moves
                if now_ms > recorder.sealed_through_ms:
                    with self._transaction() as connection:
                        slices.advance_sealed_through(connection, now_ms)
                    recorder.sealed_through_ms = now_ms
                return []
            with self._transaction() as connection:
                sealed = slices.seal_due(connection, recorder, now_ms)
            slices.sealed(recorder, sealed, now_ms)
            node_id = recorder.config.node_id
            return [captured.sealed_slice(node_id) for captured in sealed]

    def enforce_cap(self, now_ms: int | None = None) -> list[CapturedSlice]:
        """Policy ``drop-oldest``: drop the oldest sealed slices while over the cap; the slices
        dropped (each logged at WARNING and counted). Nothing under ``refuse``."""
        with self._lock:
            recorder = self._enabled()
            now_ms = self._now_ms(now_ms)
            if not recorder.over_cap(now_ms):
                return []
            with self._transaction() as connection:
                slices.settle_queue(connection)
                dropped, oldest = slices.enforce_cap(connection, recorder, now_ms)
            recorder.queued = 0
            slices.dropped(recorder, dropped, oldest)
            slices.log_dropped(recorder, dropped)
            return dropped

    def _settled(self) -> None:
        """Settle the capture queue before a read (a no-op when it is known empty)."""
        recorder = self.recorder
        if recorder is not None and recorder.queued == 0:
            return
        with self._transaction() as connection:
            slices.settle_queue(connection)
        if recorder is not None:
            recorder.queued = 0

    def slices(
        self,
        *,
        keyspace: str | None = None,
        table: str | None = None,
        sealed: bool | None = None,
        out_of_sequence: bool | None = None,
        after: SliceKey | None = None,
        limit: int = 1000,
    ) -> list[CapturedSlice]:
        """At most ``limit`` slices matching the filters (None: any), in (slice start,
        keyspace, table, range, out-of-sequence) order, after ``after`` (paging)."""
        limit = _limit(limit)
        with self._lock:
            self._settled()  # an open slice's counts are its rows'
            return slices.list_slices(
                self._connection,
                keyspace=keyspace,
                table=table,
                sealed=sealed,
                out_of_sequence=out_of_sequence,
                after=after,
                limit=limit,
            )

    def rows(self, key: SliceKey, *, after_seq: int = 0, limit: int = 1000) -> list[CapturedRow]:
        """At most ``limit`` rows of slice ``key`` after arrival sequence ``after_seq``, in
        arrival order; InvalidRequest for a slice the store does not hold."""
        limit = _limit(limit)
        if type(after_seq) is not int:
            raise InvalidRequest(f"after_seq must be an int, got {after_seq!r}")
        with self._lock:
            self._settled()
            return slices.slice_rows(self._connection, key, after_seq, limit)

    def canonical_rows(
        self, key: SliceKey, *, after_seq: int = 0, through_seq: int = 2**63 - 1, limit: int = 1000
    ) -> list[CanonicalRow] | None:
        """At most ``limit`` rows of slice ``key`` with ``after_seq < seq <= through_seq``, in
        arrival order, as their canonical bytes; None for a slice the store does not hold."""
        limit = _limit(limit)
        for name, value in (("after_seq", after_seq), ("through_seq", through_seq)):
            if type(value) is not int:
                raise InvalidRequest(f"{name} must be an int, got {value!r}")
        with self._lock:
            self._settled()
            return slices.canonical_rows(self._connection, key, after_seq, through_seq, limit)

    def unpublished(self, *, limit: int = 1000) -> list[SealedSlice]:
        """At most ``limit`` sealed slices not yet published, oldest seal first, as the node
        publishes them (its ``SealedSlice``)."""
        limit = _limit(limit)
        with self._lock:
            node_id = self._enabled().config.node_id
            found = slices.unpublished_slices(self._connection, limit)
            return [captured.sealed_slice(node_id) for captured in found]

    def mark_published(self, keys: Sequence[SliceKey], now_ms: int | None = None) -> int:
        """Record that the sealed slices ``keys`` are published (their rows in
        ``system_replication.slices`` acknowledged); how many were marked (a key the store
        does not hold, still open or marked already counts nothing)."""
        keys = list(keys)
        if len(keys) > MAX_PAGE or not all(isinstance(key, SliceKey) for key in keys):
            raise InvalidRequest(f"mark_published takes at most {MAX_PAGE} SliceKeys")
        with self._lock:
            now_ms = self._now_ms(now_ms)
            if not keys:
                return 0
            with self._transaction() as connection:
                return slices.mark_published(connection, keys, now_ms)

    def publication_state(self) -> PublicationState:
        """The seal horizon and, per table, the oldest unpublished slice's due time, read
        together (``PublicationState.watermark_ms`` is then what the node may promise)."""
        with self._lock:
            recorder = self._enabled()
            return slices.publication_state(self._connection, recorder.sealed_through_ms)

    def tables(self) -> list[tuple[str, str]]:
        """The (keyspace, base table) pairs the capture holds slices of."""
        with self._lock:
            return slices.capture_tables(self._connection)

    def update_settings(self, table_settings: Mapping[tuple[str, str], SliceSettings]) -> None:
        """Slice tables by ``table_settings`` from now on (others by the config's default),
        keeping everything else of the capture (counters, recent rows, open slices); kept in the
        store, so a restart slices them so from its first row on."""
        settings = dict(table_settings)
        if not all(isinstance(value, SliceSettings) for value in settings.values()):
            raise InvalidRequest(f"table settings must be SliceSettings: {settings!r:.200}")
        with self._lock:
            recorder = self._enabled()
            with self._transaction() as connection:
                slices.save_table_settings(connection, settings)
            recorder.config = dataclasses.replace(recorder.config, table_settings=settings)

    def table_settings(self) -> dict[tuple[str, str], SliceSettings]:
        """The per-table slicing in force (kept across restarts; empty when disabled)."""
        with self._lock:
            recorder = self.recorder
            return {} if recorder is None else dict(recorder.config.table_settings)

    def drop(self, key: SliceKey) -> bool:
        """Delete sealed slice ``key`` and its rows; False if the store does not hold it,
        InvalidRequest if it is still open."""
        with self._lock:
            with self._transaction() as connection:
                slices.settle_queue(connection)
                dropped = slices.drop_slice(connection, key)
                oldest = slices.oldest_opened_ms(connection)
            recorder = self.recorder
            if recorder is not None:
                recorder.queued = 0
                if dropped is not None:
                    slices.dropped(recorder, [dropped], oldest)
            return dropped is not None

    def status(self, now_ms: int | None = None) -> CaptureStatus:
        """Totals, cap and counters (``CaptureStatus``)."""
        with self._lock:
            recorder = self.recorder
            if recorder is None:
                totals = slices.sql_totals(self._connection)
                return slices.status(None, totals, self._now_ms(now_ms))
            return slices.status(recorder, recorder.totals, self._now_ms(now_ms))

    def validate(self) -> None:
        """The recorder's totals equal the tables' (after every unit test of the capture)."""
        with self._lock:
            recorder = self.recorder
            if recorder is None:
                return
            stored = slices.sql_totals(self._connection)
            invariant(
                stored == recorder.totals, f"capture totals {recorder.totals} != stored {stored}"
            )
