"""RequestDataBudget: all-or-nothing reservations against a per-address and a global limit."""

from __future__ import annotations

import pytest

from ringflow.cql import RequestDataBudget
from ringflow.errors import InternalError


def test_reservations_respect_both_limits_and_release_makes_room() -> None:
    budget = RequestDataBudget(100, 60)
    assert budget.try_reserve("a", 60)
    assert not budget.try_reserve("a", 1), "a's share is full"
    assert budget.try_reserve("b", 40)
    assert not budget.try_reserve("c", 1), "the node's budget is full"
    assert (budget.total, budget.held_by("a"), budget.held_by("c")) == (100, 60, 0)
    budget.release("a", 60)
    assert budget.try_reserve("c", 60)
    budget.validate()


def test_forced_bytes_are_counted_over_the_limit_and_block_new_reservations() -> None:
    budget = RequestDataBudget(10, 10)
    budget.force("a", 15)
    assert budget.total == 15 and not budget.fits("b", 0 + 1)
    budget.release("a", 15)
    assert budget.total == 0 and budget.held_by("a") == 0
    budget.validate()


def test_bad_amounts_are_bugs() -> None:
    budget = RequestDataBudget(10, 5)
    with pytest.raises(InternalError):
        budget.release("a", 1)
    with pytest.raises(InternalError):
        budget.try_reserve("a", -1)
    with pytest.raises(InternalError):
        RequestDataBudget(5, 10)
