"""``ringflow.errors.invariant``: always on, its message made only when the check fails."""

from __future__ import annotations

import pytest

from ringflow.errors import InternalError, invariant


def test_a_holding_check_never_makes_its_message() -> None:
    def message() -> str:
        raise AssertionError("made although the check held")

    invariant(True, message)


def test_a_failing_check_raises_with_its_message_made_then() -> None:
    made: list[int] = []

    def message() -> str:
        made.append(1)
        return "window count 7 out of range"

    with pytest.raises(InternalError, match="window count 7 out of range"):
        invariant(False, message)
    assert made == [1]
    with pytest.raises(InternalError, match="a plain message"):
        invariant(False, "a plain message")
