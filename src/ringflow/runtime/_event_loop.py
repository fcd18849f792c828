"""Which event loop a node process runs on: uvloop (libuv) when it is installed, else asyncio's.

uvloop implements asyncio's event loop API (``call_soon_threadsafe``, ``run_in_executor``,
``start_server`` with TLS, ``BufferedProtocol``, signal handlers), so the node's code is the
same on either; it spends less CPU per socket event, timer and thread hand-off. It is a
dependency on the platforms it supports; ``RINGFLOW_EVENT_LOOP=asyncio`` runs the standard loop
(to compare them, or where uvloop misbehaves), ``=uvloop`` insists on it (an error if it is
missing). Simulated nodes (``ringflow.sim``) have no event loop at all.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from ringflow.errors import ConfigurationError

_T = TypeVar("_T")

EVENT_LOOP_ENV = "RINGFLOW_EVENT_LOOP"
"""Environment variable choosing the loop: ``uvloop``, ``asyncio``, or unset (uvloop if
installed)."""
_CHOICES = ("uvloop", "asyncio")


def event_loop_name(environ: dict[str, str] | None = None) -> str:
    """``uvloop`` or ``asyncio``: the loop :func:`run_event_loop` runs under ``environ``
    (default: this process's environment)."""
    wanted = (os.environ if environ is None else environ).get(EVENT_LOOP_ENV, "").strip()
    if wanted and wanted not in _CHOICES:
        raise ConfigurationError(
            f"{EVENT_LOOP_ENV}={wanted!r}: expected one of {', '.join(_CHOICES)}"
        )
    if wanted == "asyncio":
        return "asyncio"
    try:
        importlib.import_module("uvloop")
    except ImportError:
        if wanted == "uvloop":
            raise ConfigurationError(
                f"{EVENT_LOOP_ENV}=uvloop but uvloop is not installed"
            ) from None
        return "asyncio"
    return "uvloop"


def run_event_loop(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)`` on the loop :func:`event_loop_name` chooses."""
    if event_loop_name() == "uvloop":
        uvloop = importlib.import_module("uvloop")
        result: _T = uvloop.run(main)
        return result
    return asyncio.run(main)
