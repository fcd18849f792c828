"""The ring layer's error type."""

from __future__ import annotations

from ringflow.errors import ConfigurationError


class RingError(ConfigurationError):
    """Bad ring input: a token outside int64, a bad replication factor, bad sharding parameters."""
