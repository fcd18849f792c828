"""Driver sessions of the ringflow sources: options, connection, table schema, clear errors.

The sources read a ringflow cluster through the Scylla Python driver (``cassandra``), as any
Scylla client does. This module owns the options every source shares (``contact_points``,
``port``, ``keyspace``, ``table``, ``consistency``, ``page_size``, timeouts), opening a bounded
session (connect and request timeouts, protocol v4, token-aware routing), and turning the
driver's schema metadata into a :class:`ringflow.schema.Table` so the change model
(:mod:`ringflow.pipeline._changes`) and the type mapping (:mod:`._spark_types`) apply.

Executors keep one connected session per cluster options in each Python worker process
(:func:`shared_session`; Spark reuses its Python workers, ``spark.python.worker.reuse``), with
its prepared statements (:func:`prepared`), so a task costs queries, not a connection.

TLS (issue 18): ``ssl_ca`` (a PEM file of the CAs the cluster's certificates chain to; given,
the connection is TLS and each node's IP SAN is checked against its address), with
``ssl_certfile``/``ssl_keyfile`` for a cluster that requires client certificates. Only paths
travel in the options; the ``ssl.SSLContext`` is made where the session is opened.

Errors are the operator's: an unreachable contact point, an unknown keyspace or table, a bad
option, all raise :class:`PipelineConfigError` on the driver program when the DataFrame is
created (``schema()``), before any Spark job starts.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    Session,
)
from cassandra.policies import (
    ExponentialReconnectionPolicy,
    RoundRobinPolicy,
    TokenAwarePolicy,
)
from cassandra.query import PreparedStatement, dict_factory
from cassandra.util import Date, Time

from ringflow.errors import ConfigurationError
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.runtime import client_context
from ringflow.schema import (
    CdcOptions,
    ClusteringOrder,
    CqlType,
    SchemaError,
    Table,
    TableOptions,
    UserType,
    parse_cdc_extension,
    parse_type,
)

DEFAULT_PORT = 9042
DEFAULT_CONSISTENCY = "LOCAL_QUORUM"
DEFAULT_PAGE_SIZE = 1000
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_REQUEST_TIMEOUT_S = 30.0
MAX_PAGE_SIZE = 100_000
MAX_SHARED_SESSIONS = 4  # distinct clusters one worker process keeps connected
MAX_PREPARED = 64  # prepared statements kept per shared session
RECONNECT_MAX_S = 10.0  # a restarted node is used again within this


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """Where and how to read: the options shared by the ringflow sources (picklable)."""

    contact_points: tuple[str, ...]
    keyspace: str
    table: str
    port: int = DEFAULT_PORT
    consistency: str = DEFAULT_CONSISTENCY
    page_size: int = DEFAULT_PAGE_SIZE
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    tls: DriverTls | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    """Never in a repr, a log line or a Spark plan (Spark redacts option keys matching
    ``spark.redaction.regex``, ``password`` included)."""

    @property
    def table_name(self) -> str:
        return f"{self.keyspace}.{self.table}"


TLS_OPTIONS = ("ssl_ca", "ssl_certfile", "ssl_keyfile")
"""The TLS options of the sources and the hub sink: paths of PEM files."""


@dataclass(frozen=True, slots=True)
class DriverTls:
    """TLS of a driver session: the CA file, and a client certificate and key when the
    cluster requires one (paths: picklable; the context is made where it is used)."""

    ca: str
    certfile: str = ""
    keyfile: str = ""

    def context(self) -> ssl.SSLContext:
        try:
            return client_context(
                self.ca, certificate=self.certfile or None, keyfile=self.keyfile or None
            )
        except ConfigurationError as error:
            raise PipelineConfigError(f"TLS: {error}") from None

    def as_options(self) -> dict[str, str]:
        found = {"ssl_ca": self.ca, "ssl_certfile": self.certfile, "ssl_keyfile": self.keyfile}
        return {name: value for name, value in found.items() if value}


def driver_tls(options: Mapping[str, str]) -> DriverTls | None:
    """The TLS options of a source or sink (``TLS_OPTIONS``), checked: None without
    ``ssl_ca``; PipelineConfigError for a certificate without its key or a missing file."""
    ca, certfile, keyfile = (str(options.get(name, "") or "").strip() for name in TLS_OPTIONS)
    if not ca:
        if certfile or keyfile:
            raise PipelineConfigError("options ssl_certfile/ssl_keyfile need ssl_ca")
        return None
    if bool(certfile) != bool(keyfile):
        raise PipelineConfigError("options ssl_certfile and ssl_keyfile go together")
    tls = DriverTls(ca, certfile, keyfile)
    tls.context()  # the files are read now: a mistake fails before any job starts
    return tls


def parse_hosts(text: str, what: str) -> tuple[tuple[str, ...], int]:
    """``host[,host...][:port]`` as (hosts, port); PipelineConfigError when malformed."""
    text = text.strip()
    port = DEFAULT_PORT
    head, sep, tail = text.rpartition(":")
    if sep and tail.isdigit() and "]" not in tail:
        text, port = head, int(tail)
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    if not hosts or not 0 < port < 65536 or any(":" in h or "/" in h for h in hosts):
        raise PipelineConfigError(f"{what} {text!r} is not host[,host...][:port]")
    return hosts, port


def option_int(options: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    """An integer option ``>= minimum``; PipelineConfigError naming it otherwise."""
    text = options.get(name)
    if text is None:
        return default
    try:
        value = int(str(text))
    except ValueError:
        raise PipelineConfigError(f"option {name!r} must be an integer, got {text!r}") from None
    if value < minimum:
        raise PipelineConfigError(f"option {name!r} must be >= {minimum}, got {value}")
    return value


def option_float(options: Mapping[str, str], name: str, default: float) -> float:
    text = options.get(name)
    if text is None:
        return default
    try:
        value = float(str(text))
    except ValueError:
        raise PipelineConfigError(f"option {name!r} must be a number, got {text!r}") from None
    if value <= 0:
        raise PipelineConfigError(f"option {name!r} must be positive, got {value}")
    return value


PASSWORD_ENV = "RINGFLOW_PASSWORD"
MAX_PASSWORD_FILE_BYTES = 4096
CREDENTIAL_OPTIONS = frozenset({"username", "password", "password_file"})


def credentials(options: Mapping[str, str], what: str = "option") -> tuple[str | None, str | None]:
    """``(username, password)`` of an auth-enabled cluster: ``username`` with ``password``, or
    ``password_file`` (its first line), or the environment's ``RINGFLOW_PASSWORD``; ``(None,
    None)`` without a username. PipelineConfigError (never echoing a password) otherwise."""
    username = str(options.get("username") or "").strip() or None
    if username is None:
        if options.get("password") or options.get("password_file"):
            raise PipelineConfigError(f"{what} 'password' needs 'username'")
        return None, None
    password = options.get("password")
    path = options.get("password_file")
    if password is None and path:
        try:
            data = Path(str(path)).read_bytes()[:MAX_PASSWORD_FILE_BYTES]
        except OSError as error:
            raise PipelineConfigError(
                f"{what} 'password_file' {path!r} is unreadable: {error.strerror}"
            ) from None
        password = data.decode("utf-8", "replace").splitlines()[0] if data.strip() else ""
    if password is None:
        password = os.environ.get(PASSWORD_ENV)
    if not password:
        raise PipelineConfigError(
            f"{what} 'username' {username!r} needs a password: option 'password', "
            f"'password_file' or the environment variable {PASSWORD_ENV}"
        )
    return username, str(password)


def auth_provider(username: str | None, password: str | None) -> PlainTextAuthProvider | None:
    """The driver's SASL PLAIN provider (what cqlsh -u -p uses), or None without a username."""
    if username is None or password is None:
        return None
    return PlainTextAuthProvider(username=username, password=password)


def cluster_options(options: Mapping[str, str]) -> ClusterOptions:
    """The shared options of a source, validated (module docstring)."""
    points = tuple(
        p.strip() for p in str(options.get("contact_points", "")).split(",") if p.strip()
    )
    if not points:
        raise PipelineConfigError("option 'contact_points' is required (comma-separated hosts)")
    keyspace, table = options.get("keyspace"), options.get("table")
    if not keyspace or not table:
        raise PipelineConfigError("options 'keyspace' and 'table' are required")
    consistency = str(options.get("consistency", DEFAULT_CONSISTENCY)).upper()
    if consistency not in ConsistencyLevel.name_to_value:
        known = sorted(ConsistencyLevel.name_to_value)
        raise PipelineConfigError(f"option 'consistency' {consistency!r} is not one of {known}")
    return ClusterOptions(
        points,
        str(keyspace),
        str(table),
        option_int(options, "port", DEFAULT_PORT),
        consistency,
        min(option_int(options, "page_size", DEFAULT_PAGE_SIZE), MAX_PAGE_SIZE),
        option_float(options, "connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S),
        option_float(options, "request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S),
        driver_tls(options),
        *credentials(options),
    )


def make_cluster(options: ClusterOptions, *, metadata: bool = True) -> Cluster:
    """A driver cluster (not yet connected) with bounded timeouts and rows as dicts (CDC
    column names such as ``cdc$time`` are not identifiers, so named tuples would rename them).
    ``metadata=False`` skips reading the schema and token map on connect: the executors' reads
    need neither, and it makes a task's connection cheap."""
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(RoundRobinPolicy()),
        request_timeout=options.request_timeout_s,
        consistency_level=ConsistencyLevel.name_to_value[options.consistency],
        row_factory=dict_factory,
    )
    return Cluster(
        list(options.contact_points),
        port=options.port,
        protocol_version=4,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=options.connect_timeout_s,
        control_connection_timeout=options.connect_timeout_s,
        max_schema_agreement_wait=int(options.connect_timeout_s),
        schema_metadata_enabled=metadata,
        token_metadata_enabled=metadata,
        reconnection_policy=ExponentialReconnectionPolicy(0.5, RECONNECT_MAX_S),
        ssl_context=None if options.tls is None else options.tls.context(),
        auth_provider=auth_provider(options.username, options.password),
    )


def connect(options: ClusterOptions, *, metadata: bool = True) -> tuple[Cluster, Session]:
    """A connected cluster and session; PipelineConfigError if no contact point answers."""
    cluster = make_cluster(options, metadata=metadata)
    try:
        session = cluster.connect()
    except (NoHostAvailable, OSError) as error:
        cluster.shutdown()
        raise PipelineConfigError(
            f"cannot reach ringflow at {','.join(options.contact_points)} port {options.port}: "
            f"{error}"
        ) from None
    return cluster, session


@contextlib.contextmanager
def open_session(options: ClusterOptions) -> Iterator[tuple[Cluster, Session]]:
    """:func:`connect`, shut down on exit."""
    cluster, session = connect(options)
    try:
        yield cluster, session
    finally:
        cluster.shutdown()


class _SharedSessions:
    """Connected sessions of this process by cluster options (at most MAX_SHARED_SESSIONS, the
    oldest shut down first), and their prepared statements by query text."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[ClusterOptions, tuple[Cluster, Session]] = {}
        self.prepared: dict[tuple[int, str], PreparedStatement] = {}


_SHARED = _SharedSessions()


def shared_session(options: ClusterOptions) -> Session:
    """This process's connected session for ``options`` (no schema or token metadata), made on
    first use; :func:`forget_session` after an error so the next use connects afresh."""
    with _SHARED.lock:
        entry = _SHARED.sessions.get(options)
        if entry is not None and not entry[0].is_shutdown:
            return entry[1]
        stale = [entry] if entry is not None else []
        if entry is None and len(_SHARED.sessions) >= MAX_SHARED_SESSIONS:
            stale.append(_SHARED.sessions.pop(next(iter(_SHARED.sessions))))
        for _, old in stale:
            _drop_prepared(old)
        entry = connect(options, metadata=False)
        _SHARED.sessions[options] = entry
    for cluster, _ in stale:
        cluster.shutdown()
    return entry[1]


_SESSION_CACHES: list[Callable[[], int]] = []
"""How to empty each of this process's session caches (``keep_session_cache``)."""


def keep_session_cache(close: Callable[[], int]) -> None:
    """Register a process-wide cache of driver sessions: ``close()`` shuts each of them down
    and returns how many there were (``close_cached_sessions``)."""
    _SESSION_CACHES.append(close)


def close_cached_sessions() -> int:
    """Shut down every driver session this process keeps for later use (the shared ones here,
    those pinned to one node, the hub writers'); how many there were. The next use connects
    afresh. For a process that goes on without their clusters (a command run in-process, a
    test file whose cluster stopped): a session left open keeps reconnecting to nodes that are
    gone, logging each failure."""
    return sum(close() for close in list(_SESSION_CACHES))


def shut_down_sessions(lock: threading.Lock, sessions: dict[Any, tuple[Cluster, Session]]) -> int:
    """Empty the session cache ``sessions`` (guarded by ``lock``) and shut each of its sessions
    down, outside the lock; how many there were (a cache's closer, ``keep_session_cache``)."""
    with lock:
        entries = list(sessions.values())
        sessions.clear()
    for cluster, _ in entries:
        cluster.shutdown()
    return len(entries)


def _close_shared_sessions() -> int:
    closed = shut_down_sessions(_SHARED.lock, _SHARED.sessions)
    with _SHARED.lock:  # a session made meanwhile prepares its statements again: harmless
        _SHARED.prepared.clear()
    return closed


keep_session_cache(_close_shared_sessions)


def _drop_prepared(session: Session) -> None:
    for key in [k for k in _SHARED.prepared if k[0] == id(session)]:
        del _SHARED.prepared[key]


def forget_session(options: ClusterOptions) -> None:
    """Shut the shared session of ``options`` down (if any)."""
    with _SHARED.lock:
        entry = _SHARED.sessions.pop(options, None)
        if entry is not None:
            _drop_prepared(entry[1])
    if entry is not None:
        entry[0].shutdown()


def prepared(session: Session, query: str) -> PreparedStatement:
    """``session.prepare(query)``, once per session and query text."""
    key = (id(session), query)
    with _SHARED.lock:
        statement = _SHARED.prepared.get(key)
    if statement is None:
        statement = session.prepare(query)
        with _SHARED.lock:
            if len(_SHARED.prepared) >= MAX_PREPARED * MAX_SHARED_SESSIONS:
                _SHARED.prepared.clear()
            _SHARED.prepared[key] = statement
    return statement


def load_table(cluster: Cluster, keyspace: str, table: str) -> Table:
    """The ringflow Table of ``keyspace.table`` from the driver's schema metadata."""
    keyspace_meta = cluster.metadata.keyspaces.get(keyspace)
    if keyspace_meta is None:
        raise PipelineConfigError(f"unknown keyspace {keyspace!r}")
    table_meta = keyspace_meta.tables.get(table)
    if table_meta is None:
        raise PipelineConfigError(f"unknown table {keyspace}.{table}")
    try:
        user_types = _user_types(keyspace, keyspace_meta.user_types)
        return _table_of(table_meta, user_types)
    except SchemaError as error:
        raise PipelineConfigError(
            f"cannot read the schema of {keyspace}.{table}: {error}"
        ) from None


def _user_types(keyspace: str, metadata: Mapping[str, Any]) -> dict[str, UserType]:
    """The keyspace's UDTs; a UDT may use those defined before it (driver order)."""
    found: dict[str, UserType] = {}
    pending = dict(metadata)
    while pending:
        progressed = False
        for name, udt in list(pending.items()):
            try:
                types = tuple(parse_type(t, found) for t in udt.field_types)
            except SchemaError:
                continue
            found[name] = UserType(keyspace, name, tuple(udt.field_names), types, frozen=False)
            del pending[name]
            progressed = True
        if not progressed:
            raise SchemaError(f"cannot resolve user types {sorted(pending)}")
    return found


def _table_of(meta: Any, user_types: Mapping[str, UserType]) -> Table:
    def cql_type(column: Any) -> CqlType:
        return parse_type(column.cql_type, user_types)

    extensions = getattr(meta, "extensions", None) or {}
    cdc = CdcOptions()
    if extensions.get("cdc"):
        cdc = CdcOptions.from_map(parse_cdc_extension(bytes(extensions["cdc"])))
    key_names = {c.name for c in (*meta.partition_key, *meta.clustering_key)}
    others = [c for c in meta.columns.values() if c.name not in key_names]
    return Table.create(
        meta.keyspace_name,
        meta.name,
        partition_key=[(c.name, cql_type(c)) for c in meta.partition_key],
        clustering=[
            (c.name, cql_type(c), ClusteringOrder.DESC if c.is_reversed else ClusteringOrder.ASC)
            for c in meta.clustering_key
        ],
        static=[(c.name, cql_type(c)) for c in others if c.is_static],
        regular=[(c.name, cql_type(c)) for c in others if not c.is_static],
        options=TableOptions(cdc=cdc),
        table_id=getattr(meta, "id", None) or None,
    )


def plain_value(value: object) -> object:
    """A driver value in the codec's Python form (what :mod:`._spark_types` reads): driver
    ``Date``/``Time`` as days/nanoseconds, sorted sets and maps as builtins, recursively."""
    if value is None or isinstance(value, str | bytes | int | float | bool):
        return value
    if isinstance(value, Date):
        return int(value.days_from_epoch)
    if isinstance(value, Time):
        return int(value.nanosecond_time)
    if isinstance(value, datetime.datetime | datetime.date):
        return value
    if isinstance(value, Mapping):
        return {_hashable(plain_value(k)): plain_value(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(plain_value(v) for v in value)
    if isinstance(value, list | set | frozenset) or type(value).__name__ == "SortedSet":
        return [plain_value(v) for v in value]  # type: ignore[attr-defined]
    return value


def _hashable(value: object) -> object:
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return tuple(value.items())
    return value
