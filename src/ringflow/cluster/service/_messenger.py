"""Sending internode messages from one node: an envelope to an endpoint, a failure answer.

``Messenger`` wraps the node's ``Network`` with its own endpoint as the sender. A message that
cannot be sent (backpressure, a frame too large, no connection) is reported as ``False`` and
logged at debug level: the coordinator's timeouts, hints and retries deal with lost
messages, as they deal with messages the network drops.
"""

from __future__ import annotations

import logging

from ringflow.cluster._messages import Envelope, Verb, encode_envelope
from ringflow.cluster.service._codec import encode_failure
from ringflow.errors import RingflowError
from ringflow.runtime import Network

_log = logging.getLogger(__name__)


class Messenger:
    """Sends as ``endpoint`` over ``network`` (module docstring). No ``__slots__``: a test
    may stand in for ``send`` on one node (a message lost, an action after a given answer)."""

    def __init__(self, endpoint: str, network: Network) -> None:
        self.endpoint = endpoint
        self.network = network

    def send(self, to: str, verb: Verb, request_id: int, payload: bytes) -> bool:
        """Send one envelope to endpoint ``to``; False when it could not be sent."""
        return self.send_envelope(to, Envelope(verb, request_id, self.endpoint, payload, 0))

    def send_envelope(self, to: str, envelope: Envelope) -> bool:
        try:
            self.network.send(self.endpoint, to, encode_envelope(envelope))
        except RingflowError as error:  # Backpressure, FrameTooLarge, NetworkError
            _log.debug("send %s to %s failed: %s", envelope.verb.name, to, error)
            return False
        return True

    def fail(self, to: str, request_id: int, verb: Verb, reason: str) -> None:
        """Answer request ``request_id`` of ``verb`` from ``to`` with FAILURE_RSP."""
        self.send(to, Verb.FAILURE_RSP, request_id, encode_failure(verb, reason))
