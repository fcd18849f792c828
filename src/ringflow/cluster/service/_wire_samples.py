"""Valid internode messages of every verb, for tests and fuzzers (issue 16).

Owns ``sample_envelopes`` (one or more well-formed envelopes of each ``Verb``, their payloads
made by the real encoders, so a fuzzer mutates what a node really sends) and
``encode_internode_message`` (the bytes one message takes on a connection after the hello,
``runtime.encode_hello``). Nothing here is used by a node: it is the public seam that lets a
test speak the protocol without reaching into private modules.
"""

from __future__ import annotations

from collections.abc import Mapping

from ringflow.cluster._gossip import MURMUR3_PARTITIONER
from ringflow.cluster._gossip_state import (
    ApplicationState,
    EchoRequest,
    EchoResponse,
    EndpointState,
    GossipDigest,
    GossipDigestAck,
    GossipDigestAck2,
    GossipDigestSyn,
    HeartBeatState,
    VersionedValue,
)
from ringflow.cluster._messages import Envelope, Verb, encode_envelope
from ringflow.cluster._read_path import ReadKind
from ringflow.cluster._write_path import WriteUnit
from ringflow.cluster.service import _codec
from ringflow.cluster.service._repair_codec import (
    DigestsAnswer,
    DigestsRequest,
    PullKeysRequest,
    SyncAnswer,
    SyncRequest,
    ValidateRequest,
    encode_repair_message,
)
from ringflow.cluster.service._streaming import (
    Page,
    PullRequest,
    PushRequest,
    encode_page,
    encode_pull,
    encode_push,
)
from ringflow.errors import invariant
from ringflow.runtime import encode_frame
from ringflow.schema import Mutation

_MIN_TOKEN = -(2**63)


def encode_internode_message(envelope: Envelope) -> bytes:
    """One message as it travels after the hello: the network frame around the envelope."""
    return encode_frame(encode_envelope(envelope))


def _own_state(now_ms: int) -> EndpointState:
    """A harmless endpoint state: a heartbeat and a DC/rack, no STATUS (no ring role)."""
    values = {
        ApplicationState.DC: VersionedValue("datacenter1", 1),
        ApplicationState.RACK: VersionedValue("rack1", 2),
    }
    return EndpointState(HeartBeatState(now_ms // 1000, 2), values)


def sample_envelopes(
    source: str, mutation: Mutation, *, cluster_name: str, now_ms: int, request_id: int = 7
) -> Mapping[Verb, tuple[Envelope, ...]]:
    """Well-formed envelopes of every verb from ``source``; the data verbs carry ``mutation``
    (its table is the one reads and streams name)."""
    state = _own_state(now_ms)
    digest = GossipDigest(source, state.heartbeat.generation, state.max_version)
    keyspace, table, key = mutation.keyspace, mutation.table, mutation.partition_key
    unit = _codec.encode_unit(WriteUnit((mutation,)))
    read = _codec.ReadCommand(keyspace, table, key, ReadKind.DATA)
    range_read = _codec.RangeCommand(keyspace, table, _MIN_TOKEN, 0, 10)
    range_answer = _codec.RangeAnswer((mutation,), False)
    payloads: dict[Verb, tuple[bytes, ...]] = {
        Verb.MUTATION_REQ: (unit,),
        Verb.MUTATION_RSP: (b"",),
        Verb.READ_REQ: (_codec.encode_read(read),),
        Verb.READ_RSP: (
            _codec.encode_read_response(ReadKind.DATA, mutation, b""),
            _codec.encode_read_response(ReadKind.DIGEST, None, bytes(16)),
        ),
        Verb.HINT_REQ: (unit,),
        Verb.HINT_RSP: (b"",),
        Verb.SCHEMA_PUSH_REQ: (_codec.encode_mutations_payload([mutation]),),
        Verb.SCHEMA_PUSH_RSP: (b"",),
        Verb.SCHEMA_PULL_REQ: (b"",),
        Verb.SCHEMA_PULL_RSP: (_codec.encode_mutations_payload([mutation]),),
        Verb.SCHEMA_VERSION_REQ: (b"",),
        Verb.SCHEMA_VERSION_RSP: (b"",),
        Verb.STREAM_REQ: (
            encode_pull(PullRequest(keyspace, table, _MIN_TOKEN, 0, None, 10)),
            encode_push(PushRequest(keyspace, table, (mutation,))),
        ),
        Verb.STREAM_RSP: (encode_page(Page(None, (mutation,))),),
        Verb.RANGE_READ: (
            _codec.encode_range_read(range_read),
            _codec.encode_range_answer(range_answer, 1 << 20),
        ),
        Verb.FAILURE_RSP: (_codec.encode_failure(Verb.READ_REQ, "sample"),),
        Verb.REPAIR_REQ: (
            encode_repair_message(ValidateRequest(keyspace, table, _MIN_TOKEN, 0, 4)),
            encode_repair_message(SyncRequest(keyspace, table, source, ((_MIN_TOKEN, 0),))),
            encode_repair_message(DigestsRequest(keyspace, table, ((_MIN_TOKEN, 0),), 10)),
            encode_repair_message(PullKeysRequest(keyspace, table, (key,))),
        ),
        Verb.REPAIR_RSP: (
            encode_repair_message(SyncAnswer(1, 10)),
            encode_repair_message(DigestsAnswer(((1, key, bytes(16)),))),
        ),
    }
    envelopes: dict[Verb, tuple[Envelope, ...]] = {
        verb: tuple(Envelope(verb, request_id, source, p, 0) for p in bodies)
        for verb, bodies in payloads.items()
    }
    gossip = (
        GossipDigestSyn(cluster_name, MURMUR3_PARTITIONER, (digest,)),
        GossipDigestAck((digest,), {source: state}),
        GossipDigestAck2({source: state}),
        EchoRequest(request_id),
        EchoResponse(request_id),
    )
    for message in gossip:
        envelope = Envelope.of_gossip(message, request_id, source, 0)
        envelopes[envelope.verb] = (envelope,)
    missing = sorted(verb.name for verb in set(Verb) - set(envelopes))
    invariant(not missing, f"no sample envelope for {missing}: a new verb needs one here")
    return envelopes
