"""Channels in the edge cluster: read, created, changed and dropped through the driver.

A channel is a row of ``system_replication.channels`` (``ringflow.replication`` owns the model,
its validation and the row codec; REPLICATION.md decision 4), so every node and every job sees
the same configuration. This module is the driver side: it checks what only the cluster can
tell (the source table exists and has CDC on; two channels of one table agree on the slicing)
before anything is written, and reads and writes the rows at QUORUM. Errors are the operator's
(:class:`PipelineConfigError`, exit code 2 from the CLI), each naming the channel or table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from ringflow.errors import ClientError
from ringflow.pipeline._cluster_client import load_table
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.replication import (
    CHANNEL_COLUMNS,
    CHANNELS_TABLE,
    REPLICATION_KEYSPACE,
    Channel,
    channel_from_row,
    channel_to_row,
    table_slice_settings,
)

_TABLE = f"{REPLICATION_KEYSPACE}.{CHANNELS_TABLE}"
_QUORUM = ConsistencyLevel.QUORUM


def _statement(query: str) -> SimpleStatement:
    return SimpleStatement(query, consistency_level=_QUORUM)


def load_channels(session: Any) -> list[Channel]:
    """Every channel, by name. A row that no longer validates is an error naming it."""
    rows = session.execute(_statement(f"SELECT * FROM {_TABLE}"))
    channels = []
    for row in rows:
        try:
            channels.append(channel_from_row(dict(row)))
        except ClientError as error:
            name = row.get("name")
            raise PipelineConfigError(f"channel {name!r} is unreadable: {error}") from None
    return sorted(channels, key=lambda channel: channel.name)


def find_channel(session: Any, name: str) -> Channel:
    for channel in load_channels(session):
        if channel.name == name:
            return channel
    raise PipelineConfigError(f"unknown channel {name!r}")


def check_channel(cluster: Any, channel: Channel, others: Iterable[Channel]) -> None:
    """The source table exists and captures changes (``cdc = {'enabled': true}``), and every
    channel of that table slices it the same way (a node captures a table once)."""
    table = load_table(cluster, channel.source_keyspace, channel.source_table)
    if not table.options.cdc.enabled:
        raise PipelineConfigError(
            f"channel {channel.name!r}: table {channel.source} has no CDC "
            "(ALTER TABLE ... WITH cdc = {'enabled': true} first)"
        )
    try:
        table_slice_settings([*(c for c in others if c.name != channel.name), channel])
    except ClientError as error:
        raise PipelineConfigError(f"channel {channel.name!r}: {error}") from None


def save_channel(session: Any, channel: Channel) -> None:
    row = channel_to_row(channel)
    columns = [name for name in CHANNEL_COLUMNS if name in row]
    query = (
        f"INSERT INTO {_TABLE} ({', '.join(columns)}) VALUES ({', '.join('%s' for _ in columns)})"
    )
    session.execute(_statement(query), [row[name] for name in columns])


def drop_channel(session: Any, name: str) -> None:
    session.execute(_statement(f"DELETE FROM {_TABLE} WHERE name = %s"), [name])


def create_channel(
    cluster: Any, session: Any, channel: Channel, *, inherit_slicing: bool = False
) -> Channel:
    """A new channel: refused when the name exists, the table has no CDC or slices otherwise.
    ``inherit_slicing`` (no slicing asked for): take the table's from its other channels."""
    existing = load_channels(session)
    if any(c.name == channel.name for c in existing):
        raise PipelineConfigError(f"channel {channel.name!r} exists (update or drop it)")
    if inherit_slicing:
        same_table = [c for c in existing if c.source == channel.source]
        if same_table:
            channel = channel.updated(slice_settings=same_table[0].slice_settings)
    check_channel(cluster, channel, existing)
    save_channel(session, channel)
    return channel


def update_channel(cluster: Any, session: Any, name: str, **changes: object) -> Channel:
    """``name`` with ``changes`` applied (validated as a whole), saved."""
    existing = load_channels(session)
    current = next((c for c in existing if c.name == name), None)
    if current is None:
        raise PipelineConfigError(f"unknown channel {name!r}")
    try:
        changed = current.updated(**changes)
    except ClientError as error:
        raise PipelineConfigError(f"channel {name!r}: {error}") from None
    check_channel(cluster, changed, existing)
    save_channel(session, changed)
    return changed


def channel_table_rows(channels: Sequence[Channel]) -> list[tuple[str, ...]]:
    """One display row per channel (the destination without its password)."""
    return [
        (
            c.name,
            c.source,
            c.display_destination,
            c.target,
            str(c.priority),
            c.order.value,
            "on" if c.collection_enabled else "paused",
            "on" if c.transmission_enabled else "paused",
            f"{c.slice_settings.slice_count} x {c.slice_settings.slice_width_s} s",
        )
        for c in channels
    ]
