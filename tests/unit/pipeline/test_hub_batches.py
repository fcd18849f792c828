"""How the hub sink cuts a round's statements into requests: every statement once, a request
within one replica set (or partition), a partition's statements together, limits kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.pipeline._hub_batches import GROUPINGS, Grouped, pack_requests

_ITEMS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 40)), max_size=60
).map(
    lambda rows: [
        Grouped((index, replicas, partition), replicas, (replicas, partition), size)
        for index, (replicas, partition, size) in enumerate(rows)
    ]
)


@given(
    items=_ITEMS,
    grouping=st.sampled_from(GROUPINGS),
    max_statements=st.integers(1, 8),
    max_bytes=st.integers(1, 100),
)
def test_requests_hold_each_statement_once_within_their_group_and_limits(
    items: list[Grouped[tuple[int, int, int]]], grouping: str, max_statements: int, max_bytes: int
) -> None:
    requests = pack_requests(items, grouping, max_statements, max_bytes)
    flat = [statement for request in requests for statement in request]
    assert sorted(flat) == sorted(item.statement for item in items)
    sizes = {item.statement: item.size_bytes for item in items}
    for request in requests:
        assert request
        if grouping == "none":
            assert len(request) == 1
        assert len(request) <= max_statements
        assert len(request) == 1 or sum(sizes[s] for s in request) <= max_bytes
        replicas = {s[1] for s in request}
        partitions = {s[1:] for s in request}
        assert len(replicas) == 1
        if grouping == "partition":
            assert len(partitions) == 1
        # a partition's statements are consecutive within a request, in their given order
        seen: list[tuple[int, int]] = []
        for statement in request:
            if not seen or seen[-1] != statement[1:]:
                assert statement[1:] not in seen
                seen.append(statement[1:])
        for partition in seen:
            indexes = [s[0] for s in request if s[1:] == partition]
            assert indexes == sorted(indexes)


def test_one_replica_set_packs_partitions_together_up_to_the_limits() -> None:
    items = [Grouped(i, "hub", i % 3, 10) for i in range(9)]
    assert pack_requests(items, "replica", 4, 1000) == [[0, 3, 6, 1], [4, 7, 2, 5], [8]]
    assert pack_requests(items, "replica", 100, 35) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert pack_requests(items, "partition", 100, 1000) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert pack_requests(items, "none", 100, 1000) == [[i] for i in range(9)]


def test_a_statement_over_the_byte_limit_goes_alone() -> None:
    items = [Grouped("small", "hub", 1, 10), Grouped("big", "hub", 1, 500)]
    assert pack_requests(items, "replica", 10, 100) == [["small"], ["big"]]


def test_an_unknown_grouping_is_refused() -> None:
    with pytest.raises(ValueError, match="grouping"):
        pack_requests([], "token", 10, 100)
