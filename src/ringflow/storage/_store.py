"""The node's durable store: one SQLite database in WAL mode, owned by one ``Store`` object.

This is the storage layer's thin shell. Validation, key encoding, reconcile and row assembly are
pure functions in the sibling modules; this class owns the connection, the transactions and the
order of SQL statements. Rules:

* **Durability.** ``synchronous=FULL`` by default: in WAL mode every COMMIT fsyncs the WAL, so an
  acknowledged write survives power loss and OS crashes, not only a killed process. (``NORMAL``
  in WAL mode is enough for kill -9 alone, since a committed transaction is in the OS page cache
  before COMMIT returns, but may lose the last transactions on power loss; it stays available as
  an option for tests and benchmarks.) ``apply`` returns only after COMMIT.
* **Atomicity.** ``apply`` writes a whole batch in one ``BEGIN IMMEDIATE`` ... ``COMMIT``: base
  mutations, their CDC log rows (built here, with pre-images read before and post-images after
  the base is written, inside the same transaction) and any system-table writes. Either all of it
  commits or none of it does; seed 000's "each replica either receives both writes or none of
  them" holds per replica.
* **Validate first.** Every mutation of a batch is checked (table known, key arity, columns,
  limits) and flattened before the transaction starts; a bad batch writes nothing.
* **One owner.** One connection, created with ``check_same_thread=False`` so the asyncio shell
  can hand the store to a worker thread; a lock serializes calls. Nothing returned holds a cursor.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from ringflow.cdc import CdcCapture, RowImage, base_table_name, is_cdc_log_table, row_image
from ringflow.errors import InvalidRequest, RingflowError, invariant
from ringflow.replication import Origin
from ringflow.schema import ClusteringBound, Mutation, Table, shadow_row
from ringflow.storage import _hints
from ringflow.storage._capture import CaptureBatch, CaptureRecorder
from ringflow.storage._capture_slices import settle_queue
from ringflow.storage._capture_store import StoreCapture
from ringflow.storage._catalog import TableInfo
from ringflow.storage._cdc_apply import CdcWriter, Clustering, ImageReader
from ringflow.storage._compaction import CompactionResult, compact_partition
from ringflow.storage._errors import (
    BatchTooLarge,
    MutationTooLarge,
    StorageFailure,
    TableAlreadyRegistered,
    UnknownTable,
)
from ringflow.storage._keys import MIN_TOKEN, STATIC_CK, end_key, row_key, start_key
from ringflow.storage._limits import StoreLimits
from ringflow.storage._read import (
    PartitionTombstones,
    ResultRow,
    StoredRow,
    TombstoneBudget,
    assemble_rows,
    checked_page_size,
    checked_result,
    live_rows,
    raw_mutation,
    result_rows,
    row_cap,
    row_request,
)
from ringflow.storage._scan import (
    PARTITIONS_KIND,
    ROWS_KIND,
    MutationPage,
    ScanPage,
    ScanRange,
    decode_paging_state,
    scan_partitions,
    scan_rows,
)
from ringflow.storage._sqlite_layout import (
    CAPTURE_PUBLISHED_COLUMN,
    CAPTURE_SETTLE_ROWS,
    CAPTURE_UNPUBLISHED_INDEX,
    COUNT_LOG_APPENDS,
    DELETE_TABLE,
    DELETE_TABLE_ATOMS,
    DELETE_TABLE_LOG_APPENDS,
    DELETE_TABLE_PARTITION_ATOMS,
    DROP_LEGACY_LOG_APPENDS,
    HAS_LEGACY_LOG_APPENDS,
    HAS_PUBLISHED_COLUMN,
    INSERT_TABLE,
    LAYOUT_VERSION,
    LOG_APPEND_SETTLE_ROWS,
    SCHEMA,
    SELECT_PARTITION_ALL_ATOMS,
    SELECT_PARTITION_ATOMS,
    SELECT_PARTITION_SLICE,
    SELECT_PARTITION_SLICE_REVERSED,
    SELECT_STATIC_ROW,
    SELECT_TABLES,
    SETTLE_LEGACY_LOG_APPENDS,
    UPDATE_TABLE,
)
from ringflow.storage._table_codec import table_from_record, table_to_record
from ringflow.storage._write import (
    FlatMutation,
    flatten_mutation,
    partition_position,
    without_dropped_columns,
)
from ringflow.storage._write_buffer import WriteBuffer, settle_log_queue, write_flats

Synchronous = Literal["FULL", "NORMAL"]


class Store:
    """A node's store of tables, rows, CDC log rows and hints in one SQLite file."""

    def __init__(
        self,
        path: Path,
        *,
        limits: StoreLimits = StoreLimits(),  # noqa: B008 - frozen value object
        synchronous: Synchronous = "FULL",
        cache_size_kib: int = 32 * 1024,
        wal_autocheckpoint_pages: int = 10_000,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise InvalidRequest(f"synchronous must be FULL or NORMAL, got {synchronous!r}")
        for name, value in (
            ("cache_size_kib", cache_size_kib),
            ("wal_autocheckpoint_pages", wal_autocheckpoint_pages),
        ):
            if type(value) is not int or value <= 0:
                raise InvalidRequest(f"{name} must be a positive int, got {value!r}")
        self.path = Path(path)
        self.limits = limits
        self._lock = threading.RLock()
        self._connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._open(synchronous, cache_size_kib, wal_autocheckpoint_pages)
        self._by_name: dict[tuple[str, str], TableInfo] = {}
        self._load_tables()
        (appended,) = self._connection.execute(COUNT_LOG_APPENDS).fetchone()
        self._appended: int = appended
        """Rows in ``log_queue`` (an upper bound: a rolled-back append is still counted)."""
        self.capture = StoreCapture(self.path, self._lock, self._connection, self._transaction)
        """The replica-side capture of this store (off until ``capture.enable``)."""

    def _open(self, synchronous: Synchronous, cache_size_kib: int, checkpoint_pages: int) -> None:
        connection = self._connection
        (mode,) = connection.execute("PRAGMA journal_mode=WAL").fetchone()
        invariant(mode == "wal", f"SQLite refused WAL mode for {self.path}: {mode}")
        connection.execute(f"PRAGMA synchronous={synchronous}")
        connection.execute(f"PRAGMA cache_size=-{cache_size_kib}")
        # A larger WAL between checkpoints lets a page dirtied by many commits be copied back to
        # the database once; the WAL stays bounded (10,000 pages of 4 KiB = 40 MiB by default).
        connection.execute(f"PRAGMA wal_autocheckpoint={checkpoint_pages}")
        connection.execute("PRAGMA temp_store=MEMORY")
        # One store owns the file, but a tool (or a test) may read it meanwhile: wait, not fail.
        connection.execute("PRAGMA busy_timeout=5000")
        with self._transaction():
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    connection.execute(statement)
            (legacy,) = connection.execute(HAS_LEGACY_LOG_APPENDS).fetchone()
            if legacy:  # the log queue's first form: its rows go to atoms, as a read would
                connection.execute(SETTLE_LEGACY_LOG_APPENDS)
                connection.execute(DROP_LEGACY_LOG_APPENDS)
            (published,) = connection.execute(HAS_PUBLISHED_COLUMN).fetchone()
            if not published:  # a capture made before publication
                connection.execute(CAPTURE_PUBLISHED_COLUMN)
            connection.execute(CAPTURE_UNPUBLISHED_INDEX)
            connection.execute(
                "INSERT OR IGNORE INTO _meta (key, value) VALUES ('layout_version', ?)",
                (str(LAYOUT_VERSION),),
            )
            (version,) = connection.execute(
                "SELECT value FROM _meta WHERE key = 'layout_version'"
            ).fetchone()
        invariant(version == str(LAYOUT_VERSION), f"{self.path}: layout version {version}")

    def close(self) -> None:
        """Close the connection (a WAL checkpoint happens on the last close)."""
        with self._lock:
            self._connection.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        except sqlite3.Error as error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise StorageFailure(f"{self.path}: {error}") from error

    # --- tables --------------------------------------------------------------------------------

    def _load_tables(self) -> None:
        for tid, _uuid, keyspace, name, record in self._connection.execute(SELECT_TABLES):
            table, packed_rows = table_from_record(record)
            self._by_name[(keyspace, name)] = TableInfo.of(tid, table, packed_rows)

    def register_table(self, table: Table, *, packed_rows: bool | None = None) -> None:
        """Make ``table`` writable; registering it again (same id) updates its definition.

        ``packed_rows`` stores each written row as one atom (see ``_sqlite_layout``); the
        default is on for CDC log tables (written once, read in bulk) and off otherwise.
        """
        table.validate()
        if packed_rows is None:
            packed_rows = is_cdc_log_table(table.name)
        key = (table.keyspace, table.name)
        with self._lock:
            known = self._by_name.get(key)
            if known is not None and known.table.id != table.id:
                raise TableAlreadyRegistered(
                    f"table {table.keyspace}.{table.name} is registered with id "
                    f"{known.table.id}, not {table.id}"
                )
            record = table_to_record(table, packed_rows)
            with self._transaction() as connection:
                if known is None:
                    row = (str(table.id), table.keyspace, table.name, record)
                    (tid,) = connection.execute(INSERT_TABLE, row).fetchone()
                else:
                    tid = known.tid
                    connection.execute(UPDATE_TABLE, (record, tid))
            self._by_name[key] = TableInfo.of(int(tid), table, packed_rows)

    def drop_table(self, keyspace: str, name: str) -> None:
        """Forget a table and delete its data, in one transaction."""
        with self._lock:
            info = self._info(keyspace, name)
            with self._transaction() as connection:
                connection.execute(DELETE_TABLE_ATOMS, (info.tid,))
                connection.execute(DELETE_TABLE_LOG_APPENDS, (info.tid,))
                connection.execute(DELETE_TABLE_PARTITION_ATOMS, (info.tid,))
                connection.execute(DELETE_TABLE, (info.tid,))
            del self._by_name[(keyspace, name)]

    def tables(self) -> list[Table]:
        """Every registered table, in registration order."""
        with self._lock:
            return [info.table for info in sorted(self._by_name.values(), key=lambda i: i.tid)]

    def table(self, keyspace: str, name: str) -> Table:
        """The registered definition of ``keyspace.name``; UnknownTable if there is none.

        Without the store's lock: a lookup in the registry, which is changed (a table
        registered, altered or dropped) only under the lock, by a replacement of one entry,
        so a reader sees the entry before or after it. A cluster node's event loop asks for
        every mutation a peer sends, and must not wait for the storage thread's group commit,
        which holds the lock through its COMMIT (and fsync)."""
        return self._info(keyspace, name).table

    def _info(self, keyspace: str, name: str) -> TableInfo:
        info = self._by_name.get((keyspace, name))
        if info is None:
            raise UnknownTable(f"unknown table {keyspace}.{name}")
        return info

    def _info_of(self, table: Table | tuple[str, str]) -> TableInfo:
        if isinstance(table, Table):
            info = self._info(table.keyspace, table.name)
            if info.table.id != table.id:
                raise UnknownTable(
                    f"table {table.keyspace}.{table.name} with id {table.id} is not registered "
                    f"(the registered one has id {info.table.id})"
                )
            return info
        return self._info(*table)

    # --- writes --------------------------------------------------------------------------------

    def _plan(
        self, batch: Sequence[Mutation], captures: Mapping[int, CdcCapture]
    ) -> list[tuple[TableInfo, Mutation, FlatMutation]]:
        """Validate a whole batch and flatten it, before any write."""
        limits = self.limits
        if len(batch) > limits.max_batch_mutations:
            raise BatchTooLarge(
                f"batch of {len(batch)} mutations exceeds the limit of {limits.max_batch_mutations}"
            )
        plan: list[tuple[TableInfo, Mutation, FlatMutation]] = []
        cells_total = 0
        for mutation in batch:
            if not isinstance(mutation, Mutation):
                raise InvalidRequest(f"a batch holds Mutation objects, got {mutation!r:.80}")
            info = self._info(mutation.keyspace, mutation.table)
            mutation = without_dropped_columns(info, mutation)
            flat = flatten_mutation(info, mutation)
            if flat.size_bytes > limits.max_mutation_size_bytes:
                raise MutationTooLarge(
                    f"mutation of {flat.size_bytes} bytes for {info.qualified_name} exceeds the "
                    f"limit of {limits.max_mutation_size_bytes} bytes"
                )
            cells_total += flat.cells
            if cells_total > limits.max_batch_cells:
                raise BatchTooLarge(
                    f"batch of more than {cells_total} cells exceeds the limit of "
                    f"{limits.max_batch_cells} cells"
                )
            plan.append((info, mutation, flat))
        checked: set[int] = set()  # base tids whose log table is known to be there
        for index in captures:
            if type(index) is not int or not 0 <= index < len(batch):
                raise InvalidRequest(
                    f"CDC capture for mutation {index!r} of a batch of {len(batch)}"
                )
            base = plan[index][0]
            if base.tid not in checked:
                self._log_info(base)
                checked.add(base.tid)
        return plan

    def _log_info(self, base: TableInfo) -> TableInfo:
        if not base.table.options.cdc.enabled:
            raise InvalidRequest(f"CDC capture given for {base.qualified_name}, which has no CDC")
        log = self._by_name.get((base.table.keyspace, base.table.cdc_log_name))
        if log is None:
            raise UnknownTable(
                f"CDC log table {base.table.keyspace}.{base.table.cdc_log_name} is not registered"
            )
        return log

    def apply(
        self,
        batch: Sequence[Mutation],
        *,
        now_s: int,
        cdc: Mapping[int, CdcCapture] | None = None,
        origin: Origin = Origin.WRITE,
    ) -> None:
        """Write ``batch`` in one transaction; returns after COMMIT.

        ``cdc`` maps the index of a base mutation in ``batch`` to its capture (stream id and
        timeuuid); for those, the CDC log rows (with pre/post-images when the table asks for
        them) are built and written in the same transaction. ``now_s`` is the wall-clock second
        used for image reads (TTL) and the log rows. ``origin`` says how the batch reached this
        replica, for the replica-side capture (``store.capture``, when enabled): WRITE, HINT,
        STREAM or REPAIR. Raises an InvalidRequest subclass, with nothing written, for a bad
        batch, and ``CaptureFull`` when the capture refuses CDC writes.
        """
        (error,) = self.apply_group([(batch, cdc or {})], now_s=now_s, origins=(origin,))
        if error is not None:
            raise error

    def apply_group(
        self,
        batches: Sequence[tuple[Sequence[Mutation], Mapping[int, CdcCapture]]],
        *,
        now_s: int,
        origins: Sequence[Origin] | None = None,
    ) -> list[RingflowError | None]:
        """Write several independent batches (each with its CDC captures and its origin, as
        for ``apply``; all WRITE when ``origins`` is None) in ONE transaction: a group commit,
        one COMMIT (one WAL fsync) for all of them. Returns after COMMIT, with one entry per
        batch: None (written) or the error that refused that batch (an InvalidRequest, or
        ``CaptureFull``; nothing of it written, the others are). A batch sees the writes of the
        batches before it (pre-images included). A storage failure raises: then none of them is
        written."""
        if type(now_s) is not int:
            raise InvalidRequest(f"now_s must be an int, got {now_s!r}")
        if origins is not None and len(origins) != len(batches):
            raise InvalidRequest(f"{len(origins)} origins for {len(batches)} batches")
        outcomes: list[RingflowError | None] = []
        plans: list[_Planned] = []
        with self._lock:
            recorder = self.capture.recorder
            for position, (batch, cdc) in enumerate(batches):
                origin = Origin.WRITE if origins is None else origins[position]
                captures = dict(cdc)
                try:
                    plan = self._plan(batch, captures)
                except InvalidRequest as refused:
                    outcomes.append(refused)
                    continue
                refusal = None
                if recorder is not None and _has_log_rows(plan, captures):
                    refusal = recorder.refusal(origin)
                outcomes.append(refusal)
                if refusal is None:
                    plans.append((plan, captures, origin))
            if plans:
                self._write_group(plans, now_s, recorder)
        return outcomes

    def _write_group(
        self, plans: list[_Planned], now_s: int, recorder: CaptureRecorder | None
    ) -> None:
        """The planned batches in one transaction (see ``apply_group``), captured if enabled."""
        log_settled = capture_settled = False
        capture: CaptureBatch | None = None
        with self._transaction() as connection:
            if recorder is not None:
                capture = CaptureBatch(recorder, connection, lambda: settle_log_queue(connection))
            writes = WriteBuffer(connection, capture)
            writers: dict[int, CdcWriter] = {}  # by base tid, for the whole group
            for plan, captures, origin in plans:
                if capture is not None:
                    capture.origin = origin
                self._write_planned(plan, captures, now_s, writes, writers)
            writes.flush()
            self._appended += writes.appended
            if self._appended >= LOG_APPEND_SETTLE_ROWS:
                settle_log_queue(connection)
                log_settled = True
            if capture is not None and recorder is not None:
                capture.flush()
                if recorder.queued + capture.rows >= CAPTURE_SETTLE_ROWS:
                    settle_queue(connection)
                    capture_settled = True
        if log_settled:
            self._appended = 0
        if capture is not None and recorder is not None:
            recorder.committed(capture)
            if capture_settled:
                recorder.queued = 0

    def _write_planned(
        self,
        plan: list[tuple[TableInfo, Mutation, FlatMutation]],
        captures: Mapping[int, CdcCapture],
        now_s: int,
        writes: WriteBuffer,
        writers: dict[int, CdcWriter],
    ) -> None:
        """One planned batch into ``writes`` (an image read flushes what it needs first)."""
        capturing = writes.capture is not None
        for index, (info, mutation, flat) in enumerate(plan):
            capture = captures.get(index)
            if capture is None:
                if capturing and info.packed_rows and is_cdc_log_table(info.table.name):
                    base_name = base_table_name(info.table.name)
                    writes.add_log(flat, base_name, mutation, direct=True)
                else:
                    writes.add(flat)
                continue
            writer = writers.get(info.tid)
            if writer is None:
                reader = self._image_reader(info, now_s)
                writer = writers[info.tid] = CdcWriter(info, self._log_info(info), reader)
            writer.apply(mutation, flat, capture, now_s, writes)

    # --- the log appends (see the layout module) -----------------------------------------------

    def _settle_for(self, info: TableInfo) -> None:
        """Move pending log appends into ``atoms`` before a read of a packed-row table."""
        if info.packed_rows and self._appended:
            with self._transaction() as connection:
                settle_log_queue(connection)
            self._appended = 0

    # --- reads ---------------------------------------------------------------------------------

    def _tombstones(
        self, info: TableInfo, token: int, pk: bytes, budget: TombstoneBudget
    ) -> PartitionTombstones:
        rows = self._connection.execute(SELECT_PARTITION_ATOMS, (info.tid, token, pk))
        tombstones = PartitionTombstones.of(rows.fetchall())
        budget.add(len(tombstones.ranges) + (tombstones.partition_deletion is not None))
        return tombstones

    def _stored_row(
        self, info: TableInfo, token: int, pk: bytes, ck: bytes, budget: TombstoneBudget,
        now_s: int,
    ) -> StoredRow | None:  # fmt: skip
        high = ck + b"\x00"  # the smallest key above ck: the row's atoms only
        atoms = self._connection.execute(SELECT_PARTITION_SLICE, (info.tid, token, pk, ck, high))
        return next(assemble_rows(info, atoms.fetchall(), budget, now_s), None)

    def _image_reader(self, info: TableInfo, now_s: int) -> ImageReader:
        return _ImageReader(self, info, now_s)

    def read_partition(
        self,
        table: Table | tuple[str, str],
        partition_key: Sequence[bytes],
        *,
        start: ClusteringBound = ClusteringBound(),  # noqa: B008 - frozen value object
        end: ClusteringBound = ClusteringBound(),  # noqa: B008 - frozen value object
        columns: Sequence[str] | None = None,
        reverse: bool = False,
        limit: int | None = None,
        now_s: int,
    ) -> list[ResultRow]:
        """The live rows of one partition between ``start`` and ``end`` (clustering order, or
        reversed), reconciled at ``now_s``; at most ``limit`` rows. ``columns`` restricts the
        values returned (not which rows exist). ResultTooLarge past ``max_result_rows``."""
        with self._lock:
            info = self._info_of(table)
            token, pk = partition_position(info, tuple(partition_key))
            cap = row_cap(self.limits, limit)
            self._settle_for(info)
            unrestricted = start.is_unbounded and end.is_unbounded
            request = row_request(info, columns, now_s, unrestricted)
            low = start_key(info.encode_clustering, start)
            high = end_key(info.encode_clustering, end)
            budget = TombstoneBudget(self.limits.max_tombstones_per_read)
            tombstones = self._tombstones(info, token, pk, budget)
            static = None
            if info.static_columns:
                static = self._stored_row(info, token, pk, STATIC_CK, budget, now_s)
            sql = SELECT_PARTITION_SLICE_REVERSED if reverse else SELECT_PARTITION_SLICE
            cursor = self._connection.execute(sql, (info.tid, token, pk, low, high))
            rows: list[ResultRow] = []
            try:
                live = live_rows(info, cursor, tombstones, budget, now_s)
                for _ck, row in result_rows(info, (token, pk), static, live, tombstones, request):
                    rows.append(row)
                    if len(rows) >= cap:
                        break
            finally:
                cursor.close()
        return checked_result(info, rows, self.limits)

    def read_row(
        self,
        table: Table | tuple[str, str],
        partition_key: Sequence[bytes],
        clustering: Sequence[bytes],
        *,
        columns: Sequence[str] | None = None,
        now_s: int,
    ) -> ResultRow | None:
        """The live row at ``clustering`` (``()`` for a table without clustering), or None."""
        bound = ClusteringBound(tuple(clustering), True)
        found = self.read_partition(
            table, partition_key, start=bound, end=bound, columns=columns, limit=1, now_s=now_s
        )
        return found[0] if found else None

    def read_mutation(
        self,
        table: Table | tuple[str, str],
        partition_key: Sequence[bytes],
        *,
        start: ClusteringBound = ClusteringBound(),  # noqa: B008 - frozen value object
        end: ClusteringBound = ClusteringBound(),  # noqa: B008 - frozen value object
    ) -> Mutation | None:
        """The stored state of a partition, merged but not reconciled for reading: every
        tombstone and expired cell is there (for repair, streaming and hints). None if the
        store holds nothing for it.

        With ``start``/``end`` (a coordinated read of a clustering slice), only the clustered
        rows in that slice are given, with the static row and every partition deletion and
        range tombstone: what :meth:`read_partition` of the same slice needs to answer from it,
        read with one index seek instead of the whole partition."""
        with self._lock:
            info = self._info_of(table)
            token, pk = partition_position(info, tuple(partition_key))
            self._settle_for(info)
            if start.is_unbounded and end.is_unbounded:
                return self._raw_partition(info, token, pk)
            return self._raw_slice(info, token, pk, start, end)

    def _raw_partition(self, info: TableInfo, token: int, pk: bytes) -> Mutation | None:
        tombstones = self._tombstones(info, token, pk, TombstoneBudget(2**62))
        atoms = self._connection.execute(SELECT_PARTITION_ALL_ATOMS, (info.tid, token, pk))
        return raw_mutation(info, pk, list(assemble_rows(info, atoms.fetchall())), tombstones)

    def _raw_slice(
        self, info: TableInfo, token: int, pk: bytes, start: ClusteringBound, end: ClusteringBound
    ) -> Mutation | None:
        tombstones = self._tombstones(info, token, pk, TombstoneBudget(2**62))
        low = start_key(info.encode_clustering, start)
        high = end_key(info.encode_clustering, end)
        connection = self._connection
        static = connection.execute(SELECT_STATIC_ROW, (info.tid, token, pk)).fetchall()
        atoms = connection.execute(SELECT_PARTITION_SLICE, (info.tid, token, pk, low, high))
        stored = list(assemble_rows(info, static + atoms.fetchall()))
        return raw_mutation(info, pk, stored, tombstones)

    # --- scans ---------------------------------------------------------------------------------

    def scan(
        self,
        table: Table | tuple[str, str],
        start_token_exclusive: int,
        end_token_inclusive: int,
        *,
        page_size: int,
        paging_state: bytes | None = None,
        columns: Sequence[str] | None = None,
        now_s: int,
    ) -> ScanPage:
        """One page of the live rows whose tokens are in ``(start, end]`` (wrapping when
        ``start >= end``), in token, partition key and clustering order; pass the returned
        ``paging_state`` back for the next page until it is None."""
        with self._lock:
            info = self._info_of(table)
            page_size = checked_page_size(self.limits, page_size)
            self._settle_for(info)
            scan = ScanRange(info.table.id, start_token_exclusive, end_token_inclusive)
            resume = None
            if paging_state is not None:
                resume = decode_paging_state(ROWS_KIND, scan, paging_state)
            request = row_request(info, columns, now_s, True)
            budget = TombstoneBudget(self.limits.max_tombstones_per_read)
            return scan_rows(self._connection, info, scan, page_size, resume, request, budget)

    def scan_mutations(
        self,
        table: Table | tuple[str, str],
        start_token_exclusive: int,
        end_token_inclusive: int,
        *,
        page_size: int,
        paging_state: bytes | None = None,
    ) -> MutationPage:
        """One page of at most ``page_size`` partitions in ``(start, end]`` as their stored
        state (:meth:`read_mutation`), in token order; for streaming and repair."""
        with self._lock:
            info = self._info_of(table)
            page_size = checked_page_size(self.limits, page_size)
            self._settle_for(info)
            scan = ScanRange(info.table.id, start_token_exclusive, end_token_inclusive)
            resume = None
            if paging_state is not None:
                resume = decode_paging_state(PARTITIONS_KIND, scan, paging_state)
            keys, state = scan_partitions(self._connection, info, scan, page_size, resume)
            found = [(token, self._raw_partition(info, token, pk)) for token, pk in keys]
            return MutationPage(
                [m for _, m in found if m is not None],
                state,
                [token for token, m in found if m is not None],
            )

    # --- compaction ----------------------------------------------------------------------------

    def compact(
        self,
        table: Table | tuple[str, str],
        now_s: int,
        *,
        partitions_per_transaction: int = 1000,
    ) -> CompactionResult:
        """Drop shadowed data, and tombstones and expired data older than the table's
        gc_grace_seconds, partition by partition (one transaction per
        ``partitions_per_transaction`` partitions, so writers are not blocked for long)."""
        if type(now_s) is not int:
            raise InvalidRequest(f"now_s must be an int, got {now_s!r}")
        with self._lock:
            info = self._info_of(table)
            page = checked_page_size(self.limits, partitions_per_transaction)
            self._settle_for(info)
            gc_before_s = now_s - info.table.options.gc_grace_seconds
            scan = ScanRange(info.table.id, MIN_TOKEN, MIN_TOKEN)
            scanned = rewritten = removed = 0
            resume = None
            while True:
                with self._transaction() as connection:
                    keys, state = scan_partitions(connection, info, scan, page, resume)
                    for token, pk in keys:
                        outcome = self._compact_partition(info, token, pk, now_s, gc_before_s)
                        rewritten += outcome != "kept"
                        removed += outcome == "removed"
                    scanned += len(keys)
                if state is None:
                    return CompactionResult(scanned, rewritten, removed)
                resume = decode_paging_state(PARTITIONS_KIND, scan, state)

    def _compact_partition(
        self, info: TableInfo, token: int, pk: bytes, now_s: int, gc_before_s: int
    ) -> Literal["kept", "rewritten", "removed"]:
        connection = self._connection
        tombstones = PartitionTombstones.of(
            connection.execute(SELECT_PARTITION_ATOMS, (info.tid, token, pk)).fetchall()
        )
        atoms = connection.execute(SELECT_PARTITION_ALL_ATOMS, (info.tid, token, pk)).fetchall()
        rows = list(assemble_rows(info, atoms))
        compacted = compact_partition(rows, tombstones, now_s, gc_before_s)
        if not compacted.changed:
            return "kept"
        connection.execute(
            "DELETE FROM atoms WHERE tid = ? AND token = ? AND pk = ?", (info.tid, token, pk)
        )
        connection.execute(
            "DELETE FROM partition_atoms WHERE tid = ? AND token = ? AND pk = ?",
            (info.tid, token, pk),
        )
        if compacted.is_empty:
            return "removed"
        state = raw_mutation(info, pk, compacted.rows, compacted.tombstones)
        invariant(state is not None, f"compacted partition {pk!r} of {info.qualified_name}")
        if state is not None:
            write_flats(connection, [flatten_mutation(info, state)])
        return "rewritten"

    # --- hints ---------------------------------------------------------------------------------

    def store_hint(
        self,
        target_host_id: uuid.UUID,
        mutations: Sequence[Mutation],
        created_ms: int,
        *,
        captures: Mapping[int, CdcCapture] | None = None,
    ) -> int:
        """Queue ``mutations`` (with their CDC ``captures`` by index) for a host that did not
        acknowledge them; returns the hint id. HintBacklogFull past the per-host limit."""
        with self._lock, self._transaction() as connection:
            return _hints.store_hint(
                connection, self.limits, target_host_id, mutations, created_ms, captures
            )

    def hints_for(self, target_host_id: uuid.UUID, limit: int) -> list[_hints.Hint]:
        """The oldest ``limit`` hints queued for ``target_host_id``."""
        with self._lock:
            return _hints.hints_for(self._connection, self.limits, target_host_id, limit)

    def delete_hint(self, hint_id: int) -> bool:
        """Forget a delivered hint; False if there was no such hint."""
        with self._lock, self._transaction() as connection:
            return _hints.delete_hint(connection, hint_id)

    def hint_targets(self) -> list[uuid.UUID]:
        """Every host with hints queued."""
        with self._lock:
            return _hints.hint_targets(self._connection)


_Planned = tuple[list[tuple[TableInfo, Mutation, FlatMutation]], dict[int, CdcCapture], Origin]
"""A validated batch: its mutations with their tables and rows, its CDC captures, its origin."""


def _has_log_rows(
    plan: list[tuple[TableInfo, Mutation, FlatMutation]], captures: Mapping[int, CdcCapture]
) -> bool:
    """Whether a batch writes CDC log rows (built from captures, or written directly)."""
    return bool(captures) or any(
        info.packed_rows and is_cdc_log_table(info.table.name) for info, _, _ in plan
    )


class _ImageReader:
    """Reads CDC pre/post-images of rows of one partition inside the apply transaction."""

    def __init__(self, store: Store, info: TableInfo, now_s: int) -> None:
        self._store = store
        self._info = info
        self._now_s = now_s

    def __call__(
        self, token: int, pk: bytes, clusterings: Sequence[Clustering]
    ) -> dict[Clustering, RowImage]:
        info, now_s = self._info, self._now_s
        if info.packed_rows:  # a packed base table: its queued rows may be in the appends
            settle_log_queue(
                self._store._connection
            )  # inside the apply transaction; the count stays
        budget = TombstoneBudget(self._store.limits.max_tombstones_per_read)
        tombstones = self._store._tombstones(info, token, pk, budget)
        images: dict[Clustering, RowImage] = {}
        for clustering in clusterings:
            is_static = info.clustering_arity > 0 and not clustering
            ck = STATIC_CK if is_static else row_key(info.encode_clustering, clustering)
            stored = self._store._stored_row(info, token, pk, ck, budget, now_s)
            if stored is None:
                continue
            row = shadow_row(stored.row, tombstones.covering(ck))
            image = row_image(info.table, row, now_s)
            if image is not None:
                images[tuple(clustering)] = image
        return images
