"""``CdcMetadata``: the generations a node knows, and the stream every CDC write goes to.

Implements ``shared/reference/scylla-cdc.md`` §4 (Scylla ``cdc/metadata.{hh,cc}``,
``get_vnode_stream``, ``prepare``, ``insert``, ``known_or_obsolete``, ``streams_available``) and
§2 "Generation timestamp"; seed 000 "Generation switching".

Units: generation timestamps arrive in milliseconds (CQL ``timestamp``, gossip ids) and are kept
in microseconds, the unit of write timestamps; ``generation_ms * 1000`` is compared with write
``timestamp_us`` exactly as Scylla does. The clock is always a parameter (``now_us``).

Acceptance rules of :meth:`CdcMetadata.get_stream`, in Scylla's order (W = write timestamp,
C = now, L = leeway, default 5 s); each failure has its own exception class:

1. ``W > C + L``: :class:`WriteFromTheFuture` (``W == C + L`` is accepted, as the code has it; the
   design text's half-open ``[T, C + L)`` is one microsecond stricter).
2. Forget every generation older than the one operating at ``C - L`` (GC).
3. ``W <= C - L`` is accepted only into the generation still operating at ``C``, else
   :class:`WriteTooFarInThePast`. Writes within the last ``L`` may still go to the previous
   generation (Scylla PR #17134, issue #7251: LWT retries must not get stuck).
4. No generation starts at or before ``W``: :class:`NoGenerationForTimestamp`.
5. The generation operating at ``W`` is used, even one starting in the near future.
6. That generation is only prepared (data not loaded): :class:`GenerationNotLoaded`.

Before rule 1, a node that has not yet heard the cluster's generations since it started
(``hold_writes``, released by ``release_writes``) refuses every CDC write with
:class:`GenerationsNotLearnt`: a generation may have begun while it was down, and it would route
writes made after that start to the previous generation's streams, which a consumer reading
generation by generation never finds there (issue 22, topology seed 70). Scylla's nodes wait for
gossip to settle before serving clients for the same reason (Cassandra ``waitToSettle``).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from ringflow.cdc._errors import (
    CdcArgumentError,
    GenerationNotLoaded,
    GenerationsNotLearnt,
    NoGenerationForTimestamp,
    WriteFromTheFuture,
    WriteTooFarInThePast,
)
from ringflow.cdc._stream_id import StreamId
from ringflow.cdc._topology import TopologyDescription, key_token
from ringflow.errors import invariant

DEFAULT_LEEWAY_US = 5_000_000
DEFAULT_RING_DELAY_MS = 30_000
DEFAULT_GENERATION_LEEWAY_MS = 5_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def new_generation_timestamp(
    now_ms: int,
    ring_delay_ms: int = DEFAULT_RING_DELAY_MS,
    leeway_ms: int = DEFAULT_GENERATION_LEEWAY_MS,
) -> int:
    """Timestamp (ms) for a generation created now: ``now + 2 * ring_delay + leeway``.

    With the defaults, now + 65 s. As in Scylla's ``new_generation_timestamp``, a ring delay of
    0 (test clusters) means no delay at all: the generation starts now.
    """
    _check_int("now_ms", now_ms)
    _check_int("ring_delay_ms", ring_delay_ms)
    _check_int("leeway_ms", leeway_ms)
    if ring_delay_ms < 0 or leeway_ms < 0:
        raise CdcArgumentError(f"delays must be >= 0, got {ring_delay_ms=} {leeway_ms=}")
    if ring_delay_ms == 0:
        return now_ms
    return now_ms + 2 * ring_delay_ms + leeway_ms


def format_timestamp_us(timestamp_us: int) -> str:
    """Readable form of a µs timestamp for messages: UTC date-time and the raw value."""
    try:
        moment = _EPOCH + timedelta(microseconds=timestamp_us)
    except OverflowError:
        return f"{timestamp_us} µs since epoch"
    return f"{moment:%Y-%m-%d %H:%M:%S.%f} UTC ({timestamp_us} µs)"


def _check_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise CdcArgumentError(f"{name} must be an int, got {value!r}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise CdcArgumentError(f"{name} {value} is outside int64")
    return value


class CdcMetadata:
    """Known generations by start time; picks the stream of each CDC write (§4).

    A generation is *loaded* (its description is here) or only *prepared* (its timestamp is
    known from gossip but its description could not be read yet).
    """

    __slots__ = (
        "_descriptions",
        "_held_because",
        "_last_stream_timestamp_us",
        "_late_generation_count",
        "_leeway_us",
        "_timestamps_us",
    )

    def __init__(self, leeway_us: int = DEFAULT_LEEWAY_US) -> None:
        _check_int("leeway_us", leeway_us)
        if leeway_us < 0:
            raise CdcArgumentError(f"leeway_us must be >= 0, got {leeway_us}")
        self._leeway_us = leeway_us
        self._timestamps_us: list[int] = []
        self._descriptions: dict[int, TopologyDescription | None] = {}
        self._last_stream_timestamp_us: int | None = None
        self._late_generation_count = 0
        self._held_because: str | None = None

    # -- inspection ----------------------------------------------------------------------------

    @property
    def leeway_us(self) -> int:
        return self._leeway_us

    @property
    def generation_timestamps_us(self) -> tuple[int, ...]:
        """Start (µs) of every generation still kept, loaded or prepared, ascending."""
        return tuple(self._timestamps_us)

    def description_at(self, timestamp_ms: int) -> TopologyDescription | None:
        """The loaded description of the generation starting at ``timestamp_ms``, if any."""
        return self._descriptions.get(_to_us(timestamp_ms))

    @property
    def late_generation_count(self) -> int:
        """Generations prepared after a write had already been routed past their start.

        Scylla logs an error for each (a node learnt of a generation too late, e.g. during a
        network partition, so some writes went to the previous generation).
        """
        return self._late_generation_count

    @property
    def writes_held(self) -> bool:
        """Whether CDC writes are refused until the node has learnt the cluster's generations."""
        return self._held_because is not None

    def hold_writes(self, reason: str) -> None:
        """Refuse every CDC write with :class:`GenerationsNotLearnt` (saying ``reason``) until
        ``release_writes``: the node's generations may be behind the cluster's."""
        self._held_because = reason

    def release_writes(self) -> None:
        self._held_because = None

    # -- learning generations ------------------------------------------------------------------

    def known_or_obsolete(self, timestamp_ms: int, now_us: int) -> bool:
        """Whether the generation is loaded already, or superseded before ``now - leeway``."""
        timestamp_us = _to_us(timestamp_ms)
        if self._descriptions.get(timestamp_us) is not None:
            return True
        current = self._index_used_at(_check_int("now_us", now_us) - self._leeway_us)
        return current is not None and self._timestamps_us[current] > timestamp_us

    def prepare(self, timestamp_ms: int, now_us: int) -> bool:
        """Record a generation whose data is not loaded yet; True iff its data is still needed."""
        if self.known_or_obsolete(timestamp_ms, now_us):
            return False
        timestamp_us = _to_us(timestamp_ms)
        if timestamp_us not in self._descriptions:
            self._add(timestamp_us, None)
            last = self._last_stream_timestamp_us
            if last is not None and self._timestamp_used_at(last) == timestamp_us:
                self._late_generation_count += 1
        return self._descriptions[timestamp_us] is None

    def insert(self, timestamp_ms: int, description: TopologyDescription, now_us: int) -> bool:
        """Load a generation's description; False (no-op) if known already or obsolete."""
        if not isinstance(description, TopologyDescription):
            raise CdcArgumentError(f"description must be a TopologyDescription: {description!r}")
        if self.known_or_obsolete(timestamp_ms, now_us):
            return False
        self._collect_garbage(now_us)
        timestamp_us = _to_us(timestamp_ms)
        if timestamp_us in self._descriptions:
            self._descriptions[timestamp_us] = description
        else:
            self._add(timestamp_us, description)
        return True

    def streams_available(self, now_us: int) -> bool:
        """Whether some known generation (loaded or prepared) operates at ``now_us``."""
        return self._index_used_at(_check_int("now_us", now_us)) is not None

    # -- writes --------------------------------------------------------------------------------

    def get_stream(self, write_timestamp_us: int, token: int, now_us: int) -> StreamId:
        """The stream for a base write at ``write_timestamp_us`` of partition ``token``."""
        token = key_token(token)
        return self.description_for_write(write_timestamp_us, now_us).stream_for(token)

    def description_for_write(self, write_timestamp_us: int, now_us: int) -> TopologyDescription:
        """Rules 1-6 of :meth:`get_stream`: the description a write at this time must use.

        For bulk routing: call it once, then ``streams_for`` on many tokens of that timestamp.
        """
        _check_int("write_timestamp_us", write_timestamp_us)
        _check_int("now_us", now_us)
        if self._held_because is not None:
            raise GenerationsNotLearnt(
                f"cdc: this node cannot route CDC writes yet: {self._held_because}; "
                "retry on another node or in a moment"
            )
        if write_timestamp_us > now_us + self._leeway_us:
            raise WriteFromTheFuture(
                self._future_message(write_timestamp_us, now_us),
                write_timestamp_us=write_timestamp_us,
                now_us=now_us,
            )
        self._collect_garbage(now_us)
        if write_timestamp_us <= now_us - self._leeway_us:
            self._check_past_write(write_timestamp_us, now_us)
        used = self._index_used_at(write_timestamp_us)
        if used is None:
            raise NoGenerationForTimestamp(
                self._no_generation_message(write_timestamp_us, now_us),
                write_timestamp_us=write_timestamp_us,
                now_us=now_us,
            )
        generation_us = self._timestamps_us[used]
        description = self._descriptions[generation_us]
        if description is None:
            raise GenerationNotLoaded(
                "cdc: attempted to get a stream from a generation that we know about but could "
                f"not load (generation timestamp: {format_timestamp_us(generation_us)}; write "
                f"timestamp: {format_timestamp_us(write_timestamp_us)}). The write is rejected "
                "to keep base and log colocated; retry once the generation data is readable.",
                write_timestamp_us=write_timestamp_us,
                now_us=now_us,
                generation_timestamp_us=generation_us,
            )
        self._last_stream_timestamp_us = write_timestamp_us
        return description

    def _check_past_write(self, write_timestamp_us: int, now_us: int) -> None:
        """Rule 3: a write at or before now - leeway must fall into the generation of now."""
        current = self._index_used_at(now_us - self._leeway_us)
        if current is not None:
            start_us = self._timestamps_us[current]
            following = current + 1
            superseded = (
                following < len(self._timestamps_us) and self._timestamps_us[following] <= now_us
            )
            if write_timestamp_us >= start_us and not superseded:
                return
        raise WriteTooFarInThePast(
            self._past_message(write_timestamp_us, now_us),
            write_timestamp_us=write_timestamp_us,
            now_us=now_us,
        )

    # -- messages ------------------------------------------------------------------------------

    def _future_message(self, write_timestamp_us: int, now_us: int) -> str:
        return (
            'cdc: attempted to get a stream "from the future" (write timestamp: '
            f"{format_timestamp_us(write_timestamp_us)}; current server time: "
            f"{format_timestamp_us(now_us)}; leeway: {self._leeway_us} µs). With CDC, writes "
            "may not carry timestamps further into the future than the leeway, because the "
            "streams of that time are not known yet. If you must use client-side timestamps, "
            "keep the clients' clocks synchronised with the cluster's."
        )

    def _past_message(self, write_timestamp_us: int, now_us: int) -> str:
        current = self._index_used_at(now_us)
        operating = (
            format_timestamp_us(self._timestamps_us[current]) if current is not None else "none"
        )
        return (
            'cdc: attempted to get a stream "from the past" (write timestamp: '
            f"{format_timestamp_us(write_timestamp_us)}; current server time: "
            f"{format_timestamp_us(now_us)}; generation operating now started at: {operating}; "
            f"leeway: {self._leeway_us} µs). With CDC, a write older than the leeway is accepted "
            "only into the generation operating now, because an older generation's streams may "
            "no longer be colocated with the base data."
        )

    def _no_generation_message(self, write_timestamp_us: int, now_us: int) -> str:
        earliest = (
            format_timestamp_us(self._timestamps_us[0]) if self._timestamps_us else "none known"
        )
        return (
            "cdc: could not find any CDC stream for timestamp "
            f"{format_timestamp_us(write_timestamp_us)} (earliest generation: {earliest}; "
            f"current server time: {format_timestamp_us(now_us)}). Are we in the middle of a "
            "cluster upgrade, or has the first CDC generation not started yet?"
        )

    # -- internals -----------------------------------------------------------------------------

    def _index_used_at(self, timestamp_us: int) -> int | None:
        """Index of the last generation starting at or before ``timestamp_us``."""
        index = bisect_right(self._timestamps_us, timestamp_us) - 1
        return index if index >= 0 else None

    def _timestamp_used_at(self, timestamp_us: int) -> int | None:
        index = self._index_used_at(timestamp_us)
        return None if index is None else self._timestamps_us[index]

    def _collect_garbage(self, now_us: int) -> None:
        """Forget generations older than the one operating at ``now - leeway`` (§4 step 2)."""
        current = self._index_used_at(now_us - self._leeway_us)
        if current:
            for timestamp_us in self._timestamps_us[:current]:
                del self._descriptions[timestamp_us]
            del self._timestamps_us[:current]

    def _add(self, timestamp_us: int, description: TopologyDescription | None) -> None:
        insort(self._timestamps_us, timestamp_us)
        self._descriptions[timestamp_us] = description

    def validate(self) -> None:
        """Check the invariants; raises InternalError on a broken one."""
        keys = self._timestamps_us
        invariant(all(a < b for a, b in pairwise(keys)), "sorted, unique")
        invariant(set(keys) == set(self._descriptions), "timestamps and descriptions agree")
        invariant(self._leeway_us >= 0, "leeway is not negative")


def _to_us(timestamp_ms: int) -> int:
    return _check_int("timestamp_ms", timestamp_ms) * 1000
