"""materialize: the LWW oracle of the applying sinks (pure Python, no Spark)."""

from __future__ import annotations

import pytest

from ringflow.cdc import CdcOperation
from ringflow.pipeline import InvalidChange, TableState, materialize

from ._workload import (
    NOW_S,
    TABLE,
    as_comparable,
    change,
    expected_rows,
    range_delete,
    row,
    shuffled_with_duplicates,
    workload,
)


def test_workload_state_is_the_expected_lww_state() -> None:
    assert as_comparable(materialize(TABLE, workload(), NOW_S)) == expected_rows()


@pytest.mark.parametrize("seed", range(5))
def test_order_and_duplicates_do_not_matter(seed: int) -> None:
    changes = shuffled_with_duplicates(workload(), seed)
    assert as_comparable(materialize(TABLE, changes, NOW_S)) == expected_rows()


def test_ttl_expiry_is_relative_to_now() -> None:
    changes = [change(CdcOperation.INSERT, 10, row("t", 1, 1, "a"), {"amount": 1}, ttl_s=50)]
    t0_s = NOW_S - 100
    assert list(materialize(TABLE, changes, t0_s + 49)) == [("t", 1, 1, "a")]
    assert materialize(TABLE, changes, t0_s + 50) == {}


def test_unpaired_range_bound_is_refused() -> None:
    start, _ = range_delete(
        5,
        "t",
        1,
        {"seq": 1},
        CdcOperation.RANGE_DELETE_START_INCLUSIVE,
        {"seq": 2},
        CdcOperation.RANGE_DELETE_END_INCLUSIVE,
    )
    state = TableState(TABLE)
    state.apply(start)
    with pytest.raises(InvalidChange, match="without their pair"):
        state.live_rows(NOW_S)


def test_change_not_fitting_the_table_is_refused() -> None:
    with pytest.raises(InvalidChange, match="partition key column 'bucket'"):
        materialize(TABLE, [change(CdcOperation.INSERT, 1, {"tenant": "t"})], NOW_S)
    with pytest.raises(InvalidChange, match="whole clustering key"):
        materialize(TABLE, [change(CdcOperation.INSERT, 1, row("t", 1, 1))], NOW_S)
    with pytest.raises(InvalidChange, match="static"):
        materialize(TABLE, [change(CdcOperation.UPDATE, 1, row("t", 1), {"amount": 1})], NOW_S)
