"""Row and slice digests: equal rows digest equal on every replica, different rows do not, and a
slice digest ignores arrival order but not content or count (REPLICATION.md decision 3)."""

from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.replication import (
    SLICE_DIGEST_SIZE,
    ReplicationArgumentError,
    SealedSlice,
    SliceKey,
    SliceSettings,
    canonical_row_bytes,
    row_digest,
    slice_digest,
)

values = st.one_of(st.none(), st.binary(max_size=40))
rows = st.dictionaries(st.text(min_size=1, max_size=12), values, min_size=1, max_size=8)


@given(rows, st.randoms(use_true_random=False))
def test_a_row_digests_the_same_whatever_the_column_order(
    row: dict[str, bytes | None], rng: random.Random
) -> None:
    shuffled = list(row.items())
    rng.shuffle(shuffled)
    assert row_digest(dict(shuffled)) == row_digest(row)
    assert -(2**63) <= row_digest(row) < 2**63


@given(rows, rows)
def test_different_rows_have_different_canonical_bytes(
    a: dict[str, bytes | None], b: dict[str, bytes | None]
) -> None:
    if a != b:
        assert canonical_row_bytes(a) != canonical_row_bytes(b)


def test_boundaries_between_name_and_value_are_unambiguous() -> None:
    assert row_digest({"ab": b"c"}) != row_digest({"a": b"bc"})
    assert row_digest({"a": None}) != row_digest({"a": b""})
    assert row_digest({"a": b"", "b": None}) != row_digest({"a": None, "b": b""})


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50), st.randoms(use_true_random=False))
def test_a_slice_digest_ignores_arrival_order(digests: list[int], rng: random.Random) -> None:
    shuffled = list(digests)
    rng.shuffle(shuffled)
    assert slice_digest(shuffled) == slice_digest(digests)
    assert len(slice_digest(digests)) == SLICE_DIGEST_SIZE


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50), st.data())
def test_a_missing_or_extra_row_changes_the_slice_digest(
    digests: list[int], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(digests) - 1))
    missing = digests[:index] + digests[index + 1 :]
    assert slice_digest(missing) != slice_digest(digests)
    assert slice_digest([*digests, digests[index]]) != slice_digest(digests)  # a duplicate counts


def test_bad_values_are_refused_with_the_rule() -> None:
    with pytest.raises(ReplicationArgumentError, match="bytes or None"):
        row_digest({"a": "text"})  # type: ignore[dict-item]
    with pytest.raises(ReplicationArgumentError, match="slice_width_s"):
        SliceSettings(slice_width_s=0)
    with pytest.raises(ReplicationArgumentError, match="slice_count"):
        SliceSettings(slice_count=10_000)
    with pytest.raises(ReplicationArgumentError, match="16 bytes"):
        SealedSlice(SliceKey("ks", "t", 0, 10, 0), uuid.uuid4(), b"x", 1, 0)
    assert SliceSettings(2, 3).window_ms == 6_000
