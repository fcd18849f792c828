"""Coordinator errors reach the client as their own protocol errors, fields included.

A coordinator raises Unavailable, timeouts and failures (``ringflow.errors`` types, answered by
type, not by reading fields off whatever carries the code); the executor must answer
0x1000 / 0x1100 / 0x1200 / 0x1300 / 0x1500 with the figures a driver reads (cassandra-core.md
§5.2), never ServerError.
"""

from __future__ import annotations

import pytest

from ringflow.cql import response_for_error
from ringflow.errors import Consistency as CL
from ringflow.errors import (
    ErrorCode,
    ReadFailure,
    ReadTimeout,
    RingflowError,
    Unavailable,
    WriteFailure,
    WriteTimeout,
    WriteType,
)

CASES: list[tuple[RingflowError, ErrorCode, dict[str, object]]] = [
    (Unavailable(CL.QUORUM, 2, 1), ErrorCode.UNAVAILABLE, {"required": 2, "alive": 1}),
    (
        WriteTimeout(CL.ALL, 2, 3, WriteType.SIMPLE),
        ErrorCode.WRITE_TIMEOUT,
        {"received": 2, "block_for": 3, "write_type": WriteType.SIMPLE},
    ),
    (
        ReadTimeout(CL.QUORUM, 1, 2, False),
        ErrorCode.READ_TIMEOUT,
        {"received": 1, "block_for": 2, "data_present": False},
    ),
    (
        WriteFailure(CL.QUORUM, 1, 2, 2, WriteType.BATCH),
        ErrorCode.WRITE_FAILURE,
        {"received": 1, "block_for": 2, "failure_count": 2, "write_type": WriteType.BATCH},
    ),
    (
        ReadFailure(CL.LOCAL_QUORUM, 0, 2, 1, True),
        ErrorCode.READ_FAILURE,
        {"received": 0, "block_for": 2, "failure_count": 1, "data_present": True},
    ),
]


@pytest.mark.parametrize(("error", "code", "fields"), CASES, ids=[c[1].name for c in CASES])
def test_coordinator_errors_keep_their_code_and_fields(
    error: RingflowError, code: ErrorCode, fields: dict[str, object]
) -> None:
    response, internal = response_for_error(error)
    assert not internal
    assert response.code is code
    assert response.consistency == error.consistency  # type: ignore[attr-defined]
    for name, value in fields.items():
        assert getattr(response, name) == value


def test_an_error_with_a_coordinator_code_but_not_its_type_is_a_server_error() -> None:
    """Answered by type: a RingflowError that only borrows the code (no figures to send) is a
    bug, not a half-filled Unavailable."""

    class Borrowed(RingflowError):
        code = ErrorCode.UNAVAILABLE

    response, internal = response_for_error(Borrowed("no figures"))
    assert internal
    assert response.code is ErrorCode.SERVER_ERROR
