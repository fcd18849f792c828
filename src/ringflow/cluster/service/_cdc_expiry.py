"""Expired CDC generations, in the background (thin shell over ``ringflow.cdc._expiry``).

Every ``interval_ms`` (50 gossip rounds, at least 5 s; the first round once the cluster is
ready), a node with ``CDC_GENERATIONS_V2``:

1. reads, through the coordinator at QUORUM, the ``cdc_generation_timestamps`` partition, the v1
   ``cdc_streams_descriptions`` rows and the times of the v1 internal
   ``cdc_generation_descriptions`` rows; the v2 internal rows it can attribute to a timestamp
   are those of the generation ids this node has seen (``known_v2``: gossip since start-up);
2. plans with ``plan_expiry`` (max CDC log TTL of its schema's CDC tables, 24 h without any);
3. sets ``expired`` on the user-facing rows lacking it (QUORUM), then deletes the expired
   generations' internal descriptions (v1 partitions at QUORUM, v2 partitions at ALL: the
   everywhere-replicated table).

Failures are logged and retried at the next round; every write is idempotent, so several nodes
doing it at once agree. ``last_plan`` keeps what the last round decided.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping

from ringflow.cdc import ExpiryPlan, datetime_from_ms, plan_expiry
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster.service._cdc_decider import BackgroundJob
from ringflow.cluster.service._cdc_local import (
    GENERATION_TABLE,
    STREAMS_V1_TABLE,
    TIMESTAMPS_KEY,
    TIMESTAMPS_TABLE,
    V1_GENERATION_TABLE,
)
from ringflow.cluster.service._cdc_rewrite import cdc_table_ttls
from ringflow.cluster.service._cdc_tables import (
    RowValues,
    ms_of,
    partition_deletion,
    read_partition_rows,
    scan_rows,
    write_in_order,
)
from ringflow.cluster.service._node import ClusterNode
from ringflow.schema import Mutation, table_mutation
from ringflow.storage import Store

_log = logging.getLogger(__name__)

EXPIRY_JOB = "cdc-generation-expiry"
"""The name of its ``BackgroundJob`` in the node state."""
EXPIRY_ROUNDS_GOSSIP = 50
"""A round every 50 gossip rounds (50 s at the default 1 s gossip), at least every 5 s."""
MIN_EXPIRY_INTERVAL_MS = 5_000


def _expired_by_time(rows: list[RowValues]) -> dict[int, int | None]:
    found: dict[int, int | None] = {}
    for row in rows:
        expired = row.get("expired")
        found[ms_of(row["time"])] = None if expired is None else ms_of(expired)
    return found


def marking_mutations(store: Store, plan: ExpiryPlan, now_us: int) -> list[Mutation]:
    """``expired`` set on the user-facing rows the plan names."""
    timestamps, streams = store.table(*TIMESTAMPS_TABLE), store.table(*STREAMS_V1_TABLE)
    mutations = [
        table_mutation(
            timestamps,
            [
                {
                    "key": TIMESTAMPS_KEY,
                    "time": datetime_from_ms(entry.time_ms),
                    "expired": datetime_from_ms(entry.expired_ms),
                }
            ],
            now_us,
        )
        for entry in plan.mark_timestamps
    ]
    mutations.extend(
        table_mutation(
            streams,
            [{"time": datetime_from_ms(e.time_ms), "expired": datetime_from_ms(e.expired_ms)}],
            now_us,
        )
        for e in plan.mark_v1_streams
    )
    return mutations


class GenerationExpiryService:
    """Runs the expiry rounds on a ``ClusterNode`` (module docstring)."""

    def __init__(
        self,
        cluster: ClusterNode,
        job: BackgroundJob,
        known_v2: Callable[[], Mapping[uuid.UUID, int]],
        *,
        interval_ms: int | None = None,
    ) -> None:
        self.cluster = cluster
        self.job = job
        """Its schedule, in the node state (``EXPIRY_JOB``): a round is run when it is due."""
        self.known_v2 = known_v2
        if interval_ms is None:
            rounds = EXPIRY_ROUNDS_GOSSIP * cluster.settings.gossip_interval_ms
            interval_ms = max(MIN_EXPIRY_INTERVAL_MS, rounds)
        self.interval_ms = interval_ms
        self.last_plan: ExpiryPlan | None = None
        self.rounds = 0
        self._next_ms = 0

    def run(self) -> None:
        """A round, due now (``RunJob``): the next one ``interval_ms`` after this one began."""
        self._next_ms = self.cluster.clock.now_ms() + self.interval_ms
        self._read()

    def _finish(self, what: str, error: BaseException | None) -> None:
        self.job.done(self._next_ms)
        self.rounds += 1
        if error is not None:
            _log.info("CDC generation expiry: %s failed: %s", what, error)

    def _read(self) -> None:
        quorum = ConsistencyLevel.QUORUM
        store = self.cluster.store
        found: dict[str, list[RowValues]] = {}

        def step(name: str, then: Callable[[], None]) -> Callable[..., None]:
            def done(rows: list[RowValues] | None, error: BaseException | None) -> None:
                if error is not None or rows is None:
                    self._finish(f"reading {name}", error)
                    return
                found[name] = rows
                then()

            return done

        def plan() -> None:
            self._apply(found)

        def v1_internal() -> None:
            scan_rows(self.cluster, store.table(*V1_GENERATION_TABLE), quorum, step("v1", plan))

        def v1_streams() -> None:
            table = store.table(*STREAMS_V1_TABLE)
            scan_rows(self.cluster, table, quorum, step("v1_streams", v1_internal))

        table = store.table(*TIMESTAMPS_TABLE)
        done = step("timestamps", v1_streams)
        read_partition_rows(self.cluster, table, [TIMESTAMPS_KEY], quorum, done)

    def _apply(self, found: Mapping[str, list[RowValues]]) -> None:
        now_ms = self.cluster.clock.now_ms()
        try:
            plan = plan_expiry(
                timestamps_rows=_expired_by_time(found["timestamps"]),
                v1_streams_rows=_expired_by_time(found["v1_streams"]),
                v1_descriptions=[ms_of(row["time"]) for row in found["v1"]],
                v2_descriptions=dict(self.known_v2()),
                ttls_s=cdc_table_ttls(self.cluster.processor.schema),
                now_ms=now_ms,
            )
        except Exception as error:
            self._finish("planning", error)
            return
        self.last_plan = plan
        if plan.empty:
            self._finish("nothing", None)
            return
        store, now_us = self.cluster.store, self.cluster.clock.now_us()
        marks = marking_mutations(store, plan, now_us)
        v1_table, v2_table = store.table(*V1_GENERATION_TABLE), store.table(*GENERATION_TABLE)
        v1_deletes = [
            partition_deletion(v1_table, [datetime_from_ms(t)], now_us)
            for t in plan.delete_v1_descriptions
        ]
        v2_deletes = [
            partition_deletion(v2_table, [ident], now_us) for ident in plan.delete_v2_descriptions
        ]

        def v2_deleted(error: BaseException | None) -> None:
            self._finish("deleting v2 internal descriptions", error)
            if error is None:
                _log.info("CDC generations expired: %s", [e.time_ms for e in plan.expired])

        def v1_deleted(error: BaseException | None) -> None:
            if error is not None:
                self._finish("deleting v1 internal descriptions", error)
                return
            write_in_order(self.cluster, v2_deletes, ConsistencyLevel.ALL, v2_deleted)

        def marked(error: BaseException | None) -> None:
            if error is not None:
                self._finish("marking expired", error)
                return
            write_in_order(self.cluster, v1_deletes, ConsistencyLevel.QUORUM, v1_deleted)

        write_in_order(self.cluster, marks, ConsistencyLevel.QUORUM, marked)
