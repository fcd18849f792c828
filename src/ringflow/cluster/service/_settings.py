"""The settings and small value types of a cluster node's service (``_node``).

``ClusterSettings`` is the cluster part of a node's configuration (seeds, endpoints, timings);
``NodeTimings`` are its timings alone, validated (``ConfigurationError``, 0x2300, exit 2 on the
command line), with ``TIMING_OPTIONS`` describing each for the command line (``ringflow cluster
start --write-timeout-ms 3000``); ``CaptureSettings`` (with ``CAPTURE_OPTIONS``) are the
replica-side capture's (``--slice-width-s 2 --slice-count 2 --capture-policy drop-oldest``);
``Offload`` is how the node runs store work off its thread; ``WriteGroup``/``PendingRead`` are
the shell's bookkeeping of client requests in flight on the coordinator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from ringflow.cluster._failure_detector import (
    DEFAULT_PHI_CONVICT_THRESHOLD,
    PHI_CONVICT_THRESHOLD_MAX,
    PHI_CONVICT_THRESHOLD_MIN,
)
from ringflow.cluster._gossip import GOSSIP_INTERVAL_MS
from ringflow.cluster._hints import MAX_HINT_WINDOW_MS
from ringflow.cluster.service import _codec
from ringflow.errors import ConfigurationError
from ringflow.replication import (
    DEFAULT_SLICE_COUNT,
    DEFAULT_SLICE_WIDTH_S,
    SLICE_COUNT_MAX,
    SLICE_WIDTH_S_MAX,
    SliceSettings,
)
from ringflow.ring import Host
from ringflow.runtime import AsyncioNetworkConfig
from ringflow.schema import Mutation
from ringflow.storage import CaptureCap, CapturePolicy

_T = TypeVar("_T")


class Offload(Protocol):
    """Run ``work`` off the node's thread; ``done(result, error)`` comes back on it."""

    def __call__(
        self, work: Callable[[], _T], done: Callable[[_T | None, BaseException | None], None]
    ) -> None: ...


EventSink = Callable[[str, str, str], None]
"""Where native-protocol EVENTs go: ``("STATUS_CHANGE", "UP", "127.0.0.2")`` ..."""


NODE_NETWORK_CONFIG: Final = AsyncioNetworkConfig(same_port_peers=True)
"""The internode network of a node process: a peer's claimed endpoint is its own address on
our port (issue 16; ``runtime`` ``AsyncioNetworkConfig``)."""


@dataclass(frozen=True, slots=True)
class TimingOption:
    """One timing setting: its field, its bounds (inclusive) and what it means."""

    name: str
    kind: type[int] | type[float]
    low: float
    high: float
    help: str

    @property
    def flag(self) -> str:
        """The command-line option: ``write_timeout_ms`` is ``--write-timeout-ms``."""
        return "--" + self.name.replace("_", "-")


_HOUR_MS = 3_600_000
TIMING_OPTIONS: tuple[TimingOption, ...] = (
    TimingOption("gossip_interval_ms", int, 10, 60_000, "gossip round interval"),
    TimingOption(
        "phi_convict_threshold",
        float,
        PHI_CONVICT_THRESHOLD_MIN,
        PHI_CONVICT_THRESHOLD_MAX,
        "phi-accrual failure detector: phi above which a node is DOWN",
    ),
    TimingOption("write_timeout_ms", int, 10, _HOUR_MS, "coordinator write timeout"),
    TimingOption("read_timeout_ms", int, 10, _HOUR_MS, "coordinator partition read timeout"),
    TimingOption("range_timeout_ms", int, 10, _HOUR_MS, "coordinator range read timeout"),
    TimingOption(
        "max_hint_window_ms",
        int,
        1,
        30 * 24 * _HOUR_MS,
        "hints are stored for a replica down at most this long",
    ),
    TimingOption("hint_dispatch_interval_ms", int, 10, _HOUR_MS, "hint replay interval"),
    TimingOption(
        "schema_agreement_timeout_ms",
        int,
        0,
        _HOUR_MS,
        "a DDL answer waits this long for every live node to agree on the schema",
    ),
)
"""Every timing setting of a node, with its bounds (Cassandra's defaults where it has one)."""


def check_timing(name: str, value: object) -> None:
    """ConfigurationError unless ``value`` is a valid setting ``name`` (see ``TIMING_OPTIONS``)."""
    _check_option(TIMING_OPTIONS, "timing", name, value)


def _check_option(options: tuple[TimingOption, ...], kind: str, name: str, value: object) -> None:
    option = next((o for o in options if o.name == name), None)
    if option is None:
        raise ConfigurationError(f"unknown {kind} setting {name!r}")
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if not numeric or (option.kind is int and not isinstance(value, int)):
        raise ConfigurationError(
            f"{option.flag}: expected {'an integer' if option.kind is int else 'a number'}, "
            f"got {value!r}"
        )
    assert isinstance(value, int | float)
    if not option.low <= value <= option.high:
        raise ConfigurationError(
            f"{option.flag}: {value} is out of range [{option.low:g}, {option.high:g}]"
        )


@dataclass(frozen=True, slots=True)
class NodeTimings:
    """A node's timing settings (``TIMING_OPTIONS``), validated on construction."""

    gossip_interval_ms: int = GOSSIP_INTERVAL_MS
    phi_convict_threshold: float = DEFAULT_PHI_CONVICT_THRESHOLD
    write_timeout_ms: int = 2_000
    read_timeout_ms: int = 5_000
    range_timeout_ms: int = 10_000
    max_hint_window_ms: int = MAX_HINT_WINDOW_MS
    hint_dispatch_interval_ms: int = 1_000
    schema_agreement_timeout_ms: int = 10_000
    """As the drivers' ``max_schema_agreement_wait`` (10 s)."""

    def __post_init__(self) -> None:
        for option in TIMING_OPTIONS:
            check_timing(option.name, getattr(self, option.name))

    @classmethod
    def of(cls, values: Mapping[str, object]) -> NodeTimings:
        """Timings from ``values`` (missing or None: the default); ConfigurationError on an
        unknown name or a bad value."""
        known = {option.name for option in TIMING_OPTIONS}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigurationError(f"unknown timing settings: {', '.join(unknown)}")
        given = {name: value for name, value in values.items() if value is not None}
        for name, value in given.items():
            check_timing(name, value)
        return cls(**given)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, int | float]:
        return {option.name: getattr(self, option.name) for option in TIMING_OPTIONS}


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """The cluster part of a node's configuration; every timing has a default (``NodeTimings``
    holds the same timings, validated the same way here)."""

    endpoint: str
    rpc_address: str
    seeds: tuple[str, ...]
    cluster_name: str
    gossip_interval_ms: int = GOSSIP_INTERVAL_MS
    write_timeout_ms: int = 2_000
    read_timeout_ms: int = 5_000
    hint_dispatch_interval_ms: int = 1_000
    max_outstanding_requests: int = 1024
    cdc_ring_delay_ms: int = 0
    """0: the first CDC generation starts when created; else now + 2 * ring delay + leeway."""
    cdc_settle_ms: int | None = None
    """Stable gossip membership needed before proposing it (None: max(2 s, 5 rounds))."""
    cdc_generations_v2: bool = True
    """Advertise the ``CDC_GENERATIONS_V2`` feature (v2 generation ids and tables, the v1 -> v2
    rewrite, expiry); False simulates a node of an older version (v1 generations only)."""
    phi_convict_threshold: float = DEFAULT_PHI_CONVICT_THRESHOLD
    range_timeout_ms: int = 10_000
    max_hint_window_ms: int = MAX_HINT_WINDOW_MS
    schema_agreement_timeout_ms: int = 10_000

    def __post_init__(self) -> None:
        for option in TIMING_OPTIONS:
            check_timing(option.name, getattr(self, option.name))

    @property
    def timings(self) -> NodeTimings:
        return NodeTimings(**{o.name: getattr(self, o.name) for o in TIMING_OPTIONS})

    def with_timings(self, timings: NodeTimings) -> ClusterSettings:
        return dataclasses.replace(self, **timings.as_dict())  # type: ignore[arg-type]


CAPTURE_OPTIONS: tuple[TimingOption, ...] = (
    TimingOption(
        "slice_width_s", int, 1, SLICE_WIDTH_S_MAX, "replica capture: seconds per time slice"
    ),
    TimingOption(
        "slice_count",
        int,
        1,
        SLICE_COUNT_MAX,
        "replica capture: slices open at once (a row older than the window is out of sequence)",
    ),
    TimingOption("capture_max_bytes", int, 1, 2**50, "replica capture cap: bytes kept until sent"),
    TimingOption(
        "capture_max_age_s",
        int,
        1,
        10 * 365 * 24 * 3600,
        "replica capture cap: age of the oldest slice kept",
    ),
    TimingOption(
        "metrics_port",
        int,
        0,
        65535,
        "Prometheus metrics of the node and its capture on its address (0: off)",
    ),
)
"""The numeric replica-capture settings of a node (seed 002; ``CaptureSettings``)."""
CAPTURE_POLICIES: tuple[str, ...] = tuple(policy.value for policy in CapturePolicy)


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    """A node's replica-side capture (seed 002, REPLICATION.md decision 1): on by default for
    every CDC table, slices of ``slice_width_s`` x ``slice_count``, the cap and the policy
    applied past it (``refuse`` CDC writes, or ``drop-oldest`` sealed slices)."""

    enabled: bool = True
    slice_width_s: int = DEFAULT_SLICE_WIDTH_S
    slice_count: int = DEFAULT_SLICE_COUNT
    capture_max_bytes: int = 4 * 1024**3
    capture_max_age_s: int = 7 * 24 * 3600
    capture_policy: str = CapturePolicy.REFUSE.value
    metrics_port: int = 9180
    """The node's Prometheus metrics (``_metrics``) on its own address; 0: none."""
    drop_sent_slices: bool = True
    """Synch-delete: drop a sealed, published slice once every collecting channel of its
    table has it (a table without one holds nothing back); off keeps every slice until the
    cap's policy acts."""

    def __post_init__(self) -> None:
        for name in ("enabled", "drop_sent_slices"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigurationError(f"capture {name} must be a bool, got {value!r}")
        for option in CAPTURE_OPTIONS:
            _check_option(CAPTURE_OPTIONS, "capture", option.name, getattr(self, option.name))
        if self.capture_policy not in CAPTURE_POLICIES:
            raise ConfigurationError(
                f"--capture-policy: expected one of {', '.join(CAPTURE_POLICIES)}, "
                f"got {self.capture_policy!r}"
            )

    @classmethod
    def of(cls, values: Mapping[str, object]) -> CaptureSettings:
        """Settings from ``values`` (missing or None: the default); ConfigurationError on an
        unknown name or a bad value."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigurationError(f"unknown capture settings: {', '.join(unknown)}")
        given = {name: value for name, value in values.items() if value is not None}
        return cls(**given)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, object]:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    @property
    def slice_settings(self) -> SliceSettings:
        return SliceSettings(self.slice_width_s, self.slice_count)

    @property
    def cap(self) -> CaptureCap:
        return CaptureCap(
            self.capture_max_bytes, self.capture_max_age_s, CapturePolicy(self.capture_policy)
        )


WriteDone = Callable[[BaseException | None], None]
ReadDone = Callable[[Mutation | None, BaseException | None], None]


@dataclass(slots=True)
class WriteGroup:
    """The units of one client write: done when every unit completed (first error wins)."""

    remaining: int
    done: WriteDone
    error: BaseException | None = None
    request_ids: list[int] = field(default_factory=list)

    def complete(self, error: BaseException | None) -> None:
        self.remaining -= 1
        if error is not None and self.error is None:
            self.error = error
        if self.remaining == 0:
            self.done(self.error)


@dataclass(slots=True)
class PendingRead:
    command: _codec.ReadCommand
    done: ReadDone
    unknown: dict[Host, frozenset[str]] = field(default_factory=dict)
    """Per replica, the columns of ``command`` it said it does not know."""
