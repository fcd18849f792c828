"""The pure core of topology changes: future ring, pending replicas, stream plans, tokens."""

from __future__ import annotations

import itertools
import random
import uuid

from ringflow.cluster._topology_change import (
    Change,
    Transition,
    choose_tokens,
    colocated,
    future_ring,
    join_plan,
    leave_plan,
    pending_replicas,
    ring_pieces,
    transition_of,
)
from ringflow.cluster._write_path import TokenReplicas
from ringflow.ring import MAX_TOKEN, MIN_TOKEN, Host, TokenMetadata, replication_strategy

RF3 = replication_strategy({"class": "SimpleStrategy", "replication_factor": 3})


def _host(index: int) -> Host:
    return Host(uuid.UUID(int=index + 1), f"127.0.0.{index + 1}:7000", "dc1", "rack1")


def _ring(count: int, seed: int = 1) -> TokenMetadata:
    rng = random.Random(seed)
    ring = TokenMetadata()
    for index in range(count):
        host = _host(index)
        ring = ring.with_tokens(host, choose_tokens(ring, host, 8, 3, rng))
    return ring


def _rf3(_ring: TokenMetadata) -> object:
    return RF3


def test_boot_status_is_a_join_and_normal_is_not_a_transition() -> None:
    host = _host(7)
    found = transition_of(host.endpoint, "BOOT,5", str(host.host_id), "dc1", "rack1", "5,9")
    assert found == Transition(host, (5, 9), Change.JOIN)
    assert transition_of(host.endpoint, "NORMAL,5", str(host.host_id), "dc1", "r", "5") is None
    assert transition_of(host.endpoint, "LEAVING,5", None, "dc1", "r", "5") is None


def test_pending_replicas_are_the_future_replicas_only() -> None:
    current = _ring(3)
    joining = _host(3)
    tokens = choose_tokens(current, joining, 8, 3, random.Random(2))
    future = future_ring(current, [Transition(joining, tokens, Change.JOIN)])
    gained = 0
    for token in tokens:
        pending = pending_replicas(token, current, RF3, future, RF3)
        assert pending == (joining,)  # its own tokens: it becomes a replica
        gained += 1
    assert gained == len(tokens)
    # every piece: natural + pending covers the future replicas
    for _low, high in ring_pieces(current, future):
        targets = set(RF3.replicas(high, current)) | set(
            pending_replicas(high, current, RF3, future, RF3)
        )
        assert set(RF3.replicas(high, future)) <= targets


def test_join_plan_covers_every_gained_piece_from_the_losing_replica() -> None:
    current = _ring(3)
    joining = _host(3)
    tokens = choose_tokens(current, joining, 8, 3, random.Random(3))
    future = current.with_tokens(joining, tokens)
    plan = join_plan("ks", joining, current, future, _rf3, lambda host: True)  # type: ignore[arg-type]
    assert plan and all(task.target == joining for task in plan)
    for task in plan:
        assert joining in RF3.replicas(task.high, future)
        assert task.source in RF3.replicas(task.high, current)
        assert task.source not in RF3.replicas(task.high, future)  # the loser
    # with 3 nodes and RF 3 every node held everything; now the joiner holds 3/4 of the ring
    pieces = ring_pieces(current, future)
    gained = [p for p in pieces if joining in RF3.replicas(p[1], future)]
    assert sum(h - lo for lo, h in gained) == sum(t.high - t.low for t in plan)


def test_leave_plan_sends_each_piece_to_its_new_replicas() -> None:
    current = _ring(4)
    leaving = _host(1)
    future = current.without_host(leaving)
    plan = leave_plan("ks", leaving, current, future, _rf3)  # type: ignore[arg-type]
    assert plan and all(task.source == leaving for task in plan)
    for task in plan:
        assert task.target in RF3.replicas(task.high, future)
        assert task.target not in RF3.replicas(task.high, current)


def test_ring_pieces_cover_the_whole_token_space() -> None:
    pieces = ring_pieces(_ring(3), _ring(2, seed=9))
    assert pieces[0][0] == MIN_TOKEN and pieces[-1][1] == MAX_TOKEN
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))


def test_colocation_accepts_the_future_ring_only_during_a_change() -> None:
    current = _ring(4)
    future = current.without_host(_host(2))
    tokens = current.tokens_of(_host(2))
    base, log = tokens[0], tokens[0] + 1  # split by the leaving node's token in the current ring
    if set(RF3.replicas(base, current)) != set(RF3.replicas(log, current)):
        assert not colocated(base, log, current, RF3)
        same_future = set(RF3.replicas(base, future)) == set(RF3.replicas(log, future))
        assert colocated(base, log, current, RF3, future, RF3) == same_future
    assert colocated(base, base, current, RF3)


def test_a_cdc_unit_reaches_a_joiner_gaining_only_the_log_tokens_range() -> None:
    """A joiner's token between base and log token (one vnode of the current ring, so
    colocated): only the log token's range moves to it, and the unit's targets include it."""
    rf2 = replication_strategy({"class": "SimpleStrategy", "replication_factor": 2})
    hosts = [_host(index) for index in range(4)]
    current = TokenMetadata({host: [index * 1000] for index, host in enumerate(hosts)})
    joining = _host(4)
    future = future_ring(current, [Transition(joining, (600,), Change.JOIN)])
    base, log = 800, 400
    assert colocated(base, log, current, rf2)
    assert pending_replicas(base, current, rf2, future, rf2) == ()
    log_pending = pending_replicas(log, current, rf2, future, rf2)
    assert log_pending == (joining,)
    replicas = TokenReplicas.of(base, current, rf2, "dc1")
    targets = replicas.with_pending(log_pending)
    assert targets.natural == replicas.natural
    assert targets.all == (*replicas.natural, joining)
    assert targets.with_pending([joining, *replicas.natural]) == targets


def test_choose_tokens_balances_a_fourth_node() -> None:
    current = _ring(3)
    host = _host(3)
    tokens = choose_tokens(current, host, 8, 3, random.Random(4))
    assert len(tokens) == 8 and not set(tokens) & set(current.sorted_tokens)
