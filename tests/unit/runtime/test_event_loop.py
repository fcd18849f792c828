"""The node process's event loop choice (``ringflow.runtime.run_event_loop``): uvloop when it is
installed unless ``RINGFLOW_EVENT_LOOP=asyncio``; a bad value or a missing uvloop that was asked
for is a ConfigurationError; the coroutine's result comes back on either loop."""

from __future__ import annotations

import asyncio
import sys

import pytest

from ringflow.errors import ConfigurationError
from ringflow.runtime import EVENT_LOOP_ENV, event_loop_name, run_event_loop


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]


def test_uvloop_unless_asked_for_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert event_loop_name() == "uvloop"
    assert run_event_loop(_loop_module()) == "uvloop"
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert event_loop_name() == "asyncio"
    assert run_event_loop(_loop_module()) == "asyncio"
    monkeypatch.setenv(EVENT_LOOP_ENV, "uvloop")
    assert run_event_loop(_loop_module()) == "uvloop"


def test_without_uvloop_the_standard_loop_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # ``import uvloop`` raises ImportError
    assert event_loop_name({}) == "asyncio"
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert run_event_loop(_loop_module()) == "asyncio"
    with pytest.raises(ConfigurationError, match="not installed"):
        event_loop_name({EVENT_LOOP_ENV: "uvloop"})


def test_a_bad_choice_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="expected one of uvloop, asyncio"):
        event_loop_name({EVENT_LOOP_ENV: "trio"})
