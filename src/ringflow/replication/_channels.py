"""Channels: what to send where, how urgently and in which order (REPLICATION.md decisions 4, 7).

A channel is (source keyspace.table, destination URL, target table) with a ``priority``, an
``order`` (fifo: oldest slice first; lifo: newest first: seed 002 "to ensure newest or oldest data
is replicated first"), switches for collection and transmission, and the slicing of its table.

Priority is an int in ``[PRIORITY_MIN, PRIORITY_MAX]`` = [1, 100], default 50; **higher wins**:
a channel with a higher priority takes permits first, as DSE's ``--priority`` ("a channel with a
higher priority takes precedence in acquiring permits").

Switches: ``collection_enabled`` off means the channel does not hold captured data back (a node
may drop slices it has not sent; DSE's ``channel pause --collection``); ``transmission_enabled``
off pauses sending but keeps the data (``channel pause --transmission``).

Destination URLs have the syntax of ``ringflow replicate --to`` (``pipeline._replicate``):

- ``ringflow://[user@]host[,host...][:port][/keyspace.table][?consistency=ONE]``: a hub
  cluster; with TLS ``ssl=true`` (the job's CA) or ``ca=FILE`` (``certfile``/``keyfile`` for a
  client certificate), and a login's password in ``password_file=FILE`` (or the job's
  ``RINGFLOW_PASSWORD``), as ``ringflow replicate --to`` takes them;
- ``parquet:DIR`` or ``parquet://DIR``: a Parquet change lake;
- ``postgresql://user@host:port/db`` or ``postgres://...``: PostgreSQL.

The parser here is pure (the pipeline's lives beside Spark and connects to check; it should call
:func:`parse_destination` first, so both accept the same text). Channels are rows of
``system_replication.channels`` (:data:`CHANNELS_TABLE_CQL`, :func:`channel_to_row`,
:func:`channel_from_row`), so every node and every job sees the same configuration.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar
from urllib.parse import SplitResult, parse_qs, urlsplit

from ringflow.errors import invariant
from ringflow.replication._model import ReplicationArgumentError, SliceSettings

PRIORITY_MIN: Final = 1
PRIORITY_MAX: Final = 100
DEFAULT_PRIORITY: Final = 50
CHANNEL_NAME_MAX: Final = 48
DEFAULT_HUB_PORT: Final = 9042
HUB_CONSISTENCY_LEVELS: Final = frozenset(
    {"ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"}
)
REPLICATION_KEYSPACE: Final = "system_replication"
CHANNELS_TABLE: Final = "channels"
CHANNELS_TABLE_CQL: Final = f"""CREATE TABLE IF NOT EXISTS {REPLICATION_KEYSPACE}.{CHANNELS_TABLE} (
    name text PRIMARY KEY,
    source_keyspace text,
    source_table text,
    destination text,
    target_table text,
    priority int,
    transmission_order text,
    collection_enabled boolean,
    transmission_enabled boolean,
    slice_width_s int,
    slice_count int
)"""
"""The channels table (``order`` is a CQL keyword, hence ``transmission_order``)."""

_CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_CQL_NAME = re.compile(r"[A-Za-z0-9_]{1,48}")
_POSTGRES_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")
_EXPECTED_URL = (
    "expected ringflow://host[,host...][:port][/keyspace.table][?consistency=ONE], "
    "parquet:DIR or postgresql://user@host:port/db"
)


class ChannelOrder(enum.Enum):
    """Which slices of its backlog a channel sends first."""

    FIFO = "fifo"
    """Oldest slice first."""
    LIFO = "lifo"
    """Newest slice first."""

    @classmethod
    def parse(cls, text: object) -> ChannelOrder:
        if isinstance(text, ChannelOrder):
            return text
        if isinstance(text, str):
            for order in cls:
                if order.value == text.strip().lower():
                    return order
        raise ReplicationArgumentError(f"order must be 'fifo' or 'lifo', got {text!r}")


class DestinationKind(enum.Enum):
    """The sink a destination URL names (the pipeline's ``Destination.kind``)."""

    HUB = "hub"
    LAKE = "lake"
    POSTGRES = "postgres"


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and status)."""
    return _PASSWORD.sub(r"\1***@", url)


@dataclass(frozen=True, slots=True)
class DestinationUrl:
    """A parsed destination URL (:func:`parse_destination`); fields unused by a kind are None."""

    url: str
    kind: DestinationKind
    hosts: tuple[str, ...] = ()
    port: int | None = None
    table: str | None = None
    """Hub only: the ``/keyspace.table`` of the URL, when given."""
    consistency: str | None = None
    directory: str | None = None

    @property
    def display(self) -> str:
        return redact(self.url)


def _fail_url(url: str, rule: str) -> ReplicationArgumentError:
    return ReplicationArgumentError(f"destination {redact(url)!r}: {rule}")


def _parse_hosts(url: str, text: str) -> tuple[tuple[str, ...], int]:
    """``host[,host...][:port]``, exactly as ``pipeline._replicate.parse_hosts`` reads it."""
    text = text.strip()
    port = DEFAULT_HUB_PORT
    head, sep, tail = text.rpartition(":")
    if sep and tail.isdigit() and "]" not in tail:
        text, port = head, int(tail)
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    if not hosts or not 0 < port < 65536 or any(":" in h or "/" in h for h in hosts):
        raise _fail_url(url, f"the hub address {text!r} is not host[,host...][:port]")
    return hosts, port


def _check_table_name(text: str, what: str) -> str:
    keyspace, sep, name = text.partition(".")
    if not sep or not _CQL_NAME.fullmatch(keyspace) or not _CQL_NAME.fullmatch(name):
        raise ReplicationArgumentError(
            f"{what} {text!r} is not keyspace.table (1-48 letters, digits or _ each)"
        )
    return text


def _split(url: str) -> SplitResult:
    try:
        return urlsplit(url)
    except ValueError as error:  # e.g. an unbalanced [ of an IPv6 address
        raise _fail_url(url, f"not a URL: {error}") from None


HUB_PARAMETERS: Final = ("consistency", "ssl", "ca", "certfile", "keyfile", "password_file")
"""A hub URL's parameters; the TLS files and the password file are read where the sink is
made (``pipeline._destinations``), never here."""


def _parse_hub(url: str) -> DestinationUrl:
    parts = _split(url)
    hosts, port = _parse_hosts(url, parts.netloc.rsplit("@", 1)[-1])  # user@: a login
    path = parts.path.strip("/")
    table = _check_table_name(path, "hub target") if path else None
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - set(HUB_PARAMETERS))
    if unknown:
        raise _fail_url(url, f"unknown parameter(s) {unknown}; allowed: {list(HUB_PARAMETERS)}")
    if query.get("ssl", "true").strip().lower() not in ("true", "false"):
        raise _fail_url(url, f"ssl must be true or false, got {query['ssl']!r}")
    consistency = query.get("consistency", "QUORUM").strip().upper()
    if consistency not in HUB_CONSISTENCY_LEVELS:
        allowed = sorted(HUB_CONSISTENCY_LEVELS)
        raise _fail_url(url, f"unknown consistency {consistency!r}; allowed: {allowed}")
    return DestinationUrl(url, DestinationKind.HUB, hosts, port, table, consistency)


def _parse_lake(url: str) -> DestinationUrl:
    raw = url.split(":", 1)[1]
    raw = raw[2:] if raw.startswith("//") else raw
    if not raw.strip():
        raise _fail_url(url, "the lake directory is missing (parquet:DIR)")
    return DestinationUrl(url, DestinationKind.LAKE, directory=raw)


def _parse_postgres(url: str) -> DestinationUrl:
    parts = _split(url)
    if not url.split(":", 1)[1].startswith("//") or not parts.hostname:
        raise _fail_url(url, "a PostgreSQL URL is postgresql://user@host:port/db")
    try:
        port = parts.port
    except ValueError:
        raise _fail_url(url, "the PostgreSQL port must be an int in [1, 65535]") from None
    return DestinationUrl(url, DestinationKind.POSTGRES, (parts.hostname,), port)


_PARSERS: Final = {
    "ringflow": _parse_hub,
    "parquet": _parse_lake,
    "postgresql": _parse_postgres,
    "postgres": _parse_postgres,
}


def parse_destination(url: object) -> DestinationUrl:
    """Check a destination URL's syntax (module docstring); no connection is made."""
    if not isinstance(url, str) or not url.strip():
        raise ReplicationArgumentError(f"destination must be a non-empty URL, got {url!r}")
    if any(ch.isspace() for ch in url):
        raise _fail_url(url, "a URL has no spaces")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    parser = _PARSERS.get(scheme)
    if parser is None:
        raise _fail_url(url, _EXPECTED_URL)
    return parser(url)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ReplicationArgumentError(f"{name} must be a bool, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Channel:
    """One channel (module docstring). ``target_table`` None means "the same": the source's
    ``keyspace.table`` on a hub (or the hub URL's ``/keyspace.table``), ``<keyspace>_<table>``
    in PostgreSQL (as ``ringflow replicate`` names it); a lake's target is its directory."""

    name: str
    source_keyspace: str
    source_table: str
    destination: str
    target_table: str | None = None
    priority: int = DEFAULT_PRIORITY
    order: ChannelOrder = ChannelOrder.FIFO
    collection_enabled: bool = True
    transmission_enabled: bool = True
    slice_settings: SliceSettings = field(default_factory=SliceSettings)
    destination_url: DestinationUrl = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _CHANNEL_NAME.fullmatch(self.name):
            raise ReplicationArgumentError(
                f"channel name must be 1-{CHANNEL_NAME_MAX} letters, digits, _ or -, starting "
                f"with a letter or digit, got {self.name!r}"
            )
        if len(self.name) > CHANNEL_NAME_MAX:
            raise ReplicationArgumentError(
                f"channel name must be at most {CHANNEL_NAME_MAX} characters, got {self.name!r}"
            )
        for what, value in (("keyspace", self.source_keyspace), ("table", self.source_table)):
            if not isinstance(value, str) or not _CQL_NAME.fullmatch(value):
                raise ReplicationArgumentError(
                    f"source {what} must be 1-48 letters, digits or _, got {value!r}"
                )
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ReplicationArgumentError(f"priority must be an int, got {self.priority!r}")
        if not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise ReplicationArgumentError(
                f"priority must be in [{PRIORITY_MIN}, {PRIORITY_MAX}] (higher wins), "
                f"got {self.priority}"
            )
        if not isinstance(self.order, ChannelOrder):
            raise ReplicationArgumentError(f"order must be a ChannelOrder, got {self.order!r}")
        _check_bool("collection_enabled", self.collection_enabled)
        _check_bool("transmission_enabled", self.transmission_enabled)
        if not isinstance(self.slice_settings, SliceSettings):
            raise ReplicationArgumentError(
                f"slice_settings must be SliceSettings, got {self.slice_settings!r}"
            )
        object.__setattr__(self, "destination_url", parse_destination(self.destination))
        self._check_target()

    def __repr__(self) -> str:  # the URL may hold a password: never show it
        return (
            f"Channel({self.name!r}, {self.source}, {self.display_destination!r}, "
            f"target={self.target!r}, priority={self.priority}, order={self.order.value}, "
            f"collection_enabled={self.collection_enabled}, "
            f"transmission_enabled={self.transmission_enabled}, {self.slice_settings})"
        )

    def _check_target(self) -> None:
        target, kind = self.target_table, self.destination_url.kind
        if target is None:
            return
        if not isinstance(target, str):
            raise ReplicationArgumentError(f"target_table must be a str, got {target!r}")
        if kind is DestinationKind.LAKE:
            raise ReplicationArgumentError(
                f"a lake channel's target is its directory; target_table must be unset, "
                f"got {target!r}"
            )
        if kind is DestinationKind.HUB:
            _check_table_name(target, "target_table")
            in_url = self.destination_url.table
            if in_url is not None and in_url != target:
                raise ReplicationArgumentError(
                    f"target_table {target!r} differs from the hub URL's /{in_url}"
                )
        elif not all(_POSTGRES_NAME.fullmatch(part) for part in target.split(".", 1)):
            raise ReplicationArgumentError(
                f"a PostgreSQL target_table is name or schema.name (letters, digits, _; "
                f"not starting with a digit), got {target!r}"
            )

    @property
    def source(self) -> str:
        """``keyspace.table`` of the source."""
        return f"{self.source_keyspace}.{self.source_table}"

    @property
    def target(self) -> str:
        """The resolved target: hub ``keyspace.table``, PostgreSQL table, or lake directory."""
        url = self.destination_url
        if url.kind is DestinationKind.LAKE:
            invariant(url.directory is not None, f"lake URL {url.display} without a directory")
            return str(url.directory)
        if self.target_table is not None:
            return self.target_table
        if url.kind is DestinationKind.HUB:
            return url.table or self.source
        return f"{self.source_keyspace}_{self.source_table}"

    @property
    def display_destination(self) -> str:
        """The destination URL with its password hidden."""
        return self.destination_url.display

    def updated(self, **changes: object) -> Channel:
        """A copy with ``changes`` applied and checked again (``channel update``)."""
        if "name" in changes or "destination_url" in changes:
            raise ReplicationArgumentError("a channel's name is its identity: it cannot change")
        try:
            return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        except TypeError as error:
            raise ReplicationArgumentError(f"channel update: {error}") from None


def table_slice_settings(channels: Iterable[Channel]) -> dict[tuple[str, str], SliceSettings]:
    """The slicing of each source table. A node captures a table once for all its channels, so
    channels of one table must agree (checked here; ``channel create`` should refuse a new
    channel whose settings differ from its table's)."""
    settings: dict[tuple[str, str], tuple[str, SliceSettings]] = {}
    for channel in channels:
        table = (channel.source_keyspace, channel.source_table)
        seen = settings.setdefault(table, (channel.name, channel.slice_settings))
        if seen[1] != channel.slice_settings:
            raise ReplicationArgumentError(
                f"channels {seen[0]!r} and {channel.name!r} of {channel.source} slice it "
                f"differently ({seen[1]} vs {channel.slice_settings}); a table has one slicing"
            )
    return {table: value for table, (_, value) in settings.items()}


# --- the system_replication.channels row ------------------------------------------------------


CHANNEL_COLUMNS: Final = (
    "name",
    "source_keyspace",
    "source_table",
    "destination",
    "target_table",
    "priority",
    "transmission_order",
    "collection_enabled",
    "transmission_enabled",
    "slice_width_s",
    "slice_count",
)
_Value = TypeVar("_Value", str, int, bool)


def channel_to_row(channel: Channel) -> dict[str, str | int | bool | None]:
    """The column values of ``channel``'s row in ``system_replication.channels``."""
    return {
        "name": channel.name,
        "source_keyspace": channel.source_keyspace,
        "source_table": channel.source_table,
        "destination": channel.destination,
        "target_table": channel.target_table,
        "priority": channel.priority,
        "transmission_order": channel.order.value,
        "collection_enabled": channel.collection_enabled,
        "transmission_enabled": channel.transmission_enabled,
        "slice_width_s": channel.slice_settings.slice_width_s,
        "slice_count": channel.slice_settings.slice_count,
    }


def _column(row: Mapping[str, object], column: str, kind: type[_Value]) -> _Value:
    value = row.get(column)
    if value is None:
        raise ReplicationArgumentError(f"channels row: column {column!r} is missing or null")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ReplicationArgumentError(
            f"channels row: column {column!r} must be {kind.__name__}, got {value!r}"
        )
    return value


def channel_from_row(row: Mapping[str, object]) -> Channel:
    """A channel from its row's column values (columns this version does not know are
    ignored, so an older job reads a newer table); every value checked again."""
    target = row.get("target_table")
    if target is not None and not isinstance(target, str):
        raise ReplicationArgumentError(f"channels row: target_table must be text, got {target!r}")
    return Channel(
        name=_column(row, "name", str),
        source_keyspace=_column(row, "source_keyspace", str),
        source_table=_column(row, "source_table", str),
        destination=_column(row, "destination", str),
        target_table=target,
        priority=_column(row, "priority", int),
        order=ChannelOrder.parse(_column(row, "transmission_order", str)),
        collection_enabled=_column(row, "collection_enabled", bool),
        transmission_enabled=_column(row, "transmission_enabled", bool),
        slice_settings=SliceSettings(
            _column(row, "slice_width_s", int), _column(row, "slice_count", int)
        ),
    )
