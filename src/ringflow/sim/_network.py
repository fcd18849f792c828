"""The simulated network: seeded delays, drops, duplicates, reordering, partitions, bounded links.

Implements ``ringflow.runtime.Network`` on the virtual clock of ``SimLoop``. Every random choice
comes from one ``random.Random`` seeded by the simulation, so a seed replays the same history.
Theory of operation:

* ``send`` checks the payload size (``FrameTooLarge``), that ``src`` listens (``NotListening``)
  and the link's in-flight count (``Backpressure`` at ``max_in_flight_per_link``), records
  ``MessageSent``, then decides the message's fate: dropped now if the hosts are partitioned or
  with ``drop_probability``; otherwise delivered after a delay drawn from the configured
  distribution, and with ``duplicate_probability`` delivered a second time.
* **Order.** With ``reorder=False`` (the default) a link is FIFO: a delivery is never scheduled
  before the previous one of the same link, like TCP. With ``reorder=True`` each message keeps
  its own random delay, so messages overtake each other.
* **Partitions** block ``(source host, destination host)`` pairs, where the host of an endpoint
  is the simulated process that listens on it (or the endpoint itself for listeners owned by
  no process). They are checked at send time and again at delivery time: a message in flight
  when a partition starts is lost, as TCP segments on a cut link are.
* **In flight** means sent and neither delivered nor dropped; it includes messages held by a
  paused listener, so a receiver that stops reading makes its senders see ``Backpressure``.
* A listener that closes (or whose process crashes) loses every message in flight to it and
  everything it held (``MessageDropped(reason="closed")``); a message arriving at an endpoint
  nobody listens on is dropped (``no-listener``), as a connection refused would be. Messages
  already sent by a crashed process stay in flight (the kernel sends what it had).
* **Link events** mimic what a TCP sender notices: ``LinkUp`` on the first delivery on a link
  (and the first after a ``LinkDown``), ``LinkDown`` when the receiver closes or a message finds
  nobody listening. Partitions and random drops are silent, as they are on a real network.
* Each delivery and each link notification is its own event, so one handler runs per event.

What it does not model: bandwidth and message size in the delay, connection setup, partial
writes, corruption (TCP's checksum hides it), and asymmetric latency between hosts.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal, final

from ringflow.errors import ClientError, invariant
from ringflow.runtime import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_QUEUED_MESSAGES,
    Backpressure,
    Endpoint,
    EndpointError,
    LinkDown,
    LinkEvent,
    LinkHandler,
    LinkUp,
    Listener,
    MessageHandler,
    Network,
    NetworkError,
    NotListening,
    ProtocolViolation,
    check_limit,
    check_payload,
    format_endpoint,
    parse_endpoint,
)
from ringflow.sim._loop import Owner, ScheduledCall, SimLoop
from ringflow.sim._trace import (
    Healed,
    Isolated,
    LinkNotified,
    ListenerClosed,
    ListenerOpened,
    MessageDelivered,
    MessageDropped,
    MessageDuplicated,
    MessageSent,
    Partitioned,
    Trace,
    TraceEvent,
)

_LOG: Final = logging.getLogger("ringflow.sim.network")

DelayDistribution = Literal["uniform", "exponential"]
DEFAULT_MAX_LINKS: Final = 100_000
_EPHEMERAL_PORT_FIRST: Final = 32768


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Fault and limit settings of the simulated network (replace with ``dataclasses.replace``)."""

    delay_us_min: int = 500
    delay_us_max: int = 2_000
    delay_distribution: DelayDistribution = "uniform"
    """``uniform`` in ``[min, max]``, or ``exponential``: ``min`` plus an exponential tail of
    mean ``(max - min) / 4``, truncated at ``max`` (most messages fast, a few slow)."""
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0
    reorder: bool = False
    max_in_flight_per_link: int = DEFAULT_MAX_QUEUED_MESSAGES
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_links: int = DEFAULT_MAX_LINKS

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_limit("delay_us_min", self.delay_us_min, minimum=0)
        check_limit("delay_us_max", self.delay_us_max, minimum=self.delay_us_min)
        if self.delay_distribution not in ("uniform", "exponential"):
            raise ClientError(f"unknown delay_distribution {self.delay_distribution!r}")
        for name in ("drop_probability", "duplicate_probability"):
            value = getattr(self, name)
            if not isinstance(value, float | int) or not 0.0 <= value <= 1.0:
                raise ClientError(f"{name} must be a probability in [0, 1], got {value!r}")
        check_limit("max_in_flight_per_link", self.max_in_flight_per_link)
        check_limit("max_frame_bytes", self.max_frame_bytes)
        check_limit("max_links", self.max_links)


def swarm_network_config(rng: random.Random) -> NetworkConfig:
    """Draw a fault mix from ``rng`` (TigerBeetle's swarm testing, reliability-and-style §A2.2)."""
    delay_us_min = rng.choice((0, 100, 1_000))
    return NetworkConfig(
        delay_us_min=delay_us_min,
        delay_us_max=delay_us_min + rng.choice((0, 1_000, 10_000, 100_000)),
        delay_distribution=rng.choice(("uniform", "exponential")),
        drop_probability=rng.choice((0.0, 0.01, 0.1, 0.3)),
        duplicate_probability=rng.choice((0.0, 0.0, 0.01, 0.1)),
        reorder=rng.random() < 0.5,
    )


@final
class _Flight:
    """One scheduled delivery of a message (a duplicate is a second flight)."""

    __slots__ = ("call", "copy", "message_id", "payload")

    def __init__(self, message_id: int, payload: bytes, copy: int) -> None:
        self.message_id = message_id
        self.payload = payload
        self.copy = copy
        self.call: ScheduledCall | None = None


@final
class _SimLink:
    """State of ``src -> dst``: flights in the air, FIFO horizon, what the sender has noticed."""

    __slots__ = ("dst", "in_flight", "last_delivery_us", "src", "up")

    def __init__(self, src: Endpoint, dst: Endpoint) -> None:
        self.src = src
        self.dst = dst
        self.in_flight: dict[int, _Flight] = {}
        self.last_delivery_us = 0
        self.up: bool | None = None


@final
class SimListener:
    """``Listener`` of the simulated network."""

    __slots__ = (
        "_network",
        "closed",
        "endpoint_name",
        "flush_scheduled",
        "held",
        "host",
        "on_link",
        "on_message",
        "owner",
        "paused",
    )

    def __init__(
        self,
        network: SimNetwork,
        endpoint: Endpoint,
        host: str,
        on_message: MessageHandler,
        on_link: LinkHandler | None,
        owner: Owner | None,
    ) -> None:
        self._network = network
        self.endpoint_name = endpoint
        self.host = host
        self.on_message = on_message
        self.on_link = on_link
        self.owner = owner
        self.paused = False
        self.closed = False
        self.held: deque[tuple[_SimLink, int]] = deque()
        self.flush_scheduled = False

    @property
    def endpoint(self) -> Endpoint:
        return self.endpoint_name

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        if self.paused and not self.closed:
            self.paused = False
            self._network._schedule_flush(self)

    def close(self) -> None:
        self._network._close_listener(self)


@final
class SimNetwork:
    """The seeded ``Network``; one per simulation, shared by every simulated process."""

    def __init__(
        self, loop: SimLoop, rng: random.Random, trace: Trace, config: NetworkConfig | None = None
    ) -> None:
        self._loop = loop
        self._rng = rng
        self._trace = trace
        self._config = config if config is not None else NetworkConfig()
        self.protocol_violations = 0
        """Messages a handler refused with ``ProtocolViolation`` (dropped, the run goes on)."""
        self._listeners: dict[Endpoint, SimListener] = {}
        self._links: dict[tuple[Endpoint, Endpoint], _SimLink] = {}
        self._blocked: set[tuple[str, str]] = set()
        self._isolated: set[str] = set()
        self._next_message_id = 0
        self._next_flight = 0
        self._next_port = _EPHEMERAL_PORT_FIRST

    # --- configuration and partitions ----------------------------------------------------------

    @property
    def config(self) -> NetworkConfig:
        return self._config

    def configure(self, config: NetworkConfig) -> None:
        """Switch fault settings from now on; messages already in flight keep their fate."""
        config.validate()
        self._config = config

    @property
    def max_frame_bytes(self) -> int:
        return self._config.max_frame_bytes

    def block(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Cut each ``(source host, destination host)`` direction."""
        added = sorted(set(pairs) - self._blocked)
        self._blocked.update(added)
        self._record(Partitioned(tuple(added)))

    def partition(self, *groups: Iterable[str]) -> None:
        """Cut every direction between hosts of different groups (hosts in none are untouched)."""
        sets = [sorted(set(group)) for group in groups]
        pairs: list[tuple[str, str]] = []
        for index, group in enumerate(sets):
            others = [host for other in sets[:index] + sets[index + 1 :] for host in other]
            pairs.extend((host, other) for host in group for other in others)
        self.block(pairs)

    def isolate(self, host: str) -> None:
        """Cut ``host`` from every other host, both ways."""
        self._isolated.add(host)
        self._record(Isolated(host))

    def heal(self) -> None:
        self._blocked.clear()
        self._isolated.clear()
        self._record(Healed())

    def is_blocked(self, src: Endpoint, dst: Endpoint) -> bool:
        src_host, dst_host = self._host_of(src), self._host_of(dst)
        if src_host == dst_host:
            return False
        if src_host in self._isolated or dst_host in self._isolated:
            return True
        return (src_host, dst_host) in self._blocked

    def _host_of(self, endpoint: Endpoint) -> str:
        listener = self._listeners.get(endpoint)
        return endpoint if listener is None else listener.host

    # --- the Network interface -----------------------------------------------------------------

    def listen(
        self,
        endpoint: Endpoint,
        on_message: MessageHandler,
        *,
        on_link: LinkHandler | None = None,
        owner: Owner | None = None,
    ) -> SimListener:
        """Listen on ``endpoint``; ``host:0`` gets a port from a counter, like an ephemeral one."""
        if not isinstance(endpoint, str) or not endpoint.strip() or endpoint != endpoint.strip():
            raise EndpointError(f"a simulated endpoint is a non-blank str, got {endpoint!r}")
        endpoint = self._assign_port(endpoint)
        if endpoint in self._listeners:
            raise EndpointError(f"{endpoint} is already listening")
        host = endpoint if owner is None else owner.name
        listener = SimListener(self, endpoint, host, on_message, on_link, owner)
        self._listeners[endpoint] = listener
        self._record(ListenerOpened(endpoint, host))
        for link in self._links.values():
            if link.src == endpoint:
                link.up = None
        return listener

    def _assign_port(self, endpoint: Endpoint) -> Endpoint:
        try:
            host, port = parse_endpoint(endpoint)
        except EndpointError:
            return endpoint
        if port != 0:
            return endpoint
        self._next_port += 1
        invariant(self._next_port <= 65535, "the simulated network ran out of ephemeral ports")
        return format_endpoint(host, self._next_port - 1)

    def send(self, src: Endpoint, dst: Endpoint, payload: bytes) -> None:
        payload = check_payload(payload, self._config.max_frame_bytes)
        if src not in self._listeners:
            raise NotListening(f"cannot send from {src!r}: it is not listening")
        if not isinstance(dst, str) or not dst.strip():
            raise EndpointError(f"a simulated endpoint is a non-blank str, got {dst!r}")
        link = self._link(src, dst)
        limit = self._config.max_in_flight_per_link
        if len(link.in_flight) >= limit:
            raise Backpressure(src, dst, len(link.in_flight), limit)
        self._next_message_id += 1
        message_id = self._next_message_id
        self._record(MessageSent(src, dst, message_id, len(payload), zlib.crc32(payload)))
        if self.is_blocked(src, dst):
            self._record(MessageDropped(src, dst, message_id, "partition"))
            return
        config = self._config
        if config.drop_probability and self._rng.random() < config.drop_probability:
            self._record(MessageDropped(src, dst, message_id, "random"))
            return
        self._launch(link, _Flight(message_id, payload, 0))
        if config.duplicate_probability and self._rng.random() < config.duplicate_probability:
            self._record(MessageDuplicated(src, dst, message_id))
            self._launch(link, _Flight(message_id, payload, 1))

    def _link(self, src: Endpoint, dst: Endpoint) -> _SimLink:
        link = self._links.get((src, dst))
        if link is None:
            if len(self._links) >= self._config.max_links:
                raise NetworkError(f"{len(self._links)} links, limit {self._config.max_links}")
            link = self._links[(src, dst)] = _SimLink(src, dst)
        return link

    def _draw_delay_us(self) -> int:
        config = self._config
        low, high = config.delay_us_min, config.delay_us_max
        if high == low:
            return low
        if config.delay_distribution == "uniform":
            return self._rng.randint(low, high)
        tail = self._rng.expovariate(4.0 / (high - low))
        return min(high, low + int(tail))

    def _launch(self, link: _SimLink, flight: _Flight) -> None:
        at_us = self._loop.now_us + self._draw_delay_us()
        if not self._config.reorder:
            at_us = max(at_us, link.last_delivery_us)
            link.last_delivery_us = at_us
        self._next_flight += 1
        key = self._next_flight
        link.in_flight[key] = flight
        flight.call = self._loop.call_at(at_us, lambda: self._arrive(link, key))

    # --- delivery ------------------------------------------------------------------------------

    def _arrive(self, link: _SimLink, key: int) -> None:
        flight = link.in_flight.get(key)
        if flight is None:
            return
        listener = self._listeners.get(link.dst)
        if listener is None:
            self._drop(link, key, "no-listener")
            self._notify(link, up=False, reason="nobody listening")
            return
        if self.is_blocked(link.src, link.dst):
            self._drop(link, key, "partition")
            return
        if listener.paused or listener.held:
            listener.held.append((link, key))
            self._schedule_flush(listener)
            return
        self._hand_over(listener, link, key)

    def _hand_over(self, listener: SimListener, link: _SimLink, key: int) -> None:
        flight = link.in_flight.pop(key)
        self._record(MessageDelivered(link.src, link.dst, flight.message_id, flight.copy))
        if link.up is not True:
            self._notify(link, up=True, reason="")
        self._loop.acting = listener.owner
        try:
            listener.on_message(link.src, flight.payload)
        except ProtocolViolation as violation:  # a simulated node sent nonsense: a bug to see
            self.protocol_violations += 1
            _LOG.warning("%s refused a message from %s: %s", link.dst, link.src, violation)

    def _schedule_flush(self, listener: SimListener) -> None:
        if listener.flush_scheduled or listener.paused or not listener.held:
            return
        listener.flush_scheduled = True
        self._loop.call_at(self._loop.now_us, lambda: self._flush_one(listener))

    def _flush_one(self, listener: SimListener) -> None:
        """Deliver the oldest held message; one per event, so a handler's pause takes effect."""
        listener.flush_scheduled = False
        if listener.closed or listener.paused or not listener.held:
            return
        link, key = listener.held.popleft()
        invariant(key in link.in_flight, f"{listener.endpoint} held a flight no longer in flight")
        if self.is_blocked(link.src, link.dst):
            self._drop(link, key, "partition")
        else:
            self._hand_over(listener, link, key)
        self._schedule_flush(listener)

    def _drop(self, link: _SimLink, key: int, reason: str) -> None:
        flight = link.in_flight.pop(key)
        if flight.call is not None:
            flight.call.cancel()
        self._record(MessageDropped(link.src, link.dst, flight.message_id, reason))

    def _notify(self, link: _SimLink, *, up: bool, reason: str) -> None:
        """Tell ``link.src``'s listener (as its own event) what a TCP sender would notice."""
        if link.up is up or (not up and link.up is None):
            return  # LinkDown only ends an up link: a refused first connect is silent too.
        link.up = up
        sender = self._listeners.get(link.src)
        if sender is None or sender.on_link is None:
            return
        event: LinkEvent = (
            LinkUp(link.src, link.dst) if up else LinkDown(link.src, link.dst, reason)
        )
        handler = sender.on_link

        def fire() -> None:
            if not sender.closed:
                self._record(LinkNotified(link.src, link.dst, up))
                handler(event)

        owner = sender.owner
        self._loop.call_later(self._config.delay_us_min, fire, owner=owner)

    # --- closing -------------------------------------------------------------------------------

    def _close_listener(self, listener: SimListener) -> None:
        if listener.closed:
            return
        listener.closed = True
        endpoint = listener.endpoint
        if self._listeners.get(endpoint) is listener:
            del self._listeners[endpoint]
        self._record(ListenerClosed(endpoint))
        for link in self._links.values():
            if link.dst == endpoint:
                for key in list(link.in_flight):
                    self._drop(link, key, "closed")
                if link.up:
                    self._notify(link, up=False, reason="closed by peer")
        listener.held.clear()

    def close_owner(self, owner: Owner) -> None:
        """Close every listener of ``owner`` (its process crashed)."""
        for listener in [x for x in self._listeners.values() if x.owner is owner]:
            self._close_listener(listener)

    # --- inspection ----------------------------------------------------------------------------

    def listener(self, endpoint: Endpoint) -> SimListener | None:
        return self._listeners.get(endpoint)

    def endpoints_of(self, owner: Owner) -> list[Endpoint]:
        return [e for e, listener in self._listeners.items() if listener.owner is owner]

    def in_flight(self, src: Endpoint, dst: Endpoint) -> int:
        link = self._links.get((src, dst))
        return 0 if link is None else len(link.in_flight)

    def in_flight_total(self) -> int:
        return sum(len(link.in_flight) for link in self._links.values())

    def _record(self, event: TraceEvent) -> None:
        self._trace.record(self._loop.now_us, event)

    def validate(self) -> None:
        self._config.validate()
        invariant(len(self._links) <= self._config.max_links, "too many simulated links")
        for (src, dst), link in self._links.items():
            invariant((link.src, link.dst) == (src, dst), f"link {src}->{dst} misfiled")
            invariant(
                len(link.in_flight) <= self._config.max_in_flight_per_link + 1,
                f"link {src}->{dst} has {len(link.in_flight)} in flight",
            )
        for endpoint, listener in self._listeners.items():
            invariant(listener.endpoint == endpoint and not listener.closed, f"{endpoint}")
            invariant(listener.owner is None or listener.owner.alive, f"{endpoint} owner dead")
            for link, key in listener.held:
                invariant(link.dst == endpoint, f"{endpoint} holds a message for {link.dst}")
                invariant(key in link.in_flight, f"{endpoint} holds a flight no longer in flight")


def _conforms(network: SimNetwork, listener: SimListener) -> tuple[Network, Listener]:
    """Never called: makes mypy prove the simulator implements the runtime protocols."""
    return network, listener
