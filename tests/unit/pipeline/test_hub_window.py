"""The hub sink's window of requests in flight across rounds (``_hub._Window``): never more than
its limit, every request answered before ``drain`` returns, the first failure raised."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from ringflow.pipeline._hub import _Window


class _Future:
    def __init__(self) -> None:
        self.callbacks: tuple[Callable[[Any], None], Callable[[Any], None]] | None = None

    def add_callbacks(self, ok: Callable[[Any], None], failed: Callable[[Any], None]) -> None:
        self.callbacks = (ok, failed)


class _Session:
    """Holds each request until :meth:`answer_all` (from any thread), which fails those named
    in ``fail``; tracks how many are in flight."""

    def __init__(self, fail: frozenset[int] = frozenset()) -> None:
        self.fail = fail
        self.lock = threading.Lock()
        self.open: list[tuple[int, _Future]] = []
        self.sent = 0
        self.in_flight = 0
        self.most = 0

    def execute_async(self, request: int, values: object) -> _Future:
        future = _Future()
        with self.lock:
            self.sent += 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.open.append((request, future))
        return future

    def answer_all(self) -> None:
        with self.lock:
            due, self.open = self.open, []
        for request, future in due:
            assert future.callbacks is not None
            with self.lock:
                self.in_flight -= 1
            ok, failed = future.callbacks
            if request in self.fail:
                failed(RuntimeError(f"request {request} refused"))
            else:
                ok(None)


def _answering(session: _Session, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        while not stop.is_set():
            session.answer_all()
            stop.wait(0.001)
        session.answer_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("limit", [1, 3, 32])
def test_at_most_limit_in_flight_and_drain_waits_for_every_answer(limit: int) -> None:
    session = _Session()
    window = _Window(session, limit)  # type: ignore[arg-type]
    stop = threading.Event()
    thread = _answering(session, stop)
    try:
        for request in range(200):
            window.send(request, None)
        window.drain()
        assert session.sent == 200
        assert session.in_flight == 0 and window.pending == 0
        assert 1 <= session.most <= limit
    finally:
        stop.set()
        thread.join()


def test_the_first_failure_is_raised_by_drain_and_by_the_next_send() -> None:
    session = _Session(fail=frozenset({5}))
    window = _Window(session, 4)  # type: ignore[arg-type]
    for request in range(4):
        window.send(request, None)
    session.answer_all()
    for request in range(4, 8):
        window.send(request, None)
    session.answer_all()
    with pytest.raises(RuntimeError, match="request 5 refused"):
        window.send(8, None)
    with pytest.raises(RuntimeError, match="request 5 refused"):
        window.drain()
    assert window.pending == 0


def test_a_request_the_driver_refuses_at_once_frees_its_slot() -> None:
    class Refusing(_Session):
        def execute_async(self, request: int, values: object) -> _Future:
            raise ConnectionError("no host")

    window = _Window(Refusing(), 1)  # type: ignore[arg-type]
    for _ in range(3):
        with pytest.raises(ConnectionError):
            window.send(0, None)
    window.drain()
    assert window.pending == 0
