"""CdcMetadata: the write acceptance window and generation bookkeeping of scylla-cdc.md §4.

Table-driven: each case is (clock, write timestamp) -> the generation used, or the rule that
rejects the write. Generations start at 100 s, 200 s and 300 s; leeway 5 s (Scylla's default).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from ringflow.cdc import (
    CdcArgumentError,
    CdcMetadata,
    CdcWriteRejected,
    GenerationNotLoaded,
    NoGenerationForTimestamp,
    TopologyDescription,
    WriteFromTheFuture,
    WriteTooFarInThePast,
    generate_topology_description,
    new_generation_timestamp,
)
from ringflow.errors import ErrorCode, InvalidRequest

SECOND_US = 1_000_000
LEEWAY_US = 5 * SECOND_US
RING = [-(10**18), 0, 10**18]
TOKEN = 12345


def description(seed: int) -> TopologyDescription:
    return generate_topology_description(RING, lambda token: (4, 12), random.Random(seed))


DESCRIPTIONS = {100_000: description(1), 200_000: description(2), 300_000: description(3)}


def metadata_with(generations_ms: list[int], now_us: int = 0) -> CdcMetadata:
    metadata = CdcMetadata()
    for timestamp_ms in generations_ms:
        assert metadata.insert(timestamp_ms, DESCRIPTIONS[timestamp_ms], now_us)
    return metadata


def s(seconds: float) -> int:
    return round(seconds * SECOND_US)


ACCEPTED = [
    # (case, now µs, write µs, generation (ms) whose stream is used)
    ("write at now", s(250), s(250), 200_000),
    ("exactly now + leeway", s(250), s(255), 200_000),
    ("near future into the next known generation", s(298), s(300), 300_000),
    ("one µs before the next generation", s(298), s(300) - 1, 200_000),
    ("exactly at generation start, long ago", s(250), s(200), 200_000),
    ("exactly now - leeway, in the current generation", s(250), s(245), 200_000),
    ("previous generation within the leeway", s(202), s(199), 100_000),
    ("previous generation one µs inside the leeway", s(202), s(197) + 1, 100_000),
    ("before the switch, old generation still current", s(199), s(150), 100_000),
]

REJECTED: list[tuple[str, int, int, type[CdcWriteRejected]]] = [
    ("one µs beyond now + leeway", s(250), s(255) + 1, WriteFromTheFuture),
    ("far future", s(250), s(400), WriteFromTheFuture),
    ("previous generation beyond the leeway", s(250), s(200) - 1, WriteTooFarInThePast),
    ("previous generation exactly at now - leeway", s(202), s(197), WriteTooFarInThePast),
    ("old write while the next generation already operates", s(300), s(250), WriteTooFarInThePast),
    ("before every generation, within the leeway", s(101), s(99), NoGenerationForTimestamp),
]


@pytest.mark.parametrize(("case", "now_us", "write_us", "generation_ms"), ACCEPTED)
def test_accepted_writes_use_the_generation_operating_at_their_timestamp(
    case: str, now_us: int, write_us: int, generation_ms: int
) -> None:
    metadata = metadata_with([100_000, 200_000, 300_000])
    stream = metadata.get_stream(write_us, TOKEN, now_us)
    assert stream == DESCRIPTIONS[generation_ms].stream_for(TOKEN), case
    metadata.validate()


@pytest.mark.parametrize(("case", "now_us", "write_us", "rule"), REJECTED)
def test_rejected_writes_name_their_rule(
    case: str, now_us: int, write_us: int, rule: type[CdcWriteRejected]
) -> None:
    metadata = metadata_with([100_000, 200_000, 300_000])
    with pytest.raises(rule) as raised:
        metadata.get_stream(write_us, TOKEN, now_us)
    assert raised.value.write_timestamp_us == write_us, case
    assert raised.value.now_us == now_us
    metadata.validate()


def test_recent_previous_generations_accept_writes_around_their_start() -> None:
    """Like Scylla's test_writes_to_recent_previous_cdc_generations: three generations created
    within the leeway; writes at ts-1, ts and ts+1 of each succeed except before the oldest."""
    metadata = CdcMetadata()
    starts_ms = [100_000, 101_000, 102_000]
    for seed, start_ms in enumerate(starts_ms):
        assert metadata.insert(start_ms, description(seed), now_us=s(99))
    now_us = s(103)
    for position, start_ms in enumerate(starts_ms):
        start_us = start_ms * 1000
        for write_us in (start_us - 1, start_us, start_us + 1):
            if write_us < starts_ms[0] * 1000:
                with pytest.raises(NoGenerationForTimestamp):
                    metadata.get_stream(write_us, TOKEN, now_us)
                continue
            used = position if write_us >= start_us else position - 1
            assert metadata.get_stream(write_us, TOKEN, now_us) == description(used).stream_for(
                TOKEN
            )


def test_generation_units_are_milliseconds_and_writes_microseconds() -> None:
    metadata = metadata_with([100_000, 200_000])
    now_us = s(200)
    assert metadata.get_stream(200_000_000, TOKEN, now_us) == DESCRIPTIONS[200_000].stream_for(
        TOKEN
    )
    assert metadata.get_stream(199_999_999, TOKEN, now_us) == DESCRIPTIONS[100_000].stream_for(
        TOKEN
    )


def test_empty_metadata_rejects_recent_writes_as_no_generation() -> None:
    with pytest.raises(NoGenerationForTimestamp, match="could not find any CDC stream"):
        CdcMetadata().get_stream(s(10), TOKEN, s(10))


def test_empty_metadata_rejects_old_writes_as_too_far_in_the_past_first() -> None:
    with pytest.raises(WriteTooFarInThePast):
        CdcMetadata().get_stream(s(1), TOKEN, s(10))


def test_future_rule_is_checked_before_anything_else() -> None:
    with pytest.raises(WriteFromTheFuture):
        CdcMetadata().get_stream(s(16), TOKEN, s(10))


def test_prepared_generation_rejects_its_writes_until_loaded() -> None:
    metadata = metadata_with([100_000, 200_000])
    assert metadata.prepare(300_000, now_us=s(250)) is True
    with pytest.raises(GenerationNotLoaded) as raised:
        metadata.get_stream(s(301), TOKEN, s(300))
    assert raised.value.generation_timestamp_us == s(300)
    assert "could not load" in str(raised.value)
    assert metadata.get_stream(s(299), TOKEN, s(298)) == DESCRIPTIONS[200_000].stream_for(TOKEN)
    assert metadata.insert(300_000, DESCRIPTIONS[300_000], now_us=s(300))
    assert metadata.get_stream(s(301), TOKEN, s(300)) == DESCRIPTIONS[300_000].stream_for(TOKEN)


def test_prepare_reports_whether_data_is_still_needed() -> None:
    metadata = metadata_with([100_000, 200_000])
    assert metadata.prepare(300_000, now_us=s(250)) is True
    assert metadata.prepare(300_000, now_us=s(250)) is True  # prepared twice: still needed
    assert metadata.prepare(200_000, now_us=s(250)) is False  # loaded already
    assert metadata.prepare(150_000, now_us=s(250)) is False  # superseded by 200 s <= now - 5 s


def test_known_or_obsolete() -> None:
    metadata = metadata_with([100_000, 200_000])
    metadata.prepare(300_000, now_us=s(250))
    assert metadata.known_or_obsolete(100_000, now_us=s(150))  # loaded
    assert not metadata.known_or_obsolete(300_000, now_us=s(250))  # prepared only
    assert not metadata.known_or_obsolete(250_000, now_us=s(250))  # unknown, not superseded
    assert not metadata.known_or_obsolete(150_000, now_us=s(205) - 1)  # 200 s > now - leeway
    assert metadata.known_or_obsolete(150_000, now_us=s(205))  # 200 s == now - leeway


def test_insert_is_a_no_op_when_known_or_obsolete() -> None:
    metadata = metadata_with([100_000, 200_000])
    assert not metadata.insert(200_000, DESCRIPTIONS[300_000], now_us=s(250))
    assert metadata.description_at(200_000) is DESCRIPTIONS[200_000]
    assert not metadata.insert(150_000, DESCRIPTIONS[300_000], now_us=s(250))
    assert metadata.description_at(150_000) is None


def test_old_generations_are_collected() -> None:
    metadata = metadata_with([100_000, 200_000, 300_000])
    metadata.get_stream(s(204), TOKEN, s(204))  # 199 s still in the first generation
    assert metadata.generation_timestamps_us == (s(100), s(200), s(300))
    metadata.get_stream(s(250), TOKEN, s(250))  # generation at 245 s is the second one
    assert metadata.generation_timestamps_us == (s(200), s(300))
    assert metadata.insert(400_000, description(4), now_us=s(310))
    assert metadata.generation_timestamps_us == (s(300), s(400))
    metadata.validate()


def test_streams_available() -> None:
    metadata = CdcMetadata()
    assert not metadata.streams_available(s(500))
    metadata.prepare(100_000, now_us=0)
    assert not metadata.streams_available(s(100) - 1)
    assert metadata.streams_available(s(100))  # a prepared generation counts, as in Scylla


def test_late_generation_is_counted() -> None:
    metadata = metadata_with([100_000, 200_000])
    metadata.get_stream(s(250), TOKEN, s(250))
    assert metadata.prepare(240_000, now_us=s(250))
    assert metadata.late_generation_count == 1
    assert metadata.prepare(260_000, now_us=s(250))
    assert metadata.late_generation_count == 1


@pytest.mark.parametrize(
    ("leeway_us", "now_us", "write_us", "outcome"),
    [
        (0, s(250), s(250), None),
        (0, s(250), s(250) + 1, WriteFromTheFuture),
        (300 * SECOND_US, s(250), s(540), None),
        (300 * SECOND_US, s(250), s(150), None),
    ],
)
def test_leeway_is_a_constructor_argument(
    leeway_us: int, now_us: int, write_us: int, outcome: type[CdcWriteRejected] | None
) -> None:
    metadata = CdcMetadata(leeway_us=leeway_us)
    for timestamp_ms in (100_000, 200_000):
        metadata.insert(timestamp_ms, DESCRIPTIONS[timestamp_ms], now_us=0)
    if outcome is None:
        assert metadata.get_stream(write_us, TOKEN, now_us) in set(
            DESCRIPTIONS[100_000].all_streams()
        ) | set(DESCRIPTIONS[200_000].all_streams())
    else:
        with pytest.raises(outcome):
            metadata.get_stream(write_us, TOKEN, now_us)


@pytest.mark.parametrize(
    ("rule", "call", "fragments"),
    [
        (
            WriteFromTheFuture,
            lambda m: m.get_stream(s(260), TOKEN, s(250)),
            ['"from the future"', "1970-01-01 00:04:20.000000 UTC", "00:04:10.000000 UTC"],
        ),
        (
            WriteTooFarInThePast,
            lambda m: m.get_stream(s(150), TOKEN, s(250)),
            ['"from the past"', "00:02:30.000000 UTC", "started at: 1970-01-01 00:03:20"],
        ),
    ],
)
def test_messages_name_the_rule_and_readable_timestamps(
    rule: type[CdcWriteRejected], call: Callable[[CdcMetadata], object], fragments: list[str]
) -> None:
    with pytest.raises(rule) as raised:
        call(metadata_with([100_000, 200_000]))
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_rejections_are_invalid_requests() -> None:
    for rule in (WriteFromTheFuture, WriteTooFarInThePast, NoGenerationForTimestamp):
        assert issubclass(rule, CdcWriteRejected)
        assert issubclass(rule, InvalidRequest)
    assert issubclass(GenerationNotLoaded, CdcWriteRejected)
    assert CdcWriteRejected.code == ErrorCode.INVALID


def test_new_generation_timestamp() -> None:
    assert new_generation_timestamp(1_000_000) == 1_065_000  # now + 2 * 30 s + 5 s
    assert new_generation_timestamp(1_000_000, ring_delay_ms=1_000, leeway_ms=0) == 1_002_000
    assert new_generation_timestamp(1_000_000, ring_delay_ms=0) == 1_000_000
    with pytest.raises(CdcArgumentError):
        new_generation_timestamp(1_000_000, ring_delay_ms=-1)


def test_arguments_are_validated() -> None:
    with pytest.raises(CdcArgumentError):
        CdcMetadata(leeway_us=-1)
    metadata = metadata_with([100_000])
    with pytest.raises(CdcArgumentError):
        metadata.get_stream(s(100), 2**63, s(100))
    with pytest.raises(CdcArgumentError):
        metadata.insert(1.5, DESCRIPTIONS[100_000], now_us=0)  # type: ignore[arg-type]
    with pytest.raises(CdcArgumentError):
        metadata.insert(200_000, "description", now_us=0)  # type: ignore[arg-type]
