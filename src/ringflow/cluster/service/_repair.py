"""Anti-entropy repair on a node: validation, sync and the coordinator of a repair (issue 17).

cassandra-core.md §7.3 and replication-and-repair.md §4 (Cassandra's ``RepairSession``,
``ValidationManager``, ``SyncTask``); seed 003 "Merkle repair". The pure parts are
``ringflow.cluster``'s Merkle core and sync plan; this is their asyncio shell, built by
``build_node`` on the runtime's loop (asyncio's in a process, a ``ClockLoop`` in the
simulator) and timed by the node's clock, so the simulator runs the same code. Rules:

* A repair is coordinated by one node, asked by ``ringflow cluster repair`` (over the node's
  request channel, as ``removenode``: ``repair_request``, then ``repair_status`` for its
  progress and summary), by a CQL client connected to it (``CALL NodeOps.repair(...)``,
  ``_repair_procedures``) or by any node over REPAIR_REQ ``run``. One repair at a time per
  coordinator (the others wait their turn, at most ``REPAIRS_QUEUED_MAX``); within it one
  range at a time (one session per range), the replicas of the range validating at once.
* Validation: each replica scans ``(low, high]`` page by page (``Store.scan_mutations``, the
  digests computed off the node's thread), never holding the range, into a tree at the max
  depth, folded to ``depth_for(partitions)``. The coordinator folds every replica's tree to the
  shallowest and streams only the mismatching leaf ranges (``plan_sync``), each target pulling
  from its source page by page (at most ``page_partitions`` partitions in memory per stream).
  Row-level refinement first (``plan_partition_sync``): the replicas list their partitions of
  the mismatching leaves with digests (at most ``refine_partitions_max`` each, else whole
  leaves stream), and only the partitions that differ move, each once per replica lacking it.
* Streamed partitions are applied with origin REPAIR: merged by timestamp with tombstones and
  TTLs as stored, no new CDC log rows, and the log rows a log table's repair brings go to the
  replica's capture out of sequence (REPLICATION.md decision 1).
* A replica down before or during a range fails that range with its reason (the live
  replicas are still repaired among themselves); the repair goes on with the next range and its
  summary lists every range not repaired. A request or answer lost on the way is not a failure:
  a replica's request unanswered for ``RESEND_AFTER_S`` goes again with the same id (every one
  is idempotent: a tree, a listing, a page, a sync that merges what it pulls), and a replica
  ignores a request id it is still serving. A ``run`` is never sent again. ``--preview``
  validates and reports, streams nothing.
* History: one ``system_distributed.repair_history`` row per range and table, one
  ``parent_repair_history`` row per repair (Cassandra's tables); the last fully successful
  repair of each table is kept in ``repairs.json`` and shown by ``cluster status``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import ipaddress
import json
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._digest import validation_digest
from ringflow.cluster._merkle import (
    DEFAULT_TREE_MEMORY_BYTES,
    TreeBuilder,
    max_depth_for_bytes,
)
from ringflow.cluster._messages import InternodeProtocolError, Verb
from ringflow.cluster._repair_plan import (
    LAST_REPAIRS_FILE,
    KeySyncTask,
    RangeToRepair,
    RepairOptions,
    RepairSummary,
    TableSummary,
    describe_ranges,
    format_range,
    plan_partition_sync,
    plan_sync,
    ranges_to_repair,
)
from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._repair_codec import (
    DigestsAnswer,
    DigestsRequest,
    PullKeysRequest,
    RepairMessage,
    RunAnswer,
    RunRequest,
    SyncAnswer,
    SyncKeysRequest,
    SyncRequest,
    TreeAnswer,
    ValidateRequest,
    decode_repair_message,
    encode_repair_message,
    options_from_json,
)
from ringflow.cluster.service._streaming import (
    LOCAL_KEYSPACES,
    Page,
    PullRequest,
    encode_page,
    encode_pull,
)
from ringflow.cql import DISTRIBUTED_TABLES
from ringflow.errors import InvalidRequest, Overloaded, RingflowError
from ringflow.replication import Origin
from ringflow.schema import Mutation, table_mutation, timeuuid_from_micros

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

PAGE_PARTITIONS: Final = 512
REFINE_PARTITIONS_MAX: Final = 20_000
"""Per replica and range, the most partitions of mismatching leaves listed for the row-level
refinement (memory on the coordinator: RF listings of at most this many entries)."""
LIVENESS_CHECK_S: Final = 1.0
RESEND_AFTER_S: Final = 15.0
"""A replica's request (validation, listing, sync, pull) without an answer is sent again after
this, with the same id; the replica serves one request id at a time."""
REQUESTS_SERVED_MAX: Final = 1024
"""REPAIR_REQs one node serves at once (a coordinator asks one range at a time of each
replica; more is refused, not queued without end)."""
VALIDATE_TIMEOUT_S: Final = 600.0
SYNC_TIMEOUT_S: Final = 1800.0
PULL_TIMEOUT_S: Final = 60.0
RUN_TIMEOUT_S: Final = 6 * 3600.0
REPAIRS_QUEUED_MAX: Final = 16
REPAIR_RESULTS_KEPT: Final = 32
"""Repairs waiting for their turn on one coordinator (CQL calls, internode ``run``, the CLI's
files); one more is refused (Overloaded) rather than queued without end."""
_REQUEST_IDS: Final = 5 << 60
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

Progress = Callable[[str, int, int], None]
"""``(table, ranges done, ranges)`` after each range."""


class RepairError(RingflowError):
    """A range could not be repaired (a replica down, failing or not answering)."""


class RepairService:
    """Serves REPAIR_REQ on ``cluster`` and coordinates repairs (module docstring)."""

    def __init__(
        self,
        cluster: ClusterNode,
        data_dir: Path,
        loop: asyncio.AbstractEventLoop,
        *,
        rng: random.Random,
        page_partitions: int = PAGE_PARTITIONS,
        tree_memory_bytes: int = DEFAULT_TREE_MEMORY_BYTES,
        refine_partitions_max: int = REFINE_PARTITIONS_MAX,
    ) -> None:
        if page_partitions < 1 or tree_memory_bytes < 0:
            raise InvalidRequest("repair: page_partitions >= 1 and tree_memory_bytes >= 0")
        self.cluster = cluster
        self.data_dir = data_dir
        self.loop = loop
        self._rng = rng
        self.page_partitions = page_partitions
        self.max_depth = max_depth_for_bytes(tree_memory_bytes)
        self.refine_partitions_max = refine_partitions_max
        self._turn = asyncio.Lock()
        self._queued = 0
        self.progress: dict[str, dict[str, list[int]]] = {}
        """Per queued or running repair id: per table ``[leaves done, leaves]``."""
        self.results: dict[str, object] = {}
        """The summaries of the last ``REPAIR_RESULTS_KEPT`` repairs, by id (oldest first)."""
        self.last_repairs: dict[str, dict[str, object]] = _load_last(data_dir)
        self._next_id = _REQUEST_IDS + (rng.getrandbits(32) << 20)
        """Request ids start at a random point: a restarted coordinator's are not its earlier
        incarnation's, which a replica may still be serving."""
        self._in_service: set[tuple[str, int]] = set()
        """``(source, request id)`` of the REPAIR_REQs this node is serving."""
        self.resent = 0
        """Requests sent again for want of an answer (``RESEND_AFTER_S``)."""
        self._waiters: dict[int, asyncio.Future[bytes]] = {}
        self._serving: set[asyncio.Task[Any]] = set()
        cluster.serve(
            {Verb.REPAIR_REQ: self._on_request, Verb.REPAIR_RSP: self._on_response},
            on_failure={Verb.REPAIR_REQ: self._on_failure},
        )

    # -- plumbing -------------------------------------------------------------------------

    def new_id(self) -> uuid.UUID:
        """A repair's or a history row's id: a timeuuid of the node's clock and random source
        (Cassandra's parent session ids are timeuuids)."""
        return timeuuid_from_micros(self.cluster.clock.now_us(), self._rng.getrandbits(64))

    def _monotonic_s(self) -> float:
        return self.cluster.clock.monotonic_ms() / 1000

    def _now(self) -> datetime.datetime:
        """The node's wall clock as a datetime (history rows)."""
        return _EPOCH + datetime.timedelta(microseconds=self.cluster.clock.now_us())

    def _offloaded(self, work: Callable[[], _T]) -> Awaitable[_T]:
        future: asyncio.Future[_T] = self.loop.create_future()

        def done(result: _T | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

        self.cluster.offload(work, done)
        return future

    async def _ask(self, endpoint: str, message: RepairMessage, timeout_s: float) -> RepairMessage:
        """Send ``message`` to ``endpoint`` (answered locally when it is this node) and wait
        for the answer, failing early once the failure detector convicts the peer. A request
        a replica serves (validation, listing, sync, pull) is sent again every
        ``RESEND_AFTER_S`` without an answer, with the same id: a request or an answer lost on
        the way costs that, not the whole timeout (module rules)."""
        if endpoint == self.cluster.host.endpoint:
            return await self._serve(message)
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[bytes] = self.loop.create_future()
        self._waiters[request_id] = future
        payload = encode_repair_message_any(message)
        resend = not isinstance(message, RunRequest)  # a second run would repair again
        try:
            if not self.cluster.messenger.send(endpoint, Verb.REPAIR_REQ, request_id, payload):
                raise RepairError(f"could not send to {endpoint}")
            now = self._monotonic_s()
            deadline, resend_at = now + timeout_s, now + RESEND_AFTER_S
            while True:
                with contextlib.suppress(TimeoutError):
                    answer = await asyncio.wait_for(asyncio.shield(future), LIVENESS_CHECK_S)
                    return decode_repair_message(answer)
                if not self.cluster.gossiper.is_alive(endpoint):
                    raise RepairError(f"replica {endpoint} went down")
                now = self._monotonic_s()
                if now > deadline:
                    raise RepairError(f"replica {endpoint} did not answer in {timeout_s:.0f} s")
                if resend and now >= resend_at:
                    self.resent += 1
                    self.cluster.messenger.send(endpoint, Verb.REPAIR_REQ, request_id, payload)
                    resend_at = now + RESEND_AFTER_S
        finally:
            self._waiters.pop(request_id, None)

    def _on_response(self, source: str, request_id: int, payload: bytes) -> None:
        future = self._waiters.get(request_id)
        if future is not None and not future.done():
            future.set_result(payload)

    def _on_failure(self, source: str, request_id: int, reason: str) -> None:
        future = self._waiters.get(request_id)
        if future is not None and not future.done():
            future.set_exception(RepairError(f"{source}: {reason}"))

    def _on_request(self, source: str, request_id: int, payload: bytes) -> None:
        message = decode_repair_message(payload)
        key = (source, request_id)
        if key in self._in_service:  # sent again while this node still serves it
            return
        if len(self._in_service) >= REQUESTS_SERVED_MAX:
            self.cluster.messenger.fail(
                source, request_id, Verb.REPAIR_REQ, "too many repair requests"
            )
            return
        self._in_service.add(key)

        async def answer() -> None:
            try:
                body = encode_repair_message_any(await self._serve(message))
            except Exception as error:  # the peer gets the reason, whatever it was
                self.cluster.messenger.fail(
                    source, request_id, Verb.REPAIR_REQ, str(error) or repr(error)
                )
                return
            finally:
                self._in_service.discard(key)
            self.cluster.messenger.send(source, Verb.REPAIR_RSP, request_id, body)

        task = self.loop.create_task(answer())
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(self, message: RepairMessage) -> RepairMessage:
        if isinstance(message, ValidateRequest):
            return await self.validate(message)
        if isinstance(message, SyncRequest):
            return await self.sync(message)
        if isinstance(message, PullRequest):
            return await self._pull_page(message)
        if isinstance(message, DigestsRequest):
            return await self.list_digests(message)
        if isinstance(message, SyncKeysRequest):
            return await self.sync_keys(message)
        if isinstance(message, PullKeysRequest):
            return await self._pull_keys(message)
        if isinstance(message, RunRequest):
            return RunAnswer(await self.submit(message.options))
        raise InternodeProtocolError(f"repair: {type(message).__name__} is not a request")

    # -- replica side ---------------------------------------------------------------------

    async def validate(self, request: ValidateRequest) -> TreeAnswer:
        """This node's tree of ``(low, high]`` of one table (module docstring)."""
        store, table = self.cluster.store, (request.keyspace, request.table)
        max_depth = min(request.max_depth, self.max_depth)
        tree = TreeBuilder(request.low, request.high, max_depth)
        state: bytes | None = None

        def page() -> tuple[list[tuple[int, bytes]], bytes | None]:
            scanned = store.scan_mutations(
                table,
                request.low,
                request.high,
                page_size=self.page_partitions,
                paging_state=state,
            )
            digests = [validation_digest(m) for m in scanned.mutations]
            return list(zip(scanned.tokens, digests, strict=True)), scanned.paging_state

        while True:
            hashed, state = await self._offloaded(page)
            for token, digest in hashed:
                tree.add(token, digest)
            if state is None:
                break
        folded = tree.tree()
        return TreeAnswer(folded.depth, folded.partitions, folded.to_bytes())

    async def list_digests(self, request: DigestsRequest) -> DigestsAnswer:
        """This node's partitions of ``request.ranges`` with their digests (module docstring);
        None once more than ``request.max_entries``."""
        store, table = self.cluster.store, (request.keyspace, request.table)
        entries: list[tuple[int, tuple[bytes, ...], bytes]] = []
        for low, high in request.ranges:
            state: bytes | None = None
            while True:

                def page(
                    low: int = low, high: int = high, state: bytes | None = state
                ) -> tuple[list[tuple[int, tuple[bytes, ...], bytes]], bytes | None]:
                    scanned = store.scan_mutations(
                        table, low, high, page_size=self.page_partitions, paging_state=state
                    )
                    found = [
                        (token, m.partition_key, validation_digest(m))
                        for token, m in zip(scanned.tokens, scanned.mutations, strict=True)
                    ]
                    return found, scanned.paging_state

                found, state = await self._offloaded(page)
                entries += found
                if len(entries) > request.max_entries:
                    return DigestsAnswer(None)
                if state is None:
                    break
        return DigestsAnswer(tuple(entries))

    async def _pull_keys(self, request: PullKeysRequest) -> Page:
        store = self.cluster.store
        if len(request.keys) > self.page_partitions:
            raise InvalidRequest(f"repair: at most {self.page_partitions} keys a pull")

        def read() -> Page:
            table = (request.keyspace, request.table)
            found = [store.read_mutation(table, key) for key in request.keys]
            return Page(None, tuple(m for m in found if m is not None))

        return await self._offloaded(read)

    async def sync_keys(self, request: SyncKeysRequest) -> SyncAnswer:
        """Pull the partitions ``request.keys`` from the source, at most a page at a time, and
        apply them with origin REPAIR."""
        partitions = size = 0
        for start in range(0, len(request.keys), self.page_partitions):
            keys = request.keys[start : start + self.page_partitions]
            pull = PullKeysRequest(request.keyspace, request.table, keys)
            page = await self._ask(request.source, pull, PULL_TIMEOUT_S)
            if not isinstance(page, Page):
                raise RepairError(f"unexpected answer from {request.source}")
            size += len(encode_page(page))
            await self._apply(list(page.partitions))
            partitions += len(page.partitions)
        return SyncAnswer(partitions, size)

    async def _apply(self, partitions: list[Mutation]) -> None:
        if not partitions:
            return
        store, cluster = self.cluster.store, self.cluster

        def apply() -> None:
            store.apply(partitions, now_s=cluster.clock.now_ms() // 1000, origin=Origin.REPAIR)

        await self._offloaded(apply)

    async def _pull_page(self, request: PullRequest) -> Page:
        store = self.cluster.store

        def scan() -> Page:
            size = max(1, min(request.page_size, self.page_partitions))
            page = store.scan_mutations(
                (request.keyspace, request.table),
                request.low,
                request.high,
                page_size=size,
                paging_state=request.paging_state,
            )
            return Page(page.paging_state, tuple(page.mutations))

        return await self._offloaded(scan)

    async def sync(self, request: SyncRequest) -> SyncAnswer:
        """Pull ``request.ranges`` from the source and apply them with origin REPAIR."""
        partitions = size = 0
        for low, high in request.ranges:
            state: bytes | None = None
            while True:
                pull = PullRequest(
                    request.keyspace, request.table, low, high, state, self.page_partitions
                )
                page = await self._ask(request.source, pull, PULL_TIMEOUT_S)
                if not isinstance(page, Page):
                    raise RepairError(f"unexpected answer from {request.source}")
                size += len(encode_page(page))
                await self._apply(list(page.partitions))
                partitions += len(page.partitions)
                state = page.paging_state
                if state is None:
                    break
        return SyncAnswer(partitions, size)

    # -- the coordinator ------------------------------------------------------------------

    def tables_of(self, options: RepairOptions) -> list[str]:
        """The tables a repair covers; Invalid for an unknown keyspace or table."""
        keyspace = options.keyspace
        if keyspace in LOCAL_KEYSPACES:
            raise InvalidRequest(f"keyspace {keyspace} is local to each node: nothing to repair")
        known = sorted(t.name for t in self.cluster.store.tables() if t.keyspace == keyspace)
        if keyspace not in self.cluster.processor.schema.keyspaces and not known:
            raise InvalidRequest(f"Keyspace {keyspace} does not exist")
        for table in options.tables:
            if table not in known:
                raise InvalidRequest(f"unconfigured table {keyspace}.{table}")
        return list(options.tables) or known

    async def submit(
        self, options: RepairOptions, progress: Progress | None = None
    ) -> RepairSummary:
        """Run a repair once the repairs before it are done (one at a time per coordinator);
        Invalid at once for an unknown keyspace or table, Overloaded when too many wait."""
        self.tables_of(options)
        if self._queued >= REPAIRS_QUEUED_MAX:
            raise Overloaded(f"{self._queued} repairs are waiting on this coordinator")
        self._queued += 1
        try:
            async with self._turn:
                return await self.run(options, progress)
        finally:
            self._queued -= 1

    def start(
        self, options: RepairOptions
    ) -> tuple[concurrent.futures.Future[None], concurrent.futures.Future[RepairSummary]]:
        """From any thread, waiting for nothing: check ``options`` and queue the repair, on
        the event loop. The first future is done once it is queued, or fails (Invalid,
        Overloaded); the second holds the repair's outcome."""
        queued: concurrent.futures.Future[None] = concurrent.futures.Future()
        outcome: concurrent.futures.Future[RepairSummary] = concurrent.futures.Future()

        def finished(done: asyncio.Task[RepairSummary]) -> None:
            if done.cancelled():
                outcome.cancel()
            elif (error := done.exception()) is not None:
                outcome.set_exception(error)
            else:
                outcome.set_result(done.result())

        def queue() -> None:
            try:
                self._queue(options, None, finished)
            except BaseException as error:
                queued.set_exception(error)
                outcome.set_exception(error)
            else:
                queued.set_result(None)

        self.loop.call_soon_threadsafe(queue)
        return queued, outcome

    def _queue(
        self,
        options: RepairOptions,
        progress: Progress | None,
        finished: Callable[[asyncio.Task[RepairSummary]], None],
    ) -> None:
        """On the event loop: check ``options`` (Invalid), refuse past ``REPAIRS_QUEUED_MAX``
        (Overloaded), queue the repair; ``finished`` once it is over."""
        self.tables_of(options)
        if self._queued >= REPAIRS_QUEUED_MAX:
            raise Overloaded(f"{self._queued} repairs are waiting on this coordinator")
        task = self.loop.create_task(self.submit(options, progress))
        self._serving.add(task)

        def over(done: asyncio.Task[RepairSummary]) -> None:
            self._serving.discard(done)
            finished(done)

        task.add_done_callback(over)

    async def run(self, options: RepairOptions, progress: Progress | None = None) -> RepairSummary:
        """Repair (or preview) every range and table ``options`` ask for."""
        started = self._monotonic_s()
        summary = RepairSummary(
            str(options.id), options.keyspace, options.preview, self.cluster.host.endpoint
        )
        tables = self.tables_of(options)
        ranges = ranges_to_repair(
            self.cluster.membership.token_metadata,
            self.cluster.placement.strategy_of(options.keyspace),
            self.cluster.host,
            primary_range=options.primary_range,
            subrange=options.subrange(),
        )
        started_at = self._now()
        for table in tables:
            table_summary = TableSummary(options.keyspace, table, ranges=len(ranges))
            summary.tables.append(table_summary)
            table_started = self._monotonic_s()
            for done, piece in enumerate(ranges):
                await self._repair_range(options, table, piece, table_summary)
                if progress is not None:
                    progress(table, done + 1, len(ranges))
            table_summary.elapsed_ms = int((self._monotonic_s() - table_started) * 1000)
            if not options.preview and not table_summary.ranges_failed:
                self._remember(options, table)
        summary.elapsed_ms = int((self._monotonic_s() - started) * 1000)
        if not options.preview:
            await self._record_parent(options, tables, ranges, summary, started_at)
        return summary

    async def _repair_range(
        self, options: RepairOptions, table: str, piece: RangeToRepair, summary: TableSummary
    ) -> None:
        where = format_range(piece.low, piece.high)
        live = [h for h in piece.replicas if self.cluster.placement.live(h)]
        down = [h.endpoint for h in piece.replicas if h not in live]
        started_at = self._now()
        problems = [f"replica {endpoint} is down" for endpoint in down]
        try:
            if len(live) >= 2:
                await self._validate_and_sync(
                    options, table, piece, [h.endpoint for h in live], summary
                )
        except RepairError as error:
            problems.append(str(error))
        if problems:
            summary.ranges_failed.append([where, "; ".join(problems)])
        else:
            summary.ranges_repaired += 1
        if not options.preview:
            status = "FAILED" if problems else "SUCCESS"
            await self._record(
                options,
                table,
                piece,
                [h.endpoint for h in live],
                status,
                "; ".join(problems),
                started_at,
            )

    async def _validate_and_sync(
        self,
        options: RepairOptions,
        table: str,
        piece: RangeToRepair,
        endpoints: Sequence[str],
        summary: TableSummary,
    ) -> None:
        request = ValidateRequest(options.keyspace, table, piece.low, piece.high, self.max_depth)
        answers = await self._ask_all(endpoints, request, VALIDATE_TIMEOUT_S, "validation")
        trees = {
            endpoint: answer.tree(piece.low, piece.high)
            for endpoint, answer in answers.items()
            if isinstance(answer, TreeAnswer)
        }
        plan = plan_sync(trees)
        summary.leaves_compared += plan.leaves_compared
        summary.leaves_mismatching += plan.leaves_mismatching
        summary.note_mismatch(describe_ranges(plan.mismatching_ranges))
        if not plan.tasks:
            return
        refined = await self._refine(options, table, plan.mismatching_ranges, endpoints)
        if refined is not None:
            summary.partitions_differing += sum(len(task.keys) for task in refined)
        if options.preview:
            return
        syncs: list[tuple[str, str, RepairMessage]] = (
            [
                (t.source, t.target, SyncRequest(options.keyspace, table, t.source, t.ranges))
                for t in plan.tasks
            ]
            if refined is None
            else [
                (t.source, t.target, SyncKeysRequest(options.keyspace, table, t.source, t.keys))
                for t in refined
            ]
        )
        for source, target, sync in syncs:  # one stream at a time: bounded memory on every node
            try:
                answer = await self._ask(target, sync, SYNC_TIMEOUT_S)
            except RepairError as error:
                raise RepairError(f"streaming {source} -> {target} failed: {error}") from None
            if isinstance(answer, SyncAnswer):
                summary.partitions_streamed += answer.partitions
                summary.bytes_streamed += answer.bytes

    async def _ask_all(
        self, endpoints: Sequence[str], request: RepairMessage, timeout_s: float, what: str
    ) -> dict[str, RepairMessage]:
        answers = await asyncio.gather(
            *(self._ask(endpoint, request, timeout_s) for endpoint in endpoints),
            return_exceptions=True,
        )
        found: dict[str, RepairMessage] = {}
        for endpoint, answer in zip(endpoints, answers, strict=True):
            if isinstance(answer, BaseException):
                raise RepairError(f"{what} failed on {endpoint}: {answer}")
            found[endpoint] = answer
        return found

    async def _refine(
        self,
        options: RepairOptions,
        table: str,
        ranges: Sequence[tuple[int, int]],
        endpoints: Sequence[str],
    ) -> tuple[KeySyncTask, ...] | None:
        """The row-level plan for the mismatching leaves; None (stream whole leaves) when it is
        off or a replica holds more than ``refine_partitions_max`` partitions in them."""
        if self.refine_partitions_max == 0:
            return None
        request = DigestsRequest(options.keyspace, table, tuple(ranges), self.refine_partitions_max)
        answers = await self._ask_all(endpoints, request, VALIDATE_TIMEOUT_S, "listing")
        listings = {}
        for endpoint, answer in answers.items():
            if not isinstance(answer, DigestsAnswer) or answer.entries is None:
                return None
            listings[endpoint] = answer.entries
        return plan_partition_sync(listings)

    # -- history --------------------------------------------------------------------------

    async def _write(self, table_name: str, row: dict[str, object]) -> None:
        table = DISTRIBUTED_TABLES[("system_distributed", table_name)]
        mutation = table_mutation(table, [row], self.cluster.clock.now_ms() * 1000)
        future: asyncio.Future[None] = self.loop.create_future()

        def written(error: BaseException | None) -> None:
            if not future.done():
                future.set_result(None)
            if error is not None:
                _log.warning("repair: writing %s failed: %s", table_name, error)

        self.cluster.write([mutation], {}, ConsistencyLevel.QUORUM, written)
        await future

    async def _record(
        self,
        options: RepairOptions,
        table: str,
        piece: RangeToRepair,
        participants: Sequence[str],
        status: str,
        problem: str,
        started_at: datetime.datetime,
    ) -> None:
        address, port = _address(self.cluster.host.endpoint)
        row: dict[str, object] = {
            "keyspace_name": options.keyspace,
            "columnfamily_name": table,
            "id": self.new_id(),
            "parent_id": options.id,
            "range_begin": str(piece.low),
            "range_end": str(piece.high),
            "coordinator": address,
            "coordinator_port": port,
            "participants": {_address(endpoint)[0] for endpoint in participants},
            "participants_v2": set(participants),
            "status": status,
            "started_at": started_at,
            "finished_at": self._now(),
        }
        if problem:
            row["exception_message"] = problem
        await self._write("repair_history", row)

    async def _record_parent(
        self,
        options: RepairOptions,
        tables: Sequence[str],
        ranges: Sequence[RangeToRepair],
        summary: RepairSummary,
        started_at: datetime.datetime,
    ) -> None:
        requested = {format_range(piece.low, piece.high) for piece in ranges}
        failed = {where for table in summary.tables for where, _ in table.ranges_failed}
        row: dict[str, object] = {
            "parent_id": options.id,
            "keyspace_name": options.keyspace,
            "columnfamily_names": set(tables),
            "started_at": started_at,
            "finished_at": self._now(),
            "requested_ranges": requested,
            "successful_ranges": requested - failed,
            "options": {
                "primary_range": str(options.primary_range).lower(),
                "preview": str(options.preview).lower(),
                "incremental": "false",
            },
        }
        if failed:
            row["exception_message"] = f"{len(failed)} ranges failed"
        await self._write("parent_repair_history", row)

    def _remember(self, options: RepairOptions, table: str) -> None:
        self.last_repairs[f"{options.keyspace}.{table}"] = {
            "id": str(options.id),
            "finished_at_ms": self.cluster.clock.now_ms(),
            "coordinator": self.cluster.host.endpoint,
        }
        path = self.data_dir / LAST_REPAIRS_FILE
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.last_repairs, sort_keys=True))
        temporary.replace(path)

    # -- the operator's requests (the node's request channel) -------------------------------

    def repair_request(self, request: Mapping[str, object]) -> dict[str, object]:
        """``ringflow cluster repair``: check ``request["options"]`` (RepairOptions as JSON)
        and queue the repair (one runs at a time, at most ``REPAIRS_QUEUED_MAX`` wait):
        accepted, refused (unknown keyspace or table, bad tokens), or to be asked again (the
        queue is full). Its progress and summary: :meth:`repair_status`."""
        try:
            options = options_from_json(json.dumps(request.get("options")))
        except InternodeProtocolError as error:
            return {"accepted": False, "refused": str(error), "retry": False}
        repair_id = str(options.id)

        def progress(table: str, done: int, total: int) -> None:
            self.progress.setdefault(repair_id, {})[table] = [done, total]

        def finished(done: asyncio.Task[RepairSummary]) -> None:
            error = None if done.cancelled() else done.exception()
            failed = done.cancelled() or error is not None
            self._finish(options, None if failed else done.result(), error)

        try:
            self._queue(options, progress, finished)
        except InvalidRequest as error:
            return {"accepted": False, "refused": str(error), "retry": False}
        except Overloaded as error:
            return {"accepted": False, "refused": str(error), "retry": True}
        self.progress[repair_id] = {}
        return {"accepted": True}

    def repair_status(self, request: Mapping[str, object]) -> dict[str, object]:
        """A queued repair's progress (per table ``[done, total]`` leaves) and, once it is
        over, its summary (``result``, RepairSummary as JSON; the last
        ``REPAIR_RESULTS_KEPT`` are kept); without an ``id``, every queued or running
        repair's progress."""
        if request.get("id") is None:  # every queued or running repair's progress, by id
            return {"accepted": True, "progress": {k: dict(v) for k, v in self.progress.items()}}
        repair_id = str(request.get("id"))
        result = self.results.get(repair_id)
        known = result is not None or repair_id in self.progress
        progress = self.progress.get(repair_id, {})
        return {"accepted": True, "known": known, "progress": progress, "result": result}

    def _finish(
        self, options: RepairOptions, summary: RepairSummary | None, error: BaseException | None
    ) -> None:
        if summary is None:
            summary = RepairSummary(
                str(options.id), options.keyspace, options.preview, self.cluster.host.endpoint
            )
            summary.error = f"{error}" or repr(error)
            if not isinstance(error, RingflowError):
                _log.error("repair %s failed", options.id, exc_info=error)
        repair_id = str(options.id)
        self.progress.pop(repair_id, None)
        self.results[repair_id] = json.loads(summary.to_json())
        while len(self.results) > REPAIR_RESULTS_KEPT:
            del self.results[next(iter(self.results))]

    def status(self) -> dict[str, object]:
        """For ``status.json``: the last repairs, whether one runs, and each queued or running
        repair's progress by id."""
        progress = {k: dict(v) for k, v in self.progress.items()}
        return {
            "last_repairs": self.last_repairs,
            "running": self._queued > 0,
            "progress": progress,
        }


def encode_repair_message_any(message: RepairMessage) -> bytes:
    if isinstance(message, PullRequest):
        return encode_pull(message)
    if isinstance(message, Page):
        return encode_page(message)
    return encode_repair_message(message)


def _address(endpoint: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    host, _, port = endpoint.rpartition(":")
    return ipaddress.ip_address(host), int(port)


def _load_last(data_dir: Path) -> dict[str, dict[str, object]]:
    try:
        loaded = json.loads((data_dir / LAST_REPAIRS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
