"""A captured row kept as its canonical bytes: decoding gives the columns back exactly, the
digest of the bytes is the row's digest, and bytes that are not a canonical row are refused
(bytes cut between two columns are the canonical bytes of a smaller row)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.replication import (
    ReplicationArgumentError,
    canonical_digest,
    canonical_row_bytes,
    decode_canonical_row,
    row_digest,
)

values = st.one_of(st.none(), st.binary(max_size=40))
rows = st.dictionaries(st.text(min_size=0, max_size=12), values, max_size=8)


@given(rows)
def test_decoding_gives_the_columns_back_and_the_digest_is_the_rows(
    row: dict[str, bytes | None],
) -> None:
    data = canonical_row_bytes(row)
    assert decode_canonical_row(data) == row
    assert canonical_digest(data) == row_digest(row)


@given(rows, st.integers(0, 200))
def test_cut_bytes_are_refused_unless_cut_between_columns(
    row: dict[str, bytes | None], cut: int
) -> None:
    data = canonical_row_bytes(row)
    if not 0 < cut < len(data):
        return
    try:
        decoded = decode_canonical_row(data[:cut])
    except ReplicationArgumentError:
        return
    assert decoded.items() < row.items()  # the first columns only: a different row


def test_columns_out_of_order_or_a_bad_presence_byte_are_refused() -> None:
    a, b = canonical_row_bytes({"a": b"1"}), canonical_row_bytes({"b": None})
    assert decode_canonical_row(a + b) == {"a": b"1", "b": None}
    with pytest.raises(ReplicationArgumentError, match="out of order"):
        decode_canonical_row(b + a)
    with pytest.raises(ReplicationArgumentError, match="presence"):
        decode_canonical_row(a[:5] + b"\x02" + a[6:])  # after the 4-byte length and "a"
    with pytest.raises(ReplicationArgumentError, match="bytes"):
        decode_canonical_row("a")  # type: ignore[arg-type]
