"""The settings and small value types of a cluster node's service (``_node``).

``ClusterSettings`` is the cluster part of a node's configuration (seeds, endpoints, timings);
``Offload`` is how the node runs store work off its thread; ``WriteGroup``/``PendingRead`` are the
shell's bookkeeping of client requests in flight on the coordinator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from ringflow.cluster._gossip import GOSSIP_INTERVAL_MS
from ringflow.cluster.service import _codec
from ringflow.schema import Mutation

_T = TypeVar("_T")


class Offload(Protocol):
    """Run ``work`` off the node's thread; ``done(result, error)`` comes back on it."""

    def __call__(
        self, work: Callable[[], _T], done: Callable[[_T | None, BaseException | None], None]
    ) -> None: ...


EventSink = Callable[[str, str, str], None]
"""Where native-protocol EVENTs go: ``("STATUS_CHANGE", "UP", "127.0.0.2")`` ..."""


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """The cluster part of a node's configuration; every timing has a default."""

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
