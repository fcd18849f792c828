"""Version-1 (time-based) UUIDs from microsecond timestamps, as CDC's ``cdc$time`` uses them.

Scylla's ``generate_timeuuid(ts)`` (reference scylla-cdc.md §5 "cdc$time"): the UUID's time is
the write timestamp in 100-ns units since 1582-10-15; the low 64 bits are random with the IETF
variant bits. The random part is passed in, never drawn here, so replicas and the simulator
agree. ``minTimeuuid``/``maxTimeuuid`` follow Cassandra's ``UUIDGen`` (lowest / highest low bits
under signed-byte comparison).
"""

from __future__ import annotations

import uuid

UUID_EPOCH_OFFSET_100NS = 0x01B21DD213814000
_LOW_MASK = 2**64 - 1
_VARIANT_MASK = 0x3FFF_FFFF_FFFF_FFFF
_VARIANT_BITS = 0x8000_0000_0000_0000
MIN_CLOCK_SEQ_AND_NODE = 0x8080808080808080
MAX_CLOCK_SEQ_AND_NODE = 0x7F7F7F7F7F7F7F7F


def timeuuid_from_micros(timestamp_us: int, low_bits: int) -> uuid.UUID:
    """A version-1 UUID whose time is ``timestamp_us`` and whose low 64 bits come from ``low_bits``.

    The IETF variant bits are forced into ``low_bits``.
    """
    return _make(timestamp_us * 10 + UUID_EPOCH_OFFSET_100NS, _with_variant(low_bits))


_VERSION_1_BITS = 1 << 76 | 0b10 << 62  # version nibble 1, IETF variant (bits 10)
_VERSION_AND_VARIANT_MASK = 0xF << 76 | 0b11 << 62


def timeuuid_to_micros(value: uuid.UUID) -> int:
    """The timestamp in µs since the Unix epoch carried by a version-1 UUID (``value.time``,
    read straight from the 128 bits: a source converts one per change)."""
    bits = value.int
    if bits & _VERSION_AND_VARIANT_MASK != _VERSION_1_BITS:
        raise ValueError(f"{value} is not a time-based (version 1) UUID")
    ticks = ((bits >> 64) & 0x0FFF) << 48 | ((bits >> 80) & 0xFFFF) << 32 | bits >> 96
    return (ticks - UUID_EPOCH_OFFSET_100NS) // 10


def min_timeuuid(timestamp_ms: int) -> uuid.UUID:
    """CQL ``minTimeuuid``: the smallest timeuuid at ``timestamp_ms`` (Cassandra ``UUIDGen``)."""
    return _make(timestamp_ms * 10_000 + UUID_EPOCH_OFFSET_100NS, MIN_CLOCK_SEQ_AND_NODE)


def max_timeuuid(timestamp_ms: int) -> uuid.UUID:
    """CQL ``maxTimeuuid``: the largest timeuuid within ``timestamp_ms`` (all 10,000 ticks)."""
    ticks = (timestamp_ms + 1) * 10_000 - 1 + UUID_EPOCH_OFFSET_100NS
    return _make(ticks, MAX_CLOCK_SEQ_AND_NODE)


def _with_variant(low_bits: int) -> int:
    return ((low_bits & _LOW_MASK) & _VARIANT_MASK) | _VARIANT_BITS


def _make(ticks_100ns: int, low_bits: int) -> uuid.UUID:
    if not 0 <= ticks_100ns < 2**60:
        raise ValueError(f"time {ticks_100ns} (100-ns ticks since 1582) is outside 60 bits")
    time_low = ticks_100ns & 0xFFFF_FFFF
    time_mid = (ticks_100ns >> 32) & 0xFFFF
    time_hi_and_version = ((ticks_100ns >> 48) & 0x0FFF) | 0x1000
    high = (time_low << 32) | (time_mid << 16) | time_hi_and_version
    return uuid.UUID(int=(high << 64) | (low_bits & _LOW_MASK))
