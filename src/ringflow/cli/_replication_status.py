"""``ringflow replication status``: per channel its backlog and what its job says, per node its
active ranges by rank and its slices (:mod:`ringflow.pipeline._replication_status`).

    ringflow replication status --source HOST[,HOST][:PORT] [--json]
        [--watch SECONDS [--samples N] [--plot FILE.png]]

Channels: backlog in slices (of which waiting for a node to seal), rows, age of the oldest;
the state its job last reported (``running``, ``unreachable since ...``) and how long ago, sends
per unique change, lag. Nodes: up or down, active ranges as primary / secondary / tertiary...,
slices matched / mismatched / out-of-sequence. ``--json`` prints the same as one JSON document.
``--watch`` looks again every SECONDS (``--samples`` times, else until Ctrl-C) and ``--plot``
then draws backlog and lag per channel over that time. An edge that cannot be reached exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table as RichTable

from ringflow.cli import EXIT_OK
from ringflow.cli._replicate import add_edge_access_options, edge_access

if TYPE_CHECKING:
    from ringflow.pipeline import ReplicationStatus

RANK_NAMES = ("primary", "secondary", "tertiary")
WIDE = 220  # columns of the tables when the output is not a terminal


def register(verbs: Any) -> None:
    parser = verbs.add_parser("status", help="backlog per channel, ranks and slices per node")
    parser.add_argument("--source", required=True, help="edge contact point(s): host[,host][:port]")
    add_edge_access_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--watch", type=_positive, metavar="SECONDS", help="look again every S")
    parser.add_argument("--samples", type=int, help="with --watch: this many looks, then stop")
    parser.add_argument("--plot", type=Path, metavar="FILE", help="with --watch: a PNG at the end")
    parser.set_defaults(handler=run_status)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"seconds in [0.1, 86400], got {value}")
    return value


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _ranks(by_rank: tuple[int, ...]) -> str:
    parts = [
        f"{count} {RANK_NAMES[i] if i < len(RANK_NAMES) else f'rank {i + 1}'}"
        for i, count in enumerate(by_rank)
        if count
    ]
    return ", ".join(parts) or "none"


def print_status(console: Console, status: ReplicationStatus) -> None:
    document = status.as_json()
    channels = RichTable(title="channels")
    for name in (
        "channel",
        "table",
        "destination",
        "prio",
        "backlog slices",
        "rows",
        "oldest",
        "job state",
        "sends/change",
        "lag",
    ):
        channels.add_column(name)
    for row in document["channels"]:
        updated = row["job_updated_at_ms"]
        state = row["state"] or "no job has reported"
        if updated:
            state += f" ({_age((status.at_ms - updated) / 1000)} ago)"
        ratio = row["sends_per_change"]
        waiting = f" ({row['backlog_waiting']} waiting)" if row["backlog_waiting"] else ""
        channels.add_row(
            row["channel"],
            row["table"],
            row["destination"],
            str(row["priority"]),
            f"{row['backlog_slices']}{waiting}",
            f"{row['backlog_rows']:,}",
            _age(row["oldest_age_s"]),
            state,
            "-" if ratio is None else f"{ratio:.3f} ({row['sends']:,}/{row['unique_changes']:,})",
            "-" if row["lag_s"] is None else f"{row['lag_s']:.1f} s",
        )
    nodes = RichTable(title="nodes")
    for name in ("node", "state", "active ranges", "matched", "mismatched", "out-of-sequence"):
        nodes.add_column(name)
    for node in document["nodes"]:
        nodes.add_row(
            node["address"],
            "UP" if node["live"] else "DOWN",
            _ranks(tuple(node["active_by_rank"])),
            str(node["matched"]),
            str(node["mismatched"]),
            str(node["out_of_sequence"]),
        )
    console.print(channels, soft_wrap=True)
    console.print(nodes, soft_wrap=True)
    if status.unreachable_nodes:
        console.print(f"[yellow]not answering: {', '.join(status.unreachable_nodes)}")


def run_status(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import (
        PipelineConfigError,
        close_cached_sessions,
        parse_hosts,
        plot_status,
        read_status,
        status_view,
    )

    if (arguments.samples is not None or arguments.plot) and arguments.watch is None:
        raise PipelineConfigError("--samples and --plot need --watch SECONDS")
    hosts, port = parse_hosts(arguments.source, "--source")
    console = Console(width=None if sys.stdout.isatty() else WIDE)  # a pipe gets whole rows
    view = status_view(hosts, port, edge=edge_access(arguments, arguments.source))
    samples = []
    try:
        while True:
            status = read_status(view)
            samples.append(status)
            if arguments.json:
                print(json.dumps(status.as_json()), flush=True)
            else:
                print_status(console, status)
            done = arguments.watch is None or (
                arguments.samples is not None and len(samples) >= arguments.samples
            )
            if done:
                break
            time.sleep(arguments.watch)
    except KeyboardInterrupt:
        console.print("[yellow]stopped")
    finally:
        view.close()
        close_cached_sessions()  # main() may run in-process: leave no session reconnecting
    if arguments.plot:
        plot_status(samples, arguments.plot)
        console.print(f"backlog and lag per channel: {arguments.plot}")
    return EXIT_OK
