"""The replication job run in a thread of this process for a test (``run_replication`` with a
stop condition, the session's SparkSession), its console output, and bounded waits that check
the job stays up.
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console

from ringflow.pipeline._replicate import ReplicationPlan, ReplicationSummary, run_replication


class JobThread:
    """``run_replication(..., once=False)`` in a thread of this process (sharing the session's
    SparkSession), until :meth:`stop`; its console output is kept for the test."""

    def __init__(self, spark: Any, plan: ReplicationPlan, recheck_max_s: float = 2.0) -> None:
        self.output = io.StringIO()
        self.console = Console(file=self.output, width=400, color_system=None)
        self.summary: ReplicationSummary | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()

        def run() -> None:
            # Spark looks Python data sources up in the JVM thread's active session, and a
            # thread of its own has none (the CLI runs the job in the main thread)
            jvm_session = spark._jsparkSession
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(jvm_session)
            try:
                self.summary = run_replication(
                    spark,
                    plan,
                    once=False,
                    console=self.console,
                    stop=self._stop.is_set,
                    recheck_max_s=recheck_max_s,
                )
            except BaseException as error:  # the test reports it
                self.error = error
                self.console.print(f"job failed: {error}", markup=False)

        self.thread = threading.Thread(target=run, name="replicate", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def text(self) -> str:
        return self.output.getvalue()

    def stop(self) -> ReplicationSummary:
        print(self.text(), flush=True)
        self._stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive(), "the job did not stop"
        assert self.error is None, f"the job failed: {self.error!r}\n{self.text()}"
        assert self.summary is not None
        return self.summary


def printed_statements(output: str, starting: str) -> list[str]:
    """The statements the job printed for the operator (``  <statement>;`` lines after a
    channel's "run:") that start with ``starting``, without their ``;``."""
    return [s for s in re.findall(r"^  (.+);$", output, re.M) if s.startswith(starting)]


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float, job: JobThread) -> None:
    """Poll ``condition`` (bounded); the job must stay up meanwhile."""
    started = time.monotonic()
    deadline = started + timeout_s
    while not condition():
        assert job.alive(), f"the job exited while waiting for {what}: {job.error!r}\n{job.text()}"
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s\n{job.text()}"
        time.sleep(1.0)  # each look reads every destination: leave the cores to Spark
    print(f"{time.strftime('%H:%M:%S')} {what}: {time.monotonic() - started:.1f} s", flush=True)
