"""Helpers of the ``ringflow replicate`` tests against a real edge cluster: the job in a child
process, the workload's writes, bounded waits, the checkpoint's offsets and the final checks
(every destination equals the edge table read at ALL; the lake holds the CDC log exactly once).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from ringflow.cli._demo import TABLE, Workload, compare, live_rows, read_cql_table
from ringflow.pipeline import Change, change_from_row, materialize, read_lake_changes
from ringflow.pipeline._cdc_source import read_changes
from ringflow.pipeline._postgres import read_postgres_live
from ringflow.pipeline._replicate import cdc_options, source_table
from ringflow.schema import Table

WAIT_S = 300.0  # upper bound of every wait (the machine is shared and may be loaded)
RETRY_S = 60.0  # how long one write is retried (a node joining or just restarted)


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        time.sleep(0.01)


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, from ``/proc`` (children before grandchildren)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # "pid (comm) state ppid ..."
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def _signal_all(pids: list[int], number: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)


class Job:
    """``ringflow replicate --continuous`` in a child process with its own process group (its
    JVM too; PySpark's Python daemon makes a group of its own, so the job's processes are
    signalled as the group and every descendant): SIGKILL of them all is a crash of the job."""

    def __init__(self, arguments: list[str], log: Path) -> None:
        script = Path(sys.executable).parent / "ringflow"
        self.log = log
        self.frozen: list[int] = []
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(script), *arguments, "--continuous"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def said(self, text: str) -> bool:
        """Whether the job's whole log holds ``text`` (a Spark stack trace can push a line
        out of :meth:`output`'s tail)."""
        return text in self.log.read_text(errors="replace")

    def freeze(self) -> None:
        """SIGSTOP to the group and to every descendant, until no new one appears: each
        process of the job stops where it is (a stopped process starts none)."""
        if not group_gone(self.process.pid):
            os.killpg(self.process.pid, signal.SIGSTOP)
        while True:
            new = [p for p in descendants(self.process.pid) if p not in self.frozen]
            if not new:
                return
            _signal_all(new, signal.SIGSTOP)
            self.frozen += new

    def thaw(self) -> None:
        if not group_gone(self.process.pid):
            os.killpg(self.process.pid, signal.SIGCONT)
        _signal_all(self.frozen, signal.SIGCONT)
        self.frozen = []

    def kill(self) -> None:
        everyone = descendants(self.process.pid) if self.running() else []
        if not group_gone(self.process.pid):
            os.killpg(self.process.pid, signal.SIGKILL)
        _signal_all([*everyone, *self.frozen], signal.SIGKILL)
        self.process.wait(30)
        wait_for(lambda: group_gone(self.process.pid), "the killed job's processes gone", 30)


def write(workload: Workload, count: int, pause_s: float = 0.02) -> None:
    """``count`` operations of the workload, each retried (bounded) until acknowledged: at
    QUORUM a write fails only around a topology change (a killed node's connection, a node that
    has not loaded the CDC generation yet); a retry writes the same values at a later time."""
    for _ in range(count):
        _, statement, values = workload.next_operation()
        write_statement(workload.session, statement, values)
        time.sleep(pause_s)


def write_statement(session: Any, statement: Any, values: tuple[object, ...]) -> None:
    """``statement`` executed, retried (bounded) until acknowledged (see :func:`write`)."""
    deadline = time.monotonic() + RETRY_S
    while True:
        try:
            session.execute(statement, values, timeout=30.0)
            return
        except Exception:  # the driver's NoHostAvailable / timeouts / connection errors
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def batch_offsets(checkpoint: Path) -> list[tuple[int, dict[str, int]]]:
    """(batch id, the ``ringflow-cdc`` end offset) of every micro-batch Spark logged before
    running it (``<checkpoint>/offsets/<id>``: a version line, the batch metadata, then one
    line per source)."""
    batches = []
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            batches.append((int(path.name), json.loads(lines[-1])))
    return sorted(batches)


def committed_watermark(checkpoint: Path) -> int | None:
    """The source watermark (ms) of the last batch the channel's sink committed."""
    commits = checkpoint / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []
    offsets = dict(batch_offsets(checkpoint)) if done else {}
    return offsets[max(done)]["watermark_ms"] if done else None


def check_destinations(
    edge: Any,
    contact_points: str,
    keyspace: str,
    base: Path,
    postgres_url: str | None,
    hub: Any = None,
) -> tuple[Table, int]:
    """The lake (``base / "lake"``), PostgreSQL and the hub (each when given) each equal the
    edge table read at ALL; (the table, its row count)."""
    table = source_table(cdc_options(contact_points, f"{keyspace}.{TABLE}"))
    now_s = int(time.time())
    expected = read_cql_table(edge, table, "ALL")
    name = f"{keyspace}.{TABLE}"
    destinations = {
        "lake": live_rows(materialize(table, read_lake_changes(base / "lake", name), now_s)),
    }
    if postgres_url is not None:
        destinations["postgres"] = live_rows(
            read_postgres_live(postgres_url, f"{keyspace}_{TABLE}", table, now_s)
        )
    if hub is not None:
        destinations["hub"] = read_cql_table(hub, table)
    for destination, rows in destinations.items():
        _, problems = compare(expected, rows)
        assert problems == [], f"{destination}: {len(problems)} mismatches, e.g. {problems[:3]}"
    return table, len(expected)


def change_identity(change: Change) -> tuple[bytes, Any, int]:
    return (change.stream_id, change.time, change.batch_seq_no)


def assert_lake_is_log(
    spark: SparkSession, table: Table, lake: Path, options: Mapping[str, str]
) -> list[Change]:
    """The lake holds every change of the CDC log (a batch read through ``ringflow-cdc`` with
    ``options``) exactly once; the log's changes."""
    changes = read_lake_changes(lake, f"{table.keyspace}.{table.name}")
    log = [change_from_row(table, row) for row in read_changes(spark, dict(options)).collect()]
    assert len({change_identity(c) for c in changes}) == len(changes)  # nothing twice
    assert sorted(changes, key=change_identity) == sorted(log, key=change_identity)
    return log
