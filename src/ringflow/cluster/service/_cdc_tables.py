"""The CDC description tables through the coordinator: reads at a consistency level, decoded rows.

Used by the generation services (v1 generations, the v1 -> v2 rewrite, expiry), which run on
the ``ClusterNode``'s thread. ``system_distributed`` is replicated (RF up to 3), so a node's own
copy of a row written at QUORUM may be missing: these helpers read through the coordinator
(``ClusterNode.read``/``read_range``: the replicas' answers reconciled, read repair included)
and turn the raw partitions into live rows of Python values.

Also the v1 generation's rows (Scylla 4.3: the whole description in one row) written, read back
and published by a node without ``CDC_GENERATIONS_V2``.

``live_rows`` is pure: a raw partition (every tombstone still there) to its live rows at
``now_s``. The description tables are written with INSERTs and deleted whole (partition
deletions), so row markers, cells, row and partition deletions are what it interprets; range
tombstones are honoured too, by their clustering prefix.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence

from ringflow.cdc import (
    GenerationDescriptionV1Row,
    GenerationId,
    GenerationIdV1,
    TopologyDescription,
    description_from_generation_v1_row,
    generation_description_v1_row,
    streams_description_v1_row,
)
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster.service._cdc_local import STREAMS_V1_TABLE, V1_GENERATION_TABLE
from ringflow.cluster.service._node import ClusterNode
from ringflow.ring import MIN_TOKEN
from ringflow.schema import (
    Cell,
    DeletionTime,
    Mutation,
    Row,
    Table,
    deserialize,
    serialize,
    table_mutation,
)
from ringflow.storage import Store

RowValues = dict[str, object]
RowsDone = Callable[[list[RowValues] | None, BaseException | None], None]
SCAN_PAGE_PARTITIONS = 500
"""Partitions per range read of a full scan (the coordinator pages by ``covered``)."""


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def ms_of(value: object) -> int:
    """A deserialized CQL ``timestamp`` (a datetime, UTC if naive) in ms since the epoch."""
    if not isinstance(value, datetime.datetime):
        raise TypeError(f"expected a timestamp, got {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return (value - _EPOCH) // datetime.timedelta(milliseconds=1)


def _newest_deletion(*deletions: DeletionTime | None) -> int:
    return max((d.marked_for_delete_at_us for d in deletions if d is not None), default=-1)


def _covering_tombstones(mutation: Mutation, row: Row) -> int:
    newest = -1
    for tombstone in mutation.range_tombstones:
        start, end = tombstone.start, tombstone.end
        key = row.clustering
        after_start = key[: len(start.prefix)] >= start.prefix if start.prefix else True
        before_end = key[: len(end.prefix)] <= end.prefix if end.prefix else True
        if after_start and before_end:
            newest = max(newest, tombstone.deletion.marked_for_delete_at_us)
    return newest


def live_rows(table: Table, mutation: Mutation, now_s: int) -> list[RowValues]:
    """The live clustered rows of a raw partition, each with its key and live simple cells."""
    keys = {
        column.name: deserialize(column.type, raw, column.name)
        for column, raw in zip(table.partition_key_columns, mutation.partition_key, strict=True)
    }
    partition_deleted = _newest_deletion(mutation.partition_deletion)
    found = []
    for row in mutation.rows:
        deleted = max(partition_deleted, _newest_deletion(row.deletion))
        deleted = max(deleted, _covering_tombstones(mutation, row))
        values: RowValues = {}
        for name, data in row.cells.items():
            if isinstance(data, Cell) and data.timestamp_us > deleted and data.is_live(now_s):
                values[name] = deserialize(table.column(name).type, data.value, name)
        marker = row.liveness
        marker_live = marker is not None and marker.timestamp_us > deleted and marker.is_live(now_s)
        if not values and not marker_live:
            continue
        clustering = {
            column.name: deserialize(column.type, raw, column.name)
            for column, raw in zip(table.clustering_columns, row.clustering, strict=True)
        }
        found.append({**keys, **clustering, **values})
    return found


def partition_deletion(table: Table, key: Sequence[object], timestamp_us: int) -> Mutation:
    """A mutation deleting the partition ``key`` (Python values) at ``timestamp_us``."""
    raw = tuple(
        serialize(column.type, value, column.name)
        for column, value in zip(table.partition_key_columns, key, strict=True)
    )
    return Mutation(
        table.keyspace,
        table.name,
        raw,
        partition_deletion=DeletionTime(timestamp_us, timestamp_us // 1_000_000),
    )


def read_partition_rows(
    cluster: ClusterNode,
    table: Table,
    key: Sequence[object],
    consistency: ConsistencyLevel,
    done: RowsDone,
) -> None:
    """The live rows of one partition, read through the coordinator at ``consistency``."""
    try:
        raw = tuple(
            serialize(column.type, value, column.name)
            for column, value in zip(table.partition_key_columns, key, strict=True)
        )
    except Exception as error:
        done(None, error)
        return

    def answered(partition: Mutation | None, error: BaseException | None) -> None:
        if error is not None:
            done(None, error)
            return
        now_s = cluster.clock.now_ms() // 1000
        try:
            rows = [] if partition is None else live_rows(table, partition, now_s)
        except Exception as decode_error:
            done(None, decode_error)
            return
        done(rows, None)

    cluster.read(table.keyspace, table.name, raw, consistency, answered)


def scan_rows(
    cluster: ClusterNode, table: Table, consistency: ConsistencyLevel, done: RowsDone
) -> None:
    """Every live row of ``table`` (a full-ring range read, paged), at ``consistency``."""
    collected: list[RowValues] = []

    def page(left: int) -> None:
        cluster.read_range(
            table.keyspace, table.name, left, MIN_TOKEN, consistency, SCAN_PAGE_PARTITIONS, read
        )

    def read(
        partitions: list[Mutation] | None, covered: int | None, error: BaseException | None
    ) -> None:
        if error is not None or partitions is None:
            done(None, error or RuntimeError("range read without an answer"))
            return
        now_s = cluster.clock.now_ms() // 1000
        try:
            for partition in partitions:
                collected.extend(live_rows(table, partition, now_s))
        except Exception as decode_error:
            done(None, decode_error)
            return
        if covered is None:
            done(collected, None)
        else:
            page(covered)

    page(MIN_TOKEN)


def write_in_order(
    cluster: ClusterNode,
    mutations: Sequence[Mutation],
    consistency: ConsistencyLevel,
    done: Callable[[BaseException | None], None],
) -> None:
    """Coordinated writes one after the other, each acknowledged before the next."""
    if not mutations:
        done(None)
        return

    def next_one(error: BaseException | None) -> None:
        if error is not None:
            done(error)
        else:
            write_in_order(cluster, mutations[1:], consistency, done)

    cluster.write([mutations[0]], {}, consistency, next_one)


# --- v1 generations (Scylla 4.3's one-row descriptions) -----------------------------------


def v1_row(time_ms: int, row: RowValues) -> GenerationDescriptionV1Row:
    """A ``cdc_generation_descriptions`` row as read back (Python values) as a typed row."""
    description = row["description"]
    if not isinstance(description, Sequence):
        raise TypeError(f"v1 description of {time_ms} is not a list: {description!r}")
    entries = tuple(
        (int(end), tuple(bytes(blob) for blob in streams), int(msb))
        for end, streams, msb in description
    )
    return GenerationDescriptionV1Row(time_ms, entries)


def v1_description(rows: Sequence[RowValues]) -> TopologyDescription | None:
    """A v1 generation's description from its ``cdc_generation_descriptions`` row (as read
    through the coordinator); None while it is not there."""
    for row in rows:
        if row.get("description") is not None and row.get("time") is not None:
            return description_from_generation_v1_row(v1_row(ms_of(row["time"]), row))
    return None


def v1_generation_mutations(
    store: Store, generation: GenerationIdV1, description: TopologyDescription, now_us: int
) -> list[Mutation]:
    """The single internal v1 row of a new v1 generation (Scylla 4.3's one-cell description)."""
    row = generation_description_v1_row(generation.timestamp_ms, description)
    return [table_mutation(store.table(*V1_GENERATION_TABLE), [row.to_columns()], now_us)]


def v1_publication_mutations(
    store: Store, generation: GenerationId, description: TopologyDescription, now_us: int
) -> list[Mutation]:
    """What a node without ``CDC_GENERATIONS_V2`` publishes: the one v1 streams row."""
    row = streams_description_v1_row(generation.timestamp_ms, description)
    return [table_mutation(store.table(*STREAMS_V1_TABLE), [row.to_columns()], now_us)]
