"""The write transaction's buffer: a batch's flattened mutations, CDC log atoms and captured
rows, sent to SQLite in as few calls as possible, and the log queue's settle.

Owned by ``Store.apply_group`` (one ``WriteBuffer`` per transaction). Packed log atoms are
appended to ``log_queue`` (see ``_sqlite_layout``); every other atom is upserted with the
last-write-wins SQL. When the store captures (``_capture``), the log rows it writes are also
handed to the transaction's ``CaptureBatch``: built rows with their ``DeltaRow`` or ``Mutation``,
directly written log mutations with theirs, so the capture sees exactly the rows written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ringflow.cdc import DeltaRow
from ringflow.schema import Mutation, Table
from ringflow.storage._capture import CaptureBatch, RowKey
from ringflow.storage._sqlite_layout import (
    APPEND_LOG_ATOM,
    CLEAR_LOG_APPENDS,
    KIND_PACKED_ROW,
    SETTLE_LOG_APPENDS,
    UPSERT_ATOM,
    UPSERT_PARTITION_ATOM,
)
from ringflow.storage._write import FlatMutation, LogAppendRow, queue_row


class WriteBuffer:
    """A batch's flattened mutations, queued and sent to SQLite in as few calls as possible;
    with a ``capture``, the CDC log rows among them are captured too (module docstring)."""

    def __init__(self, connection: sqlite3.Connection, capture: CaptureBatch | None = None) -> None:
        self._connection = connection
        self._pending: list[FlatMutation] = []
        self._log_atoms: list[LogAppendRow] = []
        self.capture = capture
        self.appended = 0
        """Packed atoms sent to ``log_queue`` so far."""

    def add(self, flat: FlatMutation) -> None:
        self._pending.append(flat)

    def add_log_atom(self, queued: LogAppendRow, base: Table, delta: DeltaRow) -> None:
        """Queue the packed atom of ``base``'s log row ``delta`` (captured if capturing)."""
        self._log_atoms.append(queued)
        capture = self.capture
        if capture is not None:
            tid, token, pk, ck, _digest, _value = queued
            capture.add_delta(base.keyspace, base.name, delta, (tid, token, pk, ck))

    def add_log(
        self, flat: FlatMutation, base_name: str, mutation: Mutation, *, direct: bool
    ) -> None:
        """Queue log ``mutation`` of base table ``base_name`` (flattened: ``flat``), built by the
        store or (``direct``) applied as given; captured if capturing."""
        self._pending.append(flat)
        capture = self.capture
        if capture is not None:
            keys = log_row_keys(flat, len(mutation.rows))
            capture.add_log_mutation(mutation.keyspace, base_name, mutation, keys, direct=direct)

    def flush(self) -> None:
        self.appended += write_flats(self._connection, self._pending, append_packed=True)
        self._pending = []
        if self._log_atoms:
            self._connection.executemany(APPEND_LOG_ATOM, self._log_atoms)
            self.appended += len(self._log_atoms)
            self._log_atoms = []

    def flush_partition(self, tid: int, token: int, partition_key: bytes) -> None:
        """Flush if a queued write touches partition ``(token, partition_key)`` of ``tid``."""
        for flat in self._pending:
            if (
                flat.token == token
                and flat.partition_key == partition_key
                and flat_table(flat) == tid
            ):
                self.flush()
                return


def log_row_keys(flat: FlatMutation, rows: int) -> list[RowKey] | None:
    """Where a log mutation's ``rows`` rows are stored, in row order; None if ``flat`` is not
    one packed atom per row (then the rows are not checked for duplicates)."""
    atoms = flat.atoms
    if len(atoms) != rows or any(atom[4] != KIND_PACKED_ROW for atom in atoms):
        return None
    return [(atom[0], atom[1], atom[2], atom[3]) for atom in atoms]


def flat_table(flat: FlatMutation) -> int | None:
    """The table a flattened mutation writes to (None if it writes nothing)."""
    rows = flat.atoms or flat.partition_atoms
    return rows[0][0] if rows else None


def settle_log_queue(connection: sqlite3.Connection) -> None:
    """Move every pending log append into ``atoms`` (key order, last write wins)."""
    connection.execute(SETTLE_LOG_APPENDS)
    connection.execute(CLEAR_LOG_APPENDS)


def write_flats(
    connection: sqlite3.Connection, flats: Sequence[FlatMutation], *, append_packed: bool = False
) -> int:
    """Upsert the rows of flattened mutations (last write wins in SQL); with ``append_packed``,
    packed-row atoms are appended to ``log_queue`` instead. Returns the number appended."""
    if not flats:
        return 0
    appends: list[LogAppendRow] = []
    if append_packed:
        atoms = []
        for flat in flats:
            flat_atoms = flat.atoms
            if flat_atoms and flat_atoms[0][4] == KIND_PACKED_ROW:
                appends += map(queue_row, flat_atoms)
            else:
                atoms += flat_atoms
        partition_atoms = [atom for flat in flats for atom in flat.partition_atoms]
    elif len(flats) == 1:
        atoms, partition_atoms = flats[0].atoms, flats[0].partition_atoms
    else:
        atoms = [atom for flat in flats for atom in flat.atoms]
        partition_atoms = [atom for flat in flats for atom in flat.partition_atoms]
    if atoms:
        connection.executemany(UPSERT_ATOM, atoms)
    if appends:
        connection.executemany(APPEND_LOG_ATOM, appends)
    if partition_atoms:
        connection.executemany(UPSERT_PARTITION_ATOM, partition_atoms)
    return len(appends)
