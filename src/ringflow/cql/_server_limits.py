"""The native-protocol server's limits and counters (``ServerLimits``, ``ServerStats``).

Names follow Cassandra's ``cassandra.yaml`` / ``Config.java`` with the ``native_transport_``
prefix dropped and the unit last (STYLE.md "Names"); the node configuration and the CLI use the
full Cassandra names (``--native-transport-max-concurrent-connections`` ...).

Defaults, and why they differ from Cassandra's where they do (issue 16):

* ``max_concurrent_connections`` = 1024 (Cassandra: -1, unlimited). Every connection costs a
  task, a socket and up to two 64 KiB read buffers; a bound keeps a flood of connections from
  exhausting descriptors or memory.
* ``max_concurrent_connections_per_ip`` = 256 (Cassandra: -1, unlimited): one client address
  can take at most a quarter of the node's connections, so one client can never lock the
  others out (a driver needs one connection per shard plus its control connection). This is
  the default that makes the lock-out impossible; the idle timeout is not needed for it.
* ``idle_timeout_s`` = 0, off (Cassandra's ``native_transport_idle_timeout`` default, 0ms). When
  set, a connection that receives nothing for that long, with no request in flight, is
  closed. Drivers send a heartbeat (OPTIONS) every 30 s by default, so a live driver
  connection is never idle that long.
* ``max_request_data_in_flight`` = 128 MiB and ``max_request_data_in_flight_per_ip`` = 32 MiB
  (Cassandra: a tenth and a fortieth of the heap): bytes of request frames being read, held
  or executed. Over the budget the server stops reading from the connection (back-pressure,
  as Cassandra does unless ``native_transport_throw_on_overload``); it resumes when answers
  release bytes; with ``throw_on_overload`` (Cassandra's
  ``native_transport_throw_on_overload``, default false) the frame is answered Overloaded
  (0x1001) at once and its body skipped instead. A frame must fit the per-address budget,
  so ``max_frame_size`` plus the header is at most ``max_request_data_in_flight_per_ip``.
* ``max_frame_size`` = 16 MiB (Cassandra's ``native_transport_max_frame_size`` default; the
  protocol's own ceiling is 256 MiB). A header announcing more is answered with a protocol
  error (0x000A) and the connection closed; the body is never buffered.
* ``max_statements_in_flight`` = 32 (ringflow's own,
  ``native_transport_max_statements_in_flight``; Cassandra bounds the same with its
  ``native_transport_max_threads``, default 128, the requests executing at once, each holding a
  thread while its coordinator waits, a name not taken here because no thread is held): the
  statements started and not yet answered. A statement takes its write timestamp (a CDC write's
  ``cdc$time``) when it starts, and its write reaches the replicas after the writes started before
  it; a CDC reader trusts a log row to be readable within its confidence window of that time, so
  the statements started ahead of their writes are bounded, and tighter than Cassandra's: the
  others wait for a slot, without a thread and before their timestamp. ``max_pending_requests``
  (1024) bounds those waiting.
* ``frame_body_timeout_s`` = 60 (ringflow's own; Cassandra relies on TCP): once part of a
  frame has arrived, the rest must arrive within this long or the connection is closed, so
  a header announcing a body that never comes cannot hold a connection and its reserved
  budget forever.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringflow.cql._connection import DEFAULT_MAX_IN_FLIGHT
from ringflow.cql._frame import HEADER_SIZE
from ringflow.errors import ConfigurationError

MIB = 1024 * 1024
DEFAULT_MAX_CONCURRENT_CONNECTIONS = 1024
DEFAULT_MAX_CONCURRENT_CONNECTIONS_PER_IP = 256
DEFAULT_MAX_REQUEST_DATA_IN_FLIGHT = 128 * MIB
DEFAULT_MAX_REQUEST_DATA_IN_FLIGHT_PER_IP = 32 * MIB
DEFAULT_NATIVE_MAX_FRAME_SIZE = 16 * MIB
_FRAME_SIZE_CEILING = 2**31 - 1
_MAY_BE_ZERO = frozenset({"idle_timeout_s"})
_FLAGS = frozenset({"throw_on_overload"})


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Bounds of the native-protocol server (see the module docstring for the defaults)."""

    max_concurrent_connections: int = DEFAULT_MAX_CONCURRENT_CONNECTIONS
    max_concurrent_connections_per_ip: int = DEFAULT_MAX_CONCURRENT_CONNECTIONS_PER_IP
    idle_timeout_s: float = 0.0
    """0 means never."""
    max_request_data_in_flight: int = DEFAULT_MAX_REQUEST_DATA_IN_FLIGHT
    max_request_data_in_flight_per_ip: int = DEFAULT_MAX_REQUEST_DATA_IN_FLIGHT_PER_IP
    max_frame_size: int = DEFAULT_NATIVE_MAX_FRAME_SIZE
    frame_body_timeout_s: float = 60.0
    throw_on_overload: bool = False
    """Over the budget, answer a frame Overloaded and skip its body instead of pausing."""
    max_in_flight_per_connection: int = DEFAULT_MAX_IN_FLIGHT
    max_pending_requests: int = 1024
    max_statements_in_flight: int = 32
    """Statements started and not yet answered (module docstring)."""
    startup_timeout_s: float = 30.0
    """A connection that has not sent STARTUP after this long is closed."""
    shutdown_grace_s: float = 5.0
    """How long ``close`` waits for statements in flight."""

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name in _FLAGS:
                if not isinstance(value, bool):
                    raise ConfigurationError(f"ServerLimits.{name} must be a bool, got {value!r}")
                continue
            low_ok = value >= 0 if name in _MAY_BE_ZERO else value > 0
            if not isinstance(value, int | float) or isinstance(value, bool) or not low_ok:
                rule = "at least 0" if name in _MAY_BE_ZERO else "positive"
                raise ConfigurationError(f"ServerLimits.{name} must be {rule}, got {value!r}")
            if name.startswith("max_") and not isinstance(value, int):
                raise ConfigurationError(f"ServerLimits.{name} must be an int, got {value!r}")
        if self.max_frame_size > _FRAME_SIZE_CEILING:
            raise ConfigurationError(
                f"ServerLimits.max_frame_size must be at most {_FRAME_SIZE_CEILING} (a frame "
                f"length is a signed 32-bit int), got {self.max_frame_size}"
            )
        self._check_order()

    def _check_order(self) -> None:
        if self.max_concurrent_connections_per_ip > self.max_concurrent_connections:
            raise ConfigurationError(
                "ServerLimits.max_concurrent_connections_per_ip "
                f"({self.max_concurrent_connections_per_ip}) must be at most "
                f"max_concurrent_connections ({self.max_concurrent_connections})"
            )
        if self.max_request_data_in_flight_per_ip > self.max_request_data_in_flight:
            raise ConfigurationError(
                "ServerLimits.max_request_data_in_flight_per_ip "
                f"({self.max_request_data_in_flight_per_ip}) must be at most "
                f"max_request_data_in_flight ({self.max_request_data_in_flight})"
            )
        if self.max_frame_size + HEADER_SIZE > self.max_request_data_in_flight_per_ip:
            raise ConfigurationError(
                f"ServerLimits.max_frame_size ({self.max_frame_size}) plus a {HEADER_SIZE}-byte "
                "header must fit max_request_data_in_flight_per_ip "
                f"({self.max_request_data_in_flight_per_ip}): a frame that cannot be admitted "
                "would wait forever"
            )


@dataclass(slots=True)
class ServerStats:
    """Counters for tests and operators."""

    connections_accepted: int = 0
    connections_refused: int = 0
    """Over ``max_concurrent_connections`` or ``..._per_ip``: answered Overloaded, closed."""
    connections_timed_out: int = 0
    """Closed by the startup, idle or frame body timeout."""
    requests: int = 0
    protocol_errors: int = 0
    server_errors: int = 0
    """Statements answered with ServerError (0x0000); counted on the worker thread."""
    refitted_answers: int = 0
    """Answers the wire could not carry as built (a [string] over 65,535 bytes), sent as a
    truncated or InvalidRequest error instead (``_refit``)."""
    unsendable_answers: int = 0
    """Answers with no encodable form at all: their connection was closed."""
    pushes_dropped: int = 0
    """EVENTs too large to encode, not pushed."""
    connection_failures: int = 0
    """Connection loops or answer tasks that died of an unexpected exception (a bug; the
    server closed that connection and went on)."""
    events_pushed: int = 0
    reads_paused: int = 0
    """Times a connection stopped being read because the request-data budget was full."""
    frames_overloaded: int = 0
    """Frames answered Overloaded over the budget (``throw_on_overload``)."""
    tls_connections: int = 0
    """Connections that completed a TLS handshake (``_tls_listener``)."""
    tls_handshake_failures: int = 0
    """Sockets closed before or during the TLS handshake: failed, timed out, over the limit."""
    plaintext_refused: int = 0
    """Plaintext connections to a port that requires TLS: answered with an error, closed."""
    failed_logins: int = 0
    """AUTH_RESPONSEs answered with an error (bad credentials or a malformed token)."""
    throttled_logins: int = 0
    """Of those, the ones refused without a password check: their address had too many failed
    logins in the window (``_login_throttle``)."""
