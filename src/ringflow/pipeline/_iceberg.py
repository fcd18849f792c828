"""Apache Iceberg tables of an ``iceberg:CATALOG#namespace.table`` destination, through
``pyiceberg`` with a SQL catalog.

``CATALOG`` is a SQLite catalog (a path to a ``.db`` file, or a ``sqlite:///`` URI: its
warehouse is the directory ``<name>-warehouse`` beside the file unless ``?warehouse=DIR``) or a
PostgreSQL one (``postgresql+psycopg://user@host:port/db?warehouse=DIR``, the warehouse
required). The namespace must exist (``pyiceberg create namespace``): a missing one is an
operator's mistake, not something to create silently. ``namespace.table`` holds the change log
(the change schema of the table the destination holds plus ``date``, identity-partitioned) and
``namespace.table_current`` the current-state table (:mod:`ringflow.pipeline._lakehouse_state`).
Each records the base table it holds as the table property ``ringflow.table``; new columns are
added to the Iceberg schemas by name (``union_by_name``) before the first batch that has them.

Exactly once: a micro-batch is one Iceberg transaction per table (one catalog commit) that
also sets the table property ``ringflow.batch.<app id>`` to the batch id, and its snapshots
carry ``ringflow.query-id`` and ``ringflow.batch-id`` in their summaries. The writer reads the
property before committing batch ``N`` and skips the commit when it is ``N`` or more; a property,
unlike a snapshot, survives snapshot expiry. The current-state rows of a batch replace those
with the same ``_row`` (``overwrite`` with a filter: copy-on-write, no delete files; for more
than 2,000 rows the table is rewritten whole from Arrow, which copy-on-write of an unpartitioned
table comes to anyway).

Maintenance (``ringflow lake compact|expire``): compaction rewrites each partition (a day of the
change log, the whole current-state table) held in more than one data file as one transaction;
expiry removes snapshots older than 5 days, keeping the newest (Iceberg's defaults:
``history.expire.max-snapshot-age-ms``, ``history.expire.min-snapshots-to-keep``).
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ringflow.pipeline._changes import table_from_json, table_to_json
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._lakehouse_state import (
    EXPIRES_AT_FIELD,
    LEGACY_STATE_FIELD,
    PK_FIELD,
    ROW_FIELD,
    Wanted,
    conform,
    expired_ids,
    selection_mask,
    without_rows,
)
from ringflow.schema import Table

CATALOG_NAME = "ringflow"
"""The SQL catalog's name (its rows are keyed by it): pyiceberg clients use the same."""
TABLE_PROPERTY = "ringflow.table"
BATCH_PROPERTY = "ringflow.batch."
EXPIRE_MAX_AGE_S = 5 * 24 * 3600
EXPIRE_KEEP = 1
DATE_FIELD = "date"
CURRENT_SUFFIX = "_current"
_IN_FILTER_MAX = 2000  # more partitions than this: scan and filter in Arrow
_WHOLE_SCAN_ROWS = 100_000
"""A current-state table of at most this many rows is read whole, the wanted rows picked in
Arrow: cheaper than binding an ``In`` filter of a batch's ids and scanning twice."""


@dataclass(frozen=True, slots=True)
class IcebergLocation:
    """A parsed ``CATALOG#namespace.table``: the SQLAlchemy URI, warehouse and identifier."""

    uri: str
    warehouse: str
    namespace: str
    table: str

    @property
    def changes(self) -> str:
        return f"{self.namespace}.{self.table}"

    @property
    def current(self) -> str:
        return f"{self.namespace}.{self.table}{CURRENT_SUFFIX}"

    @property
    def display(self) -> str:
        """The location for messages, a password in the URI hidden."""
        return re.sub(r"://([^:@/]*):[^@/]*@", r"://\1:***@", self.uri) + f"#{self.changes}"


def parse_location(text: str) -> IcebergLocation:
    """``CATALOG#namespace.table`` (module docstring); PipelineConfigError when malformed."""
    catalog, sep, identifier = text.rpartition("#")
    namespace, dot, name = identifier.partition(".")
    if not sep or not catalog or not dot or not namespace or not name or "." in name:
        raise PipelineConfigError(
            f"iceberg destination {text!r}: expected iceberg:CATALOG#namespace.table"
        )
    parts = urlsplit(catalog)
    query = dict(parse_qsl(parts.query))
    warehouse = query.pop("warehouse", "")
    if "://" not in catalog:  # a path to a SQLite file
        db = Path(catalog).expanduser().absolute()
        uri = f"sqlite:///{db}"
    elif parts.scheme == "sqlite":
        uri = urlunsplit(parts._replace(query=urlencode(query)))
        db = Path(parts.path)
    elif parts.scheme.startswith("postgresql"):
        uri = urlunsplit(parts._replace(query=urlencode(query)))
        if not warehouse:
            raise PipelineConfigError(
                f"iceberg catalog {parts.scheme}://...: a PostgreSQL catalog needs "
                "?warehouse=DIR (where the data files go)"
            )
        db = Path()
    else:
        raise PipelineConfigError(
            f"iceberg catalog {parts.scheme!r}: expected a .db path, sqlite:/// or "
            "postgresql+psycopg:// URI"
        )
    if not warehouse:
        warehouse = str(db.with_name(f"{db.stem}-warehouse"))
    return IcebergLocation(uri, str(Path(warehouse).expanduser().absolute()), namespace, name)


def _catalog(location: IcebergLocation) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    if location.uri.startswith("sqlite:///"):
        parent = Path(location.uri[len("sqlite:///") :]).parent
        if not parent.is_dir():
            raise PipelineConfigError(f"iceberg catalog {location.uri}: no directory {parent}")
    Path(location.warehouse).mkdir(parents=True, exist_ok=True)
    return SqlCatalog(CATALOG_NAME, uri=location.uri, warehouse=f"file://{location.warehouse}")


class IcebergStore:
    """The change log and current-state tables of one destination in its catalog."""

    def __init__(self, location: IcebergLocation) -> None:
        self.location = location
        self._catalog: Any = None

    @property
    def catalog(self) -> Any:
        if self._catalog is None:
            self._catalog = _catalog(self.location)
        return self._catalog

    def check(self) -> None:
        """PipelineConfigError: an unreachable catalog or a namespace that does not exist."""
        try:
            exists = self.catalog.namespace_exists(self.location.namespace)
        except PipelineConfigError:
            raise
        except Exception as error:  # SQLAlchemy's, the driver's: the catalog is unreachable
            message = " ".join(str(error).split())[:300]
            raise PipelineConfigError(
                f"iceberg catalog {self.location.display} cannot be reached: {message}"
            ) from None
        if not exists:
            raise PipelineConfigError(
                f"iceberg catalog {self.location.display}: namespace "
                f"{self.location.namespace!r} does not exist (create it first, e.g. "
                "`pyiceberg --uri ... --catalog ringflow create namespace "
                f"{self.location.namespace}`)"
            )

    def _load(self, identifier: str) -> Any | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(identifier)
        except NoSuchTableError:
            return None

    def stored(self) -> Table | None:
        found = self._load(self.location.changes)
        text = None if found is None else found.properties.get(TABLE_PROPERTY)
        return None if text is None else table_from_json(text)

    def record(self, table: Table, changes: Any, current: Any) -> None:
        """Create both tables when absent; add the columns of ``changes``/``current`` (Arrow
        schemas) they lack; record ``table`` as the one they hold."""
        text = table_to_json(table)
        for identifier, schema, partitioned in (
            (self.location.changes, changes, True),
            (self.location.current, current, False),
        ):
            found = self._load(identifier)
            if found is None:
                found = self.catalog.create_table(identifier, schema=schema)
                if partitioned:
                    with found.update_spec() as spec:
                        spec.add_identity(DATE_FIELD)
            with found.transaction() as transaction:
                with transaction.update_schema() as update:
                    update.union_by_name(schema)
                if found.properties.get(TABLE_PROPERTY) != text:
                    transaction.set_properties({TABLE_PROPERTY: text})

    def _committed(self, identifier: str, app_id: str) -> int:
        found = self._load(identifier)
        if found is None:
            return -1
        return int(found.properties.get(BATCH_PROPERTY + app_id, "-1"))

    def changes_committed(self, app_id: str) -> int:
        return self._committed(self.location.changes, app_id)

    def current_committed(self, app_id: str) -> int:
        return self._committed(self.location.current, app_id)

    @staticmethod
    def _summary(app_id: str, batch_id: int) -> dict[str, str]:
        return {"ringflow.query-id": app_id, "ringflow.batch-id": str(batch_id)}

    @staticmethod
    def _as_table_schema(table: Any, data: Any) -> Any:
        """``data`` with the table's columns, in its order and types (absent ones null)."""
        return conform(data, table.schema().as_arrow())

    def append_changes(self, data: Any, app_id: str, batch_id: int) -> None:
        table = self.catalog.load_table(self.location.changes)
        with table.transaction() as transaction:
            transaction.append(
                self._as_table_schema(table, data),
                snapshot_properties=self._summary(app_id, batch_id),
            )
            transaction.set_properties({BATCH_PROPERTY + app_id: str(batch_id)})

    def current_rows(self, wanted: Wanted, schema: Any) -> tuple[Any, Any | None]:
        """(The stored rows ``wanted`` names, the others or None when not read), conformed to
        ``schema``. Past ``_IN_FILTER_MAX`` ids, one whole scan split in Arrow; else the
        expired rows found first (a scan filtered on ``_expires_at``, pruned by the files'
        statistics), then every row wanted (an ``In`` filter, or a whole scan when the expired
        ones take it past the limit)."""
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        table = self.catalog.load_table(self.location.current)
        snapshot = table.current_snapshot()
        summary = {} if snapshot is None or snapshot.summary is None else snapshot.summary
        stored = int(summary.get("total-records", "0"))
        wanted_ids = len(wanted.partitions) + len(wanted.rows)
        if wanted_ids > _IN_FILTER_MAX or stored <= _WHOLE_SCAN_ROWS:
            # one whole scan (pyiceberg evaluates big sets slowly, and a small table is read
            # faster whole than through two filtered scans), the rows picked in Arrow by
            # ``selection_mask``, the expired ones with them
            found = conform(table.scan().to_arrow(), schema)
            mask = selection_mask(found, wanted)
            return found.filter(mask), found.filter(pc.invert(mask))
        if wanted.expired_by_us is not None:
            expired = table.scan(
                row_filter=_expression("LessThanOrEqual", EXPIRES_AT_FIELD, wanted.expired_by_us),
                selected_fields=(PK_FIELD, ROW_FIELD, EXPIRES_AT_FIELD),
            ).to_arrow()
            partitions, rows = expired_ids(expired, wanted)
            wanted = Wanted(wanted.partitions + partitions, wanted.rows + rows)
        if not wanted.partitions and not wanted.rows:
            return conform(schema.empty_table(), schema), None
        if len(wanted.partitions) + len(wanted.rows) <= _IN_FILTER_MAX:
            row_filter = _expression(
                "Or",
                _expression("In", PK_FIELD, set(wanted.partitions or [""])),
                _expression("In", ROW_FIELD, set(wanted.rows or [""])),
            )
            found = conform(table.scan(row_filter=row_filter).to_arrow(), schema)
            return found.filter(selection_mask(found, wanted)), None
        found = conform(table.scan().to_arrow(), schema)  # pyiceberg binds big sets slowly
        mask = selection_mask(found, wanted)
        return found.filter(mask), found.filter(pc.invert(mask))

    def legacy_current(self) -> bool:
        """Whether the current-state table is in the first layout (a JSON state per row)."""
        found = self._load(self.location.current)
        return found is not None and any(
            f.name == LEGACY_STATE_FIELD for f in found.schema().fields
        )

    def read_changes(self) -> Any:
        """The whole change log (Arrow), to rebuild the current state from."""
        return self.catalog.load_table(self.location.changes).scan().to_arrow()

    def write_current(
        self, rows: Any, app_id: str, batch_id: int, whole: bool, new_layout: bool = False
    ) -> None:
        """Replace the rows with the ``_row`` of ``rows`` (an ``In`` filter for a few, else the
        table read, the rows replaced in Arrow, written whole: pyiceberg binds a big set of
        literals slowly, and copy-on-write rewrites every file holding one anyway), or with
        ``whole`` make them the table; ``new_layout``: its schema becomes theirs first (a
        rebuild from the first layout)."""
        import pyarrow as pa

        table = self.catalog.load_table(self.location.current)
        if new_layout:
            with table.update_schema() as update:
                for name in table.schema().as_arrow().names:
                    if name not in rows.schema.names:
                        update.delete_column(name)
            with table.update_schema() as update:
                update.union_by_name(rows.schema)
            table = self.catalog.load_table(self.location.current)
        data = self._as_table_schema(table, rows)
        if whole:
            row_filter = _expression("AlwaysTrue")
        elif rows.num_rows <= _IN_FILTER_MAX:
            row_filter = _expression("In", ROW_FIELD, set(rows.column(ROW_FIELD).to_pylist()))
        else:
            row_filter = _expression("AlwaysTrue")
            kept = without_rows(conform(table.scan().to_arrow(), rows.schema), rows)
            data = pa.concat_tables([self._as_table_schema(table, kept), data])
        with table.transaction() as transaction:
            transaction.overwrite(
                data,
                overwrite_filter=row_filter,
                snapshot_properties=self._summary(app_id, batch_id),
            )
            transaction.set_properties({BATCH_PROPERTY + app_id: str(batch_id)})

    def data_files(self) -> tuple[list[str], list[str]]:
        """(change log files, current-state files): the data files of each table's current
        snapshot (ValueError if one has delete files: read it through pyiceberg then)."""
        found = []
        for identifier in (self.location.changes, self.location.current):
            tasks = list(self.catalog.load_table(identifier).scan().plan_files())
            if any(task.delete_files for task in tasks):
                raise ValueError(f"{identifier} has delete files")
            found.append([_local(task.file.file_path) for task in tasks])
        return found[0], found[1]

    def compact(self) -> dict[str, Any]:
        """Rewrite each partition held in several files as one (module docstring)."""
        report = {}
        for identifier, partitioned in (
            (self.location.changes, True),
            (self.location.current, False),
        ):
            table = self.catalog.load_table(identifier)
            groups: dict[object, int] = {}
            for task in table.scan().plan_files():
                day = task.file.partition[0] if partitioned and len(task.file.partition) else None
                groups[day] = groups.get(day, 0) + 1
            rewritten = 0
            for day, count in sorted(groups.items(), key=repr):
                if count < 2:
                    continue
                row_filter = (
                    _expression("AlwaysTrue")
                    if day is None
                    else _expression("EqualTo", DATE_FIELD, _day(day))
                )
                data = table.scan(row_filter=row_filter).to_arrow()
                with table.transaction() as transaction:
                    transaction.overwrite(data, overwrite_filter=row_filter)
                table = self.catalog.load_table(identifier)
                rewritten += count
            report[identifier] = {"files_rewritten": rewritten}
        return report

    def expire(
        self, max_age_s: float = EXPIRE_MAX_AGE_S, now_s: float | None = None
    ) -> dict[str, Any]:
        """Expire the snapshots older than ``max_age_s``, never the newest ``EXPIRE_KEEP``."""
        now_s = time.time() if now_s is None else now_s
        cutoff_ms = int((now_s - max_age_s) * 1000)
        report = {}
        for identifier in (self.location.changes, self.location.current):
            table = self.catalog.load_table(identifier)
            snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
            kept = {s.snapshot_id for s in snapshots[-EXPIRE_KEEP:]}
            current = table.current_snapshot()
            if current is not None:
                kept.add(current.snapshot_id)
            old = [
                s.snapshot_id
                for s in snapshots
                if s.timestamp_ms < cutoff_ms and s.snapshot_id not in kept
            ]
            if old:
                table.maintenance.expire_snapshots().by_ids(old).commit()
            report[identifier] = {"snapshots_expired": len(old)}
        return report


def _expression(name: str, *arguments: object) -> Any:
    """A pyiceberg row filter (its classes are typed as pydantic models: called untyped)."""
    from pyiceberg import expressions

    factory: Any = getattr(expressions, name)
    return factory(*arguments)


def _day(value: object) -> datetime.date:
    if isinstance(value, datetime.date):
        return value
    return datetime.date(1970, 1, 1) + datetime.timedelta(days=int(str(value)))


def _local(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def location_options(location: IcebergLocation) -> Mapping[str, str]:
    return {
        "uri": location.uri,
        "warehouse": location.warehouse,
        "namespace": location.namespace,
        "table": location.table,
    }
