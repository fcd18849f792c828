"""The global permit broker: how channels share the link (REPLICATION.md decision 7).

``permits`` is the number of slice copies in transmission at once, across every channel (DSE's
global ``--permits``: "permits are global and not per destination"). The Spark job's driver
owns one broker. Each round it ``offer``s every channel its planned sends (``_planner``), asks
for ``grant()``, hands the granted copies to the channels' streaming queries, and ``release``s
each grant when its copy is committed (then writes the ``sent`` record) or has failed.

Rules:

1. **Priority.** A free permit goes to the eligible channel with pending work and the highest
   priority (higher wins, as DSE's "a channel with a higher priority takes precedence in
   acquiring permits"). A lower-priority channel gets a permit only when no eligible
   higher-priority channel has pending work, so the higher one is never starved by it (it may
   starve the lower one: that is what priority means).
2. **Ties** go round-robin by channel name: after a channel is served, each other channel of the
   same priority with work is served before it again, so equal channels all progress.
3. **Order** within a channel: fifo takes the oldest slice first, lifo the newest (by slice
   start, then key and node, so the order is total and the broker deterministic).
4. **Eligibility.** A channel whose transmission is paused or whose destination is unreachable
   (``_backoff``) is not eligible: it gets no permit, and its pending work blocks nobody.
5. **Bounds.** Pending work per channel is bounded (``max_pending_per_channel``); an offer keeps
   the first sends in the channel's order and reports how many it left off; the planner offers
   them again next round. The number of channels is bounded too (``max_channels``).

Pure and deterministic: no clock, no randomness.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from ringflow.errors import invariant
from ringflow.replication._channels import Channel, ChannelOrder
from ringflow.replication._model import ReplicationArgumentError, SliceKey
from ringflow.replication._planner import PlannedSend

DEFAULT_PERMITS: Final = 32
PERMITS_MAX: Final = 1_000_000
DEFAULT_MAX_PENDING_PER_CHANNEL: Final = 10_000
DEFAULT_MAX_CHANNELS: Final = 256


@dataclass(frozen=True, slots=True)
class Grant:
    """One permit: ``send`` may be transmitted until the grant is released."""

    grant_id: int
    send: PlannedSend

    @property
    def channel(self) -> str:
        return self.send.channel


@dataclass(frozen=True, slots=True)
class OfferResult:
    """What an offer kept: ``pending`` sends queued, ``left_off`` beyond the bound, ``in_flight``
    already granted (not queued twice)."""

    pending: int
    left_off: int
    in_flight: int


def _identity(send: PlannedSend) -> tuple[str, SliceKey, uuid.UUID]:
    return (send.channel, send.key, send.node)


def _dispatch_order(send: PlannedSend, order: ChannelOrder) -> tuple[int, SliceKey, uuid.UUID]:
    """Sort key: fifo oldest slice first, lifo newest first; ties by key and node."""
    start = send.key.slice_start_ms
    return (start if order is ChannelOrder.FIFO else -start, send.key, send.node)


@dataclass(slots=True)
class _ChannelState:
    name: str
    priority: int
    order: ChannelOrder
    transmission_enabled: bool
    reachable: bool = True
    pending: list[PlannedSend] = field(default_factory=list)
    """In reverse dispatch order: the next send is ``pending[-1]``."""

    @property
    def eligible(self) -> bool:
        return self.transmission_enabled and self.reachable


def _check_limit(name: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ReplicationArgumentError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value


class PermitBroker:
    """Grants permits to channels' planned sends (module docstring)."""

    def __init__(
        self,
        permits: int = DEFAULT_PERMITS,
        *,
        max_pending_per_channel: int = DEFAULT_MAX_PENDING_PER_CHANNEL,
        max_channels: int = DEFAULT_MAX_CHANNELS,
    ) -> None:
        self.permits = _check_limit("permits", permits, 1, PERMITS_MAX)
        self.max_pending_per_channel = _check_limit(
            "max_pending_per_channel", max_pending_per_channel, 1, 10**9
        )
        self.max_channels = _check_limit("max_channels", max_channels, 1, 10**6)
        self._channels: dict[str, _ChannelState] = {}
        self._grants: dict[int, Grant] = {}
        self._granted: set[tuple[str, SliceKey, uuid.UUID]] = set()
        self._last_served: dict[int, str] = {}  # priority -> channel name served last
        self._next_id = 1

    # --- channels -----------------------------------------------------------------------

    def configure(self, channel: Channel, *, reachable: bool | None = None) -> None:
        """Add ``channel`` or take its new settings (priority, order, transmission switch);
        ``reachable`` None keeps what the channel had (True for a new one)."""
        if not isinstance(channel, Channel):
            raise ReplicationArgumentError(f"expected a Channel, got {channel!r}")
        state = self._channels.get(channel.name)
        if state is None:
            if len(self._channels) >= self.max_channels:
                raise ReplicationArgumentError(
                    f"at most {self.max_channels} channels (max_channels); "
                    f"cannot add {channel.name!r}"
                )
            state = _ChannelState(
                channel.name, channel.priority, channel.order, channel.transmission_enabled
            )
            self._channels[channel.name] = state
        elif state.order is not channel.order:
            state.order = channel.order
            state.pending.sort(key=lambda s: _dispatch_order(s, channel.order), reverse=True)
        state.priority = channel.priority
        state.transmission_enabled = channel.transmission_enabled
        if reachable is not None:
            state.reachable = reachable

    def set_reachable(self, name: str, reachable: bool) -> None:
        """The destination's state (``DestinationBackoff.may_attempt``): unreachable channels
        get no permits."""
        self._state(name).reachable = reachable

    def remove(self, name: str) -> None:
        """Forget a dropped channel's pending work; its grants still hold their permits until
        released."""
        self._state(name)
        del self._channels[name]

    def channels(self) -> tuple[str, ...]:
        return tuple(sorted(self._channels))

    # --- work ---------------------------------------------------------------------------

    def offer(self, name: str, sends: Iterable[PlannedSend]) -> OfferResult:
        """Replace ``name``'s pending work with ``sends`` (this round's plan for it), minus
        those already granted, bounded by ``max_pending_per_channel`` in the channel's order."""
        state = self._state(name)
        unique: dict[tuple[str, SliceKey, uuid.UUID], PlannedSend] = {}
        for send in sends:
            if not isinstance(send, PlannedSend) or send.channel != name:
                raise ReplicationArgumentError(f"channel {name!r} was offered {send!r}")
            unique.setdefault(_identity(send), send)
        fresh = [send for identity, send in unique.items() if identity not in self._granted]
        fresh.sort(key=lambda s: _dispatch_order(s, state.order))
        kept = fresh[: self.max_pending_per_channel]
        state.pending = kept[::-1]
        return OfferResult(len(kept), len(fresh) - len(kept), len(unique) - len(fresh))

    def grant(self) -> tuple[Grant, ...]:
        """Hand out every free permit (rules 1-4), in the order they were decided."""
        grants: list[Grant] = []
        while len(self._grants) < self.permits:
            state = self._next_channel()
            if state is None:
                break
            send = state.pending.pop()
            grant = Grant(self._next_id, send)
            self._next_id += 1
            self._grants[grant.grant_id] = grant
            self._granted.add(_identity(send))
            grants.append(grant)
        return tuple(grants)

    def release(self, grant: Grant) -> None:
        """The grant's copy was committed or failed: its permit is free again. (A failed copy
        comes back in the planner's next offer.)"""
        held = self._grants.get(grant.grant_id) if isinstance(grant, Grant) else None
        if held is None or held != grant:
            raise ReplicationArgumentError(f"{grant!r} is not an outstanding grant")
        del self._grants[grant.grant_id]
        self._granted.discard(_identity(grant.send))

    # --- reading ------------------------------------------------------------------------

    @property
    def free_permits(self) -> int:
        return self.permits - len(self._grants)

    def outstanding(self) -> tuple[Grant, ...]:
        """Grants not released yet, oldest first."""
        return tuple(self._grants[i] for i in sorted(self._grants))

    def in_flight(self) -> tuple[PlannedSend, ...]:
        """The granted sends: the planner's ``in_flight``."""
        return tuple(grant.send for grant in self.outstanding())

    def pending(self, name: str) -> tuple[PlannedSend, ...]:
        """``name``'s queued sends in dispatch order."""
        return tuple(reversed(self._state(name).pending))

    def validate(self) -> None:
        """The broker's invariants (run after every step in tests)."""
        invariant(len(self._grants) <= self.permits, "more grants than permits")
        invariant(
            self._granted == {_identity(g.send) for g in self._grants.values()},
            "granted identities disagree with the grants",
        )
        for state in self._channels.values():
            invariant(
                len(state.pending) <= self.max_pending_per_channel,
                f"channel {state.name}: {len(state.pending)} pending over the bound",
            )
            order = [_dispatch_order(s, state.order) for s in reversed(state.pending)]
            invariant(order == sorted(order), f"channel {state.name}: pending out of order")
            invariant(
                not any(_identity(s) in self._granted for s in state.pending),
                f"channel {state.name}: a granted send is still pending",
            )

    # --- internals ----------------------------------------------------------------------

    def _state(self, name: str) -> _ChannelState:
        try:
            return self._channels[name]
        except KeyError:
            raise ReplicationArgumentError(f"unknown channel {name!r}") from None

    def _next_channel(self) -> _ChannelState | None:
        """Rules 1, 2 and 4: the highest-priority eligible channel with work; among equals the
        first by name after the one served last at that priority."""
        ready = [s for s in self._channels.values() if s.eligible and s.pending]
        if not ready:
            return None
        top = max(state.priority for state in ready)
        tied = sorted((s for s in ready if s.priority == top), key=lambda s: s.name)
        last = self._last_served.get(top)
        chosen = next((s for s in tied if last is None or s.name > last), tied[0])
        self._last_served[top] = chosen.name
        return chosen
