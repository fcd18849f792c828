"""``ringflow replication``: the channels of replica-side replication (seed 002), kept in the
edge cluster (``system_replication.channels``) so every node and job sees the same ones.

    ringflow replication channel create NAME --source HOST[,HOST][:PORT] --table KS.T --to URL
        [--target-table T] [--priority 1-100] [--fifo-order | --lifo-order]
        [--slice-width-s S] [--slice-count N] [--no-collection] [--no-transmission]
    ringflow replication channel update NAME --source ... [any option of create]
    ringflow replication channel pause|resume NAME --source ... [--collection] [--transmission]
    ringflow replication channel drop NAME --source ...
    ringflow replication channel list --source ...
    ringflow replication dead-letters list|replay|drop --source ... --channel NAME
        [--to URL] [--before TIMEUUID|ISO-TIME]
    ringflow replication status --source ... [--json] [--watch S [--samples N] [--plot F]]

Names follow DSE Advanced Replication's ``dse advrep channel`` (``--priority``, ``--fifo-order``
/ ``--lifo-order``, ``pause --collection --transmission``). Every check runs before anything is
written: a bad URL, priority or slicing, an unknown table or channel, a table without CDC exit
with code 2 and one line saying what is wrong. A table has one slicing (a node captures it
once): a channel created without ``--slice-width-s``/``--slice-count`` takes its table's,
from the table's other channels (else 60 s x 5). ``pause`` without a switch pauses transmission
(the captured data is kept); ``--collection`` also lets nodes drop what this channel has not
sent.

Dead letters (REPLICATION.md decision 8) are the rows a destination refused as invalid, kept in
``system_replication.dead_letters`` per channel with the reason. ``list`` shows when each failed,
its id (a timeuuid), its table and the reason (shortened), and how many there are; ``replay``
applies each to the destination again (the channel's stored URL, or ``--to URL``, which a channel
of ``ringflow replicate`` needs: ``hub``, ``postgres``... are not stored) and deletes those
applied, keeping with the new reason those refused again; ``drop`` deletes them, all or those
that failed before ``--before``. An unknown channel (neither stored nor with dead letters), a
missing or bad ``--to``, a bad ``--before`` exit with code 2.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from ringflow.cli import EXIT_OK
from ringflow.cli._replicate import add_edge_access_options, edge_access, given_ssl
from ringflow.cli._replication_status import register as register_status

if TYPE_CHECKING:
    from ringflow.cli import Subcommands

DEAD_LETTERS_SHOWN = 100
REASON_SHOWN = 100  # characters of a reason in the list

_COLUMNS = (
    "channel",
    "source",
    "destination",
    "target",
    "priority",
    "order",
    "collection",
    "transmission",
    "slices",
)


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "replication", help="channels of replica-side replication (seed 002)"
    )
    verbs = parser.add_subparsers(dest="replication_command", metavar="<command>", required=True)
    channel = verbs.add_parser("channel", help="create, change, pause, resume, drop channels")
    actions = channel.add_subparsers(dest="channel_command", metavar="<action>", required=True)
    for action in ("create", "update"):
        _channel_options(actions.add_parser(action, help=f"{action} a channel"), action)
    for action in ("pause", "resume"):
        switch = actions.add_parser(action, help=f"{action} a channel's collection/transmission")
        _common(switch, named=True)
        switch.add_argument("--collection", action="store_true", help="capture for it")
        switch.add_argument("--transmission", action="store_true", help="sending to it")
        switch.set_defaults(handler=run_switch)
    drop = actions.add_parser("drop", help="drop a channel (its sent records are kept)")
    _common(drop, named=True)
    drop.set_defaults(handler=run_drop)
    listing = actions.add_parser("list", help="every channel")
    _common(listing, named=False)
    listing.set_defaults(handler=run_list)
    _dead_letter_commands(verbs)
    register_status(verbs)


def _dead_letter_commands(verbs: Any) -> None:
    parser = verbs.add_parser("dead-letters", help="rows a destination refused: list, replay, drop")
    actions = parser.add_subparsers(dest="dead_letters_command", metavar="<action>", required=True)
    listing = actions.add_parser("list", help="a channel's dead letters, oldest first")
    replay = actions.add_parser("replay", help="apply them again; delete those applied")
    drop = actions.add_parser("drop", help="delete them (all, or those before --before)")
    for action, handler in (
        (listing, run_dead_list),
        (replay, run_dead_replay),
        (drop, run_dead_drop),
    ):
        _common(action, named=False)
        action.add_argument("--channel", required=True, help="the channel's name")
        action.set_defaults(handler=handler)
    replay.add_argument("--to", metavar="URL", help="the destination (default: the channel's)")
    drop.add_argument("--before", metavar="TIMEUUID|TIME", help="only those that failed before")
    listing.add_argument("--limit", type=int, default=DEAD_LETTERS_SHOWN, help="rows shown")


def _common(parser: argparse.ArgumentParser, *, named: bool) -> None:
    if named:
        parser.add_argument("name", help="the channel's name")
    parser.add_argument("--source", required=True, help="edge contact point(s): host[,host][:port]")
    add_edge_access_options(parser)


def _channel_options(parser: argparse.ArgumentParser, action: str) -> None:
    _common(parser, named=True)
    required = action == "create"
    parser.add_argument("--table", required=required, help="the CDC-enabled source: ks.table")
    parser.add_argument("--to", required=required, metavar="URL", help="the destination")
    parser.add_argument("--target-table", help="the destination table (default: per sink)")
    parser.add_argument("--priority", type=int, help="1-100, higher first (default 50)")
    order = parser.add_mutually_exclusive_group()
    order.add_argument("--fifo-order", dest="order", action="store_const", const="fifo")
    order.add_argument("--lifo-order", dest="order", action="store_const", const="lifo")
    parser.add_argument("--slice-width-s", type=int, help="seconds per time slice (default 60)")
    parser.add_argument("--slice-count", type=int, help="open slices per range (default 5)")
    parser.add_argument("--no-collection", action="store_true", help="do not hold data for it")
    parser.add_argument("--no-transmission", action="store_true", help="create it paused")
    parser.set_defaults(handler=run_create if required else run_update)


def _session(arguments: argparse.Namespace) -> tuple[Any, Any]:
    """The edge's cluster and session, with the command line's login and TLS."""
    from ringflow.pipeline import connect_cluster

    return connect_cluster(edge_access(arguments, arguments.source))


def _slicing(arguments: argparse.Namespace, current: Any = None) -> Any:
    from ringflow.replication import SliceSettings

    width = arguments.slice_width_s
    count = arguments.slice_count
    if width is None and count is None:
        return current
    base = current or SliceSettings()
    return SliceSettings(
        base.slice_width_s if width is None else width,
        base.slice_count if count is None else count,
    )


def _absolute_destination(url: str) -> str:
    """A lake directory stored absolute: a job may run from anywhere."""
    from pathlib import Path

    for prefix in ("parquet://", "parquet:"):
        if url.startswith(prefix):
            return "parquet:" + str(Path(url[len(prefix) :]).expanduser().resolve())
    return url


def run_create(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import create_channel, parse_table_name
    from ringflow.replication import Channel, ChannelOrder

    keyspace, table = parse_table_name(arguments.table)
    options: dict[str, Any] = {}
    slicing = _slicing(arguments)
    if slicing is not None:
        options["slice_settings"] = slicing
    if arguments.priority is not None:
        options["priority"] = arguments.priority
    if arguments.order is not None:
        options["order"] = ChannelOrder.parse(arguments.order)
    channel = Channel(
        arguments.name,
        keyspace,
        table,
        _absolute_destination(arguments.to),
        target_table=arguments.target_table,
        collection_enabled=not arguments.no_collection,
        transmission_enabled=not arguments.no_transmission,
        **options,
    )
    cluster, session = _session(arguments)
    try:
        channel = create_channel(cluster, session, channel, inherit_slicing=slicing is None)
    finally:
        cluster.shutdown()
    Console().print(f"channel {channel.name}: {channel.source} -> {channel.display_destination}")
    return EXIT_OK


def run_update(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import find_channel, parse_table_name, update_channel
    from ringflow.replication import ChannelOrder

    cluster, session = _session(arguments)
    try:
        current = find_channel(session, arguments.name)
        changes: dict[str, object] = {}
        if arguments.table is not None:
            keyspace, table = parse_table_name(arguments.table)
            changes.update(source_keyspace=keyspace, source_table=table)
        if arguments.to is not None:
            changes["destination"] = _absolute_destination(arguments.to)
        for name in ("target_table", "priority"):
            if getattr(arguments, name) is not None:
                changes[name] = getattr(arguments, name)
        if arguments.order is not None:
            changes["order"] = ChannelOrder.parse(arguments.order)
        slicing = _slicing(arguments, current.slice_settings)
        if slicing is not None:
            changes["slice_settings"] = slicing
        if arguments.no_collection:
            changes["collection_enabled"] = False
        if arguments.no_transmission:
            changes["transmission_enabled"] = False
        update_channel(cluster, session, arguments.name, **changes)
    finally:
        cluster.shutdown()
    Console().print(f"channel {arguments.name} updated")
    return EXIT_OK


def run_switch(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import update_channel

    enabled = arguments.channel_command == "resume"
    changes: dict[str, object] = {}
    if arguments.collection:
        changes["collection_enabled"] = enabled
    if arguments.transmission or not arguments.collection:
        changes["transmission_enabled"] = enabled
    cluster, session = _session(arguments)
    try:
        update_channel(cluster, session, arguments.name, **changes)
    finally:
        cluster.shutdown()
    what = " and ".join(name.split("_")[0] for name in changes)
    Console().print(f"channel {arguments.name}: {what} {'resumed' if enabled else 'paused'}")
    return EXIT_OK


def run_drop(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import drop_channel, find_channel

    cluster, session = _session(arguments)
    try:
        find_channel(session, arguments.name)
        drop_channel(session, arguments.name)
    finally:
        cluster.shutdown()
    Console().print(f"channel {arguments.name} dropped")
    return EXIT_OK


def run_list(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import channel_table_rows, load_channels

    cluster, session = _session(arguments)
    try:
        channels = load_channels(session)
    finally:
        cluster.shutdown()
    table = RichTable(*_COLUMNS)
    for row in channel_table_rows(channels):
        table.add_row(*row)
    Console().print(table)
    return EXIT_OK


# -- dead letters ---------------------------------------------------------------------------------


def _stored_channel(session: Any, name: str) -> Any:
    from ringflow.pipeline import load_channels

    return next((c for c in load_channels(session) if c.name == name), None)


def _known_channel(session: Any, name: str) -> Any:
    """The stored channel (or None for a job's channel that has dead letters); unknown: exit 2."""
    from ringflow.pipeline import PipelineConfigError, list_dead_letters

    stored = _stored_channel(session, name)
    if stored is None and next(iter(list_dead_letters(session, name)), None) is None:
        raise PipelineConfigError(
            f"unknown channel {name!r}: not in system_replication.channels and no dead letters"
        )
    return stored


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_dead_list(arguments: argparse.Namespace) -> int:
    import datetime

    from ringflow.pipeline import list_dead_letters

    cluster, session = _session(arguments)
    table = RichTable("failed_at", "id", "table", "reason")
    count = 0
    try:
        _known_channel(session, arguments.channel)
        for letter in list_dead_letters(session, arguments.channel):
            count += 1
            if count > max(arguments.limit, 0):
                continue
            moment = datetime.datetime.fromtimestamp(letter.failed_at_us / 1e6, datetime.UTC)
            table.add_row(
                moment.isoformat(timespec="seconds"),
                str(letter.failed_at),
                f"{letter.keyspace}.{letter.table}",
                _shorten(letter.reason, REASON_SHOWN),
            )
    finally:
        cluster.shutdown()
    console = Console()
    if count:
        console.print(table, soft_wrap=True)
    shown = f" ({arguments.limit} shown)" if count > arguments.limit else ""
    console.print(f"channel {arguments.channel}: {count} dead letter(s){shown}")
    return EXIT_OK


def run_dead_replay(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import (
        DestinationAppliers,
        PipelineConfigError,
        load_table,
        replay_dead_letters,
    )

    cluster, session = _session(arguments)
    try:
        stored = _known_channel(session, arguments.channel)
        url, target = arguments.to, None
        if url is None and stored is None:
            raise PipelineConfigError(
                f"channel {arguments.channel!r} is not stored in system_replication.channels "
                "(a 'ringflow replicate' channel): give its destination with --to URL"
            )
        if url is None:
            url, target = stored.destination, stored.target

        def source_table(keyspace: str, name: str) -> Any:
            return load_table(cluster, keyspace, name)

        with DestinationAppliers(url, source_table, target, given_ssl(arguments)) as apply:
            report = replay_dead_letters(session, arguments.channel, apply)
    finally:
        cluster.shutdown()
    console = Console()
    console.print(
        f"channel {arguments.channel}: {report.applied} applied (deleted), "
        f"{report.kept} refused again (kept)"
    )
    for reason in report.reasons or []:
        console.print(f"  refused: {escape(_shorten(reason, 300))}", soft_wrap=True)
    return EXIT_OK


def run_dead_drop(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import PipelineConfigError, drop_dead_letters, failed_before

    before = None
    if arguments.before is not None:
        try:
            before = failed_before(arguments.before)
        except ValueError as error:
            raise PipelineConfigError(f"--before: {error}") from None
    cluster, session = _session(arguments)
    try:
        _known_channel(session, arguments.channel)
        dropped = drop_dead_letters(session, arguments.channel, before=before)
    finally:
        cluster.shutdown()
    Console().print(f"channel {arguments.channel}: {dropped} dead letter(s) dropped")
    return EXIT_OK
