"""Pre-image and post-image rows (scylla-cdc.md §5 items 4-5, §9 item 7 "preimage true vs full /
postimage").

The statement sequences and results are those of ``docs/features/cdc/cdc-preimages.rst``; each
statement is built separately with the pre-image read the storage would pass (the base row as it
was before the statement). Scylla issues pinned here: #7716 (post-image of a row with no values),
#26382 (partition delete without clustering key gets a pre-image), #6900 (a range deletion drops
the row state used by later post-images), and the state carried between timestamp buckets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ringflow.cdc._log_rows import image_rows_needed
from ringflow.errors import InvalidRequest
from ringflow.schema import INT, TIMEUUID, ListType, MapType, Mutation, PreimageMode, Table
from ringflow.schema._codec import serialize
from tests.unit.cdc.test_log_rows_support import (
    UT,
    T,
    bound,
    build,
    cdc,
    dead,
    elements,
    expect,
    field_path,
    i,
    list_key,
    list_uuid,
    live,
    map_cells,
    marker,
    mutation,
    overwrite,
    range_delete,
    row,
    table,
    tombstone,
)

MAP = MapType(INT, INT)
FROZEN_MAP = MapType(INT, INT, True)
CHANGED = table("p", regular=[("v1", INT), ("v2", MAP)], options=cdc(PreimageMode.CHANGED))
FULL = table("pf", regular=[("v1", INT), ("v2", MAP)], options=cdc(PreimageMode.FULL))
FULL_POST = table("pp", options=cdc(PreimageMode.FULL, postimage=True))
MAP_POST = table("mp", regular=[("v", MAP)], options=cdc(PreimageMode.CHANGED, postimage=True))
BOTH = table("b", options=cdc(PreimageMode.CHANGED, postimage=True))
NO_CK = table("n", clustering=(), regular=[("v", INT)], options=cdc(PreimageMode.CHANGED))
STATIC_PRE = table(
    "sp", static=[("s", INT), ("s2", INT)], regular=[("c", INT)], options=cdc(PreimageMode.CHANGED)
)
STATIC_POST = table(
    "so",
    static=[("s", INT), ("s2", INT)],
    regular=[("c", INT)],
    options=cdc(PreimageMode.CHANGED, postimage=True),
)
ADVANCED_POST = table("ap", regular=[("l", ListType(INT)), ("u", UT)], options=cdc(postimage=True))

CK0 = (i(0),)
Image = Mapping[tuple[bytes, ...], Mapping[str, bytes]]


def fmap(values: dict[int, int]) -> bytes:
    return serialize(FROZEN_MAP, values)


def list_image(values: dict[int, int]) -> bytes:
    """A list column's image: ``map<timeuuid, int>`` keyed by :func:`list_key` numbers."""
    return serialize(MapType(TIMEUUID, INT, True), {list_uuid(n): v for n, v in values.items()})


CASES: list[tuple[str, Table, Mutation, Image, list[dict[str, Any]]]] = [
    # cdc-preimages.rst, 'preimage': true
    (
        "true: UPDATE SET v1 = 0 (no row before: no pre-image)",
        CHANGED,
        mutation(CHANGED, [row((0,), {"v1": live(i(0))})]),
        {},
        expect({"op": 1, "ck": 0, "v1": 0}),
    ),
    (
        "true: UPDATE SET v2 = v2 + {1:1, 2:2} (only the changed column, null flagged)",
        CHANGED,
        mutation(CHANGED, [row((0,), {"v2": map_cells({1: 1, 2: 2})})]),
        {CK0: {"v1": i(0)}},
        expect({"op": 0, "ck": 0, "del_v2": True}, {"op": 1, "ck": 0, "v2": {1: 1, 2: 2}}),
    ),
    (
        "true: UPDATE SET v2 = v2 + {2:3, 3:4}",
        CHANGED,
        mutation(CHANGED, [row((0,), {"v2": map_cells({2: 3, 3: 4})})]),
        {CK0: {"v1": i(0), "v2": fmap({1: 1, 2: 2})}},
        expect({"op": 0, "ck": 0, "v2": {1: 1, 2: 2}}, {"op": 1, "ck": 0, "v2": {2: 3, 3: 4}}),
    ),
    # 'preimage': 'full'
    (
        "full: UPDATE SET v2 = v2 + {1:1, 2:2} (every column)",
        FULL,
        mutation(FULL, [row((0,), {"v2": map_cells({1: 1, 2: 2})})]),
        {CK0: {"v1": i(0)}},
        expect({"op": 0, "ck": 0, "v1": 0, "del_v2": True}, {"op": 1, "ck": 0, "v2": {1: 1, 2: 2}}),
    ),
    (
        "full: UPDATE SET v2 = v2 + {2:3, 3:4}",
        FULL,
        mutation(FULL, [row((0,), {"v2": map_cells({2: 3, 3: 4})})]),
        {CK0: {"v1": i(0), "v2": fmap({1: 1, 2: 2})}},
        expect(
            {"op": 0, "ck": 0, "v1": 0, "v2": {1: 1, 2: 2}},
            {"op": 1, "ck": 0, "v2": {2: 3, 3: 4}},
        ),
    ),
    (
        "true: DELETE FROM p WHERE pk = 0 AND ck = 0 (a row delete shows every column)",
        CHANGED,
        mutation(CHANGED, [row((0,), deletion=tombstone(T))]),
        {CK0: {"v1": i(2)}},
        expect({"op": 0, "ck": 0, "v1": 2, "del_v2": True}, {"op": 3, "ck": 0}),
    ),
    (
        "true: DELETE ... WHERE ck >= 1 AND ck < 2 (no pre-image for range deletes)",
        CHANGED,
        mutation(CHANGED, ranges=[range_delete(bound((1,)), bound((2,), False))]),
        {(i(1),): {"v1": i(0)}},
        expect({"op": 5, "ck": 1}, {"op": 8, "ck": 2}),
    ),
    (
        "true: DELETE FROM p WHERE pk = 0 (no pre-image for partition deletes)",
        CHANGED,
        mutation(CHANGED, partition_deletion=tombstone(T)),
        {CK0: {"v1": i(0)}},
        expect({"op": 4}),
    ),
    (
        "true: DELETE FROM n WHERE pk = 0 without clustering key (#26382: pre-image)",
        NO_CK,
        mutation(NO_CK, partition_deletion=tombstone(T)),
        {(): {"v": i(5)}},
        expect({"op": 0, "v": 5}, {"op": 4}),
    ),
    # cdc-preimages.rst, 'preimage': 'full', 'postimage': true
    (
        "full+post: UPDATE SET v1 = 0 WHERE ck = 0 (post-image only)",
        FULL_POST,
        mutation(FULL_POST, [row((0,), {"v1": live(i(0))})]),
        {},
        expect({"op": 1, "ck": 0, "v1": 0}, {"op": 9, "ck": 0, "v1": 0}),
    ),
    (
        "full+post: INSERT (pk, ck, v2) VALUES (0, 0, 0)",
        FULL_POST,
        mutation(FULL_POST, [row((0,), {"v2": live(i(0))}, marker())]),
        {CK0: {"v1": i(0)}},
        expect(
            {"op": 0, "ck": 0, "v1": 0, "del_v2": True},
            {"op": 2, "ck": 0, "v2": 0},
            {"op": 9, "ck": 0, "v1": 0, "v2": 0},
        ),
    ),
    (
        "full+post: DELETE FROM pp WHERE pk = 0 AND ck = 0 (no post-image)",
        FULL_POST,
        mutation(FULL_POST, [row((0,), deletion=tombstone(T))]),
        {CK0: {"v1": i(0), "v2": i(0)}},
        expect({"op": 0, "ck": 0, "v1": 0, "v2": 0}, {"op": 3, "ck": 0}),
    ),
    (
        "full+post: DELETE WHERE ck >= 1 AND ck < 2 and DELETE WHERE pk = 0 (no images)",
        FULL_POST,
        mutation(
            FULL_POST,
            ranges=[range_delete(bound((1,)), bound((2,), False), T - 1)],
            partition_deletion=tombstone(T),
        ),
        {},
        expect({"op": 5, "ck": 1}, {"op": 8, "ck": 2}, ts=T - 1) + expect({"op": 4}),
    ),
    # collections with post-images
    (
        "map+post: UPDATE SET v = {1:1, 2:2}",
        MAP_POST,
        mutation(
            MAP_POST, [row((0,), {"v": overwrite([live(i(1), path=i(1)), live(i(2), path=i(2))])})]
        ),
        {},
        expect(
            {"op": 1, "ck": 0, "v": {1: 1, 2: 2}, "del_v": True},
            {"op": 9, "ck": 0, "v": {1: 1, 2: 2}},
        ),
    ),
    (
        "map+post: UPDATE SET v = v + {3:3}, v = v - {2}",
        MAP_POST,
        mutation(MAP_POST, [row((0,), {"v": elements(live(i(3), path=i(3)), dead(path=i(2)))})]),
        {CK0: {"v": fmap({1: 1, 2: 2})}},
        expect(
            {"op": 0, "ck": 0, "v": {1: 1, 2: 2}},
            {"op": 1, "ck": 0, "v": {3: 3}, "delel_v": frozenset({2})},
            {"op": 9, "ck": 0, "v": {1: 1, 3: 3}},
        ),
    ),
    (
        "map+post: UPDATE SET v = {4:4}",
        MAP_POST,
        mutation(MAP_POST, [row((0,), {"v": overwrite([live(i(4), path=i(4))])})]),
        {CK0: {"v": fmap({1: 1, 3: 3})}},
        expect(
            {"op": 0, "ck": 0, "v": {1: 1, 3: 3}},
            {"op": 1, "ck": 0, "v": {4: 4}, "del_v": True},
            {"op": 9, "ck": 0, "v": {4: 4}},
        ),
    ),
    (
        "list+post: UPDATE SET l = l + [2] (keys kept in the image)",
        ADVANCED_POST,
        mutation(ADVANCED_POST, [row((0,), {"l": elements(live(i(2), path=list_key(1)))})]),
        {CK0: {"l": list_image({0: 1})}},
        expect(
            {"op": 1, "ck": 0, "l": {list_uuid(1): 2}},
            {"op": 9, "ck": 0, "l": {list_uuid(0): 1, list_uuid(1): 2}},
        ),
    ),
    (
        "udt+post: UPDATE SET u = null (Scylla shows every field null, not a null UDT)",
        ADVANCED_POST,
        mutation(ADVANCED_POST, [row((0,), {"u": overwrite([])})]),
        {CK0: {"u": serialize(UT.frozen_form(), {"a": 1})}},
        expect(
            {"op": 1, "ck": 0, "u": {"a": None, "b": None, "c": None}, "del_u": True},
            {"op": 9, "ck": 0, "u": {"a": None, "b": None, "c": None}},
        ),
    ),
    (
        "udt+post: UPDATE SET u.b = 2 (merged onto the fields before)",
        ADVANCED_POST,
        mutation(ADVANCED_POST, [row((0,), {"u": elements(live(i(2), path=field_path(1)))})]),
        {CK0: {"u": serialize(UT.frozen_form(), {"a": 1})}},
        expect(
            {"op": 1, "ck": 0, "u": {"a": None, "b": 2, "c": None}},
            {"op": 9, "ck": 0, "u": {"a": 1, "b": 2, "c": None}},
        ),
    ),
    # Scylla issues and state carried between buckets
    (
        "#7716: UPDATE SET v1 = null on a missing row still gets a post-image",
        BOTH,
        mutation(BOTH, [row((0,), {"v1": dead()})]),
        {},
        expect({"op": 1, "ck": 0, "del_v1": True}, {"op": 9, "ck": 0}),
    ),
    (
        "#6900: BATCH UPDATE ck=1; DELETE WHERE ck >= 0 AND ck <= 2 (no post-image left)",
        BOTH,
        mutation(
            BOTH, [row((1,), {"v1": live(i(1))})], ranges=[range_delete(bound((0,)), bound((2,)))]
        ),
        {(i(1),): {"v1": i(0)}},
        expect(
            {"op": 0, "ck": 1, "v1": 0},
            {"op": 1, "ck": 1, "v1": 1},
            {"op": 5, "ck": 0},
            {"op": 7, "ck": 2},
        ),
    ),
    (
        "BATCH USING TIMESTAMP T SET v1 = 1; USING TIMESTAMP T+1 SET v1 = 2 (state carried)",
        BOTH,
        mutation(BOTH, [row((0,), {"v1": live(i(1)), "v2": live(i(2), T + 1)})]),
        {CK0: {"v1": i(0)}},
        expect(
            {"op": 0, "ck": 0, "v1": 0},
            {"op": 1, "ck": 0, "v1": 1},
            {"op": 9, "ck": 0, "v1": 1},
        )
        + expect(
            {"op": 0, "ck": 0, "del_v2": True},
            {"op": 1, "ck": 0, "v2": 2},
            {"op": 9, "ck": 0, "v1": 1, "v2": 2},
            ts=T + 1,
        ),
    ),
    # static rows
    (
        "static true: UPDATE SET s = 1 with s null before (no pre-image: s alone is read)",
        STATIC_PRE,
        mutation(STATIC_PRE, static={"s": live(i(1))}),
        {(): {"s2": i(7)}},
        expect({"op": 1, "s": 1}),
    ),
    (
        "static true+post: UPDATE SET s = 1, c = 0 (static images first)",
        STATIC_POST,
        mutation(STATIC_POST, [row((0,), {"c": live(i(0))})], static={"s": live(i(1))}),
        {(): {"s": i(0), "s2": i(7)}, CK0: {"c": i(5)}},
        expect(
            {"op": 0, "s": 0},
            {"op": 0, "ck": 0, "c": 5},
            {"op": 1, "s": 1},
            {"op": 1, "ck": 0, "c": 0},
            {"op": 9, "s": 1, "s2": 7},
            {"op": 9, "ck": 0, "c": 0},
        ),
    ),
]


@pytest.mark.parametrize(
    ("statement", "base", "base_mutation", "preimage", "expected"),
    CASES,
    ids=[case[0] for case in CASES],
)
def test_image_rows_match_scylla(
    statement: str,
    base: Table,
    base_mutation: Mutation,
    preimage: Image,
    expected: list[dict[str, Any]],
) -> None:
    """Pre-image, delta and post-image rows equal what Scylla documents for the statement."""
    del statement
    assert build(base, base_mutation, preimage=preimage).rows == expected


def test_postimage_override_replaces_the_last_buckets_post_images() -> None:
    """A caller-read post-image is used as given; a key missing from it gets no post-image."""
    base_mutation = mutation(BOTH, [row((0,), {"v1": live(i(1))}), row((1,), {"v1": live(i(2))})])
    override = {CK0: {"v1": i(9), "v2": i(8)}}
    assert build(BOTH, base_mutation, postimage=override).rows == expect(
        {"op": 1, "ck": 0, "v1": 1},
        {"op": 1, "ck": 1, "v1": 2},
        {"op": 9, "ck": 0, "v1": 9, "v2": 8},
    )


def test_image_rows_needed_lists_static_then_rows_in_clustering_order() -> None:
    """The static row is ``()``, rows follow in typed clustering order, deletions of ranges and
    partitions need nothing (except #26382), and tables without images need nothing."""
    base_mutation = mutation(
        STATIC_POST,
        [row((5,), {"c": live(i(0))}), row((-1,), deletion=tombstone(T))],
        static={"s": live(i(1))},
        ranges=[range_delete(bound((7,)), bound((9,)))],
    )
    assert image_rows_needed(STATIC_POST, base_mutation) == [(), (i(-1),), (i(5),)]
    deletes = mutation(
        BOTH, ranges=[range_delete(bound((1,)), bound())], partition_deletion=tombstone(T)
    )
    assert image_rows_needed(BOTH, deletes) == []
    assert image_rows_needed(NO_CK, mutation(NO_CK, partition_deletion=tombstone(T))) == [()]
    plain = table("plain")
    assert image_rows_needed(plain, mutation(plain, [row((0,), {"v1": live(i(0))})])) == []


def test_preimage_with_an_unknown_column_is_refused() -> None:
    """A pre-image naming a column the row cannot have is a caller bug, reported as such."""
    base_mutation = mutation(CHANGED, [row((0,), {"v1": live(i(0))})])
    with pytest.raises(InvalidRequest, match="pre-image"):
        build(CHANGED, base_mutation, preimage={CK0: {"nope": i(1)}})
