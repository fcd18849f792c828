"""Hints: the durable queue of mutations a node keeps for a replica that was down.

Each hint is one row of the ``hints`` table: the target host id, the time it was created (ms),
and the mutations encoded with ``_mutation_codec`` (base and CDC log rows travel together, so a
replayed hint keeps "both writes or none", seed 000). Hints of one target come back oldest
first. The queue per target is bounded (``StoreLimits.max_hints_per_target``), and so is each
fetch (``max_hints_per_fetch``). Functions here take the store's connection; the store owns
locking and transactions.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ringflow.errors import InvalidRequest
from ringflow.schema import Mutation
from ringflow.storage._errors import HintBacklogFull, MutationTooLarge
from ringflow.storage._limits import StoreLimits, mutation_size
from ringflow.storage._mutation_codec import decode_mutations, encode_mutations
from ringflow.storage._sqlite_layout import (
    COUNT_HINTS,
    DELETE_HINT,
    INSERT_HINT,
    SELECT_HINT_TARGETS,
    SELECT_HINTS,
)


@dataclass(frozen=True, slots=True)
class Hint:
    """Mutations kept for ``target``, written at ``created_ms``."""

    hint_id: int
    target: uuid.UUID
    created_ms: int
    mutations: tuple[Mutation, ...]


def store_hint(
    connection: sqlite3.Connection,
    limits: StoreLimits,
    target: uuid.UUID,
    mutations: Sequence[Mutation],
    created_ms: int,
) -> int:
    """Queue ``mutations`` for ``target``; returns the hint id. Call inside a transaction."""
    if not isinstance(target, uuid.UUID):
        raise InvalidRequest(f"hint target must be a uuid.UUID, got {target!r}")
    if not mutations:
        raise InvalidRequest("a hint needs at least one mutation")
    if type(created_ms) is not int or created_ms < 0:
        raise InvalidRequest(f"hint created_ms must be a non-negative int, got {created_ms!r}")
    for mutation in mutations:
        size_bytes = mutation_size(mutation).size_bytes
        if size_bytes > limits.max_mutation_size_bytes:
            raise MutationTooLarge(
                f"hinted mutation of {size_bytes} bytes exceeds the limit of "
                f"{limits.max_mutation_size_bytes} bytes"
            )
    payload = encode_mutations(mutations)
    (count,) = connection.execute(COUNT_HINTS, (target.bytes,)).fetchone()
    if count >= limits.max_hints_per_target:
        raise HintBacklogFull(
            f"host {target} has {count} hints queued, the limit is {limits.max_hints_per_target}"
        )
    (hint_id,) = connection.execute(INSERT_HINT, (target.bytes, created_ms, payload)).fetchone()
    return int(hint_id)


def hints_for(
    connection: sqlite3.Connection, limits: StoreLimits, target: uuid.UUID, limit: int
) -> list[Hint]:
    """The oldest ``limit`` hints for ``target`` (at most ``max_hints_per_fetch``)."""
    if type(limit) is not int or not 0 < limit <= limits.max_hints_per_fetch:
        raise InvalidRequest(
            f"hint fetch limit must be in 1..{limits.max_hints_per_fetch}, got {limit!r}"
        )
    rows = connection.execute(SELECT_HINTS, (target.bytes, limit)).fetchall()
    return [
        Hint(int(hint_id), target, int(created_ms), tuple(decode_mutations(payload)))
        for hint_id, created_ms, payload in rows
    ]


def delete_hint(connection: sqlite3.Connection, hint_id: int) -> bool:
    """Forget a delivered hint; False if it was not there."""
    return connection.execute(DELETE_HINT, (hint_id,)).rowcount > 0


def hint_targets(connection: sqlite3.Connection) -> list[uuid.UUID]:
    """Every host with at least one hint queued."""
    return [uuid.UUID(bytes=row[0]) for row in connection.execute(SELECT_HINT_TARGETS)]
