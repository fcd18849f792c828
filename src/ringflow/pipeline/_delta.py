"""Delta Lake tables of a ``delta:DIR`` destination, through ``deltalake`` (delta-rs, no JVM).

``DIR`` is the change log: a Delta table of every change row (the change schema of the table the
destination holds, plus ``date``, the UTC day of the write timestamp, its partition column).
``DIR_current`` beside it is the current-state table
(:mod:`ringflow.pipeline._lakehouse_state`). Each table records the base table it holds (the
union of the source versions it took, :func:`~ringflow.pipeline._evolution.union_table`) as the
table property ``ringflow.table``; new columns reach the Delta schemas with the first batch that
has them (``schema_mode="merge"``, ``merge_schema=True``).

Exactly once (Delta's idempotent writes, PROTOCOL.md "Transaction Identifiers"): every commit of
a micro-batch carries the application transaction ``(app id, batch id)``; the app id is
``ringflow-<streaming query id>`` (kept in the checkpoint). Before committing batch ``N`` to a
table the writer reads that table's latest version of the app id and skips the commit when it is
``N`` or more. The change log takes the batch in one append, the current-state table in one
merge on ``_row`` (or one overwrite of the whole table when the batch rewrites most of it); a
crash between the two leaves the second to the replay.

Maintenance (``ringflow lake compact|expire``): ``optimize.compact`` (small files binned into
files of delta-rs' default target size) and ``vacuum`` with Delta's default retention, 7 days.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc  # type: ignore[import-untyped]
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from ringflow.pipeline._changes import table_from_json, table_to_json
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._lakehouse_state import (
    LEGACY_STATE_FIELD,
    ROW_FIELD,
    Wanted,
    conform,
    selection_mask,
)
from ringflow.schema import Table

TABLE_PROPERTY = "ringflow.table"
VACUUM_RETENTION_HOURS = 7 * 24  # Delta Lake's default (delta.deletedFileRetentionDuration)
DATE_FIELD = "date"


def current_path(root: str | Path) -> Path:
    """The current-state table of the change log at ``root``: ``<root>_current`` beside it."""
    path = Path(root)
    return path.with_name(f"{path.name}_current")


def _open(path: Path, what: str) -> DeltaTable | None:
    """The Delta table at ``path``, None when there is none (absent or empty directory);
    PipelineConfigError for a directory holding something else."""
    if DeltaTable.is_deltatable(str(path)):
        return DeltaTable(str(path))
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise PipelineConfigError(
            f"{what} {path} is not a Delta table (no _delta_log): choose an empty or new directory"
        )
    return None


def stored_table(path: Path) -> Table | None:
    """The base table the Delta table at ``path`` records, None if it has none yet."""
    found = _open(path, "Delta directory")
    if found is None:
        return None
    text = found.metadata().configuration.get(TABLE_PROPERTY)
    return None if text is None else table_from_json(text)


class DeltaStore:
    """The change log at ``root`` and its current-state table, for one destination."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.current = current_path(self.root)

    def check(self) -> None:
        """PipelineConfigError when either directory holds something that is not Delta."""
        _open(self.root, "Delta directory")
        _open(self.current, "Delta directory (current state)")

    def stored(self) -> Table | None:
        return stored_table(self.root)

    def record(self, table: Table, changes: Any, current: Any) -> None:
        """Create both tables when absent (with the Arrow schemas ``changes``, ``current``) and
        record ``table`` as the one they hold."""
        properties = {TABLE_PROPERTY: table_to_json(table)}
        for path, schema, partitions in (
            (self.root, changes, [DATE_FIELD]),
            (self.current, current, None),
        ):
            found = _open(path, "Delta directory")
            if found is None:
                path.mkdir(parents=True, exist_ok=True)
                DeltaTable.create(
                    str(path),
                    schema,
                    partition_by=partitions,
                    configuration=properties,
                    raise_if_key_not_exists=False,
                )
            elif found.metadata().configuration.get(TABLE_PROPERTY) != properties[TABLE_PROPERTY]:
                found.alter.set_table_properties(properties, raise_if_not_exists=False)

    @staticmethod
    def _version(path: Path, app_id: str) -> int:
        found = DeltaTable(str(path)).transaction_version(app_id)
        return -1 if found is None else int(found)

    @staticmethod
    def _commit(app_id: str, batch_id: int) -> CommitProperties:
        return CommitProperties(
            app_transactions=[Transaction(app_id, batch_id)],
            custom_metadata={"ringflow.query-id": app_id, "ringflow.batch-id": str(batch_id)},
        )

    def changes_committed(self, app_id: str) -> int:
        return self._version(self.root, app_id)

    def current_committed(self, app_id: str) -> int:
        return self._version(self.current, app_id)

    def append_changes(self, data: Any, app_id: str, batch_id: int) -> None:
        write_deltalake(
            str(self.root),
            data,
            mode="append",
            schema_mode="merge",
            commit_properties=self._commit(app_id, batch_id),
        )

    def current_rows(self, wanted: Wanted, schema: Any) -> tuple[Any, Any | None]:
        """(The stored rows ``wanted`` names, the others), conformed to ``schema``: the table
        is read whole (delta-rs types strings as string_view, which pyarrow's statistics
        pruning cannot compare yet), the rows picked in Arrow."""
        found = conform(DeltaTable(str(self.current)).to_pyarrow_dataset().to_table(), schema)
        mask = selection_mask(found, wanted)
        return found.filter(mask), found.filter(pc.invert(mask))

    def legacy_current(self) -> bool:
        """Whether the current-state table is in the first layout (a JSON state per row)."""
        found = _open(self.current, "Delta directory (current state)")
        return found is not None and LEGACY_STATE_FIELD in found.schema().to_arrow().names

    def read_changes(self) -> Any:
        """The whole change log (Arrow), to rebuild the current state from."""
        return DeltaTable(str(self.root)).to_pyarrow_dataset().to_table()

    def write_current(
        self, rows: Any, app_id: str, batch_id: int, whole: bool, new_layout: bool = False
    ) -> None:
        """Merge ``rows`` on ``_row``, or with ``whole`` make them the table (one overwrite:
        cheaper than a merge when the batch rewrites most of it, and compacting); with
        ``new_layout`` the table takes their schema (a rebuild from the first layout)."""
        commit = self._commit(app_id, batch_id)
        if whole:
            write_deltalake(
                str(self.current),
                rows,
                mode="overwrite",
                schema_mode="overwrite" if new_layout else "merge",
                commit_properties=commit,
            )
            return
        table = DeltaTable(str(self.current))
        (
            table.merge(
                rows,
                predicate=f"t.{ROW_FIELD} = s.{ROW_FIELD}",
                source_alias="s",
                target_alias="t",
                merge_schema=True,
                commit_properties=commit,
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    def data_files(self) -> tuple[list[str], list[str]]:
        """(change log files, current-state files): each table's current Parquet files."""
        return (
            list(DeltaTable(str(self.root)).file_uris()),
            list(DeltaTable(str(self.current)).file_uris()),
        )

    def compact(self) -> dict[str, Any]:
        """``optimize.compact`` of both tables; delta-rs' metrics per table."""
        return {
            str(path): _metrics(DeltaTable(str(path)).optimize.compact())
            for path in (self.root, self.current)
        }

    def expire(self, retention_hours: int = VACUUM_RETENTION_HOURS) -> dict[str, Any]:
        """``vacuum`` of both tables: delete files no version newer than the retention needs."""
        return {
            str(path): len(
                DeltaTable(str(path)).vacuum(
                    retention_hours=retention_hours,
                    dry_run=False,
                    enforce_retention_duration=retention_hours >= VACUUM_RETENTION_HOURS,
                )
            )
            for path in (self.root, self.current)
        }


def _metrics(found: Any) -> Any:
    return json.loads(json.dumps(found, default=str))
