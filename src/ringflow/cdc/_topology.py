"""Topology descriptions: how a CDC generation maps every token of the ring to a stream.

Implements ``shared/reference/scylla-cdc.md`` §2 (data model, range semantics) and §4 step 7
(entry lookup), seed 000 "The generation's mapping". Entries are sorted by ``range_end``; entry i
covers ``(entries[i-1].range_end, entries[i].range_end]`` and entry 0 covers the wrap-around
``(entries[-1].range_end, entries[0].range_end]``. A token in entry i maps to
``streams[shard_of(token, len(streams), sharding_ignore_msb)]``.

A generation of a 100-node x 256-vnode x 64-shard cluster holds 1.6 M streams, so the
description is stored column-wise in read-only numpy arrays (range ends, shard counts, ignore_msb,
stream offsets, stream tokens and low qwords). ``StreamId`` and ``TokenRangeDescription`` objects
are built on demand. Lookups exist in two forms that must agree: :meth:`stream_for` (one token)
and :meth:`streams_for` (a numpy array of tokens, returning flat stream indices).

Tokens given to lookups are key tokens: INT64_MIN is normalised to INT64_MAX, as Scylla's
``dht::token(int64)`` does for partition keys.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ringflow.cdc._errors import CdcArgumentError, InvalidTopologyDescription
from ringflow.cdc._stream_id import STREAM_ID_SIZE, StreamId
from ringflow.cdc._vector_sharder import (
    Int64Array,
    UInt64Array,
    unbias_array,
    zero_based_shard_of_array,
)
from ringflow.errors import invariant
from ringflow.ring import AFTER_ALL_KEYS, MAX_TOKEN, MIN_TOKEN

MAX_SHARD_COUNT = 2**16
MAX_IGNORE_MSB = 63
_LINEAR_PROBES_MAX = 8
_BUCKET_BITS_MAX = 18
_TOKEN_BIAS = 2**63
_MASK64 = 2**64 - 1
_ScalarLookup = tuple[list[int], list[int], int, list[tuple[int, int, int]]]


def key_token(token: object) -> int:
    """Validate a partition token (int64) and normalise INT64_MIN to INT64_MAX."""
    if isinstance(token, np.integer):
        token = int(token)
    if not isinstance(token, int) or isinstance(token, bool):
        raise CdcArgumentError(f"token must be an int, got {token!r}")
    if not MIN_TOKEN <= token <= MAX_TOKEN:
        raise CdcArgumentError(f"token {token} is outside the int64 range")
    return MAX_TOKEN if token == MIN_TOKEN else token


def check_range_end(range_end: object) -> int:
    """A range end is a key token: an int in [INT64_MIN + 1, INT64_MAX]."""
    if not isinstance(range_end, int) or isinstance(range_end, bool):
        raise InvalidTopologyDescription(f"range_end must be an int, got {range_end!r}")
    if not MIN_TOKEN < range_end <= MAX_TOKEN:
        raise InvalidTopologyDescription(
            f"range_end {range_end} is not a key token (INT64_MIN + 1 .. INT64_MAX)"
        )
    return range_end


def check_shard_parameters(shard_count: object, ignore_msb: object, where: str) -> None:
    """1 <= shard_count <= 65536, 0 <= ignore_msb <= 63, and every shard owns some token.

    The last rule, ``shard_count <= 2**(64 - ignore_msb)``, excludes parameters under which
    the sharder's shard-start table does not exist (the pattern repeats every
    ``2**(64 - ignore_msb)`` tokens, too few to give each shard one).
    """
    for name, value, highest, lowest in (
        ("shard count", shard_count, MAX_SHARD_COUNT, 1),
        ("ignore_msb", ignore_msb, MAX_IGNORE_MSB, 0),
    ):
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            raise InvalidTopologyDescription(f"{name} of {where} must be an int, got {value!r}")
        if not lowest <= value <= highest:
            raise InvalidTopologyDescription(
                f"{name} of {where} must be in {lowest}..{highest}, got {value}"
            )
    if int(shard_count) > 2 ** (64 - int(ignore_msb)):  # type: ignore[call-overload]
        raise InvalidTopologyDescription(
            f"{where}: {shard_count} shards cannot all own tokens with ignore_msb {ignore_msb}"
        )


@dataclass(frozen=True, slots=True)
class TokenRangeDescription:
    """One entry: the range ending at ``range_end`` and its streams, ``streams[j]`` for shard j."""

    range_end: int
    streams: tuple[StreamId, ...]
    sharding_ignore_msb: int

    def __post_init__(self) -> None:
        check_range_end(self.range_end)
        if not isinstance(self.streams, tuple) or not all(
            isinstance(stream, StreamId) for stream in self.streams
        ):
            raise InvalidTopologyDescription(
                f"streams of range {self.range_end} must be a tuple of StreamId"
            )
        where = f"range {self.range_end}"
        check_shard_parameters(len(self.streams), self.sharding_ignore_msb, where)


class TopologyDescription:
    """A generation's token -> stream mapping (Scylla ``cdc::topology_description``).

    ``TopologyDescription(entries)`` sorts the entries by range end; duplicate range ends and an
    empty description are rejected. Immutable; equality compares content.
    """

    __slots__ = (
        "_counts_list",
        "_entries",
        "_entry_parameters",
        "_ignore_msbs",
        "_lookup_table",
        "_msbs_list",
        "_offsets_list",
        "_range_ends",
        "_range_ends_list",
        "_scalar_lookup",
        "_shard_counts",
        "_stream_blob",
        "_stream_cache",
        "_stream_lows",
        "_stream_offsets",
        "_stream_tokens",
        "_uniform_sharding",
    )

    _range_ends: Int64Array
    _shard_counts: Int64Array
    _ignore_msbs: Int64Array
    _stream_offsets: Int64Array
    _stream_tokens: Int64Array
    _stream_lows: UInt64Array

    def __init__(self, entries: Iterable[TokenRangeDescription]) -> None:
        ordered = sorted(entries, key=lambda entry: entry.range_end)
        if not all(isinstance(entry, TokenRangeDescription) for entry in ordered):
            raise InvalidTopologyDescription("entries must be TokenRangeDescription values")
        streams = [stream.value for entry in ordered for stream in entry.streams]
        raw = np.frombuffer(b"".join(streams), dtype=">u8").reshape(-1, 2)
        self._set_arrays(
            range_ends=np.array([entry.range_end for entry in ordered], dtype=np.int64),
            shard_counts=np.array([len(entry.streams) for entry in ordered], dtype=np.int64),
            ignore_msbs=np.array([entry.sharding_ignore_msb for entry in ordered], dtype=np.int64),
            stream_tokens=raw[:, 0].astype(np.uint64).view(np.int64),
            stream_lows=raw[:, 1].astype(np.uint64),
        )

    @classmethod
    def from_arrays(
        cls,
        *,
        range_ends: npt.ArrayLike,
        shard_counts: npt.ArrayLike,
        ignore_msbs: npt.ArrayLike,
        stream_tokens: npt.ArrayLike,
        stream_lows: npt.ArrayLike,
    ) -> TopologyDescription:
        """Build from columns; entry i owns ``shard_counts[i]`` consecutive streams, shard order."""
        description = cls.__new__(cls)
        description._set_arrays(
            range_ends=np.asarray(range_ends, dtype=np.int64),
            shard_counts=np.asarray(shard_counts, dtype=np.int64),
            ignore_msbs=np.asarray(ignore_msbs, dtype=np.int64),
            stream_tokens=np.asarray(stream_tokens, dtype=np.int64),
            stream_lows=np.asarray(stream_lows, dtype=np.uint64),
        )
        return description

    def _set_arrays(
        self,
        *,
        range_ends: Int64Array,
        shard_counts: Int64Array,
        ignore_msbs: Int64Array,
        stream_tokens: Int64Array,
        stream_lows: UInt64Array,
    ) -> None:
        _check_columns(range_ends, shard_counts, ignore_msbs, stream_tokens, stream_lows)
        offsets = np.zeros(len(range_ends) + 1, dtype=np.int64)
        np.cumsum(shard_counts, out=offsets[1:])
        for array in (range_ends, shard_counts, ignore_msbs, offsets, stream_tokens, stream_lows):
            array.flags.writeable = False
        self._range_ends = range_ends
        self._shard_counts = shard_counts
        self._ignore_msbs = ignore_msbs
        self._stream_offsets = offsets
        self._stream_tokens = stream_tokens
        self._stream_lows = stream_lows
        self._range_ends_list: list[int] = range_ends.tolist()
        self._counts_list: list[int] = shard_counts.tolist()
        self._msbs_list: list[int] = ignore_msbs.tolist()
        self._offsets_list: list[int] = offsets.tolist()
        self._stream_cache: list[StreamId | None] | None = None
        self._stream_blob = b""
        self._entries: tuple[TokenRangeDescription, ...] | None = None
        self._lookup_table: tuple[UInt64Array, Int64Array, np.uint64] | None = None
        self._scalar_lookup: _ScalarLookup | None = None
        self._entry_parameters: list[tuple[int, int, int]] = list(
            zip(self._offsets_list, self._counts_list, self._msbs_list, strict=False)
        )
        self._uniform_sharding: tuple[int, int] | None = None
        if len(set(self._counts_list)) == 1 and len(set(self._msbs_list)) == 1:
            self._uniform_sharding = (self._counts_list[0], self._msbs_list[0])

    # -- columns -------------------------------------------------------------------------------

    @property
    def range_ends(self) -> Int64Array:
        """Sorted range ends (read-only)."""
        return self._range_ends

    @property
    def shard_counts(self) -> Int64Array:
        """Number of streams of each entry (read-only)."""
        return self._shard_counts

    @property
    def ignore_msbs(self) -> Int64Array:
        """``sharding_ignore_msb`` of each entry (read-only)."""
        return self._ignore_msbs

    @property
    def stream_offsets(self) -> Int64Array:
        """Entry i's streams are flat indices ``stream_offsets[i]:stream_offsets[i+1]``."""
        return self._stream_offsets

    @property
    def stream_tokens(self) -> Int64Array:
        """Token of every stream, flat, entry by entry, in shard order (read-only)."""
        return self._stream_tokens

    @property
    def stream_lows(self) -> UInt64Array:
        """Low qword of every stream, flat (read-only)."""
        return self._stream_lows

    @property
    def stream_count(self) -> int:
        return len(self._stream_tokens)

    def stream_bytes(self, flat_indices: npt.ArrayLike | None = None) -> npt.NDArray[np.uint8]:
        """The 16-byte ids of the given streams (all by default) as a ``(k, 16)`` uint8 array."""
        tokens = self._stream_tokens
        lows = self._stream_lows
        if flat_indices is not None:
            chosen = np.asarray(flat_indices, dtype=np.int64)
            tokens, lows = tokens[chosen], lows[chosen]
        matrix = np.empty((len(tokens), STREAM_ID_SIZE), dtype=np.uint8)
        matrix[:, :8] = tokens.astype(">i8").view(np.uint8).reshape(-1, 8)
        matrix[:, 8:] = lows.astype(">u8").view(np.uint8).reshape(-1, 8)
        return matrix

    # -- objects -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._range_ends_list)

    def __iter__(self) -> Iterator[TokenRangeDescription]:
        return iter(self.entries)

    @property
    def entries(self) -> tuple[TokenRangeDescription, ...]:
        """All entries as objects (built once, on first use)."""
        if self._entries is None:
            self._entries = tuple(self.entry(index) for index in range(len(self)))
        return self._entries

    def entry(self, index: int) -> TokenRangeDescription:
        return TokenRangeDescription(
            range_end=self._range_ends_list[index],
            streams=self.streams_of_entry(index),
            sharding_ignore_msb=self._msbs_list[index],
        )

    def streams_of_entry(self, index: int) -> tuple[StreamId, ...]:
        start, stop = self._offsets_list[index], self._offsets_list[index + 1]
        return tuple(self.stream_at(flat) for flat in range(start, stop))

    def stream_at(self, flat_index: int) -> StreamId:
        """The stream at a flat index (as returned by :meth:`streams_for`), built once."""
        cache = self._stream_cache
        if cache is None:
            cache = self._stream_cache = [None] * self.stream_count
            self._stream_blob = self.stream_bytes().tobytes()
        stream = cache[flat_index]
        if stream is None:
            start = STREAM_ID_SIZE * flat_index
            stream = StreamId._trusted(self._stream_blob[start : start + STREAM_ID_SIZE])
            cache[flat_index] = stream
        return stream

    def all_streams(self) -> Iterator[StreamId]:
        """Every stream of the generation, entry by entry, in shard order."""
        return (self.stream_at(flat) for flat in range(self.stream_count))

    # -- lookups -------------------------------------------------------------------------------

    def entry_index_for(self, token: int) -> int:
        """Index of the entry whose range contains ``token`` (past the last end: entry 0)."""
        index = bisect_left(self._range_ends_list, key_token(token))
        return 0 if index == len(self._range_ends_list) else index

    def stream_index_for(self, token: int) -> int:
        """Flat index of the stream ``token`` maps to (the hot path of every CDC write).

        Entry by bucket table + bisect within the bucket, then Scylla's shard formula inline
        (``zero_based_shard_of`` of ``ringflow.ring``; parameters were validated on
        construction, and the tests check both agree).
        """
        if type(token) is not int or not MIN_TOKEN < token <= MAX_TOKEN:
            token = key_token(token)
        position = token + _TOKEN_BIAS
        ends, first, shift, parameters = self._scalar_lookup or self._build_scalar_lookup()
        bucket = position >> shift
        index = first[bucket]
        if ends[index] < token:
            index = bisect_left(ends, token, index + 1, first[bucket + 1])
        offset, shard_count, ignore_msb = parameters[index]
        return offset + ((((position << ignore_msb) & _MASK64) * shard_count) >> 64)

    def stream_for(self, token: int) -> StreamId:
        """The stream of ``token`` (§4 step 7): entry by range, then stream by shard."""
        return self.stream_at(self.stream_index_for(token))

    def entry_indices_for(self, tokens: npt.ArrayLike) -> Int64Array:
        """Vectorised :meth:`entry_index_for`."""
        return self._entry_indices_for_positions(_key_positions(tokens))

    def streams_for(self, tokens: npt.ArrayLike) -> Int64Array:
        """Vectorised :meth:`stream_index_for`: flat stream indices, one per token.

        Use :meth:`stream_at`, :meth:`stream_bytes` or :attr:`stream_tokens` on the result.
        """
        positions = _key_positions(tokens)
        entries = self._entry_indices_for_positions(positions)
        if self._uniform_sharding is not None:
            shard_count, ignore_msb = self._uniform_sharding
            shards = zero_based_shard_of_array(positions, shard_count, ignore_msb)
        else:
            shards = zero_based_shard_of_array(
                positions,
                self._shard_counts.view(np.uint64)[entries],
                self._ignore_msbs.view(np.uint64)[entries],
            )
        flat = shards.view(np.int64)
        flat += self._stream_offsets[entries]
        return flat

    def _entry_indices_for_positions(self, positions: UInt64Array) -> Int64Array:
        """Lower bound of each position among the range ends, via a bucket table.

        ``np.searchsorted`` alone costs ~120 ns per random query on 25 600 ends; a table of the
        first entry per top-bits bucket, followed by a few linear probes, is several times faster.
        """
        ends, first, shift = self._lookup()
        indices: Int64Array = first[positions >> shift]
        active = np.flatnonzero(ends[indices] < positions)
        for _ in range(_LINEAR_PROBES_MAX):
            if active.size == 0:
                break
            indices[active] += 1
            active = active[ends[indices[active]] < positions[active]]
        if active.size:
            indices[active] = np.searchsorted(ends[:-1], positions[active], side="left")
        indices[indices == len(self)] = 0
        return indices

    def _build_scalar_lookup(self) -> _ScalarLookup:
        """Python-list twin of :meth:`_lookup` for one-token lookups.

        Ends are padded with AFTER_ALL_KEYS and the entry parameters with a copy of entry 0,
        so a token past the last end lands on the wrap-around entry without a branch.
        """
        _, first, shift = self._lookup()
        self._scalar_lookup = (
            [*self._range_ends_list, AFTER_ALL_KEYS],
            [*first.tolist(), len(self)],
            int(shift),
            [*self._entry_parameters, self._entry_parameters[0]],
        )
        return self._scalar_lookup

    def _lookup(self) -> tuple[UInt64Array, Int64Array, np.uint64]:
        """Range-end positions padded with 2**64-1, and the first entry of each bucket."""
        if self._lookup_table is None:
            ends = np.append(unbias_array(self._range_ends), np.uint64(2**64 - 1))
            bits = min(_BUCKET_BITS_MAX, max(1, len(self).bit_length() + 2))
            shift = np.uint64(64 - bits)
            bucket_starts = np.arange(2**bits, dtype=np.uint64) << shift
            first = np.searchsorted(ends[:-1], bucket_starts, side="left").astype(np.int64)
            self._lookup_table = (ends, first, shift)
        return self._lookup_table

    # -- values --------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopologyDescription):
            return NotImplemented
        return all(
            np.array_equal(mine, theirs)
            for mine, theirs in zip(self._columns(), other._columns(), strict=True)
        )

    __hash__ = None  # type: ignore[assignment]

    def _columns(self) -> Sequence[npt.NDArray[np.generic]]:
        return (
            self._range_ends,
            self._shard_counts,
            self._ignore_msbs,
            self._stream_tokens,
            self._stream_lows,
        )

    def __repr__(self) -> str:
        return f"TopologyDescription({len(self)} ranges, {self.stream_count} streams)"

    def validate(self) -> None:
        """Check the structural invariants; raises InternalError on a broken one."""
        invariant(len(self) > 0, "a topology description has at least one entry")
        ends = self._range_ends
        invariant(bool(np.all(ends[1:] > ends[:-1])), "range ends strictly increase")
        invariant(int(self._stream_offsets[-1]) == self.stream_count, "offsets cover the streams")
        invariant(len(self._stream_lows) == self.stream_count, "one low qword per stream token")


def _check_columns(
    range_ends: Int64Array,
    shard_counts: Int64Array,
    ignore_msbs: Int64Array,
    stream_tokens: Int64Array,
    stream_lows: UInt64Array,
) -> None:
    if range_ends.ndim != 1 or len(range_ends) == 0:
        raise InvalidTopologyDescription("a topology description needs at least one range")
    if not len(range_ends) == len(shard_counts) == len(ignore_msbs):
        raise InvalidTopologyDescription("range ends, shard counts and ignore_msb differ in size")
    out_of_order = np.flatnonzero(range_ends[1:] <= range_ends[:-1])
    if out_of_order.size:
        position = int(out_of_order[0])
        raise InvalidTopologyDescription(
            f"range ends must be unique and sorted; {int(range_ends[position + 1])} follows "
            f"{int(range_ends[position])}"
        )
    if int(range_ends[0]) == MIN_TOKEN:
        raise InvalidTopologyDescription("range_end INT64_MIN is not a key token")
    if np.any((shard_counts < 1) | (shard_counts > MAX_SHARD_COUNT)):
        raise InvalidTopologyDescription(f"shard counts must be in 1..{MAX_SHARD_COUNT}")
    if np.any((ignore_msbs < 0) | (ignore_msbs > MAX_IGNORE_MSB)):
        raise InvalidTopologyDescription(f"ignore_msb must be in 0..{MAX_IGNORE_MSB}")
    if np.any(np.log2(shard_counts) > 64 - ignore_msbs):
        raise InvalidTopologyDescription("some shard owns no token: shard_count > 2**(64 - msb)")
    if not len(stream_tokens) == len(stream_lows) == int(shard_counts.sum()):
        raise InvalidTopologyDescription("stream columns must hold sum(shard_counts) streams")


def _key_positions(tokens: npt.ArrayLike) -> UInt64Array:
    """Unsigned positions of key tokens; INT64_MIN is normalised to INT64_MAX first."""
    array = np.asarray(tokens)
    if array.dtype != np.int64:
        if array.dtype.kind not in "iu" or not np.can_cast(array.dtype, np.int64):
            raise CdcArgumentError(f"tokens must be an int64 array, got dtype {array.dtype}")
        array = array.astype(np.int64)
    positions = unbias_array(array.ravel())
    positions[positions == 0] = np.uint64(2**64 - 1)
    return positions
