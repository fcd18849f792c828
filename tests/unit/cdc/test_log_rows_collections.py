"""Delta rows of non-frozen collections, UDTs and frozen collections (scylla-cdc.md §9 item 7).

Expectations are the tables of ``docs/features/cdc/cdc-advanced-types.rst``: added elements in
the value column (a list keyed by its cells' timeuuids, a UDT with every field, unset ones
null), removed keys in ``cdc$deleted_elements_X``, a collection tombstone as
``cdc$deleted_X = true`` logged at its timestamp + 1 (so ``SET c = {...}``'s tombstone at T−1
and its cells at T make one row), and the TTL splitting of Scylla issue #6070 (``cdc/log.cc``).
"""

from __future__ import annotations

from typing import Any

import pytest

from ringflow.cdc._log_rows import build_log_mutations
from ringflow.cdc._log_schema import cdc_log_table
from ringflow.schema import INT, TEXT, Cell, ComplexColumn, MapType, Mutation, SetType
from ringflow.schema._codec import serialize
from tests.unit.cdc.test_log_rows_support import (
    CAPTURE,
    NOW_S,
    T,
    build,
    collections_table,
    dead,
    expect,
    field_path,
    i,
    list_key,
    list_uuid,
    live,
    marker,
    mutation,
    overwrite,
    row,
    tombstone,
    txt,
)

C = collections_table()
NO_UDT_FIELDS = {"a": None, "b": None, "c": None}


def _update(cells: dict[str, Any], ttl_marker: int | None = None) -> Mutation:
    liveness = None if ttl_marker is None else marker(ttl_s=ttl_marker)
    return mutation(C, [row((0,), cells, liveness)])


def _elements(*cells: Any, deletion: Any = None) -> ComplexColumn:
    return ComplexColumn(tuple(cells), deletion)


CASES: list[tuple[str, Mutation, list[dict[str, Any]]]] = [
    # sets
    (
        "UPDATE SET st = st + {1, 2}",
        _update({"st": _elements(live(b"", path=i(1)), live(b"", path=i(2)))}),
        expect({"op": 1, "ck": 0, "st": frozenset({1, 2})}),
    ),
    (
        "UPDATE SET st = st - {1, 2, 3}",
        _update({"st": _elements(*(dead(path=i(n)) for n in (1, 2, 3)))}),
        expect({"op": 1, "ck": 0, "delel_st": frozenset({1, 2, 3})}),
    ),
    (
        "UPDATE SET st = {1, 2} (tombstone at T-1, cells at T: one row)",
        _update({"st": overwrite([live(b"", path=i(1)), live(b"", path=i(2))])}),
        expect({"op": 1, "ck": 0, "st": frozenset({1, 2}), "del_st": True}),
    ),
    (
        "UPDATE SET st = null (or = {})",
        _update({"st": _elements(deletion=tombstone(T - 1))}),
        expect({"op": 1, "ck": 0, "del_st": True}),
    ),
    # maps
    (
        "UPDATE SET m = m + {1: 'v1', 2: 'v2'}",
        _update({"m": _elements(live(txt("v1"), path=i(1)), live(txt("v2"), path=i(2)))}),
        expect({"op": 1, "ck": 0, "m": {1: "v1", 2: "v2"}}),
    ),
    (
        "UPDATE SET m = m - {1, 2, 3}",
        _update({"m": _elements(*(dead(path=i(n)) for n in (1, 2, 3)))}),
        expect({"op": 1, "ck": 0, "delel_m": frozenset({1, 2, 3})}),
    ),
    (
        "UPDATE SET m = {1: 'v1', 2: 'v2'}",
        _update({"m": overwrite([live(txt("v1"), path=i(1)), live(txt("v2"), path=i(2))])}),
        expect({"op": 1, "ck": 0, "m": {1: "v1", 2: "v2"}, "del_m": True}),
    ),
    (
        "INSERT INTO c (pk, ck, m) VALUES (0, 0, {1: 'v1', 2: 'v2'})",
        _update(
            {"m": overwrite([live(txt("v1"), path=i(1)), live(txt("v2"), path=i(2))])},
            ttl_marker=0,
        ),
        expect({"op": 2, "ck": 0, "m": {1: "v1", 2: "v2"}, "del_m": True}),
    ),
    (
        "DELETE m FROM c USING TIMESTAMP T (column delete: logged at T+1)",
        _update({"m": _elements(deletion=tombstone(T))}),
        expect({"op": 1, "ck": 0, "del_m": True}, ts=T + 1),
    ),
    (
        "BATCH DELETE m USING TIMESTAMP T-1; UPDATE USING TIMESTAMP T SET m = m + {1: 'v1'}",
        _update({"m": _elements(live(txt("v1"), path=i(1)), deletion=tombstone(T - 1))}),
        expect({"op": 1, "ck": 0, "m": {1: "v1"}, "del_m": True}),
    ),
    # lists
    (
        "UPDATE SET l = l + [1, 2] (keys are the cells' timeuuids)",
        _update({"l": _elements(live(i(1), path=list_key(0)), live(i(2), path=list_key(1)))}),
        expect({"op": 1, "ck": 0, "l": {list_uuid(0): 1, list_uuid(1): 2}}),
    ),
    (
        "UPDATE SET l[SCYLLA_TIMEUUID_LIST_INDEX(k)] = 0",
        _update({"l": _elements(live(i(0), path=list_key(5)))}),
        expect({"op": 1, "ck": 0, "l": {list_uuid(5): 0}}),
    ),
    (
        "UPDATE SET l[SCYLLA_TIMEUUID_LIST_INDEX(k)] = null",
        _update({"l": _elements(dead(path=list_key(5)))}),
        expect({"op": 1, "ck": 0, "delel_l": frozenset({list_uuid(5)})}),
    ),
    (
        "UPDATE SET l = [1, 2]",
        _update({"l": overwrite([live(i(1), path=list_key(0)), live(i(2), path=list_key(1))])}),
        expect({"op": 1, "ck": 0, "l": {list_uuid(0): 1, list_uuid(1): 2}, "del_l": True}),
    ),
    # user-defined types
    (
        "UPDATE SET u.a = 0, u.b = 1",
        _update({"u": _elements(live(i(0), path=field_path(0)), live(i(1), path=field_path(1)))}),
        expect({"op": 1, "ck": 0, "u": {"a": 0, "b": 1, "c": None}}),
    ),
    (
        "UPDATE SET u.a = null, u.b = null",
        _update({"u": _elements(dead(path=field_path(0)), dead(path=field_path(1)))}),
        expect({"op": 1, "ck": 0, "u": NO_UDT_FIELDS, "delel_u": frozenset({0, 1})}),
    ),
    (
        "UPDATE SET u.a = 42, u.c = null",
        _update({"u": _elements(live(i(42), path=field_path(0)), dead(path=field_path(2)))}),
        expect({"op": 1, "ck": 0, "u": {"a": 42, "b": None, "c": None}, "delel_u": {2}}),
    ),
    (
        "UPDATE SET u = null",
        _update({"u": _elements(deletion=tombstone(T - 1))}),
        expect({"op": 1, "ck": 0, "u": NO_UDT_FIELDS, "del_u": True}),
    ),
    (
        "UPDATE SET u = {a: 1, b: 2}",
        _update({"u": overwrite([live(i(1), path=field_path(0)), live(i(2), path=field_path(1))])}),
        expect({"op": 1, "ck": 0, "u": {"a": 1, "b": 2, "c": None}, "del_u": True}),
    ),
    # frozen collections are atomic
    (
        "UPDATE SET fm = {1: 1} (frozen<map<int, int>>)",
        _update({"fm": live(serialize(MapType(INT, INT, True), {1: 1}))}),
        expect({"op": 1, "ck": 0, "fm": {1: 1}}),
    ),
    (
        "UPDATE SET fm = null (frozen<map<int, int>>)",
        _update({"fm": dead()}),
        expect({"op": 1, "ck": 0, "del_fm": True}),
    ),
    # TTLs (#6070)
    (
        "UPDATE USING TTL 5 SET m = {1: 'a'} (tombstone row, then the TTL'd cells)",
        _update({"m": overwrite([live(txt("a"), ttl_s=5, path=i(1))])}),
        expect({"op": 1, "ck": 0, "del_m": True}, {"op": 1, "ck": 0, "m": {1: "a"}, "ttl": 5}),
    ),
    (
        "INSERT INTO c (pk, ck, m, st) VALUES (0, 0, {1: 'a'}, {2}) USING TTL 5 (three rows)",
        _update(
            {
                "m": overwrite([live(txt("a"), ttl_s=5, path=i(1))]),
                "st": overwrite([live(b"", ttl_s=5, path=i(2))]),
            },
            ttl_marker=5,
        ),
        expect(
            {"op": 2, "ck": 0, "ttl": 5},
            {"op": 1, "ck": 0, "del_m": True, "del_st": True},
            {"op": 1, "ck": 0, "m": {1: "a"}, "st": frozenset({2}), "ttl": 5},
        ),
    ),
]


@pytest.mark.parametrize(
    ("statement", "base_mutation", "expected"), CASES, ids=[case[0] for case in CASES]
)
def test_collection_delta_rows_match_scylla(
    statement: str, base_mutation: Mutation, expected: list[dict[str, Any]]
) -> None:
    """The decoded log rows equal the rows Scylla documents for the statement."""
    del statement
    assert build(C, base_mutation).rows == expected


def test_keys_are_serialized_in_the_key_types_order() -> None:
    """Added and removed keys come out in CQL order (signed ints), not in raw bytes order."""
    assert i(-1) > i(2)  # raw bytes would put -1 after 2
    base_mutation = _update(
        {
            "m": _elements(live(txt("x"), path=i(2)), live(txt("y"), path=i(-1))),
            "st": _elements(dead(path=i(3)), dead(path=i(-7))),
        }
    )
    [log_mutation] = build_log_mutations(C, cdc_log_table(C), base_mutation, CAPTURE, NOW_S)
    [log_row] = log_mutation.rows
    cells = {name: cell.value for name, cell in log_row.cells.items() if isinstance(cell, Cell)}
    assert cells["m"] == serialize(MapType(INT, TEXT, True), [(-1, "y"), (2, "x")])
    assert cells["cdc$deleted_elements_st"] == serialize(SetType(INT, True), [-7, 3])
