"""The gossiper: one node's membership state machine, driven by ticks and received messages.

Owns ``shared/reference/cassandra-core.md`` §8.1 (round, three-way exchange, applying states,
echo before up, seeds) and seed 003 "Gossip" / "Ring Membership and Failure Detection".
Shape: dask's ``WorkerState`` / h11 (reliability-and-style.md §B3, §B7): ``tick(now_ms)`` and
``receive(sender, message, now_ms)`` are the only stimuli; each returns the actions for the
shell to run (``Send``) and the events it must publish (``NodeUp``, ``NodeDown``,
``NodeJoined``, ``NodeRestarted``, ``StateChanged``). No clock, no socket, no randomness of its
own: time is an argument and the ``random.Random`` is injected, so a seeded simulator replays a
run bit for bit. Iteration over endpoints is always sorted, never set order.

Rules:

* A round (the caller ticks every 1000 ms): bump our heartbeat; SYN to one random live member;
  with probability ``unreachable / (live + 1)`` SYN to one random unreachable member; if the
  live target was not a seed, or fewer members are live than there are seeds, SYN to a random
  seed with probability ``seeds / (live + unreachable)`` (always when nothing is live); then
  the status check asks the failure detector about every endpoint and marks the convicted down.
* SYN -> ACK -> ACK2 with Cassandra's ``examineGossiper`` comparison (``_EXAMINE`` table). A
  SYN with another cluster name or partitioner is dropped. An empty SYN is a shadow-round
  request and gets our whole state back; ``shadow_round`` sends one to every seed (a
  simplified shadow round: it does not hold gossip back while waiting for the answers).
* Applying a remote state: our own endpoint is never overwritten; a generation more than a year
  ahead of our clock is ignored; a higher generation is a restart and replaces the whole state;
  the same generation keeps, per key, whichever version is higher, so versions only move
  forward; a lower generation is stale and ignored. Quarantined (just removed) endpoints are
  ignored for ``quarantine_delay_ms``.
* A higher heartbeat or generation is reported to the failure detector. A node that is not up
  and whose heartbeat advances (or that appears for the first time) is sent an ECHO request;
  it is marked up only when the matching ECHO response comes back. Unlike Cassandra, a stale
  copy relayed by a third node does not trigger the echo: only fresh heartbeats do.
* Events are Cassandra's subscriber notifications: a new endpoint is ``NodeJoined`` then one
  ``StateChanged`` per state (ordinal order); a restart of a node we had up is ``NodeDown``,
  ``NodeRestarted`` and its states, then ``NodeUp`` once the echo returns; a same-generation
  update is one ``StateChanged`` per key whose version moved. UP/DOWN are this node's opinion
  and are never gossiped (seed 003).
* STATUS values ``removing``, ``removed``, ``LEFT``, ``hibernate`` (dead states) and
  ``shutdown`` are never echoed; a node announcing ``shutdown`` is convicted and marked down.
* What a peer has seen of us (``seen_by``): a SYN carries the sender's digest of every endpoint
  it knows, ours included, and an ACK asks for what the sender lacks of ours from the version it
  holds (our heartbeat moves every round, so a peer is nearly always a version or two behind and
  asks). Either tells us the newest version of our state the peer held, in our current
  generation. A topology change uses it to wait until every live member has seen its announced
  STATUS before it streams (``ring_delay`` alone is a guess under message loss).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum, auto
from typing import Final, final

from ringflow.cluster._failure_detector import FailureDetector
from ringflow.cluster._gossip_state import (
    ApplicationState,
    EchoRequest,
    EchoResponse,
    EndpointState,
    GossipDigest,
    GossipDigestAck,
    GossipDigestAck2,
    GossipDigestSyn,
    GossipMessage,
    HeartBeatState,
    VersionedValue,
)
from ringflow.errors import InternalError, InvalidRequest, invariant

MURMUR3_PARTITIONER: Final = "org.apache.cassandra.dht.Murmur3Partitioner"
GOSSIP_INTERVAL_MS: Final = 1000
"""How often the shell ticks the gossiper (Cassandra ``Gossiper.intervalInMillis``)."""
MAX_GENERATION_DIFFERENCE_S: Final = 86400 * 365
"""A generation this far ahead of our clock is garbage, not a restart."""
ECHO_TIMEOUT_MS: Final = 10_000
"""An unanswered echo may be re-sent after this (the default request timeout, §5.2)."""
QUARANTINE_DELAY_MS: Final = 60_000
"""``2 * RING_DELAY``: how long a removed endpoint's gossip is ignored."""
STORY_LIMIT: Final = 1000

DEAD_STATUSES: Final = frozenset({"removing", "removed", "LEFT", "hibernate"})
SHUTDOWN_STATUS: Final = "shutdown"


@dataclass(frozen=True, slots=True)
class Send:
    """Action: deliver ``message`` to the node at ``to``."""

    to: str
    message: GossipMessage


@dataclass(frozen=True, slots=True)
class NodeUp:
    """Event: ``endpoint`` answered our echo and is up (push a native-protocol UP)."""

    endpoint: str


@dataclass(frozen=True, slots=True)
class NodeDown:
    """Event: ``endpoint`` was convicted, announced shutdown, restarted or was removed."""

    endpoint: str


@dataclass(frozen=True, slots=True)
class NodeJoined:
    """Event: first time we hear of ``endpoint``; its states follow as ``StateChanged``."""

    endpoint: str
    generation: int


@dataclass(frozen=True, slots=True)
class NodeRestarted:
    """Event: ``endpoint`` came back with a higher generation; its whole state was replaced."""

    endpoint: str
    generation: int


@dataclass(frozen=True, slots=True)
class StateChanged:
    """Event: ``endpoint`` now has ``app_state = value`` (update token metadata, system.peers)."""

    endpoint: str
    app_state: ApplicationState
    value: str
    version: int


GossipEvent = NodeUp | NodeDown | NodeJoined | NodeRestarted | StateChanged
GossipAction = Send | GossipEvent


class _Exchange(Enum):
    NOTHING = auto()
    REQUEST_ALL = auto()
    SEND_ALL = auto()
    REQUEST_NEWER = auto()
    SEND_NEWER = auto()


def _sign(value: int) -> int:
    return (value > 0) - (value < 0)


# examineGossiper as a table: (sign(remote gen - local gen), sign(remote ver - local ver)).
_EXAMINE: Final[Mapping[tuple[int, int], _Exchange]] = {
    (0, 0): _Exchange.NOTHING,
    (0, 1): _Exchange.REQUEST_NEWER,
    (0, -1): _Exchange.SEND_NEWER,
    (1, 1): _Exchange.REQUEST_ALL,
    (1, 0): _Exchange.REQUEST_ALL,
    (1, -1): _Exchange.REQUEST_ALL,
    (-1, 1): _Exchange.SEND_ALL,
    (-1, 0): _Exchange.SEND_ALL,
    (-1, -1): _Exchange.SEND_ALL,
}


@dataclass(frozen=True, slots=True)
class _PendingEcho:
    echo_id: int
    sent_at_ms: int


def _status_word(state: EndpointState) -> str | None:
    status = state.get(ApplicationState.STATUS)
    return None if status is None else status.value.split(",", 1)[0]


def _is_dead_state(state: EndpointState) -> bool:
    word = _status_word(state)
    return word in DEAD_STATUSES or word == SHUTDOWN_STATUS


def _all_state_events(endpoint: str, state: EndpointState) -> list[GossipAction]:
    return [
        StateChanged(endpoint, key, value.value, value.version)
        for key, value in sorted(state.application_states.items())
    ]


@final
class Gossiper:
    """One node's view of the cluster's gossip state, and the rules that move it.

    *Do not* mutate the attributes: they are correlated (live, unreachable, pending echoes, the
    failure detector's windows). Change state only through ``tick``, ``receive``,
    ``set_application_state`` and ``remove_endpoint``; ``validate`` checks the invariants.
    """

    __slots__ = (
        "_echo_counter",
        "_fd",
        "_last_now_ms",
        "_live",
        "_pending_echo",
        "_quarantine",
        "_rng",
        "_seen_by",
        "_states",
        "_story",
        "_unreachable",
        "_version",
        "cluster_name",
        "echo_timeout_ms",
        "local_endpoint",
        "partitioner",
        "quarantine_delay_ms",
        "seeds",
    )

    def __init__(
        self,
        local_endpoint: str,
        local_state: EndpointState,
        seeds: Iterable[str],
        cluster_name: str,
        rng: random.Random,
        failure_detector: FailureDetector,
        *,
        partitioner: str = MURMUR3_PARTITIONER,
        echo_timeout_ms: int = ECHO_TIMEOUT_MS,
        quarantine_delay_ms: int = QUARANTINE_DELAY_MS,
        story_limit: int = STORY_LIMIT,
    ) -> None:
        if not isinstance(local_endpoint, str) or not local_endpoint:
            raise InvalidRequest(f"local_endpoint must be a non-empty str, got {local_endpoint!r}")
        if not isinstance(local_state, EndpointState):
            raise InvalidRequest(f"local_state must be an EndpointState, got {local_state!r}")
        for name, limit in (
            ("echo_timeout_ms", echo_timeout_ms),
            ("quarantine_delay_ms", quarantine_delay_ms),
            ("story_limit", story_limit),
        ):
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise InvalidRequest(f"{name} must be a positive int, got {limit!r}")
        self.local_endpoint = local_endpoint
        self.cluster_name = cluster_name
        self.partitioner = partitioner
        self.seeds = frozenset(seeds) - {local_endpoint}
        self.echo_timeout_ms = echo_timeout_ms
        self.quarantine_delay_ms = quarantine_delay_ms
        self._rng = rng
        self._fd = failure_detector
        self._states: dict[str, EndpointState] = {local_endpoint: local_state}
        self._version = local_state.max_version
        self._live: set[str] = set()
        self._unreachable: set[str] = set()
        self._pending_echo: dict[str, _PendingEcho] = {}
        self._quarantine: dict[str, int] = {}
        self._seen_by: dict[str, int] = {}
        self._echo_counter = 0
        self._last_now_ms: int | None = None
        self._story: deque[str] = deque(maxlen=story_limit)

    # -- queries -------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self._states[self.local_endpoint].generation

    @property
    def version(self) -> int:
        """The process-wide version counter: the last version handed out."""
        return self._version

    @property
    def failure_detector(self) -> FailureDetector:
        return self._fd

    def endpoint_state(self, endpoint: str) -> EndpointState | None:
        return self._states.get(endpoint)

    def endpoint_states(self) -> dict[str, EndpointState]:
        """Every known endpoint's state, ours included, sorted by endpoint."""
        return {endpoint: self._states[endpoint] for endpoint in sorted(self._states)}

    def endpoints(self) -> list[str]:
        return sorted(self._states)

    def live_endpoints(self) -> list[str]:
        """Other endpoints marked up, sorted (we are always up and not listed)."""
        return sorted(self._live)

    def unreachable_endpoints(self) -> list[str]:
        return sorted(self._unreachable)

    def is_alive(self, endpoint: str) -> bool:
        return endpoint == self.local_endpoint or endpoint in self._live

    def seen_by(self, endpoint: str) -> int:
        """The newest version of our own state ``endpoint`` was observed to hold (its SYN digests
        and ACK requests, module docstring); -1 when it has shown none since it (re)started."""
        return self._seen_by.get(endpoint, -1)

    def story(self) -> list[str]:
        """The last stimuli and decisions, oldest first (for failure messages)."""
        return list(self._story)

    # -- local commands ------------------------------------------------------------------

    def set_application_state(self, state: ApplicationState, value: str) -> VersionedValue:
        """Publish ``state = value`` about ourselves, at the next version of the counter."""
        if not isinstance(state, ApplicationState):
            raise InvalidRequest(f"not an ApplicationState: {state!r}")
        self._version += 1
        versioned = VersionedValue(value, self._version)
        local = self._states[self.local_endpoint]
        states = dict(local.application_states)
        states[state] = versioned
        self._states[self.local_endpoint] = EndpointState(
            local.heartbeat, dict(sorted(states.items()))
        )
        self._story.append(f"set {state.name}={value!r} v{self._version}")
        return versioned

    def remove_endpoint(self, endpoint: str, now_ms: int) -> list[GossipAction]:
        """Forget ``endpoint`` (operator removal, decommission) and quarantine its gossip."""
        self._advance_clock(now_ms)
        if endpoint == self.local_endpoint or endpoint not in self._states:
            return []
        actions: list[GossipAction] = [NodeDown(endpoint)] if endpoint in self._live else []
        del self._states[endpoint]
        self._live.discard(endpoint)
        self._unreachable.discard(endpoint)
        self._pending_echo.pop(endpoint, None)
        self._seen_by.pop(endpoint, None)
        self._fd.remove(endpoint)
        self._quarantine[endpoint] = now_ms + self.quarantine_delay_ms
        self._story.append(f"{now_ms}: removed {endpoint}, quarantined")
        return actions

    def shadow_round(self, now_ms: int) -> list[GossipAction]:
        """Ask every seed for its whole state: an empty SYN (a starting node, §8.1 "Seeds").

        The answers are ordinary ACKs and are applied as such. Unlike Cassandra, gossip is not
        held back until a seed answers; the shell may wait for ``NodeJoined`` events if it needs
        the cluster's view (tokens, host IDs) before bootstrapping.
        """
        self._advance_clock(now_ms)
        syn = GossipDigestSyn(self.cluster_name, self.partitioner, ())
        return [Send(seed, syn) for seed in sorted(self.seeds)]

    # -- stimuli -------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[GossipAction]:
        """One gossip round (§8.1 steps 1-5)."""
        self._advance_clock(now_ms)
        self._version += 1
        local = self._states[self.local_endpoint]
        heartbeat = HeartBeatState(local.generation, self._version)
        self._states[self.local_endpoint] = EndpointState(heartbeat, local.application_states)
        self._story.append(f"{now_ms}: tick, heartbeat v{self._version}")
        syn = self._make_syn()
        live = sorted(self._live)
        unreachable = sorted(self._unreachable)
        actions: list[GossipAction] = []
        gossiped_to_seed = False
        if live:
            target = self._rng.choice(live)
            actions.append(Send(target, syn))
            gossiped_to_seed = target in self.seeds
        if unreachable and self._rng.random() < len(unreachable) / (len(live) + 1):
            actions.append(Send(self._rng.choice(unreachable), syn))
        if not gossiped_to_seed or len(live) < len(self.seeds):
            seed = self._maybe_pick_seed(len(live), len(unreachable))
            if seed is not None:
                actions.append(Send(seed, syn))
        actions.extend(self._status_check(now_ms))
        return actions

    def receive(self, sender: str, message: GossipMessage, now_ms: int) -> list[GossipAction]:
        """Handle ``message`` from ``sender``; returns replies and events."""
        self._advance_clock(now_ms)
        match message:
            case GossipDigestSyn():
                return self._on_syn(sender, message, now_ms)
            case GossipDigestAck():
                return self._on_ack(sender, message, now_ms)
            case GossipDigestAck2():
                return self._apply_states(message.states, now_ms)
            case EchoRequest():
                return [Send(sender, EchoResponse(message.echo_id))]
            case EchoResponse():
                return self._on_echo_response(sender, message, now_ms)
        raise InvalidRequest(f"the gossiper does not handle {type(message).__name__}")

    # -- round ---------------------------------------------------------------------------

    def _advance_clock(self, now_ms: int) -> None:
        if not isinstance(now_ms, int) or isinstance(now_ms, bool) or now_ms < 0:
            raise InvalidRequest(f"now_ms must be a non-negative int, got {now_ms!r}")
        if self._last_now_ms is not None and now_ms < self._last_now_ms:
            raise InvalidRequest(
                f"time went backwards: {now_ms} ms after {self._last_now_ms} ms; "
                "the shell must pass a monotonic clock"
            )
        self._last_now_ms = now_ms

    def _make_syn(self) -> GossipDigestSyn:
        digests = [
            GossipDigest(endpoint, state.generation, state.max_version)
            for endpoint, state in sorted(self._states.items())
        ]
        self._rng.shuffle(digests)
        return GossipDigestSyn(self.cluster_name, self.partitioner, tuple(digests))

    def _maybe_pick_seed(self, live_count: int, unreachable_count: int) -> str | None:
        if not self.seeds:
            return None
        seeds = sorted(self.seeds)
        if live_count == 0:
            return self._rng.choice(seeds)
        probability = len(seeds) / (live_count + unreachable_count)
        return self._rng.choice(seeds) if self._rng.random() <= probability else None

    def _status_check(self, now_ms: int) -> list[GossipAction]:
        actions: list[GossipAction] = []
        for endpoint in sorted(self._states):
            if endpoint == self.local_endpoint:
                continue
            if self._fd.interpret(endpoint, now_ms):
                self._pending_echo.pop(endpoint, None)
                if endpoint in self._live:
                    self._story.append(f"{now_ms}: convicted {endpoint}")
                    actions.append(self._mark_down(endpoint))
        for endpoint, until_ms in sorted(self._quarantine.items()):
            if now_ms >= until_ms:
                del self._quarantine[endpoint]
        return actions

    def _mark_down(self, endpoint: str) -> NodeDown:
        invariant(endpoint in self._live, f"marking {endpoint} down but it is not up")
        self._live.remove(endpoint)
        self._unreachable.add(endpoint)
        self._pending_echo.pop(endpoint, None)
        return NodeDown(endpoint)

    # -- three-way exchange --------------------------------------------------------------

    def _on_syn(self, sender: str, message: GossipDigestSyn, now_ms: int) -> list[GossipAction]:
        if message.cluster_name != self.cluster_name or message.partitioner != self.partitioner:
            self._story.append(
                f"{now_ms}: dropped SYN from {sender}: cluster {message.cluster_name!r} / "
                f"partitioner {message.partitioner!r} are not ours"
            )
            return []
        if not message.digests:
            return [Send(sender, GossipDigestAck((), self.endpoint_states()))]
        requests: list[GossipDigest] = []
        deltas: dict[str, EndpointState] = {}
        for digest in message.digests:
            self._note_seen(sender, digest)
            self._examine(digest, requests, deltas)
        return [Send(sender, GossipDigestAck(tuple(requests), deltas))]

    def _examine(
        self, digest: GossipDigest, requests: list[GossipDigest], deltas: dict[str, EndpointState]
    ) -> None:
        local = self._states.get(digest.endpoint)
        if local is None:
            requests.append(GossipDigest(digest.endpoint, digest.generation, 0))
            return
        key = (
            _sign(digest.generation - local.generation),
            _sign(digest.max_version - local.max_version),
        )
        exchange = _EXAMINE[key]
        if exchange is _Exchange.REQUEST_ALL:
            requests.append(GossipDigest(digest.endpoint, digest.generation, 0))
        elif exchange is _Exchange.REQUEST_NEWER:
            requests.append(GossipDigest(digest.endpoint, digest.generation, local.max_version))
        elif exchange is _Exchange.SEND_ALL or exchange is _Exchange.SEND_NEWER:
            since = 0 if exchange is _Exchange.SEND_ALL else digest.max_version
            delta = local.newer_than(since)
            if delta is not None:
                deltas[digest.endpoint] = delta

    def _on_ack(self, sender: str, message: GossipDigestAck, now_ms: int) -> list[GossipAction]:
        actions = self._apply_states(message.states, now_ms)
        deltas: dict[str, EndpointState] = {}
        for request in message.requests:
            self._note_seen(sender, request)
            local = self._states.get(request.endpoint)
            delta = None if local is None else local.newer_than(request.max_version)
            if delta is not None:
                deltas[request.endpoint] = delta
        actions.append(Send(sender, GossipDigestAck2(deltas)))
        return actions

    def _note_seen(self, sender: str, digest: GossipDigest) -> None:
        """``sender`` holds ``digest.max_version`` of ``digest.endpoint``: kept when that is us,
        in our generation, and the sender is an endpoint we know."""
        if (
            digest.endpoint == self.local_endpoint
            and digest.generation == self.generation
            and sender in self._states
            and sender != self.local_endpoint
        ):
            self._seen_by[sender] = max(self._seen_by.get(sender, -1), digest.max_version)

    # -- applying remote states ----------------------------------------------------------

    def _apply_states(self, states: Mapping[str, EndpointState], now_ms: int) -> list[GossipAction]:
        actions: list[GossipAction] = []
        horizon_s = now_ms // 1000 + MAX_GENERATION_DIFFERENCE_S
        for endpoint, remote in states.items():
            if endpoint == self.local_endpoint or endpoint in self._quarantine:
                continue
            if remote.generation > horizon_s:
                self._story.append(
                    f"{now_ms}: ignored {endpoint} generation {remote.generation}: more than a "
                    "year ahead of our clock"
                )
                continue
            local = self._states.get(endpoint)
            if local is None:
                actions.extend(self._discover(endpoint, remote, now_ms))
            elif remote.generation > local.generation:
                actions.extend(self._restart(endpoint, remote, now_ms))
            elif remote.generation == local.generation:
                actions.extend(self._apply_newer(endpoint, local, remote, now_ms))
        return actions

    def _discover(self, endpoint: str, remote: EndpointState, now_ms: int) -> list[GossipAction]:
        self._states[endpoint] = EndpointState(
            remote.heartbeat, dict(sorted(remote.application_states.items()))
        )
        self._unreachable.add(endpoint)
        self._fd.report(endpoint, now_ms)
        self._story.append(f"{now_ms}: discovered {endpoint} gen {remote.generation}")
        actions: list[GossipAction] = [NodeJoined(endpoint, remote.generation)]
        actions.extend(_all_state_events(endpoint, remote))
        if not _is_dead_state(remote):
            actions.extend(self._send_echo(endpoint, now_ms))
        return actions

    def _restart(self, endpoint: str, remote: EndpointState, now_ms: int) -> list[GossipAction]:
        actions: list[GossipAction] = []
        if endpoint in self._live:
            actions.append(self._mark_down(endpoint))
        else:
            # Down and restarted: its old intervals say nothing about the new process.
            self._fd.remove(endpoint)
        self._fd.report(endpoint, now_ms)
        self._pending_echo.pop(endpoint, None)
        self._seen_by.pop(endpoint, None)  # the new process knows only what it learns anew
        self._states[endpoint] = EndpointState(
            remote.heartbeat, dict(sorted(remote.application_states.items()))
        )
        self._story.append(f"{now_ms}: {endpoint} restarted with generation {remote.generation}")
        actions.append(NodeRestarted(endpoint, remote.generation))
        actions.extend(_all_state_events(endpoint, remote))
        if not _is_dead_state(remote):
            actions.extend(self._send_echo(endpoint, now_ms))
        return actions

    def _apply_newer(
        self, endpoint: str, local: EndpointState, remote: EndpointState, now_ms: int
    ) -> list[GossipAction]:
        actions: list[GossipAction] = []
        heartbeat_advanced = remote.heartbeat.version > local.heartbeat.version
        state = local
        if remote.max_version > local.max_version:
            state = local.merged_with(remote)
            self._states[endpoint] = state
            for key, value in sorted(remote.application_states.items()):
                current = local.get(key)
                if current is None or value.version > current.version:
                    actions.append(StateChanged(endpoint, key, value.value, value.version))
        if heartbeat_advanced:
            self._fd.report(endpoint, now_ms)
        if _status_word(state) == SHUTDOWN_STATUS:
            self._fd.force_conviction(endpoint)
            self._pending_echo.pop(endpoint, None)
            if endpoint in self._live:
                self._story.append(f"{now_ms}: {endpoint} announced shutdown")
                actions.append(self._mark_down(endpoint))
        elif heartbeat_advanced and endpoint not in self._live and not _is_dead_state(state):
            actions.extend(self._send_echo(endpoint, now_ms))
        return actions

    # -- echo ----------------------------------------------------------------------------

    def _send_echo(self, endpoint: str, now_ms: int) -> list[GossipAction]:
        pending = self._pending_echo.get(endpoint)
        if pending is not None and now_ms - pending.sent_at_ms < self.echo_timeout_ms:
            return []
        self._echo_counter += 1
        self._pending_echo[endpoint] = _PendingEcho(self._echo_counter, now_ms)
        return [Send(endpoint, EchoRequest(self._echo_counter))]

    def _on_echo_response(
        self, sender: str, message: EchoResponse, now_ms: int
    ) -> list[GossipAction]:
        pending = self._pending_echo.get(sender)
        if pending is None or pending.echo_id != message.echo_id:
            self._story.append(f"{now_ms}: ignored stale echo response from {sender}")
            return []
        del self._pending_echo[sender]
        invariant(sender in self._unreachable, f"echo pending for {sender}, which is not down")
        self._unreachable.remove(sender)
        self._live.add(sender)
        self._story.append(f"{now_ms}: {sender} answered echo {message.echo_id}: up")
        return [NodeUp(sender)]

    # -- invariants ----------------------------------------------------------------------

    def validate(self) -> None:
        """Check every cross-index; failures carry the recent story."""
        problem = self._broken_invariant()
        if problem is not None:
            raise InternalError(f"{problem}; story: " + " | ".join(list(self._story)[-20:]))
        self._fd.validate()

    def _broken_invariant(self) -> str | None:
        """What ``validate`` finds wrong, or None (each message made only when it fails)."""
        local = self._states.get(self.local_endpoint)
        if local is None:
            return "our own endpoint state is missing"
        others = self._states.keys() - {self.local_endpoint}
        if self._live & self._unreachable:
            return "an endpoint is both up and down"
        if self._live | self._unreachable != others:
            return (
                f"up {sorted(self._live)} + down {sorted(self._unreachable)} != known "
                f"{sorted(others)}"
            )
        if not self._pending_echo.keys() <= self._unreachable:
            return f"echo pending for endpoints not down: {sorted(self._pending_echo)}"
        if self._version < local.max_version:
            return f"version counter {self._version} behind our state {local.max_version}"
        if self._quarantine.keys() & self._states.keys():
            return "quarantined yet known"
        if not (
            self._seen_by.keys() <= others
            and max(self._seen_by.values(), default=-1) <= self._version
        ):
            return f"seen-by {self._seen_by} names unknown endpoints or versions we never made"
        missing = sorted(e for e in others if self._fd.window(e) is None)
        if missing:
            return f"known endpoints without a failure-detector window: {missing}"
        return None
