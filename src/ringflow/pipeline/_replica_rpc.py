"""A loopback RPC between the job's coordinator and its sources' planner processes.

Spark runs each streaming query's Python source planner (``latestOffset``, ``partitions``,
``commit``) in a Python process of its own, started by the JVM; the coordinator lives in the
job's driver process. They talk over ``multiprocessing.connection`` on 127.0.0.1 with a random
32-byte ``authkey`` (an HMAC challenge on connect: a process without the key gets nothing).
The key travels to the sources as the data source option ``coordinator_token``, which Spark
redacts in plans and logs (its default ``spark.redaction.regex`` covers "token"); nothing here
logs it.

Messages are JSON objects: ``{"method": name, "params": {...}}`` answered by ``{"result": ...}``
or ``{"error": text}``. Bounds: at most ``max_connections`` clients at once (others are closed
on accept), ``MAX_MESSAGE_BYTES`` a message, and a client waits at most ``timeout_s`` for an
answer (:class:`CoordinatorError` then, as for any refusal).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import socket
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Client, Connection, Listener
from typing import Any, Final

from ringflow.pipeline._replica_offsets import CoordinatorError

MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024
DEFAULT_MAX_CONNECTIONS: Final = 64
DEFAULT_TIMEOUT_S: Final = 120.0
_LOG = logging.getLogger("ringflow.replica")

Handler = Callable[[str, Mapping[str, Any]], Any]


def new_token() -> str:
    """A fresh authkey, as hex text (the ``coordinator_token`` option)."""
    return secrets.token_hex(32)


class RpcServer:
    """Serves ``handler(method, params)`` to authenticated loopback clients, one thread each."""

    def __init__(
        self, handler: Handler, token: str, *, max_connections: int = DEFAULT_MAX_CONNECTIONS
    ) -> None:
        if max_connections < 1:
            raise CoordinatorError(f"max_connections must be >= 1, got {max_connections}")
        self._handler = handler
        self._token = token.encode()
        self._listener = Listener(("127.0.0.1", 0), authkey=self._token)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="replica-rpc", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._listener.address
        return f"{host}:{port}"

    def start(self) -> RpcServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting. The accept loop is woken by a bare TCP connection of our own, closed
        at once (its challenge fails, the loop sees it stopping): an authenticated ``Client``
        would wait, without a timeout, for a challenge the loop never sends once it has
        returned (a client accepted just after ``_stopping`` was set ends it): stop then hung."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        with contextlib.suppress(OSError):
            socket.create_connection(self._listener.address, timeout=1.0).close()
        self._thread.join(10)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                connection = self._listener.accept()
            except Exception:  # a client that failed the challenge, or the listener closed
                if self._stopping.is_set():
                    return
                _LOG.warning("replica coordinator: refused a connection")
                continue
            if self._stopping.is_set():
                connection.close()
                return
            if not self._slots.acquire(blocking=False):
                _LOG.warning("replica coordinator: too many connections; closing one")
                connection.close()
                continue
            threading.Thread(
                target=self._serve, args=(connection,), name="replica-rpc-conn", daemon=True
            ).start()

    def _serve(self, connection: Connection) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    message = connection.recv_bytes(MAX_MESSAGE_BYTES)
                except (EOFError, OSError):
                    return
                connection.send_bytes(self._answer(message))
        finally:
            connection.close()
            self._slots.release()

    def _answer(self, message: bytes) -> bytes:
        try:
            request = json.loads(message)
            method, params = request["method"], request.get("params") or {}
            if not isinstance(method, str) or not isinstance(params, dict):
                raise CoordinatorError("a request is {'method': str, 'params': dict}")
            reply: dict[str, Any] = {"result": self._handler(method, params)}
        except Exception as error:  # every failure goes back to the caller, typed by name
            reply = {"error": f"{type(error).__name__}: {error}"}
        return json.dumps(reply).encode()


class RpcClient:
    """One connection to the coordinator, opened on first use (not picklable: a source drops
    it when Spark pickles it, and connects again where it is unpickled)."""

    def __init__(self, address: str, token: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise CoordinatorError(f"coordinator address must be host:port, got {address!r}")
        self._address = (host, int(port))
        self._token = token.encode()
        self._timeout_s = timeout_s
        self._connection: Connection | None = None

    def call(self, method: str, timeout_s: float | None = None, **params: Any) -> Any:
        connection = self._connect()
        try:
            connection.send_bytes(json.dumps({"method": method, "params": params}).encode())
            if not connection.poll(timeout_s or self._timeout_s):
                raise CoordinatorError(f"the coordinator did not answer {method} in time")
            reply = json.loads(connection.recv_bytes(MAX_MESSAGE_BYTES))
        except (OSError, EOFError) as error:
            self.close()
            raise CoordinatorError(f"the coordinator is gone ({method}): {error}") from None
        except CoordinatorError:
            self.close()  # an answer may still arrive: never read it as the next one's
            raise
        if "error" in reply:
            raise CoordinatorError(f"coordinator: {reply['error']}")
        return reply.get("result")

    def _connect(self) -> Connection:
        if self._connection is None:
            try:
                self._connection = Client(self._address, authkey=self._token)
            except Exception as error:  # refused, or the key does not match
                raise CoordinatorError(
                    f"cannot reach the coordinator at {self._address[0]}:{self._address[1]}: "
                    f"{type(error).__name__}"
                ) from None
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
