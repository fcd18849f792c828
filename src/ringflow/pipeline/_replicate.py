"""The replication job: the CDC log of one edge table streamed to hubs, lakes and PostgreSQL.

One Structured Streaming query per destination ("channel"), each reading
``spark.readStream.format("ringflow-cdc")`` for the table and writing to its sink with its own
checkpoint ``<checkpoint>/<channel>``, so channels progress, fail and restart independently and
each is exactly-once in effect on its own (the sinks are idempotent per batch, the source is
replayable from the checkpointed offsets).

Destinations (``--to``):

- ``ringflow://host[,host...][:port][/keyspace.table][?consistency=ONE]``: a hub cluster through
  ``ringflow-hub`` (default target: the source's keyspace and table name).
- ``parquet:DIR`` (or ``parquet://DIR``): the Parquet change lake ``ringflow-lake`` at ``DIR``.
- ``postgresql://user@host:port/db`` (or ``postgres://``): ``ringflow-postgres``, target table
  ``<keyspace>_<table>`` (with its ``_live`` view).

Everything is checked on the driver before Spark starts: the source is reached and the table
must have CDC enabled, every destination is validated (``hub_options`` connects and looks the
target up, ``postgres_options`` connects and creates the target, the lake directory must be
creatable and writable); the first problem raises :class:`PipelineConfigError` naming it.

Modes: ``once`` replicates everything the source can give at the start (up to the target time
now - confidence window) with ``trigger(availableNow=True)``. Spark fixes the end offset of such
a run when it starts, and the source's latest offset never crosses a CDC generation boundary
(a new generation starts e.g. when a node restarts), so a run may end at a boundary short of the
target: the channel's query is then started again from its checkpoint, until its watermark has
passed the target (at most ``MAX_RUNS`` runs). Every run ends cleanly after a whole batch, so no
batch is ever interrupted. A channel whose query fails is restarted from its checkpoint up to
``MAX_RETRIES`` times (a loaded machine has transient failures); after that every query is
stopped and :class:`ReplicationFailed` names the channel and the error. ``continuous``
runs with a processing-time trigger until Ctrl-C (or ``timeout_s``). Progress comes from each
query's ``recentProgress`` (rows, batches, lag = batch end time - source watermark) and is shown
as one rich progress line per channel, followed by a summary table.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from ringflow.errors import RingflowError
from ringflow.pipeline._cdc_source import CDC_FORMAT
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._hub import HUB_FORMAT, hub_options
from ringflow.pipeline._lake import LAKE_FORMAT, lake_options
from ringflow.pipeline._postgres import POSTGRES_FORMAT, postgres_options, redact
from ringflow.pipeline._spark_session import register_data_sources
from ringflow.schema import Table

DEFAULT_PORT = 9042
DEFAULT_TRIGGER = "1 second"
MAX_RUNS = 100
MAX_RETRIES = 3  # failed runs of one channel restarted from its checkpoint before giving up
POLL_S = 0.5
ONCE_TIMEOUT_S = 3600.0
STOP_TIMEOUT_S = 60.0


class ReplicationFailed(RingflowError):
    """A channel's streaming query failed while running (its error is in the message)."""


# --- what to replicate ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Destination:
    """One validated destination: its channel name, sink format and sink options."""

    channel: str
    kind: str  # "hub", "lake" or "postgres"
    display: str
    sink_format: str
    options: Mapping[str, str]
    target: str  # hub keyspace.table, lake directory or PostgreSQL table


@dataclass(frozen=True, slots=True)
class ReplicationPlan:
    """The source options, its table and the validated destinations."""

    source_options: Mapping[str, str]
    table: Table
    destinations: tuple[Destination, ...]
    checkpoint: Path


def parse_hosts(text: str, what: str) -> tuple[tuple[str, ...], int]:
    """``host[,host...][:port]`` as (hosts, port); PipelineConfigError when malformed."""
    text = text.strip()
    port = DEFAULT_PORT
    head, sep, tail = text.rpartition(":")
    if sep and tail.isdigit() and "]" not in tail:
        text, port = head, int(tail)
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    if not hosts or not 0 < port < 65536 or any(":" in h or "/" in h for h in hosts):
        raise PipelineConfigError(f"{what} {text!r} is not host[,host...][:port]")
    return hosts, port


def parse_table_name(text: str) -> tuple[str, str]:
    keyspace, sep, name = text.strip().partition(".")
    if not sep or not keyspace or not name or "." in name:
        raise PipelineConfigError(f"table {text!r} is not keyspace.table")
    return keyspace, name


def cdc_options(
    source: str, table: str, *, consistency: str = "QUORUM", **extra: int | None
) -> dict[str, str]:
    """The ``ringflow-cdc`` options for ``table`` at ``source`` (extra: window options)."""
    hosts, port = parse_hosts(source, "source")
    keyspace, name = parse_table_name(table)
    options = {
        "contact_points": ",".join(hosts),
        "port": str(port),
        "keyspace": keyspace,
        "table": name,
        "consistency": consistency,
    }
    options.update({k: str(v) for k, v in extra.items() if v is not None})
    return options


def source_table(options: Mapping[str, str]) -> Table:
    """Reach the source and load the table; PipelineConfigError unless it has CDC enabled."""
    from ringflow.pipeline._cluster_client import cluster_options, load_table, open_session

    settings = cluster_options(options)
    with open_session(settings) as (cluster, _):
        table = load_table(cluster, settings.keyspace, settings.table)
    if not table.options.cdc.enabled:
        raise PipelineConfigError(f"table {settings.table_name} does not have CDC enabled")
    return table


def _hub_destination(url: str, table: Table) -> tuple[str, Mapping[str, str], str]:
    parts = urlsplit(url)
    hosts, port = parse_hosts(parts.netloc, "hub address")
    target = parts.path.strip("/") or f"{table.keyspace}.{table.name}"
    keyspace, name = parse_table_name(target)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = sorted(set(query) - {"consistency"})
    if unknown:
        raise PipelineConfigError(f"{url!r}: unknown parameter(s) {unknown}")
    consistency = query.get("consistency", "QUORUM").upper()
    options = hub_options(hosts, keyspace, name, table, port=port, consistency=consistency)
    return HUB_FORMAT, options, f"{keyspace}.{name}"


def _lake_destination(url: str, table: Table) -> tuple[str, Mapping[str, str], str]:
    raw = url.split(":", 1)[1]
    raw = raw[2:] if raw.startswith("//") else raw
    if not raw:
        raise PipelineConfigError(f"{url!r}: the lake directory is missing (parquet:DIR)")
    path = Path(raw).expanduser().absolute()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PipelineConfigError(f"lake directory {path} cannot be created: {error}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise PipelineConfigError(f"lake directory {path} is not writable")
    return LAKE_FORMAT, lake_options(path, table), str(path)


def _postgres_destination(url: str, table: Table) -> tuple[str, Mapping[str, str], str]:
    target = f"{table.keyspace}_{table.name}"
    return POSTGRES_FORMAT, postgres_options(url, target, table), target


_KINDS: Mapping[str, tuple[str, Callable[[str, Table], tuple[str, Mapping[str, str], str]]]] = {
    "ringflow": ("hub", _hub_destination),
    "parquet": ("lake", _lake_destination),
    "postgresql": ("postgres", _postgres_destination),
    "postgres": ("postgres", _postgres_destination),
}


def destination(url: str, table: Table, taken: Sequence[str] = ()) -> Destination:
    """One ``--to`` URL checked against its sink (module docstring); the channel name is the
    kind, with ``-2``, ``-3``... when ``taken`` already has it."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in _KINDS:
        raise PipelineConfigError(
            f"destination {redact(url)!r}: expected ringflow://host[:port], parquet:DIR "
            "or postgresql://user@host:port/db"
        )
    kind, build = _KINDS[scheme]
    try:
        sink_format, options, target = build(url, table)
    except PipelineConfigError as error:  # drivers' messages may span lines: one line here
        raise PipelineConfigError(" ".join(str(error).split())) from None
    channel, n = kind, 1
    while channel in taken:
        n += 1
        channel = f"{kind}-{n}"
    return Destination(channel, kind, redact(url), sink_format, options, target)


def plan_replication(
    source_options: Mapping[str, str], urls: Sequence[str], checkpoint: str | Path
) -> ReplicationPlan:
    """Check the source and every destination (no Spark needed); PipelineConfigError first."""
    if not urls:
        raise PipelineConfigError("at least one destination (--to) is required")
    table = source_table(source_options)
    destinations: list[Destination] = []
    for url in urls:
        destinations.append(destination(url, table, [d.channel for d in destinations]))
    root = Path(checkpoint).expanduser().absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PipelineConfigError(f"checkpoint directory {root}: {error}") from None
    return ReplicationPlan(dict(source_options), table, tuple(destinations), root)


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


def _progress_entries(query: Any) -> list[dict[str, Any]]:
    entries = []
    for progress in query.recentProgress or []:
        text = getattr(progress, "json", None)
        entries.append(json.loads(text) if isinstance(text, str) else dict(progress))
    return entries


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


def _start_query(spark: Any, plan: ReplicationPlan, dest: Destination, once: bool) -> Any:
    frame = spark.readStream.format(CDC_FORMAT).options(**plan.source_options).load()
    writer = (
        frame.writeStream.format(dest.sink_format)
        .options(**dest.options)
        .option("checkpointLocation", str(plan.checkpoint / dest.channel))
        .queryName(f"replicate_{dest.channel.replace('-', '_')}")
    )
    trigger = {"availableNow": True} if once else {"processingTime": DEFAULT_TRIGGER}
    return writer.trigger(**trigger).start()


def replication_spark(app_name: str, master: str) -> Any:
    """The (possibly existing) local SparkSession of the job, bound to loopback, with the
    ringflow sources and sinks registered."""
    from ringflow.pipeline._spark_session import local_spark_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # and no warning about the hostname
    return local_spark_session(app_name, master=master)


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


def _query_error(query: Any) -> str | None:
    error = query.exception()
    if error is None:
        return None
    text = str(getattr(error, "desc", None) or error)
    lines = [line for line in text.splitlines() if line.strip()]
    useful = [line for line in lines if "Error" in line or "error" in line]
    return (useful[-1] if useful else (lines[0] if lines else text)).strip()[:400]


Restart = Callable[[str], Any]


def wait_for_change(queries: Mapping[str, Any], seconds: float) -> None:
    """Sleep up to ``seconds``, returning as soon as the first running query ends, so that its
    end is seen then, not at the next poll (a short ``--once`` run is not rounded up to the
    poll period). A query that ends with an error returns too; :func:`_poll` reports it."""
    running = [query for query in queries.values() if query.isActive]
    if not running:
        time.sleep(seconds)
        return
    with contextlib.suppress(Exception):  # a failed query raises here: _poll reads its error
        running[0].awaitTermination(max(seconds, 0.001))


def _poll(
    queries: dict[str, Any],
    stats: Mapping[str, ChannelStats],
    target_ms: int | None,
    restart: Restart | None,
) -> tuple[bool, str | None]:
    """One round: fold progress; a ``once`` query that ended short of ``target_ms`` (at a
    generation boundary) is started again from its checkpoint. (all finished?, first failure)"""
    finished = True
    for channel, query in list(queries.items()):
        channel_stats = stats[channel]
        active = query.isActive  # before reading progress: a final batch is never missed
        update_stats(channel_stats, _progress_entries(query))
        error = _query_error(query)
        if error is not None and restart is not None and channel_stats.retries < MAX_RETRIES:
            # transient failures happen on a loaded machine (e.g. Spark's 10 s limit for a
            # Python worker to connect back): the checkpoint makes a restart exactly-once
            channel_stats.retries += 1
            channel_stats.errors.append(error)
            queries[channel] = restart(channel)
            finished = False
            continue
        if error is not None:
            channel_stats.status = f"failed: {error}"
            channel_stats.finished = channel_stats.finished or time.monotonic()
            return True, f"channel {channel}: {error}"
        if active:
            finished = False
            continue
        if channel_stats.finished is not None:
            continue
        reached = target_ms is not None and (channel_stats.watermark_ms or -1) >= target_ms
        if target_ms is not None and not reached and restart is not None:
            if channel_stats.runs >= MAX_RUNS:
                return True, f"channel {channel}: still short of the target after {MAX_RUNS} runs"
            queries[channel] = restart(channel)
            channel_stats.runs += 1
            finished = False
            continue
        channel_stats.finished = time.monotonic()
        channel_stats.status = "done" if reached else "stopped"
    return finished, None


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
) -> ReplicationSummary:
    """Start one query per destination, show progress until they end (``once``), Ctrl-C or
    ``timeout_s``; ReplicationFailed (after stopping them all) if one fails."""
    console = console or Console()
    register_data_sources(spark)  # the session may be the caller's own
    started = time.monotonic()
    deadline = started + (timeout_s or (ONCE_TIMEOUT_S if once else float("inf")))
    confidence = int(plan.source_options.get("confidence_window_ms", 30_000))
    target_ms = time.time_ns() // 1_000_000 - confidence if once else None
    stats = {d.channel: ChannelStats(d.channel, d.display) for d in plan.destinations}
    queries: dict[str, Any] = {}
    failure: str | None = None
    interrupted = False
    by_channel = {dest.channel: dest for dest in plan.destinations}

    def restart(channel: str) -> Any:
        return _start_query(spark, plan, by_channel[channel], once)

    try:
        for dest in plan.destinations:
            queries[dest.channel] = _start_query(spark, plan, dest, once)
        with _progress_bar(console) as bar:
            tasks = {
                c: bar.add_task(c, total=100 if once else None, **_describe(s))
                for c, s in stats.items()
            }
            done = False
            while not done and time.monotonic() < deadline:
                done, failure = _poll(queries, stats, target_ms, restart)
                for channel, task in tasks.items():
                    fraction = _fraction(stats[channel], target_ms)
                    finished = stats[channel].finished is not None
                    bar.update(
                        task,
                        completed=100.0 if finished and once else fraction,
                        **_describe(stats[channel]),
                    )
                if not done:
                    wait_for_change(queries, POLL_S)
    except KeyboardInterrupt:
        interrupted = True
        console.print("[yellow]interrupted: stopping the queries (checkpoints are kept)")
    finally:
        _stop_all(queries)
        _poll(queries, stats, target_ms, None)
        for channel_stats in stats.values():
            channel_stats.finished = channel_stats.finished or time.monotonic()
            if once and channel_stats.status in ("running", "stopped"):
                channel_stats.status = "incomplete"  # Ctrl-C or timeout before the target
            elif channel_stats.status == "running":
                channel_stats.status = "stopped"
    elapsed = time.monotonic() - started
    summary = ReplicationSummary(
        list(stats.values()), target_ms, elapsed, interrupted, time.time() - elapsed
    )
    if failure is not None:
        print_summary(console, summary)
        raise ReplicationFailed(failure)
    return summary


def print_summary(console: Console, summary: ReplicationSummary) -> None:
    """The per-channel summary table."""
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
            stats.status if stats.runs == 1 else f"{stats.status} ({stats.runs} runs)",
        )
    console.print(table)
    for stats in summary.channels:
        for error in stats.errors:
            console.print(f"[yellow]{stats.channel}: retried after: {error}")
