"""The real processes a fuzzer runs against, and the health probes through the real driver.

* ``SingleNode``: one ``ringflow node start`` process on a random free loopback address (the
  launcher the integration tests use), the fuzz schema created through the Python driver.
* ``driver_session``: a Scylla/DataStax driver session pinned to given addresses, protocol v4,
  bounded timeouts, no retries (a probe sees every failure).
* ``log_problems``: the lines of a node log that are bugs whatever the input (tracebacks, "Task
  exception was never retrieved", handler errors), read from an offset so each probe only
  looks at what is new.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import FallthroughRetryPolicy, WhiteListRoundRobinPolicy

from fuzz._core import check, check_all
from fuzz._schema import schema_statements
from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address

REQUEST_TIMEOUT_S = 15.0
_PROBLEM = re.compile(
    r"Traceback|Task exception was never retrieved|network handler .* raised|"
    r"bug: unexpected exception|connection from .* failed"
)


def driver_session(addresses: list[str], port: int = 9042) -> tuple[Cluster, Session]:
    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy(addresses),
        retry_policy=FallthroughRetryPolicy(),
        request_timeout=REQUEST_TIMEOUT_S,
    )
    cluster = Cluster(
        addresses,
        port=port,
        protocol_version=4,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=10,
        control_connection_timeout=10,
        max_schema_agreement_wait=10,
    )
    return cluster, cluster.connect()


class LogWatch:
    """New lines of one log file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_problems(self) -> list[str]:
        try:
            with self.path.open("rb") as log:
                log.seek(self.offset)
                text = log.read().decode(errors="replace")
                self.offset = log.tell()
        except OSError:
            return []
        return [line for line in text.splitlines() if _PROBLEM.search(line)]


class SingleNode:
    """One real node with the fuzz schema; ``restart`` after it died or stopped serving."""

    def __init__(self, workdir: Path | None = None) -> None:
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ringflow-fuzz-")
            workdir = Path(self._tmp.name)
        self.process = NodeProcess(workdir / "data", random_loopback_address())
        self.process.start()
        self.logwatch = LogWatch(self.process.log_path)
        self.cluster: Cluster | None = None
        self.session: Session | None = None
        self._connect()
        for statement in schema_statements():
            self._session().execute(statement)

    @property
    def address(self) -> str:
        return self.process.address

    @property
    def port(self) -> int:
        return self.process.port

    def _connect(self) -> None:
        self.cluster, self.session = driver_session([self.process.address], self.process.port)

    def _session(self) -> Session:
        if self.session is None:
            self._connect()
        assert self.session is not None
        return self.session

    def check_alive(self) -> None:
        check(self.process.alive(), "the node process stays alive", self.process.log(1500))

    def probe(self) -> None:
        """The node is alive, serves the real driver, and logged no bug since the last probe."""
        check_all(self.check_alive, self.driver_probe, self._logs_clean)

    def driver_probe(self) -> None:
        try:
            row = self._session().execute("SELECT release_version FROM system.local").one()
        except Exception as error:
            raise_probe(error)
        check(row is not None, "a health probe through the real driver works", "no row")

    def _logs_clean(self) -> None:
        problems = self.logwatch.new_problems()
        check(not problems, "the node logs no unexpected exception", "\n".join(problems[:5]))

    def prepare(self, statements: tuple[str, ...]) -> None:
        for statement in statements:
            self._session().prepare(statement)

    def restore_schema(self) -> None:
        for statement in schema_statements():
            self._session().execute(statement)

    def recover(self) -> None:
        """Restart the node unless it is alive and serves the driver (its log is left for the
        next probe to report)."""
        try:
            self.check_alive()
            self.driver_probe()
        except Exception:
            self.restart()

    def restart(self) -> None:
        self.shutdown_driver()
        self.process.kill()
        self.process.start()
        self.logwatch.offset = self.process.log_path.stat().st_size
        self._connect()
        self.restore_schema()

    def shutdown_driver(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()
        self.cluster = self.session = None

    def close(self) -> None:
        self.shutdown_driver()
        self.process.kill()
        if self._tmp is not None:
            self._tmp.cleanup()


def raise_probe(error: BaseException) -> None:
    check(False, "a health probe through the real driver works", f"{type(error).__name__}: {error}")
