"""Hints: the durable queue of mutations a node keeps for a replica that was down.

Each hint is one row of the ``hints`` table: the target host id, the time it was created (ms),
and the mutations encoded with ``_mutation_codec`` (base and CDC log rows travel together, so a
replayed hint keeps "both writes or none", seed 000). Hints of one target come back oldest
first. The queue per target is bounded (``StoreLimits.max_hints_per_target``), and so is each
fetch (``max_hints_per_fetch``). Functions here take the store's connection; the store owns
locking and transactions.

A hint of a CDC-enabled table also keeps the mutations' ``CdcCapture``s (stream, ``cdc$time``
low bits, by mutation index), so the replica that replays it writes the same log rows the
coordinator chose; such payloads start with ``_CAPTURES_TAG`` (plain mutation payloads start
with the codec's version byte).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import msgpack

from ringflow.cdc import CdcCapture
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
    captures: tuple[tuple[int, CdcCapture], ...] = ()


_CAPTURES_TAG: Final = b"RFHC"


def _encode_payload(mutations: Sequence[Mutation], captures: Mapping[int, CdcCapture]) -> bytes:
    if not captures:
        return encode_mutations(mutations)
    pairs = [[i, *c.fields()] for i, c in sorted(captures.items())]
    packed: bytes = msgpack.packb([encode_mutations(mutations), pairs], use_bin_type=True)
    return _CAPTURES_TAG + packed


def _decode_payload(
    payload: bytes,
) -> tuple[tuple[Mutation, ...], tuple[tuple[int, CdcCapture], ...]]:
    if not payload.startswith(_CAPTURES_TAG):
        return tuple(decode_mutations(payload)), ()
    body, pairs = msgpack.unpackb(payload[len(_CAPTURES_TAG) :], raw=False)
    captures = tuple((int(i), CdcCapture.from_fields(fields)) for i, *fields in pairs)
    return tuple(decode_mutations(body)), captures


def store_hint(
    connection: sqlite3.Connection,
    limits: StoreLimits,
    target: uuid.UUID,
    mutations: Sequence[Mutation],
    created_ms: int,
    captures: Mapping[int, CdcCapture] | None = None,
) -> int:
    """Queue ``mutations`` (and their CDC ``captures`` by index) for ``target``; returns the
    hint id. Call inside a transaction."""
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
    captures = captures or {}
    if any(type(i) is not int or not 0 <= i < len(mutations) for i in captures):
        raise InvalidRequest(f"hint captures {sorted(captures)} do not index its mutations")
    payload = _encode_payload(mutations, captures)
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
    hints = []
    for hint_id, created_ms, payload in rows:
        mutations, captures = _decode_payload(payload)
        hints.append(Hint(int(hint_id), target, int(created_ms), mutations, captures))
    return hints


def delete_hint(connection: sqlite3.Connection, hint_id: int) -> bool:
    """Forget a delivered hint; False if it was not there."""
    return connection.execute(DELETE_HINT, (hint_id,)).rowcount > 0


def hint_targets(connection: sqlite3.Connection) -> list[uuid.UUID]:
    """Every host with at least one hint queued."""
    return [uuid.UUID(bytes=row[0]) for row in connection.execute(SELECT_HINT_TARGETS)]
