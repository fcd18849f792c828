"""Anti-entropy repair planning: which ranges a repair covers, and what to stream after the trees.

A pure core (replication-and-repair.md §4.1-4.2, cassandra-core.md §7.3, seed 003 "Merkle
repair"). Rules:

* A repair covers, per table, the ring ranges ``(predecessor, token]`` whose replicas include the
  coordinator (``nodetool repair``), or only those it is the primary owner of (``--pr``: run on
  every node, each range is repaired once); a subrange (``--start-token``/``--end-token``) cuts
  them to ``(start, end]``, which must lie within the Murmur3 bounds. Wrapping ranges are
  unwrapped, so every piece is a non-wrapping ``(low, high]`` a tree can cover.
* After validation, for every leaf where the replicas' trees do not all agree, the replicas are
  grouped by leaf hash; one member of each group streams the leaf's range to every replica
  outside its group (so each replica ends with the union, in both directions, and a group of
  replicas that already agree is not sent the same data twice). A replica whose leaf is empty
  has nothing to send. Streams between one (source, target) pair are joined into one task.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from ringflow.cluster._merkle import MerkleTree, common_depth, differing_leaves, leaf_ranges
from ringflow.errors import InvalidRequest
from ringflow.ring import MAX_TOKEN, MIN_TOKEN, Host, ReplicationStrategy, TokenMetadata, TokenRange

LAST_REPAIRS_FILE: Final = "repairs.json"
"""Per node: the last fully successful repair it coordinated, by ``keyspace.table``."""
MISMATCHES_LISTED_MAX: Final = 200
"""A summary lists at most this many mismatching ranges per table (the count is exact)."""


@dataclass(frozen=True, slots=True)
class RepairOptions:
    """What ``ringflow cluster repair`` asks for (Cassandra's ``RepairOption`` subset)."""

    keyspace: str
    tables: tuple[str, ...] = ()
    """Empty: every table of the keyspace (CDC log tables included)."""
    primary_range: bool = False
    start_token: int | None = None
    end_token: int | None = None
    preview: bool = False
    id: uuid.UUID = field(default_factory=uuid.uuid1)

    def __post_init__(self) -> None:
        check_subrange(self.start_token, self.end_token)

    def subrange(self) -> TokenRange | None:
        if self.start_token is None or self.end_token is None:
            return None
        return TokenRange(self.start_token, self.end_token)


def check_subrange(start: int | None, end: int | None) -> None:
    """Both or neither; each a Murmur3 token; ``start < end`` (Invalid otherwise)."""
    if start is None and end is None:
        return
    if start is None or end is None:
        raise InvalidRequest("a subrange repair needs both --start-token and --end-token")
    for name, token in (("start", start), ("end", end)):
        if type(token) is not int or not MIN_TOKEN <= token <= MAX_TOKEN:
            raise InvalidRequest(
                f"--{name}-token {token!r} is outside the Murmur3 token bounds "
                f"[{MIN_TOKEN}, {MAX_TOKEN}]"
            )
    if not start < end:
        raise InvalidRequest(f"--start-token {start} must be below --end-token {end}")


@dataclass(frozen=True, slots=True)
class RangeToRepair:
    """One non-wrapping piece ``(low, high]`` and its replicas, primary first."""

    low: int
    high: int
    replicas: tuple[Host, ...]


def _pieces(token_range: TokenRange) -> list[tuple[int, int]]:
    pieces = []
    for piece in token_range.unwrap():
        high = MAX_TOKEN if piece.right == MIN_TOKEN else piece.right
        if piece.left < high:
            pieces.append((piece.left, high))
    return pieces


def ranges_to_repair(
    ring: TokenMetadata,
    strategy: ReplicationStrategy,
    coordinator: Host,
    *,
    primary_range: bool = False,
    subrange: TokenRange | None = None,
) -> list[RangeToRepair]:
    """The pieces a repair coordinated by ``coordinator`` covers (module rules), in ring order."""
    found: list[RangeToRepair] = []
    tokens = ring.sorted_tokens
    for index, token in enumerate(tokens):
        replicas = tuple(strategy.replicas(token, ring))
        if coordinator not in replicas:
            continue
        if primary_range and ring.owner_at(index) != coordinator:
            continue
        token_range = ring.range_ending_at(index)
        parts = [token_range] if subrange is None else token_range.intersect(subrange)
        for part in parts:
            found += [RangeToRepair(low, high, replicas) for low, high in _pieces(part)]
    found.sort(key=lambda piece: piece.low)
    return found


@dataclass(frozen=True, slots=True)
class SyncTask:
    """Stream ``ranges`` of one table from ``source`` to ``target`` (endpoints)."""

    source: str
    target: str
    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class SyncPlan:
    tasks: tuple[SyncTask, ...]
    leaves_compared: int
    leaves_mismatching: int
    mismatching_ranges: tuple[tuple[int, int], ...]


def plan_sync(trees: Mapping[str, MerkleTree]) -> SyncPlan:
    """The streams that make every replica hold the union of the range (module rules)."""
    endpoints = sorted(trees)
    folded = dict(zip(endpoints, common_depth([trees[e] for e in endpoints]), strict=True))
    if len(endpoints) < 2:
        leaves = len(folded[endpoints[0]].leaves) if endpoints else 0
        return SyncPlan((), leaves, 0, ())
    first = folded[endpoints[0]]
    mismatching: set[int] = set()
    for other in endpoints[1:]:
        mismatching.update(differing_leaves(first, folded[other]))
    by_pair: dict[tuple[str, str], list[int]] = {}
    for leaf in sorted(mismatching):
        groups: dict[int, list[str]] = {}
        for endpoint in endpoints:
            groups.setdefault(folded[endpoint].leaves[leaf], []).append(endpoint)
        for value, members in groups.items():
            if value == 0:
                continue  # an empty leaf has nothing to send
            for target in endpoints:
                if target not in members:
                    by_pair.setdefault((members[0], target), []).append(leaf)
    tasks = tuple(
        SyncTask(source, target, tuple(leaf_ranges(first, leaves)))
        for (source, target), leaves in sorted(by_pair.items())
    )
    return SyncPlan(
        tasks, len(first.leaves), len(mismatching), tuple(leaf_ranges(first, sorted(mismatching)))
    )


PartitionKey = tuple[bytes, ...]
PartitionListing = Sequence[tuple[int, PartitionKey, bytes]]
"""A replica's partitions in some ranges: (token, partition key, validation digest)."""


@dataclass(frozen=True, slots=True)
class KeySyncTask:
    """Stream the partitions ``keys`` of one table from ``source`` to ``target``."""

    source: str
    target: str
    keys: tuple[PartitionKey, ...]


def plan_partition_sync(listings: Mapping[str, PartitionListing]) -> tuple[KeySyncTask, ...]:
    """The row-level refinement of a leaf plan (Scylla's row-level repair, on the mismatching
    leaves only): per partition, the replicas are grouped by its digest (a replica without it
    is in no group); one member of each group sends it to every replica outside the group. So a
    partition one replica misses is sent once, to that replica only, instead of whole leaves in
    both directions."""
    endpoints = sorted(listings)
    holders: dict[tuple[int, PartitionKey], dict[bytes, list[str]]] = {}
    for endpoint in endpoints:
        for token, key, digest in listings[endpoint]:
            holders.setdefault((token, key), {}).setdefault(digest, []).append(endpoint)
    by_pair: dict[tuple[str, str], list[PartitionKey]] = {}
    for (_token, key), groups in sorted(holders.items()):
        if len(groups) == 1 and len(next(iter(groups.values()))) == len(endpoints):
            continue  # every replica holds the same partition
        for members in groups.values():
            for target in endpoints:
                if target not in members:
                    by_pair.setdefault((members[0], target), []).append(key)
    return tuple(
        KeySyncTask(source, target, tuple(keys))
        for (source, target), keys in sorted(by_pair.items())
    )


def format_range(low: int, high: int) -> str:
    return f"({low},{high}]"


def describe_ranges(ranges: Sequence[tuple[int, int]]) -> list[str]:
    return [format_range(low, high) for low, high in ranges]


@dataclass(slots=True)
class TableSummary:
    """What a repair did to one table (issue 17: ranges, leaves compared, mismatching leaves,
    partitions and bytes streamed, time), and which ranges failed and why."""

    keyspace: str
    table: str
    ranges: int = 0
    ranges_repaired: int = 0
    ranges_failed: list[list[str]] = field(default_factory=list)
    """``[range, reason]`` of each range not (fully) repaired."""
    leaves_compared: int = 0
    leaves_mismatching: int = 0
    mismatching_ranges: list[str] = field(default_factory=list)
    ranges_mismatching: int = 0
    partitions_differing: int = 0
    """Partitions found to differ by the row-level refinement (or to be sent, with preview)."""
    partitions_streamed: int = 0
    bytes_streamed: int = 0
    elapsed_ms: int = 0

    def note_mismatch(self, described: list[str]) -> None:
        self.ranges_mismatching += len(described)
        room = MISMATCHES_LISTED_MAX - len(self.mismatching_ranges)
        self.mismatching_ranges += described[: max(0, room)]


@dataclass(slots=True)
class RepairSummary:
    id: str
    keyspace: str
    preview: bool
    coordinator: str
    tables: list[TableSummary] = field(default_factory=list)
    elapsed_ms: int = 0
    error: str | None = None
    """Set when the repair was refused before it started (bad input): nothing was done."""

    @property
    def failed_ranges(self) -> int:
        return sum(len(t.ranges_failed) for t in self.tables)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RepairSummary:
        fields = json.loads(text)
        tables = [TableSummary(**table) for table in fields.pop("tables")]
        return cls(tables=tables, **fields)
