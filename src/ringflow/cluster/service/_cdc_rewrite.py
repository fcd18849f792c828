"""The v1 -> v2 streams-description rewrite on a node's restart after the upgrade (thin shell).

Seed 000 "Streams description table V1 and rewriting", steps 1-7; the decisions are the pure
planner's (``ringflow.cdc._rewrite``). Only a node with ``CDC_GENERATIONS_V2`` runs it (a node
without it is an "old version"). On ``start``:

1. ``system_distributed.cdc_streams_descriptions`` exists: ringflow always registers it, so the
   check is that the store has the table;
2. ``system.cdc_local`` has ``key = 'rewritten'`` (local read): stop;
3. no table with CDC enabled (the node's schema): write the ``'rewritten'`` row and stop;
4. in the background (gossip ticks; once the cluster is ready, so the replicas of
   ``system_distributed`` are known): scan the v1 timestamps through the coordinator at QUORUM,
   read ``cdc_generation_timestamps`` at QUORUM;
5. - 6.1 ``rewrite_candidates``: drop too-old timestamps and those already in the v2 table;
6.2 read each remaining v1 description at QUORUM; 6.3 write its v2 streams rows then its
   timestamp row at QUORUM (``plan_streams_rewrite`` orders them);
7. write the ``'rewritten'`` row (local: ``system.cdc_local`` is per node).

Any failure retries the whole background part after a capped backoff, until it succeeds (the
writes are idempotent; step 6.1 skips what an earlier attempt or another node published).

New nodes must not rewrite: the bootstrap code calls :func:`write_rewritten_marker` before the
node starts this service (seed 000: "we insert the key = 'rewritten' row on bootstrap as well").
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping

from ringflow.cdc import (
    CdcLocalRow,
    GenerationDescriptionV1Row,
    RewritePlan,
    RewriteStart,
    WriteRewrittenMarker,
    WriteStreamsRows,
    WriteTimestampRow,
    datetime_from_ms,
    plan_streams_rewrite,
    rewrite_candidates,
    rewrite_start,
    rewritten_marker_row,
)
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster.service._cdc_decider import BackgroundJob, RetryPolicy
from ringflow.cluster.service._cdc_local import (
    CDC_LOCAL_TABLE,
    ROWS_PER_WRITE_MAX,
    STREAMS_TABLE,
    STREAMS_V1_TABLE,
    TIMESTAMPS_KEY,
    TIMESTAMPS_TABLE,
    V1_GENERATION_TABLE,
)
from ringflow.cluster.service._cdc_tables import (
    RowValues,
    ms_of,
    read_partition_rows,
    scan_rows,
    v1_row,
    write_in_order,
)
from ringflow.cluster.service._node import ClusterNode
from ringflow.schema import (
    TEXT,
    Mutation,
    SchemaState,
    Table,
    cdc_rewritten_row,
    serialize,
    table_mutation,
)
from ringflow.storage import Store

_log = logging.getLogger(__name__)

REWRITE_RETRY = RetryPolicy(base_ms=500, cap_ms=10_000, max_attempts=2**31)
"""Retry until it succeeds (the background part is idempotent)."""


def write_rewritten_marker(store: Store, now_us: int) -> None:
    """Insert ``key = 'rewritten'`` into this node's ``system.cdc_local`` (step 7, and what a
    bootstrapping node does before anything else so it never rewrites). Blocking: run it on
    the storage thread."""
    store.apply([cdc_rewritten_row(timestamp_us=now_us)], now_s=now_us // 1_000_000)


def local_cdc_rows(store: Store, now_us: int) -> list[CdcLocalRow]:
    """The ``'rewritten'`` row of ``system.cdc_local`` if present (all step 2 needs)."""
    key = serialize(TEXT, rewritten_marker_row().key)
    row = store.read_row(CDC_LOCAL_TABLE, [key], (), now_s=now_us // 1_000_000)
    return [] if row is None else [rewritten_marker_row()]


def cdc_table_ttls(schema: SchemaState) -> list[int]:
    """The CDC ``ttl`` (s) of every table with CDC enabled (0: the log never expires)."""
    return [
        table.options.cdc.ttl_s for table in schema.tables.values() if table.options.cdc.enabled
    ]


def has_table(store: Store, name: tuple[str, str]) -> bool:
    try:
        store.table(*name)
    except Exception:
        return False
    return True


REWRITE_JOB = "cdc-streams-rewrite"
"""The name of its ``BackgroundJob`` in the node state."""


class RewriteState(enum.Enum):
    IDLE = "not started"
    WAITING = "waiting for the cluster"
    RUNNING = "reading and rewriting"
    DONE = "done"


class StreamsRewriteService:
    """Runs the rewrite on a ``ClusterNode`` (module docstring). ``start`` after the node and
    its generation service started; ``state``/``last_plan`` tell what happened."""

    def __init__(
        self, cluster: ClusterNode, job: BackgroundJob, *, retry: RetryPolicy = REWRITE_RETRY
    ) -> None:
        self.cluster = cluster
        self.job = job
        """Its schedule, in the node state (``REWRITE_JOB``): active once the start-up checks
        say to proceed, run when due, stopped once done."""
        self.retry = retry
        self.state = RewriteState.IDLE
        self.start_decision: RewriteStart | None = None
        self.last_plan: RewritePlan | None = None
        self.attempts = 0
        self._ttls: list[int] = []

    def start(self) -> None:
        """Steps 1-3 on the storage thread; then the background part on gossip ticks."""
        store, now_us = self.cluster.store, self.cluster.clock.now_us()
        self._ttls = cdc_table_ttls(self.cluster.processor.schema)
        ttls = list(self._ttls)

        def steps_1_to_3() -> RewriteStart:
            decision = rewrite_start(
                v1_streams_table_exists=has_table(store, STREAMS_V1_TABLE),
                cdc_local_rows=local_cdc_rows(store, now_us),
                cdc_table_ttls_s=ttls,
            )
            if decision is RewriteStart.NO_CDC_TABLES:
                write_rewritten_marker(store, now_us)
            return decision

        def decided(decision: RewriteStart | None, error: BaseException | None) -> None:
            if error is not None or decision is None:
                _log.error("CDC streams rewrite: start-up checks failed", exc_info=error)
                return
            self.start_decision = decision
            _log.info("CDC streams rewrite: %s", decision.value)
            if decision is RewriteStart.PROCEED:
                self.state = RewriteState.WAITING  # ``run`` goes on, when due
                self.job.activate()
            else:
                self._done()

        self.cluster.offload(steps_1_to_3, decided)

    def run(self) -> None:
        """The background part, due now (``RunJob``: proceeding, the cluster ready)."""
        self.state = RewriteState.RUNNING
        self._guarded("scanning", self._scan)

    def _done(self) -> None:
        self.state = RewriteState.DONE
        self.job.stop()

    def _failed(self, what: str, error: BaseException | None) -> None:
        self.attempts += 1
        delay = self.retry.delay_ms(self.attempts)
        _log.info("CDC streams rewrite: %s failed (%s); retrying in %d ms", what, error, delay)
        self.job.done(self.cluster.clock.now_ms() + delay)
        self.state = RewriteState.WAITING

    def _guarded(self, what: str, step: Callable[..., None], *arguments: object) -> None:
        """Run a step of the background part; an unexpected error retries it all later."""
        try:
            step(*arguments)
        except Exception as error:
            _log.exception("CDC streams rewrite: %s failed", what)
            self._failed(what, error)

    def _table(self, name: tuple[str, str]) -> Table:
        return self.cluster.store.table(*name)

    def _scan(self) -> None:
        """Step 4: every v1 timestamp, then the v2 timestamps (both at QUORUM)."""
        quorum = ConsistencyLevel.QUORUM

        def v1_scanned(rows: list[RowValues] | None, error: BaseException | None) -> None:
            if error is not None or rows is None:
                self._failed("scanning cdc_streams_descriptions", error)
                return
            try:
                v1_times = [ms_of(row["time"]) for row in rows]
            except Exception as bad:
                self._failed("decoding cdc_streams_descriptions", bad)
                return

            def v2_read(found: list[RowValues] | None, failure: BaseException | None) -> None:
                if failure is not None or found is None:
                    self._failed("reading cdc_generation_timestamps", failure)
                    return
                self._guarded("planning", self._fetch, v1_times, [ms_of(r["time"]) for r in found])

            timestamps = self._table(TIMESTAMPS_TABLE)
            read_partition_rows(self.cluster, timestamps, [TIMESTAMPS_KEY], quorum, v2_read)

        scan_rows(self.cluster, self._table(STREAMS_V1_TABLE), quorum, v1_scanned)

    def _fetch(self, v1_times: list[int], v2_times: list[int]) -> None:
        """Steps 5, 6.1 (``rewrite_candidates``) and 6.2: the needed v1 descriptions."""
        now_ms = self.cluster.clock.now_ms()
        wanted = list(
            rewrite_candidates(
                cdc_table_ttls_s=self._ttls,
                v1_timestamps_ms=v1_times,
                v2_timestamps_ms=v2_times,
                now_ms=now_ms,
            )
        )
        descriptions: dict[int, GenerationDescriptionV1Row] = {}
        table = self._table(V1_GENERATION_TABLE)

        def next_one() -> None:
            if not wanted:
                self._guarded("rewriting", self._rewrite, v1_times, v2_times, descriptions, now_ms)
                return
            time_ms = wanted.pop(0)

            def read(rows: list[RowValues] | None, error: BaseException | None) -> None:
                if error is not None or rows is None:
                    self._failed(f"reading v1 description {time_ms}", error)
                    return
                try:
                    for row in rows:
                        if row.get("description") is not None:
                            descriptions[time_ms] = v1_row(time_ms, row)
                except Exception as bad:
                    self._failed(f"decoding v1 description {time_ms}", bad)
                    return
                next_one()

            key = [datetime_from_ms(time_ms)]
            read_partition_rows(self.cluster, table, key, ConsistencyLevel.QUORUM, read)

        next_one()

    def _rewrite(
        self,
        v1_times: list[int],
        v2_times: list[int],
        descriptions: Mapping[int, GenerationDescriptionV1Row],
        now_ms: int,
    ) -> None:
        """Steps 6.3 and 7, in the planner's order."""
        plan = plan_streams_rewrite(
            v1_streams_table_exists=True,
            cdc_local_rows=[],
            cdc_table_ttls_s=self._ttls,
            v1_timestamps_ms=v1_times,
            v2_timestamps_ms=v2_times,
            v1_descriptions=descriptions,
            now_ms=now_ms,
        )
        self.last_plan = plan
        now_us = self.cluster.clock.now_us()
        mutations = plan_mutations(self.cluster.store, plan, now_us)
        marker = any(isinstance(action, WriteRewrittenMarker) for action in plan.actions)

        def written(error: BaseException | None) -> None:
            if error is not None:
                self._failed("writing the v2 rows", error)
                return
            if not marker:
                self._done()
                return
            store = self.cluster.store
            self.cluster.offload(lambda: write_rewritten_marker(store, now_us), marked)

        def marked(_result: object, error: BaseException | None) -> None:
            if error is not None:
                self._failed("writing the 'rewritten' row", error)
                return
            self._done()
            rewritten = [a.time_ms for a in plan.actions if isinstance(a, WriteStreamsRows)]
            skipped = [(s.time_ms, s.reason.name) for s in plan.skipped]
            _log.info("CDC streams rewrite done: rewrote %s, skipped %s", rewritten, skipped)

        write_in_order(self.cluster, mutations, ConsistencyLevel.QUORUM, written)


def plan_mutations(store: Store, plan: RewritePlan, now_us: int) -> list[Mutation]:
    """The plan's table writes, in its order (the marker is local, written apart)."""
    streams, timestamps = store.table(*STREAMS_TABLE), store.table(*TIMESTAMPS_TABLE)
    mutations: list[Mutation] = []
    for action in plan.actions:
        if isinstance(action, WriteStreamsRows):
            values = [row.to_columns() for row in action.rows]
            for start in range(0, len(values), ROWS_PER_WRITE_MAX):
                chunk = values[start : start + ROWS_PER_WRITE_MAX]
                mutations.append(table_mutation(streams, chunk, now_us))
        elif isinstance(action, WriteTimestampRow):
            mutations.append(table_mutation(timestamps, [action.row.to_columns()], now_us))
    return mutations
