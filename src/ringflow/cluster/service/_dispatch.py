"""Internode message dispatch: bytes from a peer to envelopes, envelopes to their handler.

Owns ``MessageDispatcher``: one ``EnvelopeDecoder`` per source endpoint, gossip messages to the
gossiper, every other verb to its handler (the node's own verbs, or ``extra_handlers`` for verbs
served outside the node, such as streaming).

Rules:

* A malformed message counts as a protocol error and drops that source's decoder (its stream
  restarts with the next message); the node keeps serving.
* A verb with no handler is logged and ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ringflow.cluster._gossip_state import GossipMessage
from ringflow.cluster._messages import GOSSIP_VERBS, Envelope, EnvelopeDecoder, Verb
from ringflow.errors import RingflowError

_log = logging.getLogger(__name__)

Handler = Callable[[str, int, bytes], None]
"""``handler(source endpoint, request id, payload)`` for one verb."""


class MessageDispatcher:
    """Decodes each source's byte stream and routes its envelopes (see the module docstring).
    ``handlers`` and ``extra_handlers`` are read at every message: later registrations count."""

    def __init__(
        self,
        on_gossip: Callable[[str, GossipMessage], None],
        handlers: Mapping[Verb, Handler],
        extra_handlers: Mapping[Verb, Handler],
    ) -> None:
        self._on_gossip = on_gossip
        self._handlers = handlers
        self._extra_handlers = extra_handlers
        self._decoders: dict[str, EnvelopeDecoder] = {}
        self.protocol_errors = 0

    def on_message(self, source: str, payload: bytes) -> None:
        """Bytes from ``source``: dispatch every complete envelope they finish."""
        decoder = self._decoders.setdefault(source, EnvelopeDecoder())
        try:
            decoder.feed(payload)
            while (envelope := decoder.next_envelope()) is not None:
                self.dispatch(envelope)
        except RingflowError as error:
            self.protocol_errors += 1
            self._decoders.pop(source, None)
            _log.warning("bad message from %s: %s", source, error)

    def dispatch(self, envelope: Envelope) -> None:
        verb, source = envelope.verb, envelope.from_endpoint
        if type(envelope.payload) in GOSSIP_VERBS:
            message = envelope.payload
            assert not isinstance(message, bytes)
            self._on_gossip(source, message)
            return
        payload = envelope.payload
        assert isinstance(payload, bytes)
        extra = self._extra_handlers.get(verb)
        if extra is not None:
            extra(source, envelope.request_id, payload)
            return
        handler = self._handlers.get(verb)
        if handler is None:
            _log.warning("unexpected verb %s from %s", verb.name, source)
            return
        handler(source, envelope.request_id, payload)
