"""Triage: the time slice a captured row goes to, and when a slice is due to seal. Pure.

Seed 002 "Time slice separation" / "Time slice buckets" (``shared/reference/
replication-and-repair.md`` §1.2, §1.6; ``shared/design/REPLICATION.md`` decisions 1-2). A row is
triaged once, when it arrives at a replica, by its write timestamp (the log row's ``cdc$time``,
which is the base write's timestamp: the same on every replica) and the node's clock at arrival:

* **Slice start** of a timestamp: ``floor(ts_ms / width) * width``.
* **In sequence**: a row that came through the write path (origin WRITE or HINT) goes to the
  slice of its timestamp while that slice is still open, i.e. iff ``slice_start + window_ms >
  now_ms`` (``window_ms = slice_count * width``). A row from the future (clock skew, a client
  timestamp) goes to its own slice: it is open by the same rule.
* **Out of sequence**: every other row, and always a row that came by streaming or repair, goes
  to the *out-of-sequence* bucket of its arrival time (the slice start of ``now_ms``). Seed 002
  sends such rows from every replica that holds them.
* **Due to seal**: an in-sequence slice at ``slice_start + window_ms`` by the node's clock (so an
  idle table still seals), an out-of-sequence bucket at ``slice_start + width``. A slice's due
  time depends on its key alone, and a row is only ever placed in a slice that is not due yet at
  its arrival (``Placement.due_ms > now_ms``): no row can enter a slice after it was due, so a
  node that seals every due slice never has to reopen one.

Because in-sequence placement depends only on the timestamp (given the settings), two replicas
that receive the same row while its slice is open put it in the same slice, whatever order the
rows come in: their slices hold the same rows and their digests match (seed 002 "Comparing Time
slices"). The seed's own rule ("the current mutation that we are ingesting is 5 minutes later")
seals by the newest timestamp seen; sealing by the clock instead seals idle tables too and makes
every replica close a slice at the same moment.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from ringflow.replication._model import Origin, ReplicationArgumentError, SliceSettings

IN_SEQUENCE_ORIGINS: Final = frozenset({Origin.WRITE, Origin.HINT})
"""Origins whose rows may go in sequence; STREAM and REPAIR rows are always out of sequence."""


class Placement(NamedTuple):
    """Where a row goes: the slice's start, whether it is an out-of-sequence bucket, and when
    that slice is due to seal (always after the row's arrival)."""

    slice_start_ms: int
    out_of_sequence: bool
    due_ms: int


def slice_start_ms(timestamp_ms: int, settings: SliceSettings) -> int:
    """The start of the slice holding ``timestamp_ms``: a multiple of the slice width."""
    width_ms = settings.slice_width_ms
    return timestamp_ms // width_ms * width_ms


def due_ms(slice_start: int, out_of_sequence: bool, settings: SliceSettings) -> int:
    """When a slice starting at ``slice_start`` is due to seal (module docstring)."""
    return slice_start + (settings.slice_width_ms if out_of_sequence else settings.window_ms)


def place(timestamp_ms: int, now_ms: int, origin: Origin, settings: SliceSettings) -> Placement:
    """The slice of a row with write timestamp ``timestamp_ms`` arriving at ``now_ms`` by
    ``origin`` (module docstring). Integers in milliseconds; no I/O."""
    if type(timestamp_ms) is not int or type(now_ms) is not int:
        raise ReplicationArgumentError(
            f"timestamp_ms and now_ms must be ints, got {timestamp_ms!r} and {now_ms!r}"
        )
    if now_ms < 0:
        raise ReplicationArgumentError(f"now_ms must be >= 0, got {now_ms}")
    width_ms = settings.slice_width_ms
    if origin in IN_SEQUENCE_ORIGINS:
        start = timestamp_ms // width_ms * width_ms
        due = start + settings.window_ms
        if due > now_ms:
            return Placement(start, False, due)
    elif not isinstance(origin, Origin):
        raise ReplicationArgumentError(f"origin must be an Origin, got {origin!r}")
    start = now_ms // width_ms * width_ms
    return Placement(start, True, start + width_ms)
