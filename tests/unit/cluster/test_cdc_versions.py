"""Generation versions, the v1 -> v2 rewrite shell and expiry shell (issue 7 §3; seed 000
"Internal generation descriptions table V1 and upgrade procedure", "Streams description table V1
and rewriting"; seed 001).

Pure: the version rule (v2 only when every known endpoint gossips ``CDC_GENERATIONS_V2``),
v1 and v2 ids learnt and ordered, an admin request makes the requester propose a later
generation. Shells on a fake node whose coordinated reads and writes go to one real store: a v1
generation is written as the one-row v1 description (QUORUM), loaded back through the
coordinator, persisted without uuid and published to the v1 streams table by a node without
the feature, to the v2 tables by one with it; the rewrite copies exactly the live, missing v1
generations into the v2 tables, then writes the ``'rewritten'`` marker, and a second run does
nothing; expiry marks and deletes what the pure plan says.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ringflow.cdc import (
    GenerationIdV1,
    GenerationIdV2,
    generate_topology_description,
    generation_description_v1_row,
    parse_generation_id,
    streams_description_v1_row,
)
from ringflow.cdc._generation_id import GenerationId
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._gossip_state import ApplicationState, EndpointState
from ringflow.cluster.service import (
    STREAMS_TABLE,
    STREAMS_V1_TABLE,
    TIMESTAMPS_TABLE,
    V1_GENERATION_TABLE,
    ActionExecutor,
    load_local_generation,
    local_generation_id,
)
from ringflow.cluster.service._cdc_decider import (
    CDC_GENERATIONS_V2_FEATURE,
    BackgroundJob,
    GenerationDecider,
    Load,
    MemberView,
    Prepare,
    Propose,
    cluster_ready,
    encode_features,
    generation_version,
    member_view,
    member_views,
    newest_generation,
    parse_features,
)
from ringflow.cluster.service._cdc_expiry import EXPIRY_JOB, GenerationExpiryService
from ringflow.cluster.service._cdc_generations import (
    CdcGenerationService,
    SynchronizedCdcMetadata,
    generation_decider,
)
from ringflow.cluster.service._cdc_rewrite import (
    REWRITE_JOB,
    RewriteState,
    StreamsRewriteService,
    write_rewritten_marker,
)
from ringflow.cluster.service._cdc_tables import live_rows, partition_deletion
from ringflow.cluster.service._membership import local_endpoint_state
from ringflow.cql._exec_system import ensure_system_tables
from ringflow.schema._system_rows import table_mutation
from ringflow.storage import Store

NOW_US = 1_700_000_000_000_000
HOUR_MS = 3_600_000
HIGH, LOW = uuid.UUID(int=2**127), uuid.UUID(int=5)
V2 = frozenset({CDC_GENERATIONS_V2_FEATURE})


def _view(
    host: uuid.UUID, features: frozenset[str], generation: GenerationId | None = None
) -> MemberView:
    return MemberView(
        f"{host.int % 97}:7000", host, (host.int % 1000,), (2, 0), True, generation, features
    )


# --- pure ------------------------------------------------------------------------------------


def test_v2_only_when_every_known_endpoint_supports_it() -> None:
    assert generation_version([_view(HIGH, V2), _view(LOW, V2)]) == 2
    assert generation_version([_view(HIGH, V2), _view(LOW, frozenset())]) == 1
    assert generation_version([_view(HIGH, frozenset({"OTHER"}))]) == 1
    assert generation_version([]) == 1


def test_features_travel_as_a_sorted_comma_list() -> None:
    assert encode_features({"B", "A"}) == "A,B"
    assert parse_features("A, B,,") == frozenset({"A", "B"})
    assert parse_features(None) == parse_features("") == frozenset()
    state = local_endpoint_state(
        1,
        {
            ApplicationState.STATUS: "NORMAL,1",
            ApplicationState.TOKENS: "1",
            ApplicationState.HOST_ID: str(HIGH),
            ApplicationState.DC: "dc1",
            ApplicationState.RACK: "r1",
            ApplicationState.SHARD_COUNT: "1",
            ApplicationState.IGNORE_MSB: "0",
            ApplicationState.SUPPORTED_FEATURES: "CDC_GENERATIONS_V2",
            ApplicationState.CDC_GENERATION_ID: "1600000000000",
        },
    )
    view = member_view("a:7000", state, True)
    assert view.features == V2 and view.generation == GenerationIdV1(1_600_000_000_000)


def test_the_decider_proposes_v1_in_a_mixed_cluster_and_v2_in_an_upgraded_one() -> None:
    for features, version in ((frozenset(), 1), (V2, 2)):
        decider = GenerationDecider(HIGH, settle_ms=0)
        views = [_view(HIGH, V2), _view(LOW, features)]
        assert decider.on_tick(views, (), 0) == []  # settle clock starts
        (action,) = decider.on_tick(views, (), 1)
        assert isinstance(action, Propose) and action.version == version and action.first


def test_v1_ids_are_learnt_and_ordered_with_v2_ids() -> None:
    old, new = GenerationIdV1(1000), GenerationIdV1(2000)
    later_v2 = GenerationIdV2(3000, uuid.UUID(int=1))
    assert newest_generation([_view(HIGH, V2, old), _view(LOW, V2, new)]) == new
    assert newest_generation([_view(HIGH, V2, later_v2), _view(LOW, V2, new)]) == later_v2
    decider = GenerationDecider(LOW, settle_ms=0, loaded=old)
    actions = decider.on_tick([_view(HIGH, V2, new), _view(LOW, V2, old)], (), 0)
    assert actions == [Prepare(new), Load(new, 0)]


def test_a_requested_generation_is_proposed_by_the_requester_not_the_highest_host() -> None:
    current = GenerationIdV1(1000)
    decider = GenerationDecider(LOW, settle_ms=0, loaded=current)
    views = [_view(HIGH, frozenset(), current), _view(LOW, V2, current)]
    assert decider.on_tick(views, (), 0) == []
    assert decider.on_tick(views, (), 1) == []  # no request: nothing
    decider.request_new_generation()
    (action,) = decider.on_tick(views, (), 2)
    assert isinstance(action, Propose) and action.version == 1 and not action.first
    proposed = GenerationIdV1(5000)
    assert decider.on_proposed(proposed, 3)[0].generation == proposed  # type: ignore[union-attr]
    assert decider.on_tick([_view(HIGH, V2, proposed), _view(LOW, V2, proposed)], (), 4) == []


def test_a_remembered_v1_generation_is_prepared_and_loaded_at_start() -> None:
    remembered = GenerationIdV1(1000)
    decider = GenerationDecider(LOW, remembered=remembered)
    assert decider.start() == [Prepare(remembered), Load(remembered, 0)]


# --- shells on a store-backed fake node ---------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = NOW_US

    def now_us(self) -> int:
        return self.now

    def now_ms(self) -> int:
        return self.now // 1000

    def call_later(self, _delay_ms: int, callback: Callable[[], None]) -> None:
        callback()


class _Gossiper:
    def __init__(self) -> None:
        self.states: dict[str, EndpointState] = {}
        self.announced: list[str] = []

    def endpoint_states(self) -> dict[str, EndpointState]:
        return self.states

    def is_alive(self, _endpoint: str) -> bool:
        return True

    def set_application_state(self, _state: ApplicationState, value: str) -> None:
        self.announced.append(value)


class _Node:
    """A ``ClusterNode`` whose coordinated reads and writes all go to one store."""

    def __init__(self, store: Store, host_id: uuid.UUID, cdc_ttls: list[int]) -> None:
        self.store = store
        self.clock = _Clock()
        self.gossiper = _Gossiper()
        self.settings = SimpleNamespace(gossip_interval_ms=100, seeds=(), endpoint="self:7000")
        self.host = SimpleNamespace(host_id=host_id)
        self.written: list[tuple[str, str, object]] = []
        self.executor = ActionExecutor()
        self.state = SimpleNamespace(generations=None)
        tables = {
            ("ks", f"t{i}"): SimpleNamespace(
                options=SimpleNamespace(cdc=SimpleNamespace(enabled=True, ttl_s=ttl))
            )
            for i, ttl in enumerate(cdc_ttls)
        }
        self.processor = SimpleNamespace(schema=SimpleNamespace(tables=tables))
        self.failing_reads = 0

    def offload(self, work: Callable[[], object], done: Callable[..., None]) -> None:
        done(work(), None)

    def write(
        self, batch: list[Any], _captures: object, level: object, done: Callable[..., None]
    ) -> None:
        self.written.extend((m.keyspace, m.table, level) for m in batch)
        self.store.apply(batch, now_s=self.clock.now_ms() // 1000)
        done(None)

    def read(
        self,
        keyspace: str,
        table: str,
        key: tuple[bytes, ...],
        _level: object,
        done: Callable[..., None],
    ) -> None:
        done(self.store.read_mutation((keyspace, table), key), None)

    def _fails(self, done: Callable[..., None], *nones: None) -> bool:
        if self.failing_reads <= 0:
            return False
        self.failing_reads -= 1
        done(*nones, RuntimeError("replicas unavailable"))
        return True

    def read_range(
        self,
        keyspace: str,
        table: str,
        left: int,
        right: int,
        _level: object,
        limit: int,
        done: Callable[..., None],
    ) -> None:
        if self._fails(done, None, None):
            return
        page = self.store.scan_mutations((keyspace, table), left, right, page_size=min(limit, 1000))
        assert page.paging_state is None
        done(list(page.mutations), None, None)


def _states(v2: bool, generation: str | None = None) -> dict[str, EndpointState]:
    states = {}
    for host, tokens in ((HIGH, "-100,300"), (LOW, "0,400")):
        values = {
            ApplicationState.STATUS: "NORMAL," + tokens.split(",")[0],
            ApplicationState.TOKENS: tokens,
            ApplicationState.HOST_ID: str(host),
            ApplicationState.DC: "dc1",
            ApplicationState.RACK: "r1",
            ApplicationState.SHARD_COUNT: "2",
            ApplicationState.IGNORE_MSB: "0",
            ApplicationState.SUPPORTED_FEATURES: "CDC_GENERATIONS_V2" if v2 else "",
        }
        if generation is not None:
            values[ApplicationState.CDC_GENERATION_ID] = generation
        states[f"{host.int % 97}:7000"] = local_endpoint_state(1, values)
    return states


def _store(tmp_path: Path, name: str = "store.db") -> Store:
    store = Store(tmp_path / name)
    ensure_system_tables(store)
    return store


def test_an_old_cluster_creates_a_v1_generation_and_publishes_it_to_the_v1_table(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    node = _Node(store, HIGH, [86_400])
    node.gossiper.states = _states(v2=False)
    service = _serve(node, rng=random.Random(1), settle_ms=0, v2_enabled=False)
    service.start()
    _tick(node, service)
    _tick(node, service)
    created = parse_generation_id(node.gossiper.announced[0])
    assert created == GenerationIdV1(NOW_US // 1000)
    assert service.decider.loaded == created and created in service.decider.published
    assert [(k, t, level) for k, t, level in node.written] == [
        (*V1_GENERATION_TABLE, ConsistencyLevel.QUORUM),
        (*STREAMS_V1_TABLE, ConsistencyLevel.QUORUM),
    ]
    assert local_generation_id(store, NOW_US) == created
    assert load_local_generation(store, NOW_US) is None  # v1: loaded by the service instead
    description = service.cdc.description_at(created.timestamp_ms)
    assert description is not None and sorted(description.range_ends.tolist()) == [
        -100,
        0,
        300,
        400,
    ]
    stored_v1 = store.read_mutation(STREAMS_V1_TABLE, _pk(store, created))
    assert stored_v1 is not None
    v1_rows = live_rows(store.table(*STREAMS_V1_TABLE), stored_v1, NOW_US // 10**6)
    assert len(v1_rows[0]["streams"]) == description.stream_count  # type: ignore[arg-type]
    # an upgraded node restarting with the remembered v1 id loads it through the coordinator
    # and publishes it to the v2 tables
    node.written.clear()
    upgraded = _serve(node, rng=random.Random(2), remembered=created)
    upgraded.start()
    assert upgraded.decider.loaded == created and created in upgraded.decider.published
    assert [(k, t) for k, t, _ in node.written] == [STREAMS_TABLE, TIMESTAMPS_TABLE]
    store.close()


def _rewrite(node: _Node) -> StreamsRewriteService:
    """The rewrite with its schedule, inactive until its start-up checks say to proceed (as
    ``build_node`` makes it)."""
    return StreamsRewriteService(node, BackgroundJob(REWRITE_JOB, active=False))  # type: ignore[arg-type]


def _round(
    node: _Node, service: StreamsRewriteService | GenerationExpiryService, now_ms: int
) -> None:
    """The node state's part of a round for a background job: run it if due
    (``NodeState.round``)."""
    views = member_views(node.gossiper.endpoint_states(), node.gossiper.is_alive)
    if service.job.due(cluster_ready(views, node.settings.seeds), now_ms):
        service.run()


def _serve(
    node: _Node,
    *,
    rng: random.Random,
    settle_ms: int | None = None,
    remembered: GenerationId | None = None,
    v2_enabled: bool = True,
) -> CdcGenerationService:
    """The service over a new decider (the node state's, as ``build_node`` makes it), its
    actions carried out by a new executor of ``node`` (as ``build_node`` registers them; a
    new service is a restarted node)."""
    decider = generation_decider(
        node.settings,  # type: ignore[arg-type]
        node.host.host_id,
        node.store,
        remembered=remembered,
        settle_ms=settle_ms,
    )
    node.state = SimpleNamespace(generations=decider)
    service = CdcGenerationService(
        node,  # type: ignore[arg-type]
        SynchronizedCdcMetadata(),
        rng=rng,
        v2_enabled=v2_enabled,
    )
    node.executor = ActionExecutor()
    node.executor.register_all(service.action_handlers())
    return service


def _tick(node: _Node, service: CdcGenerationService) -> None:
    """The decider's part of a gossip round (``NodeState.round``), its actions carried out."""
    views = member_views(node.gossiper.endpoint_states(), node.gossiper.is_alive)
    node.executor.run(service.decider.on_tick(views, node.settings.seeds, node.clock.now_ms()))


def _pk(store: Store, generation: GenerationId) -> tuple[bytes, ...]:
    from ringflow.cdc import datetime_from_ms
    from ringflow.schema import serialize

    column = store.table(*STREAMS_V1_TABLE).column("time")
    return (serialize(column.type, datetime_from_ms(generation.timestamp_ms), "time"),)


def _seed_v1(store: Store, times_ms: list[int]) -> None:
    rng = random.Random(7)
    for time_ms in times_ms:
        description = generate_topology_description([-100, 0, 300], lambda _e: (2, 0), rng)
        internal = generation_description_v1_row(time_ms, description).to_columns()
        streams = streams_description_v1_row(time_ms, description).to_columns()
        store.apply(
            [table_mutation(store.table(*V1_GENERATION_TABLE), [internal], NOW_US)],
            now_s=NOW_US // 10**6,
        )
        store.apply(
            [table_mutation(store.table(*STREAMS_V1_TABLE), [streams], NOW_US)],
            now_s=NOW_US // 10**6,
        )


def _v2_times(store: Store) -> list[int]:
    from ringflow.cluster.service._cdc_tables import ms_of

    rows = store.read_partition(TIMESTAMPS_TABLE, [b"timestamps"], now_s=NOW_US // 10**6)
    table = store.table(*TIMESTAMPS_TABLE)
    from ringflow.schema import deserialize

    return sorted(ms_of(deserialize(table.column("time").type, row.clustering[0])) for row in rows)


def test_the_rewrite_copies_live_missing_v1_generations_once_then_marks(tmp_path: Path) -> None:
    store = _store(tmp_path)
    now_ms = NOW_US // 1000
    too_old, live, current = now_ms - 5 * HOUR_MS, now_ms - 3 * HOUR_MS, now_ms - HOUR_MS
    _seed_v1(store, [too_old, live, current])
    node = _Node(store, LOW, [2 * 3600])
    node.gossiper.states = _states(v2=True)
    # ``current`` was already published to v2 (by an upgraded node's start-up publication)
    from ringflow.cdc import generation_timestamp_row

    row = generation_timestamp_row(current).to_columns()
    store.apply(
        [table_mutation(store.table(*TIMESTAMPS_TABLE), [row], NOW_US)], now_s=NOW_US // 10**6
    )
    rewrite = _rewrite(node)
    rewrite.start()
    assert rewrite.state is RewriteState.WAITING
    _round(node, rewrite, now_ms)
    assert rewrite.state is RewriteState.DONE
    assert _v2_times(store) == [live, current]  # too_old skipped, current not rewritten twice
    streams = store.read_partition(
        STREAMS_TABLE, list(_pk(store, GenerationIdV1(live))), now_s=NOW_US // 10**6
    )
    assert len(streams) == 3
    assert rewrite.last_plan is not None
    assert {(s.time_ms, s.reason.name) for s in rewrite.last_plan.skipped} == {
        (too_old, "TOO_OLD"),
        (current, "ALREADY_IN_V2"),
    }
    # a restart finds the marker (step 2) and does nothing
    node.written.clear()
    again = _rewrite(node)
    again.start()
    assert again.state is RewriteState.DONE and node.written == []
    store.close()


def test_a_bootstrapped_node_with_the_marker_never_rewrites(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _seed_v1(store, [NOW_US // 1000 - HOUR_MS])
    write_rewritten_marker(store, NOW_US)
    node = _Node(store, LOW, [86_400])
    rewrite = _rewrite(node)
    rewrite.start()
    assert rewrite.state is RewriteState.DONE and node.written == [] and _v2_times(store) == []
    store.close()


def test_no_cdc_table_only_writes_the_marker(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _seed_v1(store, [NOW_US // 1000 - HOUR_MS])
    node = _Node(store, LOW, [])
    _rewrite(node).start()
    assert _v2_times(store) == []
    again = _rewrite(node)
    again.start()
    assert again.start_decision is not None and again.start_decision.name == "ALREADY_REWRITTEN"
    store.close()


def test_expiry_marks_superseded_generations_and_deletes_their_internal_rows(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    now_ms = NOW_US // 1000
    old, newer = now_ms - 5 * HOUR_MS, now_ms - 3 * HOUR_MS
    _seed_v1(store, [old, newer])
    node = _Node(store, LOW, [3600])
    node.gossiper.states = _states(v2=True)
    expiry = GenerationExpiryService(node, BackgroundJob(EXPIRY_JOB), dict)  # type: ignore[arg-type]
    _round(node, expiry, now_ms)
    assert expiry.last_plan is not None and [e.time_ms for e in expiry.last_plan.expired] == [old]
    streams = live_rows(
        store.table(*STREAMS_V1_TABLE),
        store.read_mutation(STREAMS_V1_TABLE, _pk(store, GenerationIdV1(old))),
        NOW_US // 10**6,
    )  # type: ignore[arg-type]
    from ringflow.cluster.service._cdc_tables import ms_of

    assert ms_of(streams[0]["expired"]) == newer + HOUR_MS
    internal = store.read_mutation(V1_GENERATION_TABLE, _pk(store, GenerationIdV1(old)))
    assert (
        internal is not None
        and live_rows(store.table(*V1_GENERATION_TABLE), internal, NOW_US // 10**6) == []
    )
    kept = store.read_mutation(V1_GENERATION_TABLE, _pk(store, GenerationIdV1(newer)))
    assert (
        kept is not None
        and len(live_rows(store.table(*V1_GENERATION_TABLE), kept, NOW_US // 10**6)) == 1
    )


def test_live_rows_honour_partition_deletions(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _seed_v1(store, [1000])
    table = store.table(*STREAMS_V1_TABLE)
    key = _pk(store, GenerationIdV1(1000))
    assert len(live_rows(table, store.read_mutation(table, key), 0)) == 1  # type: ignore[arg-type]
    from ringflow.cdc import datetime_from_ms

    store.apply(
        [partition_deletion(table, [datetime_from_ms(1000)], NOW_US + 1)], now_s=NOW_US // 10**6
    )
    assert live_rows(table, store.read_mutation(table, key), 0) == []  # type: ignore[arg-type]
    store.close()


def test_a_generation_whose_rows_expired_is_left_to_the_service(tmp_path: Path) -> None:
    from ringflow.errors import InternalError
    from ringflow.schema._system_rows import cdc_local_row

    store = _store(tmp_path)
    gone = GenerationIdV2(NOW_US // 1000 - 48 * HOUR_MS, uuid.UUID(int=77))
    store.apply(
        [cdc_local_row(gone.timestamp_ms, gone.uuid, timestamp_us=NOW_US)],
        now_s=NOW_US // 10**6,
    )
    assert local_generation_id(store, NOW_US) == gone
    assert load_local_generation(store, NOW_US, missing_ok=True) is None
    try:
        load_local_generation(store, NOW_US)
    except InternalError as error:
        assert str(gone.uuid) in str(error)
    else:
        raise AssertionError("a single node must not start without its generation's rows")
    decider = GenerationDecider(LOW, remembered=gone)
    assert decider.start() == [Prepare(gone), Load(gone, 0)]
    newer = GenerationIdV2(NOW_US // 1000, uuid.UUID(int=78))
    assert decider.on_tick([_view(HIGH, V2, newer)], (), 0) == [Prepare(newer), Load(newer, 0)]
    assert decider.on_loaded(gone, None) == []  # superseded: no more retries for it
    store.close()


def test_the_rewrite_retries_in_the_background_after_a_failed_read(tmp_path: Path) -> None:
    store = _store(tmp_path)
    now_ms = NOW_US // 1000
    _seed_v1(store, [now_ms - HOUR_MS])
    node = _Node(store, LOW, [86_400])
    node.gossiper.states = _states(v2=True)
    node.failing_reads = 1
    rewrite = _rewrite(node)
    rewrite.start()
    _round(node, rewrite, now_ms)  # the scan fails: back to waiting, with a delay
    assert rewrite.state is RewriteState.WAITING and rewrite.attempts == 1
    assert _v2_times(store) == []
    _round(node, rewrite, now_ms)  # too early for the retry
    assert rewrite.attempts == 1 and _v2_times(store) == []
    node.clock.now += 60_000_000
    _round(node, rewrite, node.clock.now_ms())
    assert rewrite.state is RewriteState.DONE and _v2_times(store) == [now_ms - HOUR_MS]
    store.close()
