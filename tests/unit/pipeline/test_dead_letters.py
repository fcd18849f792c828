"""Dead letters without a cluster: the change JSON gives back an equal change (every field, every
value type the codec decodes, NaN and -0.0 told apart), and ``--before`` bounds."""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cdc import CdcOperation
from ringflow.pipeline import Change, InvalidChange
from ringflow.pipeline._dead_letters import (
    DeadLetter,
    change_from_json,
    change_to_json,
    failed_before,
    new_failed_at,
)
from ringflow.schema import timeuuid_from_micros
from tests.unit.schema.test_codec_strategies import cql_types, same, values

_names = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=6)


@st.composite
def typed_value(draw: st.DrawFn) -> Any:
    return draw(values(draw(cql_types(depth=2))))


@st.composite
def changes(draw: st.DrawFn) -> Change:
    """Changes with any operation, meta fields and values of any CQL type (Change itself does
    not check values against a table; the JSON must not need one)."""
    columns = st.dictionaries(_names, typed_value(), max_size=4)
    elements = st.frozensets(st.one_of(st.integers(), st.text(), st.uuids()), max_size=3)
    return Change(
        draw(_names),
        draw(_names),
        draw(st.sampled_from(list(CdcOperation))),
        timeuuid_from_micros(draw(st.integers(0, 2**56)), draw(st.integers(0, 2**64 - 1))),
        draw(columns),
        draw(st.integers(0, 2**31 - 1)),
        draw(columns),
        draw(st.frozensets(_names, max_size=3)),
        draw(st.dictionaries(_names, elements, max_size=2)),
        draw(st.one_of(st.none(), st.integers(1, 2**31 - 1))),
        draw(st.binary(max_size=16)),
    )


def same_change(left: Change, right: Change) -> bool:
    meta = ("keyspace", "table", "operation", "time", "batch_seq_no", "ttl_s", "stream_id")
    return (
        all(getattr(left, name) == getattr(right, name) for name in meta)
        and type(left.operation) is type(right.operation)
        and same(dict(left.key), dict(right.key))
        and same(dict(left.values), dict(right.values))
        and left.deleted == right.deleted
        and dict(left.deleted_elements) == dict(right.deleted_elements)
    )


@settings(max_examples=300, deadline=None)
@given(changes())
def test_a_change_survives_its_json_exactly(change: Change) -> None:
    text = change_to_json(change)
    back = change_from_json(text)
    assert same_change(back, change)
    assert change_to_json(back) == text  # and the JSON is a function of the change


def test_the_refused_text_stays_readable() -> None:
    change = Change(
        "shop",
        "orders",
        CdcOperation.UPDATE,
        timeuuid_from_micros(1_700_000_000_000_000, 7),
        {"id": 4},
        values={"note": "bad\x00byte", "price": 1.5, "tags": frozenset({"a"})},
        deleted=frozenset({"old"}),
        ttl_s=60,
        stream_id=b"\x01\x02",
    )
    document = json.loads(change_to_json(change))
    assert document["values"]["note"] == "bad\x00byte"
    assert document["values"]["price"] == {"$float": "1.5"}
    assert document["operation"] == "UPDATE" and document["ttl_s"] == 60
    assert change_from_json(change_to_json(change)) == change


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"format": 2}',
        '{"format": 1, "keyspace": "k"}',
        change_to_json(
            Change("k", "t", CdcOperation.INSERT, timeuuid_from_micros(1, 1), {"id": 1})
        ).replace('"INSERT"', '"NOPE"'),
    ],
)
def test_an_unreadable_change_is_an_invalid_change(text: str) -> None:
    with pytest.raises(InvalidChange, match="unreadable"):
        change_from_json(text)


def test_a_value_json_cannot_hold_is_refused_by_name() -> None:
    change = Change("k", "t", CdcOperation.INSERT, timeuuid_from_micros(1, 1), {"id": object()})
    with pytest.raises(InvalidChange, match="object"):
        change_to_json(change)


def _letter(failed_at: uuid.UUID) -> DeadLetter:
    return DeadLetter("pg", failed_at, "k", "t", "why", "{}")


def test_before_takes_a_timeuuid_or_an_iso_time() -> None:
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    micros = int(at.timestamp()) * 1_000_000
    early, late = new_failed_at(micros - 1, 5), new_failed_at(micros, 5)
    by_time = failed_before("2026-01-02T03:04:05")
    assert by_time(_letter(early)) and not by_time(_letter(late))
    by_uuid = failed_before(str(late))
    assert by_uuid(_letter(early)) and not by_uuid(_letter(late))
    same_time_lower = new_failed_at(micros, 0)  # same µs, smaller low bytes: before
    assert by_uuid(_letter(same_time_lower))
    with pytest.raises(ValueError, match="neither"):
        failed_before("yesterday")
    with pytest.raises(ValueError, match="version 1"):
        failed_before(str(uuid.uuid4()))
