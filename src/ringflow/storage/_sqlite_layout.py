"""The SQLite layout of a node's store: the schema, and every SQL statement the store runs.

One database file per node, WAL mode. Theory of operation:

* ``atoms`` holds everything below the partition level, one SQLite row per *atom*, keyed by
  ``(tid, token, pk, ck, kind, col, path)`` (a ``WITHOUT ROWID`` table, so the key is the
  B-tree order and a partition or a token range is one contiguous index range; see ``_keys``
  for ``token``, ``pk`` and ``ck``). ``kind`` says what the atom is:

  ====  ======================  ==================================================
  kind  atom                    columns used
  ====  ======================  ==================================================
  0     clustering values       value = msgpack of the row's clustering tuple
  1     row deletion            ts = marked_for_delete_at, ldt = local deletion time
  2     row liveness (marker)   ts, ttl, ldt = local expiration time
  3     collection tombstone    col, ts = marked_for_delete_at, ldt
  4     cell                    col, path (``b""`` for a simple column), ts, ttl, ldt, value
  5     packed row              path = 8-byte digest of value, value = the whole row
                                (``_mutation_codec.encode_row``), ts = minimum
  ====  ======================  ==================================================

  The clustering atom exists because ``encode_clustering`` is order-preserving but has no
  decoder: every clustered row written carries its clustering values once (written with the
  minimum timestamp, so it is never replaced), and reads and scans take them from there. Tables
  without clustering columns and the static row (``ck = b""``) have none.

* Tables registered with ``packed_rows`` (by default the CDC log tables) store each written row
  as ONE atom of kind 5 instead of one per cell: their rows are written once (a log row is
  identified by its stream, ``cdc$time`` and ``cdc$batch_seq_no``), so per-cell LWW in SQL buys
  nothing and costs an SQLite row per cell on the hottest CDC path. The atom is keyed by a
  digest of its content, so re-writing the same row (hint replay, streaming) is a no-op and two
  different versions of one row are both kept and merged with the reconcile rules on read
  (``merge_rows``); compaction folds them back into one. Reads accept both forms in any table.

* ``log_queue`` is the write-order front of the packed-row tables (the CDC log tables): a
  packed atom written by ``Store.apply`` is appended there (a rowid table, so a batch's log rows
  fill the rightmost leaf instead of one random ``atoms`` leaf each, one per stream) as
  ``(tid, token, pk, ck, digest, value)``, the columns of a kind-5 atom that are not constant.
  Before any read, scan or compaction of a packed-row table (an image read of a packed base
  table included), and within the writing transaction once ``LOG_APPEND_SETTLE_ROWS`` rows are
  pending, the store *settles* the queue: ``SETTLE_LOG_APPENDS`` moves it into ``atoms`` in key
  order (one sorted bulk upsert with the same last-write-wins rule, so each ``atoms`` leaf is
  written once per settle rather than once per row) and empties ``log_queue``. So every read
  still sees only ``atoms`` in key order (stream, then ``cdc$time``, then ``cdc$batch_seq_no``);
  the queue only changes where a written log row waits until its first read. A queued row is
  committed with its base write, so it survives a crash and is settled by the next read after
  reopening. Stores written before the queue existed get it (empty) on open; an older store's
  ``log_appends`` (the queue's first form, every ``atoms`` column) is settled into ``atoms`` and
  dropped on open. Dropping a table deletes its queued rows too.

* ``partition_atoms`` holds partition deletions (kind 0) and range tombstones (kind 1), keyed by
  ``(tid, token, pk, kind, low, high)`` where ``[low, high)`` is the tombstone's ``ck`` interval;
  ``bounds`` keeps the original prefixes (msgpack) so the raw mutation can be given back.

* Last write wins **in SQL**: every write is ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` the
  new atom wins, so the store holds exactly one version of each atom, the reconciled one. For
  cells the WHERE clause is Cassandra's ``Cells.reconcile`` (cassandra-core.md §6.1) plus the
  schema layer's final lower-TTL tie-break; SQLite compares BLOBs with memcmp, then length,
  which is the unsigned, shorter-is-smaller value order of rule 5. For liveness it is
  ``LivenessInfo.supersedes`` (expired marker, then expiring, then later expiration, then lower
  TTL); for deletions ``DeletionTime.supersedes``. A property test proves the SQL equals
  ``reconcile_cells``. Shadowed data stays on disk until ``compact`` drops it; reads shadow it.

* The *capture* (seed 002; ``_capture``): ``capture_slices`` holds one row per slice a replica
  captured rows into, keyed by ``SliceKey`` (keyspace, base table, range, slice start,
  out-of-sequence) with its small id ``sid``, its due time and first arrival, and once sealed
  its seal time, 128-bit digest, row count and bytes (``sealed_ms`` NULL while open; an open
  slice's counts are its rows', counted when read, so a write adds no update of its slice),
  and once the node published it to ``system_replication.slices`` (acknowledged at QUORUM)
  ``published_ms`` (NULL until then: a restarted node publishes again what was not
  acknowledged; stores made before the column get it at open, ``CAPTURE_PUBLISHED_COLUMN``).
  ``capture_rows`` holds the captured rows, keyed ``(sid, seq)`` (a slice is one index range, in
  arrival order): the arrival sequence, the 64-bit row digest, the origin and the row as its
  canonical bytes. Like ``log_queue``, ``capture_queue`` is its write-order front: the writing
  transaction appends there (one leaf, not one per open slice), and the queue is settled into
  ``capture_rows`` in ``(sid, seq)`` order before any capture read, at every seal, and in the
  writing transaction past ``CAPTURE_SETTLE_ROWS`` rows.

* ``_tables`` maps a table (its uuid, and ``keyspace.name``) to the small integer ``tid`` used in
  every key, with the table's definition as a JSON record so a reopened store knows its tables.
  ``hints`` is a durable queue of encoded mutations per target host.
"""

from __future__ import annotations

from typing import Final

from ringflow.schema import EXPIRED_LIVENESS_TTL_S, NO_DELETION_TIME, NO_TIMESTAMP

LAYOUT_VERSION: Final = 1

KIND_CLUSTERING: Final = 0
KIND_ROW_DELETION: Final = 1
KIND_LIVENESS: Final = 2
KIND_COLLECTION_DELETION: Final = 3
KIND_CELL: Final = 4
KIND_PACKED_ROW: Final = 5

KIND_PARTITION_DELETION: Final = 0
KIND_RANGE_TOMBSTONE: Final = 1

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS _meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _tables (
    tid INTEGER PRIMARY KEY,
    table_uuid TEXT NOT NULL UNIQUE,
    keyspace TEXT NOT NULL,
    name TEXT NOT NULL,
    record TEXT NOT NULL,
    UNIQUE (keyspace, name)
);
CREATE TABLE IF NOT EXISTS atoms (
    tid INTEGER NOT NULL,
    token INTEGER NOT NULL,
    pk BLOB NOT NULL,
    ck BLOB NOT NULL,
    kind INTEGER NOT NULL,
    col TEXT NOT NULL,
    path BLOB NOT NULL,
    ts INTEGER NOT NULL,
    ttl INTEGER NOT NULL,
    ldt INTEGER NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (tid, token, pk, ck, kind, col, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_queue (
    seq INTEGER PRIMARY KEY,
    tid INTEGER NOT NULL,
    token INTEGER NOT NULL,
    pk BLOB NOT NULL,
    ck BLOB NOT NULL,
    digest BLOB NOT NULL,
    value BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS partition_atoms (
    tid INTEGER NOT NULL,
    token INTEGER NOT NULL,
    pk BLOB NOT NULL,
    kind INTEGER NOT NULL,
    low BLOB NOT NULL,
    high BLOB NOT NULL,
    ts INTEGER NOT NULL,
    ldt INTEGER NOT NULL,
    bounds BLOB NOT NULL,
    PRIMARY KEY (tid, token, pk, kind, low, high)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hints (
    hint_id INTEGER PRIMARY KEY AUTOINCREMENT,
    target BLOB NOT NULL,
    created_ms INTEGER NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS hints_by_target ON hints (target, created_ms, hint_id);
CREATE TABLE IF NOT EXISTS capture_slices (
    sid INTEGER PRIMARY KEY,
    keyspace TEXT NOT NULL,
    table_name TEXT NOT NULL,
    range_start INTEGER NOT NULL,
    range_end INTEGER NOT NULL,
    slice_start_ms INTEGER NOT NULL,
    out_of_sequence INTEGER NOT NULL,
    due_ms INTEGER NOT NULL,
    opened_ms INTEGER NOT NULL,
    row_count INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    sealed_ms INTEGER,
    digest BLOB,
    published_ms INTEGER,
    UNIQUE (keyspace, table_name, range_start, range_end, slice_start_ms, out_of_sequence)
);
CREATE INDEX IF NOT EXISTS capture_slices_open ON capture_slices (due_ms) WHERE sealed_ms IS NULL;
CREATE TABLE IF NOT EXISTS capture_queue (
    seq INTEGER PRIMARY KEY,
    sid INTEGER NOT NULL,
    digest INTEGER NOT NULL,
    origin INTEGER NOT NULL,
    row BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS capture_rows (
    sid INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    digest INTEGER NOT NULL,
    origin INTEGER NOT NULL,
    row BLOB NOT NULL,
    PRIMARY KEY (sid, seq)
) WITHOUT ROWID;
"""

_NDT = NO_DELETION_TIME
_EXPIRED = EXPIRED_LIVENESS_TTL_S

# The WHERE clause of the upsert: does the new atom (``excluded``) win over the stored one?
_CELL_WINS = f"""CASE
    WHEN (excluded.ldt <> {_NDT}) <> (atoms.ldt <> {_NDT}) THEN excluded.ldt <> {_NDT}
    WHEN excluded.ldt <> {_NDT} AND (excluded.ttl = 0) <> (atoms.ttl = 0) THEN excluded.ttl = 0
    WHEN excluded.ldt <> atoms.ldt THEN excluded.ldt > atoms.ldt
    WHEN excluded.value <> atoms.value THEN excluded.value > atoms.value
    ELSE excluded.ttl < atoms.ttl END"""
_LIVENESS_WINS = f"""CASE
    WHEN (excluded.ttl = {_EXPIRED}) <> (atoms.ttl = {_EXPIRED}) THEN excluded.ttl = {_EXPIRED}
    WHEN (excluded.ttl > 0) <> (atoms.ttl > 0) THEN excluded.ttl > 0
    WHEN excluded.ldt <> atoms.ldt THEN excluded.ldt > atoms.ldt
    ELSE excluded.ttl < atoms.ttl END"""

UPSERT_ATOM: Final = f"""
INSERT INTO atoms (tid, token, pk, ck, kind, col, path, ts, ttl, ldt, value)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tid, token, pk, ck, kind, col, path) DO UPDATE SET
    ts = excluded.ts, ttl = excluded.ttl, ldt = excluded.ldt, value = excluded.value
WHERE excluded.ts > atoms.ts OR (excluded.ts = atoms.ts AND CASE excluded.kind
    WHEN {KIND_CELL} THEN {_CELL_WINS}
    WHEN {KIND_LIVENESS} THEN {_LIVENESS_WINS}
    ELSE excluded.ldt > atoms.ldt END)
"""

APPEND_LOG_ATOM: Final = """
INSERT INTO log_queue (tid, token, pk, ck, digest, value) VALUES (?, ?, ?, ?, ?, ?)"""
"""One queued packed atom: ``LogAppendRow`` (tid, token, pk, ck, digest, value)."""

LOG_APPEND_SETTLE_ROWS: Final = 10_000
"""Queued log atoms after which the writing transaction settles them (see above)."""

_ATOM_VALUES = "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# The queue in key order through the atoms upsert (``WHERE true`` makes SQLite parse the
# ON CONFLICT clause as the upsert's, not as part of the SELECT); the same WHERE as UPSERT_ATOM.
SETTLE_LOG_APPENDS: Final = UPSERT_ATOM.replace(
    _ATOM_VALUES,
    f"SELECT tid, token, pk, ck, {KIND_PACKED_ROW}, '', digest, {NO_TIMESTAMP}, 0, {_NDT}, value "
    "FROM log_queue WHERE true ORDER BY tid, token, pk, ck, digest, seq",
)
CLEAR_LOG_APPENDS: Final = "DELETE FROM log_queue"
COUNT_LOG_APPENDS: Final = "SELECT COUNT(*) FROM log_queue"
DELETE_TABLE_LOG_APPENDS: Final = "DELETE FROM log_queue WHERE tid = ?"

HAS_LEGACY_LOG_APPENDS: Final = (
    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'log_appends'"
)
SETTLE_LEGACY_LOG_APPENDS: Final = UPSERT_ATOM.replace(
    _ATOM_VALUES,
    "SELECT tid, token, pk, ck, kind, col, path, ts, ttl, ldt, value FROM log_appends "
    "WHERE true ORDER BY tid, token, pk, ck, kind, col, path, seq",
)
"""Settles the queue's first form (a ``log_appends`` table with every ``atoms`` column)."""
DROP_LEGACY_LOG_APPENDS: Final = "DROP TABLE log_appends"

UPSERT_PARTITION_ATOM: Final = """
INSERT INTO partition_atoms (tid, token, pk, kind, low, high, ts, ldt, bounds)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tid, token, pk, kind, low, high) DO UPDATE SET
    ts = excluded.ts, ldt = excluded.ldt, bounds = excluded.bounds
WHERE excluded.ts > partition_atoms.ts
    OR (excluded.ts = partition_atoms.ts AND excluded.ldt > partition_atoms.ldt)
"""

# Reads. Atom rows come back as (token, pk, ck, kind, col, path, ts, ttl, ldt, value).
_ATOM_COLUMNS = "token, pk, ck, kind, col, path, ts, ttl, ldt, value"

SELECT_PARTITION_SLICE: Final = f"""
SELECT {_ATOM_COLUMNS} FROM atoms
WHERE tid = ? AND token = ? AND pk = ? AND ck >= ? AND ck < ?
ORDER BY ck"""
SELECT_PARTITION_SLICE_REVERSED: Final = SELECT_PARTITION_SLICE + " DESC"

SELECT_STATIC_ROW: Final = f"""
SELECT {_ATOM_COLUMNS} FROM atoms
WHERE tid = ? AND token = ? AND pk = ? AND ck = x''"""

SELECT_PARTITION_ATOMS: Final = """
SELECT token, pk, kind, low, high, ts, ldt, bounds FROM partition_atoms
WHERE tid = ? AND token = ? AND pk = ?"""

# Token-range scans, resuming strictly after (token, pk, ck) of the last row returned.
SELECT_ATOMS_AFTER: Final = f"""
SELECT {_ATOM_COLUMNS} FROM atoms
WHERE tid = ? AND token <= ? AND (token, pk, ck) > (?, ?, ?)
ORDER BY token, pk, ck"""

SELECT_PARTITION_ATOMS_AFTER: Final = """
SELECT token, pk, kind, low, high, ts, ldt, bounds FROM partition_atoms
WHERE tid = ? AND token <= ? AND (token, pk) >= (?, ?)
ORDER BY token, pk"""

# Partitions in a token range (for raw scans), resuming strictly after (token, pk).
SELECT_PARTITIONS_AFTER: Final = """
SELECT token, pk FROM (
    SELECT * FROM (
        SELECT DISTINCT token, pk FROM atoms WHERE tid = ? AND token <= ? AND (token, pk) > (?, ?)
        ORDER BY token, pk LIMIT ?
    )
    UNION
    SELECT * FROM (
        SELECT DISTINCT token, pk FROM partition_atoms
        WHERE tid = ? AND token <= ? AND (token, pk) > (?, ?)
        ORDER BY token, pk LIMIT ?
    )
) ORDER BY token, pk LIMIT ?"""
"""The first keys after a position, each branch limited on its own: without the inner limits
SQLite built the whole remaining range's DISTINCT set before the outer LIMIT (a page of a
1,000,000-row table took ~0.5 s instead of ~1 ms, every page of a range scan or stream)."""

SELECT_PARTITION_ALL_ATOMS: Final = f"""
SELECT {_ATOM_COLUMNS} FROM atoms WHERE tid = ? AND token = ? AND pk = ? ORDER BY ck"""

DELETE_TABLE_ATOMS: Final = "DELETE FROM atoms WHERE tid = ?"
DELETE_TABLE_PARTITION_ATOMS: Final = "DELETE FROM partition_atoms WHERE tid = ?"

DELETE_ATOM: Final = """
DELETE FROM atoms
WHERE tid = ? AND token = ? AND pk = ? AND ck = ? AND kind = ? AND col = ? AND path = ?"""
DELETE_PARTITION_ATOM: Final = """
DELETE FROM partition_atoms
WHERE tid = ? AND token = ? AND pk = ? AND kind = ? AND low = ? AND high = ?"""

# Table registry.
SELECT_TABLES: Final = "SELECT tid, table_uuid, keyspace, name, record FROM _tables ORDER BY tid"
INSERT_TABLE: Final = (
    "INSERT INTO _tables (table_uuid, keyspace, name, record) VALUES (?, ?, ?, ?) RETURNING tid"
)
UPDATE_TABLE: Final = "UPDATE _tables SET record = ? WHERE tid = ?"
DELETE_TABLE: Final = "DELETE FROM _tables WHERE tid = ?"

# Hints.
INSERT_HINT: Final = (
    "INSERT INTO hints (target, created_ms, payload) VALUES (?, ?, ?) RETURNING hint_id"
)
COUNT_HINTS: Final = "SELECT COUNT(*) FROM hints WHERE target = ?"
SELECT_HINTS: Final = """
SELECT hint_id, created_ms, payload FROM hints WHERE target = ?
ORDER BY created_ms, hint_id LIMIT ?"""
DELETE_HINT: Final = "DELETE FROM hints WHERE hint_id = ?"
SELECT_HINT_TARGETS: Final = "SELECT DISTINCT target FROM hints ORDER BY target"

# Capture (``_capture``, ``_capture_slices``).
CAPTURE_SETTLE_ROWS: Final = 10_000
"""Queued capture rows after which the writing transaction settles them."""
_SLICE_KEY = "keyspace, table_name, range_start, range_end, slice_start_ms, out_of_sequence"
INSERT_CAPTURE_SLICE: Final = f"""
INSERT INTO capture_slices ({_SLICE_KEY}, due_ms, opened_ms, row_count, size_bytes)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0) ON CONFLICT ({_SLICE_KEY}) DO NOTHING"""
"""A slice, created by its first row (its counts are written when it is sealed)."""
SELECT_SLICE_STATE: Final = """
SELECT sid, sealed_ms FROM capture_slices
WHERE keyspace = ? AND table_name = ? AND range_start = ? AND range_end = ?
    AND slice_start_ms = ? AND out_of_sequence = ?"""
APPEND_CAPTURE_ROW: Final = (
    "INSERT INTO capture_queue (seq, sid, digest, origin, row) VALUES (?, ?, ?, ?, ?)"
)
SETTLE_CAPTURE_QUEUE: Final = """
INSERT INTO capture_rows (sid, seq, digest, origin, row)
SELECT sid, seq, digest, origin, row FROM capture_queue WHERE true ORDER BY sid, seq"""
CLEAR_CAPTURE_QUEUE: Final = "DELETE FROM capture_queue"
COUNT_CAPTURE_QUEUE: Final = "SELECT COUNT(*) FROM capture_queue"
MAX_CAPTURE_SEQ: Final = """
SELECT MAX(seq) FROM (SELECT MAX(seq) AS seq FROM capture_queue
                      UNION ALL SELECT MAX(seq) FROM capture_rows)"""
CAPTURE_ROW_OVERHEAD_BYTES: Final = 32
"""Counted per captured row on top of its canonical bytes (sequence, digest, keys)."""
_ROW_BYTES = f"COALESCE(SUM(length(row)), 0) + {CAPTURE_ROW_OVERHEAD_BYTES} * COUNT(*)"
"""Bytes of captured rows: their canonical bytes and the overhead of each."""
_SLICE_COLUMNS = f"""sid, {_SLICE_KEY}, due_ms, opened_ms,
    CASE WHEN sealed_ms IS NULL
        THEN (SELECT COUNT(*) FROM capture_rows AS r WHERE r.sid = s.sid) ELSE row_count END,
    CASE WHEN sealed_ms IS NULL
        THEN (SELECT {_ROW_BYTES} FROM capture_rows AS r WHERE r.sid = s.sid) ELSE size_bytes END,
    sealed_ms, digest, published_ms"""
"""A slice as ``_capture_slices`` reads it: an open slice's counts from its rows (the queue
settled first), a sealed one's as sealed."""
SELECT_DUE_SLICES: Final = f"""
SELECT sid, {_SLICE_KEY}, due_ms, opened_ms, 0, 0, sealed_ms, digest, published_ms
FROM capture_slices WHERE sealed_ms IS NULL AND due_ms <= ? ORDER BY due_ms, sid"""
"""The open slices due (their counts left out: sealing counts their rows)."""
SELECT_SLICE_DIGESTS: Final = "SELECT digest, length(row) FROM capture_rows WHERE sid = ?"
SEAL_SLICE: Final = """
UPDATE capture_slices SET sealed_ms = ?, digest = ?, row_count = ?, size_bytes = ?
WHERE sid = ? AND sealed_ms IS NULL"""
SELECT_SLICE_BY_KEY: Final = f"""
SELECT {_SLICE_COLUMNS} FROM capture_slices AS s
WHERE keyspace = ? AND table_name = ? AND range_start = ? AND range_end = ?
    AND slice_start_ms = ? AND out_of_sequence = ?"""
SELECT_SLICES: Final = f"SELECT {_SLICE_COLUMNS} FROM capture_slices AS s"
"""Followed by the filters, ``ORDER BY`` and ``LIMIT`` of ``_capture_slices.list_slices``."""
SELECT_SLICE_ROWS: Final = """
SELECT seq, digest, origin, row FROM capture_rows WHERE sid = ? AND seq > ? ORDER BY seq LIMIT ?"""
DELETE_SLICE_ROWS: Final = "DELETE FROM capture_rows WHERE sid = ?"
DELETE_SLICE: Final = "DELETE FROM capture_slices WHERE sid = ?"
SELECT_OLDEST_SEALED: Final = f"""
SELECT {_SLICE_COLUMNS} FROM capture_slices AS s
WHERE sealed_ms IS NOT NULL ORDER BY opened_ms, sid LIMIT ?"""
CAPTURE_TOTALS: Final = """
SELECT COALESCE(SUM(sealed_ms IS NULL), 0), COALESCE(SUM(sealed_ms IS NOT NULL), 0),
       COALESCE(SUM(row_count), 0), COALESCE(SUM(size_bytes), 0), MIN(opened_ms)
FROM capture_slices"""
"""Slices open and sealed, the sealed ones' rows and bytes, the first arrival of the oldest."""
OPEN_CAPTURE_ROWS: Final = f"""
SELECT COUNT(*), {_ROW_BYTES} FROM (
    SELECT sid, row FROM capture_rows UNION ALL SELECT sid, row FROM capture_queue
) WHERE sid IN (SELECT sid FROM capture_slices WHERE sealed_ms IS NULL)"""
"""The rows and bytes of the open slices (settled or queued)."""
SELECT_UNPUBLISHED: Final = f"""
SELECT {_SLICE_COLUMNS} FROM capture_slices AS s
WHERE sealed_ms IS NOT NULL AND published_ms IS NULL ORDER BY sealed_ms, sid LIMIT ?"""
"""The sealed slices not yet published, oldest seal first (``capture_slices_unpublished``)."""
MARK_PUBLISHED: Final = """
UPDATE capture_slices SET published_ms = ?
WHERE keyspace = ? AND table_name = ? AND range_start = ? AND range_end = ?
    AND slice_start_ms = ? AND out_of_sequence = ? AND sealed_ms IS NOT NULL
    AND published_ms IS NULL"""
UNPUBLISHED_DUES: Final = """
SELECT keyspace, table_name, MIN(due_ms), COUNT(*) FROM capture_slices
WHERE sealed_ms IS NOT NULL AND published_ms IS NULL GROUP BY keyspace, table_name"""
"""Per table: the earliest due time of its sealed, unpublished slices, and how many."""
CAPTURE_TABLES: Final = """
SELECT DISTINCT keyspace, table_name FROM capture_slices ORDER BY keyspace, table_name"""
SELECT_CANONICAL_ROWS: Final = """
SELECT seq, digest, origin, row FROM capture_rows WHERE sid = ? AND seq > ? AND seq <= ?
ORDER BY seq LIMIT ?"""
"""A slice's rows in ``(after, through]`` by arrival sequence, as stored."""
HAS_PUBLISHED_COLUMN: Final = (
    "SELECT COUNT(*) FROM pragma_table_info('capture_slices') WHERE name = 'published_ms'"
)
CAPTURE_PUBLISHED_COLUMN: Final = "ALTER TABLE capture_slices ADD COLUMN published_ms INTEGER"
"""For a store made before publication (``published_ms`` NULL: published again, harmless)."""
CAPTURE_UNPUBLISHED_INDEX: Final = """
CREATE INDEX IF NOT EXISTS capture_slices_unpublished ON capture_slices (sealed_ms, sid)
WHERE sealed_ms IS NOT NULL AND published_ms IS NULL"""
SELECT_META: Final = "SELECT value FROM _meta WHERE key = ?"
UPSERT_META: Final = """
INSERT INTO _meta (key, value) VALUES (?, ?)
ON CONFLICT (key) DO UPDATE SET value = excluded.value"""
