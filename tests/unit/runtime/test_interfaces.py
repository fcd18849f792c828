"""Endpoint parsing and the argument checks every implementation shares."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.errors import ClientError, ErrorCode
from ringflow.runtime import (
    TIMER_DELAY_MS_MAX,
    Backpressure,
    EndpointError,
    FrameTooLarge,
    check_delay_ms,
    check_payload,
    format_endpoint,
    parse_endpoint,
)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("127.0.0.1:7000", ("127.0.0.1", 7000)),
        ("node-1.dc1:0", ("node-1.dc1", 0)),
        ("[::1]:9042", ("::1", 9042)),
        ("[fe80::1:2]:65535", ("fe80::1:2", 65535)),
    ],
)
def test_endpoints_parse_and_format_back(text: str, parts: tuple[str, int]) -> None:
    assert parse_endpoint(text) == parts
    assert format_endpoint(*parts) == text


@pytest.mark.parametrize(
    "text", ["", "host", "host:", ":7000", "::1:7000", "host:70000", "a b:1", "host:-1", 7000]
)
def test_malformed_endpoints_are_refused(text: object) -> None:
    with pytest.raises(EndpointError):
        parse_endpoint(text)


@settings(max_examples=50)
@given(
    host=st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True),
    port=st.integers(0, 65535),
)
def test_any_host_and_port_round_trip(host: str, port: int) -> None:
    assert parse_endpoint(format_endpoint(host, port)) == (host, port)


def test_delays_must_be_int_milliseconds_in_range() -> None:
    assert check_delay_ms(0) == 0 and check_delay_ms(TIMER_DELAY_MS_MAX) == TIMER_DELAY_MS_MAX
    for bad in (-1, TIMER_DELAY_MS_MAX + 1, 1.0, True, "5"):
        with pytest.raises(ClientError):
            check_delay_ms(bad)


def test_payloads_must_be_bytes_within_the_limit() -> None:
    assert check_payload(b"abc", 3) == b"abc"
    with pytest.raises(FrameTooLarge) as error:
        check_payload(b"abcd", 3)
    assert "4 bytes" in str(error.value) and error.value.limit == 3
    for bad in (bytearray(b"a"), memoryview(b"a"), "a"):
        with pytest.raises(ClientError):
            check_payload(bad, 3)


def test_backpressure_says_who_and_maps_to_overloaded() -> None:
    error = Backpressure("a:1", "b:2", 16, 16)
    assert error.code is ErrorCode.OVERLOADED
    assert "a:1 -> b:2" in str(error) and (error.queued, error.limit) == (16, 16)
