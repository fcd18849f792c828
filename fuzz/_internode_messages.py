"""Internode bytes for the fuzzer: a valid envelope of every verb, spoofed hellos, mutations.

The wire (``ringflow.runtime`` and ``ringflow.cluster``): a connection opens with the hello
``encode_hello(src, dst)`` and carries network frames (4-byte length + payload); each payload is
an envelope frame (``encode_envelope``: 4-byte length + msgpack). Data verb payloads are the
msgpack arrays documented in ``ringflow/cluster/service/_codec.py`` and ``_streaming.py``,
built here from public names (``encode_mutation``, ``table_mutation``) so the fuzzer sends what
a peer would.

Forged writes all aim at ``fz.canary`` (and a forged schema at a keyspace ``fz_forged``), so the
probe can tell whether one was applied.
"""

from __future__ import annotations

import random
import struct

import msgpack

from fuzz._schema import CANARY, KEYSPACE
from ringflow.cluster import (
    ApplicationState,
    EchoRequest,
    EchoResponse,
    EndpointState,
    Envelope,
    GossipDigest,
    GossipDigestAck,
    GossipDigestAck2,
    GossipDigestSyn,
    HeartBeatState,
    Verb,
    VersionedValue,
    encode_envelope,
)
from ringflow.runtime import encode_frame, encode_hello
from ringflow.schema import Cell, LivenessInfo, Mutation, Row, system_table, table_mutation
from ringflow.storage import encode_mutation

CLUSTER_NAME = "ringflow"
PARTITIONER = "org.apache.cassandra.dht.Murmur3Partitioner"
FORGED_KEYSPACE = "fz_forged"
FORGED_TIMESTAMP_US = 1_700_000_000_000_000
"""Write time of forged mutations (November 2023): fixed, so a seed gives the same bytes, and
older than the clean-up after a failure (DROP, TRUNCATE), which must win."""
_HARMLESS_STATES = (
    ApplicationState.LOAD,
    ApplicationState.RELEASE_VERSION,
    ApplicationState.SEVERITY,
)


def canary_mutation(key: int, timestamp_us: int) -> Mutation:
    """A write of ``fz.canary`` row ``key``: a forged write the probe looks for."""
    row = Row(
        (), liveness=LivenessInfo(timestamp_us), cells={"v": Cell.live(timestamp_us, b"forged")}
    )
    return Mutation(KEYSPACE, CANARY, (key.to_bytes(4, "big", signed=True),), rows=(row,))


def forged_keyspace_mutation(timestamp_us: int) -> Mutation:
    """A ``system_schema.keyspaces`` row creating keyspace ``fz_forged``."""
    replication = {
        "class": "org.apache.cassandra.locator.SimpleStrategy",
        "replication_factor": "1",
    }
    return table_mutation(
        system_table("system_schema", "keyspaces"),
        [{"keyspace_name": FORGED_KEYSPACE, "durable_writes": True, "replication": replication}],
        timestamp_us,
    )


def _pack(value: object) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _mutations(rng: random.Random) -> list[bytes]:
    now_us = FORGED_TIMESTAMP_US + rng.randrange(1_000_000)
    choice = rng.randrange(4)
    if choice == 0:
        return [encode_mutation(canary_mutation(rng.randrange(1000), now_us))]
    if choice == 1:
        return [encode_mutation(forged_keyspace_mutation(now_us))]
    if choice == 2:  # a table nobody has
        row = Row((), liveness=LivenessInfo(now_us), cells={"v": Cell.live(now_us, b"x")})
        return [
            encode_mutation(
                Mutation(KEYSPACE, "no_such_table", (b"\x00\x00\x00\x01",), rows=(row,))
            )
        ]
    return [rng.randbytes(rng.randint(0, 40))]


def _state(rng: random.Random) -> EndpointState:
    states = {
        key: VersionedValue(rng.choice(("0", "1.5", "x" * rng.randint(0, 300))), rng.randint(0, 50))
        for key in rng.sample(_HARMLESS_STATES, rng.randint(0, len(_HARMLESS_STATES)))
    }
    return EndpointState(HeartBeatState(rng.randint(1, 2**31), rng.randint(0, 100)), states)


def _gossip(verb: Verb, rng: random.Random, fake: str) -> object:
    digest = GossipDigest(fake, rng.randint(0, 2**31), rng.randint(0, 1000))
    if verb is Verb.GOSSIP_DIGEST_SYN:
        name = CLUSTER_NAME if rng.random() < 0.8 else "other"
        return GossipDigestSyn(name, PARTITIONER, (digest,) * rng.randint(0, 3))
    if verb is Verb.GOSSIP_DIGEST_ACK:
        return GossipDigestAck((digest,), {fake: _state(rng)} if rng.random() < 0.5 else {})
    if verb is Verb.GOSSIP_DIGEST_ACK2:
        return GossipDigestAck2({fake: _state(rng)})
    if verb is Verb.ECHO_REQ:
        return EchoRequest(rng.randint(0, 2**40))
    return EchoResponse(rng.randint(0, 2**40))


def payload_of(verb: Verb, rng: random.Random, fake: str) -> bytes | object:
    """A well-formed payload of ``verb`` (a gossip message object for the gossip verbs)."""
    if verb in (Verb.GOSSIP_DIGEST_SYN, Verb.GOSSIP_DIGEST_ACK, Verb.GOSSIP_DIGEST_ACK2,
                Verb.ECHO_REQ, Verb.ECHO_RSP):  # fmt: skip
        return _gossip(verb, rng, fake)
    if verb in (Verb.MUTATION_REQ, Verb.HINT_REQ):
        return _pack([_mutations(rng), []])
    if verb in (Verb.SCHEMA_PUSH_REQ, Verb.SCHEMA_PULL_RSP):
        return _pack(_mutations(rng))
    if verb is Verb.READ_REQ:
        key = [rng.randrange(10).to_bytes(4, "big")]
        return _pack(
            [KEYSPACE, rng.choice((CANARY, "probe", "nope")), key, rng.choice(("data", "digest"))]
        )
    if verb is Verb.READ_RSP:
        return _pack(rng.choice((["data", None], ["digest", b"\x00" * 16], ["data", b"\x01\x02"])))
    if verb is Verb.RANGE_READ:
        if rng.random() < 0.5:
            return _pack(["req", KEYSPACE, CANARY, -(2**63), 2**63 - 1, 100])
        return _pack(["rsp", _mutations(rng), rng.random() < 0.5])
    if verb in (Verb.STREAM_REQ, Verb.STREAM_RSP):
        return _pack(
            rng.choice(
                (
                    ["push", KEYSPACE, CANARY, _mutations(rng)],
                    ["pull", KEYSPACE, CANARY, -(2**63), 2**63 - 1, None, 10],
                    ["page", None, _mutations(rng)],
                    ["restream", "00000000-0000-0000-0000-000000000000"],
                    ["ack"],
                )
            )
        )
    if verb is Verb.FAILURE_RSP:
        return (
            _pack(
                rng.choice(
                    (
                        [int(rng.choice(list(Verb))), "fuzz"],
                        [9999, "no such verb"],
                        ["10", 5],
                        [10],
                        "not a list",
                        None,
                    )
                )
            )
            if rng.random() < 0.8
            else rng.randbytes(rng.randint(0, 12))
        )
    if verb in (Verb.SCHEMA_PULL_REQ, Verb.SCHEMA_VERSION_REQ):
        return b""
    return rng.choice((b"", rng.randbytes(rng.randint(1, 16)), _pack([1, 2, 3])))


def envelope_frame(verb: Verb, rng: random.Random, source: str, fake: str) -> bytes:
    """The envelope frame (4-byte length + msgpack) of a valid ``verb`` message."""
    payload = payload_of(verb, rng, fake)
    request_id = rng.choice((0, 1, rng.randint(0, 2**63 - 1)))
    expires = rng.choice((0, 1, 2**63 - 1, FORGED_TIMESTAMP_US // 1000))
    envelope = Envelope(verb, request_id, source, payload, expires)  # type: ignore[arg-type]
    return encode_envelope(envelope)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """1-3 byte-level edits (flips, sets, truncation, insertion, length fields)."""
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if not buffer:
            buffer += rng.randbytes(4)
        position = rng.randrange(len(buffer))
        choice = rng.randrange(6)
        if choice == 0:
            buffer[position] ^= 1 << rng.randrange(8)
        elif choice == 1:
            buffer[position] = rng.choice((0, 0xFF, 0xC0, 0xC1, 0x90, 0xDD, rng.randrange(256)))
        elif choice == 2:
            del buffer[rng.randrange(1, len(buffer) + 1) :]
        elif choice == 3:
            buffer[position:position] = rng.randbytes(rng.randint(1, 16))
        elif choice == 4 and len(buffer) >= 4:
            value = rng.choice((0, 1, len(buffer), 2**24, 16_000_000, 2**31, 2**32 - 1))
            struct.pack_into(">I", buffer, 0, value)
        else:
            del buffer[position : position + rng.randint(1, 8)]
    return bytes(buffer)


def hello(src: str, dst: str) -> bytes:
    return encode_hello(src, dst)


def network_frame(payload: bytes) -> bytes:
    return encode_frame(payload)
