"""The CDC layer's exceptions: bad arguments, rejected writes, unusable description rows.

STYLE.md "Errors": each class says who is at fault and carries its CQL error code through the
root hierarchy of ``ringflow.errors``. Write rejections follow ``shared/reference/scylla-cdc.md``
§4 (``cdc::metadata::get_vnode_stream``): one class per rule, so callers and tests can tell them
apart without parsing messages.

Scylla raises ``std::runtime_error`` (surfacing as ServerError 0x0000) for "no generation yet"
and "generation known but not loaded"; ringflow maps every rejection to Invalid (0x2200), since
an exception reaching the wire as 0x0000 is counted as a bug here (``ringflow.errors``).
"""

from __future__ import annotations

from ringflow.errors import ClientError, ErrorCode, InvalidRequest, PeerError


class CdcArgumentError(ClientError):
    """A caller passed the CDC layer a value that breaks one of its rules (CQL 0x2200)."""


class InvalidStreamId(CdcArgumentError):
    """Bytes that are not a CDC stream id: wrong length or an unknown version."""


class InvalidGenerationId(CdcArgumentError):
    """A gossiped CDC generation id string that is neither ``<ms>`` nor ``v2;<ms>;<uuid>``."""


class InvalidTopologyDescription(CdcArgumentError):
    """Entries or ring tokens that cannot form a topology description."""


class InvalidDescriptionRows(CdcArgumentError):
    """Description-table rows that do not describe one whole, consistent generation."""


class CdcWriteRejected(InvalidRequest):
    """A write to a CDC-enabled table whose timestamp cannot be given a stream (§4)."""

    def __init__(self, message: str, *, write_timestamp_us: int, now_us: int) -> None:
        super().__init__(message)
        self.write_timestamp_us = write_timestamp_us
        self.now_us = now_us


class WriteFromTheFuture(CdcWriteRejected):
    """Rule 1: the write timestamp is later than now + leeway."""


class WriteTooFarInThePast(CdcWriteRejected):
    """Rule 3: the timestamp is at or before now - leeway and not in the generation current now."""


class NoGenerationForTimestamp(CdcWriteRejected):
    """Rule 4: no generation is known that operates at the write timestamp."""


class GenerationNotLoaded(CdcWriteRejected):
    """Rule 6: the operating generation is known (prepared) but its description is not loaded."""

    def __init__(
        self, message: str, *, write_timestamp_us: int, now_us: int, generation_timestamp_us: int
    ) -> None:
        super().__init__(message, write_timestamp_us=write_timestamp_us, now_us=now_us)
        self.generation_timestamp_us = generation_timestamp_us


class GenerationsNotLearnt(PeerError):
    """The node started and has not yet heard the cluster's CDC generations from a live peer: a
    generation that began while it was down may be unknown to it, and a stream picked now could
    belong to the wrong one. CQL 0x1002 (Is_bootstrapping: the node is not ready to coordinate;
    the drivers retry the statement on the next host)."""

    code = ErrorCode.IS_BOOTSTRAPPING
