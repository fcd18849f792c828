"""Schema agreement between nodes (seed 004 "announce/push"): announcing a local DDL, pushing
and pulling ``system_schema`` partitions, merging them, and naming who disagrees.

Owns ``SchemaStep``/``SchemaObserver`` and ``SchemaSync`` (the SCHEMA_PUSH_REQ, SCHEMA_PULL_REQ
and SCHEMA_PULL_RSP verbs), the shell around the node state's ``SchemaVersions`` (which
decides when to pull and who disagrees, ``_schema_versions``): it pushes, pulls, merges and
answers the waiters for agreement.

Rules:

* After a local DDL the node gossips its new SCHEMA version and pushes its ``system_schema``
  partitions to every live peer; a node that sees a peer gossip a different version pulls that
  peer's partitions (at most once per 500 ms per peer, and again every
  ``SCHEMA_PULL_INTERVAL_MS`` while the peer still differs: the periodic safety net; the node
  state decides, ``PullSchema``).
* Partitions merge by timestamp, so pushes from several nodes commute; the processor then
  reloads its schema from the store, and a changed schema is gossiped and told to the hint
  manager.
* ``disagreement`` names the live nodes gossiping another version. A DDL answer waits until
  there are none (``await_agreement``, used by ``ClusterDataPlane.await_schema_agreement``):
  no polling; the waiters are answered when what agreement depends on changes (a peer gossips
  a schema version, a node goes up or down, our own version changes: ``settle``), or at their
  deadline with the nodes still disagreeing. Each migration stays in the
  chain of the node that ran it (``system.schema_migrations``); peers take its rows.
* A push or pull answer carrying anything but ``system_schema`` partitions is refused whole
  (issue 16: a peer's push could write any table, ``system`` included).
* ``SchemaObserver`` (optional) is told of every ``SchemaStep`` as it is reached: the seam
  crash-point tests use (seed 004 "a node can fail during any step").
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence

from ringflow.cluster._messages import Verb
from ringflow.cluster.service import _codec
from ringflow.cluster.service._node_state import NodeAction, NodeState
from ringflow.cluster.service._schema_versions import SCHEMA_PULL_INTERVAL_MS, PullSchema
from ringflow.cluster.service._settings import Offload
from ringflow.cql import QueryProcessor
from ringflow.runtime import Clock, TimerHandle
from ringflow.schema import SYSTEM_SCHEMA_KEYSPACE_NAME, SYSTEM_SCHEMA_TABLE_NAMES, Mutation
from ringflow.storage import Store

__all__ = ["SCHEMA_PULL_INTERVAL_MS", "SchemaObserver", "SchemaStep", "SchemaSync"]

_log = logging.getLogger(__name__)

_MIN_TOKEN = -(2**63)


class SchemaStep(enum.Enum):
    """The steps of a schema change between nodes (seed 004), in the order they are reached."""

    ANNOUNCE = "announce"
    """A local DDL is persisted (rows and migration); its version is not gossiped yet."""
    PUSH = "push"
    """Announced; the push to one peer (the detail) is about to be sent."""
    PULL = "pull"
    """A peer (the detail) gossips another version: asking it for its schema."""
    RECEIVE = "receive"
    """A peer's (the detail) schema rows arrived (push or pull answer), not merged yet."""
    MERGED = "merged"
    """The merged rows are persisted; the schema is not reloaded nor gossiped yet."""


AgreementDone = Callable[[dict[str, str | None]], None]
"""Told the live nodes still disagreeing (empty: agreement) when a wait for agreement ends."""

SchemaObserver = Callable[[SchemaStep, str], None]
"""Told ``(step, detail)`` at every ``SchemaStep``, on the node's thread (or its schema
offload, for MERGED)."""


Send = Callable[[str, Verb, int, bytes], bool]
Refuse = Callable[[str, int, Verb, str], None]
RunActions = Callable[[Sequence[NodeAction]], None]


class SchemaSync:
    """A node's side of schema agreement (see the module docstring). Merges run on
    ``schema_offload``; everything else on the node's thread. What it decides goes back
    through the node state (``state``), whose actions ``run`` carries out."""

    def __init__(
        self,
        state: NodeState,
        run: RunActions,
        *,
        processor: QueryProcessor,
        store: Store,
        clock: Clock,
        send: Send,
        refuse: Refuse,
        offload: Offload,
        schema_offload: Offload,
        on_schema_merged: Callable[[], None] | None,
        observer: SchemaObserver | None,
    ) -> None:
        self._state = state
        self._run = run
        self._processor = processor
        self._store = store
        self._clock = clock
        self._send = send
        self._refuse = refuse
        self._offload = offload
        self._schema_offload = schema_offload
        self._on_schema_merged = on_schema_merged
        self._observer = observer
        self._waiters: dict[int, tuple[AgreementDone, TimerHandle]] = {}
        self._next_waiter = 0

    def _observe(self, step: SchemaStep, detail: str = "") -> None:
        if self._observer is not None:
            self._observer(step, detail)

    def disagreement(self) -> dict[str, str | None]:
        """The live nodes gossiping another schema version than ours (or none yet): their
        address (RPC address when known) and the version they gossip."""
        return self._state.schema_disagreement()

    def await_agreement(self, timeout_ms: int, done: AgreementDone) -> None:
        """Tell ``done`` the nodes still disagreeing: at once when there are none (or
        ``timeout_ms`` is not positive), else as soon as :meth:`settle` finds agreement, or
        when ``timeout_ms`` has passed. At most one waiter per DDL in flight."""
        found = self.disagreement()
        if not found or timeout_ms <= 0:
            done(found)
            return
        key, self._next_waiter = self._next_waiter, self._next_waiter + 1

        def expire() -> None:
            if self._waiters.pop(key, None) is not None:
                done(self.disagreement())

        self._waiters[key] = (done, self._clock.call_later(timeout_ms, expire))

    def settle(self) -> None:
        """What agreement depends on may have changed: answer the waiters if it now holds."""
        if not self._waiters or self.disagreement():
            return
        waiters, self._waiters = self._waiters, {}
        for done, timer in waiters.values():
            timer.cancel()
            done({})

    def on_local_schema_change(self) -> None:
        """After a DDL here: gossip the new version and push our schema to every live peer."""
        self._observe(SchemaStep.ANNOUNCE)
        self._run(self._state.schema_changed(self._processor.schema_version))
        targets = self._state.gossiper.live_endpoints()

        def send(mutations: list[Mutation] | None, error: BaseException | None) -> None:
            if error is not None or mutations is None:
                _log.error("schema push failed", exc_info=error)
                return
            payload = _codec.encode_mutations_payload(mutations)
            for endpoint in targets:
                self._observe(SchemaStep.PUSH, endpoint)
                self._send(endpoint, Verb.SCHEMA_PUSH_REQ, 0, payload)

        self._offload(self._schema_mutations, send)

    def _schema_mutations(self) -> list[Mutation]:
        mutations: list[Mutation] = []
        for name in SYSTEM_SCHEMA_TABLE_NAMES:
            state: bytes | None = None
            while True:
                page = self._store.scan_mutations(
                    (SYSTEM_SCHEMA_KEYSPACE_NAME, name),
                    _MIN_TOKEN,
                    _MIN_TOKEN,
                    page_size=256,
                    paging_state=state,
                )
                mutations.extend(page.mutations)
                state = page.paging_state
                if state is None:
                    break
        return mutations

    def pull(self, action: PullSchema) -> None:
        """The node state asks ``action.endpoint`` for its schema."""
        self._observe(SchemaStep.PULL, action.endpoint)
        self._send(action.endpoint, Verb.SCHEMA_PULL_REQ, 0, b"")

    def _merge_schema(self, source: str, mutations: list[Mutation]) -> None:
        self._observe(SchemaStep.RECEIVE, source)
        store, processor, clock = self._store, self._processor, self._clock

        def work() -> bool:
            if mutations:
                store.apply(mutations, now_s=clock.now_ms() // 1000)
            self._observe(SchemaStep.MERGED, source)
            changed = processor.reload_schema()
            if changed and self._on_schema_merged is not None:
                self._on_schema_merged()
            return changed

        def done(changed: bool | None, error: BaseException | None) -> None:
            if error is not None:
                _log.error("schema merge failed", exc_info=error)
            elif changed:
                self._run(self._state.schema_changed(processor.schema_version))

        self._schema_offload(work, done)

    # -- verbs -------------------------------------------------------------------------------

    def on_schema_push(self, source: str, request_id: int, payload: bytes) -> None:
        self._merge_checked(source, request_id, Verb.SCHEMA_PUSH_REQ, payload)

    def _merge_checked(self, source: str, request_id: int, verb: Verb, payload: bytes) -> None:
        """Merge a peer's schema partitions, refused whole (counted, nothing applied) if any
        of them is not a ``system_schema`` table's: a schema migration changes the schema
        tables only, and only a migration may change them (``_dispatch`` rules)."""
        mutations = _codec.decode_mutations_payload(payload)
        for mutation in mutations:
            key = (mutation.keyspace, mutation.table)
            if key[0] != SYSTEM_SCHEMA_KEYSPACE_NAME or key[1] not in SYSTEM_SCHEMA_TABLE_NAMES:
                reason = f"{verb.name} carries a mutation of {key[0]}.{key[1]}, not a schema table"
                self._refuse(source, request_id, verb, reason)
                return
        self._merge_schema(source, mutations)

    def on_schema_pull(self, source: str, request_id: int, payload: bytes) -> None:
        def done(mutations: list[Mutation] | None, error: BaseException | None) -> None:
            if error is None and mutations is not None:
                body = _codec.encode_mutations_payload(mutations)
                self._send(source, Verb.SCHEMA_PULL_RSP, request_id, body)

        self._offload(self._schema_mutations, done)

    def on_schema_pull_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        self._merge_checked(source, request_id, Verb.SCHEMA_PULL_RSP, payload)
