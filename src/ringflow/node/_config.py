"""A single node's configuration, and the record that keeps its identity across restarts.

Owns what the operator chooses (``NodeConfig``: cluster name, loopback address, native port,
data directory, vnode count, DC/rack, sharding, server limits) and what the node chose once and
must never change (``NodeRecord``: host id and tokens, saved as ``node.json`` in the data dir).

Rules:

* Every value is checked here, at the edge, and a bad one raises ``ConfigurationError`` naming
  the value and the rule (STYLE.md "Errors").
* Nodes of a local cluster bind distinct loopback addresses with the same ports
  (ARCHITECTURE.md "Running it"), so the address must be an IPv4 address in 127.0.0.0/8.
* Sharding: ``shard_count`` is what the node advertises in SUPPORTED (``SCYLLA_NR_SHARDS``) and
  what its CDC generations are built with (scylla-cdc.md §2). The Scylla driver opens one
  connection per shard (it keeps opening connections until the server has reported every shard
  id, since no shard-aware port is advertised), so the default is 1: one connection per client,
  one stream per vnode. ``ignore_msb`` defaults to Scylla's 12.
* Native transport limits (``ServerLimits``) take Cassandra's ``cassandra.yaml`` names
  (``NATIVE_TRANSPORT_OPTIONS``: ``native_transport_max_concurrent_connections``,
  ``..._per_ip``, ``native_transport_idle_timeout``,
  ``native_transport_max_request_data_in_flight``, ``..._per_ip``,
  ``native_transport_max_frame_size``, ``native_transport_throw_on_overload``, and ringflow's own
  ``native_transport_frame_body_timeout``); sizes accept ``B``/``KiB``/``MiB``/``GiB`` and
  durations ``ms``/``s``/``m`` as Cassandra's ``DataStorageSpec``/``DurationSpec`` do, a bare
  number being bytes or milliseconds. Defaults and why: ``ringflow.cql._server_limits``.
* TLS (issue 18): ``client_encryption_options`` and ``server_encryption_options`` with
  Cassandra's names and Scylla's PEM file keys (``ringflow.runtime``'s
  ``ClientEncryptionOptions``, ``ServerEncryptionOptions``); ``native_tls`` and
  ``internode_tls`` read the files when the node starts, so a bad file fails the start.
* Identity is persisted once, atomically (temp file, fsync, rename, fsync of the directory), the
  first time the node starts. On a restart the saved host id and tokens are used, and a cluster
  name, DC, rack, vnode count or sharding that differs from the saved one is refused: a node
  cannot silently move to another cluster or change its ring position (Cassandra refuses a
  changed cluster name or DC the same way). ``node_config`` fills the options an operator
  leaves out from the saved record, so ``ringflow node start --data DIR`` restarts as before.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import random
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ringflow.cql import AuthSettings, NativeTls, ServerLimits
from ringflow.errors import ConfigurationError, RingflowError
from ringflow.ring import MAX_TOKENS_PER_HOST, TokenMetadata, allocate_random, check_sharding
from ringflow.runtime import ClientEncryptionOptions, InternodeTls, ServerEncryptionOptions

DEFAULT_CLUSTER_NAME = "ringflow"
DEFAULT_NATIVE_PORT = 9042
DEFAULT_NUM_TOKENS = 16
DEFAULT_DC = "datacenter1"
DEFAULT_RACK = "rack1"
DEFAULT_SHARD_COUNT = 1
DEFAULT_IGNORE_MSB = 12
MAX_SHARD_COUNT = 256
"""Far above a laptop's cores; each shard costs every driver one connection."""

RECORD_FILE_NAME = "node.json"
STORE_FILE_NAME = "store.sqlite"
LOCK_FILE_NAME = "lock"
RECORD_FORMAT = 1
_MAX_NAME_LENGTH = 128
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._:-]*")
_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
_T = TypeVar("_T")


def _check_name(what: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > _MAX_NAME_LENGTH:
        raise ConfigurationError(
            f"{what} must be 1-{_MAX_NAME_LENGTH} characters of letters, digits, space, "
            f"'.', '_', ':' or '-', starting with a letter or digit; got {value!r}"
        )
    return value


_SIZE = re.compile(r"\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*")
_SIZE_UNITS = {None: 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*")
_DURATION_UNITS_S = {None: 0.001, "ms": 0.001, "s": 1.0, "m": 60.0}

NATIVE_TRANSPORT_OPTIONS: dict[str, tuple[str, str]] = {
    "native_transport_max_concurrent_connections": ("max_concurrent_connections", "count"),
    "native_transport_max_concurrent_connections_per_ip": (
        "max_concurrent_connections_per_ip",
        "count",
    ),
    "native_transport_idle_timeout": ("idle_timeout_s", "duration"),
    "native_transport_max_request_data_in_flight": ("max_request_data_in_flight", "size"),
    "native_transport_max_request_data_in_flight_per_ip": (
        "max_request_data_in_flight_per_ip",
        "size",
    ),
    "native_transport_max_frame_size": ("max_frame_size", "size"),
    "native_transport_frame_body_timeout": ("frame_body_timeout_s", "duration"),
    "native_transport_throw_on_overload": ("throw_on_overload", "flag"),
    "native_transport_max_statements_in_flight": ("max_statements_in_flight", "count"),
}
"""Cassandra's option name -> (``ServerLimits`` field, kind of value)."""


def parse_size(what: str, value: object) -> int:
    """Bytes from ``16MiB``, ``64KiB``, ``100`` (bytes) or an int."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.fullmatch(str(value))
    if match is None:
        raise ConfigurationError(
            f"{what} must be a size such as 16MiB, 512KiB or 1048576 (bytes), got {value!r}"
        )
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


def parse_duration_s(what: str, value: object) -> float:
    """Seconds from ``500ms``, ``30s``, ``2m``, ``1000`` (milliseconds) or a number of ms."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) / 1000
    match = _DURATION.fullmatch(str(value))
    if match is None:
        raise ConfigurationError(
            f"{what} must be a duration such as 500ms, 30s, 2m or 1000 (ms), got {value!r}"
        )
    return float(match.group(1)) * _DURATION_UNITS_S[match.group(2)]


def parse_flag(what: str, value: object) -> bool:
    """A yaml-style boolean: ``true``/``false`` (any case) or a bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(f"{what} must be true or false, got {value!r}")
    return text == "true"


def server_limits(options: dict[str, object]) -> ServerLimits:
    """``ServerLimits`` from Cassandra-named native transport options (the rest default)."""
    fields: dict[str, int | float | bool] = {}
    for name, value in options.items():
        if name not in NATIVE_TRANSPORT_OPTIONS:
            known = ", ".join(sorted(NATIVE_TRANSPORT_OPTIONS))
            raise ConfigurationError(f"unknown native transport option {name!r} (known: {known})")
        field_name, kind = NATIVE_TRANSPORT_OPTIONS[name]
        if kind == "size":
            fields[field_name] = parse_size(name, value)
        elif kind == "duration":
            fields[field_name] = parse_duration_s(name, value)
        elif kind == "flag":
            fields[field_name] = parse_flag(name, value)
        else:
            if isinstance(value, str) and value.strip().isdigit():
                value = int(value)
            fields[field_name] = _check_int(name, value, 1, 2**31 - 1)
    return ServerLimits(**fields)  # type: ignore[arg-type]


def _check_int(what: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigurationError(f"{what} must be an integer in {low}..{high}, got {value!r}")
    return value


AUTHENTICATORS = {
    "AllowAllAuthenticator": False,
    "PasswordAuthenticator": True,
}
AUTHORIZERS = {"AllowAllAuthorizer": False, "CassandraAuthorizer": True}


def _auth_class(what: str, value: str, known: dict[str, bool]) -> bool:
    short = value.removeprefix("org.apache.cassandra.auth.")
    if short not in known:
        raise ConfigurationError(
            f"{what} must be one of {', '.join(sorted(known))} (Cassandra's names), got {value!r}"
        )
    return known[short]


def auth_settings(
    authenticator: str = "AllowAllAuthenticator",
    authorizer: str = "AllowAllAuthorizer",
    *,
    validity_ms: object = None,
) -> AuthSettings:
    """``AuthSettings`` from cassandra.yaml's ``authenticator`` / ``authorizer`` names (short or
    ``org.apache.cassandra.auth.``-qualified) and ``roles_validity`` (ms or a duration)."""
    authenticate = _auth_class("authenticator", authenticator, AUTHENTICATORS)
    authorize = _auth_class("authorizer", authorizer, AUTHORIZERS)
    if authorize and not authenticate:
        raise ConfigurationError(
            "authorizer CassandraAuthorizer needs authenticator PasswordAuthenticator (an "
            "anonymous user cannot be authorized)"
        )
    if validity_ms is None:
        return AuthSettings(authenticate, authorize)
    validity = round(parse_duration_s("roles_validity", validity_ms) * 1000)
    return AuthSettings(
        authenticate, authorize, validity_ms=_check_int("roles_validity", validity, 0, 86_400_000)
    )


def auth_mode(settings: AuthSettings) -> str:
    """How a node gossips its auth settings: ``authenticator/authorizer`` short names."""
    authenticator = "PasswordAuthenticator" if settings.authenticate else "AllowAllAuthenticator"
    authorizer = "CassandraAuthorizer" if settings.authorize else "AllowAllAuthorizer"
    return f"{authenticator}/{authorizer}"


def check_address(value: object) -> str:
    """The address in canonical form; ConfigurationError unless it is IPv4 loopback."""
    try:
        address = ipaddress.ip_address(str(value))
    except ValueError:
        raise ConfigurationError(f"address must be an IP address, got {value!r}") from None
    if not isinstance(address, ipaddress.IPv4Address) or address not in _LOOPBACK:
        raise ConfigurationError(
            f"address must be an IPv4 loopback address (127.0.0.0/8), got {value!r}: nodes of a "
            "local cluster bind distinct loopback addresses"
        )
    return str(address)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """What the operator chose for one node. Validated on construction."""

    address: str
    data_dir: Path
    native_port: int = DEFAULT_NATIVE_PORT
    cluster_name: str = DEFAULT_CLUSTER_NAME
    num_tokens: int = DEFAULT_NUM_TOKENS
    dc: str = DEFAULT_DC
    rack: str = DEFAULT_RACK
    shard_count: int = DEFAULT_SHARD_COUNT
    ignore_msb: int = DEFAULT_IGNORE_MSB
    limits: ServerLimits = field(default_factory=ServerLimits)
    client_encryption: ClientEncryptionOptions = field(default_factory=ClientEncryptionOptions)
    """``client_encryption_options``: TLS on the native port (``ringflow.runtime._tls``)."""
    server_encryption: ServerEncryptionOptions = field(default_factory=ServerEncryptionOptions)
    """``server_encryption_options``: internode TLS, mutual."""
    auth: AuthSettings = field(default_factory=AuthSettings)
    """Cassandra's ``authenticator`` / ``authorizer`` (``auth_settings``); off by default."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "address", check_address(self.address))
        if not isinstance(self.data_dir, str | os.PathLike):
            raise ConfigurationError(f"data_dir must be a path, got {self.data_dir!r}")
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        _check_int("native_port", self.native_port, 0, 65535)
        _check_name("cluster_name", self.cluster_name)
        _check_int("num_tokens", self.num_tokens, 1, MAX_TOKENS_PER_HOST)
        _check_name("dc", self.dc)
        _check_name("rack", self.rack)
        _check_int("shard_count", self.shard_count, 1, MAX_SHARD_COUNT)
        _check_int("ignore_msb", self.ignore_msb, 0, 63)
        try:
            check_sharding(self.shard_count, self.ignore_msb)
        except RingflowError as error:
            raise ConfigurationError(f"bad sharding: {error}") from None
        if not isinstance(self.limits, ServerLimits):
            raise ConfigurationError(f"limits must be ServerLimits, got {self.limits!r}")
        if not isinstance(self.client_encryption, ClientEncryptionOptions):
            raise ConfigurationError(f"bad client_encryption {self.client_encryption!r}")
        if not isinstance(self.server_encryption, ServerEncryptionOptions):
            raise ConfigurationError(f"bad server_encryption {self.server_encryption!r}")
        if not isinstance(self.auth, AuthSettings):
            raise ConfigurationError(f"auth must be AuthSettings, got {self.auth!r}")

    @property
    def record_path(self) -> Path:
        return self.data_dir / RECORD_FILE_NAME

    @property
    def store_path(self) -> Path:
        return self.data_dir / STORE_FILE_NAME


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What a node chose once and keeps: its host id and tokens, and the settings they
    depend on. Saved as ``node.json`` in the data directory."""

    host_id: uuid.UUID
    tokens: tuple[int, ...]
    cluster_name: str
    dc: str
    rack: str
    shard_count: int
    ignore_msb: int

    def __post_init__(self) -> None:
        if not isinstance(self.host_id, uuid.UUID):
            raise ConfigurationError(f"host_id must be a UUID, got {self.host_id!r}")
        tokens = self.tokens
        if not isinstance(tokens, tuple) or not tokens or len(set(tokens)) != len(tokens):
            raise ConfigurationError(f"tokens must be a non-empty tuple of distinct ints: {tokens}")
        for token in tokens:
            _check_int("token", token, -(2**63), 2**63 - 1)
        _check_int("number of tokens", len(tokens), 1, MAX_TOKENS_PER_HOST)
        _check_name("cluster_name", self.cluster_name)
        _check_name("dc", self.dc)
        _check_name("rack", self.rack)
        _check_int("shard_count", self.shard_count, 1, MAX_SHARD_COUNT)
        _check_int("ignore_msb", self.ignore_msb, 0, 63)

    @classmethod
    def create(cls, config: NodeConfig, rng: random.Random) -> NodeRecord:
        """A fresh identity: a random host id and ``num_tokens`` random tokens (the ring of a
        first node is empty, so random allocation is as good as any)."""
        tokens = allocate_random(TokenMetadata(), config.num_tokens, rng)
        return cls(
            host_id=uuid.UUID(int=rng.getrandbits(128), version=4),
            tokens=tuple(sorted(tokens)),
            cluster_name=config.cluster_name,
            dc=config.dc,
            rack=config.rack,
            shard_count=config.shard_count,
            ignore_msb=config.ignore_msb,
        )

    def check_matches(self, config: NodeConfig) -> None:
        """ConfigurationError if ``config`` asks for something the saved identity rules out."""
        wanted = {
            "cluster_name": config.cluster_name,
            "dc": config.dc,
            "rack": config.rack,
            "num_tokens": config.num_tokens,
            "shard_count": config.shard_count,
            "ignore_msb": config.ignore_msb,
        }
        saved = self.settings()
        for name, value in wanted.items():
            if saved[name] != value:
                raise ConfigurationError(
                    f"{config.record_path}: this node was created with {name} "
                    f"{saved[name]!r}, and cannot restart with {value!r}"
                )

    def settings(self) -> dict[str, object]:
        """The operator-visible settings the record fixes (NodeConfig field names)."""
        return {
            "cluster_name": self.cluster_name,
            "dc": self.dc,
            "rack": self.rack,
            "num_tokens": len(self.tokens),
            "shard_count": self.shard_count,
            "ignore_msb": self.ignore_msb,
        }

    def to_json(self) -> str:
        document = {
            "format": RECORD_FORMAT,
            "host_id": str(self.host_id),
            "tokens": list(self.tokens),
            "cluster_name": self.cluster_name,
            "dc": self.dc,
            "rack": self.rack,
            "shard_count": self.shard_count,
            "ignore_msb": self.ignore_msb,
        }
        return json.dumps(document, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, source: Path) -> NodeRecord:
        """Parse a saved record; ConfigurationError naming ``source`` if it is damaged."""
        try:
            document = json.loads(text)
            if document.get("format") != RECORD_FORMAT:
                raise ValueError(f"unknown format {document.get('format')!r}")
            return cls(
                host_id=uuid.UUID(document["host_id"]),
                tokens=tuple(document["tokens"]),
                cluster_name=document["cluster_name"],
                dc=document["dc"],
                rack=document["rack"],
                shard_count=document["shard_count"],
                ignore_msb=document["ignore_msb"],
            )
        except (ValueError, KeyError, TypeError, AttributeError, ConfigurationError) as error:
            raise ConfigurationError(f"{source}: damaged node record: {error}") from None


def load_record(data_dir: Path) -> NodeRecord | None:
    """The record saved in ``data_dir``, or None for a node that never started there."""
    path = Path(data_dir) / RECORD_FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ConfigurationError(f"{path}: cannot read the node record: {error}") from None
    return NodeRecord.from_json(text, path)


def save_record(data_dir: Path, record: NodeRecord) -> None:
    """Write ``record`` durably and atomically: a crash leaves the old file or the new one."""
    path = Path(data_dir) / RECORD_FILE_NAME
    temporary = path.with_name(path.name + ".tmp")
    data = record.to_json().encode("utf-8")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def prepare_data_dir(data_dir: Path) -> None:
    """Create the data directory if needed; ConfigurationError if it is not a usable dir."""
    path = Path(data_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigurationError(f"data directory {path}: {error}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigurationError(f"data directory {path} is not writable")


class DataDirLock:
    """An exclusive ``flock`` on ``<data dir>/lock``: one node process per data directory.

    The kernel drops the lock when the process dies, so a SIGKILLed node never leaves a stale
    lock behind."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_FILE_NAME
        self._descriptor: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._descriptor)
            self._descriptor = None
            raise ConfigurationError(
                f"data directory {data_dir} is in use by another ringflow node"
            ) from None

    def release(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing the descriptor releases the flock
            self._descriptor = None


def node_config(
    *,
    address: str,
    data_dir: Path,
    native_port: int | None = None,
    cluster_name: str | None = None,
    num_tokens: int | None = None,
    dc: str | None = None,
    rack: str | None = None,
    shard_count: int | None = None,
    ignore_msb: int | None = None,
    limits: ServerLimits | None = None,
    client_encryption: ClientEncryptionOptions | None = None,
    server_encryption: ServerEncryptionOptions | None = None,
    auth: AuthSettings | None = None,
) -> NodeConfig:
    """A ``NodeConfig`` whose omitted settings come from the data dir's saved record (a
    restart), else from the defaults (a first start)."""
    record = load_record(Path(data_dir))

    def pick(value: _T | None, saved: _T | None, default: _T) -> _T:
        if value is not None:
            return value
        return saved if saved is not None else default

    return NodeConfig(
        address,
        Path(data_dir),
        native_port=pick(native_port, None, DEFAULT_NATIVE_PORT),
        cluster_name=pick(
            cluster_name, None if record is None else record.cluster_name, DEFAULT_CLUSTER_NAME
        ),
        num_tokens=pick(
            num_tokens, None if record is None else len(record.tokens), DEFAULT_NUM_TOKENS
        ),
        dc=pick(dc, None if record is None else record.dc, DEFAULT_DC),
        rack=pick(rack, None if record is None else record.rack, DEFAULT_RACK),
        shard_count=pick(
            shard_count, None if record is None else record.shard_count, DEFAULT_SHARD_COUNT
        ),
        ignore_msb=pick(
            ignore_msb, None if record is None else record.ignore_msb, DEFAULT_IGNORE_MSB
        ),
        limits=limits or ServerLimits(),
        client_encryption=client_encryption or ClientEncryptionOptions(),
        server_encryption=server_encryption or ServerEncryptionOptions(),
        auth=auth or AuthSettings(),
    )


def native_tls(config: NodeConfig) -> NativeTls | None:
    """The native port's TLS (``client_encryption_options``), or None when not enabled."""
    options = config.client_encryption
    if not options.enabled:
        return None
    return NativeTls(options.server_context(), optional=options.optional)


def internode_tls(config: NodeConfig) -> InternodeTls | None:
    """Internode TLS (``server_encryption_options``), or None for ``internode_encryption:
    none``."""
    options = config.server_encryption
    return options.contexts() if options.enabled else None
