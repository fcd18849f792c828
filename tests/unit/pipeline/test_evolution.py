"""Schema evolution of the pipeline, pure (issue 15): what an ``ALTER TABLE`` changed, and the
union a destination holds after several versions of the source table.

Proves: the union is the newest version plus the value columns older versions had (a dropped
column is kept, with its type and kind), whatever the order the versions come in; a column
re-added with its old type adds nothing; a column with another type or kind, or another primary
key, is a SchemaConflict naming the destination and what to do; ``describe_change`` names added
and dropped columns; ``same_columns`` ignores the order of the columns.
"""

from __future__ import annotations

import pytest

from ringflow.pipeline import SchemaConflict, describe_change, union_table
from ringflow.pipeline._evolution import column_changes, same_columns
from ringflow.schema import BIGINT, INT, TEXT, ClusteringOrder, SetType, Table


def _table(**regular: object) -> Table:
    return Table.create(
        "ks",
        "t",
        partition_key=[("id", INT)],
        clustering=[("seq", INT, ClusteringOrder.ASC)],
        static=[("owner", TEXT)],
        regular=list(regular.items()),  # type: ignore[arg-type]
    )


V1 = _table(name=TEXT, note=TEXT)
V2 = _table(name=TEXT, note=TEXT, price=BIGINT, tags=SetType(TEXT))
V3 = _table(name=TEXT, price=BIGINT, tags=SetType(TEXT))  # note dropped


def _names(table: Table) -> list[str]:
    return [c.name for c in table.columns]


def test_the_union_keeps_dropped_columns_after_the_newest_ones() -> None:
    union = union_table(union_table(V1, V2, "here"), V3, "here")
    assert _names(union) == ["id", "seq", "owner", "name", "price", "tags", "note"]
    assert union.column("note") == V1.column("note")
    assert same_columns(union, V2)  # the same columns, in another order
    assert not same_columns(union, V3)
    assert union_table(union, V2, "here") is V2  # re-added with its type: nothing kept apart
    assert union_table(V3, V1, "here").has_column("price")  # older version last: still kept


def test_a_column_of_another_type_or_kind_or_another_key_cannot_be_followed() -> None:
    retyped = _table(name=TEXT, note=BIGINT)
    with pytest.raises(SchemaConflict, match=r"the lake holds column 'note' as regular text"):
        union_table(V1, retyped, "the lake")
    static_note = Table.create(
        "ks",
        "t",
        partition_key=[("id", INT)],
        clustering=[("seq", INT, ClusteringOrder.ASC)],
        static=[("owner", TEXT), ("note", TEXT)],
        regular=[("name", TEXT)],
    )
    with pytest.raises(SchemaConflict, match="now has it as static text"):
        union_table(V1, static_note, "hub")
    rekeyed = Table.create("ks", "t", partition_key=[("id", BIGINT)], regular=[("name", TEXT)])
    with pytest.raises(SchemaConflict, match="primary key"):
        union_table(V1, rekeyed, "hub")


def test_describe_change_names_added_and_dropped_columns() -> None:
    assert describe_change(V1, V2) == "added price (bigint), tags (set<text>)"
    assert describe_change(V2, V3) == "dropped note (text)"
    assert describe_change(V1, V1) == "no column changed"
    added, dropped = column_changes(V3, V1)
    assert ([c.name for c in added], [c.name for c in dropped]) == (["note"], ["price", "tags"])
