"""The pure core of ``ringflow diff``: row digests, per-range summaries, row differences.

Issue 17 part 2; the shape of apache/cassandra-diff (token-range splits compared one by one, a
per-range summary, mismatching keys listed), with a hash pass first so that only ranges that
differ are compared row by row (Merkle-style, as Cassandra's repair compares ranges by hash):

- A row is seen by its :class:`RowImage`: the canonical text of its primary key, of its live
  non-key values (``{column: value}``, nulls left out) and of its write timestamps (atomic
  columns only: a non-frozen collection has one timestamp per element, ``WRITETIME`` refuses
  it). Canonical text is deterministic across sources: sets sorted, maps sorted by key, floats
  by ``repr``, timestamps in UTC (:func:`canonical_text`).
- A row's digest is a 128-bit BLAKE2b of its three texts; a range's digest is the sum of its
  rows' digests modulo 2**128 with its row count (:class:`RangeSummary`). A sum is
  order-independent, merges across Spark partitions, and unlike XOR does not cancel a row seen
  twice. Spark sums it exactly as four 32-bit limbs in 64-bit columns (:func:`digest_limbs`,
  :func:`join_limb_sums`).
- Two rows with the same key differ in ``values`` (any value, or a column null on one side
  only) or, values equal, in ``writetime``; a key on the source only is ``missing`` (from the
  target), on the target only ``extra`` (:func:`classify`).
"""

from __future__ import annotations

import datetime
import decimal
import enum
import hashlib
import json
import math
import uuid
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ringflow.errors import invariant

DIGEST_BYTES = 16
DIGEST_MODULUS = 1 << (8 * DIGEST_BYTES)
LIMB_BITS = 32
LIMBS = 4
LIMB_MASK = (1 << LIMB_BITS) - 1
MAX_EXAMPLES = 10_000


def canonical_text(value: object) -> str:
    """A deterministic text of a codec value: equal values give equal texts, whatever the
    order their collections were built in (module docstring)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex()
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return "ts:" + value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID | datetime.date | datetime.time):
        return f"{type(value).__name__}:{value}"
    if isinstance(value, Mapping):
        items = sorted(f"{canonical_text(k)}: {canonical_text(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, set | frozenset):
        return "{" + ", ".join(sorted(canonical_text(v) for v in value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(canonical_text(v) for v in value) + "]"
    return f"{type(value).__name__}:{value!r}"


@dataclass(frozen=True, slots=True)
class RowImage:
    """What is compared of one row: the canonical texts of its key, values and write times."""

    key: str
    values: str
    write_times: str

    def digest(self) -> int:
        text = "\x00".join((self.key, self.values, self.write_times)).encode()
        return int.from_bytes(hashlib.blake2b(text, digest_size=DIGEST_BYTES).digest(), "big")


def row_image(
    key: Sequence[object], values: Mapping[str, object], write_times_us: Mapping[str, int]
) -> RowImage:
    """The image of a row: ``values`` without nulls, ``write_times_us`` of those columns."""
    live = {name: value for name, value in values.items() if value is not None}
    times = {name: int(t) for name, t in write_times_us.items() if name in live}
    return RowImage(canonical_text(tuple(key)), canonical_text(live), canonical_text(times))


def digest_limbs(digest: int) -> tuple[int, int, int, int]:
    """The 128-bit digest as four 32-bit limbs, least significant first (Spark sums them in
    64-bit columns without overflow up to 2**32 rows a range)."""
    invariant(0 <= digest < DIGEST_MODULUS, f"digest out of range: {digest}")
    return (
        digest & LIMB_MASK,
        (digest >> LIMB_BITS) & LIMB_MASK,
        (digest >> 2 * LIMB_BITS) & LIMB_MASK,
        digest >> 3 * LIMB_BITS,
    )


def join_limb_sums(sums: Sequence[int]) -> int:
    """The sum of digests modulo 2**128 from the sums of their limbs."""
    invariant(len(sums) == LIMBS, f"expected {LIMBS} limb sums, got {len(sums)}")
    return sum(int(s) << (i * LIMB_BITS) for i, s in enumerate(sums)) % DIGEST_MODULUS


@dataclass(frozen=True, slots=True)
class RangeSummary:
    """A range's row count and digest (sum of its rows' digests mod 2**128)."""

    rows: int = 0
    digest: int = 0

    def merge(self, other: RangeSummary) -> RangeSummary:
        return RangeSummary(self.rows + other.rows, (self.digest + other.digest) % DIGEST_MODULUS)


def summarize(images: Iterable[RowImage]) -> RangeSummary:
    """The summary of a range's rows (in any order)."""
    rows, total = 0, 0
    for image in images:
        rows += 1
        total = (total + image.digest()) % DIGEST_MODULUS
    return RangeSummary(rows, total)


def range_index(untils: Sequence[int], token: int) -> int:
    """The index of the range ``(untils[i-1], untils[i]]`` holding ``token`` (the ranges are
    contiguous and sorted; the first starts at the ring's minimum)."""
    index = bisect_left(untils, token)
    invariant(index < len(untils), f"token {token} is after the last range ({untils[-1]})")
    return index


def differing_ranges(
    source: Mapping[int, RangeSummary], target: Mapping[int, RangeSummary]
) -> list[int]:
    """The ranges whose summaries differ (a range with no rows has no summary)."""
    empty = RangeSummary()
    return sorted(
        r for r in set(source) | set(target) if source.get(r, empty) != target.get(r, empty)
    )


class Kind(enum.StrEnum):
    """How a row differs (module docstring)."""

    MISSING = "missing"
    EXTRA = "extra"
    VALUES = "values"
    WRITETIME = "writetime"


@dataclass(frozen=True, slots=True)
class Difference:
    """One row that differs: its key and what each side has (values, then write times)."""

    kind: Kind
    key: str
    source: str
    target: str


def _shown(image: RowImage | None, kind: Kind) -> str:
    if image is None:
        return "-"
    return image.write_times if kind is Kind.WRITETIME else image.values


def classify(source: RowImage | None, target: RowImage | None) -> Difference | None:
    """How the row of one key differs between the sides (None: equal)."""
    invariant(source is not None or target is not None, "classify needs a row on a side")
    invariant(
        source is None or target is None or source.key == target.key, "rows of two keys compared"
    )
    if target is None:
        assert source is not None
        kind = Kind.MISSING
    elif source is None:
        kind = Kind.EXTRA
    elif source.values != target.values:
        kind = Kind.VALUES
    elif source.write_times != target.write_times:
        kind = Kind.WRITETIME
    else:
        return None
    key = (source or target).key  # type: ignore[union-attr]
    return Difference(kind, key, _shown(source, kind), _shown(target, kind))


@dataclass(frozen=True, slots=True)
class RangeDiff:
    """One token range ``(after, until]`` whose digests differ, with what its rows showed."""

    after: int
    until: int
    source_rows: int
    target_rows: int
    counts: Mapping[Kind, int]


@dataclass(frozen=True, slots=True)
class DiffReport:
    """The outcome of a diff: sizes, counts by kind, examples by kind (sorted by key, at most
    ``examples`` each) and the ranges that differed."""

    source: str
    target: str
    table: str
    ranges: int
    source_rows: int
    target_rows: int
    counts: Mapping[Kind, int]
    examples: Mapping[Kind, Sequence[Difference]]
    differing: Sequence[RangeDiff] = field(default_factory=tuple)

    @property
    def equal(self) -> bool:
        return not any(self.counts.values()) and not self.differing

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source,
            "target": self.target,
            "table": self.table,
            "equal": self.equal,
            "ranges": self.ranges,
            "ranges_differing": len(self.differing),
            "source_rows": self.source_rows,
            "target_rows": self.target_rows,
            "counts": {kind.value: self.counts.get(kind, 0) for kind in Kind},
            "examples": {
                kind.value: [
                    {"key": d.key, "source": d.source, "target": d.target}
                    for d in self.examples.get(kind, ())
                ]
                for kind in Kind
            },
            "differing_ranges": [
                {
                    "after": str(r.after),
                    "until": str(r.until),
                    "source_rows": r.source_rows,
                    "target_rows": r.target_rows,
                    "counts": {kind.value: r.counts.get(kind, 0) for kind in Kind},
                }
                for r in self.differing
            ],
        }
