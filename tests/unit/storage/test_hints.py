"""Hints: a durable, bounded, oldest-first queue of encoded mutations per target host."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ringflow.errors import InvalidRequest
from ringflow.schema import Cell, ComplexColumn, DeletionTime, Mutation, Row
from ringflow.storage import HintBacklogFull, Store, StoreLimits
from tests.unit.storage._tables import KV, insert, txt

HOST_A = uuid.UUID(int=0xA)
HOST_B = uuid.UUID(int=0xB)


def _mutation(n: int) -> Mutation:
    row = Row((), None, DeletionTime(n, 5), {"v": Cell.live(n, b"x"), "c": ComplexColumn()})
    return Mutation("ks", "any", (txt(str(n)),), rows=(row,))


def test_store_fetch_delete_oldest_first_and_durable(tmp_path: Path) -> None:
    store = Store(tmp_path / "node.sqlite")
    ids = [store.store_hint(HOST_A, [_mutation(n), _mutation(n + 100)], 1000 - n) for n in range(4)]
    other = store.store_hint(HOST_B, [insert(KV, (txt("k"),), (), {"v": b"v"})], 5)
    store.close()
    store = Store(tmp_path / "node.sqlite")
    assert store.hint_targets() == [HOST_A, HOST_B]
    hints = store.hints_for(HOST_A, 10)
    assert [h.hint_id for h in hints] == ids[::-1]
    assert [h.created_ms for h in hints] == [997, 998, 999, 1000]
    assert hints[0].mutations == (_mutation(3), _mutation(103))
    assert [h.hint_id for h in store.hints_for(HOST_A, 2)] == ids[::-1][:2]
    assert store.delete_hint(ids[3]) is True
    assert store.delete_hint(ids[3]) is False
    assert [h.hint_id for h in store.hints_for(HOST_A, 10)] == ids[::-1][1:]
    assert [h.hint_id for h in store.hints_for(HOST_B, 10)] == [other]
    store.close()


def test_hint_limits(tmp_path: Path) -> None:
    store = Store(
        tmp_path / "node.sqlite", limits=StoreLimits(max_hints_per_target=2, max_hints_per_fetch=5)
    )
    store.store_hint(HOST_A, [_mutation(1)], 1)
    store.store_hint(HOST_A, [_mutation(2)], 2)
    with pytest.raises(HintBacklogFull, match="has 2 hints queued, the limit is 2"):
        store.store_hint(HOST_A, [_mutation(3)], 3)
    store.store_hint(HOST_B, [_mutation(3)], 3)
    with pytest.raises(InvalidRequest):
        store.hints_for(HOST_A, 6)
    with pytest.raises(InvalidRequest):
        store.store_hint(HOST_A, [], 3)
    with pytest.raises(InvalidRequest):
        store.store_hint("host", [_mutation(1)], 3)  # type: ignore[arg-type]
    assert len(store.hints_for(HOST_A, 5)) == 2
    store.close()
