"""The cluster's CDC generation decisions (``ringflow.cluster.service._cdc_generations``; issue 6
§4; scylla-cdc.md §2, §4; seed 000).

Proves, on the pure decider: who proposes (highest host id, only it, only once); the readiness
rule (every known endpoint NORMAL with tokens and sharding, alive, every seed known, membership
stable for the settle time); nobody proposes once a generation is gossiped; a gossiped id is
prepared then loaded, retried with capped backoff while the rows are missing, activated and
published once loaded; newer ids supersede older ones, older ones are ignored; failed proposals
back off; publication is idempotent and retried. Also: views from real gossip states, and the
synchronised metadata's prepare → insert transition (``GenerationNotLoaded`` in between).
The shell on a fake node and a real store: the proposer writes the internal rows at ALL, then
publishes streams before the timestamp row at QUORUM, persists ``system.cdc_local``, and a
restarted service publishes nothing again; a learner rejects writes while the rows are missing,
retries, and loads the generation once they arrive; a joiner persists and publishes its own
generation only once joined (a restart before that does not bring it back).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from ringflow.cdc import (
    CdcMetadata,
    GenerationIdV2,
    GenerationNotLoaded,
    GenerationsNotLearnt,
    TopologyDescription,
    generate_topology_description,
    parse_generation_id,
)
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._gossip_state import ApplicationState, EndpointState
from ringflow.cluster.service import (
    STREAMS_TABLE,
    TIMESTAMPS_TABLE,
    ActionExecutor,
    load_local_generation,
)
from ringflow.cluster.service._cdc_decider import (
    Activate,
    Announce,
    GenerationDecider,
    HoldWrites,
    Load,
    MemberView,
    Prepare,
    Propose,
    Publish,
    ReleaseWrites,
    RetryPolicy,
    cluster_ready,
    member_view,
    member_views,
    newest_generation,
    proposer,
    publication_needed,
    ring_sharding,
)
from ringflow.cluster.service._cdc_generations import (
    CdcGenerationService,
    SynchronizedCdcMetadata,
    generation_decider,
    internal_mutations,
)
from ringflow.cluster.service._cdc_local import CdcGeneration
from ringflow.cluster.service._membership import local_endpoint_state
from ringflow.cql._exec_system import ensure_system_tables
from ringflow.errors import RingflowError
from ringflow.schema import Mutation
from ringflow.storage import Store

SETTLE_MS = 1_000
LOW, MID, HIGH = (uuid.UUID(int=n) for n in (1, 2, 3))
SEEDS = ("a:7000",)
NOW_US = 1_700_000_000_000_000


def view(
    endpoint: str,
    host_id: uuid.UUID | None,
    tokens: tuple[int, ...] = (),
    *,
    alive: bool = True,
    sharding: tuple[int, int] | None = (2, 0),
    generation: GenerationIdV2 | None = None,
) -> MemberView:
    return MemberView(endpoint, host_id, tokens, sharding, alive, generation)


def three() -> list[MemberView]:
    return [
        view("a:7000", MID, (-100, 300)),
        view("b:7000", HIGH, (0, 400)),
        view("c:7000", LOW, (200, 500)),
    ]


def gen(ms: int, n: int = 9) -> GenerationIdV2:
    return GenerationIdV2(ms, uuid.UUID(int=n))


def settled(decider: GenerationDecider, views: list[MemberView], start_ms: int = 0) -> list[object]:
    """Tick once to start the settle clock, then once after it."""
    assert decider.on_tick(views, SEEDS, start_ms) == []
    return list(decider.on_tick(views, SEEDS, start_ms + SETTLE_MS))


def description() -> TopologyDescription:
    return generate_topology_description(
        [-100, 0, 200, 300, 400, 500], lambda _end: (1, 0), random.Random(1)
    )


# --- who proposes, readiness -------------------------------------------------------------------


def test_highest_host_id_proposes_over_every_ring_token_with_each_owners_sharding() -> None:
    views = three()
    views[2] = view("c:7000", LOW, (200, 500), sharding=(3, 12))
    assert proposer(views) == HIGH
    actions = settled(GenerationDecider(HIGH, settle_ms=SETTLE_MS), views)
    assert len(actions) == 1 and isinstance(actions[0], Propose)
    assert dict(actions[0].sharding) == {
        -100: (2, 0), 300: (2, 0), 0: (2, 0), 400: (2, 0), 200: (3, 12), 500: (3, 12)
    }  # fmt: skip
    assert actions[0].sharding == ring_sharding(views)


@pytest.mark.parametrize("host_id", [LOW, MID])
def test_other_nodes_never_propose(host_id: uuid.UUID) -> None:
    decider = GenerationDecider(host_id, settle_ms=SETTLE_MS)
    assert settled(decider, three()) == []
    assert decider.on_tick(three(), SEEDS, 60_000) == []


def test_the_proposer_proposes_once_while_its_proposal_is_in_flight() -> None:
    decider = GenerationDecider(HIGH, settle_ms=SETTLE_MS)
    assert len(settled(decider, three())) == 1
    assert decider.on_tick(three(), SEEDS, 5_000) == []


@pytest.mark.parametrize(
    "broken",
    [
        view("c:7000", LOW, ()),  # not NORMAL / no tokens yet
        view("c:7000", None, ()),  # incomplete state
        view("c:7000", LOW, (200, 500), alive=False),
        view("c:7000", LOW, (200, 500), sharding=None),  # SHARD_COUNT/IGNORE_MSB not gossiped
    ],
)
def test_not_ready_while_any_known_endpoint_is_incomplete_or_down(broken: MemberView) -> None:
    views = [*three()[:2], broken]
    assert not cluster_ready(views, SEEDS)
    assert settled(GenerationDecider(HIGH, settle_ms=SETTLE_MS), views) == []


def test_not_ready_until_every_seed_is_known() -> None:
    views = three()[1:]  # the seed a:7000 not heard of yet
    assert not cluster_ready(views, SEEDS)
    assert cluster_ready(three(), SEEDS)
    assert not cluster_ready([], ())


def test_membership_must_be_stable_for_the_settle_time() -> None:
    decider = GenerationDecider(HIGH, settle_ms=SETTLE_MS)
    two = three()[:2]
    assert decider.on_tick(two, SEEDS, 0) == []
    # c appears after 900 ms: the settle clock restarts, so no proposal at 1000 ms
    assert decider.on_tick(three(), SEEDS, 900) == []
    assert decider.on_tick(three(), SEEDS, 1_000) == []
    assert decider.on_tick(three(), SEEDS, 1_899) == []
    actions = decider.on_tick(three(), SEEDS, 1_900)
    assert len(actions) == 1 and isinstance(actions[0], Propose)
    assert len(actions[0].sharding) == 6  # c's tokens included


def test_a_down_endpoint_resets_the_settle_clock() -> None:
    decider = GenerationDecider(HIGH, settle_ms=SETTLE_MS)
    assert decider.on_tick(three(), SEEDS, 0) == []
    down = [*three()[:2], view("c:7000", LOW, (200, 500), alive=False)]
    assert decider.on_tick(down, SEEDS, 500) == []
    assert decider.on_tick(three(), SEEDS, 1_000) == []
    assert decider.on_tick(three(), SEEDS, 1_999) == []
    assert len(decider.on_tick(three(), SEEDS, 2_000)) == 1


def test_nobody_proposes_once_a_generation_is_gossiped() -> None:
    views = three()
    views[0] = view("a:7000", MID, (-100, 300), generation=gen(5))
    decider = GenerationDecider(HIGH, settle_ms=SETTLE_MS)
    actions = decider.on_tick(views, SEEDS, 0)
    assert actions == [Prepare(gen(5)), Load(gen(5), 0)]
    assert decider.on_tick(views, SEEDS, 10 * SETTLE_MS) == []


def test_a_failed_proposal_backs_off_then_retries() -> None:
    retry = RetryPolicy(base_ms=100, cap_ms=400, max_attempts=10)
    decider = GenerationDecider(HIGH, settle_ms=SETTLE_MS, retry=retry)
    assert len(settled(decider, three())) == 1
    assert decider.on_proposed(None, 2_000) == []
    assert decider.on_tick(three(), SEEDS, 2_099) == []
    assert len(decider.on_tick(three(), SEEDS, 2_100)) == 1
    assert decider.on_proposed(None, 3_000) == []
    assert decider.on_tick(three(), SEEDS, 3_199) == []
    assert len(decider.on_tick(three(), SEEDS, 3_200)) == 1
    assert [retry.delay_ms(n) for n in range(5)] == [100, 200, 400, 400, 400]


def test_a_written_proposal_is_announced_prepared_and_loaded() -> None:
    decider = GenerationDecider(HIGH, settle_ms=SETTLE_MS)
    settled(decider, three())
    created = gen(1_000, 7)
    assert decider.on_proposed(created, 1_000) == [
        Announce(created),
        Prepare(created),
        Load(created, 0),
    ]
    assert decider.current == created and decider.loaded is None
    # its own announcement, seen back in gossip, is not news
    views = [*three()[:1], view("b:7000", HIGH, (0, 400), generation=created), three()[2]]
    assert decider.on_tick(views, SEEDS, 1_200) == []


# --- learning: prepare → load → activate → publish ----------------------------------------------


def test_load_retries_with_backoff_until_the_rows_are_there() -> None:
    retry = RetryPolicy(base_ms=50, cap_ms=200, max_attempts=100)
    decider = GenerationDecider(LOW, retry=retry)
    generation = gen(10)
    decider.on_tick([view("a:7000", MID, (1,), generation=generation)], (), 0)
    assert decider.on_loaded(generation, None) == [Load(generation, 100)]
    assert decider.on_loaded(generation, None) == [Load(generation, 200)]
    assert decider.on_loaded(generation, None) == [Load(generation, 200)]
    assert decider.loaded is None
    loaded = description()
    actions = decider.on_loaded(generation, loaded)
    assert actions == [Activate(generation, loaded), Publish(generation, 0)]
    assert decider.loaded == generation


def test_load_retries_are_bounded() -> None:
    decider = GenerationDecider(LOW, retry=RetryPolicy(base_ms=1, cap_ms=1, max_attempts=3))
    generation = gen(10)
    decider.on_tick([view("a:7000", MID, (1,), generation=generation)], (), 0)
    assert decider.on_loaded(generation, None) != []
    assert decider.on_loaded(generation, None) != []
    assert decider.on_loaded(generation, None) == []


def test_a_newer_generation_supersedes_and_older_ones_are_ignored() -> None:
    decider = GenerationDecider(LOW)
    old, new = gen(10, 1), gen(20, 2)
    decider.on_tick([view("a:7000", MID, (1,), generation=old)], (), 0)
    views = [view("a:7000", MID, (1,), generation=old), view("b:7000", HIGH, (2,), generation=new)]
    assert newest_generation(views) == new
    assert decider.on_tick(views, (), 100) == [Prepare(new), Load(new, 0)]
    # the old load answering late changes nothing
    assert decider.on_loaded(old, description()) == []
    assert decider.on_tick([view("a:7000", MID, (1,), generation=old)], (), 200) == []
    assert decider.current == new


def test_equal_timestamps_are_ordered_by_uuid() -> None:
    views = [
        view("a:7000", MID, (1,), generation=gen(10, 5)),
        view("b", HIGH, (2,), generation=gen(10, 6)),
    ]
    assert newest_generation(views) == gen(10, 6)


def test_a_reloaded_generation_is_republished_at_start_and_not_relearnt() -> None:
    generation = gen(10)
    decider = GenerationDecider(LOW, loaded=generation)
    assert decider.start() == [Publish(generation, 0)]
    assert decider.on_tick([view("a:7000", MID, (1,), generation=generation)], (), 0) == []
    assert GenerationDecider(LOW).start() == []


def test_publication_is_idempotent_and_retried_on_failure() -> None:
    assert publication_needed(False) and not publication_needed(True)
    retry = RetryPolicy(base_ms=10, cap_ms=1000, max_attempts=3)
    generation = gen(10)
    decider = GenerationDecider(LOW, retry=retry, loaded=generation)
    assert decider.on_published(generation, False) == [Publish(generation, 20)]
    assert decider.on_published(generation, False) == [Publish(generation, 40)]
    assert decider.on_published(generation, False) == []  # bounded
    assert decider.on_published(generation, True) == []
    assert generation in decider.published


# --- catching up after a start (issue 22, topology seed 70) -------------------------------------


def test_a_node_with_peers_holds_cdc_writes_until_it_hears_a_live_peer() -> None:
    """A restarted node may have missed a generation that began while it was down: it routes no
    CDC write until a live, complete peer's gossip is in view, and the newest generation that
    gossip names is learnt in the very tick that releases the writes."""
    loaded, newer = gen(10, 1), gen(20, 2)
    decider = GenerationDecider(LOW, loaded=loaded, wait_for_peers=True, learn_wait_ms=5_000)
    assert decider.start() == [HoldWrites(decider_reason(decider)), Publish(loaded, 0)]
    me = view("me:7000", LOW, (1,), generation=loaded)
    assert decider.on_tick([me], (), 0) == []
    down = view("a:7000", MID, (2,), alive=False, generation=newer)
    assert decider.on_tick([me, down], (), 1) == [Prepare(newer), Load(newer, 0)]
    assert not decider.learnt  # a peer that is not alive has not been heard
    peer = view("a:7000", MID, (2,), generation=newer)
    assert decider.on_tick([me, peer], (), 2) == [ReleaseWrites()]
    assert decider.learnt and decider.on_tick([me, peer], (), 3) == []


def decider_reason(decider: GenerationDecider) -> str:
    (hold,) = [a for a in decider.start() if isinstance(a, HoldWrites)]
    return hold.reason


def test_a_newer_generation_and_the_release_come_in_the_same_tick() -> None:
    loaded, newer = gen(10, 1), gen(20, 2)
    decider = GenerationDecider(LOW, loaded=loaded, wait_for_peers=True)
    me = view("me:7000", LOW, (1,), generation=loaded)
    peer = view("a:7000", MID, (2,), generation=newer)
    assert decider.on_tick([me, peer], (), 0) == [Prepare(newer), Load(newer, 0), ReleaseWrites()]


def test_a_lone_node_releases_after_the_wait_and_a_node_without_peers_never_holds() -> None:
    loaded = gen(10, 1)
    decider = GenerationDecider(LOW, loaded=loaded, wait_for_peers=True, learn_wait_ms=5_000)
    me = view("me:7000", LOW, (1,), generation=loaded)
    assert decider.on_tick([me], (), 1_000) == []
    assert decider.on_tick([me], (), 5_999) == []
    assert decider.on_tick([me], (), 6_000) == [ReleaseWrites()]
    alone = GenerationDecider(LOW)
    assert alone.learnt and alone.start() == []


def test_held_metadata_refuses_writes_with_is_bootstrapping_until_released() -> None:
    cdc = SynchronizedCdcMetadata()
    assert cdc.insert(NOW_US // 1000, description(), NOW_US)
    cdc.hold_writes("it has not heard its peers")
    with pytest.raises(GenerationsNotLearnt, match="has not heard its peers") as refused:
        cdc.get_stream(NOW_US + 10, 42, NOW_US + 10)
    assert refused.value.code == 0x1002  # Is_bootstrapping: drivers retry on the next host
    assert cdc.writes_held
    cdc.release_writes()
    assert cdc.get_stream(NOW_US + 10, 42, NOW_US + 10).token in range(1, 201)


# --- views from gossip; the metadata transition -------------------------------------------------


def test_member_view_reads_the_gossip_states() -> None:
    generation = gen(1_234, 77)
    state = local_endpoint_state(
        1,
        {
            ApplicationState.STATUS: "NORMAL,-5",
            ApplicationState.TOKENS: "-5,7",
            ApplicationState.HOST_ID: str(HIGH),
            ApplicationState.DC: "dc1",
            ApplicationState.RACK: "r1",
            ApplicationState.SHARD_COUNT: "3",
            ApplicationState.IGNORE_MSB: "12",
            ApplicationState.CDC_GENERATION_ID: generation.to_gossip(),
        },
    )
    seen = member_view("x:7000", state, True)
    assert seen == MemberView("x:7000", HIGH, (-5, 7), (3, 12), True, generation)
    assert seen.complete
    joining = local_endpoint_state(
        1, {ApplicationState.STATUS: "BOOT", ApplicationState.CDC_GENERATION_ID: "junk"}
    )
    partial = member_view("y:7000", joining, False)
    assert not partial.complete and partial.generation is None


def test_prepare_rejects_writes_until_insert() -> None:
    cdc = SynchronizedCdcMetadata()
    timestamp_ms = NOW_US // 1000
    assert cdc.prepare(timestamp_ms, NOW_US)
    with pytest.raises(GenerationNotLoaded):
        cdc.get_stream(NOW_US + 10, 42, NOW_US + 10)
    assert cdc.insert(timestamp_ms, description(), NOW_US)
    stream = cdc.get_stream(NOW_US + 10, 42, NOW_US + 10)
    assert cdc.description_at(timestamp_ms) is not None
    assert stream.token in range(1, 201)  # the vnode (0, 200] of token 42
    assert not cdc.prepare(timestamp_ms, NOW_US)  # known: nothing to load


# --- the shell on a fake node: store work, retries, publication order ---------------------------


class _FakeClock:
    def __init__(self) -> None:
        self.now = NOW_US
        self.timers: list[tuple[int, Callable[[], None]]] = []

    def now_us(self) -> int:
        return self.now

    def now_ms(self) -> int:
        return self.now // 1000

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> None:
        self.timers.append((delay_ms, callback))

    def fire(self) -> None:
        timers, self.timers = self.timers, []
        for _delay, callback in timers:
            callback()


class _FakeGossiper:
    def __init__(self) -> None:
        self.states: dict[str, EndpointState] = {}
        self.announced: list[str] = []

    def endpoint_states(self) -> dict[str, EndpointState]:
        return self.states

    def is_alive(self, _endpoint: str) -> bool:
        return True

    def set_application_state(self, state: ApplicationState, value: str) -> None:
        assert state is ApplicationState.CDC_GENERATION_ID
        self.announced.append(value)


class _FakeCluster:
    """What ``CdcGenerationService`` uses of a ``ClusterNode``; writes apply to one store."""

    def __init__(self, store: Store, host_id: uuid.UUID) -> None:
        self.store = store
        self.clock = _FakeClock()
        self.gossiper = _FakeGossiper()
        self.settings = SimpleNamespace(gossip_interval_ms=100, seeds=(), endpoint="self:7000")
        self.host = SimpleNamespace(host_id=host_id)
        self.written: list[tuple[str, str, object]] = []
        self.fail_writes = False
        self.executor = ActionExecutor()
        self.state = SimpleNamespace(generations=None)

    def offload(self, work: Callable[[], object], done: Callable[..., None]) -> None:
        done(work(), None)

    def write(
        self, batch: list[Mutation], _captures: object, level: object, done: Callable[..., None]
    ) -> None:
        if self.fail_writes:
            done(RingflowError("unavailable"))
            return
        self.written.extend((m.keyspace, m.table, level) for m in batch)
        self.store.apply(batch, now_s=NOW_US // 1_000_000)
        done(None)


def _service(
    fake: _FakeCluster,
    cdc: CdcMetadata,
    *,
    rng: random.Random,
    initial: CdcGeneration | None = None,
    settle_ms: int | None = None,
) -> CdcGenerationService:
    """The service over a new decider (the node state's, as ``build_node`` makes it), its
    actions carried out by a new executor of ``fake`` (as ``build_node`` registers them; a new
    service is a restarted node)."""
    decider = generation_decider(
        fake.settings,  # type: ignore[arg-type]
        fake.host.host_id,
        fake.store,
        initial=None if initial is None else initial.id,
        settle_ms=settle_ms,
    )
    fake.state = SimpleNamespace(generations=decider)
    service = CdcGenerationService(fake, cdc, rng=rng, initial=initial)  # type: ignore[arg-type]
    fake.executor = ActionExecutor()
    fake.executor.register_all(service.action_handlers())
    return service


def _tick(fake: _FakeCluster, service: CdcGenerationService) -> None:
    """The decider's part of a gossip round (``NodeState.round``), its actions carried out."""
    gossiper = fake.gossiper
    views = member_views(gossiper.endpoint_states(), gossiper.is_alive)
    fake.executor.run(service.decider.on_tick(views, fake.settings.seeds, fake.clock.now_ms()))


def _gossip_state(host_id: uuid.UUID, tokens: str, generation: str | None) -> EndpointState:
    values = {
        ApplicationState.STATUS: "NORMAL," + tokens.split(",")[0],
        ApplicationState.TOKENS: tokens,
        ApplicationState.HOST_ID: str(host_id),
        ApplicationState.DC: "dc1",
        ApplicationState.RACK: "r1",
        ApplicationState.SHARD_COUNT: "2",
        ApplicationState.IGNORE_MSB: "0",
        ApplicationState.SUPPORTED_FEATURES: "CDC_GENERATIONS_V2",
    }
    if generation is not None:
        values[ApplicationState.CDC_GENERATION_ID] = generation
    return local_endpoint_state(1, values)


def test_the_shell_creates_loads_persists_and_publishes_in_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    ensure_system_tables(store)
    fake = _FakeCluster(store, HIGH)
    fake.gossiper.states = {
        "a:7000": _gossip_state(HIGH, "-100,300", None),
        "b:7000": _gossip_state(LOW, "0,400", None),
    }
    cdc = SynchronizedCdcMetadata()
    service = _service(fake, cdc, rng=random.Random(3), settle_ms=0)
    service.start()
    _tick(fake, service)  # settle clock starts
    _tick(fake, service)  # proposes, writes, learns, loads, publishes
    created = parse_generation_id(fake.gossiper.announced[0])
    assert isinstance(created, GenerationIdV2) and created.timestamp_ms == NOW_US // 1000
    assert service.decider.loaded == created and created in service.decider.published
    loaded = cdc.description_at(created.timestamp_ms)
    assert loaded is not None and sorted(loaded.range_ends.tolist()) == [-100, 0, 300, 400]
    kinds = [(ks, table) for ks, table, _level in fake.written]
    internal = ("system_distributed_everywhere", "cdc_generation_descriptions_v2")
    assert kinds == [internal, STREAMS_TABLE, TIMESTAMPS_TABLE]
    assert [level for *_, level in fake.written] == [
        ConsistencyLevel.ALL, ConsistencyLevel.QUORUM, ConsistencyLevel.QUORUM
    ]  # fmt: skip
    stored = load_local_generation(store, NOW_US)
    assert stored is not None and stored.id == created
    # publication is idempotent: a restarted service finds the timestamp row and writes nothing
    fake.written.clear()
    again = _service(fake, SynchronizedCdcMetadata(), rng=random.Random(4), initial=stored)
    again.cdc.insert(created.timestamp_ms, stored.description, NOW_US)
    again.start()
    assert fake.written == [] and created in again.decider.published
    store.close()


def test_the_shell_prepares_then_loads_once_the_rows_arrive(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    ensure_system_tables(store)
    fake = _FakeCluster(store, LOW)
    generation = GenerationIdV2(NOW_US // 1000, uuid.UUID(int=99))
    fake.gossiper.states = {
        "a:7000": _gossip_state(HIGH, "-100,300", generation.to_gossip()),
        "b:7000": _gossip_state(LOW, "0,400", None),
    }
    cdc = SynchronizedCdcMetadata()
    service = _service(fake, cdc, rng=random.Random(5))
    service.start()
    _tick(fake, service)
    with pytest.raises(GenerationNotLoaded):  # prepared, rows missing: writes rejected
        cdc.get_stream(NOW_US + 5, 42, NOW_US + 5)
    assert len(fake.clock.timers) == 1  # a retry is scheduled
    fake.clock.fire()
    assert len(fake.clock.timers) == 1  # still missing: retried again
    source = generate_topology_description([-100, 0, 300, 400], lambda _e: (2, 0), random.Random(6))
    for mutation in internal_mutations(store, generation.uuid, source, NOW_US):
        store.apply([mutation], now_s=NOW_US // 1_000_000)
    fake.clock.fire()
    assert cdc.get_stream(NOW_US + 5, 42, NOW_US + 5) == source.stream_for(42)
    assert fake.gossiper.announced == [generation.to_gossip()]
    stored = load_local_generation(store, NOW_US)
    assert stored is not None and stored.id == generation
    assert TIMESTAMPS_TABLE in [(ks, t) for ks, t, _ in fake.written]
    store.close()


def test_a_joiner_persists_and_publishes_its_generation_only_once_joined(tmp_path: Path) -> None:
    """Scylla's joiner persists its generation id just before ``bootstrap_state = COMPLETED``
    and publishes only once bootstrapped. Killed after gossiping its new generation, before any
    peer heard it, it must come back without it: persisted at once, it was gossiped again from
    ``system.cdc_local`` after its start had passed, and the writes coordinated in between had
    gone to the previous generation's streams (wide topology seed 428)."""
    store = Store(tmp_path / "store.db")
    ensure_system_tables(store)
    fake = _FakeCluster(store, LOW)
    service = _service(fake, SynchronizedCdcMetadata(), rng=random.Random(7))
    service.start()
    service.joining()
    generation = GenerationIdV2(NOW_US // 1000 + 15_000, uuid.UUID(int=77))
    source = generate_topology_description([-100, 0, 300, 400], lambda _e: (2, 0), random.Random(8))
    for mutation in internal_mutations(store, generation.uuid, source, NOW_US):
        store.apply([mutation], now_s=NOW_US // 1_000_000)
    # what the node state does with a topology change's Adopted once the rows are written at ALL
    service._run(service.decider.on_proposed(generation, fake.clock.now_ms()))
    assert set(fake.gossiper.announced) == {generation.to_gossip()}
    assert service.cdc.description_at(generation.timestamp_ms) == source  # operated here
    assert load_local_generation(store, NOW_US) is None  # not persisted
    assert fake.written == []  # not published
    # a restart now: nothing to reload, nothing gossiped
    restarted = _FakeCluster(store, LOW)
    initial = load_local_generation(store, NOW_US)
    again = _service(restarted, SynchronizedCdcMetadata(), rng=random.Random(9), initial=initial)
    again.start()
    assert restarted.gossiper.announced == [] and again.decider.loaded is None
    # had it lived: once joined, persisted, then published (streams before the timestamp row)
    service.joined()
    stored = load_local_generation(store, NOW_US)
    assert stored is not None and stored.id == generation
    assert [(ks, table) for ks, table, _ in fake.written] == [STREAMS_TABLE, TIMESTAMPS_TABLE]
    assert generation in service.decider.published
    store.close()
