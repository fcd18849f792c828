"""A real ``ringflow node start`` process for end-to-end tests, with bounded waits everywhere.

Each node binds a random loopback address (127.x.y.z) on port 9042, so tests of several
engineers can run at once on one machine without port clashes, as Cassandra's own test tooling
gives each node its own loopback address. The process is always killed in teardown.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NATIVE_PORT = 9042
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


def ringflow_command() -> list[str]:
    """The installed ``ringflow`` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "ringflow"
    if not script.exists():
        raise RuntimeError(f"the ringflow console script is not installed next to {sys.executable}")
    return [str(script)]


def random_loopback_address(rng: random.Random | None = None) -> str:
    """A loopback address nobody else is likely to use: 127.a.b.c, each byte in 2..253."""
    rng = rng or random.Random()
    while True:
        address = "127.{}.{}.{}".format(*(rng.randint(2, 253) for _ in range(3)))
        with socket.socket() as probe:
            try:
                probe.bind((address, NATIVE_PORT))
            except OSError:
                continue
        return address


class NodeProcess:
    """One node process; ``start`` waits for its "listening" line, ``kill`` is SIGKILL."""

    def __init__(self, data_dir: Path, address: str, *extra_arguments: str) -> None:
        self.data_dir = data_dir
        self.address = address
        self.port = NATIVE_PORT
        self.extra_arguments = extra_arguments
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_line = ""
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    def start(self) -> NodeProcess:
        command = [
            *ringflow_command(),
            "node",
            "start",
            "--address",
            self.address,
            "--port",
            str(self.port),
            "--data",
            str(self.data_dir),
            "--log-level",
            "INFO",
            *self.extra_arguments,
        ]
        log = self.log_path.open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env
        )
        log.close()
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
                    raise TimeoutError(f"node did not start in {START_TIMEOUT_S}s: {self.log()}")
                if selector.select(remaining):
                    chunk = os.read(process.stdout.fileno(), 4096)
                    if not chunk:
                        process.wait(STOP_TIMEOUT_S)
                        raise RuntimeError(
                            f"node exited with {process.returncode} before listening: {self.log()}"
                        )
                    buffer += chunk
        line = buffer.split(b"\n", 1)[0].decode()
        if "listening on" not in line:
            self.kill()
            raise RuntimeError(f"unexpected first line {line!r}: {self.log()}")
        return line

    @property
    def host_id(self) -> str:
        return self.ready_line.split()[2]

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "<no log>"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (the crash case)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)
        self._close_pipe()

    def terminate(self) -> int:
        """SIGTERM, then wait for the clean shutdown; returns the exit code."""
        process = self.process
        assert process is not None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)
                raise
        self._close_pipe()
        return process.returncode

    def _close_pipe(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
