"""cell_order agrees with ringflow.schema's reconcile (Cassandra's cell rules) on every pair.

The oracle is ``reconcile_cells``; cells are built as a coordinator whose clock equals the
write timestamp would build them (the assumption ``cell_order`` documents).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ringflow.pipeline import cell_order
from ringflow.schema import Cell, reconcile_cells

_US = 1_000_000
_cells = st.tuples(
    st.integers(0, 3).map(lambda s: 1_700_000_000 * _US + s * 400_000),  # equal ts are common
    st.one_of(st.none(), st.binary(max_size=3)),  # None: tombstone
    st.sampled_from([None, 1, 5, 60]),
)


def _schema_cell(timestamp_us: int, value: bytes | None, ttl_s: int | None) -> Cell:
    now_s = timestamp_us // _US
    if value is None:
        return Cell.tombstone(timestamp_us, now_s)
    if ttl_s:
        return Cell.expiring(timestamp_us, ttl_s, now_s, value)
    return Cell.live(timestamp_us, value)


@given(_cells, _cells)
def test_the_greater_order_wins_as_in_reconcile(
    left: tuple[int, bytes | None, int | None], right: tuple[int, bytes | None, int | None]
) -> None:
    left_cell, right_cell = _schema_cell(*left), _schema_cell(*right)
    if left_cell == right_cell:
        return
    winner = reconcile_cells(left_cell, right_cell)
    left_key = (left[0], cell_order(*left))
    right_key = (right[0], cell_order(*right))
    assert left_key != right_key
    assert (winner == left_cell) == (left_key > right_key)
