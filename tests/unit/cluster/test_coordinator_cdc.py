"""The coordinator facade and its CDC step (ARCHITECTURE.md "A write, end to end"; seed 000
"Vnode-colocation"; scylla-cdc.md §4, §5 ``cdc$time``; cassandra-core.md §5.2).

Proves: the capture's stream is ``CdcMetadata.get_stream`` of the base token and its low bits
come from the injected RNG; the metadata's rejections reach the caller as typed
``CdcWriteRejected`` errors (CQL Invalid); for random rings, strategies and shardings, streams of
a generation built by the real generator (``generate_topology_description``) are colocated with
their base partitions: identical replica lists, on the current ring and, for a generation made
for a joining node, on the ring after the join too; a generation that does not refine the ring
trips the invariant. The facade allocates increasing request ids, arms the timeouts, routes
typed events, drops finished requests, ignores late events, refuses more than its limit of
requests with ``Overloaded`` (0x1001), and hands every replica (or its hint) base mutation and
CDC capture as one unit; ``validate()`` holds after every step.
"""

from __future__ import annotations

import random
import struct
import uuid

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ringflow.cdc import (
    CdcMetadata,
    CdcWriteRejected,
    NoGenerationForTimestamp,
    StreamId,
    WriteFromTheFuture,
    generate_topology_description,
)
from ringflow.cluster import ConsistencyLevel
from ringflow.cluster._coordinator import (
    ArmTimeout,
    Coordinator,
    DataReceived,
    DigestReceived,
    HintStored,
    MutationAcked,
    Overloaded,
    RepairAcked,
    RequestTimedOut,
    base_token,
    check_cdc_colocation,
    log_token,
    prepare_cdc_write,
)
from ringflow.cluster._digest import partition_digest
from ringflow.cluster._read_path import Respond, SendRead
from ringflow.cluster._write_path import (
    Complete,
    SendMutation,
    StoreHint,
    TokenReplicas,
    WriteUnit,
)
from ringflow.errors import ErrorCode, InternalError, InvalidRequest
from ringflow.ring import (
    MAX_TOKEN,
    MIN_TOKEN,
    Host,
    NetworkTopologyStrategy,
    ReplicationFactor,
    ReplicationStrategy,
    SimpleStrategy,
    TokenMetadata,
)
from ringflow.schema import INT, CdcOptions, Cell, Mutation, Row, Table, TableOptions

CL = ConsistencyLevel
_NAMESPACE = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
GENERATION_MS = 1_700_000_000_000
NOW_US = GENERATION_MS * 1000 + 1_000_000
TABLE = Table.create(
    "ks",
    "t",
    [("pk", INT)],
    regular=[("v", INT)],
    options=TableOptions(cdc=CdcOptions(enabled=True)),
)


def host(dc: str, index: int) -> Host:
    endpoint = f"10.{int(dc[2:])}.0.{index}"
    return Host(uuid.uuid5(_NAMESPACE, endpoint), endpoint, dc, f"r{index % 3}")


def base_write(key: int, value: int = 1, ts: int = NOW_US) -> Mutation:
    cells = {"v": Cell.live(ts, struct.pack(">i", value))}
    return Mutation("ks", "t", (struct.pack(">i", key),), rows=(Row((), cells=cells),))


def metadata_for(ring: TokenMetadata, shards: int = 2, seed: int = 1) -> CdcMetadata:
    description = generate_topology_description(
        ring.sorted_tokens, lambda token: (shards, 12), random.Random(seed)
    )
    metadata = CdcMetadata()
    metadata.insert(GENERATION_MS, description, NOW_US)
    return metadata


def three_node_ring() -> tuple[TokenMetadata, list[Host]]:
    hosts = [host("dc1", i) for i in (1, 2, 3)]
    tokens = {
        h: [MIN_TOKEN // 3 * (2 - i) + 17 * i, 5 * 10**17 * i + 3] for i, h in enumerate(hosts)
    }
    return TokenMetadata(tokens), hosts


# -- the CDC step -------------------------------------------------------------------------------


def test_the_capture_uses_the_stream_of_the_base_token_and_the_rngs_bits() -> None:
    ring, _ = three_node_ring()
    metadata = metadata_for(ring)
    mutation = base_write(42)
    capture = prepare_cdc_write(
        mutation,
        TABLE,
        NOW_US,
        NOW_US,
        metadata,
        random.Random(9),
        token_metadata=ring,
        strategy=SimpleStrategy(ReplicationFactor(2)),
    )
    expected = metadata.get_stream(NOW_US, base_token(mutation), NOW_US)
    assert capture.stream_id == expected.to_bytes()
    assert capture.timeuuid_low_bits == random.Random(9).getrandbits(64)


@pytest.mark.parametrize(
    ("write_us", "error"),
    [
        (NOW_US + 5_000_001, WriteFromTheFuture),
        (GENERATION_MS * 1000 - 10_000_000, CdcWriteRejected),
    ],
)
def test_rejections_propagate_as_typed_errors(write_us: int, error: type[Exception]) -> None:
    ring, _ = three_node_ring()
    with pytest.raises(error) as raised:
        prepare_cdc_write(
            base_write(1), TABLE, write_us, NOW_US, metadata_for(ring), random.Random()
        )
    assert isinstance(raised.value, CdcWriteRejected)
    assert raised.value.code == ErrorCode.INVALID


def test_no_generation_yet_is_rejected() -> None:
    with pytest.raises(NoGenerationForTimestamp):
        prepare_cdc_write(base_write(1), TABLE, NOW_US, NOW_US, CdcMetadata(), random.Random())


def test_the_cdc_step_checks_its_arguments() -> None:
    ring, _ = three_node_ring()
    metadata = metadata_for(ring)
    plain = Table.create("ks", "t", [("pk", INT)], regular=[("v", INT)])
    with pytest.raises(InvalidRequest):
        prepare_cdc_write(base_write(1), plain, NOW_US, NOW_US, metadata, random.Random())
    other = Mutation("ks", "u", (b"\x00\x00\x00\x01",))
    with pytest.raises(InvalidRequest):
        prepare_cdc_write(other, TABLE, NOW_US, NOW_US, metadata, random.Random())
    with pytest.raises(InvalidRequest):
        prepare_cdc_write(
            base_write(1), TABLE, NOW_US, NOW_US, metadata, random.Random(), token_metadata=ring
        )


def test_a_generation_that_does_not_refine_the_ring_trips_the_invariant() -> None:
    """A generation made for a one-token ring, used after a second node joined without one."""
    first, second = host("dc1", 1), host("dc1", 2)
    old_ring = TokenMetadata({first: [-1000]})
    new_ring = TokenMetadata({first: [-1000], second: [1000]})
    metadata = metadata_for(old_ring, shards=1)
    strategy = SimpleStrategy(ReplicationFactor(1))
    key = next(k for k in range(10_000) if not -1000 < base_token(base_write(k)) <= 1000)
    stream = metadata.get_stream(NOW_US, base_token(base_write(key)), NOW_US)
    log_owner = new_ring.primary_owner(log_token(stream))
    assert new_ring.primary_owner(base_token(base_write(key))) == first != log_owner
    with pytest.raises(InternalError, match="not colocated"):
        prepare_cdc_write(
            base_write(key),
            TABLE,
            NOW_US,
            NOW_US,
            metadata,
            random.Random(),
            token_metadata=new_ring,
            strategy=strategy,
        )


@st.composite
def rings(draw: st.DrawFn) -> tuple[TokenMetadata, ReplicationStrategy, dict[Host, int]]:
    dcs = draw(st.sampled_from([["dc1"], ["dc1", "dc2"]]))
    count = draw(st.integers(1, 6))
    hosts = [
        Host(uuid.UUID(int=i + 1), f"10.0.0.{i}", dcs[i % len(dcs)], f"r{draw(st.integers(0, 2))}")
        for i in range(count)
    ]
    tokens = draw(
        st.lists(
            st.integers(MIN_TOKEN + 1, MAX_TOKEN),
            min_size=count * 4,
            max_size=count * 4,
            unique=True,
        )
    )
    vnodes = draw(st.integers(1, 4))
    assignment = {h: tokens[i * 4 : i * 4 + vnodes] for i, h in enumerate(hosts)}
    if draw(st.booleans()):
        strategy: ReplicationStrategy = SimpleStrategy(ReplicationFactor(draw(st.integers(1, 3))))
    else:
        strategy = NetworkTopologyStrategy.of({dc: draw(st.integers(1, 3)) for dc in dcs})
    shards = {h: draw(st.integers(1, 4)) for h in hosts}
    return TokenMetadata(assignment), strategy, shards


def _description_for(
    ring: TokenMetadata, shards: dict[Host, int], seed: int, joining: tuple[Host, list[int]] | None
) -> CdcMetadata:
    owners = dict(zip(ring.sorted_tokens, ring.owner_hosts, strict=True))
    extra: list[int] = []
    if joining is not None:
        owners.update(dict.fromkeys(joining[1], joining[0]))
        extra = joining[1]
    description = generate_topology_description(
        ring.sorted_tokens,
        lambda token: (shards.get(owners[token], 1), 12),
        random.Random(seed),
        bootstrap_tokens=extra,
    )
    metadata = CdcMetadata()
    metadata.insert(GENERATION_MS, description, NOW_US)
    return metadata


@settings(max_examples=60, deadline=None)
@given(
    rings(),
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=8),
    st.integers(0, 2**32),
)
def test_log_partitions_have_the_base_partitions_replicas(
    ring_case: tuple[TokenMetadata, ReplicationStrategy, dict[Host, int]],
    keys: list[int],
    seed: int,
) -> None:
    ring, strategy, shards = ring_case
    metadata = _description_for(ring, shards, seed, None)
    for key in keys:
        mutation = base_write(key)
        capture = prepare_cdc_write(
            mutation,
            TABLE,
            NOW_US,
            NOW_US,
            metadata,
            random.Random(seed),
            token_metadata=ring,
            strategy=strategy,
        )
        stream = StreamId.from_bytes(capture.stream_id)
        base = strategy.replicas(base_token(mutation), ring)
        assert strategy.replicas(log_token(stream), ring) == base


@settings(max_examples=40, deadline=None)
@given(
    rings(),
    st.lists(st.integers(MIN_TOKEN + 1, MAX_TOKEN), min_size=1, max_size=4, unique=True),
    st.integers(0, 2**32),
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=6),
)
def test_a_generation_for_a_joining_node_is_colocated_before_and_after_the_join(
    ring_case: tuple[TokenMetadata, ReplicationStrategy, dict[Host, int]],
    joining_tokens: list[int],
    seed: int,
    keys: list[int],
) -> None:
    ring, strategy, shards = ring_case
    assume(not set(joining_tokens) & set(ring.sorted_tokens))
    newcomer = Host(uuid.UUID(int=999), "10.0.1.1", ring.hosts[0].dc, "r9")
    metadata = _description_for(ring, shards, seed, (newcomer, joining_tokens))
    joined = ring.with_tokens(newcomer, joining_tokens)
    for key in keys:
        token = base_token(base_write(key))
        stream = metadata.get_stream(NOW_US, token, NOW_US)
        check_cdc_colocation(token, stream, ring, strategy)
        check_cdc_colocation(token, stream, joined, strategy)


# -- the facade ---------------------------------------------------------------------------------


def _replicas(count: int = 3) -> TokenReplicas:
    hosts = tuple(host("dc1", i) for i in range(1, count + 1))
    return TokenReplicas(0, hosts, SimpleStrategy(ReplicationFactor(count)), "dc1")


def test_a_cdc_write_end_to_end_sends_one_unit_per_replica_and_hints_the_same_unit() -> None:
    ring, hosts = three_node_ring()
    strategy = SimpleStrategy(ReplicationFactor(3))
    mutation = base_write(7)
    capture = prepare_cdc_write(
        mutation,
        TABLE,
        NOW_US,
        NOW_US,
        metadata_for(ring),
        random.Random(1),
        token_metadata=ring,
        strategy=strategy,
    )
    unit = WriteUnit.of([mutation], {0: capture})
    replicas = TokenReplicas.of(base_token(mutation), ring, strategy, "dc1")
    coordinator = Coordinator(hosts[0])
    dead = replicas.natural[2]
    request_id, actions = coordinator.begin_write(unit, replicas, CL.QUORUM, lambda h: h != dead, 0)
    coordinator.validate()
    assert request_id == 1
    assert [a.replica for a in actions if isinstance(a, SendMutation)] == list(replicas.natural[:2])
    [hint] = [a for a in actions if isinstance(a, StoreHint)]
    assert hint.target == dead and hint.unit == unit and hint.unit.captures == {0: capture}
    assert ArmTimeout(request_id, 2000) in actions
    assert coordinator.handle(HintStored(request_id, dead, 5)) == []
    assert coordinator.hints.hinted_targets == [dead.host_id]
    assert coordinator.handle(MutationAcked(request_id, replicas.natural[0])) == []
    [done] = coordinator.handle(MutationAcked(request_id, replicas.natural[1]))
    assert isinstance(done, Complete) and done.success
    assert coordinator.outstanding == 0  # every replica it sent to answered
    assert coordinator.handle(MutationAcked(request_id, replicas.natural[1])) == []
    coordinator.validate()


def test_a_write_is_held_until_its_deadline_for_hints() -> None:
    coordinator = Coordinator(host("dc1", 9))
    replicas = _replicas()
    request_id, _ = coordinator.begin_write(
        WriteUnit.of([base_write(1)]), replicas, CL.ONE, lambda h: True, 0
    )
    [done] = coordinator.handle(MutationAcked(request_id, replicas.natural[0]))
    assert isinstance(done, Complete) and done.success and coordinator.outstanding == 1
    actions = coordinator.handle(RequestTimedOut(request_id))
    assert [a.target for a in actions if isinstance(a, StoreHint)] == list(replicas.natural[1:])
    assert coordinator.outstanding == 0
    coordinator.validate()


def test_a_read_through_the_facade() -> None:
    coordinator = Coordinator(host("dc1", 9))
    replicas = _replicas()
    stale, fresh = base_write(1, 1, 10), base_write(1, 2, 20)
    request_id, actions = coordinator.begin_read(replicas, CL.QUORUM, lambda h: True, lambda p: p)
    assert request_id == 1 and ArmTimeout(request_id, 5000) in actions
    first, second = (a.replica for a in actions if isinstance(a, SendRead))
    assert coordinator.handle(DataReceived(request_id, first, fresh)) == []
    [again] = coordinator.handle(DigestReceived(request_id, second, partition_digest(stale)))
    assert isinstance(again, SendRead) and again.replica == second
    repair = coordinator.handle(DataReceived(request_id, second, stale))
    assert len(repair) == 1
    coordinator.validate()
    [answer] = coordinator.handle(RepairAcked(request_id, second))
    assert isinstance(answer, Respond) and answer.result == fresh
    assert coordinator.outstanding == 0
    assert coordinator.handle(RequestTimedOut(request_id)) == []  # late: ignored
    assert "ignored" in coordinator.story()[-1]


def test_too_many_requests_is_overloaded_before_anything_is_sent() -> None:
    coordinator = Coordinator(host("dc1", 9), max_outstanding_requests=2)
    replicas = _replicas()
    first, _ = coordinator.begin_read(replicas, CL.ONE, lambda h: True, lambda p: p)
    second, _ = coordinator.begin_write(
        WriteUnit.of([base_write(1)]), replicas, CL.ONE, lambda h: True, 0
    )
    assert (first, second) == (1, 2)
    with pytest.raises(Overloaded) as raised:
        coordinator.begin_read(replicas, CL.ONE, lambda h: True, lambda p: p)
    assert raised.value.code == ErrorCode.OVERLOADED
    assert (raised.value.outstanding, raised.value.limit) == (2, 2)
    coordinator.handle(RequestTimedOut(first))
    third, _ = coordinator.begin_read(replicas, CL.ONE, lambda h: True, lambda p: p)
    assert third == 3
    coordinator.validate()


def test_events_of_the_wrong_kind_are_refused() -> None:
    coordinator = Coordinator(host("dc1", 9))
    replicas = _replicas()
    read_id, _ = coordinator.begin_read(replicas, CL.ONE, lambda h: True, lambda p: p)
    with pytest.raises(InvalidRequest):
        coordinator.handle(MutationAcked(read_id, replicas.natural[0]))
    with pytest.raises(InvalidRequest):
        Coordinator(host("dc1", 9), max_outstanding_requests=0)
