"""Real ``ringflow node start`` processes for ``ringflow demo``, with bounded waits everywhere.

A :class:`DemoNode` runs the installed ``ringflow`` script (or ``python -c`` on
:func:`ringflow.cli.main` when the script is missing) as a child process, waits for its
``... listening on <address>:<port>`` line, and can be SIGKILLed (the crash case) and started
again on the same data directory. Its stderr goes to ``<data>.log``. :class:`NodeGroup` owns
every node the demo started and stops them all on exit, also after Ctrl-C or an error.

One edge node for now: the 3-node RF 3 edge with a node kill comes with the cluster issue
(``ringflow cluster start``).
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from ringflow.errors import ConfigurationError, RingflowError

DEFAULT_PORT = 9042
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


class NodeStartError(RingflowError):
    """A node process exited or stayed silent instead of listening."""


def ringflow_command() -> list[str]:
    """How to run ``ringflow``: the console script next to this interpreter, else ``-c``."""
    script = Path(sys.executable).parent / "ringflow"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from ringflow.cli import main; sys.exit(main())"]


def port_is_free(address: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def pick_port(address: str, preferred: int = DEFAULT_PORT) -> int:
    """``preferred`` if ``address:preferred`` is free, else a port the OS picks."""
    if port_is_free(address, preferred):
        return preferred
    with socket.socket() as probe:
        try:
            probe.bind((address, 0))
        except OSError as error:
            raise ConfigurationError(f"cannot bind {address}: {error}") from None
        return int(probe.getsockname()[1])


class DemoNode:
    """One node process; ``start`` waits for its "listening" line, ``kill`` is SIGKILL."""

    def __init__(
        self, name: str, address: str, port: int, data_dir: Path, *extra_arguments: str
    ) -> None:
        self.name = name
        self.extra_arguments = extra_arguments
        self.address = address
        self.port = port
        self.data_dir = data_dir
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_line = ""

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"

    def start(self) -> DemoNode:
        if self.alive():
            return self
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        command = [
            *ringflow_command(),
            *("node", "start", "--address", self.address, "--port", str(self.port)),
            *("--data", str(self.data_dir), "--log-level", "INFO"),
            *self.extra_arguments,
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # Ctrl-C in the terminal reaches the demo only
            )
        self.ready_line = self._wait_ready()
        return self

    def _wait_ready(self) -> str:
        process = self.process
        assert process is not None and process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while b"\n" not in buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.kill()
                    raise NodeStartError(f"{self.name} did not start in {START_TIMEOUT_S:.0f}s")
                if selector.select(remaining):
                    chunk = os.read(process.stdout.fileno(), 4096)
                    if not chunk:
                        self.kill()
                        raise NodeStartError(
                            f"{self.name} exited before listening: {self.log_tail()}"
                        )
                    buffer += chunk
        line = buffer.split(b"\n", 1)[0].decode(errors="replace")
        if "listening on" not in line:
            self.kill()
            raise NodeStartError(f"{self.name}: unexpected first line {line!r}")
        return line

    def log_tail(self, size: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return "<no log>"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (the crash case)."""
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(STOP_TIMEOUT_S)
        self._close_pipe()

    def terminate(self) -> None:
        """SIGTERM and wait for the clean shutdown; SIGKILL if it takes too long."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


class NodeGroup:
    """The demo's nodes; leaving the ``with`` block stops every one of them."""

    def __init__(self) -> None:
        self.nodes: list[DemoNode] = []

    def start(self, name: str, address: str, data_dir: Path, *extra_arguments: str) -> DemoNode:
        node = DemoNode(name, address, pick_port(address), data_dir, *extra_arguments)
        self.nodes.append(node)
        return node.start()

    def stop_all(self) -> None:
        for node in reversed(self.nodes):
            try:
                node.terminate()
            except (OSError, subprocess.SubprocessError):
                node.kill()

    def __enter__(self) -> NodeGroup:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop_all()
