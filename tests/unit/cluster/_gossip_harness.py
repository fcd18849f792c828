"""A tiny deterministic gossip network: a dict of inboxes, a virtual clock, a seeded RNG.

Not the simulator (that belongs to ``ringflow.sim``): just enough to drive several
``Gossiper`` cores together in unit tests. Every message goes through the internode codec, every
step is followed by ``validate()`` on every node, and every node's view is checked to move only
forward (same generation: no version ever decreases).
"""

from __future__ import annotations

import hashlib
import random
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ringflow.cluster import (
    FRAME_LENGTH_SIZE,
    ApplicationState,
    EndpointState,
    Envelope,
    FailureDetector,
    GossipAction,
    Gossiper,
    GossipEvent,
    GossipMessage,
    HeartBeatState,
    Send,
    VersionedValue,
    decode_body,
    encode_envelope,
)
from ringflow.ring import Host

START_MS = 1_700_000_000_000
CLUSTER = "Test Cluster"


def initial_state(endpoint: str, generation: int, *, dc: str = "dc1") -> EndpointState:
    return EndpointState(
        HeartBeatState(generation, 2),
        {
            ApplicationState.DC: VersionedValue(dc, 1),
            ApplicationState.STATUS: VersionedValue(f"NORMAL,{zlib.crc32(endpoint.encode())}", 2),
        },
    )


@dataclass
class Network:
    """Nodes, their inboxes and the faults between them."""

    endpoints: list[str]
    seeds: list[str]
    seed: int
    drop_probability: float = 0.0
    now_ms: int = START_MS
    fd_sample_size: int = 1000
    echo_timeout_ms: int = 10_000
    nodes: dict[str, Gossiper] = field(default_factory=dict)
    inbox: dict[str, deque[tuple[str, GossipMessage]]] = field(default_factory=dict)
    events: dict[str, list[GossipEvent]] = field(default_factory=dict)
    cut: set[frozenset[str]] = field(default_factory=set)
    stopped: set[str] = field(default_factory=set)
    trace: Any = field(default_factory=hashlib.sha256)
    _fault_rng: random.Random = field(init=False)
    _views: dict[tuple[str, str], EndpointState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._fault_rng = random.Random(self.seed * 7919 + 1)
        for endpoint in self.endpoints:
            self.start(endpoint)

    # -- membership --------------------------------------------------------------------

    def start(self, endpoint: str, *, generation: int | None = None) -> Gossiper:
        if generation is None:
            previous = self.nodes.get(endpoint)
            generation = self.now_ms // 1000
            if previous is not None:
                generation = max(generation, previous.generation + 1)
        node = Gossiper(
            endpoint,
            initial_state(endpoint, generation),
            self.seeds,
            CLUSTER,
            random.Random(f"{self.seed}/{endpoint}/{generation}"),
            FailureDetector(sample_size=self.fd_sample_size),
            echo_timeout_ms=self.echo_timeout_ms,
        )
        self.nodes[endpoint] = node
        self.inbox[endpoint] = deque()
        self.events.setdefault(endpoint, [])
        self.stopped.discard(endpoint)
        for key in [key for key in self._views if key[0] == endpoint]:
            del self._views[key]
        return node

    def stop(self, endpoint: str) -> None:
        self.stopped.add(endpoint)
        self.inbox[endpoint].clear()

    def partition(self, side_a: set[str], side_b: set[str]) -> None:
        self.cut |= {frozenset((a, b)) for a in side_a for b in side_b}

    def heal(self) -> None:
        self.cut.clear()

    # -- running -----------------------------------------------------------------------

    def round(self) -> None:
        """Every running node ticks once, then messages flow until the network is quiet."""
        self.now_ms += 1000
        for endpoint in sorted(self.nodes):
            if endpoint not in self.stopped:
                self.dispatch(endpoint, self.nodes[endpoint].tick(self.now_ms))
        self.deliver_all()

    def rounds(self, count: int) -> None:
        for _ in range(count):
            self.round()

    def deliver_all(self, budget: int = 100_000) -> None:
        for _ in range(budget):
            busy = [e for e in sorted(self.inbox) if self.inbox[e] and e not in self.stopped]
            if not busy:
                return
            for endpoint in busy:
                sender, message = self.inbox[endpoint].popleft()
                actions = self.nodes[endpoint].receive(sender, message, self.now_ms)
                self.dispatch(endpoint, actions)
        raise AssertionError("the network never went quiet")

    def dispatch(self, endpoint: str, actions: list[GossipAction]) -> None:
        node = self.nodes[endpoint]
        node.validate()
        self._check_forward(endpoint)
        for action in actions:
            self.trace.update(f"{self.now_ms} {endpoint} {action!r}\n".encode())
            if isinstance(action, Send):
                self._send(endpoint, action)
            else:
                self.events[endpoint].append(action)

    def _send(self, sender: str, action: Send) -> None:
        if action.to == sender:
            raise AssertionError(f"{sender} sent a message to itself: {action}")
        if action.to in self.stopped or frozenset((sender, action.to)) in self.cut:
            return
        if action.to not in self.nodes:
            return
        if self.drop_probability and self._fault_rng.random() < self.drop_probability:
            return
        envelope = Envelope.of_gossip(action.message, 0, sender, self.now_ms + 10_000)
        decoded = decode_body(encode_envelope(envelope)[FRAME_LENGTH_SIZE:])
        assert decoded == envelope
        assert not isinstance(decoded.payload, bytes)
        self.inbox[action.to].append((decoded.from_endpoint, decoded.payload))

    def _check_forward(self, observer: str) -> None:
        """Within a generation no version of anything an observer knows ever goes back."""
        for subject, state in self.nodes[observer].endpoint_states().items():
            before = self._views.get((observer, subject))
            self._views[(observer, subject)] = state
            if before is None or state.generation > before.generation:
                continue
            assert state.generation == before.generation, (observer, subject, before, state)
            assert state.heartbeat.version >= before.heartbeat.version, (observer, subject)
            for key, value in before.application_states.items():
                now = state.get(key)
                assert now is not None and now.version >= value.version, (observer, subject, key)

    # -- observations ------------------------------------------------------------------

    def running(self) -> list[str]:
        return [e for e in sorted(self.nodes) if e not in self.stopped]

    def states_converged(self) -> bool:
        """Every running node knows every running node's current generation and states."""
        for observer in self.running():
            for subject in self.running():
                own = self.nodes[subject].endpoint_state(subject)
                seen = self.nodes[observer].endpoint_state(subject)
                assert own is not None
                if seen is None or seen.generation != own.generation:
                    return False
                if seen.application_states != own.application_states:
                    return False
        return True

    def all_up(self) -> bool:
        running = self.running()
        return all(
            self.nodes[observer].live_endpoints() == [e for e in running if e != observer]
            for observer in running
        )

    def rounds_until(self, condition: str, limit: int) -> int | None:
        """Rounds run until ``states_converged`` / ``all_up`` held, or None within ``limit``."""
        check = self.states_converged if condition == "states" else self.all_up
        for count in range(1, limit + 1):
            self.round()
            if check():
                return count
        return None


def ring_values(
    host: Host, tokens: tuple[int, ...], schema: uuid.UUID, status: str = "NORMAL"
) -> dict[ApplicationState, str]:
    """The application states of a complete ring member ``host`` (``status`` its STATUS word,
    its RPC address the endpoint's address): what ``Membership`` reads a member from."""
    return {
        ApplicationState.STATUS: f"{status},{tokens[0]}",
        ApplicationState.TOKENS: ",".join(map(str, tokens)),
        ApplicationState.HOST_ID: str(host.host_id),
        ApplicationState.DC: host.dc,
        ApplicationState.RACK: host.rack,
        ApplicationState.RPC_ADDRESS: host.endpoint.rsplit(":", 1)[0],
        ApplicationState.SCHEMA: str(schema),
    }
