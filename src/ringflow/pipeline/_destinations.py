"""What ``ringflow replicate`` replicates: the source (its ``ringflow-cdc`` options and table) and
the destinations (``--to`` URLs), each checked against its sink before Spark starts.

Destinations (``--to``):

- ``ringflow://host[,host...][:port][/keyspace.table][?consistency=ONE]``: a hub cluster through
  ``ringflow-hub`` (default target: the source's keyspace and table name). TLS (issue 18):
  ``?ssl=true&ca=FILE`` (``ca`` alone implies ``ssl``), with ``certfile=FILE&keyfile=FILE``
  for a hub that requires client certificates; ``ssl=true`` without ``ca`` uses the job's
  ``--ssl-ca`` (``default_tls``).
- ``parquet:DIR`` (or ``parquet://DIR``): the Parquet change lake ``ringflow-lake`` at ``DIR``.
- ``postgresql://user@host:port/db`` (or ``postgres://``): ``ringflow-postgres``, target table
  ``<keyspace>_<table>`` (with its ``_live`` view). libpq parameters pass through the URL
  (``?sslmode=verify-full&sslrootcert=ca.crt``); a password in it is redacted wherever the URL
  is shown.
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
each PostgreSQL and hub sink the edge (the source's contact points, login and TLS) and its
channel name, where it keeps them as dead letters (``ringflow replication dead-letters
list|replay|drop``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from ringflow.pipeline._cluster_client import DriverTls, credentials, driver_tls
from ringflow.pipeline._cluster_client import parse_hosts as parse_hosts
from ringflow.pipeline._dead_letters import dead_letter_access_options
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
    dead_letters_access: Mapping[str, str] = field(default_factory=dict, repr=False)
    """How the sink reaches the edge there: the source's login and TLS files
    (``DEAD_LETTER_ACCESS_OPTIONS``), kept so a destination rebuilt later keeps them."""
    default_tls: DriverTls | None = None
    """The job's TLS for ``ringflow://...?ssl=true`` without ``ca=`` (``--ssl-ca``)."""


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
    source: str,
    table: str,
    *,
    consistency: str = "QUORUM",
    tls: DriverTls | None = None,
    **extra: int | None,
) -> dict[str, str]:
    """The ``ringflow-cdc`` options for ``table`` at ``source`` (extra: window options;
    ``tls``: the source's TLS, ``ssl_ca``...)."""
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
    if tls is not None:
        options.update(tls.as_options())
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


_HUB_PARAMETERS = frozenset({"consistency", "ssl", "ca", "certfile", "keyfile"})


def hub_tls(url: str, default: DriverTls | None = None) -> DriverTls | None:
    """The TLS of a ``ringflow://`` URL: ``?ssl=true`` (with ``default``'s files unless
    ``ca`` is given), ``ca=FILE``, ``certfile``/``keyfile``; None for plaintext."""
    query = {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}
    flag = query.get("ssl", "").strip().lower()
    if flag not in ("", "true", "false"):
        raise PipelineConfigError(f"{url!r}: ssl must be true or false, got {flag!r}")
    if flag == "false" or (not flag and "ca" not in query):
        return None
    if "ca" not in query:
        if default is None:
            raise PipelineConfigError(f"{url!r}: ssl=true needs ca=FILE (or --ssl-ca)")
        return default
    given = {"ssl_ca": query["ca"]}
    given.update({f"ssl_{k}": query[k] for k in ("certfile", "keyfile") if k in query})
    return driver_tls(given)


def hub_access(
    url: str, default_tls: DriverTls | None = None
) -> tuple[DriverTls | None, dict[str, str]]:
    """How a ``ringflow://`` URL's hub is reached: its TLS (``hub_tls``) and its login
    (``user@`` with ``password_file``, ``hub_login``); the log mode, the replica mode's channels
    and dead-letter replays read it the same way."""
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    login = hub_login(parts.username, parts.password, query.get("password_file"))
    return hub_tls(url, default_tls), login


def _hub_destination(
    url: str, table: Table, allow_alter: bool, default_tls: DriverTls | None = None
) -> tuple[str, Mapping[str, str], str]:
    parts = urlsplit(url)
    hosts, port = parse_hosts(parts.netloc.rsplit("@", 1)[-1], "hub address")
    keyspace, name = parse_table_name(_hub_target(url, table))
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = sorted(set(query) - _HUB_PARAMETERS - {"password_file"})
    if unknown:
        raise PipelineConfigError(f"{redact(url)!r}: unknown parameter(s) {unknown}")
    consistency = query.get("consistency", "QUORUM").upper()
    tls, login = hub_access(url, default_tls)
    options = hub_options(
        hosts,
        keyspace,
        name,
        table,
        port=port,
        consistency=consistency,
        allow_alter=allow_alter,
        tls=tls,
        login=login,
    )
    return HUB_FORMAT, options, f"{keyspace}.{name}"


def hub_login(
    username: str | None, password: str | None, password_file: str | None
) -> dict[str, str]:
    """The credential options of ``ringflow://user[:password]@host/..``, the password resolved
    here on the driver (better from ``?password_file=`` or ``RINGFLOW_PASSWORD``: a URL may be
    logged; ``redact`` hides it in ringflow's own output; Spark redacts ``password`` options)."""
    given = {"username": unquote(username)} if username else {}
    if username and password:
        given["password"] = unquote(password)
    if username and password_file:
        given["password_file"] = password_file
    user, secret = credentials(given, "hub URL")  # resolved on the driver (see source_login)
    if user is None or secret is None:
        return {}
    return {"username": user, "password": secret}


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
    default_tls: DriverTls | None = None,
    dead_letters_access: Mapping[str, str] | None = None,
) -> Destination:
    """One ``--to`` URL checked against its sink for ``table`` (module docstring); the channel
    name is ``channel`` or the kind, with ``-2``, ``-3``... when ``taken`` already has it. A
    destination that cannot take ``table`` (DestinationBehind, SchemaConflict) is returned
    ``blocked``; any other problem raises PipelineConfigError. ``dead_letters``: the edge's
    ``host[,host...][:port]`` where a PostgreSQL or hub sink keeps the rows it refuses, reached
    with ``dead_letters_access`` (the source's login and TLS: ``dead_letter_access_options``)."""
    kind, sink_format, build = _KINDS[_scheme(url)]
    channel = channel or channel_name(url, taken)
    display = redact(url)
    try:
        if kind == "hub":  # ``ssl=true`` without ``ca=`` takes the job's TLS
            sink_format, options, target = _hub_destination(url, table, allow_alter, default_tls)
        else:
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
            dict(dead_letters_access or {}),
            default_tls,
        )
    except PipelineConfigError as error:  # drivers' messages may span lines: one line here
        text = " ".join(str(error).split())
        if kind in ("delta", "iceberg"):
            text = text.replace(f"channel {kind}:", f"channel {channel}:")
        raise PipelineConfigError(text) from None
    access = dict(dead_letters_access or {})
    if kind in ("postgres", "hub") and dead_letters:
        options = {**options, "dead_letters": dead_letters, "channel": channel, **access}
    return Destination(
        channel,
        kind,
        display,
        sink_format,
        options,
        target,
        url,
        allow_alter,
        None,
        dead_letters,
        access,
        default_tls,
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
    source_tls = driver_tls(source_options)
    access = dead_letter_access_options(
        source_options.get("username"), source_options.get("password"), source_tls
    )
    destinations: list[Destination] = []
    for url in urls:
        channel = channel_name(url, [d.channel for d in destinations])
        allowed = alter_destinations is True or (
            not isinstance(alter_destinations, bool) and channel in alter_destinations
        )
        destinations.append(
            destination(
                url,
                table,
                allow_alter=allowed,
                channel=channel,
                dead_letters=edge,
                default_tls=source_tls,
                dead_letters_access=access,
            )
        )
    root = Path(checkpoint).expanduser().absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PipelineConfigError(f"checkpoint directory {root}: {error}") from None
    return ReplicationPlan(dict(source_options), table, tuple(destinations), root)
