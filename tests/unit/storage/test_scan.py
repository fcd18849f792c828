"""Token-range scans: ring order, wrap-around, paging without loss or repetition.

Method: write partitions with known tokens (``murmur3_token`` of the key bytes), scan with
several page sizes and ranges, and compare the concatenated pages with the expected order
computed independently in Python: token, then partition key bytes, then clustering.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ringflow.errors import InvalidRequest
from ringflow.ring import MAX_TOKEN, MIN_TOKEN, murmur3_token, partition_key_bytes
from ringflow.schema import Cell, DeletionTime, Mutation, Row
from ringflow.storage import ResultRow, Store
from tests.unit.storage._tables import COMPOSITE, EVENTS, KV, i32, insert, open_store, txt

NOW = 1_000
KEYS = [txt(f"key{n}") for n in range(40)]


def _all_pages(
    store: Store, table: object, start: int, end: int, page_size: int
) -> list[ResultRow]:
    rows: list[ResultRow] = []
    state = None
    for _ in range(1000):
        page = store.scan(table, start, end, page_size=page_size, paging_state=state, now_s=NOW)  # type: ignore[arg-type]
        assert len(page.rows) <= page_size
        rows += page.rows
        state = page.paging_state
        if state is None:
            return rows
    raise AssertionError("scan did not finish")


@pytest.fixture
def kv_store(tmp_path: Path) -> Store:
    store = open_store(tmp_path, KV, EVENTS, COMPOSITE)
    store.apply([insert(KV, (key,), (), {"v": key}) for key in KEYS], now_s=NOW)
    return store


def _token(key: bytes) -> int:
    return murmur3_token(key)


def test_full_ring_in_token_order_for_every_page_size(kv_store: Store) -> None:
    expected = sorted(KEYS, key=lambda key: (_token(key), key))
    for page_size in (1, 3, 7, 40, 41, 1000):
        rows = _all_pages(kv_store, KV, MIN_TOKEN, MIN_TOKEN, page_size)
        assert [row.partition_key[0] for row in rows] == expected
        assert [row.token for row in rows] == [_token(key) for key in expected]


@pytest.mark.parametrize("split", [0.25, 0.5, 0.9])
def test_ranges_and_wrap_around(kv_store: Store, split: float) -> None:
    tokens = sorted(_token(key) for key in KEYS)
    pivot_a = tokens[int(len(tokens) * split * 0.5)]
    pivot_b = tokens[int(len(tokens) * split)]
    inside = [t for t in tokens if pivot_a < t <= pivot_b]
    assert [r.token for r in _all_pages(kv_store, KV, pivot_a, pivot_b, 4)] == inside
    wrapped = [t for t in tokens if t > pivot_b] + [t for t in tokens if t <= pivot_a]
    assert [r.token for r in _all_pages(kv_store, KV, pivot_b, pivot_a, 4)] == wrapped
    full_from_pivot = [t for t in tokens if t > pivot_a] + [t for t in tokens if t <= pivot_a]
    assert [r.token for r in _all_pages(kv_store, KV, pivot_a, pivot_a, 5)] == full_from_pivot
    assert [r.token for r in _all_pages(kv_store, KV, pivot_a, MIN_TOKEN, 5)] == [
        t for t in tokens if t > pivot_a
    ]
    assert _all_pages(kv_store, KV, MAX_TOKEN, MAX_TOKEN, 5) == _all_pages(
        kv_store, KV, MIN_TOKEN, MIN_TOKEN, 9
    )


def test_pages_resume_inside_a_partition_with_static_values(kv_store: Store) -> None:
    pks = [(i32(n),) for n in range(5)]
    mutations = []
    for pk in pks:
        static = Row((), None, None, {"s": Cell.live(1, txt("S"))})
        rows = tuple(
            Row((i32(c), txt("x")), None, None, {"v": Cell.live(1, i32(c))}) for c in range(4)
        )
        mutations.append(Mutation("ks", "events", pk, static_row=static, rows=rows))
    kv_store.apply(mutations, now_s=NOW)
    kv_store.apply([Mutation("ks", "events", (i32(99),), DeletionTime(5, NOW))], now_s=NOW)
    only_static = Row((), None, None, {"s": Cell.live(1, txt("alone"))})
    kv_store.apply([Mutation("ks", "events", (i32(50),), static_row=only_static)], now_s=NOW)
    full = _all_pages(kv_store, EVENTS, MIN_TOKEN, MIN_TOKEN, 1000)
    by_token = sorted([*pks, (i32(50),)], key=lambda pk: (_token(pk[0]), pk[0]))
    expected = []
    for pk in by_token:
        if pk == (i32(50),):
            expected.append((pk, ()))
        else:
            expected += [(pk, (i32(c), txt("x"))) for c in range(4)]
    assert [(r.partition_key, r.clustering) for r in full] == expected
    for page_size in (1, 2, 3, 5):
        paged = _all_pages(kv_store, EVENTS, MIN_TOKEN, MIN_TOKEN, page_size)
        assert paged == full
    assert all("s" in row.values for row in full)


def test_composite_keys_are_split_back(kv_store: Store) -> None:
    pk = (i32(3), txt("b"))
    kv_store.apply([insert(COMPOSITE, pk, (i32(1),), {"v": txt("v")})], now_s=NOW)
    (row,) = _all_pages(kv_store, COMPOSITE, MIN_TOKEN, MIN_TOKEN, 10)
    assert row.partition_key == pk
    assert row.token == murmur3_token(partition_key_bytes(pk))


def test_scan_mutations_pages_match_read_mutation(kv_store: Store) -> None:
    kv_store.apply([Mutation("ks", "kv", (txt("dead"),), DeletionTime(3, NOW))], now_s=NOW)
    keys = sorted([*KEYS, txt("dead")], key=lambda key: (_token(key), key))
    for page_size in (1, 6, 100):
        found = []
        state = None
        while True:
            page = kv_store.scan_mutations(
                KV, MIN_TOKEN, MIN_TOKEN, page_size=page_size, paging_state=state
            )
            found += page.mutations
            state = page.paging_state
            if state is None:
                break
        assert [m.partition_key[0] for m in found] == keys
        assert found == [kv_store.read_mutation(KV, (key,)) for key in keys]


def test_foreign_paging_state_is_refused(kv_store: Store) -> None:
    page = kv_store.scan(KV, MIN_TOKEN, MIN_TOKEN, page_size=2, now_s=NOW)
    assert page.paging_state is not None
    with pytest.raises(InvalidRequest):
        kv_store.scan(KV, 0, 10, page_size=2, paging_state=page.paging_state, now_s=NOW)
    with pytest.raises(InvalidRequest):
        kv_store.scan(
            EVENTS, MIN_TOKEN, MIN_TOKEN, page_size=2, paging_state=page.paging_state, now_s=NOW
        )
    with pytest.raises(InvalidRequest):
        kv_store.scan(KV, MIN_TOKEN, MIN_TOKEN, page_size=2, paging_state=b"\x01junk", now_s=NOW)
    with pytest.raises(InvalidRequest):
        kv_store.scan(KV, MIN_TOKEN, MIN_TOKEN, page_size=0, now_s=NOW)
    with pytest.raises(InvalidRequest):
        kv_store.scan(KV, MIN_TOKEN, 2**63, page_size=1, now_s=NOW)
