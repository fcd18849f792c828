"""``ringflow replicate --capture replica``: the replicas' sealed time slices to every channel.

    ringflow replicate --capture replica --source HOST[,HOST][:PORT] --checkpoint DIR
        [--once | --continuous] [--permits N] [--master URL] [--channel NAME ...]
        [--table KS.T --to URL ... [--slice-width-s S] [--slice-count N] [--priority P]
         [--fifo-order | --lifo-order]] [--alter-destinations [CHANNELS]]
        [--metrics-port P [--metrics-host ADDRESS]]

Runs every channel of ``system_replication.channels`` with transmission enabled (or those
named with ``--channel``, or those of ``--table``), one Spark streaming query each with its
checkpoint in ``DIR/<channel>`` (:mod:`ringflow.pipeline._replica_job`). With ``--table`` and
``--to`` the channels for those destinations are created or updated first (named hub, lake,
postgres as the log mode names its channels). Every check runs before a job starts: a bad URL,
priority or slicing, an unknown table or channel, a table without CDC, or no channel to run
exit with code 2 and one line. ``--once`` delivers what was sealed when it started and ends;
``--continuous`` runs until Ctrl-C. A channel whose destination is away backs off and retries
without end while the others go on. A schema change of the source is followed as in the log
mode (``--alter-destinations``: the channels whose hub or PostgreSQL table may be altered).
``--metrics-port`` serves each channel's figures (backlog, lag, sends, unique changes...) as
Prometheus metrics, as in the log mode; the job also writes them to
``system_replication.channel_progress`` for ``ringflow replication status``.

``--capture log`` (the default) is the log mode of :mod:`ringflow.cli._replicate`; the options
above that only the replica mode knows are refused there.
"""

from __future__ import annotations

import argparse
from typing import Final

from rich.console import Console

from ringflow.cli import EXIT_FAILURE, EXIT_OK

EXIT_INTERRUPTED: Final = 130
_REPLICA_ONLY: Final = (
    ("permits", "--permits"),
    ("channel", "--channel"),
    ("priority", "--priority"),
    ("order", "--fifo-order/--lifo-order"),
    ("slice_width_s", "--slice-width-s"),
    ("slice_count", "--slice-count"),
)


def add_replica_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--capture",
        choices=("log", "replica"),
        default="log",
        help="log: read the CDC log at QUORUM (default); replica: transmit the replicas' "
        "sealed time slices through the stored channels (seed 002)",
    )
    group = parser.add_argument_group("--capture replica")
    group.add_argument("--permits", type=int, help="slices in transmission at once (default 32)")
    group.add_argument(
        "--channel", action="append", metavar="NAME", help="run only this channel (repeatable)"
    )
    group.add_argument("--priority", type=int, help="of the --to channels: 1-100, higher first")
    order = group.add_mutually_exclusive_group()
    order.add_argument("--fifo-order", dest="order", action="store_const", const="fifo")
    order.add_argument("--lifo-order", dest="order", action="store_const", const="lifo")
    group.add_argument("--slice-width-s", type=int, help="of the --to channels' table (s)")
    group.add_argument("--slice-count", type=int, help="open slices a range (the window)")


def check_log_mode(arguments: argparse.Namespace) -> None:
    """The log mode needs --table and --to and takes no replica-only option."""
    from ringflow.pipeline import PipelineConfigError

    if not arguments.table or not arguments.to:
        raise PipelineConfigError("--table and --to are required (or --capture replica)")
    for name, flag in _REPLICA_ONLY:
        if getattr(arguments, name, None) is not None:
            raise PipelineConfigError(f"{flag} needs --capture replica")


def alter_destinations(text: str | None) -> bool | list[str]:
    """``--alter-destinations``: True for all channels (``all``), else the channels named."""
    if text == "all":
        return True
    return [name.strip() for name in text.split(",") if name.strip()] if text else False


def run_replica(arguments: argparse.Namespace) -> int:
    from pathlib import Path

    from pyspark.sql import SparkSession

    from ringflow.pipeline import (
        ChannelSpec,
        JobMetrics,
        ReplicaJob,
        check_driver_address,
        plan_replica_job,
        print_replica_summary,
        replica_spark,
        serve_job_metrics,
        spark_settings,
    )
    from ringflow.replication import DEFAULT_PERMITS

    console = Console()
    settings = spark_settings(arguments.master, arguments.conf, arguments.driver_host)
    check_driver_address(settings.conf)  # before any channel or destination is touched
    spec = ChannelSpec(
        table=arguments.table,
        urls=tuple(arguments.to or ()),
        channels=tuple(arguments.channel or ()),
        priority=arguments.priority,
        order=arguments.order,
        slice_width_s=arguments.slice_width_s,
        slice_count=arguments.slice_count,
    )
    permits = DEFAULT_PERMITS if arguments.permits is None else arguments.permits
    alter = alter_destinations(arguments.alter_destinations)
    from ringflow.cli._replicate import given_ssl, source_login

    plan = plan_replica_job(
        arguments.source,
        arguments.checkpoint,
        spec,
        permits=permits,
        alter_destinations=alter,
        login=source_login(arguments),
        tls=given_ssl(arguments),
    )
    console.print(f"replica-side replication from {arguments.source}; channels:")
    for channel_plan in plan.channels:
        channel = channel_plan.channel
        note = f"  [yellow]({channel_plan.setup_error})" if channel_plan.setup_error else ""
        note += " (may alter its table)" if channel_plan.allow_alter else ""
        console.print(
            f"  {channel.name:<10} {channel.source} -> {channel.display_destination} "
            f"(priority {channel.priority}, {channel.order.value}){note}"
        )
    metrics = JobMetrics()
    if serve_job_metrics(metrics, arguments.metrics_host, arguments.metrics_port):
        console.print(f"metrics on http://{arguments.metrics_host}:{arguments.metrics_port}/")
    owned = SparkSession.getActiveSession() is None  # embedded callers keep their session
    priorities = [p.channel.priority for p in plan.channels]
    spark = replica_spark("ringflow-replicate", settings, priorities, Path(plan.checkpoint))
    try:
        job = ReplicaJob(
            spark,
            plan,
            once=not arguments.continuous,
            console=console,
            timeout_s=arguments.timeout,
            metrics=metrics,
        )
        summary = job.run()
    finally:
        if owned:
            spark.stop()
    print_replica_summary(console, summary)
    if summary.interrupted:
        return EXIT_OK if arguments.continuous else EXIT_INTERRUPTED
    return EXIT_OK if summary.ok else EXIT_FAILURE
