"""The test process's guard on ``ast.parse`` (tests/conftest.py): source parsed on one thread
while another formats tracebacks (a driver logging reconnection failures) parses every time.
Without the guard, on CPython 3.11, every parse of this test failed with ``SystemError: AST
constructor recursion depth mismatch``."""

from __future__ import annotations

import ast
import threading
import time
import traceback
from pathlib import Path


class _Cycle:
    """Garbage whose finalizer runs Python code (the interpreter may switch threads there,
    in the middle of building an AST)."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def test_source_parses_while_another_thread_formats_tracebacks() -> None:
    source = Path(ast.__file__).read_text(encoding="utf-8")
    stop = threading.Event()
    formatted = 0

    def format_tracebacks() -> None:
        nonlocal formatted
        while not stop.is_set():
            try:
                raise ConnectionRefusedError("the node is gone")
            except ConnectionRefusedError:
                traceback.format_exc()
                formatted += 1

    thread = threading.Thread(target=format_tracebacks, daemon=True)
    thread.start()
    failures: list[str] = []
    try:
        for _ in range(20):
            garbage = [_Cycle() for _ in range(50)]
            del garbage
            try:
                ast.parse(source)
            except SystemError as error:
                failures.append(str(error))
    finally:
        stop.set()
        thread.join(10)
    assert formatted > 0
    assert failures == []
