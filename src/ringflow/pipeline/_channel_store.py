"""Channels in the edge cluster: read, created, changed and dropped through the driver; and
what the job running each channel last said of it (``system_replication.channel_progress``).

A channel is a row of ``system_replication.channels`` (``ringflow.replication`` owns the model,
its validation and the row codec; REPLICATION.md decision 4), so every node and every job sees
the same configuration. This module is the driver side: it checks what only the cluster can
tell (the source table exists and has CDC on; two channels of one table agree on the slicing)
before anything is written, and reads and writes the rows at QUORUM. Errors are the operator's
(:class:`PipelineConfigError`, exit code 2 from the CLI), each naming the channel or table.

Progress rows (:class:`ChannelProgressRow`) are written by the replica job every status period
and at its end (:func:`save_channel_progress`, QUORUM, the table's TTL of a day applies) and
read by ``ringflow replication status`` (:func:`load_channel_progress`); each row is checked
before it is written and again when it is read back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from typing import Any, Final

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from ringflow.errors import ClientError
from ringflow.pipeline._cluster_client import load_table
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.replication import (
    CHANNEL_COLUMNS,
    CHANNEL_PROGRESS_TABLE,
    CHANNELS_TABLE,
    REPLICATION_KEYSPACE,
    Channel,
    channel_from_row,
    channel_to_row,
    table_slice_settings,
)

_TABLE = f"{REPLICATION_KEYSPACE}.{CHANNELS_TABLE}"
_PROGRESS_TABLE = f"{REPLICATION_KEYSPACE}.{CHANNEL_PROGRESS_TABLE}"
_QUORUM = ConsistencyLevel.QUORUM
PROGRESS_WRITE_TIMEOUT_S: Final = 2.0


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


@dataclass(frozen=True, slots=True)
class ChannelProgressRow:
    """One row of ``system_replication.channel_progress``: what the job running ``channel``
    last said of it. ``state`` is the job's status of the channel (``running``, ``unreachable
    since ...``, ``waiting: ...``, ``done``, ``stopped``...); ``rows`` the change rows its
    committed batches held, ``sends`` the rows handed to the sink and ``unique_changes`` the
    distinct changes among them (sends per unique change is their ratio); ``lag_ms`` None
    before the first commit; times in ms since the epoch."""

    channel: str
    job: str
    state: str
    unreachable_since_ms: int | None
    rows: int
    sends: int
    unique_changes: int
    lag_ms: int | None
    updated_at_ms: int

    def __post_init__(self) -> None:
        for name in ("channel", "job", "state"):
            value = getattr(self, name)
            if not isinstance(value, str) or (name == "channel" and not value):
                raise PipelineConfigError(f"channel progress {name} must be text, got {value!r}")
        for name in ("rows", "sends", "unique_changes", "updated_at_ms"):
            _check_count(self.channel, name, getattr(self, name), optional=False)
        for name in ("unreachable_since_ms", "lag_ms"):
            _check_count(self.channel, name, getattr(self, name), optional=True)

    @property
    def sends_per_unique(self) -> float | None:
        return self.sends / self.unique_changes if self.unique_changes else None


def _check_count(channel: str, name: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise PipelineConfigError(
            f"channel {channel!r} progress: {name} must be an int64 >= 0, got {value!r}"
        )


_PROGRESS_COLUMNS: Final = tuple(field.name for field in fields(ChannelProgressRow))
_INSERT_PROGRESS: Final = (
    f"INSERT INTO {_PROGRESS_TABLE} ({', '.join(_PROGRESS_COLUMNS)}) "
    f"VALUES ({', '.join('%s' for _ in _PROGRESS_COLUMNS)})"
)


def save_channel_progress(
    session: Any, rows: Sequence[ChannelProgressRow], timeout_s: float = PROGRESS_WRITE_TIMEOUT_S
) -> None:
    """Write ``rows`` at QUORUM, all at once, each bounded by ``timeout_s``; raises the first
    failure (the caller decides whether that matters: the job only logs it)."""
    statement = _statement(_INSERT_PROGRESS)
    futures = [session.execute_async(statement, astuple(row), timeout=timeout_s) for row in rows]
    for future in futures:
        future.result()


def channel_progress_from_row(row: Mapping[str, Any]) -> ChannelProgressRow:
    """A progress row as read (PipelineConfigError naming the channel if it does not hold)."""
    values: dict[str, Any] = {name: row.get(name) for name in _PROGRESS_COLUMNS}
    return ChannelProgressRow(**values)  # checked by the row itself


def load_channel_progress(session: Any) -> dict[str, ChannelProgressRow]:
    """Every channel's last progress row (QUORUM), by channel name; channels no job has
    written for in a day have none."""
    rows = session.execute(_statement(f"SELECT * FROM {_PROGRESS_TABLE}"))
    found = [channel_progress_from_row(dict(row)) for row in rows]
    return {row.channel: row for row in sorted(found, key=lambda row: row.channel)}
