"""``ringflow replicate``: stream a table's CDC log from an edge cluster to hubs, lakes,
PostgreSQL, Delta Lake and Iceberg (the job of :mod:`ringflow.pipeline._replicate`).

    ringflow replicate --source 127.0.0.1[:port] --table ks.t \\
        --to ringflow://127.0.0.11[:port] --to parquet:DIR --to postgresql://u@127.0.0.1:5432/db \\
        --to delta:DIR --to iceberg:CATALOG#namespace.table \\
        --checkpoint DIR [--once | --continuous] [--master local[*] | spark://host:7077] \\
        [--conf spark.key=value ...] [--driver-host ADDRESS]

The source and every destination are checked before Spark starts: an unreachable source or
sink, a table without CDC or a malformed ``--to`` exit with code 2 and one line naming it. A
channel failing while running exits with code 1. ``--once`` (the default) replicates what the
source can give now (up to now - confidence window) and ends; ``--continuous`` runs until
Ctrl-C (exit 0; an interrupted ``--once`` run exits 130). Each channel keeps its own
checkpoint in ``DIR/<channel>``, so running the command again continues where it stopped.

Schema changes of the source table (``ALTER TABLE ... ADD/DROP``) are followed while it runs:
the lake records a new schema version, a dropped column stays at every destination, and the
hub and PostgreSQL get a new column when ``--alter-destinations`` allows it (all channels, or
the ones named: ``--alter-destinations hub,postgres``); otherwise that channel stops, prints the
statements to run and resumes by itself once they have run, the others going on.

Spark: ``--conf`` settings win over spark-submit's and ``spark-defaults.conf``, which win over
ringflow's defaults (``local[2]``, the driver on loopback in local mode only); ``--driver-host``
is the address executors reach the driver at. A bad setting exits 2. ``spark-submit`` runs the
same job with the same options through :mod:`ringflow.cli.replicate_job`.

TLS (issue 18): ``--ssl-ca FILE`` (with ``--ssl-certfile``/``--ssl-keyfile`` when the edge
requires client certificates) connects to the source over TLS; a hub destination takes
``ringflow://host/ks.t?ssl=true[&ca=FILE][&certfile=FILE&keyfile=FILE]`` and PostgreSQL its
libpq parameters in the URL (``?sslmode=verify-full&sslrootcert=FILE``). Only file paths are
given; a password in a URL is redacted wherever the URL is printed.

``--capture replica`` transmits the replicas' sealed time slices instead (seed 002; the
channels of ``system_replication.channels``): :mod:`ringflow.cli._replicate_replica`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console

from ringflow.cli import EXIT_FAILURE, EXIT_OK
from ringflow.cli._replicate_replica import (
    add_replica_options,
    alter_destinations,
    check_log_mode,
    run_replica,
)

if TYPE_CHECKING:
    from ringflow.cli import Subcommands
    from ringflow.pipeline import ClusterOptions, DriverTls

EXIT_INTERRUPTED = 130  # a --once run stopped by Ctrl-C before its target (as shells report)


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "replicate",
        help="replicate a table's changes to hubs, Parquet lakes, PostgreSQL, Delta and Iceberg "
        "(Spark)",
        description="Stream the CDC log of one table to every --to destination, one Spark "
        "Structured Streaming query (channel) per destination.",
    )
    parser.add_argument("--source", required=True, help="edge contact point(s): host[,host][:port]")
    add_login_options(parser)
    parser.add_argument("--table", help="the CDC-enabled table: keyspace.table")
    parser.add_argument(
        "--to",
        action="append",
        metavar="URL",
        help="ringflow://host[:port][/ks.table] (a hub), parquet:DIR (a Parquet change lake), "
        "postgresql://user@host:port/db, delta:DIR (a Delta change log + DIR_current, the "
        "current state) or iceberg:CATALOG#namespace.table (Iceberg tables table and "
        "table_current; CATALOG a SQLite .db path, sqlite:/// or postgresql+psycopg://... "
        "?warehouse=DIR URI) (repeatable)",
    )
    parser.add_argument("--checkpoint", required=True, help="checkpoint root (one dir a channel)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="replicate what is there, then stop")
    mode.add_argument("--continuous", action="store_true", help="run until Ctrl-C")
    parser.add_argument(
        "--master",
        help="Spark master: local[N] (default local[2], or spark-submit's), spark://host:port, ...",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable); wins over spark-submit's, spark-defaults.conf and "
        "ringflow's defaults",
    )
    parser.add_argument(
        "--driver-host",
        metavar="ADDRESS",
        help="the address executors reach the driver at (spark.driver.host; the driver "
        "listens there unless spark.driver.bindAddress says otherwise)",
    )
    parser.add_argument(
        "--consistency",
        default="QUORUM",
        help="source read consistency (QUORUM: a replica that missed writes cannot hide them)",
    )
    parser.add_argument(
        "--confidence-window-ms",
        type=int,
        help="how far behind now the source reads (default: the source's, 30 s)",
    )
    add_ssl_options(parser)
    parser.add_argument("--query-window-ms", type=int, help="source query window (default 30 s)")
    parser.add_argument("--max-window-ms", type=int, help="at most this much time a batch")
    parser.add_argument("--timeout", type=float, help="stop after this many seconds")
    parser.add_argument(
        "--alter-destinations",
        nargs="?",
        const="all",
        metavar="CHANNELS",
        help="let ringflow add the source's new columns to the hub and PostgreSQL tables: all "
        "channels, or a comma list (hub,postgres,hub-2); without it such a channel stops and "
        "prints the statements to run",
    )
    parser.add_argument(
        "--metrics-port",
        type=_port,
        default=0,
        help="serve the channels' figures as Prometheus metrics on this port (0: none)",
    )
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="the address the metrics are served on"
    )
    add_replica_options(parser)
    parser.set_defaults(handler=run)


def add_ssl_options(parser: argparse.ArgumentParser) -> None:
    """``--ssl-ca FILE`` (and a client certificate) for the source cluster, and the default of
    ``ringflow://...?ssl=true`` destinations (issue 18)."""
    parser.add_argument(
        "--ssl-ca",
        metavar="FILE",
        help="TLS to the source cluster: the CA (PEM) its certificates chain to; also used by "
        "ringflow:// destinations given ?ssl=true without ca=FILE",
    )
    parser.add_argument("--ssl-certfile", metavar="FILE", help="client certificate (PEM)")
    parser.add_argument("--ssl-keyfile", metavar="FILE", help="its private key (PEM)")


def given_ssl(arguments: argparse.Namespace) -> DriverTls | None:
    from ringflow.pipeline import driver_tls

    return driver_tls(
        {
            "ssl_ca": arguments.ssl_ca or "",
            "ssl_certfile": arguments.ssl_certfile or "",
            "ssl_keyfile": arguments.ssl_keyfile or "",
        }
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is in [0, 65535], got {port}")
    return port


def add_edge_access_options(parser: argparse.ArgumentParser) -> None:
    """How an edge with auth and TLS is reached: ``--username`` / ``--password-file`` and
    ``--ssl-ca`` (with ``--ssl-certfile`` / ``--ssl-keyfile``)."""
    add_login_options(parser)
    add_ssl_options(parser)


def edge_access(arguments: argparse.Namespace, source: str) -> ClusterOptions:
    """The edge at ``source`` (its ``system_replication`` tables) with the command line's
    login and TLS (``add_edge_access_options``)."""
    from ringflow.pipeline import edge_options

    return edge_options(source, source_login(arguments), given_ssl(arguments))


def add_login_options(parser: argparse.ArgumentParser) -> None:
    """``--username`` / ``--password-file`` for an auth-enabled source (the password also from
    ``RINGFLOW_PASSWORD``; never a command-line value, which ``ps`` shows). A hub takes its
    own in its URL: ``ringflow://user@host/ks.t?password_file=PATH``."""
    parser.add_argument("--username", help="role to log in to the source as")
    parser.add_argument(
        "--password-file",
        help="file whose first line is the source password (default: env RINGFLOW_PASSWORD)",
    )


def source_login(arguments: argparse.Namespace) -> dict[str, str]:
    """The source's credentials, resolved here on the driver (Spark's Python workers do not
    see this process's environment, nor maybe its files): ``username`` and ``password``
    options, which Spark redacts from plans (``spark.redaction.regex``)."""
    from ringflow.pipeline import credentials

    given = {}
    if getattr(arguments, "username", None):
        given["username"] = str(arguments.username)
        if getattr(arguments, "password_file", None):
            given["password_file"] = str(arguments.password_file)
    username, password = credentials(given, "--username")
    if username is None or password is None:
        return {}
    return {"username": username, "password": password}


def run(arguments: argparse.Namespace) -> int:
    if arguments.capture == "replica":
        return run_replica(arguments)
    check_log_mode(arguments)
    from ringflow.pipeline import (
        cdc_options,
        check_driver_address,
        plan_replication,
        print_summary,
        run_replication,
        spark_settings,
    )

    console = Console()
    settings = spark_settings(arguments.master, arguments.conf, arguments.driver_host)
    check_driver_address(settings.conf)  # before any destination is touched
    options = cdc_options(
        arguments.source,
        arguments.table,
        consistency=arguments.consistency,
        confidence_window_ms=arguments.confidence_window_ms,
        query_window_ms=arguments.query_window_ms,
        max_window_ms=arguments.max_window_ms,
        tls=given_ssl(arguments),
    )
    options.update(source_login(arguments))
    alter = alter_destinations(arguments.alter_destinations)
    plan = plan_replication(options, arguments.to, arguments.checkpoint, alter_destinations=alter)
    console.print(f"source {arguments.table} at {arguments.source}; channels:")
    for destination in plan.destinations:
        altering = " (may alter its table)" if destination.allow_alter else ""
        console.print(f"  {destination.channel:<10} -> {destination.display}{altering}")
    from pyspark.sql import SparkSession

    from ringflow.pipeline import JobMetrics, replication_spark, serve_job_metrics

    metrics = JobMetrics()
    if serve_job_metrics(metrics, arguments.metrics_host, arguments.metrics_port):
        console.print(f"metrics on http://{arguments.metrics_host}:{arguments.metrics_port}/")
    owned = SparkSession.getActiveSession() is None  # embedded callers keep their session
    spark = replication_spark("ringflow-replicate", settings)
    try:
        summary = run_replication(
            spark,
            plan,
            once=not arguments.continuous,
            console=console,
            timeout_s=arguments.timeout,
            metrics=metrics,
        )
    finally:
        if owned:
            spark.stop()
    print_summary(console, summary)
    if summary.interrupted:
        return EXIT_OK if arguments.continuous else EXIT_INTERRUPTED
    return EXIT_OK if summary.ok else EXIT_FAILURE
