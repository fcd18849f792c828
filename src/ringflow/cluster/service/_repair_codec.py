"""The REPAIR_REQ / REPAIR_RSP wire and the repair's summary (issue 17, cassandra-core.md §7.3).

Messages (msgpack arrays, first element the kind; failures travel as FAILURE_RSP
``[REPAIR_REQ, reason]``):

* ``["validate", keyspace, table, low, high, max depth]`` → ``["tree", depth, partitions,
  leaves]``: the replica's Merkle tree of ``(low, high]`` (``ringflow.cluster.MerkleTree``).
* ``["sync", keyspace, table, source endpoint, [[low, high], ...]]`` → ``["synced",
  partitions, bytes]``: the receiver pulls those ranges from the source and applies them with
  origin REPAIR.
* ``["pull", ...]`` → ``["page", ...]``: one page of raw partitions, the streaming codec's
  (``_streaming``), so repair moves exactly what bootstrap moves.
* ``["digests", keyspace, table, [[low, high], ...], max]`` → ``["listing", [[token, [key
  part, ...], digest], ...] | nil]``: the replica's partitions in those ranges with their
  validation digests (nil: more than ``max``, the coordinator then streams whole leaves).
* ``["sync_keys", keyspace, table, source endpoint, [[key part, ...], ...]]`` → ``["synced",
  ...]``: the receiver pulls those partitions (``["pull_keys", keyspace, table, keys]`` →
  ``["page", nil, [mutation bytes...]]``) and applies them with origin REPAIR.
* ``["run", options]`` → ``["result", summary]``: any node coordinates a whole repair (JSON).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass

import msgpack

from ringflow.cluster._merkle import MAX_TREE_DEPTH, MerkleTree
from ringflow.cluster._messages import InternodeProtocolError
from ringflow.cluster._repair_plan import RepairOptions, RepairSummary
from ringflow.cluster.service._codec import _int, _list, _unpack
from ringflow.cluster.service._streaming import Page, PullRequest, decode_stream_message


@dataclass(frozen=True, slots=True)
class ValidateRequest:
    keyspace: str
    table: str
    low: int
    high: int
    max_depth: int


@dataclass(frozen=True, slots=True)
class TreeAnswer:
    depth: int
    partitions: int
    leaves: bytes

    def tree(self, low: int, high: int) -> MerkleTree:
        return MerkleTree.from_bytes(low, high, self.depth, self.leaves, self.partitions)


@dataclass(frozen=True, slots=True)
class SyncRequest:
    keyspace: str
    table: str
    source: str
    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    partitions: int
    bytes: int


PartitionKey = tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class DigestsRequest:
    keyspace: str
    table: str
    ranges: tuple[tuple[int, int], ...]
    max_entries: int


@dataclass(frozen=True, slots=True)
class DigestsAnswer:
    entries: tuple[tuple[int, PartitionKey, bytes], ...] | None


@dataclass(frozen=True, slots=True)
class SyncKeysRequest:
    keyspace: str
    table: str
    source: str
    keys: tuple[PartitionKey, ...]


@dataclass(frozen=True, slots=True)
class PullKeysRequest:
    keyspace: str
    table: str
    keys: tuple[PartitionKey, ...]


@dataclass(frozen=True, slots=True)
class RunRequest:
    options: RepairOptions


@dataclass(frozen=True, slots=True)
class RunAnswer:
    summary: RepairSummary


RepairMessage = (
    ValidateRequest
    | TreeAnswer
    | SyncRequest
    | SyncAnswer
    | RunRequest
    | RunAnswer
    | DigestsRequest
    | DigestsAnswer
    | SyncKeysRequest
    | PullKeysRequest
    | PullRequest
    | Page
)


def _pack(body: list[object]) -> bytes:
    payload: bytes = msgpack.packb(body, use_bin_type=True)
    return payload


def encode_repair_message(message: RepairMessage) -> bytes:
    if isinstance(message, ValidateRequest):
        m = message
        return _pack(["validate", m.keyspace, m.table, m.low, m.high, m.max_depth])
    if isinstance(message, TreeAnswer):
        return _pack(["tree", message.depth, message.partitions, message.leaves])
    if isinstance(message, SyncRequest):
        ranges = [list(piece) for piece in message.ranges]
        return _pack(["sync", message.keyspace, message.table, message.source, ranges])
    if isinstance(message, SyncAnswer):
        return _pack(["synced", message.partitions, message.bytes])
    if isinstance(message, RunRequest):
        return _pack(["run", options_to_json(message.options)])
    if isinstance(message, DigestsRequest):
        m2 = message
        ranges = [list(piece) for piece in m2.ranges]
        return _pack(["digests", m2.keyspace, m2.table, ranges, m2.max_entries])
    if isinstance(message, DigestsAnswer):
        entries = message.entries
        body = None if entries is None else [[t, list(k), d] for t, k, d in entries]
        return _pack(["listing", body])
    if isinstance(message, SyncKeysRequest):
        keys = [list(key) for key in message.keys]
        return _pack(["sync_keys", message.keyspace, message.table, message.source, keys])
    if isinstance(message, PullKeysRequest):
        keys = [list(key) for key in message.keys]
        return _pack(["pull_keys", message.keyspace, message.table, keys])
    if isinstance(message, RunAnswer):
        return _pack(["result", message.summary.to_json()])
    raise InternodeProtocolError(f"repair: {type(message).__name__} is encoded by _streaming")


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InternodeProtocolError(f"repair {what}: expected text, got {value!r:.40}")
    return value


def _range(value: object) -> tuple[int, int]:
    low, high = _list(value, "repair range", 2)
    low, high = _int(low, "low"), _int(high, "high")
    if not -(2**63) <= low < high < 2**63:
        raise InternodeProtocolError(f"repair: bad range ({low}, {high}]")
    return low, high


def _key(value: object) -> PartitionKey:
    parts = _list(value, "repair partition key")
    if not parts or not all(isinstance(part, bytes) for part in parts):
        raise InternodeProtocolError(f"repair: bad partition key {value!r:.60}")
    return tuple(part for part in parts if isinstance(part, bytes))


def decode_repair_message(data: bytes) -> RepairMessage:
    value = _list(_unpack(data, "repair"), "repair")
    kind = value[0] if value else None
    if kind in ("pull", "page"):
        message = decode_stream_message(data)
        if not isinstance(message, PullRequest | Page):
            raise InternodeProtocolError("repair: bad pull")
        return message
    if kind == "validate":
        _, keyspace, table, low, high, depth = _list(value, "repair validate", 6)
        low, high = _range([low, high])
        depth = _int(depth, "depth")
        if not 0 <= depth <= MAX_TREE_DEPTH:
            raise InternodeProtocolError(f"repair validate: bad depth {depth}")
        return ValidateRequest(_text(keyspace, "keyspace"), _text(table, "table"), low, high, depth)
    if kind == "tree":
        _, depth, partitions, leaves = _list(value, "repair tree", 4)
        if not isinstance(leaves, bytes):
            raise InternodeProtocolError("repair tree: leaves must be bytes")
        return TreeAnswer(_int(depth, "depth"), _int(partitions, "partitions"), leaves)
    if kind == "sync":
        _, keyspace, table, source, ranges = _list(value, "repair sync", 5)
        pieces = tuple(_range(piece) for piece in _list(ranges, "repair sync ranges"))
        names = _text(keyspace, "keyspace"), _text(table, "table")
        return SyncRequest(*names, _text(source, "source"), pieces)
    if kind == "synced":
        _, partitions, size = _list(value, "repair synced", 3)
        return SyncAnswer(_int(partitions, "partitions"), _int(size, "bytes"))
    if kind == "digests":
        _, keyspace, table, ranges, most = _list(value, "repair digests", 5)
        pieces = tuple(_range(piece) for piece in _list(ranges, "repair digests ranges"))
        names = _text(keyspace, "keyspace"), _text(table, "table")
        return DigestsRequest(*names, pieces, _int(most, "max"))
    if kind == "listing":
        _, body = _list(value, "repair listing", 2)
        if body is None:
            return DigestsAnswer(None)
        entries = []
        for item in _list(body, "repair listing"):
            token, key, digest = _list(item, "repair listing entry", 3)
            if not isinstance(digest, bytes):
                raise InternodeProtocolError("repair listing: digest must be bytes")
            entries.append((_int(token, "token"), _key(key), digest))
        return DigestsAnswer(tuple(entries))
    if kind == "sync_keys":
        _, keyspace, table, source, keys = _list(value, "repair sync_keys", 5)
        names = _text(keyspace, "keyspace"), _text(table, "table")
        parsed = tuple(_key(key) for key in _list(keys, "repair keys"))
        return SyncKeysRequest(*names, _text(source, "source"), parsed)
    if kind == "pull_keys":
        _, keyspace, table, keys = _list(value, "repair pull_keys", 4)
        names = _text(keyspace, "keyspace"), _text(table, "table")
        return PullKeysRequest(*names, tuple(_key(key) for key in _list(keys, "repair keys")))
    if kind == "run":
        _, text = _list(value, "repair run", 2)
        return RunRequest(options_from_json(_text(text, "options")))
    if kind == "result":
        _, text = _list(value, "repair result", 2)
        try:
            return RunAnswer(RepairSummary.from_json(_text(text, "summary")))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InternodeProtocolError(f"repair result: {error}") from None
    raise InternodeProtocolError(f"repair: unknown message {value!r:.80}")


def options_to_json(options: RepairOptions) -> str:
    fields = dataclasses.asdict(options)
    fields["id"] = str(options.id)
    fields["tables"] = list(options.tables)
    return json.dumps(fields, sort_keys=True)


def options_from_json(text: str) -> RepairOptions:
    """RepairOptions from JSON (``InvalidRequest`` from the options' own checks)."""
    try:
        fields = json.loads(text)
        return RepairOptions(
            keyspace=str(fields["keyspace"]),
            tables=tuple(str(t) for t in fields.get("tables") or ()),
            primary_range=bool(fields.get("primary_range", False)),
            start_token=fields.get("start_token"),
            end_token=fields.get("end_token"),
            preview=bool(fields.get("preview", False)),
            id=uuid.UUID(str(fields["id"])) if fields.get("id") else uuid.uuid1(),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise InternodeProtocolError(f"repair options: {error}") from None
