"""Base mutation → CDC log mutations: delta, pre-image and post-image rows, exactly as Scylla.

Implements ``shared/reference/scylla-cdc.md`` §5 "How one base mutation becomes log rows",
following Scylla's ``cdc/log.cc`` (``log_mutation_builder``, ``process_change_visitor``,
``transformer::generate_image``) and ``docs/features/cdc/cdc-basic-operations.rst``,
``cdc-advanced-types.rst``, ``cdc-preimages.rst``. Pure: the stream id and the random low bits of
``cdc$time`` come in a :class:`CdcCapture` chosen once per base mutation by the coordinator, the
clock comes as ``now_s`` (the coordinator's, which the capture carries: ``CdcCapture.clock_s``),
pre-images come from the caller's read, so every replica builds byte-identical log rows.

Rules (splitting and images: ``_log_split``, ``_log_images``):

- One log mutation per timestamp bucket, in increasing timestamp order, all in partition
  ``(stream_id,)``. Rows of a bucket share ``cdc$time = timeuuid(ts, low bits)`` and are
  numbered by ``cdc$batch_seq_no`` from 0: pre-images, then one delta row per change (two for a
  range deletion), then post-images; ``cdc$end_of_batch = true`` on the last row only.
- Every row carries the base partition key columns and ``cdc$operation``. Delta rows of a row
  carry its clustering key (a range bound row: the bound's prefix; unbounded = null);
  ``cdc$ttl`` is the TTL of the row's last live TTL'd element (row marker, then columns by name).
- Delta values (``delta: full``): a live cell's value; a dead cell ``cdc$deleted_X = true``; a
  collection's tombstone ``cdc$deleted_X = true``, its dead cells' keys in
  ``cdc$deleted_elements_X``, its live cells frozen in ``X`` (a list's keyed by timeuuid, a UDT
  always written with unset fields null). ``delta: keys`` writes none of these.
- An unbounded range end is logged with the inclusive operation (5 or 7), as Scylla represents
  "unbounded" as an inclusive bound of the empty prefix.
- Every log cell has the bucket's timestamp and expires ``ttl`` (cdc option) seconds after
  ``now_s`` (``ttl == 0``: never). Like Scylla, log rows carry no row marker: the operation
  cell keeps them alive.

Cost (this runs once per CDC write, on the write path): what a table definition implies is
derived once per ``Table`` object (``_log_values.base_plan``), and the most common write, one
row upserted at one timestamp without images, takes a direct path (:func:`_single_row_delta`)
that gives exactly what the general one gives (``tests/unit/cdc/test_log_rows_fast_paths.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from ringflow.cdc._log_images import (
    ImageState,
    RowImage,
    checked_image,
    complex_delta,
    image_columns,
)
from ringflow.cdc._log_input import is_static_key, normalize_mutation
from ringflow.cdc._log_schema import (
    END_OF_BATCH_COLUMN,
    OPERATION_COLUMN,
    TTL_COLUMN,
    CdcOperation,
    deleted_column_name,
    deleted_elements_column_name,
)
from ringflow.cdc._log_split import (
    Bucket,
    Change,
    PartitionDeletion,
    RangeDeletion,
    RowChange,
    RowDeletion,
    cell_ttl_s,
    marker_ttl_s,
    ordered_cells,
    split_changes,
)
from ringflow.cdc._log_values import (
    TRUE,
    BasePlan,
    Clustering,
    ClusteringKey,
    IdentityCache,
    base_plan,
    bigint,
    clustering_key,
    int32,
    key_set,
    path_type,
    timeuuid_bytes,
    tinyint,
)
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    NO_DELETION_TIME,
    Cell,
    ClusteringBound,
    ColumnData,
    Mutation,
    PreimageMode,
    Row,
    Table,
)

_STREAM_ID_SIZE = 16
_LOW_BITS_LIMIT = 2**64

_START_OPERATION = {
    True: CdcOperation.RANGE_DELETE_START_INCLUSIVE,
    False: CdcOperation.RANGE_DELETE_START_EXCLUSIVE,
}
_END_OPERATION = {
    True: CdcOperation.RANGE_DELETE_END_INCLUSIVE,
    False: CdcOperation.RANGE_DELETE_END_EXCLUSIVE,
}
_OPERATION_VALUE = MappingProxyType({operation: tinyint(operation) for operation in CdcOperation})


def _log_column_names(log: Table) -> frozenset[str]:
    return frozenset(column.name for column in log.columns)


_log_columns: IdentityCache[Table, frozenset[str]] = IdentityCache(_log_column_names, limit=256)
"""The column names of a log table (cached per ``Table`` object, like ``base_plan``)."""


@dataclass(frozen=True, slots=True)
class CdcCapture:
    """What the coordinator draws once per base mutation: the stream, ``cdc$time``'s low bits
    and its clock (``now_s``), which the log rows' TTL counts from on every replica."""

    stream_id: bytes
    timeuuid_low_bits: int
    now_s: int | None = None
    """The coordinator's clock (s) when it drew the capture: every replica's log rows expire
    ``ttl`` after it, so they are byte-identical (Scylla builds the log mutation on the
    coordinator). Counted from each replica's own clock at apply, they differed by the seconds
    between the replicas' applies (a hint, a clock skew, a second boundary): digest mismatches
    on CDC log reads and repairs streaming the log for nothing. None: a capture from a peer
    that does not send it (the replica's clock, as before)."""

    def __post_init__(self) -> None:
        if not isinstance(self.stream_id, bytes) or len(self.stream_id) != _STREAM_ID_SIZE:
            raise InvalidRequest(f"a CDC stream id is 16 bytes, got {self.stream_id!r}")
        low_bits = self.timeuuid_low_bits
        if not isinstance(low_bits, int) or not 0 <= low_bits < _LOW_BITS_LIMIT:
            raise InvalidRequest(
                f"timeuuid low bits must be an unsigned 64-bit int, got {self.timeuuid_low_bits}"
            )
        now_s = self.now_s
        if now_s is not None and (type(now_s) is not int or not 0 <= now_s < 2**31):
            raise InvalidRequest(f"a capture's clock is a 32-bit count of seconds, got {now_s!r}")

    def fields(self) -> list[object]:
        """Its wire form (write units, stored hints): ``[stream, low bits]``, then the clock
        when it has one."""
        head: list[object] = [self.stream_id, self.timeuuid_low_bits]
        return head if self.now_s is None else [*head, self.now_s]

    @classmethod
    def from_fields(cls, fields: Sequence[object]) -> CdcCapture:
        """The capture of :meth:`fields` (2 fields: from a peer that does not send its
        clock); InvalidRequest for any other shape or type."""
        if len(fields) not in (2, 3):
            raise InvalidRequest(f"a capture has 2 or 3 fields, got {len(fields)}")
        stream_id, low_bits, *clock = fields
        now_s = clock[0] if clock else None
        if type(low_bits) is not int or (now_s is not None and type(now_s) is not int):
            raise InvalidRequest(f"a capture's bits and clock are ints, got {fields!r:.80}")
        return cls(stream_id, low_bits, now_s)  # type: ignore[arg-type]  # checked there

    def clock_s(self, replica_now_s: int) -> int:
        """What the log rows' TTL counts from: the coordinator's clock, else the replica's."""
        return replica_now_s if self.now_s is None else self.now_s


def _check_enabled(base: Table) -> None:
    if not base.options.cdc.enabled:
        raise InvalidRequest(f"CDC is not enabled on {base.keyspace}.{base.name}")


def _image_keys(plan: BasePlan, mutation: Mutation) -> list[Clustering]:
    keys: list[Clustering] = [] if mutation.static_row is None else [()]
    keys += [row.clustering for row in mutation.rows]
    if mutation.partition_deletion is not None and not plan.clustering_names and () not in keys:
        keys.append(())  # Scylla #26382: like a row deletion for images
    return keys


def image_rows_needed(base: Table, mutation: Mutation) -> list[Clustering]:
    """The rows whose state before the write :func:`build_log_mutations` needs as ``preimage``.

    Empty unless pre- or post-images are enabled. ``()`` first for the static row (in a table with
    clustering columns; in one without, ``()`` is its only clustered row), then every clustered
    row the mutation writes or deletes, in clustering order; range and partition deletions need
    none, except a partition deletion in a table without clustering key (Scylla #26382).
    """
    _check_enabled(base)
    options = base.options.cdc
    if options.preimage is PreimageMode.OFF and not options.postimage:
        return []
    key = clustering_key(base)
    return _image_keys(base_plan(base), normalize_mutation(base, mutation, key))


@dataclass(slots=True)
class _BucketWriter:
    """Scylla's ``log_mutation_builder`` for one bucket: allocates rows, fills columns."""

    plan: BasePlan
    log: Table
    partition_key: dict[str, bytes]
    """The base partition key columns' values, which every row carries."""
    rows: list[dict[str, bytes]]

    @property
    def base(self) -> Table:
        return self.plan.table

    def new_row(
        self, operation: CdcOperation, clustering: Clustering | None = None
    ) -> dict[str, bytes]:
        values = {OPERATION_COLUMN: _OPERATION_VALUE[operation]}
        values.update(self.partition_key)
        if clustering is not None:  # a (possibly partial) key prefix; the rest stay null
            values.update(zip(self.plan.clustering_names, clustering, strict=False))
        self.rows.append(values)
        return values

    def finish(self, time: bytes, timestamp_us: int, ttl_s: int, now_s: int) -> tuple[Row, ...]:
        """The rows, every cell at ``timestamp_us``, expiring ``ttl_s`` after ``now_s`` (if > 0)."""
        if self.rows:
            self.rows[-1][END_OF_BATCH_COLUMN] = TRUE
        ttl, deletion_time = (ttl_s, now_s + ttl_s) if ttl_s > 0 else (0, NO_DELETION_TIME)
        names, cell, own_row = _log_columns(self.log), Cell._unchecked, Row._owning
        rows: list[Row] = []
        for number, values in enumerate(self.rows):
            if not values.keys() <= names:
                raise self._unknown_column(values)
            cells: dict[str, ColumnData] = {
                name: cell(timestamp_us, value, ttl, deletion_time)
                for name, value in values.items()
            }
            rows.append(own_row((time, int32(number)), None, None, cells))
        return tuple(rows)

    def _unknown_column(self, values: Mapping[str, bytes]) -> InvalidRequest:
        name = next(name for name in values if not self.log.has_column(name))
        return InvalidRequest(
            f"CDC log schema {self.log.keyspace}.{self.log.name} has no column {name!r}"
        )


# --- delta rows ---------------------------------------------------------------------------


def _row_ttl_s(plan: BasePlan, change: RowChange) -> int | None:
    """Scylla's ``_ttl_column``: set by the marker, then by every live cell, in visit order.

    That is the TTL of the last live cell in column-id order (then cell order), else the
    marker's: found as the live cell of the highest-ranked column, without sorting.
    """
    last: Cell | None = None
    last_rank = -1
    rank = plan.column_rank
    for name, data in change.cells.items():
        if isinstance(data, Cell):
            live = None if data.is_tombstone else data
        else:
            live = next((c for c in reversed(data.cells) if not c.is_tombstone), None)
        if live is None:
            continue
        column_rank = rank.get(name)
        if column_rank is None:  # not a column of the table: the general walk
            return _row_ttl_s_in_order(change)
        if column_rank > last_rank:
            last, last_rank = live, column_rank
    if last is not None:
        return cell_ttl_s(last) or None
    if change.marker is not None:
        return marker_ttl_s(change.marker) or None
    return None


def _row_ttl_s_in_order(change: RowChange) -> int | None:
    ttl_s: int | None = None
    if change.marker is not None:
        ttl_s = marker_ttl_s(change.marker) or None
    for _, data in ordered_cells(change.cells):
        cells = (data,) if isinstance(data, Cell) else data.cells
        for cell in cells:
            if not cell.is_tombstone:
                ttl_s = cell_ttl_s(cell) or None
    return ttl_s


def _delta_values(base: Table, change: RowChange, values: dict[str, bytes]) -> None:
    for name, data in change.cells.items():
        if isinstance(data, Cell):
            if data.is_tombstone:
                values[deleted_column_name(name)] = TRUE
            else:
                values[name] = data.value
            continue
        column_type = base.column(name).type
        delta = complex_delta(data)
        if delta.column_deleted:
            values[deleted_column_name(name)] = TRUE
        if delta.deleted_keys:
            keys = key_set(path_type(column_type), delta.deleted_keys)
            values[deleted_elements_column_name(name)] = keys
        added = delta.added_value(column_type)
        if added is not None:
            values[name] = added


def _write_row_change(writer: _BucketWriter, change: RowChange) -> None:
    operation = CdcOperation.INSERT if change.marker is not None else CdcOperation.UPDATE
    values = writer.new_row(operation, change.clustering)
    if writer.plan.delta_full:
        _delta_values(writer.base, change, values)
    ttl_s = _row_ttl_s(writer.plan, change)
    if ttl_s is not None:
        values[TTL_COLUMN] = bigint(ttl_s)


def _write_range_bound(
    writer: _BucketWriter, bound: ClusteringBound, operations: Mapping[bool, CdcOperation]
) -> None:
    writer.new_row(operations[bound.inclusive or bound.is_unbounded], bound.prefix)


def _write_change(writer: _BucketWriter, change: Change) -> None:
    if isinstance(change, RowChange):
        _write_row_change(writer, change)
    elif isinstance(change, RowDeletion):
        writer.new_row(CdcOperation.ROW_DELETE, change.clustering)
    elif isinstance(change, RangeDeletion):
        _write_range_bound(writer, change.tombstone.start, _START_OPERATION)
        _write_range_bound(writer, change.tombstone.end, _END_OPERATION)
    elif isinstance(change, PartitionDeletion):
        writer.new_row(CdcOperation.PARTITION_DELETE)


# --- images -------------------------------------------------------------------------------


def _write_image(
    writer: _BucketWriter,
    operation: CdcOperation,
    clustering: Clustering | None,
    state: Mapping[str, bytes | None] | None,
    columns: Iterable[str],
) -> None:
    """Scylla's ``generate_image``: nothing for an absent row; null pre-image columns flagged."""
    if state is None:
        return
    values = writer.new_row(operation, clustering)
    for name in columns:
        value = state.get(name)
        if value is not None:
            values[name] = value
        elif operation is CdcOperation.PRE_IMAGE:
            values[deleted_column_name(name)] = TRUE


def _write_preimages(writer: _BucketWriter, bucket: Bucket, state: ImageState) -> None:
    full = writer.plan.preimage is PreimageMode.FULL
    if bucket.affected_static:
        columns = writer.plan.static_names if full else sorted(bucket.affected_static)
        _write_image(writer, CdcOperation.PRE_IMAGE, None, state.image(None), columns)
    for clustering, affected in bucket.affected_rows:
        columns = writer.plan.regular_names if full else sorted(affected)
        image = state.image(clustering)
        _write_image(writer, CdcOperation.PRE_IMAGE, clustering, image, columns)


def _write_postimages(
    writer: _BucketWriter,
    bucket: Bucket,
    state: ImageState,
    override: Mapping[Clustering, RowImage] | None,
) -> None:
    keys: list[Clustering | None] = [None] if bucket.affected_static else []
    keys += [clustering for clustering, _ in bucket.affected_rows]
    for clustering in keys:
        image: Mapping[str, bytes | None] | None = state.image(clustering)
        if override is not None:
            image = override.get(() if clustering is None else clustering)
        plan = writer.plan
        columns = plan.static_names if clustering is None else plan.regular_names
        _write_image(writer, CdcOperation.POST_IMAGE, clustering, image, columns)


# --- the whole mutation -------------------------------------------------------------------


def _selected_static(base: Table, mutation: Mutation) -> set[str]:
    """The static columns Scylla's pre-image read selects (``pre_image_select``)."""
    if mutation.static_row is None:
        return set()
    options = base.options.cdc
    if options.postimage or options.preimage is PreimageMode.FULL:
        return set(image_columns(base, None))
    return set(mutation.static_row.cells)


def _initial_state(
    plan: BasePlan,
    mutation: Mutation,
    preimage: Mapping[Clustering, RowImage],
    key: ClusteringKey,
) -> ImageState:
    base = plan.table
    state = ImageState(base, key)
    if not preimage:
        return state
    for clustering in _image_keys(plan, mutation):
        image = preimage.get(clustering)
        if image is None:
            continue
        values = checked_image(base, clustering, image)
        if is_static_key(base, clustering):
            selected = _selected_static(base, mutation)
            state.static = {name: value for name, value in values.items() if name in selected}
        else:
            state.rows[clustering] = values
    return state


def _check_log(base: Table, log: Table) -> None:
    if (log.keyspace, log.name) != (base.keyspace, base.cdc_log_name):
        raise InvalidRequest(
            f"{log.keyspace}.{log.name} is not the CDC log of {base.keyspace}.{base.name}"
        )


def _bucket_rows(
    writer: _BucketWriter,
    bucket: Bucket,
    state: ImageState,
    postimage: Mapping[Clustering, RowImage] | None,
) -> None:
    plan = writer.plan
    if plan.preimage is not PreimageMode.OFF:
        _write_preimages(writer, bucket, state)
    for change in bucket.changes:
        _write_change(writer, change)
        if plan.images:  # the state is only read by images
            state.apply(change)
    if plan.postimage:
        _write_postimages(writer, bucket, state, postimage)


def build_log_mutations(
    base: Table,
    log: Table,
    mutation: Mutation,
    capture: CdcCapture,
    now_s: int,
    preimage: Mapping[Clustering, RowImage] | None = None,
    postimage: Mapping[Clustering, RowImage] | None = None,
) -> list[Mutation]:
    """The log mutations for one base mutation: one per timestamp bucket, increasing.

    ``preimage`` holds the state before the write of the rows :func:`image_rows_needed` lists
    (absent key = the row did not exist; absent column = null; values in the log column's type,
    see :data:`RowImage`). Post-images are computed from it the way Scylla does (pre-image ⊕
    deltas, bucket by bucket); ``postimage``, if given, replaces the post-image rows of the last
    bucket (a key absent there = no post-image row), for callers that read the row back instead.
    An empty or change-less mutation gives ``[]``. Malformed input raises InvalidRequest.
    """
    _check_enabled(base)
    _check_log(base, log)
    key = clustering_key(base)
    plan = base_plan(base)
    if not plan.images:
        single = _single_row_delta(plan, log, mutation, capture, now_s)
        if single is not None:
            return single
    return _build(plan, key, log, mutation, capture, now_s, preimage, postimage)


def _build(
    plan: BasePlan,
    key: ClusteringKey,
    log: Table,
    mutation: Mutation,
    capture: CdcCapture,
    now_s: int,
    preimage: Mapping[Clustering, RowImage] | None,
    postimage: Mapping[Clustering, RowImage] | None,
) -> list[Mutation]:
    """:func:`build_log_mutations` in general (checked, normalized, split, images)."""
    base = plan.table
    normal = normalize_mutation(base, mutation, key)
    buckets = split_changes(base, normal, key)
    state = _initial_state(plan, normal, preimage or {}, key)
    partition_key = dict(zip(plan.partition_key_names, normal.partition_key, strict=False))
    result: list[Mutation] = []
    for index, bucket in enumerate(buckets):
        writer = _BucketWriter(plan, log, partition_key, [])
        last_override = postimage if index == len(buckets) - 1 else None
        _bucket_rows(writer, bucket, state, last_override)
        time = timeuuid_bytes(bucket.timestamp_us, capture.timeuuid_low_bits)
        rows = writer.finish(time, bucket.timestamp_us, plan.ttl_s, now_s)
        result.append(Mutation(log.keyspace, log.name, (capture.stream_id,), rows=rows))
    return result


_FIRST_ROW = int32(0)


class DeltaRow(NamedTuple):
    """The one log row of the most common write without images (see :func:`_single_row_delta`),
    before it becomes a ``Mutation``: every cell of it has ``timestamp_us``, ``ttl_s`` and
    ``local_deletion_time_s`` and no path, in ``values`` order; no marker, no deletion."""

    stream_id: bytes
    clustering: tuple[bytes, bytes]
    """``(cdc$time, cdc$batch_seq_no)``."""
    values: dict[str, bytes]
    timestamp_us: int
    ttl_s: int
    local_deletion_time_s: int


def single_row_delta(
    base: Table, log: Table, mutation: Mutation, capture: CdcCapture, now_s: int
) -> DeltaRow | None:
    """The log of ``mutation`` as one :class:`DeltaRow` when :func:`build_log_mutations` without
    images would give one mutation of that one row (the same values, order and cells), else
    None (then call :func:`build_log_mutations`). For a store that packs the row itself; one
    that logs many mutations of a table takes :func:`delta_row_builder` once instead."""
    builder = delta_row_builder(base, log)
    return None if builder is None else builder(mutation, capture, now_s)


def delta_row_builder(base: Table, log: Table) -> DeltaRowBuilder | None:
    """:func:`single_row_delta` for ``base`` and its ``log``, with the table checks done once
    (InvalidRequest if CDC is off or ``log`` is not the base's log); None if the table's log
    rows are never a single delta row (it has images)."""
    _check_enabled(base)
    _check_log(base, log)
    plan = base_plan(base)
    if plan.images:
        return None
    return _builder(plan, log)


def _single_row_delta(
    plan: BasePlan, log: Table, mutation: Mutation, capture: CdcCapture, now_s: int
) -> list[Mutation] | None:
    """The log of the most common write without images as a mutation, or None (see
    :class:`DeltaRowBuilder`)."""
    delta = _builder(plan, log)(mutation, capture, now_s)
    if delta is None:
        return None
    ts, ttl, deletion_time = delta.timestamp_us, delta.ttl_s, delta.local_deletion_time_s
    cell_of = Cell._unchecked
    log_cells: dict[str, ColumnData] = {
        name: cell_of(ts, value, ttl, deletion_time) for name, value in delta.values.items()
    }
    log_row = Row._owning(delta.clustering, None, None, log_cells)
    return [Mutation(log.keyspace, log.name, (delta.stream_id,), rows=(log_row,))]


_INSERT_VALUE = _OPERATION_VALUE[CdcOperation.INSERT]
_UPDATE_VALUE = _OPERATION_VALUE[CdcOperation.UPDATE]


@dataclass(frozen=True, slots=True, eq=False)
class DeltaRowBuilder:
    """The log of the most common write without images, or None for anything else.

    The write: one clustered row upserting simple cells of regular columns (and maybe a row
    marker), all with one timestamp and one TTL: a valid, already normal mutation that
    :func:`split_changes` leaves in one bucket of one change. Its log is one mutation of one
    delta row, built here with what :func:`_build` would do for it (same values, same column
    order, same cells) but without the general walk and its intermediate objects, which cost
    more than the row itself. Anything unusual, including every malformed input, returns None
    so that :func:`_build` handles (or refuses) it. What the table pair implies is derived once
    (:meth:`of`; cached per base ``Table`` object).
    """

    keyspace: str
    name: str
    log: Table
    partition_key_names: tuple[str, ...]
    clustering_names: tuple[str, ...]
    head_names: tuple[str, ...]
    """``cdc$operation``, then the partition and clustering key columns: every row's first."""
    atomic_regular: frozenset[str]
    deleted_names: Mapping[str, str]
    """``cdc$deleted_<name>`` of each atomic regular column (``delta: full`` only)."""
    log_columns: frozenset[str] | None
    """The log's columns if a delta row could name one it lacks; None if it has them all."""
    log_ttl_s: int

    @classmethod
    def of(cls, plan: BasePlan, log: Table) -> DeltaRowBuilder:
        base, full = plan.table, plan.delta_full
        atomic = plan.atomic_regular
        deleted = {name: deleted_column_name(name) for name in atomic} if full else {}
        names = {OPERATION_COLUMN, END_OF_BATCH_COLUMN, TTL_COLUMN, *deleted.values()}
        names.update(plan.partition_key_names, plan.clustering_names, atomic if full else ())
        columns = _log_columns(log)
        return cls(
            keyspace=base.keyspace,
            name=base.name,
            log=log,
            partition_key_names=plan.partition_key_names,
            clustering_names=plan.clustering_names,
            head_names=(OPERATION_COLUMN, *plan.partition_key_names, *plan.clustering_names),
            atomic_regular=atomic,
            deleted_names=MappingProxyType(deleted),
            log_columns=None if names <= columns else columns,
            log_ttl_s=plan.ttl_s,
        )

    def __call__(self, mutation: Mutation, capture: CdcCapture, now_s: int) -> DeltaRow | None:
        rows, partition_key = mutation.rows, mutation.partition_key
        if (
            len(rows) != 1
            or mutation.static_row is not None
            or mutation.range_tombstones
            or mutation.partition_deletion is not None
            or mutation.keyspace != self.keyspace
            or mutation.table != self.name
            or len(partition_key) != len(self.partition_key_names)
        ):
            return None
        row = rows[0]
        marker, cells, clustering = row.liveness, row.cells, row.clustering
        if (
            row.deletion is not None
            or len(clustering) != len(self.clustering_names)
            or (marker is None and not cells)
        ):
            return None
        if marker is None:
            change_key, operation = None, _UPDATE_VALUE
        else:  # marker_ttl_s inline
            change_key = (marker.timestamp_us, marker.ttl_s if marker.ttl_s > 0 else 0)
            operation = _INSERT_VALUE
        # cdc$operation, the partition key, the clustering key (lengths checked above)
        values = dict(zip(self.head_names, (operation, *partition_key, *clustering)))  # noqa: B905
        atomic, deleted = self.atomic_regular, self.deleted_names
        for name, cell in cells.items():
            if type(cell) is not Cell or cell.path is not None or name not in atomic:
                return None
            ttl = cell.ttl_s
            cell_key = (cell.timestamp_us, ttl if ttl > 0 else 0)  # cell_ttl_s inline
            if change_key is None:
                change_key = cell_key
            elif cell_key != change_key:
                return None  # several changes: split
            if deleted:  # delta: full
                if ttl == 0 and cell.local_deletion_time_s != NO_DELETION_TIME:  # tombstone
                    values[deleted[name]] = TRUE
                else:
                    values[name] = cell.value
        if change_key is None:  # not reached: the row has a marker or a cell
            return None
        return self._finish(values, change_key, capture, now_s)

    def _finish(
        self, values: dict[str, bytes], change_key: tuple[int, int], capture: CdcCapture, now_s: int
    ) -> DeltaRow | None:
        timestamp_us, ttl_s = change_key
        if ttl_s:  # the row's TTL: every live element of the one change has this one
            values[TTL_COLUMN] = bigint(ttl_s)
        values[END_OF_BATCH_COLUMN] = TRUE
        if self.log_columns is not None and not values.keys() <= self.log_columns:
            return None  # _build names the missing column
        log_ttl_s = self.log_ttl_s
        ttl, deletion_time = (
            (log_ttl_s, now_s + log_ttl_s) if log_ttl_s > 0 else (0, NO_DELETION_TIME)
        )
        time = timeuuid_bytes(timestamp_us, capture.timeuuid_low_bits)
        clustering = (time, _FIRST_ROW)
        return DeltaRow(capture.stream_id, clustering, values, timestamp_us, ttl, deletion_time)


def _new_builder_slots(base: Table) -> dict[int, DeltaRowBuilder]:
    return {}


_builder_slots: IdentityCache[Table, dict[int, DeltaRowBuilder]] = IdentityCache(
    _new_builder_slots, limit=256
)
"""Per base ``Table`` object: its :class:`DeltaRowBuilder` by ``id`` of the log ``Table`` (each
builder keeps its log alive, so an id is not reused while its entry exists)."""
_BUILDERS_PER_BASE = 4


def _builder(plan: BasePlan, log: Table) -> DeltaRowBuilder:
    """The cached :class:`DeltaRowBuilder` of ``plan``'s table and ``log``."""
    slots = _builder_slots(plan.table)
    builder = slots.get(id(log))
    if builder is None or builder.log is not log:
        builder = DeltaRowBuilder.of(plan, log)
        if len(slots) >= _BUILDERS_PER_BASE:
            slots.clear()
        slots[id(log)] = builder
    return builder
