"""Generation ids and their gossip strings (scylla-cdc.md §2 "Generation id"; seeds 000, 001)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.cdc import GenerationIdV1, GenerationIdV2, InvalidGenerationId, parse_generation_id

MILLISECONDS = st.integers(-(2**63), 2**63 - 1)
GENERATION_UUID = uuid.UUID("5e5fbd5c-0e56-11ec-9a03-0242ac130003")


def test_v1_gossip_form_is_the_milliseconds() -> None:
    assert GenerationIdV1(1600000000000).to_gossip() == "1600000000000"
    assert parse_generation_id("1600000000000") == GenerationIdV1(1600000000000)


def test_v2_gossip_form() -> None:
    text = "v2;1600000000000;5e5fbd5c-0e56-11ec-9a03-0242ac130003"
    assert GenerationIdV2(1600000000000, GENERATION_UUID).to_gossip() == text
    assert parse_generation_id(text) == GenerationIdV2(1600000000000, GENERATION_UUID)


@given(MILLISECONDS)
def test_v1_round_trip(timestamp_ms: int) -> None:
    identifier = GenerationIdV1(timestamp_ms)
    assert parse_generation_id(identifier.to_gossip()) == identifier


@given(MILLISECONDS, st.uuids())
def test_v2_round_trip(timestamp_ms: int, generation_uuid: uuid.UUID) -> None:
    identifier = GenerationIdV2(timestamp_ms, generation_uuid)
    assert parse_generation_id(identifier.to_gossip()) == identifier


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "12.5",
        " 12",
        "9223372036854775808",
        "v2;12",
        "v2;12;not-a-uuid",
        "v3;12;5e5fbd5c-0e56-11ec-9a03-0242ac130003",
        "v2;x;5e5fbd5c-0e56-11ec-9a03-0242ac130003",
        "v2;12;5e5fbd5c0e5611ec9a030242ac130003",
        "v2;12;{5e5fbd5c-0e56-11ec-9a03-0242ac130003}",
        "v2;12;5e5fbd5c-0e56-11ec-9a03-0242ac130003;extra",
    ],
)
def test_garbage_is_rejected_with_the_text_in_the_message(text: str) -> None:
    with pytest.raises(InvalidGenerationId, match="generation id"):
        parse_generation_id(text)


def test_uppercase_uuid_is_read_and_written_canonically() -> None:
    parsed = parse_generation_id("v2;5;5E5FBD5C-0E56-11EC-9A03-0242AC130003")
    assert parsed == GenerationIdV2(5, GENERATION_UUID)
    assert parsed.to_gossip() == "v2;5;5e5fbd5c-0e56-11ec-9a03-0242ac130003"


def test_constructors_validate() -> None:
    with pytest.raises(InvalidGenerationId):
        GenerationIdV1(2**63)
    with pytest.raises(InvalidGenerationId):
        GenerationIdV2(1, "5e5fbd5c-0e56-11ec-9a03-0242ac130003")  # type: ignore[arg-type]
