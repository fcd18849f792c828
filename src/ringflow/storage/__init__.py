"""The storage layer: a node's durable store on SQLite (WAL mode, one database file per node).

``Store`` applies batches of mutations (base, CDC log and system writes) in one transaction,
building CDC log rows with pre/post-images read inside that transaction; reads partitions and
rows with Cassandra's reconcile semantics, scans token ranges page by page, purges data past
gc_grace, and keeps hints. ``HeldTable`` answers the same reads from raw partitions held in
memory (a coordinator's reconciled reads), with the same functions (``_held``). The private
modules hold the pure parts: key encoding (``_keys``),
validation and flattening (``_write``), row assembly and reconcile on read (``_read``), the SQL
layout (``_sqlite_layout``), limits (``_limits``), the mutation byte encoding shared with the
cluster layer (``_mutation_codec``). ``Store.capture`` is the replica-side capture of seed 002
(``_capture``, ``_capture_slices``, ``_capture_store``): when the node enables it, every CDC log
row the store writes is also kept, in the same transaction, in time slices with digests.
Reference: ``shared/reference/cassandra-core.md`` §2, §6; seed 000 (base and log rows together);
seed 002 and ``shared/design/REPLICATION.md`` (capture).

Layering: storage imports ``ring``, ``schema``, ``cdc`` and the pure ``replication`` package
(which imports nothing above ``cdc``); never ``cql``, ``cluster``, ``node`` or ``pipeline``.
"""

from ringflow.storage._capture import (
    WHOLE_RING,
    CanonicalRow,
    CaptureCap,
    CaptureConfig,
    CapturedRow,
    CapturedSlice,
    CapturePolicy,
    RangeResolver,
)
from ringflow.storage._capture_slices import CaptureStatus, PublicationState
from ringflow.storage._capture_store import StoreCapture
from ringflow.storage._compaction import CompactionResult
from ringflow.storage._errors import (
    BatchTooLarge,
    CaptureFull,
    HintBacklogFull,
    InvalidMutation,
    MutationDecodeError,
    MutationTooLarge,
    ResultTooLarge,
    StorageFailure,
    TableAlreadyRegistered,
    TooManyTombstones,
    UnknownTable,
)
from ringflow.storage._held import HeldPartition, HeldTable
from ringflow.storage._hints import Hint
from ringflow.storage._limits import StoreLimits, mutation_size
from ringflow.storage._mutation_codec import (
    decode_mutation,
    decode_mutations,
    encode_mutation,
    encode_mutations,
)
from ringflow.storage._read import ResultRow
from ringflow.storage._scan import MutationPage, ScanPage
from ringflow.storage._store import Store, Synchronous

__all__ = [
    "WHOLE_RING",
    "BatchTooLarge",
    "CanonicalRow",
    "CaptureCap",
    "CaptureConfig",
    "CaptureFull",
    "CapturePolicy",
    "CaptureStatus",
    "CapturedRow",
    "CapturedSlice",
    "CompactionResult",
    "HeldPartition",
    "HeldTable",
    "Hint",
    "HintBacklogFull",
    "InvalidMutation",
    "MutationDecodeError",
    "MutationPage",
    "MutationTooLarge",
    "PublicationState",
    "RangeResolver",
    "ResultRow",
    "ResultTooLarge",
    "ScanPage",
    "StorageFailure",
    "Store",
    "StoreCapture",
    "StoreLimits",
    "Synchronous",
    "TableAlreadyRegistered",
    "TooManyTombstones",
    "UnknownTable",
    "decode_mutation",
    "decode_mutations",
    "encode_mutation",
    "encode_mutations",
    "mutation_size",
]
