"""Hypothesis strategies for gossip values, messages and envelopes."""

from __future__ import annotations

from hypothesis import strategies as st

from ringflow.cluster import (
    GOSSIP_VERBS,
    ApplicationState,
    EchoRequest,
    EchoResponse,
    EndpointState,
    Envelope,
    GossipDigest,
    GossipDigestAck,
    GossipDigestAck2,
    GossipDigestSyn,
    GossipMessage,
    HeartBeatState,
    Verb,
    VersionedValue,
)

counts = st.integers(0, 2**63 - 1)
small_counts = st.integers(0, 2**31 - 1)
endpoints = st.from_regex(r"10\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}", fullmatch=True) | st.text(
    min_size=1, max_size=12
)

heartbeats = st.builds(HeartBeatState, small_counts, counts)
versioned_values = st.builds(VersionedValue, st.text(max_size=40), counts)
endpoint_states = st.builds(
    EndpointState,
    heartbeats,
    st.dictionaries(st.sampled_from(list(ApplicationState)), versioned_values, max_size=6),
)
digests = st.builds(GossipDigest, endpoints, small_counts, counts)
digest_tuples = st.lists(digests, max_size=6).map(tuple)
state_maps = st.dictionaries(endpoints, endpoint_states, max_size=4)

gossip_messages: st.SearchStrategy[GossipMessage] = st.one_of(
    st.builds(GossipDigestSyn, st.text(max_size=20), st.text(max_size=40), digest_tuples),
    st.builds(GossipDigestAck, digest_tuples, state_maps),
    st.builds(GossipDigestAck2, state_maps),
    st.builds(EchoRequest, counts),
    st.builds(EchoResponse, counts),
)

_BYTES_VERBS = [verb for verb in Verb if verb not in GOSSIP_VERBS.values()]

gossip_envelopes = st.builds(Envelope.of_gossip, gossip_messages, counts, endpoints, counts)
bytes_envelopes = st.builds(
    Envelope, st.sampled_from(_BYTES_VERBS), counts, endpoints, st.binary(max_size=200), counts
)
envelopes = gossip_envelopes | bytes_envelopes
