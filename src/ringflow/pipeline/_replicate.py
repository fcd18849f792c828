"""The replication job: the CDC log of one edge table streamed to hubs, lakes and PostgreSQL.

One Structured Streaming query per destination ("channel"), each reading
``spark.readStream.format("ringflow-cdc")`` for the table and writing to its sink with its own
checkpoint ``<checkpoint>/<channel>``, so channels progress, fail and restart independently and
each is exactly-once in effect on its own (the sinks are idempotent per batch, the source is
replayable from the checkpointed offsets).

Destinations (``--to`` URLs) and the plan: :mod:`._destinations`. Everything is checked on the
driver before Spark starts: the source is reached and the table must have CDC enabled, every
destination is validated (``hub_options`` connects and looks the target up, ``postgres_options``
connects and creates the target, the lake directory must be creatable and writable); the first
problem raises :class:`PipelineConfigError` naming it.

Schema changes (issue 15) are followed channel by channel (:mod:`._replicate_channels`): each query
reads the table it was started with (the source's ``schema`` option); when a task finds the log
with other columns it fails with :class:`~ringflow.pipeline.SourceSchemaChanged`, and the
channel reloads the source table, brings its destination to it (the hub and PostgreSQL add the
new columns when altering is allowed, ``alter_destinations``; the lake records a new schema
version; dropped columns stay at the destinations) and restarts its query from its checkpoint,
which reads the same offsets again with the new schema: nothing is lost and it costs no retry.
A destination that cannot follow (altering not allowed, a clashing type) stops that channel
alone, with a message saying what to run; it is checked again with a bounded back-off and
resumes from its checkpoint once the operator has altered it. Such a destination at start-up
waits the same way instead of failing the job.

Modes: ``once`` replicates everything the source can give at the start (up to the target time
now - confidence window) with ``trigger(availableNow=True)``. Spark fixes the end offset of such
a run when it starts, and the source's latest offset never crosses a CDC generation boundary
(a new generation starts e.g. when a node restarts), so a run may end at a boundary short of the
target: the channel's query is then started again from its checkpoint, until its watermark has
passed the target (at most ``MAX_RUNS`` runs). Every run ends cleanly after a whole batch, so no
batch is ever interrupted. ``continuous`` runs with a processing-time trigger until Ctrl-C (or
``timeout_s``).

A channel whose query fails (its destination went away, the edge could not be read, a loaded
machine's transient failure) is restarted from its checkpoint after a backoff of 1 s doubling to
60 s (``replication.DestinationBackoff``, REPLICATION.md decision 8), so nothing is lost and a
batch that was cut is replayed; the other channels go on meanwhile. ``continuous``
retries without end (an edge site's link comes back) and its status line says ``unreachable
since ...`` with the error; a committed batch makes it reachable again. ``once`` gives up after
``MAX_RETRIES`` retries in a row: every query is stopped and :class:`ReplicationFailed` names the
channel and the error (the checkpoints keep what was done). Progress comes from each
query's ``recentProgress`` (rows, batches, lag = batch end time - source watermark) and is shown
as one rich progress line per channel, followed by a summary table.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from ringflow.errors import RingflowError
from ringflow.pipeline._cdc_source import CDC_FORMAT
from ringflow.pipeline._changes import table_to_json
from ringflow.pipeline._destinations import (
    DEFAULT_PORT,
    Destination,
    ReplicationPlan,
    cdc_options,
    channel_name,
    destination,
    parse_hosts,
    parse_table_name,
    plan_replication,
    source_table,
)
from ringflow.pipeline._errors import SourceSchemaChanged
from ringflow.pipeline._evolution import same_columns
from ringflow.pipeline._job_metrics import ChannelFigures, JobMetrics
from ringflow.pipeline._replicate_channels import (
    RECHECK_MAX_S,
    ChannelRun,
    SourceTables,
    follow_source,
)
from ringflow.pipeline._spark_conf import SparkSettings
from ringflow.pipeline._spark_session import query_progress, register_data_sources
from ringflow.replication import DestinationBackoff

DEFAULT_TRIGGER = "1 second"
MAX_RUNS = 100
MAX_RETRIES = 3  # failed runs in a row of one ``once`` channel restarted before giving up
POLL_S = 0.5
MAX_ERRORS_KEPT = 20  # the latest distinct errors of a channel shown in its summary
ONCE_TIMEOUT_S = 3600.0
STOP_TIMEOUT_S = 60.0


class ReplicationFailed(RingflowError):
    """A channel's streaming query failed while running (its error is in the message)."""


# --- running it ----------------------------------------------------------------------------------


@dataclass(slots=True)
class ChannelStats:
    """What one channel did: rows and batches written, watermark, lag samples, outcome."""

    channel: str
    display: str
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    rows: int = 0
    batches: int = 0
    first_watermark_ms: int | None = None
    watermark_ms: int | None = None
    lag_ms: int | None = None
    lag_samples: list[tuple[float, float]] = field(default_factory=list)  # (unix s, lag s)
    seen: set[int] = field(default_factory=set)
    status: str = "running"
    runs: int = 1
    retries: int = 0
    errors: list[str] = field(default_factory=list)
    schema_changes: list[str] = field(default_factory=list)
    """Each source schema change the channel followed (``describe_change``)."""
    waited: list[str] = field(default_factory=list)
    """Each time it stopped for its destination: the message (statements to run)."""

    @property
    def seconds(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class ReplicationSummary:
    """Every channel's stats, and the target watermark of a ``once`` run."""

    channels: list[ChannelStats]
    target_ms: int | None
    seconds: float
    interrupted: bool = False
    started_unix_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.status in ("done", "stopped") for c in self.channels)


def _watermark(offset: Any) -> int | None:
    if offset is None:
        return None
    data = json.loads(offset) if isinstance(offset, str) else offset
    value = data.get("watermark_ms") if isinstance(data, dict) else None
    return int(value) if isinstance(value, int) else None


def _batch_end_s(entry: Mapping[str, Any]) -> float:
    stamp = datetime.datetime.fromisoformat(str(entry["timestamp"]).replace("Z", "+00:00"))
    duration = (entry.get("durationMs") or {}).get("triggerExecution", 0)
    return stamp.timestamp() + float(duration) / 1000.0


def update_stats(stats: ChannelStats, entries: Sequence[Mapping[str, Any]]) -> None:
    """Fold new progress entries (by batch id) into ``stats``."""
    for entry in entries:
        batch = int(entry.get("batchId", -1))
        if batch in stats.seen or not entry.get("sources"):
            continue
        stats.seen.add(batch)
        source = entry["sources"][0]
        rows = int(entry.get("numInputRows") or source.get("numInputRows") or 0)
        start, end = _watermark(source.get("startOffset")), _watermark(source.get("endOffset"))
        if stats.first_watermark_ms is None:
            stats.first_watermark_ms = start if start is not None else end
        if end is None:
            continue
        if start != end or rows:
            stats.batches += 1
        stats.rows += rows
        stats.watermark_ms = max(end, stats.watermark_ms or end)
        at_s = _batch_end_s(entry)
        stats.lag_ms = max(0, int(at_s * 1000) - stats.watermark_ms)
        stats.lag_samples.append((at_s, stats.lag_ms / 1000.0))


def _start_query(spark: Any, plan: ReplicationPlan, run: ChannelRun, once: bool) -> Any:
    """The channel's query: the source read with the table its destination was built for."""
    dest = run.destination
    options = {**plan.source_options, "schema": table_to_json(run.table)}
    frame = spark.readStream.format(CDC_FORMAT).options(**options).load()
    writer = (
        frame.writeStream.format(dest.sink_format)
        .options(**dest.options)
        .option("checkpointLocation", str(plan.checkpoint / dest.channel))
        .queryName(f"replicate_{dest.channel.replace('-', '_')}")
    )
    trigger = {"availableNow": True} if once else {"processingTime": DEFAULT_TRIGGER}
    return writer.trigger(**trigger).start()


def replication_spark(app_name: str, settings: SparkSettings | None = None) -> Any:
    """The (possibly existing) SparkSession of the job: local or on a cluster, as ``settings``
    (``--master``, ``--conf``, ``--driver-host``) and Spark's own settings say, ringflow's
    defaults filling the rest; the ringflow sources and sinks registered."""
    from ringflow.pipeline._spark_session import spark_session

    return spark_session(app_name, settings)


def _describe(stats: ChannelStats) -> dict[str, Any]:
    lag = "-" if stats.lag_ms is None else f"{stats.lag_ms / 1000:.1f}s"
    return {"rows": f"{stats.rows:,}", "batches": str(stats.batches), "lag": lag}


def _fraction(stats: ChannelStats, target_ms: int | None) -> float | None:
    if target_ms is None or stats.watermark_ms is None or stats.first_watermark_ms is None:
        return None
    span = target_ms - stats.first_watermark_ms
    if span <= 0:
        return 100.0
    return max(0.0, min(100.0, 100.0 * (stats.watermark_ms - stats.first_watermark_ms) / span))


def _stop_all(queries: Mapping[str, Any]) -> None:
    for query in queries.values():
        try:
            if query.isActive:
                query.stop()
        except Exception:  # stopping is best effort, each query on its own
            continue


def _query_error(query: Any) -> tuple[str, str] | None:
    """(one line to show, the whole text) of the query's error, or None."""
    error = query.exception()
    if error is None:
        return None
    text = str(getattr(error, "desc", None) or error)
    lines = [line for line in text.splitlines() if line.strip()]
    useful = [line for line in lines if "Error" in line or "error" in line]
    return (useful[-1] if useful else (lines[0] if lines else text)).strip()[:400], text


def wait_for_change(queries: Mapping[str, Any], seconds: float) -> None:
    """Sleep up to ``seconds``, returning as soon as the first running query ends, so that its
    end is seen then, not at the next poll (a short ``--once`` run is not rounded up to the
    poll period). A query that ends with an error returns too; the next poll reports it."""
    running = [query for query in queries.values() if query.isActive]
    if not running:
        time.sleep(seconds)
        return
    with contextlib.suppress(Exception):  # a failed query raises here: the poll reads its error
        running[0].awaitTermination(max(seconds, 0.001))


class _Runner:
    """The channels of one run: their queries, stats and schema following (module docstring).
    ``poll`` is one round of the job's loop."""

    def __init__(
        self,
        spark: Any,
        plan: ReplicationPlan,
        once: bool,
        console: Console,
        recheck_max_s: float = RECHECK_MAX_S,
    ) -> None:
        self.spark, self.plan, self.once, self.console = spark, plan, once, console
        self.runs = {
            d.channel: ChannelRun(d, plan.table, recheck_max_s=recheck_max_s)
            for d in plan.destinations
        }
        self.tables = SourceTables(plan.source_options)
        self.stats = {d.channel: ChannelStats(d.channel, d.display) for d in plan.destinations}
        self.backoffs = {d.channel: DestinationBackoff() for d in plan.destinations}
        self._clock_ms = 0

    def _now_ms(self) -> int:
        """The wall clock in ms, never going back (the backoffs' times must not)."""
        self._clock_ms = max(self._clock_ms, time.time_ns() // 1_000_000)
        return self._clock_ms

    @property
    def queries(self) -> dict[str, Any]:
        return {c: run.query for c, run in self.runs.items() if run.query is not None}

    def start(self) -> None:
        for run in self.runs.values():
            if run.waiting is None:
                run.query = _start_query(self.spark, self.plan, run, self.once)
            else:
                self._wait(run)

    def _restart(self, run: ChannelRun) -> None:
        run.query = _start_query(self.spark, self.plan, run, self.once)
        self.stats[run.channel].status = "running"

    def _say(self, run: ChannelRun, text: str, style: str = "yellow") -> None:
        stamp = time.strftime("%H:%M:%S")
        self.console.print(f"{stamp} [{style}]{run.channel}[/]: {escape(text)}", soft_wrap=True)

    def _wait(self, run: ChannelRun) -> None:
        """The channel stops for its destination (or source): say why, once per message."""
        assert run.waiting is not None
        stats = self.stats[run.channel]
        if not stats.waited or stats.waited[-1] != run.waiting:
            stats.waited.append(run.waiting)
            self._say(run, f"stopped, the other channels go on: {run.waiting}", "red")
        stats.status = "waiting: " + run.waiting.splitlines()[0][:200]
        run.query = None
        run.wait(time.monotonic())

    def _follow(self, run: ChannelRun) -> None:
        """Its query met a source schema change: rebuild the destination, restart or wait; the
        other running channels that read another table follow now too (each would fail on
        the change at its next batch; stopped mid-batch, a query replays that batch)."""
        self._follow_one(run)
        for other in self.runs.values():
            query = other.query
            if other is run or query is None or same_columns(other.table, run.table):
                continue
            if not query.isActive:  # ended: its own poll sees how (done, or this change)
                continue
            with contextlib.suppress(Exception):  # it may end (fail) meanwhile
                query.stop()
            self._follow_one(other)

    def _follow_one(self, run: ChannelRun) -> None:
        change = follow_source(run, self.tables)
        stats = self.stats[run.channel]
        stats.schema_changes.append(change or "columns changed again")
        if run.waiting is not None:
            self._wait(run)
            return
        what = change or "its log's columns differ from those the query read"
        self._say(run, f"source schema changed ({what}): restarted with it from its checkpoint")
        self._restart(run)

    def figures(self) -> dict[str, ChannelFigures]:
        """Each channel's figures for the job's metrics (no backlog: the log has no slices)."""
        result = {}
        for channel, stats in self.stats.items():
            since_ms = self.backoffs[channel].unreachable_since_ms
            result[channel] = ChannelFigures(
                rows=stats.rows,
                batches=stats.batches,
                lag_seconds=None if stats.lag_ms is None else stats.lag_ms / 1000.0,
                reachable=since_ms is None,
                unreachable_since_seconds=None if since_ms is None else since_ms / 1000.0,
                failures=stats.retries,
            )
        return result

    def _back_off(self, run: ChannelRun, error: str) -> None:
        """Its query failed: retried from its checkpoint (exactly-once: the sinks are idempotent
        per batch) once its backoff is due; the other channels go on meanwhile."""
        stats, backoff = self.stats[run.channel], self.backoffs[run.channel]
        stats.retries += 1
        if not stats.errors or stats.errors[-1] != error:
            stats.errors.append(error)
            del stats.errors[:-MAX_ERRORS_KEPT]
        now_ms = self._now_ms()
        backoff.failed(now_ms, error)
        run.query = None
        stats.status = backoff.status(now_ms)
        self._say(run, f"{stats.status}: {error}", "red")

    def _recheck(self, run: ChannelRun) -> None:
        change = follow_source(run, self.tables)
        if change is not None:
            self.stats[run.channel].schema_changes.append(change)
        if run.waiting is not None:
            self._wait(run)
            return
        self._say(run, "its destination takes the source table now: resumed from its checkpoint")
        self._restart(run)

    def poll(self, target_ms: int | None, final: bool = False) -> tuple[bool, str | None]:
        """One round: fold progress, follow schema changes, restart what ended short of
        ``target_ms`` (a ``once`` query at a generation boundary) or failed (up to
        ``MAX_RETRIES``), look again at waiting channels. (all finished?, first failure)"""
        finished = True
        self.tables.new_round()
        for run in list(self.runs.values()):
            backoff = self.backoffs[run.channel]
            if run.query is None and run.waiting is None and backoff.next_attempt_ms is not None:
                if not final and backoff.may_attempt(self._now_ms()):
                    self._say(run, f"retrying (attempt {backoff.failed_attempts + 1})")
                    self._restart(run)
                    self.stats[run.channel].status = backoff.status(self._now_ms())
                finished = finished and final
                continue
            if run.query is None:
                if not final and run.due(time.monotonic()):
                    self._recheck(run)
                finished = finished and (self.once or final) and run.query is None
                continue
            done, failure = self._poll_query(run, target_ms, final)
            if failure is not None:
                return True, failure
            finished = finished and done
        return finished, None

    def _poll_query(
        self, run: ChannelRun, target_ms: int | None, final: bool
    ) -> tuple[bool, str | None]:
        """(the channel is finished?, its failure) after one look at its query."""
        stats, query = self.stats[run.channel], run.query
        assert query is not None  # only channels with a query are polled here
        active = query.isActive  # before reading progress: a final batch is never missed
        batches = len(stats.seen)
        update_stats(stats, query_progress(query))
        backoff = self.backoffs[run.channel]
        if len(stats.seen) > batches and backoff.next_attempt_ms is not None:
            backoff.succeeded(self._now_ms())
            stats.status = "running"
            self._say(run, "its destination is reachable again: catching up", "green")
        error = _query_error(query)
        if error is not None and not final and SourceSchemaChanged.marker in error[1]:
            self._follow(run)
            return False, None
        if (
            error is not None
            and not final
            and (backoff.failed_attempts < MAX_RETRIES or not self.once)
        ):
            self._back_off(run, error[0])
            return False, None
        if error is not None:
            stats.status = f"failed: {error[0]}"
            stats.finished = stats.finished or time.monotonic()
            return True, f"channel {run.channel}: {error[0]}"
        if active:
            return False, None
        if stats.finished is not None:
            return True, None
        reached = target_ms is not None and (stats.watermark_ms or -1) >= target_ms
        if target_ms is not None and not reached and not final:
            if stats.runs >= MAX_RUNS:
                return (
                    True,
                    f"channel {run.channel}: still short of the target after {MAX_RUNS} runs",
                )
            self._restart(run)
            stats.runs += 1
            return False, None
        stats.finished = time.monotonic()
        stats.status = "done" if reached else "stopped"
        return True, None


def _progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description:<10}"),
        BarColumn(bar_width=28),
        TextColumn("{task.fields[rows]:>9} rows  {task.fields[batches]:>3} batches"),
        TextColumn("lag {task.fields[lag]:>7}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def run_replication(
    spark: Any,
    plan: ReplicationPlan,
    *,
    once: bool = True,
    console: Console | None = None,
    timeout_s: float | None = None,
    stop: Callable[[], bool] | None = None,
    recheck_max_s: float = RECHECK_MAX_S,
    metrics: JobMetrics | None = None,
) -> ReplicationSummary:
    """Start one query per destination, show progress until they end (``once``), Ctrl-C,
    ``timeout_s`` or ``stop()`` is true; ReplicationFailed (after stopping them all) if one
    fails beyond its retries. A channel waiting for its destination does not keep a ``once``
    run going; its status says why it waits, and it is looked at again at most
    ``recheck_max_s`` apart. ``metrics`` gets every channel's figures each round."""
    console = console or Console()
    register_data_sources(spark)  # the session may be the caller's own
    started = time.monotonic()
    deadline = started + (timeout_s or (ONCE_TIMEOUT_S if once else float("inf")))
    confidence = int(plan.source_options.get("confidence_window_ms", 30_000))
    target_ms = time.time_ns() // 1_000_000 - confidence if once else None
    runner = _Runner(spark, plan, once, console, recheck_max_s)
    failure: str | None = None
    interrupted = False
    try:
        runner.start()
        with _progress_bar(console) as bar:
            tasks = {
                c: bar.add_task(c, total=100 if once else None, **_describe(s))
                for c, s in runner.stats.items()
            }
            done = False
            while not done and time.monotonic() < deadline and not (stop and stop()):
                done, failure = runner.poll(target_ms)
                if metrics is not None:
                    metrics.update(runner.figures())
                for channel, task in tasks.items():
                    stats = runner.stats[channel]
                    fraction = _fraction(stats, target_ms)
                    completed = 100.0 if stats.finished is not None and once else fraction
                    bar.update(task, completed=completed, **_describe(stats))
                if not done:
                    wait_for_change(runner.queries, POLL_S)
    except KeyboardInterrupt:
        interrupted = True
        console.print("[yellow]interrupted: stopping the queries (checkpoints are kept)")
    finally:
        _stop_all(runner.queries)
        runner.poll(target_ms, final=True)
        runner.tables.close()
        for channel_stats in runner.stats.values():
            channel_stats.finished = channel_stats.finished or time.monotonic()
            if once and channel_stats.status in ("running", "stopped"):
                channel_stats.status = "incomplete"  # Ctrl-C or timeout before the target
            elif channel_stats.status == "running":
                channel_stats.status = "stopped"
    elapsed = time.monotonic() - started
    summary = ReplicationSummary(
        list(runner.stats.values()), target_ms, elapsed, interrupted, time.time() - elapsed
    )
    if failure is not None:
        print_summary(console, summary)
        raise ReplicationFailed(failure)
    return summary


def print_summary(console: Console, summary: ReplicationSummary) -> None:
    """The per-channel summary table, then the schema changes followed and the retries."""
    table = RichTable(title=f"replication summary ({summary.seconds:.1f}s)")
    for name in ("channel", "destination", "changes", "batches", "changes/s", "lag", "status"):
        justify = "right" if name in ("changes", "batches", "changes/s", "lag") else "left"
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for stats in summary.channels:
        described = _describe(stats)
        table.add_row(
            stats.channel,
            stats.display,
            described["rows"],
            described["batches"],
            f"{stats.rate:,.0f}",
            described["lag"],
            escape(stats.status if stats.runs == 1 else f"{stats.status} ({stats.runs} runs)"),
        )
    console.print(table)
    for stats in summary.channels:
        for change in stats.schema_changes:
            console.print(f"{stats.channel}: followed a source schema change: {escape(change)}")
        for error in stats.errors:
            console.print(f"[yellow]{stats.channel}: retried after: {escape(error)}")


__all__ = [
    "DEFAULT_PORT",
    "ChannelStats",
    "Destination",
    "ReplicationFailed",
    "ReplicationPlan",
    "ReplicationSummary",
    "cdc_options",
    "channel_name",
    "destination",
    "parse_hosts",
    "parse_table_name",
    "plan_replication",
    "print_summary",
    "replication_spark",
    "run_replication",
    "source_table",
    "update_stats",
    "wait_for_change",
]
