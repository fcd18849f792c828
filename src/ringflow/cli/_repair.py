"""``ringflow cluster repair --data DIR [KEYSPACE[.TABLE]] [--pr] [--start-token T --end-token T]
[--preview] [--node ADDRESS]``: Merkle-tree anti-entropy repair (issue 17, cassandra-core.md §7.3).

The command asks one running node (``--node``, else the first running node of the cluster) to
coordinate, over that node's request channel (the owner-only ``control.sock`` in its data
directory that ``removenode`` uses; a node runs one repair at a time, the others wait), then
follows its progress there with a progress bar per table and prints its summary: per table the
ranges, leaves compared, mismatching leaves (and their ranges with ``--preview``), partitions
differing and streamed, bytes streamed, time, and every range that could not be repaired with
its reason. Exit status: 0 when every range was repaired (or previewed), 1 when any range failed
(e.g. a replica down), 2 for bad input (unknown keyspace or table, a token outside the Murmur3
bounds, a node that is not running): nothing is done then.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ringflow.cli import EXIT_FAILURE, EXIT_OK
from ringflow.cluster import (
    LAST_REPAIRS_FILE,
    RepairOptions,
    RepairSummary,
)
from ringflow.errors import ConfigurationError, RingflowError
from ringflow.node import control_request, request_until_taken

if TYPE_CHECKING:
    import argparse as _argparse


def register_repair(actions: _argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    repair = actions.add_parser("repair", help="Merkle-tree anti-entropy repair of a keyspace")
    repair.add_argument("target", help="KEYSPACE or KEYSPACE.TABLE")
    repair.add_argument("--data", required=True, type=Path)
    repair.add_argument("--pr", action="store_true", help="primary ranges of the node only")
    repair.add_argument("--start-token", type=int, help="subrange start (exclusive)")
    repair.add_argument("--end-token", type=int, help="subrange end (inclusive)")
    repair.add_argument("--preview", action="store_true", help="report what would stream")
    repair.add_argument("--node", help="address of the node that coordinates")
    repair.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait")
    repair.add_argument("--json", action="store_true", help="print the summary as JSON")
    repair.set_defaults(handler=run_cluster_repair)


def _options(arguments: argparse.Namespace) -> RepairOptions:
    keyspace, _, table = str(arguments.target).partition(".")
    if not keyspace:
        raise ConfigurationError(f"not a keyspace or keyspace.table: {arguments.target!r}")
    try:
        return RepairOptions(
            keyspace,
            (table,) if table else (),
            primary_range=arguments.pr,
            start_token=arguments.start_token,
            end_token=arguments.end_token,
            preview=arguments.preview,
        )
    except RingflowError as error:
        raise ConfigurationError(str(error)) from None


def _coordinator_dir(data: Path, address: str | None) -> Path:
    from ringflow.cli import _cluster as cluster_cli

    layout = cluster_cli._load_layout(data)
    nodes = cluster_cli._nodes(layout)
    if address is not None:
        chosen = [n for n in nodes if n["address"] == address]
        if not chosen:
            raise ConfigurationError(f"no node {address} in the cluster at {data}")
        directory = data / str(chosen[0]["dir"])
        if not cluster_cli._pid(directory):
            raise ConfigurationError(f"cannot reach node {address}: it is not running")
        return directory
    for node in nodes:
        directory = data / str(node["dir"])
        if cluster_cli._pid(directory):
            return directory
    raise ConfigurationError(f"cannot reach any node of {data}: none is running")


def _wait(directory: Path, options: RepairOptions, timeout_s: float, quiet: bool) -> RepairSummary:
    """Follow the repair over the node's request channel (``repair-status`` every 0.2 s) with
    a progress bar per table until its summary comes."""
    from ringflow.cli import _cluster as cluster_cli

    request_id = str(options.id)
    deadline = time.monotonic() + timeout_s
    console = Console(stderr=True, quiet=quiet)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=False) as bar:
        tasks: dict[str, object] = {}
        while True:
            if not cluster_cli._pid(directory):
                raise RingflowError(f"the coordinator in {directory} stopped during the repair")
            try:
                status = control_request(directory, {"request": "repair-status", "id": request_id})
            except ConfigurationError as error:
                raise RingflowError(f"repair {request_id}: {error}") from None
            _show(bar, tasks, status.get("progress"))
            result = status.get("result")
            if result is not None:
                return RepairSummary.from_json(json.dumps(result))
            if not status.get("known"):
                raise RingflowError(f"the coordinator in {directory} lost repair {request_id}")
            if time.monotonic() > deadline:
                raise RingflowError(f"repair {request_id} not done in {timeout_s} s")
            time.sleep(0.2)


def _show(bar: Progress, tasks: dict[str, object], progress: object) -> None:
    if not isinstance(progress, dict):
        return
    for table, (done, total) in sorted(progress.items()):
        if table not in tasks:
            tasks[table] = bar.add_task(f"repair {table}", total=total)
        bar.update(tasks[table], completed=done, total=total)  # type: ignore[arg-type]


def format_summary(summary: RepairSummary) -> str:
    verb = "preview of" if summary.preview else "repair of"
    lines = [f"{verb} {summary.keyspace} ({summary.id}) coordinated by {summary.coordinator}"]
    for table in summary.tables:
        lines.append(
            f"  {table.keyspace}.{table.table}: {table.ranges} ranges, "
            f"{table.ranges_repaired} {'compared' if summary.preview else 'repaired'}, "
            f"{len(table.ranges_failed)} failed; {table.leaves_compared} leaves compared, "
            f"{table.leaves_mismatching} mismatching in {table.ranges_mismatching} ranges, "
            f"{table.partitions_differing} partitions differing; "
            f"{table.partitions_streamed} partitions / {table.bytes_streamed} bytes streamed; "
            f"{table.elapsed_ms / 1000:.1f} s"
        )
        if summary.preview:
            lines += [f"    would stream {where}" for where in table.mismatching_ranges]
        lines += [f"    FAILED {where}: {reason}" for where, reason in table.ranges_failed]
    failed = summary.failed_ranges
    lines.append(
        f"{failed} ranges could not be repaired"
        if failed
        else f"done in {summary.elapsed_ms / 1000:.1f} s"
    )
    return "\n".join(lines)


def run_cluster_repair(arguments: argparse.Namespace) -> int:
    options = _options(arguments)
    directory = _coordinator_dir(arguments.data, arguments.node)
    fields = {
        "id": str(options.id),
        "keyspace": options.keyspace,
        "tables": list(options.tables),
        "primary_range": options.primary_range,
        "start_token": options.start_token,
        "end_token": options.end_token,
        "preview": options.preview,
    }
    deadline = time.monotonic() + arguments.timeout
    request = {"request": "repair", "options": fields}
    request_until_taken(directory, request, deadline, "repair")
    summary = _wait(directory, options, max(0.0, deadline - time.monotonic()), arguments.json)
    if summary.error is not None:
        raise ConfigurationError(f"repair refused: {summary.error}")
    print(summary.to_json() if arguments.json else format_summary(summary), flush=True)
    return EXIT_FAILURE if summary.failed_ranges else EXIT_OK


def last_repairs(data: Path, layout: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """The last fully successful repair of each table, from every node's ``repairs.json``."""
    from ringflow.cli import _cluster as cluster_cli

    found: dict[str, dict[str, object]] = {}
    for node in cluster_cli._nodes(dict(layout)):
        try:
            known = json.loads((data / str(node["dir"]) / LAST_REPAIRS_FILE).read_text())
        except (OSError, ValueError):
            continue
        for table, entry in known.items():
            at = int(str(entry.get("finished_at_ms", 0)))
            if table not in found or at > int(str(found[table].get("finished_at_ms", 0))):
                found[table] = entry
    return found


def format_last_repairs(data: Path, layout: Mapping[str, object]) -> list[str]:
    lines = []
    for table, entry in sorted(last_repairs(data, layout).items()):
        at = datetime.datetime.fromtimestamp(int(str(entry["finished_at_ms"])) / 1000, datetime.UTC)
        lines.append(
            f"last repair {table}: {at.isoformat(timespec='seconds')} "
            f"(id {uuid.UUID(str(entry['id']))}, by {entry.get('coordinator')})"
        )
    return lines
