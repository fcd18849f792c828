"""How the hub sink groups a round's statements into requests: pure, no I/O (the sink is
:mod:`._hub`).

A hub node pays for every request it serves (frame, lock, coordination, store transaction), so
one request per change made the hub the bound of replication (issue 14 §5). The sink therefore
sends a round's statements as ``UNLOGGED BATCH`` requests, by ``grouping``:

- ``none``: one request per statement (the path before grouping; kept to compare against).
- ``partition``: the statements of one partition in one batch (a single-partition batch is
  applied by its replicas as one mutation, the cheap kind of batch everywhere).
- ``replica`` (the default): partitions whose replicas are the same (by the driver's token
  map) packed into one batch, a partition's statements kept together: the coordinator chosen
  for the batch (token-aware, by its first statement) is a replica of every partition in it,
  so the batch costs no extra hop. On a one-node hub every partition shares it. A ringflow
  hub applies the partitions of a batch that share replicas as one write (one coordinated
  write unit, one group-commit entry, one acknowledgement).

A batch holds at most ``max_statements`` statements and, unless it has only one, at most
``max_bytes`` bytes of bound values (Cassandra refuses batches beyond
``batch_size_fail_threshold``, 50 KiB by default). A group of one statement is sent as itself.

Grouping changes nothing the hub ends up with: every statement carries its change's own
``USING TIMESTAMP`` (the batch has none), so last-write-wins reconciles them as it does
separate writes, whatever the order or the grouping.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

GROUPINGS = ("none", "partition", "replica")
DEFAULT_GROUPING = "replica"
DEFAULT_BATCH_STATEMENTS = 64
MAX_BATCH_STATEMENTS = 1000
DEFAULT_BATCH_BYTES = 48 * 1024
MAX_BATCH_BYTES = 16 * 1024 * 1024

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Grouped(Generic[T]):
    """One statement to group: where it goes (``replicas``, ``partition``; None if unknown)
    and the bytes of its bound values."""

    statement: T
    replicas: Hashable
    partition: Hashable
    size_bytes: int


def pack_requests(
    items: Iterable[Grouped[T]], grouping: str, max_statements: int, max_bytes: int
) -> list[list[T]]:
    """The statements of ``items`` cut into requests (module rules): each statement exactly
    once; a request's statements share their replicas (``replica``) or partition
    (``partition``), or are alone (``none``); a partition's statements are consecutive within
    its requests; at most ``max_statements`` per request and ``max_bytes`` unless alone."""
    if grouping not in GROUPINGS:
        raise ValueError(f"unknown grouping {grouping!r}; allowed: {GROUPINGS}")
    if grouping == "none":
        return [[item.statement] for item in items]
    groups: dict[Hashable, dict[Hashable, list[Grouped[T]]]] = {}
    for item in items:
        outer = item.replicas if grouping == "replica" else item.partition
        groups.setdefault(outer, {}).setdefault(item.partition, []).append(item)
    requests: list[list[T]] = []
    for partitions in groups.values():
        current: list[T] = []
        current_bytes = 0
        for members in partitions.values():
            for item in members:
                full = len(current) >= max_statements
                if current and (full or current_bytes + item.size_bytes > max_bytes):
                    requests.append(current)
                    current, current_bytes = [], 0
                current.append(item.statement)
                current_bytes += item.size_bytes
        if current:
            requests.append(current)
    return requests
