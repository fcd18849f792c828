"""``ringflow replicate --capture replica``: every channel's sealed slices to its destination.

REPLICATION.md decisions 6-8; issue 14 §3. One Structured Streaming query per channel
(``ringflow-replica`` into the channel's sink: exactly the sinks ``ringflow-cdc`` uses, each
with its checkpoint ``<checkpoint>/<channel>``), all fed by one coordinator in this process
(:mod:`._replica_coordinator`: the planner, the global permits, the ``sent`` records).

**Supervision.** A channel never stops the job. A query that fails is started again from its
checkpoint (Spark replays its last batch), after a backoff of 1 s doubling to 60 s without end
(``replication.DestinationBackoff``); meanwhile its permits go to the other channels. Failures
reading the edge (a node gone mid-read: :class:`ReplicaReadError`, the coordinator) back off
on their own schedule and say so; every other failure is the destination's, shown as
``unreachable since ...``. A channel whose destination could not even be prepared at start is
retried the same way. It catches up in priority and fifo/lifo order when it returns (the
broker's grants).

**Schema changes** (issue 15, as the log mode's :mod:`._replicate_channels`). A captured row
keeps the log row as it was written, so a query meets an ``ALTER TABLE ... ADD`` as a row with
a log column its pinned table lacks and stops with ``SourceSchemaChanged``
(:func:`._replica_source.replica_row_converter`). The job loads the table again: if it has new
columns, the channel's destination is rebuilt for it (the hub and PostgreSQL get them when the
channel may alter them, ``--alter-destinations``; the lake takes a new schema version) and the
query restarts from its checkpoint with it, replaying the stopped batch; the columns the table
lacks are dropped ones, ignored from then on. It counts as no failure. A destination that
cannot take the table leaves the channel waiting with the statements to run, looked at again 1 s
doubling to 15 s apart, the others going on; a waiting channel does not keep a ``once`` run.

**FAIR pools.** Each query runs in the scheduler pool ``priority-<p>`` of its channel (the local
property is set before it starts). :func:`replica_spark` makes a session with
``spark.scheduler.mode=FAIR`` and a pool per priority weighted by it; an existing session keeps
its mode (pools are then only names).

**Modes.** ``once``: the coordinator bounds the run to slices due by its start; a query that
ended while its channel is not done yet is started again; the job ends when every channel is
done (or ``timeout_s``). ``continuous``: until ``stop`` is set, Ctrl-C or ``timeout_s``.

**What it tells** (per channel, the same figures everywhere): the console's status lines every
``STATUS_EVERY_S``; a row of ``system_replication.channel_progress`` at each of those and once
at the end (:class:`ChannelProgressRow`, QUORUM through the job's ``ClusterView``; best effort:
a write that fails is logged and the job goes on), read by ``ringflow replication status``; and
when given a :class:`JobMetrics` (``--metrics-port``), its Prometheus figures every poll
(:meth:`ReplicaJob.figures`): rows, batches, lag, reachable or unreachable since, failures,
backlog (copies planned or in flight, their rows, the age of the oldest slice: of the starts
the coordinator's cursor looks at, ``_replica_coordinator.ChannelProgress``), sends and unique
changes.

**Sends per unique change** (per channel): a send is one change row handed to the sink, i.e.
the row counts of the committed batches' copies, each read and checked to be exactly that many
rows (the queries' ``numInputRows`` give the same sum, shown as rows); unique changes are the
distinct row digests of those copies (``_replica_ledger.UniqueChanges``: exact up to 64-bit
digest collisions, 8 bytes a change, bounded).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.table import Table as RichTable

from ringflow.cdc import cdc_log_table
from ringflow.pipeline._changes import table_to_json
from ringflow.pipeline._channel_store import ChannelProgressRow
from ringflow.pipeline._destinations import Destination
from ringflow.pipeline._errors import PipelineConfigError, SourceSchemaChanged
from ringflow.pipeline._evolution import describe_change, same_columns
from ringflow.pipeline._job_metrics import ChannelFigures, JobMetrics
from ringflow.pipeline._replica_coordinator import ChannelProgress, ReplicaCoordinator
from ringflow.pipeline._replica_offsets import ReplicaOffset, ReplicaOffsetError
from ringflow.pipeline._replica_plan import (
    ReplicaChannelPlan,
    ReplicaJobPlan,
    channel_destination,
)
from ringflow.pipeline._replica_source import (
    REPLICA_FORMAT,
    RingflowReplicaDataSource,
    unknown_columns,
)
from ringflow.pipeline._replica_view import ClusterView
from ringflow.pipeline._spark_conf import SparkSettings, spark_settings
from ringflow.pipeline._spark_session import query_progress, register_data_sources
from ringflow.replication import DestinationBackoff, format_utc
from ringflow.schema import Table

POLL_S: Final = 0.5
STATUS_EVERY_S: Final = 10
TRIGGER: Final = "1 second"
ONCE_TIMEOUT_S: Final = 3600.0
MAX_ONCE_RUNS: Final = 1000
ERRORS_KEPT: Final = 8
SOURCE_ERRORS: Final = ("ReplicaReadError", "CoordinatorError", "ReplicaOffsetError")
RECHECK_MIN_S: Final = 1.0
RECHECK_MAX_S: Final = 15.0
_LOG = logging.getLogger("ringflow.replica")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class ChannelRun:
    """One channel's query and its story in this job."""

    plan: ReplicaChannelPlan
    destination: Destination | None
    table: Table
    query: Any = None
    ignored_columns: frozenset[str] = frozenset()
    waiting: str | None = None
    recheck_at_ms: int = 0
    recheck_delay_s: float = RECHECK_MIN_S
    schema_changes: list[str] = field(default_factory=list)
    backoff: DestinationBackoff = field(default_factory=DestinationBackoff)
    source_backoff: DestinationBackoff = field(default_factory=DestinationBackoff)
    seen_batches: set[int] = field(default_factory=set)
    rows: int = 0
    batches: int = 0
    runs: int = 0
    failures: int = 0
    done: bool = False
    status: str = "starting"
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=ERRORS_KEPT))

    @property
    def name(self) -> str:
        return self.plan.channel.name

    def may_start(self, at_ms: int) -> bool:
        if self.waiting is not None and at_ms < self.recheck_at_ms:
            return False
        return self.backoff.may_attempt(at_ms) and self.source_backoff.may_attempt(at_ms)

    def wait(self, reason: str, at_ms: int) -> None:
        """Stopped for the operator: look again after the delay, doubled next time."""
        self.waiting = reason
        self.status = "waiting: " + reason.splitlines()[0][:200]
        self.recheck_at_ms = at_ms + int(self.recheck_delay_s * 1000)
        self.recheck_delay_s = min(RECHECK_MAX_S, self.recheck_delay_s * 2)


@dataclass(frozen=True, slots=True)
class ChannelSummary:
    """A channel's figures at the end of the job."""

    channel: str
    destination: str
    priority: int
    rows: int
    batches: int
    sends: int
    unique: int
    unique_saturated: bool
    runs: int
    failures: int
    status: str
    errors: tuple[str, ...]

    @property
    def sends_per_unique(self) -> float | None:
        return self.sends / self.unique if self.unique else None


@dataclass(frozen=True, slots=True)
class ReplicaSummary:
    channels: tuple[ChannelSummary, ...]
    seconds: float
    once: bool
    interrupted: bool

    @property
    def ok(self) -> bool:
        return all(c.status in ("done", "stopped") for c in self.channels) and not (
            self.once and self.interrupted
        )


def replica_spark(
    app_name: str, settings: SparkSettings, priorities: Sequence[int], where: Path
) -> Any:
    """The (possibly existing) SparkSession of the job, as ``settings`` say (``--master``,
    ``--conf``, ``--driver-host``: local or on a cluster, :func:`spark_session`), in FAIR mode
    with a pool per priority weighted by it (module docstring); a user's own scheduler
    settings win."""
    from ringflow.pipeline._spark_session import spark_session

    pools = "".join(
        f'<pool name="priority-{p}"><schedulingMode>FIFO</schedulingMode>'
        f"<weight>{p}</weight><minShare>0</minShare></pool>"
        for p in sorted(set(priorities))
    )
    where.mkdir(parents=True, exist_ok=True)
    allocation = where / "fair-scheduler.xml"
    allocation.write_text(f'<?xml version="1.0"?><allocations>{pools}</allocations>\n')
    fair = {"spark.scheduler.mode": "FAIR", "spark.scheduler.allocation.file": str(allocation)}
    conf = {**fair, **settings.conf}
    return spark_session(app_name, spark_settings(settings.master, conf, settings.driver_host))


class ReplicaJob:
    """The supervised queries of one job (module docstring)."""

    def __init__(
        self,
        spark: Any,
        plan: ReplicaJobPlan,
        *,
        once: bool = True,
        console: Console | None = None,
        timeout_s: float | None = None,
        page_rows: int | None = None,
        metrics: JobMetrics | None = None,
    ) -> None:
        self.spark = spark
        self.plan = plan
        self.once = once
        self.metrics = metrics
        self.job_id = f"replica {socket.gethostname()} pid {os.getpid()}"
        self.progress_write_error: str | None = None
        self.console = console or Console()
        self.timeout_s = timeout_s if timeout_s is not None else (ONCE_TIMEOUT_S if once else None)
        self.page_rows = page_rows
        self.coordinator: ReplicaCoordinator | None = None
        self.started_ms = now_ms()
        self._shown_ms = self.started_ms
        self.runs = {p.channel.name: ChannelRun(p, p.destination, p.table) for p in plan.channels}
        for run in self.runs.values():
            if run.destination is not None and run.destination.blocked is not None:
                run.wait(run.destination.blocked, self.started_ms)
                run.recheck_at_ms = 0  # looked at again (and said) at once

    # --- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> ReplicaSummary:
        """Run until done (once), ``stop``, Ctrl-C or the timeout; the summary."""
        # Spark looks Python data sources up in the JVM thread's active session, and a thread
        # of the caller's own (a test, an embedding service) has none
        self.spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(
            self.spark._jsparkSession
        )
        register_data_sources(self.spark)
        self.spark.dataSource.register(RingflowReplicaDataSource)
        began = time.monotonic()
        deadline = began + self.timeout_s if self.timeout_s is not None else None
        view = ClusterView(self.plan.source)
        self._view = view
        coordinator = ReplicaCoordinator(
            view,
            [p.channel for p in self.plan.channels],
            permits=self.plan.permits,
            once_until_ms=self.started_ms if self.once else None,
        )
        interrupted = False
        try:
            self.coordinator = coordinator.start()
            while not (stop is not None and stop.is_set()):
                if deadline is not None and time.monotonic() > deadline:
                    break
                self._step(coordinator)
                if self.once and all(r.done or r.waiting for r in self.runs.values()):
                    break
                self._wait(stop)
        except KeyboardInterrupt:
            interrupted = True
            self.console.print("[yellow]interrupted: stopping the queries (checkpoints are kept)")
        finally:
            self._stop_queries(coordinator)
            coordinator.stop()
            self._tell(coordinator, now_ms(), write=True)
            view.close()
        return self._summary(coordinator, time.monotonic() - began, interrupted)

    def _wait(self, stop: threading.Event | None) -> None:
        if stop is not None:
            stop.wait(POLL_S)
        else:
            time.sleep(POLL_S)

    def _step(self, coordinator: ReplicaCoordinator) -> None:
        at_ms = now_ms()
        for run in self.runs.values():
            if run.query is not None:
                self._follow(run, coordinator, at_ms)
            if run.query is None and not run.done and run.may_start(at_ms):
                self._start(run, coordinator, at_ms)
        due = at_ms - self._shown_ms >= STATUS_EVERY_S * 1000
        if due:
            self._shown_ms = at_ms
            self.console.print(describe_status(self.progress(), self.runs), markup=False)
        self._tell(coordinator, at_ms, write=due)

    def _tell(self, coordinator: ReplicaCoordinator, at_ms: int, *, write: bool) -> None:
        """The metrics every time; the progress rows when ``write`` (module docstring)."""
        progress = {name: coordinator.progress(name) for name in self.runs}
        if self.metrics is not None:
            self.metrics.update(channel_figures(progress, self.runs, at_ms))
        if not write:
            return
        rows = progress_rows(progress, self.runs, self.job_id, at_ms)
        try:
            self._view.write_channel_progress(rows)
        except Exception as error:  # best effort: the job goes on (said once per error)
            text = f"{type(error).__name__}: {error}"
            if text != self.progress_write_error:
                _LOG.warning("channel progress not written (the job goes on): %s", text)
            self.progress_write_error = text
        else:
            self.progress_write_error = None

    def _follow(self, run: ChannelRun, coordinator: ReplicaCoordinator, at_ms: int) -> None:
        active = run.query.isActive  # before the progress: a last batch is never missed
        self._fold_progress(run, coordinator, at_ms)
        if active:
            return
        text = _exception_text(run.query)
        error = None if text is None else _summary_line(text)
        run.query = None
        if text is not None and SourceSchemaChanged.marker in text:
            self._follow_schema(run, coordinator, text, at_ms)
        elif error is not None:
            self._failed(run, coordinator, error, at_ms)
        elif self.once and coordinator.once_done(run.name):
            run.done, run.status = True, "done"
        elif self.once and run.runs >= MAX_ONCE_RUNS:
            run.done, run.status = True, f"incomplete after {run.runs} runs"
        else:
            run.status = "restarting"

    def _failed(
        self, run: ChannelRun, coordinator: ReplicaCoordinator, error: str, at_ms: int
    ) -> None:
        coordinator.query_failed(run.name)
        run.failures += 1
        run.errors.append(error)
        if any(marker in error for marker in SOURCE_ERRORS):
            run.source_backoff.failed(at_ms, error)
            run.status = "edge read failed: " + run.source_backoff.status(at_ms).replace(
                "unreachable ", "", 1
            )
        else:
            run.backoff.failed(at_ms, error)
            run.status = run.backoff.status(at_ms)
        self.console.print(f"[yellow]{run.name}: {run.status}: {error[:300]}")

    def _follow_schema(
        self, run: ChannelRun, coordinator: ReplicaCoordinator, error: str, at_ms: int
    ) -> None:
        """The query met captured rows with columns its table lacks (module docstring): load
        the table again, rebuild the destination for it when its columns changed, ignore the
        dropped ones; the query restarts from its checkpoint (or the channel waits)."""
        coordinator.query_failed(run.name)  # its batch stays reserved: the restart replays it
        channel = run.plan.channel
        try:
            table = self._view.table(channel.source_keyspace, channel.source_table)
        except PipelineConfigError as failure:
            self._failed(run, coordinator, f"SourceSchemaChanged, then {failure}", at_ms)
            return
        named = unknown_columns(error) or frozenset()
        log_columns = {column.name for column in cdc_log_table(table).columns}
        if same_columns(run.table, table) and not named - log_columns:
            # the driver's schema may lag the ALTER by a moment: retried as an edge failure
            self._failed(run, coordinator, "ReplicaReadError: " + _summary_line(error), at_ms)
            return
        run.ignored_columns |= named - log_columns
        change = describe_change(run.table, table)
        if not same_columns(run.table, table):
            run.schema_changes.append(change)
            run.table = table
            run.destination = None  # rebuilt for the new table by _start
            run.recheck_delay_s = RECHECK_MIN_S
        else:
            run.schema_changes.append(f"ignored dropped log columns {sorted(named)}")
        run.status = "restarting"
        what = change if run.destination is None else f"dropped columns {sorted(named)} ignored"
        self.console.print(
            f"{run.name}: source schema changed ({what}): restarted from its checkpoint",
            markup=False,
        )

    def _destination_for(
        self, run: ChannelRun, coordinator: ReplicaCoordinator, at_ms: int
    ) -> Destination | None:
        """The channel's destination for its table (built when missing or waiting), or None
        while it cannot be had: the channel backs off or waits for the operator."""
        if run.destination is not None and run.waiting is None:
            return run.destination
        channel = run.plan.channel
        try:
            destination = channel_destination(
                channel, run.table, run.plan.allow_alter, self.plan.source
            )
        except PipelineConfigError as error:
            run.waiting = None
            self._failed(run, coordinator, str(error), at_ms)
            return None
        run.destination = destination
        if destination.blocked is not None:
            if run.waiting != destination.blocked:
                self.console.print(
                    f"{run.name}: stopped, the other channels go on: {destination.blocked}",
                    markup=False,
                    soft_wrap=True,
                )
            run.wait(destination.blocked, at_ms)
            return None
        if run.waiting is not None:
            self.console.print(f"{run.name}: its destination takes the source table now")
        run.waiting = None
        return destination

    def _start(self, run: ChannelRun, coordinator: ReplicaCoordinator, at_ms: int) -> None:
        destination = self._destination_for(run, coordinator, at_ms)
        if destination is None:
            return
        try:
            run.query = self._start_query(run, destination, coordinator)
        except Exception as error:  # e.g. a checkpoint of another channel: shown and retried
            self._failed(run, coordinator, f"{type(error).__name__}: {error}", at_ms)
            return
        run.runs += 1
        coordinator.query_started(run.name)
        run.status = "running" if run.backoff.next_attempt_ms is None else run.backoff.status(at_ms)

    def _start_query(
        self, run: ChannelRun, destination: Destination, coordinator: ReplicaCoordinator
    ) -> Any:
        channel = run.plan.channel
        source = {
            "channel": channel.name,
            "coordinator_address": coordinator.address,
            "coordinator_token": coordinator.token,
            "schema": table_to_json(run.table),
            "port": str(self.plan.source.port),
        }
        edge = self.plan.source
        if edge.username is not None and edge.password is not None:
            source.update(username=edge.username, password=edge.password)
        if edge.tls is not None:
            source.update(edge.tls.as_options())
        if run.ignored_columns:
            source["ignored_columns"] = ",".join(sorted(run.ignored_columns))
        if self.page_rows is not None:
            source["page_rows"] = str(self.page_rows)
        context = self.spark.sparkContext
        context.setLocalProperty("spark.scheduler.pool", f"priority-{channel.priority}")
        try:
            frame = self.spark.readStream.format(REPLICA_FORMAT).options(**source).load()
            writer = (
                frame.writeStream.format(destination.sink_format)
                .options(**destination.options)
                .option("checkpointLocation", str(self.plan.checkpoint / channel.name))
                .queryName(f"replica_{channel.name.replace('-', '_')}")
            )
            trigger = {"availableNow": True} if self.once else {"processingTime": TRIGGER}
            return writer.trigger(**trigger).start()
        finally:
            context.setLocalProperty("spark.scheduler.pool", None)

    def _fold_progress(self, run: ChannelRun, coordinator: ReplicaCoordinator, at_ms: int) -> None:
        """New batches of the query: rows, and their commits told to the coordinator."""
        for entry in query_progress(run.query):
            batch = int(entry.get("batchId", -1))
            sources = entry.get("sources") or []
            if batch in run.seen_batches or not sources:
                continue
            start, end = (
                _offset(sources[0].get("startOffset")),
                _offset(sources[0].get("endOffset")),
            )
            if end is None or end == start:
                continue  # a trigger with no new batch
            run.seen_batches.add(batch)
            run.rows += int(entry.get("numInputRows") or 0)
            run.batches += 1
            coordinator.commit(run.name, end)
            if run.backoff.next_attempt_ms is not None or run.source_backoff.next_attempt_ms:
                run.backoff.succeeded(at_ms)
                run.source_backoff.succeeded(at_ms)
                run.status = "running"
                self.console.print(f"[green]{run.name}: reachable again")

    def _stop_queries(self, coordinator: ReplicaCoordinator) -> None:
        at_ms = now_ms()
        for run in self.runs.values():
            if run.query is None:
                continue
            try:
                if run.query.isActive:
                    run.query.stop()
            except Exception:  # stopping is best effort, each query on its own
                pass
            self._fold_progress(run, coordinator, at_ms)
            if not run.done:
                run.status = "stopped" if not self.once else "incomplete"

    # --- reading the state ----------------------------------------------------------------------

    def caught_up(self, until_ms: int) -> bool:
        """Every channel has delivered every copy of a slice due by ``until_ms`` (a live node
        holds), as its coordinator sees it now."""
        coordinator = self.coordinator
        return coordinator is not None and all(
            coordinator.done_through(name, until_ms) for name in self.runs
        )

    def progress(self) -> dict[str, ChannelProgress]:
        coordinator = self.coordinator
        if coordinator is None:
            return {}
        return {name: coordinator.progress(name) for name in self.runs}

    def figures(self) -> dict[str, ChannelFigures]:
        """Each channel's figures as the job's metrics say them now."""
        return channel_figures(self.progress(), self.runs, now_ms())

    def _summary(
        self, coordinator: ReplicaCoordinator, seconds: float, interrupted: bool
    ) -> ReplicaSummary:
        channels = []
        for run in self.runs.values():
            figures = coordinator.progress(run.name)
            channels.append(
                ChannelSummary(
                    run.name,
                    run.plan.channel.display_destination,
                    run.plan.channel.priority,
                    run.rows,
                    run.batches,
                    figures.sends,
                    figures.unique,
                    figures.unique_saturated,
                    run.runs,
                    run.failures,
                    run.status,
                    tuple(run.errors),
                )
            )
        return ReplicaSummary(tuple(channels), seconds, self.once, interrupted)


def _offset(value: Any) -> ReplicaOffset | None:
    if value is None:
        return None
    try:
        data = json.loads(value) if isinstance(value, str) else value
        return ReplicaOffset.from_dict(data)
    except (ValueError, ReplicaOffsetError):
        return None


def _exception_text(query: Any) -> str | None:
    error = query.exception()
    if error is None:
        return None
    return str(getattr(error, "desc", None) or error)


def _summary_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if any(marker in line for marker in SOURCE_ERRORS)]
    useful = named or [line for line in lines if "Error" in line or "error" in line]
    return (useful[-1] if useful else (lines[0] if lines else text))[:400]


def print_replica_summary(console: Console, summary: ReplicaSummary) -> None:
    """The per-channel table, sends per unique change included."""
    table = RichTable(title=f"replica-side replication ({summary.seconds:.1f}s)")
    columns = ("channel", "destination", "priority", "rows", "batches", "sends", "unique")
    for name in (*columns, "sends/unique", "status"):
        right = name in ("priority", "rows", "batches", "sends", "unique", "sends/unique")
        table.add_column(name, justify="right" if right else "left")
    for channel in summary.channels:
        ratio = channel.sends_per_unique
        unique = f"{channel.unique:,}" + ("+" if channel.unique_saturated else "")
        table.add_row(
            channel.channel,
            channel.destination,
            str(channel.priority),
            f"{channel.rows:,}",
            str(channel.batches),
            f"{channel.sends:,}",
            unique,
            "-" if ratio is None else f"{ratio:.2f}",
            channel.status
            if channel.failures == 0
            else f"{channel.status} ({channel.failures} failures)",
        )
    console.print(table)


def channel_figures(
    progress: Mapping[str, ChannelProgress], runs: Mapping[str, ChannelRun], at_ms: int
) -> dict[str, ChannelFigures]:
    """The channels' figures for :class:`JobMetrics` (a channel the coordinator has no
    progress of yet gets its run's own figures only)."""
    result = {}
    for name, run in runs.items():
        since_ms = run.backoff.unreachable_since_ms
        figures = progress.get(name, ChannelProgress())
        known = name in progress
        oldest = figures.oldest_backlog_ms
        result[name] = ChannelFigures(
            rows=run.rows,
            batches=run.batches,
            lag_seconds=None if figures.lag_ms is None else figures.lag_ms / 1000.0,
            reachable=since_ms is None,
            unreachable_since_seconds=None if since_ms is None else since_ms / 1000.0,
            failures=run.failures,
            backlog_slices=figures.backlog_copies if known else None,
            backlog_rows=figures.backlog_rows if known else None,
            backlog_oldest_seconds=None if oldest is None else max(0, at_ms - oldest) / 1000.0,
            sends=figures.sends if known else None,
            unique_changes=figures.unique if known else None,
        )
    return result


def progress_rows(
    progress: Mapping[str, ChannelProgress],
    runs: Mapping[str, ChannelRun],
    job: str,
    at_ms: int,
) -> list[ChannelProgressRow]:
    """The channels' rows of ``channel_progress`` (module docstring)."""
    rows = []
    for name, run in runs.items():
        figures = progress.get(name)
        rows.append(
            ChannelProgressRow(
                channel=name,
                job=job,
                state=run.status,
                unreachable_since_ms=run.backoff.unreachable_since_ms,
                rows=run.rows,
                sends=0 if figures is None else figures.sends,
                unique_changes=0 if figures is None else figures.unique,
                lag_ms=None if figures is None else figures.lag_ms,
                updated_at_ms=at_ms,
            )
        )
    return rows


def describe_status(progress: Mapping[str, ChannelProgress], runs: Mapping[str, ChannelRun]) -> str:
    """One line per channel: backlog and state (for a console that is not a terminal)."""
    lines = []
    for name, run in runs.items():
        figures = progress.get(name)
        backlog = "-"
        if figures is not None:
            oldest = figures.oldest_backlog_ms
            age = "" if oldest is None else f", oldest {format_utc(oldest)}"
            backlog = f"{figures.backlog_copies} slices, {figures.backlog_rows:,} rows{age}"
        sent = "-" if figures is None else f"{figures.sends:,} sends, {figures.unique:,} unique"
        lines.append(f"{name}: {run.status}; backlog {backlog}; {sent}")
    return "\n".join(lines)
