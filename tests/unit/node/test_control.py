"""The node's request channel (issue 21 §2): a real Unix socket in the data directory, the
server on an asyncio loop in a thread, the CLI's client calls against it."""

from __future__ import annotations

import asyncio
import socket
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from ringflow.errors import ConfigurationError
from ringflow.node import CONTROL_SOCKET_NAME, ControlServer, control_request, request_until_taken
from ringflow.node._control import MAX_REQUEST_BYTES


class _Node:
    """A ControlServer with handlers that record what they were asked."""

    def __init__(self, directory: Path) -> None:
        self.asked: list[Mapping[str, Any]] = []
        self.busy_for = 0

        def leave(request: Mapping[str, Any]) -> dict[str, Any]:
            self.asked.append(request)
            if self.busy_for > 0:
                self.busy_for -= 1
                return {"accepted": False, "refused": "busy", "retry": True}
            return {"accepted": True}

        def remove(request: Mapping[str, Any]) -> dict[str, Any]:
            self.asked.append(request)
            return {"accepted": False, "refused": "not a ring member", "retry": False}

        self.server = ControlServer(directory, {"decommission": leave, "removenode": remove})
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(5)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture(params=["short", "long"])
def directory(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A data directory; ``long``: its socket path past ``sun_path`` (~107 bytes)."""
    if request.param == "short":
        return tmp_path
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    assert len(str(deep / CONTROL_SOCKET_NAME)) > 108
    return deep


@pytest.fixture
def node(directory: Path) -> Iterator[_Node]:
    found = _Node(directory)
    yield found
    found.stop()


def test_a_request_is_answered_by_its_handler(node: _Node, directory: Path) -> None:
    assert control_request(directory, {"request": "decommission"}) == {"accepted": True}
    assert node.asked == [{"request": "decommission"}]
    answer = control_request(directory, {"request": "removenode", "host_id": "x"})
    assert answer == {"accepted": False, "refused": "not a ring member", "retry": False}
    mode = (directory / CONTROL_SOCKET_NAME).stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600  # the data dir owner's only


def test_a_busy_node_is_asked_again_until_it_takes_the_request(
    node: _Node, directory: Path
) -> None:
    node.busy_for = 3
    request_until_taken(directory, {"request": "decommission"}, time.monotonic() + 10, "leave")
    assert len(node.asked) == 4
    with pytest.raises(ConfigurationError, match="removenode x refused: not a ring member"):
        request_until_taken(
            directory, {"request": "removenode"}, time.monotonic() + 10, "removenode x"
        )
    node.busy_for = 10**6
    with pytest.raises(ConfigurationError, match="not taken in time: busy"):
        request_until_taken(directory, {"request": "decommission"}, time.monotonic() + 0.5, "x")


def _raw(directory: Path, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as connection:
        connection.settimeout(5)
        connection.connect(str(directory / CONTROL_SOCKET_NAME))
        connection.sendall(payload)
        return connection.makefile("rb").readline()


def test_bad_requests_get_an_error_and_the_node_keeps_serving(tmp_path: Path) -> None:
    node = _Node(tmp_path)
    try:
        assert b"not JSON" in _raw(tmp_path, b"{nope\n")
        assert b"expected" in _raw(tmp_path, b'["decommission"]\n')
        unknown = _raw(tmp_path, b'{"request": "drop-everything"}\n')
        assert b"unknown request 'drop-everything'" in unknown
        assert _raw(tmp_path, b"x" * (MAX_REQUEST_BYTES + 10) + b"\n") == b""  # over the limit
        with pytest.raises(ConfigurationError, match="refused the request"):
            control_request(tmp_path, {"request": "nothing"})
        assert control_request(tmp_path, {"request": "decommission"}) == {"accepted": True}
        assert node.asked == [{"request": "decommission"}]
    finally:
        node.stop()
    assert not (tmp_path / CONTROL_SOCKET_NAME).exists()  # removed when the node stops


def test_no_running_node_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no running node"):
        control_request(tmp_path, {"request": "decommission"})
    (tmp_path / CONTROL_SOCKET_NAME).touch()  # a stale file: nobody listens
    with pytest.raises(ConfigurationError, match="did not answer"):
        control_request(tmp_path, {"request": "decommission"})
