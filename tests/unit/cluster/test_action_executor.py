"""``ActionExecutor``: the node's one table from action type to the shell that carries it out."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ringflow.cluster.service import ActionExecutor
from ringflow.errors import InternalError


@dataclass(frozen=True)
class _Send:
    to: str


@dataclass(frozen=True)
class _Arm:
    delay_ms: int


@dataclass(frozen=True)
class _Unknown:
    pass


def test_actions_run_in_order_each_by_the_handler_of_its_type() -> None:
    done: list[object] = []
    executor = ActionExecutor()
    executor.register(_Send, lambda action: done.append(("send", action.to)))
    executor.register(_Arm, lambda action: done.append(("arm", action.delay_ms)))
    executor.run([_Send("a"), _Arm(5), _Send("b")])
    assert done == [("send", "a"), ("arm", 5), ("send", "b")]
    assert executor.handles(_Send) and not executor.handles(_Unknown)


def test_a_second_handler_for_a_type_is_a_wiring_fault() -> None:
    executor = ActionExecutor()
    executor.register(_Send, lambda action: None)
    with pytest.raises(InternalError, match="_Send already has a handler"):
        executor.register_all({_Arm: lambda action: None, _Send: lambda action: None})


def test_an_action_without_a_handler_is_never_dropped_silently() -> None:
    done: list[object] = []
    executor = ActionExecutor()
    executor.register(_Send, done.append)
    with pytest.raises(InternalError, match="no handler for the action _Unknown"):
        executor.run([_Send("a"), _Unknown(), _Send("b")])
    assert done == [_Send("a")]  # the batch stops where it failed
