"""Offsets of the ``ringflow-replica`` source, and the errors of replica-side transmission.

Pure code: no Spark, no driver. An offset names exactly the copies one micro-batch of one
channel covers (REPLICATION.md decision 6: "offsets say exactly which slices a batch covers, so a
replay reads the same slices"), checkpointed by Spark as JSON:

    {"channel": "hub", "seq": 7, "copies": [[node, keyspace, table, range_start, range_end,
      slice_start_ms, out_of_sequence, digest_hex, row_count], ...]}

``seq`` grows by at least one per batch the job's coordinator hands out for the channel (a new
job continues above the checkpoint's last ``seq``), so two offsets of one channel are equal only
when they are the same batch; ``seq`` 0 with no copies is the initial offset. A batch from
offset ``a`` to offset ``b`` reads ``b``'s copies (``a`` only says where the previous batch
ended). Copies are stored as compact lists in the order the permit broker granted them.

A copy is identified by its slice key and digest: two nodes that publish the same digest for a
key hold the same rows (128-bit digest over the sorted row digests and the count), so a replay
may read a copy from any live holder of that digest and still deliver exactly the same rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ringflow.errors import InternalError, PeerError
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.replication import (
    SLICE_DIGEST_SIZE,
    PlannedSend,
    ReplicationArgumentError,
    SliceKey,
)

COPY_FIELDS: Final = 9
MAX_COPIES_PER_OFFSET: Final = 100_000
_INT64_MAX: Final = 2**63 - 1


class ReplicaReadError(PeerError):
    """A node could not give a copy exactly as it published it (down, dropped it, or rows that
    do not add up to its digest and count): the batch fails rather than deliver fewer rows."""


class CoordinatorError(InternalError):
    """The job's coordinator refused or failed a request of a ``ringflow-replica`` source."""


class ReplicaOffsetError(PipelineConfigError):
    """A checkpointed offset that is not a ``ringflow-replica`` offset of this channel (e.g. a
    checkpoint directory reused for another channel or another source)."""


def copy_to_list(send: PlannedSend) -> list[object]:
    """One copy in its compact JSON form (module docstring)."""
    key = send.key
    return [
        str(send.node),
        key.keyspace,
        key.table,
        key.range_start,
        key.range_end,
        key.slice_start_ms,
        key.out_of_sequence,
        send.digest.hex(),
        send.row_count,
    ]


def _int(value: object, what: str) -> int:
    if type(value) is not int or not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise ReplicaOffsetError(f"offset copy: {what} must be an int64, got {value!r}")
    return value


def copy_from_list(channel: str, item: object) -> PlannedSend:
    """A copy of ``channel`` from its compact form; ReplicaOffsetError naming what is wrong."""
    if not isinstance(item, list) or len(item) != COPY_FIELDS:
        raise ReplicaOffsetError(f"offset copy must be a list of {COPY_FIELDS} values: {item!r}")
    node, keyspace, table, start, end, slice_start, oos, digest, rows = item
    if not isinstance(node, str) or not isinstance(digest, str) or type(oos) is not bool:
        raise ReplicaOffsetError(f"offset copy has a bad node, digest or flag: {item!r}")
    if not isinstance(keyspace, str) or not isinstance(table, str):
        raise ReplicaOffsetError(f"offset copy has a bad keyspace or table: {item!r}")
    try:
        key = SliceKey(
            keyspace,
            table,
            _int(start, "range_start"),
            _int(end, "range_end"),
            _int(slice_start, "slice_start_ms"),
            oos,
        )
        raw = bytes.fromhex(digest)
        if len(raw) != SLICE_DIGEST_SIZE:
            raise ValueError(f"a digest is {SLICE_DIGEST_SIZE} bytes")
        return PlannedSend(channel, key, uuid.UUID(node), raw, _int(rows, "row_count"))
    except (ValueError, ReplicationArgumentError) as error:
        raise ReplicaOffsetError(f"offset copy {item!r}: {error}") from None


@dataclass(frozen=True, slots=True)
class ReplicaOffset:
    """The copies of one batch of one channel (module docstring)."""

    channel: str
    seq: int
    copies: tuple[PlannedSend, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.channel, str) or not self.channel:
            raise ReplicaOffsetError(f"an offset names its channel, got {self.channel!r}")
        if type(self.seq) is not int or not 0 <= self.seq <= _INT64_MAX:
            raise ReplicaOffsetError(f"offset seq must be an int64 >= 0, got {self.seq!r}")
        if len(self.copies) > MAX_COPIES_PER_OFFSET:
            raise ReplicaOffsetError(
                f"an offset holds at most {MAX_COPIES_PER_OFFSET} copies, got {len(self.copies)}"
            )
        for send in self.copies:
            if not isinstance(send, PlannedSend) or send.channel != self.channel:
                raise ReplicaOffsetError(f"offset of {self.channel!r} holds {send!r}")
        if self.seq == 0 and self.copies:
            raise ReplicaOffsetError("the initial offset (seq 0) holds no copies")

    @classmethod
    def initial(cls, channel: str) -> ReplicaOffset:
        return cls(channel, 0, ())

    def to_dict(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "seq": self.seq,
            "copies": [copy_to_list(send) for send in self.copies],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], channel: str | None = None) -> ReplicaOffset:
        """The offset in ``data``; ReplicaOffsetError when it is not one, or not ``channel``'s."""
        if not isinstance(data, Mapping) or set(data) != {"channel", "seq", "copies"}:
            raise ReplicaOffsetError(f"not a ringflow-replica offset: {str(data)[:200]}")
        name, copies = data["channel"], data["copies"]
        if not isinstance(name, str) or not isinstance(copies, list):
            raise ReplicaOffsetError(f"not a ringflow-replica offset: {str(data)[:200]}")
        if channel is not None and name != channel:
            raise ReplicaOffsetError(
                f"the checkpoint holds offsets of channel {name!r}, not {channel!r}: "
                "each channel needs its own checkpoint directory"
            )
        return cls(name, data["seq"], tuple(copy_from_list(name, item) for item in copies))

    @property
    def rows(self) -> int:
        """Rows the batch hands to the sink: the copies' row counts."""
        return sum(send.row_count for send in self.copies)


def copies_by_node(
    copies: Sequence[PlannedSend], read_nodes: Sequence[str]
) -> dict[str, list[PlannedSend]]:
    """The copies grouped by the address each is read from (one input partition per node), in
    offset order; ``read_nodes`` is parallel to ``copies``."""
    if len(copies) != len(read_nodes):
        raise CoordinatorError(f"{len(read_nodes)} read nodes for {len(copies)} copies")
    groups: dict[str, list[PlannedSend]] = {}
    for send, address in zip(copies, read_nodes, strict=True):
        groups.setdefault(address, []).append(send)
    return groups
