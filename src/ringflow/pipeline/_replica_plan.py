"""What a ``ringflow replicate --capture replica`` job runs: its channels, checked up front.

Channels are rows of ``system_replication.channels`` (``ringflow replication channel ...``,
:mod:`._channel_store`). A job runs every channel with transmission enabled (or the ones named
with ``channels``, or those of ``table``). For convenience, ``table`` with destination ``urls``
first creates or updates one channel per URL, named as ``ringflow replicate`` names its
channels (hub, lake, postgres; ``-2``, ``-3``... for a second of a kind), with the slicing,
priority and order given (REPLICATION.md decision 7).

Everything is checked before any job starts, the first problem raising
:class:`PipelineConfigError` or ``ReplicationArgumentError`` (both exit 2 from the CLI): an
unreachable edge, an unknown table or channel, a table without CDC, a bad URL, priority or
slicing, channels of one table that slice it differently, no channel to run, and each new
destination (it is connected to, as ``ringflow replicate`` does). A stored channel whose
destination cannot be reached now is not an error: the job starts and that channel backs off
until it can (REPLICATION.md decision 8), so :class:`ReplicaChannelPlan` keeps the reason.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringflow.pipeline._channel_store import check_channel, load_channels, save_channel
from ringflow.pipeline._cluster_client import (
    ClusterOptions,
    DriverTls,
    connect,
    credentials,
    load_table,
)
from ringflow.pipeline._dead_letters import dead_letter_access_options
from ringflow.pipeline._destinations import (
    Destination,
    hub_access,
    parse_hosts,
    parse_table_name,
)
from ringflow.pipeline._errors import DestinationBehind, PipelineConfigError, SchemaConflict
from ringflow.pipeline._hub import HUB_FORMAT, hub_options
from ringflow.pipeline._lake import LAKE_FORMAT, lake_options
from ringflow.pipeline._postgres import POSTGRES_FORMAT, postgres_options
from ringflow.replication import (
    DEFAULT_PERMITS,
    PERMITS_MAX,
    Channel,
    ChannelOrder,
    DestinationKind,
    SliceSettings,
    table_slice_settings,
)
from ringflow.schema import Table

_SINK_FORMATS = {
    DestinationKind.HUB: HUB_FORMAT,
    DestinationKind.LAKE: LAKE_FORMAT,
    DestinationKind.POSTGRES: POSTGRES_FORMAT,
}


@dataclass(frozen=True, slots=True)
class ChannelSpec:
    """The channel options of the command line (None: not given)."""

    table: str | None = None
    urls: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    priority: int | None = None
    order: str | None = None
    slice_width_s: int | None = None
    slice_count: int | None = None


@dataclass(frozen=True, slots=True)
class ReplicaChannelPlan:
    """One channel the job runs: its base table and its sink (None with ``setup_error`` when
    the destination could not be prepared at start: retried by the job; ``blocked`` when it
    cannot take the table: the job waits for the operator). ``allow_alter``: the job may add
    the source's new columns to the hub or PostgreSQL target (``--alter-destinations``)."""

    channel: Channel
    table: Table
    destination: Destination | None
    setup_error: str | None = None
    allow_alter: bool = False


@dataclass(frozen=True, slots=True)
class ReplicaJobPlan:
    """The edge, the channels, the checkpoint root and the global permits."""

    source: ClusterOptions
    channels: tuple[ReplicaChannelPlan, ...]
    checkpoint: Path
    permits: int


def edge_access(options: ClusterOptions) -> dict[str, str]:
    """How a sink reaches the edge for its dead letters: as the job does (login, TLS)."""
    return dead_letter_access_options(options.username, options.password, options.tls)


def channel_destination(
    channel: Channel, table: Table, allow_alter: bool = False, edge: ClusterOptions | None = None
) -> Destination:
    """The channel's sink options, checked by the sink (connects, creates a PostgreSQL target,
    makes the lake directory); PipelineConfigError in one line when that fails. A destination
    that cannot take ``table`` (a new column it may not add, a clashing one: DestinationBehind,
    SchemaConflict, with the statements to run) is returned ``blocked`` with that message.
    ``edge``: the edge cluster as the job reaches it, where a PostgreSQL or hub sink keeps the
    changes it refuses as invalid (under the channel's name), with the job's login and TLS."""
    url = channel.destination_url
    dead_letters: dict[str, str] = {}
    if edge is not None:
        dead_letters = {"dead_letters": edge_hosts(edge), "channel": channel.name}
        dead_letters.update(edge_access(edge))
    try:
        if url.kind is DestinationKind.HUB:
            keyspace, name = parse_table_name(channel.target)
            tls, login = hub_access(url.url, None if edge is None else edge.tls)
            options = hub_options(
                url.hosts,
                keyspace,
                name,
                table,
                port=url.port or 9042,
                consistency=url.consistency or "QUORUM",
                allow_alter=allow_alter,
                tls=tls,
                login=login,
            )
            options = {**options, **dead_letters}
        elif url.kind is DestinationKind.LAKE:
            path = Path(channel.target).expanduser().absolute()
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise PipelineConfigError(f"lake directory {path}: {error}") from None
            options = lake_options(path, table)
        else:
            options = postgres_options(url.url, channel.target, table, allow_alter=allow_alter)
            options = {**options, **dead_letters}
    except (DestinationBehind, SchemaConflict) as error:
        kind = url.kind.value
        display = channel.display_destination
        sink = _SINK_FORMATS[url.kind]
        blocked = str(error)
        return Destination(channel.name, kind, display, sink, {}, display, "", allow_alter, blocked)
    except PipelineConfigError as error:
        text = " ".join(str(error).split())
        raise PipelineConfigError(f"channel {channel.name}: {text}") from None
    return Destination(
        channel.name,
        url.kind.value,
        channel.display_destination,
        _SINK_FORMATS[url.kind],
        options,
        channel.target,
        "",
        allow_alter,
    )


def edge_hosts(source: ClusterOptions) -> str:
    """``host[,host...]:port`` of the edge (where dead letters are kept)."""
    return f"{','.join(source.contact_points)}:{source.port}"


def edge_options(
    source: str, login: Mapping[str, str] | None = None, tls: DriverTls | None = None
) -> ClusterOptions:
    """The edge (its channels table) as the job and ``ringflow replication`` reach it: with the
    source's login (``username`` and ``password``, resolved on the driver) and TLS, if any."""
    hosts, port = parse_hosts(source, "source")
    username, password = credentials(login or {}, "source")
    return ClusterOptions(
        hosts,
        "system_replication",
        "channels",
        port,
        consistency="QUORUM",
        tls=tls,
        username=username,
        password=password,
    )


def _channel_names(urls: Sequence[str]) -> list[str]:
    """hub, lake, postgres, and -2, -3... for a second of a kind, as ``ringflow replicate``."""
    from ringflow.replication import parse_destination

    names: list[str] = []
    for url in urls:
        kind = parse_destination(url).kind.value
        name, number = kind, 1
        while name in names:
            number += 1
            name = f"{kind}-{number}"
        names.append(name)
    return names


def _requested_channels(spec: ChannelSpec, existing: Sequence[Channel]) -> list[Channel]:
    """The channels ``spec.urls`` create or update (validated, not saved)."""
    if spec.table is None:
        raise PipelineConfigError("--to needs --table (the source of the channels)")
    keyspace, name = parse_table_name(spec.table)
    by_name = {channel.name: channel for channel in existing}
    same_table = [c for c in existing if c.source == f"{keyspace}.{name}"]
    slicing = same_table[0].slice_settings if same_table else SliceSettings()
    if spec.slice_width_s is not None or spec.slice_count is not None:
        slicing = SliceSettings(
            slicing.slice_width_s if spec.slice_width_s is None else spec.slice_width_s,
            slicing.slice_count if spec.slice_count is None else spec.slice_count,
        )
    changes: dict[str, Any] = {"slice_settings": slicing}
    if spec.priority is not None:
        changes["priority"] = spec.priority
    if spec.order is not None:
        changes["order"] = ChannelOrder.parse(spec.order)
    wanted = []
    for channel_name, url in zip(_channel_names(spec.urls), spec.urls, strict=True):
        url = _absolute_lake(url)
        current = by_name.get(channel_name)
        if current is None:
            wanted.append(Channel(channel_name, keyspace, name, url, **changes))
        else:
            wanted.append(
                current.updated(
                    source_keyspace=keyspace, source_table=name, destination=url, **changes
                )
            )
    return wanted


def _absolute_lake(url: str) -> str:
    for prefix in ("parquet://", "parquet:"):
        if url.startswith(prefix):
            return "parquet:" + str(Path(url[len(prefix) :]).expanduser().absolute())
    return url


def plan_replica_job(
    source: str,
    checkpoint: str | Path,
    spec: ChannelSpec,
    *,
    permits: int = DEFAULT_PERMITS,
    alter_destinations: bool | Collection[str] = False,
    login: Mapping[str, str] | None = None,
    tls: DriverTls | None = None,
) -> ReplicaJobPlan:
    """Check everything (module docstring), save the requested channels, and return the plan.
    ``alter_destinations``: the channels (all when True) whose hub or PostgreSQL target the job
    may alter to follow the source's new columns (issue 15). ``login`` and ``tls``: how the
    edge is reached (``edge_options``), by the job, its reads of each node and its sinks' dead
    letters."""

    def may_alter(name: str) -> bool:
        return alter_destinations is True or (
            not isinstance(alter_destinations, bool) and name in alter_destinations
        )

    if type(permits) is not int or not 1 <= permits <= PERMITS_MAX:
        raise PipelineConfigError(f"--permits must be in [1, {PERMITS_MAX}], got {permits!r}")
    options = edge_options(source, login, tls)
    cluster, session = connect(options)
    try:
        existing = load_channels(session)
        wanted = _requested_channels(spec, existing) if spec.urls else []
        names = {channel.name for channel in wanted}
        merged = [c for c in existing if c.name not in names] + wanted
        table_slice_settings(merged)  # one slicing per table (checked again per channel)
        for channel in wanted:
            check_channel(cluster, channel, merged)
        sinks = {
            c.name: channel_destination(c, _table(cluster, c), may_alter(c.name), options)
            for c in wanted
        }
        for channel in wanted:
            save_channel(session, channel)
        chosen = _chosen(spec, merged, names, cluster)
        plans = [
            _channel_plan(
                cluster, channel, sinks.get(channel.name), may_alter(channel.name), options
            )
            for channel in chosen
        ]
    finally:
        cluster.shutdown()
    root = Path(checkpoint).expanduser().absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PipelineConfigError(f"checkpoint directory {root}: {error}") from None
    return ReplicaJobPlan(options, tuple(plans), root, permits)


def _table(cluster: Any, channel: Channel) -> Table:
    table = load_table(cluster, channel.source_keyspace, channel.source_table)
    if not table.options.cdc.enabled:
        raise PipelineConfigError(f"channel {channel.name!r}: table {channel.source} has no CDC")
    return table


def _chosen(
    spec: ChannelSpec, channels: Sequence[Channel], requested: set[str], cluster: Any
) -> list[Channel]:
    """The channels to run: named ones, else the requested ones, else those of ``spec.table``,
    else all; only those with transmission enabled."""
    by_name = {channel.name: channel for channel in channels}
    unknown = sorted(set(spec.channels) - set(by_name))
    if unknown:
        raise PipelineConfigError(f"unknown channel(s) {unknown}; known: {sorted(by_name)}")
    if spec.channels:
        chosen = [by_name[name] for name in spec.channels]
    elif requested:
        chosen = [by_name[name] for name in sorted(requested)]
    elif spec.table is not None:
        keyspace, name = parse_table_name(spec.table)
        load_table(cluster, keyspace, name)  # an unknown table is an error, not "no channels"
        chosen = [c for c in channels if c.source == f"{keyspace}.{name}"]
    else:
        chosen = list(channels)
    running = [channel for channel in chosen if channel.transmission_enabled]
    if not running:
        raise PipelineConfigError(
            "no channel to run: create one (ringflow replication channel create, or "
            "--table with --to here) or resume the paused ones"
        )
    return running


def _channel_plan(
    cluster: Any,
    channel: Channel,
    sink: Destination | None,
    allow_alter: bool,
    source: ClusterOptions,
) -> ReplicaChannelPlan:
    table = _table(cluster, channel)
    if sink is not None:
        return ReplicaChannelPlan(channel, table, sink, allow_alter=allow_alter)
    try:
        sink = channel_destination(channel, table, allow_alter, source)
        return ReplicaChannelPlan(channel, table, sink, allow_alter=allow_alter)
    except PipelineConfigError as error:  # a stored channel's destination away: backs off
        return ReplicaChannelPlan(channel, table, None, str(error), allow_alter)
