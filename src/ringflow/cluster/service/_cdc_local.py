"""A node's own CDC generation rows (scylla-cdc.md §2, §4, §6): the description tables' names,
the internal v2 rows of ``system_distributed_everywhere.cdc_generation_descriptions_v2``,
``system.cdc_local`` naming the node's generation, and publication to the user-facing
``system_distributed`` tables, read and written in the node's local store.

One home for what the node's start-up (``ringflow.node``) and the cluster's generation services
(``_cdc_generations``, ``_cdc_rewrite``, ``_cdc_expiry``, ``_cdc_tables``, ``_capture``) share:
the cluster runtime no longer reaches up into the node package for them (issue 21).

Durability order, each step a committed store transaction: the internal v2 rows (in chunks),
then the ``system.cdc_local`` row naming the generation (the node's commit of its choice); then
publication, every streams row *before* the ``cdc_generation_timestamps`` row (a consumer that
sees the timestamp finds all the streams). Publication is idempotent.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import random
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ringflow.cdc import (
    DEFAULT_BATCH_BYTES_MAX,
    GenerationDescriptionV2Row,
    GenerationId,
    GenerationIdV1,
    GenerationIdV2,
    GenerationTimestampRow,
    TopologyDescription,
    description_from_generation_v2_rows,
    generate_topology_description,
    generation_description_v2_rows,
    publication_batches,
)
from ringflow.errors import InternalError
from ringflow.schema import (
    TEXT,
    TIMESTAMP,
    Cell,
    Mutation,
    Row,
    Table,
    cdc_local_row,
    deserialize,
    serialize,
    table_mutation,
)
from ringflow.storage import Store

_log = logging.getLogger(__name__)

GENERATION_TABLE = ("system_distributed_everywhere", "cdc_generation_descriptions_v2")
STREAMS_TABLE = ("system_distributed", "cdc_streams_descriptions_v2")
TIMESTAMPS_TABLE = ("system_distributed", "cdc_generation_timestamps")
V1_GENERATION_TABLE = ("system_distributed", "cdc_generation_descriptions")
STREAMS_V1_TABLE = ("system_distributed", "cdc_streams_descriptions")
CDC_LOCAL_TABLE = ("system", "cdc_local")
CDC_LOCAL_KEY = "cdc_local"
TIMESTAMPS_KEY = "timestamps"
ROWS_PER_WRITE_MAX = 2000
"""Description rows per store transaction: far inside the store's batch limits."""

_T = TypeVar("_T")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True, slots=True)
class CdcGeneration:
    """The generation a node operates with: its id and its topology description."""

    id: GenerationId
    description: TopologyDescription


def store_first_generation(
    store: Store,
    tokens: Sequence[int],
    sharding: tuple[int, int],
    *,
    now_us: int,
    rng: random.Random,
) -> CdcGeneration:
    """Generate a generation of ``tokens`` with the node's ``sharding`` (shard count, ignore
    msb), store it (internal rows, then ``system.cdc_local``) and return it; it starts now (a
    cluster's first generation needs no delay: nothing can have written CDC data before the
    node existed, ``ringflow.node``'s start-up)."""
    description = generate_topology_description(tokens, lambda _end: sharding, rng)
    generation_id = GenerationIdV2(now_us // 1000, uuid.UUID(int=rng.getrandbits(128), version=4))
    rows = generation_description_v2_rows(generation_id.uuid, description)
    table = store.table(*GENERATION_TABLE)
    for chunk in _chunks(rows, ROWS_PER_WRITE_MAX):
        store.apply([internal_rows_mutation(table, chunk, now_us)], now_s=now_us // 1_000_000)
    commit = cdc_local_row(generation_id.timestamp_ms, generation_id.uuid, timestamp_us=now_us)
    store.apply([commit], now_s=now_us // 1_000_000)
    return CdcGeneration(generation_id, description)


def internal_rows_mutation(
    table: Table, rows: Sequence[GenerationDescriptionV2Row], now_us: int
) -> Mutation:
    """Rows of ``cdc_generation_descriptions_v2``; ``num_ranges`` is static, set apart."""
    values = [
        {name: value for name, value in row.to_columns().items() if name != "num_ranges"}
        for row in rows
    ]
    mutation = table_mutation(table, values, now_us)
    num_ranges = serialize(table.column("num_ranges").type, rows[0].num_ranges, "num_ranges")
    static = Row((), None, None, {"num_ranges": Cell.live(now_us, num_ranges)})
    return dataclasses.replace(mutation, static_row=static)


def local_generation_id(store: Store, now_us: int) -> GenerationId | None:
    """The generation id ``system.cdc_local`` names: v2 with a uuid, v1 (timestamp) without."""
    now_s = now_us // 1_000_000
    key = serialize(TEXT, CDC_LOCAL_KEY)
    local = store.read_row(CDC_LOCAL_TABLE, [key], (), now_s=now_s)
    if local is None or "streams_timestamp" not in local.values:
        return None
    cdc_local = store.table(*CDC_LOCAL_TABLE)
    timestamp_ms = _milliseconds(_value(cdc_local, local.values, "streams_timestamp"))
    if "uuid" not in local.values:
        return GenerationIdV1(timestamp_ms)
    generation_uuid = _value(cdc_local, local.values, "uuid")
    if not isinstance(generation_uuid, uuid.UUID):
        raise InternalError(f"system.cdc_local: uuid {generation_uuid!r} is not a UUID")
    return GenerationIdV2(timestamp_ms, generation_uuid)


def load_local_generation(
    store: Store, now_us: int, *, missing_ok: bool = False
) -> CdcGeneration | None:
    """The v2 generation named by ``system.cdc_local``, rebuilt from its internal rows; None for
    a node that never committed one, or whose generation is a v1 one (its description lives in
    the replicated ``system_distributed``: the cluster service loads it through the
    coordinator, see ``local_generation_id``). InternalError if the named rows are missing or
    partial, unless ``missing_ok`` (a cluster node: the generation may have expired and its rows
    been deleted while the node was down; the cluster service then prepares the id, retries and
    learns the newer generations from gossip, as Scylla does)."""
    generation_id = local_generation_id(store, now_us)
    if not isinstance(generation_id, GenerationIdV2):
        return None
    timestamp_ms, generation_uuid = generation_id.timestamp_ms, generation_id.uuid
    rows = read_generation_v2_rows(store, generation_uuid, now_us)
    try:
        description = description_from_generation_v2_rows(rows)
    except Exception as error:
        if missing_ok:
            _log.warning("CDC generation %s not loadable locally: %s", generation_uuid, error)
            return None
        raise InternalError(
            f"system.cdc_local names CDC generation {generation_uuid}, whose stored "
            f"description is unusable: {error}"
        ) from error
    return CdcGeneration(GenerationIdV2(timestamp_ms, generation_uuid), description)


def read_generation_v2_rows(
    store: Store, generation_uuid: uuid.UUID, now_us: int
) -> list[GenerationDescriptionV2Row]:
    """The local internal v2 rows of one generation (empty if none are stored here)."""
    table = store.table(*GENERATION_TABLE)
    partition = [serialize(table.column("id").type, generation_uuid)]
    stored = store.read_partition(table, partition, now_s=now_us // 1_000_000)
    return [
        GenerationDescriptionV2Row(
            generation_uuid,
            _int(_value(table, row.values, "range_end", row.clustering[0])),
            _int(_value(table, row.values, "ignore_msb")),
            _int(_value(table, row.values, "num_ranges")),
            tuple(sorted(_iterable(_value(table, row.values, "streams")))),
        )
        for row in stored
        if not row.static_only
    ]


def _value(
    table: Table, values: Mapping[str, bytes], name: str, data: bytes | None = None
) -> object:
    raw = values.get(name, data)
    if raw is None:
        raise InternalError(f"{table.keyspace}.{table.name}: column {name} is missing")
    return deserialize(table.column(name).type, raw, name)


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise InternalError(f"stored CDC description: expected an int, got {value!r}")
    return value


def _milliseconds(value: object) -> int:
    """A deserialized CQL ``timestamp`` (a datetime, UTC if naive) in ms since the epoch."""
    if not isinstance(value, datetime.datetime):
        raise InternalError(f"stored CDC generation: expected a timestamp, got {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return (value - _EPOCH) // datetime.timedelta(milliseconds=1)


def _iterable(value: object) -> Iterable[bytes]:
    if not isinstance(value, frozenset):
        raise InternalError(f"stored CDC description: expected a set of blobs, got {value!r}")
    return [bytes(element) for element in value]


def is_published(store: Store, generation_id: GenerationId, now_us: int) -> bool:
    """Whether the generation's ``cdc_generation_timestamps`` row (the commit) exists."""
    row = store.read_row(
        TIMESTAMPS_TABLE,
        [serialize(TEXT, TIMESTAMPS_KEY)],
        [serialize(TIMESTAMP, generation_id.timestamp_ms)],
        now_s=now_us // 1_000_000,
    )
    return row is not None


def publish_generation(store: Store, generation: CdcGeneration, *, now_us: int) -> bool:
    """Write the user-facing description rows: every streams row first, the timestamp row
    last, each batch committed before the next. No-op (False) if already published."""
    if is_published(store, generation.id, now_us):
        return False
    time_ms = generation.id.timestamp_ms
    streams = store.table(*STREAMS_TABLE)
    timestamps = store.table(*TIMESTAMPS_TABLE)
    for batch in publication_batches(time_ms, generation.description, DEFAULT_BATCH_BYTES_MAX):
        table = timestamps if isinstance(batch[0], GenerationTimestampRow) else streams
        for chunk in _chunks(batch, ROWS_PER_WRITE_MAX):
            values = [row.to_columns() for row in chunk]
            mutation = table_mutation(table, values, now_us)
            store.apply([mutation], now_s=now_us // 1_000_000)
    return True


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
