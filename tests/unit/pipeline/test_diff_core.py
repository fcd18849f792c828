"""The pure core of ``ringflow diff`` (row digests, range summaries, row classification).

Proves: canonical text does not depend on how a collection was built (set/map order, aware or
naive UTC timestamps) and tells different values apart; a range summary does not depend on row
order or on how rows were split across partitions, equals the limb-sum form Spark computes, and
changes when any row's key, value or write time changes, or a row is added, removed or
duplicated; classification names missing, extra, values and writetime rows; token ranges are
found by bisection; the JSON report is well formed.
"""

from __future__ import annotations

import datetime
import json
import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from ringflow.pipeline._diff_core import (
    DIGEST_MODULUS,
    DiffReport,
    Kind,
    RangeSummary,
    canonical_text,
    classify,
    differing_ranges,
    digest_limbs,
    join_limb_sums,
    range_index,
    row_image,
    summarize,
)

scalars = hs.one_of(
    hs.none(),
    hs.booleans(),
    hs.integers(-(2**70), 2**70),
    hs.floats(allow_nan=False),
    hs.text(max_size=8),
    hs.binary(max_size=8),
)
rows = hs.lists(
    hs.tuples(
        hs.integers(0, 50),
        hs.dictionaries(hs.sampled_from(["a", "b", "c"]), scalars, max_size=3),
        hs.integers(0, 2**50),
    ),
    max_size=30,
)


def images(data: list[tuple[int, dict[str, object], int]]) -> list:  # type: ignore[type-arg]
    return [row_image((k,), v, dict.fromkeys(v, t)) for k, v, t in data]


def test_canonical_text_ignores_build_order() -> None:
    assert canonical_text(frozenset({"b", "a", "c"})) == canonical_text({"c", "a", "b"})
    assert canonical_text({2: "x", 1: "y"}) == canonical_text({1: "y", 2: "x"})
    naive = datetime.datetime(2026, 1, 2, 3, 4, 5)
    aware = naive.replace(tzinfo=datetime.UTC)
    assert canonical_text(naive) == canonical_text(aware)


def test_canonical_text_tells_values_apart() -> None:
    distinct = [None, True, 1, 1.5, "1", b"1", [1], (1, 2), {1}, {1: 2}, Decimal("1.0")]
    distinct += [uuid.UUID(int=1), datetime.date(2026, 1, 1), "null", float("nan")]
    assert len({canonical_text(v) for v in distinct}) == len(distinct)


@given(rows, hs.randoms())
def test_summary_is_order_independent(data: list, random: object) -> None:  # type: ignore[type-arg]
    shuffled = list(data)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    assert summarize(images(data)) == summarize(images(shuffled))


@given(rows, hs.integers(0, 30))
def test_summary_merges_across_partitions(data: list, cut: int) -> None:  # type: ignore[type-arg]
    whole = summarize(images(data))
    assert summarize(images(data[:cut])).merge(summarize(images(data[cut:]))) == whole


@given(rows)
def test_limb_sums_equal_the_digest_sum(data: list) -> None:  # type: ignore[type-arg]
    digests = [image.digest() for image in images(data)]
    limb_sums = [sum(digest_limbs(d)[i] for d in digests) for i in range(4)]
    assert join_limb_sums(limb_sums) == summarize(images(data)).digest
    assert all(0 <= d < DIGEST_MODULUS for d in digests)


@given(
    rows.filter(bool), hs.integers(0, 29), hs.sampled_from(["key", "value", "time", "dup", "drop"])
)
def test_any_change_changes_the_summary(data: list, at: int, change: str) -> None:  # type: ignore[type-arg]
    at %= len(data)
    key, values, time = data[at]
    changed = list(data)
    if change == "key":
        changed[at] = (key + 1000, values, time)
    elif change == "value":
        changed[at] = (key, {**values, "z": 1}, time)
    elif change == "time":
        data = [*data[:at], (key, {**values, "z": 1}, time), *data[at + 1 :]]
        changed[at] = (key, {**values, "z": 1}, time + 1)
    elif change == "dup":
        changed.append(data[at])
    else:
        del changed[at]
    assert summarize(images(data)) != summarize(images(changed))


def test_classify() -> None:
    base = row_image((1, "a"), {"v": 1, "w": None}, {"v": 10, "w": 11})
    assert base.values == canonical_text({"v": 1})  # nulls and their times left out
    assert classify(base, base) is None
    missing = classify(base, None)
    assert missing is not None and missing.kind is Kind.MISSING and missing.target == "-"
    extra = classify(None, base)
    assert extra is not None and extra.kind is Kind.EXTRA and extra.source == "-"
    other_value = classify(base, row_image((1, "a"), {"v": 2}, {"v": 10}))
    assert other_value is not None and other_value.kind is Kind.VALUES
    assert (other_value.source, other_value.target) == ('{"v": 1}', '{"v": 2}')
    null_on_one_side = classify(base, row_image((1, "a"), {"v": 1, "w": 3}, {"v": 10, "w": 1}))
    assert null_on_one_side is not None and null_on_one_side.kind is Kind.VALUES
    other_time = classify(base, row_image((1, "a"), {"v": 1}, {"v": 12}))
    assert other_time is not None and other_time.kind is Kind.WRITETIME
    assert (other_time.source, other_time.target) == ('{"v": 10}', '{"v": 12}')
    with pytest.raises(Exception, match="two keys"):
        classify(base, row_image((2, "a"), {"v": 1}, {"v": 10}))


def test_range_index_and_differing_ranges() -> None:
    untils = [-100, 0, 100, 2**63 - 1]
    assert [range_index(untils, t) for t in (-(2**63) + 1, -100, -99, 0, 1, 100, 2**63 - 1)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
    ]
    same, other = RangeSummary(2, 5), RangeSummary(2, 6)
    assert differing_ranges({0: same, 1: same}, {0: same, 1: other, 3: same}) == [1, 3]


def test_report_json() -> None:
    difference = classify(row_image((1,), {"v": 1}, {"v": 1}), None)
    assert difference is not None
    report = DiffReport("a", "b", "ks.t", 4, 1, 0, {Kind.MISSING: 1}, {Kind.MISSING: [difference]})
    document = json.loads(json.dumps(report.to_json()))
    assert document["equal"] is False
    assert document["counts"] == {"missing": 1, "extra": 0, "values": 0, "writetime": 0}
    assert document["examples"]["missing"] == [{"key": "[1]", "source": '{"v": 1}', "target": "-"}]
    assert DiffReport("a", "b", "ks.t", 4, 1, 1, {}, {}).equal
