"""``ringflow diff``: compare one table between a cluster and another cluster, a Parquet lake's
live state or a PostgreSQL sink's live view (a Spark job: :mod:`ringflow.pipeline._diff`).

    ringflow diff --source 127.0.0.1[:port] --table ks.t \\
        --target HOSTS | ringflow://HOSTS[/ks.t2] | lake:DIR | postgresql://u@h:5432/db \\
        [--target-table ks.t2] [--consistency ALL] [--splits 256] [--examples 10] [--json] \\
        [--master local[2]] [--conf spark.key=value ...] [--driver-host ADDRESS]

Prints the rows compared on each side and, by kind, the rows that differ: ``missing`` (on the
source only), ``extra`` (on the target only), ``values`` and ``writetime`` (same key, other
values, or the same values written at other times), with up to ``--examples`` keys each and the
token ranges that differ; ``--json`` prints the same as one JSON document. Exit status: 0 when
the tables are equal, 1 when they differ, 2 on any error (bad arguments, an unknown table, a
side that cannot be reached or read); the diff writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table as RichTable

from ringflow.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from ringflow.cli._replicate import add_ssl_options, given_ssl

if TYPE_CHECKING:
    from ringflow.cli import Subcommands
    from ringflow.pipeline import DiffReport


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "diff",
        help="compare a table across two clusters, or with a lake or PostgreSQL (Spark)",
        description="Compare --table at --source with --target, token range by token range "
        "(hashes first, rows of the ranges that differ); exit 0 when equal, 1 when different, "
        "2 on error.",
    )
    parser.add_argument(
        "--source", required=True, help="cluster contact point(s): host[,host][:port]"
    )
    parser.add_argument(
        "--target",
        required=True,
        help="host[,host][:port], ringflow://host[:port][/ks.table], lake:DIR (parquet:DIR) or "
        "postgresql://user@host:port/db",
    )
    parser.add_argument("--table", required=True, help="the source table: keyspace.table")
    parser.add_argument("--target-table", help="the target's keyspace.table (default: --table)")
    parser.add_argument(
        "--consistency", default="ALL", help="read consistency of cluster sides (default ALL)"
    )
    parser.add_argument(
        "--splits",
        type=_bounded(1, 100_000),
        default=256,
        help="token ranges the ring is cut into (default 256)",
    )
    parser.add_argument(
        "--examples",
        type=_bounded(0, 10_000),
        default=10,
        help="example keys shown per kind (default 10)",
    )
    add_ssl_options(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--master", help="Spark master (default local[2], or spark-submit's)")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )
    parser.add_argument("--driver-host", metavar="ADDRESS", help="spark.driver.host")
    logins = parser.add_argument_group(
        "logins to auth-enabled clusters (passwords: a file's first line, else the "
        "environment's RINGFLOW_PASSWORD)"
    )
    logins.add_argument("--username", help="role to log in to the source as")
    logins.add_argument("--password-file", help="the source's password file")
    logins.add_argument("--target-username", help="role to log in to a cluster target as")
    logins.add_argument("--target-password-file", help="the target's password file")
    parser.set_defaults(handler=run)


def _login(username: str | None, password_file: str | None) -> dict[str, str] | None:
    if not username:
        return None
    return {"username": username, **({"password_file": password_file} if password_file else {})}


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {value}")
        return value

    return parse


def run(arguments: argparse.Namespace) -> int:
    from ringflow.errors import RingflowError
    from ringflow.pipeline import check_driver_address, plan_diff, spark_settings

    try:
        settings = spark_settings(arguments.master, arguments.conf, arguments.driver_host)
        check_driver_address(settings.conf)
        plan = plan_diff(
            arguments.source,
            arguments.target,
            arguments.table,
            target_table=arguments.target_table,
            consistency=arguments.consistency,
            splits=arguments.splits,
            tls=given_ssl(arguments),
            source_login=_login(arguments.username, arguments.password_file),
            target_login=_login(arguments.target_username, arguments.target_password_file),
        )
        report = _run_job(plan, settings, arguments.examples)
    except RingflowError as error:
        print(f"ringflow diff: error: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # a side failing while Spark reads it: still exit 2, one line
        message = " ".join(str(error).split())[:500]
        print(f"ringflow diff: error: {type(error).__name__}: {message}", file=sys.stderr)
        return EXIT_USAGE
    if arguments.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_report(Console(), report)
    return EXIT_OK if report.equal else EXIT_FAILURE


def _run_job(plan: Any, settings: Any, examples: int) -> DiffReport:
    from pyspark.sql import SparkSession

    from ringflow.pipeline import run_diff, spark_session

    owned = SparkSession.getActiveSession() is None  # embedded callers keep their session
    spark = spark_session("ringflow-diff", settings)
    try:
        return run_diff(spark, plan, examples)
    finally:
        if owned:
            spark.stop()


def print_report(console: Console, report: DiffReport) -> None:
    """The report as tables: the sides, the counts by kind with examples, differing ranges."""
    from ringflow.pipeline import DifferenceKind

    verdict = "[green]EQUAL" if report.equal else "[red]DIFFERENT"
    console.print(f"{report.table}: {report.source} -> {report.target}: {verdict}")
    console.print(
        f"rows: {report.source_rows:,} at the source, {report.target_rows:,} at the target; "
        f"{report.ranges:,} token ranges, {len(report.differing):,} differ"
    )
    counts = RichTable(title="rows that differ")
    for name in ("kind", "rows", "examples (key: source | target)"):
        counts.add_column(name, justify="right" if name == "rows" else "left")
    for kind in DifferenceKind:
        shown = [f"{d.key}: {d.source} | {d.target}" for d in report.examples.get(kind, ())]
        counts.add_row(kind.value, f"{report.counts.get(kind, 0):,}", "\n".join(shown) or "-")
    console.print(counts)
    if report.differing:
        ranges = RichTable(title="token ranges that differ (after, until]")
        for name in ("after", "until", "source rows", "target rows", "differences"):
            ranges.add_column(name, justify="right")
        for item in report.differing[:20]:
            found = ", ".join(f"{k.value} {n}" for k, n in item.counts.items() if n)
            ranges.add_row(
                str(item.after),
                str(item.until),
                str(item.source_rows),
                str(item.target_rows),
                found,
            )
        console.print(ranges)
        if len(report.differing) > 20:
            console.print(f"... and {len(report.differing) - 20} more ranges (--json lists all)")
