"""What ``ringflow replicate`` replicates: the source (its ``ringflow-cdc`` options and table) and
the destinations (``--to`` URLs), each checked against its sink before Spark starts.

Destinations (``--to``):

- ``ringflow://host[,host...][:port][/keyspace.table][?consistency=ONE]``: a hub cluster through
  ``ringflow-hub`` (default target: the source's keyspace and table name).
- ``parquet:DIR`` (or ``parquet://DIR``): the Parquet change lake ``ringflow-lake`` at ``DIR``.
- ``postgresql://user@host:port/db`` (or ``postgres://``): ``ringflow-postgres``, target table
  ``<keyspace>_<table>`` (with its ``_live`` view).
- ``delta:DIR``: ``ringflow-delta``, a Delta Lake change log at ``DIR`` and its current-state
  table ``DIR_current`` (issue 19).
- ``iceberg:CATALOG#namespace.table``: ``ringflow-iceberg``, an Iceberg change log
  ``namespace.table`` and ``namespace.table_current`` in a SQL catalog (SQLite file or URI,
  ``postgresql+psycopg://...?warehouse=DIR``).

A destination is built for one version of the source table (:func:`destination`): the hub and
PostgreSQL targets are checked and, when the channel may alter them, given the table's new
columns; one that cannot take the table (:class:`~ringflow.pipeline.DestinationBehind`,
:class:`~ringflow.pipeline.SchemaConflict`) comes back ``blocked`` with the message, so that
only its channel waits; any other problem raises :class:`PipelineConfigError`.

Rows a destination refuses as invalid (REPLICATION.md decision 8): :func:`plan_replication` gives
each PostgreSQL sink the edge (the source's contact points) and its channel name, where it keeps
them as dead letters (``ringflow replication dead-letters list|replay|drop``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ringflow.pipeline._cluster_client import parse_hosts as parse_hosts
from ringflow.pipeline._errors import DestinationBehind, PipelineConfigError, SchemaConflict
from ringflow.pipeline._hub import HUB_FORMAT, hub_options
from ringflow.pipeline._iceberg import parse_location
from ringflow.pipeline._lake import LAKE_FORMAT, lake_options
from ringflow.pipeline._lakehouse import (
    DELTA_FORMAT,
    ICEBERG_FORMAT,
    delta_options,
    iceberg_options,
)
from ringflow.pipeline._postgres import POSTGRES_FORMAT, postgres_options, redact
from ringflow.schema import Table

DEFAULT_PORT = 9042


@dataclass(frozen=True, slots=True)
class Destination:
    """One validated destination: its channel name, sink format and sink options (for the
    source table it was built for), or why it cannot take that table (``blocked``)."""

    channel: str
    kind: str  # "hub", "lake", "postgres", "delta" or "iceberg"
    display: str
    sink_format: str
    options: Mapping[str, str]
    target: str  # hub keyspace.table, lake directory or PostgreSQL table
    url: str = ""
    allow_alter: bool = False
    blocked: str | None = None
    """DestinationBehind / SchemaConflict message: the channel waits for the operator."""
    dead_letters: str = ""
    """The edge's ``host[,host...][:port]``: where the sink keeps the rows the destination
    refuses (PostgreSQL), as dead letters of ``channel``; empty: a refused row fails the batch."""


@dataclass(frozen=True, slots=True)
class ReplicationPlan:
    """The source options, its table and the validated destinations."""

    source_options: Mapping[str, str]
    table: Table
    destinations: tuple[Destination, ...]
    checkpoint: Path


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


def _hub_target(url: str, table: Table) -> str:
    return urlsplit(url).path.strip("/") or f"{table.keyspace}.{table.name}"


def _hub_destination(
    url: str, table: Table, allow_alter: bool
) -> tuple[str, Mapping[str, str], str]:
    parts = urlsplit(url)
    hosts, port = parse_hosts(parts.netloc, "hub address")
    keyspace, name = parse_table_name(_hub_target(url, table))
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = sorted(set(query) - {"consistency"})
    if unknown:
        raise PipelineConfigError(f"{url!r}: unknown parameter(s) {unknown}")
    consistency = query.get("consistency", "QUORUM").upper()
    options = hub_options(
        hosts, keyspace, name, table, port=port, consistency=consistency, allow_alter=allow_alter
    )
    return HUB_FORMAT, options, f"{keyspace}.{name}"


def _lake_destination(
    url: str, table: Table, allow_alter: bool
) -> tuple[str, Mapping[str, str], str]:
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


def _postgres_destination(
    url: str, table: Table, allow_alter: bool
) -> tuple[str, Mapping[str, str], str]:
    target = f"{table.keyspace}_{table.name}"
    options = postgres_options(url, target, table, allow_alter=allow_alter)
    return POSTGRES_FORMAT, options, target


def _delta_destination(
    url: str, table: Table, allow_alter: bool
) -> tuple[str, Mapping[str, str], str]:
    raw = url.split(":", 1)[1]
    raw = raw[2:] if raw.startswith("//") else raw
    if not raw:
        raise PipelineConfigError(f"{url!r}: the Delta directory is missing (delta:DIR)")
    path = str(Path(raw).expanduser().absolute())
    return DELTA_FORMAT, delta_options(path, table, "delta"), path


def _iceberg_destination(
    url: str, table: Table, allow_alter: bool
) -> tuple[str, Mapping[str, str], str]:
    location = parse_location(url.split(":", 1)[1])
    return ICEBERG_FORMAT, iceberg_options(location, table, "iceberg"), location.changes


_Build = Callable[[str, Table, bool], tuple[str, Mapping[str, str], str]]
_KINDS: Mapping[str, tuple[str, str, _Build]] = {
    "ringflow": ("hub", HUB_FORMAT, _hub_destination),
    "parquet": ("lake", LAKE_FORMAT, _lake_destination),
    "postgresql": ("postgres", POSTGRES_FORMAT, _postgres_destination),
    "postgres": ("postgres", POSTGRES_FORMAT, _postgres_destination),
    "delta": ("delta", DELTA_FORMAT, _delta_destination),
    "iceberg": ("iceberg", ICEBERG_FORMAT, _iceberg_destination),
}


def _scheme(url: str) -> str:
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in _KINDS:
        raise PipelineConfigError(
            f"destination {redact(url)!r}: expected ringflow://host[:port], parquet:DIR, "
            "postgresql://user@host:port/db, delta:DIR or iceberg:CATALOG#namespace.table"
        )
    return scheme


def channel_name(url: str, taken: Sequence[str] = ()) -> str:
    """The channel of ``url``: its kind (``hub``, ``lake``, ``postgres``), with ``-2``,
    ``-3``... when ``taken`` already has it."""
    kind = _KINDS[_scheme(url)][0]
    channel, n = kind, 1
    while channel in taken:
        n += 1
        channel = f"{kind}-{n}"
    return channel


def destination(
    url: str,
    table: Table,
    taken: Sequence[str] = (),
    *,
    allow_alter: bool = False,
    channel: str | None = None,
    dead_letters: str = "",
) -> Destination:
    """One ``--to`` URL checked against its sink for ``table`` (module docstring); the channel
    name is ``channel`` or the kind, with ``-2``, ``-3``... when ``taken`` already has it. A
    destination that cannot take ``table`` (DestinationBehind, SchemaConflict) is returned
    ``blocked``; any other problem raises PipelineConfigError. ``dead_letters``: the edge's
    ``host[,host...][:port]`` where a PostgreSQL or hub sink keeps the rows it refuses."""
    kind, sink_format, build = _KINDS[_scheme(url)]
    channel = channel or channel_name(url, taken)
    display = redact(url)
    try:
        sink_format, options, target = build(url, table, allow_alter)
    except (DestinationBehind, SchemaConflict) as error:
        return Destination(
            channel,
            kind,
            display,
            sink_format,
            {},
            display,
            url,
            allow_alter,
            str(error),
            dead_letters,
        )
    except PipelineConfigError as error:  # drivers' messages may span lines: one line here
        text = " ".join(str(error).split())
        if kind in ("delta", "iceberg"):
            text = text.replace(f"channel {kind}:", f"channel {channel}:")
        raise PipelineConfigError(text) from None
    if kind in ("postgres", "hub") and dead_letters:
        options = {**options, "dead_letters": dead_letters, "channel": channel}
    return Destination(
        channel, kind, display, sink_format, options, target, url, allow_alter, None, dead_letters
    )


def plan_replication(
    source_options: Mapping[str, str],
    urls: Sequence[str],
    checkpoint: str | Path,
    *,
    alter_destinations: Collection[str] | bool = False,
) -> ReplicationPlan:
    """Check the source and every destination (no Spark needed); PipelineConfigError first.
    ``alter_destinations``: whether ringflow may alter the hub and PostgreSQL targets to
    follow the source's schema: True for all, or the channel names (``hub``, ``postgres``,
    ``hub-2``...) that it may alter."""
    if not urls:
        raise PipelineConfigError("at least one destination (--to) is required")
    table = source_table(source_options)
    edge = f"{source_options['contact_points']}:{source_options.get('port', DEFAULT_PORT)}"
    destinations: list[Destination] = []
    for url in urls:
        channel = channel_name(url, [d.channel for d in destinations])
        allowed = alter_destinations is True or (
            not isinstance(alter_destinations, bool) and channel in alter_destinations
        )
        destinations.append(
            destination(url, table, allow_alter=allowed, channel=channel, dead_letters=edge)
        )
    root = Path(checkpoint).expanduser().absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PipelineConfigError(f"checkpoint directory {root}: {error}") from None
    return ReplicationPlan(dict(source_options), table, tuple(destinations), root)
