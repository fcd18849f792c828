"""An in-memory model of one Cassandra table, written independently of the store's SQL.

It keeps every write and resolves reads from scratch: each cell's winner is the maximum of a
sort key that spells out cassandra-core.md §6.1 (timestamp; expiring-or-tombstone over live;
tombstone over expiring; later local deletion time; greater value; lower TTL), a deletion
shadows data with a timestamp at or below its own, TTL'd data is live strictly before its expiry
second, and a row exists when its marker or any cell is live. ``compact`` mirrors the store's
gc_grace purge on the model: per key the winner is kept, shadowed data and superseded deletions
go, expired data turns into tombstones at its write second, and anything dead before
``gc_before`` is dropped.

Table shape (fixed): partition key ``pk int``, clustering ``ck int`` ASC, static ``s``, regular
``v``, ``n`` and the set ``tags``; clustering and set elements are Python ints.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ringflow.schema import (
    EXPIRED_LIVENESS_TTL_S,
    INT,
    NO_DELETION_TIME,
    Cell,
    DeletionTime,
    LivenessInfo,
    SetType,
)
from ringflow.schema._codec import serialize

SIMPLE_COLUMNS = ("v", "n")
STATIC = None
Bound = tuple[int, bool] | None  # (clustering, inclusive); None = unbounded


def cell_rank(cell: Cell) -> tuple[int, bool, bool, int, bytes, int]:
    has_deletion_time = cell.local_deletion_time_s != NO_DELETION_TIME
    return (
        cell.timestamp_us,
        has_deletion_time,
        has_deletion_time and cell.ttl_s == 0,
        cell.local_deletion_time_s,
        cell.value,
        -cell.ttl_s,
    )


def liveness_rank(live: LivenessInfo) -> tuple[int, bool, bool, int, int]:
    return (
        live.timestamp_us,
        live.ttl_s == EXPIRED_LIVENESS_TTL_S,
        live.ttl_s > 0,
        live.local_expiration_time_s,
        -live.ttl_s,
    )


def deletion_rank(deletion: DeletionTime) -> tuple[int, int]:
    return (deletion.marked_for_delete_at_us, deletion.local_deletion_time_s)


def cell_is_live(cell: Cell, now_s: int) -> bool:
    ldt = cell.local_deletion_time_s
    return ldt == NO_DELETION_TIME or (cell.ttl_s > 0 and now_s < ldt)


def liveness_is_live(live: LivenessInfo, now_s: int) -> bool:
    if live.ttl_s == EXPIRED_LIVENESS_TTL_S:
        return False
    return live.local_expiration_time_s == NO_DELETION_TIME or now_s < live.local_expiration_time_s


def inside(ck: int, start: Bound, end: Bound) -> bool:
    after_start = start is None or ck > start[0] or (ck == start[0] and start[1])
    before_end = end is None or ck < end[0] or (ck == end[0] and end[1])
    return after_start and before_end


def _strongest(deletions: list[DeletionTime]) -> DeletionTime | None:
    return max(deletions, key=deletion_rank) if deletions else None


def _max_ts(*deletions: DeletionTime | None) -> int | None:
    stamps = [d.marked_for_delete_at_us for d in deletions if d is not None]
    return max(stamps) if stamps else None


def _shadowed(timestamp_us: int, bar: int | None) -> bool:
    return bar is not None and timestamp_us <= bar


@dataclass(frozen=True)
class ModelRow:
    clustering: int | None  # None: the static-only row
    values: dict[str, bytes]
    writetime_us: dict[str, int]
    ttl_s: dict[str, int]


@dataclass
class Partition:
    cells: dict[tuple[int | None, str, int | None], list[Cell]] = field(
        default_factory=lambda: defaultdict(list)
    )
    liveness: dict[int, list[LivenessInfo]] = field(default_factory=lambda: defaultdict(list))
    row_deletions: dict[int, list[DeletionTime]] = field(default_factory=lambda: defaultdict(list))
    set_deletions: dict[int, list[DeletionTime]] = field(default_factory=lambda: defaultdict(list))
    ranges: dict[tuple[Bound, Bound], list[DeletionTime]] = field(
        default_factory=lambda: defaultdict(list)
    )
    deletions: list[DeletionTime] = field(default_factory=list)

    def external(self, ck: int) -> DeletionTime | None:
        """The strongest partition or range deletion covering ``ck``."""
        found = list(self.deletions)
        for (start, end), deletions in self.ranges.items():
            if inside(ck, start, end):
                found += deletions
        return _strongest(found)

    def clusterings(self) -> list[int]:
        keys = {ck for ck, _, _ in self.cells if ck is not None}
        return sorted(keys | set(self.liveness) | set(self.row_deletions) | set(self.set_deletions))


def _live_simple(cells: list[Cell], bar: int | None, now_s: int, name: str, row: ModelRow) -> None:
    if not cells:
        return
    winner = max(cells, key=cell_rank)
    if _shadowed(winner.timestamp_us, bar) or not cell_is_live(winner, now_s):
        return
    row.values[name] = winner.value
    row.writetime_us[name] = winner.timestamp_us
    if winner.ttl_s > 0:
        row.ttl_s[name] = winner.local_deletion_time_s - now_s


class TableModel:
    """Every write to the model table, and reads resolved from them."""

    def __init__(self) -> None:
        self.partitions: dict[int, Partition] = defaultdict(Partition)

    def read(self, pk: int, now_s: int) -> list[ModelRow]:
        part = self.partitions[pk]
        partition_bar = _max_ts(*part.deletions)
        static = ModelRow(None, {}, {}, {})
        _live_simple(part.cells.get((STATIC, "s", None), []), partition_bar, now_s, "s", static)
        rows = []
        for ck in part.clusterings():
            row = self._read_row(part, ck, now_s)
            if row is not None:
                row.values.update(static.values)
                row.writetime_us.update(static.writetime_us)
                row.ttl_s.update(static.ttl_s)
                rows.append(row)
        if not rows and static.values:
            rows.append(static)
        return rows

    def _read_row(self, part: Partition, ck: int, now_s: int) -> ModelRow | None:
        bar = _max_ts(part.external(ck), _strongest(part.row_deletions.get(ck, [])))
        row = ModelRow(ck, {}, {}, {})
        for name in SIMPLE_COLUMNS:
            _live_simple(part.cells.get((ck, name, None), []), bar, now_s, name, row)
        set_bar = _max_ts(*part.set_deletions.get(ck, []))
        element_bar = max((b for b in (bar, set_bar) if b is not None), default=None)
        elements = []
        for (row_ck, name, element), cells in part.cells.items():
            if row_ck != ck or name != "tags" or not cells:
                continue
            winner = max(cells, key=cell_rank)
            if not _shadowed(winner.timestamp_us, element_bar) and cell_is_live(winner, now_s):
                elements.append(element)
        if elements:
            row.values["tags"] = serialize(SetType(INT), set(elements))
        markers = part.liveness.get(ck, [])
        marker = max(markers, key=liveness_rank) if markers else None
        marker_live = (
            marker is not None
            and not _shadowed(marker.timestamp_us, bar)
            and liveness_is_live(marker, now_s)
        )
        return row if row.values or marker_live else None

    # --- compaction mirror ------------------------------------------------------------------

    def compact(self, now_s: int, gc_before_s: int) -> None:
        for part in self.partitions.values():
            _compact_partition(part, now_s, gc_before_s)


def _expire_cell(cell: Cell, now_s: int) -> Cell:
    if cell.ttl_s > 0 and now_s >= cell.local_deletion_time_s:
        return Cell(cell.timestamp_us, b"", 0, cell.local_deletion_time_s - cell.ttl_s, cell.path)
    return cell


def _keep_cell(cells: list[Cell], bar: int | None, now_s: int, gc_before_s: int) -> list[Cell]:
    if not cells:
        return []
    winner = max(cells, key=cell_rank)
    if _shadowed(winner.timestamp_us, bar):
        return []
    winner = _expire_cell(winner, now_s)
    ldt = winner.local_deletion_time_s
    return [] if ldt != NO_DELETION_TIME and ldt < gc_before_s else [winner]


def _keep_deletion(
    deletions: list[DeletionTime], over: DeletionTime | None, gc_before_s: int
) -> list[DeletionTime]:
    strongest = _strongest(deletions)
    if strongest is None or strongest.local_deletion_time_s < gc_before_s:
        return []
    if over is not None and deletion_rank(over) > deletion_rank(strongest):
        return []  # superseded by a covering deletion: can shadow nothing more
    return [strongest]


def _compact_row(part: Partition, ck: int, now_s: int, gc_before_s: int) -> None:
    external = part.external(ck)
    row_deletion = _strongest(part.row_deletions.get(ck, []))
    active = max(
        (d for d in (external, row_deletion) if d is not None), key=deletion_rank, default=None
    )
    bar = _max_ts(active)
    set_deletion = _strongest(part.set_deletions.get(ck, []))
    element_bar = _max_ts(active, set_deletion)
    for key in [k for k in part.cells if k[0] == ck]:
        part.cells[key] = _keep_cell(
            part.cells[key], element_bar if key[1] == "tags" else bar, now_s, gc_before_s
        )
    markers = part.liveness.get(ck, [])
    if markers:
        marker = max(markers, key=liveness_rank)
        kept: list[LivenessInfo] = []
        if not _shadowed(marker.timestamp_us, bar):
            if (
                marker.ttl_s > 0
                and marker.ttl_s != EXPIRED_LIVENESS_TTL_S
                and not liveness_is_live(marker, now_s)
            ):
                marker = LivenessInfo(
                    marker.timestamp_us, EXPIRED_LIVENESS_TTL_S,
                    marker.local_expiration_time_s - marker.ttl_s,
                )  # fmt: skip
            if not (marker.ttl_s > 0 and marker.local_expiration_time_s < gc_before_s):
                kept = [marker]
        part.liveness[ck] = kept
    part.row_deletions[ck] = _keep_deletion(part.row_deletions.get(ck, []), external, gc_before_s)
    part.set_deletions[ck] = _keep_deletion(part.set_deletions.get(ck, []), active, gc_before_s)


def _compact_partition(part: Partition, now_s: int, gc_before_s: int) -> None:
    partition_bar = _max_ts(*part.deletions)
    static_key = (STATIC, "s", None)
    if static_key in part.cells:
        part.cells[static_key] = _keep_cell(
            part.cells[static_key], partition_bar, now_s, gc_before_s
        )
    for ck in part.clusterings():
        _compact_row(part, ck, now_s, gc_before_s)
    part.deletions[:] = _keep_deletion(part.deletions, None, gc_before_s)
    for key in list(part.ranges):
        part.ranges[key] = _keep_deletion(part.ranges[key], None, gc_before_s)
