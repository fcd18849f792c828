"""``restrict_columns``: a mutation cut to the columns a node's table has (issue 15 §3).

Properties on generated mutations (the strategies of ``test_reconcile_properties``): cutting to
every column is the identity (the same object); a cut keeps each cell of a kept column, the keys,
row liveness and every deletion, and nothing of another column; a row is left out only when
the cut leaves nothing of it; and cutting commutes with ``merge_mutations``, so the versions a
coordinator reconciles and the repairs it computes are the same whether the replicas cut their
answers or it cuts the merged result.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ringflow.schema import Mutation, Row, merge_mutations, restrict_columns
from tests.unit.schema.test_reconcile_properties import (
    COMPLEX_COLUMN,
    PROPERTY_SETTINGS,
    SIMPLE_COLUMNS,
    mutations,
)

EVERY_COLUMN = frozenset((*SIMPLE_COLUMNS, COMPLEX_COLUMN))
column_sets = st.frozensets(st.sampled_from(sorted(EVERY_COLUMN)))


def _rows(mutation: Mutation) -> list[Row]:
    static = [] if mutation.static_row is None else [mutation.static_row]
    return static + list(mutation.rows)


@PROPERTY_SETTINGS
@given(mutations())
def test_cutting_to_every_column_is_the_same_mutation(mutation: Mutation) -> None:
    assert restrict_columns(mutation, EVERY_COLUMN) is mutation


@PROPERTY_SETTINGS
@given(mutations(), column_sets)
def test_a_cut_keeps_exactly_the_kept_columns_and_everything_else(
    mutation: Mutation, kept: frozenset[str]
) -> None:
    cut = restrict_columns(mutation, kept)
    assert (cut.keyspace, cut.table, cut.partition_key) == (
        mutation.keyspace,
        mutation.table,
        mutation.partition_key,
    )
    assert cut.partition_deletion == mutation.partition_deletion
    assert cut.range_tombstones == mutation.range_tombstones
    expected: list[Row] = []
    for row in _rows(mutation):
        cells = {name: data for name, data in row.cells.items() if name in kept}
        emptied = len(cells) < len(row.cells) and not cells
        if not (emptied and row.liveness is None and row.deletion is None):
            expected.append(Row(row.clustering, row.liveness, row.deletion, cells))
    assert _rows(cut) == expected


@PROPERTY_SETTINGS
@given(mutations(), mutations(), column_sets)
def test_cutting_commutes_with_merging(a: Mutation, b: Mutation, kept: frozenset[str]) -> None:
    merged_then_cut = restrict_columns(merge_mutations(a, b), kept)
    cut_then_merged = merge_mutations(restrict_columns(a, kept), restrict_columns(b, kept))
    assert merged_then_cut == cut_then_merged
