"""Packing the CDC log's vnode stream groups into Spark partitions (pure planning).

Proves: every stream is read exactly once; a vnode's group is never split across partitions;
there are at most ``max_partitions`` partitions (fewer when there are fewer groups); each
partition's streams are sorted (the source's per-partition row order relies on it); every
partition of a span carries that span.
"""

from __future__ import annotations

import random

import pytest

from ringflow.pipeline._cdc_offsets import GenerationSpan
from ringflow.pipeline._cdc_source import pack_groups, plan_partitions


def _groups(rng: random.Random, count: int) -> list[list[bytes]]:
    groups = [sorted(rng.randbytes(16) for _ in range(rng.randint(1, 4))) for _ in range(count)]
    return sorted(groups, key=lambda group: group[0])


@pytest.mark.parametrize("seed", range(20))
def test_packing_keeps_groups_whole_sorted_and_bounded(seed: int) -> None:
    rng = random.Random(seed)
    groups = _groups(rng, rng.randint(1, 40))
    limit = rng.randint(1, 10)
    packed = pack_groups(groups, limit)
    assert len(packed) == min(limit, len(groups))
    assert sorted(s for part in packed for s in part) == sorted(s for g in groups for s in g)
    owner = {stream: index for index, part in enumerate(packed) for stream in part}
    for group in groups:
        assert len({owner[stream] for stream in group}) == 1
    for part in packed:
        assert part == sorted(part)


def test_no_groups_no_partitions() -> None:
    assert pack_groups([], 4) == []


def test_plan_partitions_per_span() -> None:
    rng = random.Random(7)
    by_generation = {1_000: _groups(rng, 24), 5_000: _groups(rng, 30)}
    spans = [GenerationSpan(1_000, 3_000, 4_999), GenerationSpan(5_000, 4_999, 6_000)]
    partitions = plan_partitions(by_generation.__getitem__, spans, 2)
    assert [p.spans for p in partitions] == [[(3_000, 4_999)]] * 2 + [[(4_999, 6_000)]] * 2
    assert sorted(s for p in partitions[:2] for s in p.streams) == sorted(
        s for g in by_generation[1_000] for s in g
    )
