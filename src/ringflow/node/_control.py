"""The operator's request channel of a running node: a Unix socket in its data directory.

``ringflow cluster|node decommission``, ``removenode`` and ``new-cdc-generation`` reach the node
here (as ``nodetool`` reaches Cassandra over a local JMX port): the CLI connects to
``<data dir>/control.sock``, sends one request, a JSON object on one line
(``{"request": "decommission"}``, ``{"request": "removenode", "host_id": "..."}``,
``{"request": "new-cdc-generation"}``), and reads one answer line: ``{"accepted": true}``, or
``{"accepted": false, "refused": why, "retry": bool}`` (``retry``: the node cannot take it yet,
e.g. another topology change is running, or the node to remove is not convicted dead yet), or
``{"error": why}`` for a request it does not understand. The node handles each request on its
event loop as it comes: nothing is polled, and the CLI learns at once whether it was taken.

Only the data directory's owner can use it: the socket is created owner-only (``0600``), the
same guard the request files it replaces had, and it is reachable from nowhere but this
machine. Limits: a request line of at most ``MAX_REQUEST_BYTES``, ``MAX_CONNECTIONS`` at once
(more are closed at once), ``REQUEST_TIMEOUT_S`` to send the request. A socket path longer than
``sun_path`` allows (~107 bytes) is reached through ``/proc/self/fd`` of its directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from ringflow.errors import ConfigurationError

CONTROL_SOCKET_NAME: Final = "control.sock"
MAX_REQUEST_BYTES: Final = 64 * 1024
MAX_CONNECTIONS: Final = 8
REQUEST_TIMEOUT_S: Final = 5.0
_SUN_PATH_MAX: Final = 100

Handler = Callable[[Mapping[str, Any]], dict[str, Any]]
"""One request kind's handler: the request object -> the answer object (on the event loop)."""

_log = logging.getLogger(__name__)


@contextlib.contextmanager
def _socket_path(directory: Path) -> Iterator[str]:
    """A path to ``directory``'s control socket that fits ``sun_path``."""
    path = str(directory / CONTROL_SOCKET_NAME)
    if len(path.encode()) <= _SUN_PATH_MAX:
        yield path
        return
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{descriptor}/{CONTROL_SOCKET_NAME}"
    finally:
        os.close(descriptor)


class ControlServer:
    """The node side: answers each request with its handler (module docstring)."""

    def __init__(self, directory: Path, handlers: Mapping[str, Handler]) -> None:
        self.directory = directory
        self.handlers = dict(handlers)
        self._server: asyncio.AbstractServer | None = None
        self._connections = 0

    async def start(self) -> None:
        """Listen on ``<directory>/control.sock`` (a stale one from a killed node replaced)."""
        (self.directory / CONTROL_SOCKET_NAME).unlink(missing_ok=True)
        old_mask = os.umask(0o177)
        try:
            with _socket_path(self.directory) as path:
                self._server = await asyncio.start_unix_server(
                    self._serve, path=path, limit=MAX_REQUEST_BYTES
                )
        finally:
            os.umask(old_mask)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        (self.directory / CONTROL_SOCKET_NAME).unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._connections >= MAX_CONNECTIONS:
            writer.close()
            return
        self._connections += 1
        try:
            try:
                line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT_S)
            except (TimeoutError, ValueError, ConnectionError):  # slow, too long, or gone
                return
            writer.write(json.dumps(self.answer(line)).encode() + b"\n")
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            self._connections -= 1
            writer.close()

    def answer(self, line: bytes) -> dict[str, Any]:
        """The answer to one request line (module docstring)."""
        try:
            request = json.loads(line)
        except ValueError:
            return {"error": "the request is not JSON"}
        if not isinstance(request, dict) or not isinstance(request.get("request"), str):
            return {"error": 'expected {"request": NAME, ...}'}
        handler = self.handlers.get(request["request"])
        if handler is None:
            known = ", ".join(sorted(self.handlers))
            return {"error": f"unknown request {request['request']!r} (known: {known})"}
        _log.info("operator request: %s", request["request"])
        return handler(request)


def control_request(
    directory: Path, request: Mapping[str, Any], timeout_s: float = REQUEST_TIMEOUT_S
) -> dict[str, Any]:
    """Send one request to the node running in ``directory`` and return its answer;
    ConfigurationError when no node answers there or the answer is an error."""
    if not (directory / CONTROL_SOCKET_NAME).exists():
        raise ConfigurationError(f"no running node in {directory} (no {CONTROL_SOCKET_NAME})")
    with _socket_path(directory) as path, socket.socket(socket.AF_UNIX) as connection:
        connection.settimeout(timeout_s)
        try:
            connection.connect(path)
            connection.sendall(json.dumps(dict(request)).encode() + b"\n")
            answer = connection.makefile("rb").readline(MAX_REQUEST_BYTES)
        except OSError as error:
            raise ConfigurationError(f"the node in {directory} did not answer: {error}") from None
    try:
        found = json.loads(answer)
    except ValueError:
        raise ConfigurationError(f"the node in {directory} closed the request unanswered") from None
    if not isinstance(found, dict) or "error" in found:
        raise ConfigurationError(f"the node in {directory} refused the request: {found}")
    return found


def request_until_taken(
    directory: Path, request: Mapping[str, Any], deadline: float, what: str
) -> None:
    """Send ``request`` until the node takes it: again every 0.2 s while it answers ``retry``
    (until the ``time.monotonic`` ``deadline``); ConfigurationError naming ``what`` when it
    refuses for good or the deadline passes."""
    while True:
        answer = control_request(directory, request)
        if answer.get("accepted"):
            return
        if not answer.get("retry"):
            raise ConfigurationError(f"{what} refused: {answer.get('refused')}")
        if time.monotonic() > deadline:
            raise ConfigurationError(f"{what} not taken in time: {answer.get('refused')}")
        time.sleep(0.2)
