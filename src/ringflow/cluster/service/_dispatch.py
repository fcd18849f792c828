"""Internode message dispatch: one network message to one envelope, checked, to its handler.

Owns ``MessageDispatcher`` and the admission table ``VERB_STANDING`` (issue 16, "two
connections partition a node from its cluster"). Cassandra's ``InboundConnectionInitiator``
validates a peer before reading its messages and a ``ProtocolException`` closes that one
connection; ringflow does the same in two steps: the network shell checks that a connection's
claimed endpoint is the address it comes from (``runtime``), and this dispatcher checks what
each message may ask of us.

Rules:

* Every network message is exactly one envelope frame, decoded on its own
  (``decode_frame``): there is no decoder state, so nothing is shared between connections or
  kept between messages.
* The envelope's ``from_endpoint`` must be the connection's (verified) endpoint.
* A message that does not decode, claims another sender, or whose handler finds a payload of
  the wrong shape (``InternodeProtocolError``) is a protocol error: counted
  (``protocol_errors``), logged (rate-limited), and raised to the network as
  ``ProtocolViolation``, which closes that connection alone. Other envelopes, on other
  connections, keep being dispatched.
* What a sender may ask depends on its standing (``Standing``): gossip verbs are open to
  anyone (a node joins by gossiping with a seed that has never heard of it); schema pulls
  and answers to our own requests need an endpoint gossip knows; every verb that writes or
  reads data or schema (``MEMBER_VERBS``) needs a ring member or a node gossip shows joining or
  leaving (``ReplicaPlacement.host_at``, or a ``system.peers`` row of an earlier run).
* Knowledge is not symmetric: a member may see us before gossip has told us of it (a node
  just started, a peer's state one round behind). So a message whose sender lacks the standing
  is first held (``Holding``: at most ``max_held_per_source`` messages of at most
  ``max_held_sources`` senders, ``hold_ms``), and the sender is asked for its state (an empty
  SYN); held messages are dispatched, in order, as soon as gossip gives the sender the
  standing, and refused when ``hold_ms`` passes without it (or when the hold is full). A
  refused message is counted (``refused_messages``), logged (rate-limited) and not handled; a
  refused request from a known endpoint is answered with FAILURE_RSP, one from a stranger gets
  no answer (we open no link to whoever asks).
* What a peer may write (``peer_write_refusal``): MUTATION_REQ, HINT_REQ and streamed
  partitions never touch a local system keyspace (``system``, ``system_schema``: each node
  owns its own; ``system_schema`` changes only through schema migrations, SCHEMA_PUSH_REQ and
  SCHEMA_PULL_RSP, which carry ``system_schema`` partitions and nothing else), nor a table
  this node does not know; such a request is refused whole, nothing of it applied.
* A verb with no handler is logged and ignored.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ringflow.cluster._gossip_state import GossipMessage
from ringflow.cluster._messages import (
    DEFAULT_MAX_FRAME_SIZE,
    Envelope,
    InternodeProtocolError,
    Verb,
    decode_frame,
)
from ringflow.runtime import ProtocolViolation
from ringflow.schema import LOCAL_SYSTEM_KEYSPACES, Mutation
from ringflow.storage import Store, UnknownTable

_log = logging.getLogger(__name__)

Handler = Callable[[str, int, bytes], None]
"""``handler(source endpoint, request id, payload)`` for one verb."""


class Standing(enum.IntEnum):
    """What this node knows of a sender, least first."""

    STRANGER = 0
    """Gossip has never heard of it."""
    KNOWN = 1
    """Gossip knows the endpoint (a node starting to join, one that left)."""
    MEMBER = 2
    """A ring member, or a node gossip shows joining or leaving (a pending replica)."""


MEMBER_VERBS: Final = frozenset(
    {
        Verb.MUTATION_REQ,
        Verb.READ_REQ,
        Verb.HINT_REQ,
        Verb.SCHEMA_PUSH_REQ,
        Verb.SCHEMA_PULL_RSP,
        Verb.STREAM_REQ,
        Verb.RANGE_READ,
        Verb.REPAIR_REQ,
    }
)
"""Verbs that read or change data or schema: members (and joining/leaving nodes) only."""
OPEN_VERBS: Final = frozenset(
    {
        Verb.GOSSIP_DIGEST_SYN,
        Verb.GOSSIP_DIGEST_ACK,
        Verb.GOSSIP_DIGEST_ACK2,
        Verb.ECHO_REQ,
        Verb.ECHO_RSP,
    }
)
"""Gossip: how a node that nobody knows yet joins."""
VERB_STANDING: Final[Mapping[Verb, Standing]] = {
    verb: (
        Standing.STRANGER
        if verb in OPEN_VERBS
        else Standing.MEMBER
        if verb in MEMBER_VERBS
        else Standing.KNOWN
    )
    for verb in Verb
}
"""The least standing a sender needs for each verb (module rules)."""
ANSWERED_WHEN_REFUSED: Final = frozenset(
    {
        Verb.MUTATION_REQ,
        Verb.READ_REQ,
        Verb.HINT_REQ,
        Verb.STREAM_REQ,
        Verb.SCHEMA_PUSH_REQ,
        Verb.REPAIR_REQ,
    }
)
"""Requests whose sender waits for an answer: a refusal is a FAILURE_RSP (to known nodes)."""
_LOG_FIRST: Final = 20
_LOG_EVERY: Final = 1_000


@dataclass(frozen=True, slots=True)
class Holding:
    """How a dispatcher holds the messages of senders it does not know yet (module rules)."""

    call_later: Callable[[int, Callable[[], None]], object]
    """The node's clock: ``call_later(delay_ms, callback)``."""
    learn: Callable[[str], None]
    """Ask an endpoint for its gossip state (an empty SYN)."""
    hold_ms: int = 3_000
    max_held_per_source: int = 64
    max_held_sources: int = 64


class MessageDispatcher:
    """Decodes, checks and routes each message (see the module docstring). ``handlers`` is
    read at every message: verbs served later (``ClusterNode.serve``) count."""

    def __init__(
        self,
        on_gossip: Callable[[str, GossipMessage], None],
        handlers: Mapping[Verb, Handler],
        *,
        standing_of: Callable[[str], Standing],
        fail: Callable[[str, int, Verb, str], None],
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        holding: Holding | None = None,
    ) -> None:
        self._on_gossip = on_gossip
        self._holding = holding
        self._held: dict[str, deque[Envelope]] = {}
        self._handlers = handlers
        self._standing_of = standing_of
        self._fail = fail
        self._max_frame_size = max_frame_size
        self.protocol_errors = 0
        self.refused_messages = 0

    def on_message(self, source: str, payload: bytes) -> None:
        """One network message from ``source`` (the network's verified endpoint)."""
        try:
            envelope = decode_frame(payload, max_frame_size=self._max_frame_size)
            if envelope.from_endpoint != source:
                raise InternodeProtocolError(
                    f"envelope claims to be from {envelope.from_endpoint!r:.80}"
                )
            standing = self._standing_of(source)
            required = VERB_STANDING[envelope.verb]
            if required > Standing.STRANGER and (source in self._held or standing < required):
                if not self._hold(source, envelope):
                    self.refuse(source, envelope.request_id, envelope.verb, standing.name.lower())
                return
            self.dispatch(envelope)
        except InternodeProtocolError as error:
            self._protocol_error(source, error)
            raise ProtocolViolation(str(error)) from None

    def _protocol_error(self, source: str, error: InternodeProtocolError) -> None:
        self.protocol_errors += 1
        if _worth_logging(self.protocol_errors):
            _log.warning("protocol error #%d from %s: %s", self.protocol_errors, source, error)

    @property
    def held_messages(self) -> int:
        return sum(len(queue) for queue in self._held.values())

    def _hold(self, source: str, envelope: Envelope) -> bool:
        """Hold ``envelope`` until gossip tells who ``source`` is; False when the hold is full."""
        holding = self._holding
        if holding is None:
            return False
        queue = self._held.get(source)
        if queue is None:
            if len(self._held) >= holding.max_held_sources:
                return False
            queue = self._held[source] = deque()
            holding.learn(source)
            holding.call_later(holding.hold_ms, lambda: self.release(source, final=True))
        if len(queue) >= holding.max_held_per_source:
            return False
        queue.append(envelope)
        return True

    def release_all(self) -> None:
        """Dispatch the held messages whose senders now have the standing (after gossip)."""
        for source in list(self._held):
            self.release(source)

    def release(self, source: str, *, final: bool = False) -> None:
        """Dispatch ``source``'s held messages, in order, while its standing admits them; with
        ``final`` (the hold expired) refuse the others."""
        queue = self._held.get(source)
        while queue:
            standing = self._standing_of(source)
            envelope = queue[0]
            if standing < VERB_STANDING[envelope.verb] and not final:
                return
            queue.popleft()
            if standing < VERB_STANDING[envelope.verb]:
                self.refuse(source, envelope.request_id, envelope.verb, standing.name.lower())
                continue
            try:
                self.dispatch(envelope)
            except InternodeProtocolError as error:  # its connection may be gone: count it
                self._protocol_error(source, error)
        self._held.pop(source, None)

    def refuse(self, source: str, request_id: int, verb: Verb, reason: str) -> None:
        """Count and log a refused message; answer a refused request from a known node."""
        self.refused_messages += 1
        if _worth_logging(self.refused_messages):
            _log.warning(
                "refused %s #%d from %s (%s), %d refused so far",
                verb.name,
                request_id,
                source,
                reason,
                self.refused_messages,
            )
        if verb in ANSWERED_WHEN_REFUSED and self._standing_of(source) >= Standing.KNOWN:
            self._fail(source, request_id, verb, f"refused: {reason}")

    def dispatch(self, envelope: Envelope) -> None:
        verb, source, payload = envelope.verb, envelope.from_endpoint, envelope.payload
        if not isinstance(payload, bytes):
            self._on_gossip(source, payload)
            if self._held:  # gossip may have told us who a held sender is
                self.release_all()
            return
        handler = self._handlers.get(verb)
        if handler is None:
            _log.warning("unexpected verb %s from %s", verb.name, source)
            return
        handler(source, envelope.request_id, payload)


def peer_write_refusal(store: Store, mutations: Iterable[Mutation]) -> str | None:
    """Why a peer may not write ``mutations`` here (module rules), or None."""
    for mutation in mutations:
        if mutation.keyspace in LOCAL_SYSTEM_KEYSPACES:
            return f"{mutation.keyspace}.{mutation.table} is local to each node"
        try:
            store.table(mutation.keyspace, mutation.table)
        except UnknownTable:
            return f"unknown table {mutation.keyspace}.{mutation.table}"
    return None


def _worth_logging(count: int) -> bool:
    """The first few, then one in ``_LOG_EVERY``: a flood of bad messages cannot flood the log."""
    return count <= _LOG_FIRST or count % _LOG_EVERY == 0
