"""A CDC-enabled base mutation and its log rows, written together inside one transaction.

Order (scylla-cdc.md §5, seed 000 "each replica either receives both writes or none"): read the
pre-image of every row ``image_rows_needed`` lists, write the base mutation, read the same rows
back as the post-image (when the table asks for post-images), build the log mutations with
``build_log_mutations`` and write them. The caller runs all of it inside the batch's single
transaction, so the reads see the batch's earlier writes and no other writer can interleave.

Post-images are the rows as read back after the base write, so they show the reconciled state
(a base write that loses to newer data shows the newer data), which is what a reader of the
base table would see at that moment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ringflow.cdc import (
    CdcCapture,
    DeltaRow,
    DeltaRowBuilder,
    RowImage,
    build_log_mutations,
    delta_row_builder,
    image_rows_needed,
)
from ringflow.schema import Mutation, Table
from ringflow.storage._catalog import TableInfo
from ringflow.storage._write import (
    FlatMutation,
    LogAppendRow,
    delta_row_append,
    flatten_built_log,
)

Clustering = tuple[bytes, ...]
ImageReader = Callable[[int, bytes, Sequence[Clustering]], Mapping[Clustering, RowImage]]
"""Reads the images of rows of one partition (token, key bytes): absent key = no such row."""


class PendingWrites(Protocol):
    """The batch's buffered writes: ``add`` queues, ``flush`` sends the queue to SQLite."""

    def add(self, flat: FlatMutation) -> None: ...

    def add_log_atom(self, queued: LogAppendRow, base: Table, delta: DeltaRow) -> None:
        """Queue the one packed atom of ``base``'s log row ``delta`` (appended to
        ``log_queue`` on flush)."""

    def add_log(
        self, flat: FlatMutation, base_name: str, mutation: Mutation, *, direct: bool
    ) -> None:
        """Queue log ``mutation`` (flattened: ``flat``) of base table ``base_name``: built by
        the store, or applied as given (``direct``)."""

    def flush(self) -> None: ...

    def flush_partition(self, tid: int, token: int, partition_key: bytes) -> None:
        """``flush`` if a queued write touches that partition of table ``tid`` (a read of the
        partition must see it); else keep queuing."""


@dataclass(frozen=True, slots=True)
class CdcWriter:
    """Writes one base table's mutations with their log rows."""

    base: TableInfo
    log: TableInfo
    read_images: ImageReader
    delta_rows: DeltaRowBuilder | None = field(init=False)
    """The direct path to a delta-only write's one log row (None: the table has images)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "delta_rows", delta_row_builder(self.base.table, self.log.table))

    def apply(
        self,
        mutation: Mutation,
        flat: FlatMutation,
        capture: CdcCapture,
        now_s: int,
        writes: PendingWrites,
    ) -> int:
        """Queue ``flat`` (the flattened ``mutation``) and its log rows; returns the number of
        log mutations. Queued writes to the partition are flushed before each image read, so a
        read sees every earlier write of the batch; writes elsewhere (other partitions, the log)
        and everything without images stay queued (one executemany for the whole batch)."""
        base = self.base.table
        delta_rows = self.delta_rows
        now_s = capture.clock_s(now_s)
        if delta_rows is not None:  # no images: the common write's one log row packed straight
            delta = delta_rows(mutation, capture, now_s)
            atom = None if delta is None else delta_row_append(self.log, delta)
            if atom is not None and delta is not None:
                writes.add(flat)
                writes.add_log_atom(atom, base, delta)
                return 1
        needed = image_rows_needed(base, mutation)
        position = (flat.token, flat.partition_key)
        preimage = None
        if needed:
            writes.flush_partition(self.base.tid, *position)
            preimage = self.read_images(*position, needed)
        writes.add(flat)
        postimage = None
        if needed and base.options.cdc.postimage:
            writes.flush_partition(self.base.tid, *position)
            postimage = self.read_images(*position, needed)
        log_mutations = build_log_mutations(
            base, self.log.table, mutation, capture, now_s, preimage=preimage, postimage=postimage
        )
        for log_mutation in log_mutations:
            log_flat = flatten_built_log(self.log, log_mutation)
            writes.add_log(log_flat, base.name, log_mutation, direct=False)
        return len(log_mutations)
