"""Schema agreement between nodes (seed 004 "announce/push"): announcing a local DDL, pushing
and pulling ``system_schema`` partitions, merging them, and naming who disagrees.

Owns ``SchemaStep``/``SchemaObserver`` and ``SchemaSync`` (the SCHEMA_PUSH_REQ, SCHEMA_PULL_REQ
and SCHEMA_PULL_RSP verbs).

Rules:

* After a local DDL the node gossips its new SCHEMA version and pushes its ``system_schema``
  partitions to every live peer; a node that sees a peer gossip a different version pulls that
  peer's partitions (at most once per 500 ms per peer, and again every
  ``SCHEMA_PULL_INTERVAL_MS`` while the peer still differs: the periodic safety net).
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
from collections.abc import Callable
from typing import TYPE_CHECKING

from ringflow.cluster._gossip_state import ApplicationState
from ringflow.cluster._messages import Verb
from ringflow.cluster.service import _codec
from ringflow.cluster.service._settings import Offload
from ringflow.runtime import TimerHandle
from ringflow.schema import SYSTEM_SCHEMA_KEYSPACE_NAME, SYSTEM_SCHEMA_TABLE_NAMES, Mutation

if TYPE_CHECKING:
    from ringflow.cluster.service._node import ClusterNode

_log = logging.getLogger(__name__)

SCHEMA_PULL_INTERVAL_MS = 2_000
_PULL_MIN_GAP_MS = 500
"""Pulls from one peer are at least this far apart, however often it gossips a new version."""
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


class SchemaSync:
    """A node's side of schema agreement (see the module docstring). Merges run on
    ``schema_offload``; everything else on the node's thread."""

    def __init__(
        self,
        node: ClusterNode,
        schema_offload: Offload,
        on_schema_merged: Callable[[], None] | None,
        observer: SchemaObserver | None,
    ) -> None:
        self._node = node
        self._schema_offload = schema_offload
        self._on_schema_merged = on_schema_merged
        self._observer = observer
        self._last_pull_ms: dict[str, int] = {}
        self._waiters: dict[int, tuple[AgreementDone, TimerHandle]] = {}
        self._next_waiter = 0

    def _observe(self, step: SchemaStep, detail: str = "") -> None:
        if self._observer is not None:
            self._observer(step, detail)

    def disagreement(self) -> dict[str, str | None]:
        """The live nodes gossiping another schema version than ours (or none yet): their
        address (RPC address when known) and the version they gossip."""
        node = self._node
        ours = str(node.processor.schema_version)
        found: dict[str, str | None] = {}
        for endpoint in node.gossiper.live_endpoints():  # the others: we are not listed
            state = node.gossiper.endpoint_state(endpoint)
            versioned = None if state is None else state.get(ApplicationState.SCHEMA)
            if versioned is None or versioned.value != ours:
                info = node.members.get(endpoint)
                address = endpoint.rsplit(":", 1)[0] if info is None else info.rpc_address
                found[address] = None if versioned is None else versioned.value
        return found

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

        self._waiters[key] = (done, self._node.clock.call_later(timeout_ms, expire))

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
        node = self._node
        self._observe(SchemaStep.ANNOUNCE)
        version = node.processor.schema_version
        node.gossiper.set_application_state(ApplicationState.SCHEMA, str(version))
        node.hints.set_local_schema_version(version)
        self.settle()
        targets = node.gossiper.live_endpoints()

        def send(mutations: list[Mutation] | None, error: BaseException | None) -> None:
            if error is not None or mutations is None:
                _log.error("schema push failed", exc_info=error)
                return
            payload = _codec.encode_mutations_payload(mutations)
            for endpoint in targets:
                self._observe(SchemaStep.PUSH, endpoint)
                node.send(endpoint, Verb.SCHEMA_PUSH_REQ, 0, payload)

        node.offload(self._schema_mutations, send)

    def _schema_mutations(self) -> list[Mutation]:
        mutations: list[Mutation] = []
        for name in SYSTEM_SCHEMA_TABLE_NAMES:
            state: bytes | None = None
            while True:
                page = self._node.store.scan_mutations(
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

    def on_peer_schema(self, endpoint: str, version: str, now_ms: int) -> None:
        """``endpoint`` gossips schema ``version``: pull its schema when it is not ours."""
        node = self._node
        if endpoint == node.settings.endpoint or version == str(node.processor.schema_version):
            return
        last = self._last_pull_ms.get(endpoint, -SCHEMA_PULL_INTERVAL_MS)
        if now_ms - last < _PULL_MIN_GAP_MS:
            return
        self._last_pull_ms[endpoint] = now_ms
        self._observe(SchemaStep.PULL, endpoint)
        node.send(endpoint, Verb.SCHEMA_PULL_REQ, 0, b"")

    def _merge_schema(self, source: str, mutations: list[Mutation]) -> None:
        node = self._node
        self._observe(SchemaStep.RECEIVE, source)

        def work() -> bool:
            if mutations:
                node.store.apply(mutations, now_s=node.clock.now_ms() // 1000)
            self._observe(SchemaStep.MERGED, source)
            changed = node.processor.reload_schema()
            if changed and self._on_schema_merged is not None:
                self._on_schema_merged()
            return changed

        def done(changed: bool | None, error: BaseException | None) -> None:
            if error is not None:
                _log.error("schema merge failed", exc_info=error)
            elif changed:
                version = node.processor.schema_version
                node.gossiper.set_application_state(ApplicationState.SCHEMA, str(version))
                node.hints.set_local_schema_version(version)
                self.settle()

        self._schema_offload(work, done)

    def recheck(self) -> None:
        """Pull from any live peer still gossiping another version (periodic safety net)."""
        node = self._node
        now_ms = node.clock.now_ms()
        for endpoint in node.gossiper.live_endpoints():
            state = node.gossiper.endpoint_state(endpoint)
            versioned = None if state is None else state.get(ApplicationState.SCHEMA)
            if versioned is not None:
                last = self._last_pull_ms.get(endpoint, -SCHEMA_PULL_INTERVAL_MS)
                if now_ms - last >= SCHEMA_PULL_INTERVAL_MS:
                    self.on_peer_schema(endpoint, versioned.value, now_ms)

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
                self._node.refuse(source, request_id, verb, reason)
                return
        self._merge_schema(source, mutations)

    def on_schema_pull(self, source: str, request_id: int, payload: bytes) -> None:
        node = self._node

        def done(mutations: list[Mutation] | None, error: BaseException | None) -> None:
            if error is None and mutations is not None:
                body = _codec.encode_mutations_payload(mutations)
                node.send(source, Verb.SCHEMA_PULL_RSP, request_id, body)

        node.offload(self._schema_mutations, done)

    def on_schema_pull_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        self._merge_checked(source, request_id, Verb.SCHEMA_PULL_RSP, payload)
