"""Local node processes with bounded waits: the launchers of ``ringflow demo`` and of the tests.

* :class:`NodeProcess`: one ``ringflow node start`` process (the hub of the demo, the single
  nodes of the tests). ``start`` waits for its ``... listening on <address>:<port>`` line,
  ``kill`` is SIGKILL (the crash case), ``terminate`` SIGTERM with a bounded wait, and it can be
  started again on the same data directory. Its stderr goes to ``<data>.log``; it runs in its
  own session, so a Ctrl-C in the terminal reaches the caller only.
* :class:`LocalCluster`: a cluster of real node processes laid out, started, killed, restarted
  and stopped by the very code of ``ringflow cluster start|kill|restart|stop``
  (``ringflow.cli._cluster``, run in this process; each node is a ``cluster run-node`` child).
* :class:`NodeGroup`: owns the processes a caller started and stops them all on exit, also after
  Ctrl-C or an error.
* Loopback addresses: :func:`random_loopback_address` and :func:`free_loopback_block` find
  127.a.b.c addresses whose ports are free, so tests of several engineers can run at once on one
  machine (as Cassandra's own tooling gives each node its own loopback address).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol

from ringflow.errors import ConfigurationError, RingflowError

DEFAULT_PORT = 9042
INTERNODE_PORT = 7000
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
CLUSTER_START_TIMEOUT_S = 90.0


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


def random_loopback_address(rng: random.Random | None = None) -> str:
    """A loopback address nobody else is likely to use: 127.a.b.c (each byte in 2..253) with
    port 9042 free."""
    return free_loopback_block(1, rng=rng, ports=(DEFAULT_PORT,))


def free_loopback_block(
    count: int,
    *,
    rng: random.Random | None = None,
    ports: Sequence[int] = (DEFAULT_PORT, INTERNODE_PORT),
) -> str:
    """The first of ``count`` consecutive loopback addresses 127.a.b.(c..c+count-1) whose
    ``ports`` are all free (the CQL and internode ports of a cluster node)."""
    rng = rng or random.Random()
    for _ in range(1000):
        prefix = f"127.{rng.randint(2, 253)}.{rng.randint(2, 253)}"
        last = rng.randint(2, 253 - count)
        addresses = [f"{prefix}.{last + i}" for i in range(count)]
        if all(port_is_free(a, p) for a in addresses for p in ports):
            return addresses[0]
    raise ConfigurationError(f"no free block of {count} loopback addresses found")


def loopback_block(first: str, count: int) -> list[str]:
    """``first`` and the ``count - 1`` addresses after it."""
    prefix, last = first.rsplit(".", 1)
    return [f"{prefix}.{int(last) + i}" for i in range(count)]


class Stoppable(Protocol):
    def stop(self) -> None: ...


# --- one ``ringflow node start`` process ------------------------------------------------------


class NodeProcess:
    """One node process; ``start`` waits for its "listening" line, ``kill`` is SIGKILL."""

    def __init__(
        self,
        data_dir: Path,
        address: str,
        *extra_arguments: str,
        port: int = DEFAULT_PORT,
        name: str = "node",
    ) -> None:
        self.name = name
        self.data_dir = data_dir
        self.address = address
        self.port = port
        self.extra_arguments = extra_arguments
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_line = ""

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def host_id(self) -> str:
        return self.ready_line.split()[2]

    def start(self) -> NodeProcess:
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
                start_new_session=True,  # Ctrl-C in the terminal reaches the caller only
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
                    raise NodeStartError(
                        f"{self.name} did not start in {START_TIMEOUT_S:.0f}s: {self.log()}"
                    )
                if selector.select(remaining):
                    chunk = os.read(process.stdout.fileno(), 4096)
                    if not chunk:
                        code = process.wait(STOP_TIMEOUT_S)
                        self._close_pipe()
                        raise NodeStartError(
                            f"{self.name} exited with {code} before listening: {self.log()}"
                        )
                    buffer += chunk
        line = buffer.split(b"\n", 1)[0].decode(errors="replace")
        if "listening on" not in line:
            self.kill()
            raise NodeStartError(f"{self.name}: unexpected first line {line!r}: {self.log()}")
        return line

    def log(self, size: int = 4000) -> str:
        """The end of the node's log."""
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

    def terminate(self) -> int:
        """SIGTERM and wait for the clean shutdown (SIGKILL if it takes too long); the exit
        code (negative: the signal that ended it)."""
        process = self.process
        if process is None:
            return 0
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)
        self._close_pipe()
        return int(process.returncode)

    def stop(self) -> None:
        try:
            self.terminate()
        except (OSError, subprocess.SubprocessError):
            self.kill()

    def _close_pipe(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> NodeProcess:
        """``with NodeProcess(...) as node``: started, and SIGKILLed on the way out."""
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.kill()


# --- a local cluster: the code of ``ringflow cluster ...`` ------------------------------------


def _cluster_command(*arguments: str) -> None:
    """Run ``ringflow cluster <arguments>`` in this process; its errors propagate."""
    from ringflow.cli import _cluster

    parser = argparse.ArgumentParser(prog="ringflow")
    _cluster.register(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(["cluster", *arguments])
    code = parsed.handler(parsed)
    if code != 0:
        raise RingflowError(f"ringflow cluster {' '.join(arguments)} exited with {code}")


class LocalCluster:
    """``nodes`` real node processes on ``first_address`` and the addresses after it, with
    their data (``cluster.json``, one directory a node) under ``data``."""

    def __init__(
        self,
        data: Path,
        nodes: int = 3,
        *,
        first_address: str = "127.0.0.1",
        num_tokens: int = 4,
        gossip_interval_ms: int = 500,
        timeout_s: float = CLUSTER_START_TIMEOUT_S,
        options: Sequence[str] = (),
    ) -> None:
        self.data = data
        self.options = tuple(options)
        """More ``cluster start`` options for the first start (``--tls``, ``--auth``...)."""
        self.addresses = loopback_block(first_address, nodes)
        self.num_tokens = num_tokens
        self.gossip_interval_ms = gossip_interval_ms
        self.timeout_s = timeout_s

    @property
    def contact_points(self) -> str:
        return ",".join(self.addresses)

    def check_free(self) -> None:
        """ConfigurationError naming the first address whose CQL or internode port is taken."""
        for address in self.addresses:
            for port in (DEFAULT_PORT, INTERNODE_PORT):
                if not port_is_free(address, port):
                    raise ConfigurationError(
                        f"{address}:{port} is in use (another ringflow or Cassandra?): stop it "
                        "or choose other addresses"
                    )

    def start(self) -> LocalCluster:
        """Lay the cluster out (once), start every node and wait until all are UP with one
        schema version and one CDC generation. A start that fails (not ready in time) stops
        the nodes it started: nobody else would (``ringflow cluster start`` leaves them to the
        operator to look at)."""
        try:
            _cluster_command(
                "start",
                *("--nodes", str(len(self.addresses)), "--first-address", self.addresses[0]),
                *("--num-tokens", str(self.num_tokens)),
                *("--gossip-interval-ms", str(self.gossip_interval_ms)),
                *("--timeout", str(self.timeout_s), "--data", str(self.data)),
                *self.options,
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop()
            raise
        return self

    def wait_ready(self) -> None:
        """Start any node that is not running and wait (bounded) for UP + agreement."""
        _cluster_command("start", "--timeout", str(self.timeout_s), "--data", str(self.data))

    def kill(self, address: str) -> None:
        """SIGKILL the node at ``address`` and wait until its process is gone."""
        _cluster_command("kill", address, "--data", str(self.data))

    def restart(self, address: str) -> None:
        """Start the node at ``address`` again on its data (does not wait for it)."""
        _cluster_command("restart", address, "--data", str(self.data))

    def node_dir(self, address: str) -> Path:
        return self.data / f"node{self.addresses.index(address) + 1}"

    def log(self, address: str, size: int = 4000) -> str:
        try:
            return (self.node_dir(address) / "node.log").read_text(errors="replace")[-size:]
        except OSError:
            return "<no log>"

    def stop(self) -> None:
        """SIGTERM every node (SIGKILL after a bounded wait); nothing if never laid out."""
        if (self.data / "cluster.json").exists():
            _cluster_command("stop", "--data", str(self.data))


class NodeGroup:
    """Processes and clusters started by one caller; leaving the ``with`` block stops all."""

    def __init__(self) -> None:
        self.members: list[Stoppable] = []

    def node(self, name: str, address: str, data_dir: Path, *extra_arguments: str) -> NodeProcess:
        """Start a ``node start`` process on ``address`` (9042, or a free port if taken)."""
        node = NodeProcess(data_dir, address, *extra_arguments, port=pick_port(address), name=name)
        self.members.append(node)
        return node.start()

    def cluster(self, cluster: LocalCluster) -> LocalCluster:
        """Start ``cluster`` (stopped with the group, also if the start fails half-way)."""
        cluster.check_free()
        self.members.append(cluster)
        return cluster.start()

    def stop_all(self) -> None:
        for member in reversed(self.members):
            try:
                member.stop()
            except (OSError, subprocess.SubprocessError, RingflowError):
                continue

    def __enter__(self) -> NodeGroup:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop_all()
