"""A node publishes the state of its sealed slices to the replicated ``system_replication``
tables (issue 14 §1; REPLICATION.md decision 4; the planner's rule 2).

Every ``interval_ms`` (default 1 s, the seal timer's pace), off the node's thread where it
touches the store:

1. take at most ``slices_per_round_max`` sealed, unpublished slices, oldest seal first
   (``StoreCapture.unpublished``: the store keeps a durable "published" marker per slice, so
   after a restart, or a round whose writes failed, what was not acknowledged is published
   again; a slice's row never changes, so a second write of it is harmless);
2. write them to ``system_replication.slices`` through the node's own coordinator at QUORUM,
   one write per partition (keyspace, table, slice start), at most ``rows_per_write_max`` rows
   each (``replication.publication_batches``), with the table's default TTL (7 days);
3. mark the slices of the acknowledged writes published;
4. only then, for every CDC table of the schema (an idle one too), raise this node's row of
   ``system_replication.seal_watermarks`` to what the store may promise
   (``PublicationState.watermark_ms``: the seal horizon, or just before the due time of the
   table's oldest slice not yet published), rounded down to the table's slice width (dues are
   multiples of it, so the planner decides the same, with one write per table per width
   instead of per second). The row is written at timestamp ``watermark * 1000``, so of two
   writes the higher watermark wins whatever their order: a watermark never goes back.

Failures (no quorum, timeouts) leave the slices unpublished and the watermarks where they
were; the next round tries again. Nothing here reads the store on the node's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster.service._periodic import PeriodicRounds
from ringflow.cql import DISTRIBUTED_TABLES
from ringflow.replication import (
    DEFAULT_PUBLICATION_ROWS_MAX,
    REPLICATION_KEYSPACE,
    SLICES_TABLE,
    WATERMARKS_TABLE,
    SealedSlice,
    SealWatermark,
    SliceKey,
    SliceSettings,
    publication_batches,
    sealed_slice_to_row,
    watermark_to_row,
)
from ringflow.schema import table_mutation
from ringflow.storage import PublicationState

if TYPE_CHECKING:
    from ringflow.cluster.service._node import ClusterNode

_log = logging.getLogger(__name__)

PUBLICATION_INTERVAL_MS: Final = 1_000
SLICES_PER_ROUND_MAX: Final = 512
WATERMARKS_PER_ROUND_MAX: Final = 256
Slicing = Callable[[str, str], SliceSettings]
"""A table's current slicing (``ChannelWatch.settings_for``)."""
Marked = tuple[int, PublicationState]


class SlicePublisher:
    """Publishes a node's sealed slices and seal watermarks (module docstring)."""

    def __init__(
        self,
        cluster: ClusterNode,
        slicing: Slicing,
        *,
        interval_ms: int = PUBLICATION_INTERVAL_MS,
        slices_per_round_max: int = SLICES_PER_ROUND_MAX,
        rows_per_write_max: int = DEFAULT_PUBLICATION_ROWS_MAX,
        watermarks_per_round_max: int = WATERMARKS_PER_ROUND_MAX,
    ) -> None:
        self._cluster = cluster
        self._slicing = slicing
        self._slices_max = slices_per_round_max
        self._rows_max = rows_per_write_max
        self._watermarks_max = watermarks_per_round_max
        self._slices = DISTRIBUTED_TABLES[REPLICATION_KEYSPACE, SLICES_TABLE]
        self._watermarks = DISTRIBUTED_TABLES[REPLICATION_KEYSPACE, WATERMARKS_TABLE]
        self.watermarks: dict[tuple[str, str], int] = {}
        """The watermark acknowledged last per table (this run)."""
        self.published_slices = 0
        self.unpublished_slices: int | None = None
        self.slice_write_failures = 0
        self.watermark_write_failures = 0
        self.last_error: str | None = None
        """The last failure (kept after recovery; ``failing`` says whether the last round
        failed)."""
        self.failing = False
        self._round_failed = False
        self._table_cursor = 0
        self._rounds = PeriodicRounds(cluster.clock, interval_ms, self._round, "publication")

    def start(self) -> None:
        self._rounds.start()

    def stop(self) -> None:
        self._rounds.stop()

    # -- a round -----------------------------------------------------------------------------

    def _round(self, finished: Callable[[], None]) -> None:
        capture = self._cluster.store.capture
        self._round_failed = False

        def finish() -> None:
            if not self._round_failed and self.failing:
                _log.info("replica capture publication works again")
                self.failing = False
            finished()

        def listed(found: list[SealedSlice] | None, error: BaseException | None) -> None:
            if error is not None or found is None:
                self._failed("listing unpublished slices", error)
                finish()
                return
            self._publish(found, finish)

        limit = self._slices_max
        self._cluster.offload(lambda: capture.unpublished(limit=limit), listed)

    def _publish(self, sealed: list[SealedSlice], finish: Callable[[], None]) -> None:
        batches = publication_batches(sealed, self._rows_max)
        acknowledged: list[SliceKey] = []
        remaining = len(batches)
        now_us = self._cluster.clock.now_us()
        ttl_s = self._slices.options.default_time_to_live_s

        def all_written() -> None:
            self._mark(acknowledged, finish)

        if not batches:
            all_written()
            return
        for batch in batches:
            rows = [sealed_slice_to_row(copy) for copy in batch]
            mutation = table_mutation(self._slices, rows, now_us, ttl_s=ttl_s)

            def written(error: BaseException | None, batch: Sequence[SealedSlice] = batch) -> None:
                nonlocal remaining
                if error is None:
                    acknowledged.extend(copy.key for copy in batch)
                else:
                    self.slice_write_failures += 1
                    self._failed("publishing sealed slices", error)
                remaining -= 1
                if remaining == 0:
                    all_written()

            self._cluster.write([mutation], {}, ConsistencyLevel.QUORUM, written)

    def _mark(self, keys: list[SliceKey], finish: Callable[[], None]) -> None:
        capture = self._cluster.store.capture

        def work() -> Marked:
            marked = capture.mark_published(keys) if keys else 0
            return marked, capture.publication_state()

        def marked(result: Marked | None, error: BaseException | None) -> None:
            if error is not None or result is None:
                self._failed("marking slices published", error)
                finish()
                return
            count, state = result
            self.published_slices += count
            self.unpublished_slices = sum(state.unpublished.values())
            self._raise_watermarks(state, finish)

        self._cluster.offload(work, marked)

    def _raise_watermarks(self, state: PublicationState, finish: Callable[[], None]) -> None:
        node = self._cluster.host.host_id
        wanted: list[SealWatermark] = []
        for keyspace, table in self._tables():
            width_ms = self._slicing(keyspace, table).slice_width_ms
            mark = state.watermark_ms(keyspace, table) // width_ms * width_ms
            if mark > self.watermarks.get((keyspace, table), -1) and mark >= 0:
                wanted.append(SealWatermark(node, keyspace, table, mark))
        if not wanted:
            finish()
            return
        remaining = len(wanted)
        for watermark in wanted:
            row = watermark_to_row(watermark)
            mutation = table_mutation(self._watermarks, [row], watermark.sealed_through_ms * 1000)

            def written(error: BaseException | None, watermark: SealWatermark = watermark) -> None:
                nonlocal remaining
                where = (watermark.keyspace, watermark.table)
                if error is None:
                    mark = max(self.watermarks.get(where, -1), watermark.sealed_through_ms)
                    self.watermarks[where] = mark
                else:
                    self.watermark_write_failures += 1
                    self._failed("raising seal watermarks", error)
                remaining -= 1
                if remaining == 0:
                    finish()

            self._cluster.write([mutation], {}, ConsistencyLevel.QUORUM, written)

    def _tables(self) -> list[tuple[str, str]]:
        """The schema's CDC tables, at most ``watermarks_per_round_max`` a round (in turns)."""
        tables = sorted(
            key for key, table in self._cluster.processor.schema.tables.items()
            if table.options.cdc.enabled
        )  # fmt: skip
        if len(tables) <= self._watermarks_max:
            return tables
        start = self._table_cursor % len(tables)
        self._table_cursor = start + self._watermarks_max
        return (tables + tables)[start : start + self._watermarks_max]

    def _failed(self, what: str, error: BaseException | None) -> None:
        text = f"{what}: {type(error).__name__}: {error}"
        if not self.failing:
            _log.warning("replica capture publication: %s (retrying every round)", text)
        else:
            _log.debug("replica capture publication: %s", text)
        self.last_error = text
        self.failing = self._round_failed = True

    def status(self) -> dict[str, object]:
        """For ``status.json``: slices published (this run) and waiting, watermarks, errors."""
        return {
            "published_slices": self.published_slices,
            "unpublished_slices": self.unpublished_slices,
            "slice_write_failures": self.slice_write_failures,
            "watermark_write_failures": self.watermark_write_failures,
            "watermarks_ms": {f"{k}.{t}": mark for (k, t), mark in sorted(self.watermarks.items())},
            "failing": self.failing,
            "last_error": self.last_error,
            "rounds": self._rounds.rounds,
        }
