"""A Spark standalone cluster for tests: a master and workers started from the pyspark package
(``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``),
each a child process in its own process group, on its own loopback address.

Everything binds loopback: each daemon gets ``--host`` and ``SPARK_LOCAL_IP`` of its address and
port 0 for its RPC and web UI ports (their ports are read from its log); the master's REST
submission server (a fixed port 6066) is off. Work and local directories are under ``base``.
``SPARK_HOME`` is the session's home of links (:func:`ringflow.pipeline._spark_session.
worker_spark_home`), so the executors' Python workers import the installed pyspark and ringflow.
:meth:`StandaloneCluster.stop` sends SIGTERM to every group (a worker's executors and their
Python processes are in its group), then SIGKILL to what is left after a bounded wait.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import pyspark

from ringflow.pipeline._spark_session import worker_spark_home

START_TIMEOUT_S = 180.0  # daemons on a loaded 2-core machine: generous, never an assertion of speed
STOP_TIMEOUT_S = 20.0
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_PROPERTIES = {
    "spark.master.rest.enabled": "false",
    "spark.worker.cleanup.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
# Variables of the test process that would steer Spark in a child (a session of the test
# process may have set some of them for itself).
SPARK_VARIABLES = (
    "SPARK_LOCAL_IP",
    "SPARK_LOCAL_HOSTNAME",
    "SPARK_CONF_DIR",
    "PYSPARK_SUBMIT_ARGS",
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
)


def spark_home() -> Path:
    """The home of links to the installed pyspark (the one ringflow's sessions use)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ringflow"
    return worker_spark_home(Path(pyspark.__file__).parent, cache)


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the Spark variables a session of it may have set,
    with ``SPARK_HOME`` the home of links, and ``extra``."""
    environment = {k: v for k, v in os.environ.items() if k not in SPARK_VARIABLES}
    environment["SPARK_HOME"] = str(spark_home())
    environment.update(extra or {})
    return environment


class _Daemon:
    """One ``spark-class`` child: its log, and what it printed."""

    def __init__(self, name: str, arguments: list[str], address: str, base: Path) -> None:
        self.name = name
        self.log = base / f"{name}.log"
        environment = child_environment(
            {
                "SPARK_LOCAL_IP": address,
                "SPARK_LOCAL_DIRS": str(base / f"{name}-local"),
                "SPARK_DAEMON_MEMORY": "512m",
                "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
            }
        )
        command = [str(spark_home() / "bin" / "spark-class"), *arguments]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, deadline: float) -> re.Match[str]:
        """The first match of ``pattern`` in the log; AssertionError if the daemon exits or the
        deadline passes first."""
        while True:
            match = re.search(pattern, self.text())
            if match:
                return match
            running = self.process.poll() is None
            assert running and time.monotonic() < deadline, (
                f"{self.name}: no {pattern!r} (exit {self.process.returncode})\n"
                + self.text()[-3000:]
            )
            time.sleep(0.1)

    def signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, number)

    def gone(self) -> bool:
        self.process.poll()  # reap the leader: a zombie would keep its group "alive"
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return True
        return False


class StandaloneCluster:
    """A master on ``addresses[0]`` and a worker on each following address (``cores`` and
    ``memory`` each), started together; ``url`` is the master's ``spark://`` URL."""

    def __init__(self, base: Path, addresses: list[str], cores: int = 2, memory: str = "1g"):
        self.base = base
        self.addresses = addresses
        self.cores = cores
        self.memory = memory
        self.daemons: list[_Daemon] = []
        self.url = ""
        self.start_s = 0.0
        self.starting: Future[StandaloneCluster] | None = None

    @property
    def work_dirs(self) -> list[Path]:
        """Each worker's work directory (``<app id>/<executor id>/`` is an executor's cwd)."""
        return [self.base / f"worker-{index}" for index in range(1, len(self.addresses))]

    def start(self) -> StandaloneCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        properties = self.base / "daemons.conf"
        properties.write_text("".join(f"{k} {v}\n" for k, v in DAEMON_PROPERTIES.items()))
        started = time.monotonic()
        deadline = started + START_TIMEOUT_S
        master_address, *worker_addresses = self.addresses
        master = self._daemon("master", MASTER_CLASS, master_address, properties)
        port = master.wait_for(r"Starting Spark master at spark://[0-9.]+:([0-9]+)", deadline)
        self.url = f"spark://{master_address}:{port.group(1)}"
        workers = [
            self._daemon(f"worker-{index}", WORKER_CLASS, address, properties)
            for index, address in enumerate(worker_addresses, start=1)
        ]
        for worker in workers:
            worker.wait_for("Successfully registered with master", deadline)
        self.start_s = time.monotonic() - started
        return self

    def start_in_background(self) -> None:
        """:meth:`start` in a thread (the JVMs start while the caller goes on); then
        :meth:`wait_started`."""
        pool = ThreadPoolExecutor(1)
        self.starting = pool.submit(self.start)
        pool.shutdown(wait=False)  # the thread ends with the start

    def wait_started(self) -> StandaloneCluster:
        assert self.starting is not None, "start_in_background first"
        return self.starting.result()

    def _daemon(self, name: str, main: str, address: str, properties: Path) -> _Daemon:
        arguments = [main, "--host", address, "--port", "0", "--webui-port", "0"]
        arguments += ["--properties-file", str(properties)]
        if name.startswith("worker-"):
            work = self.base / name
            work.mkdir(exist_ok=True)
            arguments += ["--cores", str(self.cores), "--memory", self.memory]
            arguments += ["--work-dir", str(work), self.url]
        daemon = _Daemon(name, arguments, address, self.base)
        self.daemons.append(daemon)
        return daemon

    def applications(self) -> list[tuple[str, str]]:
        """(app id, app name) of every application the master registered, in order."""
        found = re.findall(r"Registered app (.+) with ID (app-\S+)", self.daemons[0].text())
        return [(app_id, name) for name, app_id in found]

    def executor_logs(self) -> dict[str, list[str]]:
        """Each application's executors' logs (stderr: the launch command first), by app id."""
        logs: dict[str, list[str]] = {}
        for work in self.work_dirs:
            for stderr in sorted(work.glob("app-*/*/stderr")):
                logs.setdefault(stderr.parent.parent.name, []).append(
                    stderr.read_text(errors="replace")
                )
        return logs

    def executor_dirs(self) -> list[Path]:
        """Every executor's working directory, on every worker."""
        return sorted(p for work in self.work_dirs for p in work.glob("app-*/*") if p.is_dir())

    def stop(self) -> None:
        """SIGTERM to every group, SIGKILL to what is left after ``STOP_TIMEOUT_S`` (after a
        start in the background has ended, so that no daemon starts after this)."""
        if self.starting is not None:
            wait([self.starting])
        for daemon in reversed(self.daemons):
            daemon.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and not all(d.gone() for d in self.daemons):
            time.sleep(0.1)
        for daemon in self.daemons:
            daemon.signal(signal.SIGKILL)
            daemon.process.wait(30)

    def __enter__(self) -> StandaloneCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
