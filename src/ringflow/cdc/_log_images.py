"""Row state behind CDC pre- and post-images, updated change by change the way Scylla does.

Implements ``shared/reference/scylla-cdc.md`` §5 "How one base mutation becomes log rows" items
4 and 5, following Scylla's ``cdc/log.cc`` (``transformer``, ``process_row_visitor``, ``merge``)
and ``docs/features/cdc/cdc-preimages.rst``. Rules:

- The state starts from the pre-image read: a clustered row is present iff the read returned it;
  the static row's state is its non-null selected static columns (all of them when post-images
  or full pre-images are on, else only those the mutation writes). Values are in the log column's
  type: a non-frozen set, map or UDT in its frozen form, a non-frozen list as
  ``map<timeuuid, T>`` with its cells' keys (:data:`RowImage`).
- Every change of every bucket is applied in log order. A live atomic cell sets the value, a dead
  one nulls it. A collection: its tombstone drops the previous value; then, if cells were added
  (or elements deleted from a non-null value) the value becomes previous ∪ added − deleted,
  ordered by the key type (added wins on equal keys); else null. A UDT's "added" value always
  exists (every field, null where not written), so a touched UDT never becomes null — Scylla
  shows ``{a: null, ...}`` after ``SET u = null`` too.
- A clustered row exists after any upsert, even one that only nulls columns (Scylla #7716). A
  row deletion drops its row, a range deletion every state row inside the range (#6900), a
  partition deletion every clustered row (not the static row).
- A pre-image shows the changed columns (all with ``preimage: full``) of a row present in the
  state, null ones as ``cdc$deleted_X = true``; a post-image shows every column of a row present
  after the bucket's changes. The static row is shown when its state is non-empty or an earlier
  change touched it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from ringflow.cdc._log_input import is_static_key, key_in_range, normalize_mutation
from ringflow.cdc._log_split import (
    Change,
    PartitionDeletion,
    RangeDeletion,
    RowChange,
    RowDeletion,
    split_changes,
)
from ringflow.cdc._log_values import (
    Clustering,
    ClusteringKey,
    clustering_key,
    frozen_cells,
    frozen_value,
    path_type,
    sorted_by_type,
)
from ringflow.errors import InvalidRequest
from ringflow.schema import Cell, ComplexColumn, CqlType, Mutation, Row, Table, UserType

RowImage = Mapping[str, bytes]
"""A row's state: column name → serialized value in the log column's type; absent = null."""


@dataclass(frozen=True, slots=True)
class ComplexDelta:
    """What one change does to a non-frozen collection or UDT (Scylla ``collection_visitor``)."""

    column_deleted: bool
    deleted_keys: tuple[bytes, ...]
    added: tuple[tuple[bytes, bytes], ...]

    def added_value(self, column_type: CqlType) -> bytes | None:
        """The delta's value column: the added cells frozen; for a UDT always (nulls unset)."""
        if not self.added and not isinstance(column_type, UserType):
            return None
        return frozen_value(column_type, self.added)


def complex_delta(data: ComplexColumn) -> ComplexDelta:
    """Split a change's collection into tombstone, removed keys and added ``(path, value)``s."""
    live = tuple((cell.path or b"", cell.value) for cell in data.cells if not cell.is_tombstone)
    dead = tuple(cell.path or b"" for cell in data.cells if cell.is_tombstone)
    return ComplexDelta(data.deletion is not None, dead, live)


def merged_value(column_type: CqlType, previous: bytes | None, delta: ComplexDelta) -> bytes | None:
    """The collection's state after ``delta`` (Scylla ``process_row_visitor`` + ``merge``).

    previous ∪ added − deleted, keys in the type's order, added winning on equal keys; null when
    nothing was added and nothing was removed from a non-null value.
    """
    if delta.column_deleted:
        previous = None
    added = delta.added_value(column_type)
    if added is None and not (delta.deleted_keys and previous is not None):
        return None
    cells = dict(frozen_cells(column_type, previous)) if previous is not None else {}
    cells.update(delta.added)
    for key in delta.deleted_keys:
        cells.pop(key, None)
    ordered = sorted_by_type(path_type(column_type), cells)
    return frozen_value(column_type, [(key, cells[key]) for key in ordered])


@dataclass(slots=True)
class ImageState:
    """Scylla's ``_static_row_state``, ``_clustering_row_states`` and "static row touched"."""

    base: Table
    clustering_key: ClusteringKey
    static: dict[str, bytes | None] = field(default_factory=dict)
    rows: dict[Clustering, dict[str, bytes | None]] = field(default_factory=dict)
    static_touched: bool = False

    def image(self, clustering: Clustering | None) -> dict[str, bytes | None] | None:
        """The state to show for the static row (None key) or a clustered row; None = no row."""
        if clustering is not None:
            return self.rows.get(clustering)
        if not self.static and not self.static_touched:
            return None
        return self.static

    def apply(self, change: Change) -> None:
        if isinstance(change, RowChange):
            self._apply_row(change)
        elif isinstance(change, RowDeletion):
            self.rows.pop(change.clustering, None)
        elif isinstance(change, RangeDeletion):
            start, end = change.tombstone.start, change.tombstone.end
            inside = [k for k in self.rows if key_in_range(self.clustering_key, start, end, k)]
            for key in inside:
                del self.rows[key]
        elif isinstance(change, PartitionDeletion):
            self.rows.clear()

    def _apply_row(self, change: RowChange) -> None:
        if change.clustering is None:
            self.static_touched = True
            state = self.static
        else:
            state = self.rows.setdefault(change.clustering, {})
        for name, data in change.cells.items():
            if isinstance(data, Cell):
                state[name] = None if data.is_tombstone else data.value
                continue
            column_type = self.base.column(name).type
            state[name] = merged_value(column_type, state.get(name), complex_delta(data))


def present_values(state: Mapping[str, bytes | None]) -> dict[str, bytes]:
    """The non-null part of a state row, as a :data:`RowImage`."""
    return {name: value for name, value in state.items() if value is not None}


def image_columns(base: Table, clustering: Clustering | None) -> list[str]:
    """The static columns (``clustering`` None) or the regular ones, in table order."""
    columns = base.static_columns if clustering is None else base.regular_columns
    return [column.name for column in columns]


def checked_image(base: Table, key: Clustering, image: RowImage) -> dict[str, bytes | None]:
    static = is_static_key(base, key)
    allowed = image_columns(base, None if static else key)
    for name, value in image.items():
        if name not in allowed or not isinstance(value, bytes):
            where = "static row" if static else f"row {key!r}"
            raise InvalidRequest(f"pre-image of {where}: {name!r} is not a value of {allowed}")
    return dict(image)


def _frozen_live(column_type: CqlType, cells: Iterable[Cell]) -> bytes:
    by_path = {cell.path or b"": cell.value for cell in cells}
    order = sorted_by_type(path_type(column_type), by_path)
    return frozen_value(column_type, [(path, by_path[path]) for path in order])


def row_image(base: Table, row: Row, now_s: int) -> RowImage | None:
    """The :data:`RowImage` of a stored row as a CQL read at ``now_s`` would return it.

    ``row`` is the reconciled row (static row: clustering ``()`` in a table with clustering
    columns); shadowing by partition and range deletions is the caller's (``shadow_row``). Dead,
    expired and shadowed cells are null; a non-frozen column with no live cell is null. A
    clustered row exists with a live row marker or any live value; the static row with any value.
    None when the row does not exist.
    """
    static = is_static_key(base, row.clustering)
    shadow = row.deletion
    values: dict[str, bytes] = {}
    for name, data in row.cells.items():
        column = base.column(name)
        cells = (data,) if isinstance(data, Cell) else data.cells
        tombstone = None if isinstance(data, Cell) else data.deletion
        live = [
            cell
            for cell in cells
            if cell.is_live(now_s)
            and not (shadow is not None and shadow.deletes(cell.timestamp_us))
            and not (tombstone is not None and tombstone.deletes(cell.timestamp_us))
        ]
        if isinstance(data, Cell):
            if live:
                values[name] = data.value
        elif live:
            values[name] = _frozen_live(column.type, live)
    marker = row.liveness
    marker_live = (
        marker is not None
        and marker.is_live(now_s)
        and not (shadow is not None and shadow.deletes(marker.timestamp_us))
    )
    exists = bool(values) or (marker_live and not static)
    return values if exists else None


def apply_delta_to_image(
    base: Table, before: RowImage | None, row: Row, now_s: int
) -> RowImage | None:
    """The image of one row after applying a base ``row`` the way Scylla's post-image does.

    ``before`` is the row's image (None = absent). The row's changes are split and applied in
    log order; ``now_s`` is accepted for symmetry with :func:`row_image` but, as in Scylla, the
    merge ignores expiry. A row deletion gives None; so does a static row left without values.
    """
    del now_s  # Scylla's state merge does not look at the clock
    static = is_static_key(base, row.clustering)
    partition_key = tuple(b"" for _ in base.partition_key_columns)
    mutation = Mutation(base.keyspace, base.name, partition_key)
    mutation = replace(mutation, static_row=row) if static else replace(mutation, rows=(row,))
    key = clustering_key(base)
    normal = normalize_mutation(base, mutation, key)
    state = ImageState(base, key)
    if before is not None:
        target = state.static if static else state.rows.setdefault(row.clustering, {})
        target.update(checked_image(base, row.clustering, before))
    for bucket in split_changes(base, normal, key):
        for change in bucket.changes:
            state.apply(change)
    after = state.image(None if static else row.clustering)
    if after is None or (static and not present_values(after)):
        return None
    return present_values(after)
