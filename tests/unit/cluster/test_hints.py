"""Hinted handoff bookkeeping (cassandra-core.md §7.1; Cassandra's ``HintsServiceTest`` and
dtest ``hintedhandoff_test.py``).

Proves: the 3 h window (exactly 3 h is still hinted, a millisecond more is not; measured from the
first conviction; persistent window on the oldest queued hint); hints disabled globally or per
DC; the hint TTL is the smallest gc_grace of the hinted tables and an expired hint is deleted,
never delivered (gc_grace 0: never replayed); replay is scheduled every 10 s only for targets
that are UP and agree on the schema; a delivered hint is deleted, a failed one kept for the next
round; an empty fetch forgets the target; deliveries in flight are bounded; out-of-order events
raise with the story. A stateful test (``RuleBasedStateMachine``) checks against a model store
that no hint is ever delivered to a down or schema-disagreeing target or after its TTL, and that
every live hint is eventually delivered once the target is back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ringflow.cluster._hints import (
    HINT_DISPATCH_INTERVAL_MS,
    MAX_HINT_WINDOW_MS,
    DeleteHint,
    DeliverHint,
    HintManager,
    ReplayHints,
    hint_ttl_s,
    is_hint_live,
)
from ringflow.cluster._write_path import InvalidTransition
from ringflow.errors import InvalidRequest
from ringflow.ring import Host
from ringflow.schema import Mutation

_NAMESPACE = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
SCHEMA = uuid.UUID("59adb24e-f3cd-3e02-97f0-5b395827453f")
OTHER_SCHEMA = uuid.UUID("00000000-0000-3000-8000-000000000001")
GRACE_S = {("ks", "t"): 864_000, ("ks", "short"): 60, ("ks", "zero"): 0}


def host(dc: str, index: int) -> Host:
    endpoint = f"10.{int(dc[2:])}.0.{index}"
    return Host(uuid.uuid5(_NAMESPACE, endpoint), endpoint, dc, f"r{index % 3}")


def grace(keyspace: str, table: str) -> int:
    return GRACE_S[(keyspace, table)]


@dataclass(frozen=True)
class Hint:
    hint_id: int
    created_ms: int
    mutations: tuple[Mutation, ...]


def mutation(table: str = "t") -> Mutation:
    return Mutation("ks", table, (b"k",))


TARGET = host("dc1", 2)


def ready_manager() -> HintManager:
    manager = HintManager()
    manager.set_local_schema_version(SCHEMA)
    manager.on_schema_version(TARGET.host_id, SCHEMA)
    manager.on_node_up(TARGET.host_id, 0)
    return manager


# -- whom to hint ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("down_for_ms", "expected"),
    [(0, True), (MAX_HINT_WINDOW_MS, True), (MAX_HINT_WINDOW_MS + 1, False)],
)
def test_the_hint_window(down_for_ms: int, expected: bool) -> None:
    manager = HintManager()
    manager.on_node_down(TARGET.host_id, 5_000)
    manager.on_node_down(TARGET.host_id, 6_000)  # still down: downtime counts from the first
    assert manager.downtime_ms(TARGET.host_id, 5_000 + down_for_ms) == down_for_ms
    assert manager.should_hint(TARGET, 5_000 + down_for_ms) is expected
    manager.on_node_up(TARGET.host_id, 5_000 + down_for_ms)
    assert manager.should_hint(TARGET, 5_000 + down_for_ms + 1)  # up again: window resets
    manager.validate()


def test_a_host_never_seen_down_is_hinted() -> None:
    assert HintManager().should_hint(TARGET, 10**12)


def test_the_persistent_window_counts_from_the_oldest_queued_hint() -> None:
    manager = ready_manager()
    manager.on_hint_stored(TARGET.host_id, 1_000)
    manager.on_hint_stored(TARGET.host_id, 500_000)
    assert manager.should_hint(TARGET, 1_000 + MAX_HINT_WINDOW_MS)
    assert not manager.should_hint(TARGET, 1_001 + MAX_HINT_WINDOW_MS)


def test_hints_disabled_globally_or_per_dc() -> None:
    assert not HintManager(enabled=False).should_hint(TARGET, 0)
    manager = HintManager(disabled_dcs=["dc2"])
    assert manager.should_hint(TARGET, 0)
    assert not manager.should_hint(host("dc2", 1), 0)


def test_the_number_of_hinted_hosts_is_bounded() -> None:
    manager = HintManager(max_targets=1)
    manager.on_hint_stored(TARGET.host_id, 0)
    assert manager.should_hint(TARGET, 0)
    assert not manager.should_hint(host("dc1", 3), 0)
    with pytest.raises(InvalidRequest):
        manager.on_hint_stored(host("dc1", 3).host_id, 0)


# -- time to live ---------------------------------------------------------------------------


def test_the_hint_ttl_is_the_smallest_gc_grace_of_its_tables() -> None:
    assert hint_ttl_s([mutation("t"), mutation("short")], grace) == 60
    assert is_hint_live(0, [mutation("short")], 59_999, grace)
    assert not is_hint_live(0, [mutation("short")], 60_000, grace)
    assert not is_hint_live(0, [mutation("zero")], 0, grace)
    with pytest.raises(InvalidRequest):
        hint_ttl_s([], grace)


def test_expired_hints_are_deleted_not_delivered() -> None:
    manager = ready_manager()
    manager.on_hint_stored(TARGET.host_id, 0)
    assert manager.tick(70_000) == [ReplayHints(TARGET.host_id)]
    hints = [Hint(1, 0, (mutation("short"),)), Hint(2, 0, (mutation("t"),))]
    actions = manager.on_hints_fetched(TARGET.host_id, hints, 70_000, grace)
    assert actions == [
        DeleteHint(TARGET.host_id, 1, expired=True),
        DeliverHint(TARGET.host_id, 2, (mutation("t"),)),
    ]
    manager.validate()


# -- replay ---------------------------------------------------------------------------------


def test_replay_only_when_up_and_the_schema_agrees_every_ten_seconds() -> None:
    manager = HintManager()
    manager.on_hint_stored(TARGET.host_id, 0)
    assert manager.tick(0) == []  # down, no schema known
    manager.on_node_up(TARGET.host_id, 1)
    manager.set_local_schema_version(SCHEMA)
    manager.on_schema_version(TARGET.host_id, OTHER_SCHEMA)
    assert manager.tick(HINT_DISPATCH_INTERVAL_MS) == []  # schema disagrees
    manager.on_schema_version(TARGET.host_id, SCHEMA)
    assert manager.tick(HINT_DISPATCH_INTERVAL_MS + 1) == []  # not due yet
    assert manager.tick(2 * HINT_DISPATCH_INTERVAL_MS) == [ReplayHints(TARGET.host_id)]
    assert manager.tick(4 * HINT_DISPATCH_INTERVAL_MS) == []  # already replaying
    manager.validate()


def test_a_delivered_hint_is_deleted_and_a_failed_one_kept() -> None:
    manager = ready_manager()
    manager.on_hint_stored(TARGET.host_id, 0)
    manager.tick(0)
    hints = [Hint(1, 0, (mutation(),)), Hint(2, 5, (mutation(),))]
    manager.on_hints_fetched(TARGET.host_id, hints, 100, grace)
    assert manager.on_hint_delivered(TARGET.host_id, 1) == [DeleteHint(TARGET.host_id, 1)]
    assert manager.on_hint_delivery_failed(TARGET.host_id, 2) == []
    manager.validate()
    assert manager.tick(HINT_DISPATCH_INTERVAL_MS) == [ReplayHints(TARGET.host_id)]
    actions = manager.on_hints_fetched(TARGET.host_id, [hints[1]], 20_000, grace)
    assert actions == [DeliverHint(TARGET.host_id, 2, (mutation(),))]
    manager.on_hint_delivered(TARGET.host_id, 2)
    manager.tick(2 * HINT_DISPATCH_INTERVAL_MS)
    assert manager.on_hints_fetched(TARGET.host_id, [], 30_000, grace) == []
    assert manager.hinted_targets == []


def test_a_target_that_went_down_before_the_fetch_gets_nothing() -> None:
    manager = ready_manager()
    manager.on_hint_stored(TARGET.host_id, 0)
    manager.tick(0)
    manager.on_node_down(TARGET.host_id, 1)
    assert manager.on_hints_fetched(TARGET.host_id, [Hint(1, 0, (mutation(),))], 2, grace) == []
    manager.validate()


def test_deliveries_in_flight_are_bounded() -> None:
    manager = HintManager(max_deliveries_in_flight=2)
    manager.set_local_schema_version(SCHEMA)
    manager.on_schema_version(TARGET.host_id, SCHEMA)
    manager.on_node_up(TARGET.host_id, 0)
    manager.on_hint_stored(TARGET.host_id, 0)
    manager.tick(0)
    hints = [Hint(i, 0, (mutation(),)) for i in range(5)]
    actions = manager.on_hints_fetched(TARGET.host_id, hints, 1, grace)
    assert [a.hint_id for a in actions if isinstance(a, DeliverHint)] == [0, 1]


def test_out_of_order_events_raise_with_the_story() -> None:
    manager = ready_manager()
    with pytest.raises(InvalidTransition):
        manager.on_hints_fetched(TARGET.host_id, [], 0, grace)
    manager.on_hint_stored(TARGET.host_id, 0)
    with pytest.raises(InvalidTransition) as raised:
        manager.on_hints_fetched(TARGET.host_id, [], 0, grace)
    assert "idle" in str(raised.value)
    manager.tick(0)
    manager.on_hints_fetched(TARGET.host_id, [Hint(1, 0, (mutation(),))], 1, grace)
    with pytest.raises(InvalidRequest):
        manager.on_hint_delivered(TARGET.host_id, 99)
    with pytest.raises(InvalidRequest):
        HintManager(max_hint_window_ms=0)


# -- stateful: against a model store ------------------------------------------------------------


class HintReplay(RuleBasedStateMachine):
    """The shell's loop around a HintManager, with a dict as the hint store."""

    def __init__(self) -> None:
        super().__init__()
        self.manager = HintManager(max_deliveries_in_flight=3)
        self.manager.set_local_schema_version(SCHEMA)
        self.now_ms = 0
        self.store: dict[int, Hint] = {}
        self.next_id = 0
        self.in_flight: list[int] = []
        self.up = False
        self.schema = OTHER_SCHEMA
        self.delivered: set[int] = set()

    @rule(table=st.sampled_from(["t", "short"]))
    def store_hint(self, table: str) -> None:
        self.store[self.next_id] = Hint(self.next_id, self.now_ms, (mutation(table),))
        self.manager.on_hint_stored(TARGET.host_id, self.now_ms)
        self.next_id += 1

    @rule(up=st.booleans(), agrees=st.booleans())
    def membership(self, up: bool, agrees: bool) -> None:
        self.up = up
        if up:
            self.manager.on_node_up(TARGET.host_id, self.now_ms)
        else:
            self.manager.on_node_down(TARGET.host_id, self.now_ms)
        self.schema = SCHEMA if agrees else OTHER_SCHEMA
        self.manager.on_schema_version(TARGET.host_id, self.schema)

    @rule(step_ms=st.sampled_from([1_000, HINT_DISPATCH_INTERVAL_MS, 40_000]))
    def tick(self, step_ms: int) -> None:
        self.now_ms += step_ms
        for action in self.manager.tick(self.now_ms):
            assert isinstance(action, ReplayHints)
            assert self.up and self.schema == SCHEMA
            oldest = [self.store[i] for i in sorted(self.store)][:4]
            outcome = self.manager.on_hints_fetched(TARGET.host_id, oldest, self.now_ms, grace)
            self._run(outcome)

    def _run(self, actions: list[DeleteHint | DeliverHint | ReplayHints]) -> None:
        for action in actions:
            if isinstance(action, DeliverHint):
                hint = self.store[action.hint_id]
                assert self.up and self.schema == SCHEMA
                assert is_hint_live(hint.created_ms, hint.mutations, self.now_ms, grace)
                self.in_flight.append(action.hint_id)
            elif isinstance(action, DeleteHint):
                del self.store[action.hint_id]

    @precondition(lambda self: bool(self.in_flight))
    @rule(success=st.booleans())
    def answer(self, success: bool) -> None:
        hint_id = self.in_flight.pop(0)
        if success:
            self.delivered.add(hint_id)
            self._run(self.manager.on_hint_delivered(TARGET.host_id, hint_id))
        else:
            self._run(self.manager.on_hint_delivery_failed(TARGET.host_id, hint_id))

    @invariant()
    def consistent(self) -> None:
        self.manager.validate()
        assert not self.delivered & set(self.store)  # delivered means deleted
        if self.store:
            assert TARGET.host_id in self.manager.hinted_targets

    def teardown(self) -> None:
        """Back up with the same schema: every hint still live is delivered, the rest dropped."""
        self.membership(True, True)
        for _ in range(20):
            while self.in_flight:
                self.answer(True)
            self.tick(HINT_DISPATCH_INTERVAL_MS)
        assert not self.store
        assert self.manager.hinted_targets == []


TestHintReplay = HintReplay.TestCase
TestHintReplay.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
