"""Point requests: the coordinator's single-partition writes and reads (with their read
repair) and the replica side of MUTATION_REQ, HINT_REQ and READ_REQ (cassandra-core.md §5,
§6; seed 003).

Owns ``PointRequests``: it turns ``Coordinator`` actions into messages, timers and store calls
and their answers back into ``CoordinatorEvent``s, and keeps the writes and reads in flight.

Rules:

* A coordinator request id travels in the envelope; the replica answers with the same id.
  A MUTATION_RSP for a read request is a read-repair ack (``SendRepair`` is a MUTATION_REQ).
  A failure answer is FAILURE_RSP carrying ``[verb, reason]``.
* Writes are split into one ``WriteUnit`` per set of replicas: the partitions of a batch (base
  mutation + its CDC capture) whose natural, pending and transient replicas are the same go
  together to each of them, as one unit a replica applies in one transaction (a batch of many
  partitions on a one-node hub, or grouped by replica by its client, costs one write instead
  of one per partition), cut where a unit would pass the store's batch limits (mutations,
  cells: a batch whose partitions each fit is never refused for their sum). Every CDC
  capture is checked with ``check_colocation`` first; a mutation's replicas are its base
  token's natural + pending replicas and its log token's pending ones.
* The coordinator's own replica is served from the local store without a message (as
  Cassandra reads locally); the node's ``read_proximity`` puts it first.
* A hint the coordinator asks for (``StoreHint``) is stored by ``HintDelivery``.
* Every unit this node applies as a replica (MUTATION_REQ, HINT_REQ, its own share) goes
  through ``group_commit`` (``_group_commit``): units waiting for the store share one
  transaction and one fsync, and each is answered once its group is durable. A HINT_REQ's unit
  is applied with origin HINT (for the replica-side capture), the others with WRITE.
* Schema changes race reads (seed 004: a DDL reaches the nodes one after the other). A read
  names the columns of the coordinator's table (``ReadCommand.columns``, Cassandra's column
  filter); a replica answers with the cells of those columns only (``restrict_columns``), so a
  column one side has dropped or not added yet makes no digest mismatch, and it tells which of
  them it does not know. A read repair sent to a replica leaves those columns out: a replica
  refuses a mutation with a column it does not know, and a repair it refuses leaves the read
  waiting for an ack until it times out (what QUORUM reads of a CDC log did during ``ALTER
  TABLE ... DROP``: the dropped column's cells, still on the replicas that had not dropped it,
  went as repairs to the ones that had). A repair left with nothing counts as acknowledged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from ringflow.cdc import CdcCapture, StreamId
from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster._coordinator import (
    ArmTimeout,
    CoordinatorEvent,
    DataReceived,
    DigestReceived,
    MutationAcked,
    MutationFailed,
    ReadReplicaFailed,
    RepairAcked,
    RepairFailed,
    RequestTimedOut,
    base_token,
    log_token,
)
from ringflow.cluster._digest import partition_digest
from ringflow.cluster._messages import Verb
from ringflow.cluster._read_path import ReadKind, Respond, SendRead
from ringflow.cluster._read_repair import SendRepair
from ringflow.cluster._write_path import (
    Complete,
    SendMutation,
    TokenReplicas,
    WriteUnit,
)
from ringflow.cluster.service import _codec
from ringflow.cluster.service._dispatch import peer_write_refusal
from ringflow.cluster.service._group_commit import GroupCommit
from ringflow.cluster.service._parts import NodeParts
from ringflow.cluster.service._settings import PendingRead, ReadDone, WriteDone, WriteGroup
from ringflow.errors import RingflowError, invariant
from ringflow.replication import Origin
from ringflow.ring import Host
from ringflow.runtime import TimerHandle
from ringflow.schema import ClusteringBound, Mutation, Table, restrict_columns
from ringflow.storage import StoreLimits, mutation_size

_log = logging.getLogger(__name__)
_NO_BOUND = ClusteringBound()


class PointRequests:
    """A node's point writes and reads in flight, and its replica side of the point verbs.
    Runs on the node's thread; store work goes through the node's ``offload``."""

    def __init__(self, parts: NodeParts) -> None:
        self._host = parts.host
        self._store = parts.store
        self._clock = parts.clock
        self._offload = parts.offload
        self._executor = parts.executor
        self._coordinator = parts.state.coordinator
        self._placement = parts.placement
        self._messenger = parts.messenger
        self._refuse = parts.refuse
        self._writes: dict[int, WriteGroup] = {}
        self._reads: dict[int, PendingRead] = {}
        self._timers: dict[int, TimerHandle] = {}
        self._columns_of: dict[tuple[str, str], tuple[Table, frozenset[str]]] = {}
        self.group_commit = GroupCommit(parts.offload, self._apply_units)
        """Every write unit this node applies as a replica goes through it (one transaction
        per group)."""

    def validate(self) -> None:
        """Every write and read waiting here is one the coordinator still holds (one that
        finished has been answered and forgotten)."""
        coordinator = self._coordinator
        for request_id in (*self._writes, *self._reads):
            invariant(
                coordinator.handler(request_id) is not None,
                f"request {request_id} waits for a coordinator request that is gone",
            )

    def stop(self) -> None:
        """Cancel every request timer."""
        for timer in self._timers.values():
            timer.cancel()

    def write(
        self,
        batch: Sequence[Mutation],
        captures: dict[int, CdcCapture],
        consistency: ConsistencyLevel,
        done: WriteDone,
    ) -> None:
        """Coordinate ``batch`` at ``consistency``; ``done(error)`` once every unit settled.
        The batch's partitions with the same replicas go in one unit (module rules)."""
        try:
            plans = self._units(batch, captures)
        except Exception as error:
            done(error)
            return
        group = WriteGroup(len(plans), done)
        for unit, replicas in plans:
            try:
                request_id, actions = self._coordinator.begin_write(
                    unit, replicas, consistency, self._placement.live, self._clock.now_ms()
                )
            except Exception as error:
                group.complete(error)
                continue
            self._writes[request_id] = group
            self._executor.run(actions)

    def _units(
        self, batch: Sequence[Mutation], captures: dict[int, CdcCapture]
    ) -> list[tuple[WriteUnit, TokenReplicas]]:
        """One write unit per set of replicas (keyspace, natural, pending and transient
        replicas) of ``batch``'s mutations, each with its CDC captures, cut where a unit would
        exceed the store's batch limits (mutations, cells), in the order of their first
        mutation (module rules)."""
        limits = self._store.limits
        open_units: dict[object, _UnitBuilder] = {}
        built: list[_UnitBuilder] = []
        for index, mutation in enumerate(batch):
            capture = captures.get(index)
            replicas = self._unit_replicas(mutation, capture)
            key = (mutation.keyspace, replicas.natural, replicas.pending, replicas.transient)
            cells = mutation_size(mutation).cells if len(batch) > 1 else 0
            builder = open_units.get(key)
            if builder is None or not builder.fits(cells, limits):
                builder = open_units[key] = _UnitBuilder(replicas)
                built.append(builder)
            builder.add(mutation, capture, cells)
        return [(builder.unit(), builder.replicas) for builder in built]

    def _unit_replicas(self, mutation: Mutation, capture: CdcCapture | None) -> TokenReplicas:
        """The base token's natural + pending replicas; with a CDC capture (checked colocated)
        also the log token's pending replicas (``TokenReplicas.with_pending``)."""
        token = base_token(mutation)
        replicas = self._placement.replicas_of(mutation.keyspace, token, for_write=True)
        if capture is None:
            return replicas
        stream = StreamId.from_bytes(capture.stream_id)
        self._placement.check_colocation(mutation.keyspace, token, stream)
        log = self._placement.replicas_of(mutation.keyspace, log_token(stream), for_write=True)
        return replicas.with_pending(log.pending)

    def read(
        self,
        keyspace: str,
        table: str,
        partition_key: tuple[bytes, ...],
        consistency: ConsistencyLevel,
        done: ReadDone,
        start: ClusteringBound = _NO_BOUND,
        end: ClusteringBound = _NO_BOUND,
        columns: tuple[str, ...] | None = None,
    ) -> None:
        """Coordinate a read of one raw partition (or of its clustering slice ``start`` ..
        ``end``: the replicas read and send only that, see ``Store.read_mutation``), of the
        static and regular ``columns`` only when given (the module rules);
        ``done(partition, error)``."""
        command = _codec.ReadCommand(
            keyspace, table, partition_key, ReadKind.DATA, start, end, columns
        )
        try:
            mutation = Mutation(keyspace, table, partition_key)
            replicas = self._placement.replicas_of(keyspace, base_token(mutation))
            request_id, actions = self._coordinator.begin_read(
                replicas,
                consistency,
                self._placement.live,
                lambda partition: partition,
                proximity=self._placement.read_proximity(replicas.natural),
            )
        except Exception as error:
            done(None, error)
            return
        self._reads[request_id] = PendingRead(command, done)
        self._executor.run(actions)

    def handle(self, event: CoordinatorEvent) -> None:
        try:
            actions = self._coordinator.handle(event)
        except RingflowError:
            _log.exception("coordinator refused %s", event)
            return
        self._executor.run(actions)

    def action_handlers(self) -> dict[type, Callable[[Any], None]]:
        """What the coordinator's actions do here (the node's ``ActionExecutor``); its
        ``StoreHint`` is the hint delivery's."""

        def send_mutation(action: SendMutation) -> None:
            self._send_unit(action.replica, action.request_id, action.unit, repair=False)

        return {
            SendMutation: send_mutation,
            SendRepair: self._send_repair,
            SendRead: self._send_read,
            ArmTimeout: self._arm,
            Complete: self._complete_write,
            Respond: self._respond,
        }

    def _arm(self, action: ArmTimeout) -> None:
        request_id = action.request_id

        def fire() -> None:
            self._timers.pop(request_id, None)
            self.handle(RequestTimedOut(request_id))

        self._timers[request_id] = self._clock.call_later(action.delay_ms, fire)

    def _complete_write(self, action: Complete) -> None:
        group = self._writes.pop(action.request_id, None)
        if group is not None:
            group.complete(action.error)

    def _respond(self, action: Respond[object]) -> None:
        pending = self._reads.pop(action.request_id, None)
        timer = self._timers.pop(action.request_id, None)
        if timer is not None:
            timer.cancel()
        if pending is None:
            return
        result = action.result
        pending.done(result if isinstance(result, Mutation) else None, action.error)

    def _send_repair(self, action: SendRepair) -> None:
        """The repair, without the columns its replica said it does not know (module rules)."""
        pending = self._reads.get(action.request_id)
        mutation = action.mutation
        unknown = None if pending is None else pending.unknown.get(action.replica)
        if unknown and pending is not None and pending.command.columns is not None:
            kept = frozenset(pending.command.columns) - unknown
            mutation = restrict_columns(mutation, kept)
            if mutation.is_empty:
                self.handle(RepairAcked(action.request_id, action.replica))
                return
        unit = WriteUnit((mutation,))
        self._send_unit(action.replica, action.request_id, unit, repair=True)

    def _send_unit(self, replica: Host, request_id: int, unit: WriteUnit, *, repair: bool) -> None:
        acked: CoordinatorEvent = (
            RepairAcked(request_id, replica) if repair else MutationAcked(request_id, replica)
        )
        failed: CoordinatorEvent = (
            RepairFailed(request_id, replica) if repair else MutationFailed(request_id, replica)
        )
        if replica == self._host:

            def done(error: BaseException | None) -> None:
                self.handle(failed if error is not None else acked)

            self.group_commit.submit(unit, done)
        elif not self._messenger.send(
            replica.endpoint, Verb.MUTATION_REQ, request_id, _codec.encode_unit(unit)
        ):
            self.handle(failed)

    def _apply_units(self, units: Sequence[WriteUnit]) -> list[RingflowError | None]:
        """Runs on the storage thread: ``units`` in one transaction (``Store.apply_group``)."""
        return self._store.apply_group(
            [(unit.mutations, unit.captures) for unit in units],
            now_s=self._clock.now_ms() // 1000,
            origins=[unit.origin for unit in units],
        )

    def _send_read(self, action: SendRead) -> None:
        pending = self._reads.get(action.request_id)
        if pending is None:
            return
        command = pending.command.with_kind(action.kind)
        replica, request_id = action.replica, action.request_id
        if replica == self._host:

            def done(result: bytes | None, error: BaseException | None) -> None:
                if error is not None or result is None:
                    self.handle(ReadReplicaFailed(request_id, replica))
                else:
                    self._on_read_response(request_id, replica, result)

            self._offload(lambda: self._serve_read(command), done)
        elif not self._messenger.send(
            replica.endpoint, Verb.READ_REQ, request_id, _codec.encode_read(command)
        ):
            self.handle(ReadReplicaFailed(request_id, replica))

    def _serve_read(self, command: _codec.ReadCommand) -> bytes:
        store = self._store
        partition = store.read_mutation(
            (command.keyspace, command.table),
            command.partition_key,
            start=command.start,
            end=command.end,
        )
        unknown: frozenset[str] = frozenset()
        if command.columns is not None:
            known = self._value_columns(store.table(command.keyspace, command.table))
            wanted = frozenset(command.columns)
            unknown = wanted - known
            if partition is not None and not known <= wanted:
                partition = restrict_columns(partition, wanted)
                partition = None if partition.is_empty else partition
        digest = partition_digest(partition) if command.kind is ReadKind.DIGEST else b""
        return _codec.encode_read_response(command.kind, partition, digest, sorted(unknown))

    def _value_columns(self, table: Table) -> frozenset[str]:
        """The names of ``table``'s static and regular columns (kept per table definition)."""
        key = (table.keyspace, table.name)
        known = self._columns_of.get(key)
        if known is None or known[0] is not table:
            names = frozenset(c.name for c in (*table.static_columns, *table.regular_columns))
            known = self._columns_of[key] = (table, names)
        return known[1]

    def _on_read_response(self, request_id: int, replica: Host, payload: bytes) -> None:
        kind, partition, digest, unknown = _codec.decode_read_response(payload)
        if unknown:
            pending = self._reads.get(request_id)
            if pending is not None:
                pending.unknown[replica] = unknown
        if kind is ReadKind.DIGEST:
            self.handle(DigestReceived(request_id, replica, digest))
        else:
            self.handle(DataReceived(request_id, replica, partition))

    # -- verbs ---------------------------------------------------------------------------------

    def on_mutation_req(self, source: str, request_id: int, payload: bytes) -> None:
        self._replica_write(source, request_id, payload, Verb.MUTATION_REQ, Verb.MUTATION_RSP)

    def on_hint_req(self, source: str, request_id: int, payload: bytes) -> None:
        self._replica_write(source, request_id, payload, Verb.HINT_REQ, Verb.HINT_RSP)

    def _replica_write(
        self, source: str, request_id: int, payload: bytes, verb: Verb, answer: Verb
    ) -> None:
        unit = _codec.decode_unit(payload)
        refusal = peer_write_refusal(self._store, unit.mutations)
        if refusal is not None:
            self._refuse(source, request_id, verb, refusal)
            return
        if verb == Verb.HINT_REQ:
            unit = dataclasses.replace(unit, origin=Origin.HINT)

        def done(error: BaseException | None) -> None:
            if error is None:
                self._messenger.send(source, answer, request_id, b"")
            else:
                self._messenger.fail(source, request_id, verb, f"{type(error).__name__}: {error}")

        self.group_commit.submit(unit, done)

    def on_mutation_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        host = self._placement.host_at(source)
        if host is None:
            return
        if request_id in self._reads:
            self.handle(RepairAcked(request_id, host))
        else:
            self.handle(MutationAcked(request_id, host))

    def on_read_req(self, source: str, request_id: int, payload: bytes) -> None:
        command = _codec.decode_read(payload)

        def done(result: bytes | None, error: BaseException | None) -> None:
            if error is None and result is not None:
                self._messenger.send(source, Verb.READ_RSP, request_id, result)
            else:
                self._messenger.fail(source, request_id, Verb.READ_REQ, f"{error}")

        self._offload(lambda: self._serve_read(command), done)

    def on_read_rsp(self, source: str, request_id: int, payload: bytes) -> None:
        host = self._placement.host_at(source)
        if host is not None:
            self._on_read_response(request_id, host, payload)

    def on_failure(self, request_id: int, host: Host, verb: int) -> None:
        """``host`` failed point request ``request_id`` (FAILURE_RSP for ``verb``: READ_REQ, or
        MUTATION_REQ for a write or a read repair)."""
        if verb == Verb.READ_REQ:
            self.handle(ReadReplicaFailed(request_id, host))
        elif request_id in self._reads:
            self.handle(RepairFailed(request_id, host))
        else:
            self.handle(MutationFailed(request_id, host))


class _UnitBuilder:
    """The mutations (and CDC captures) of one write unit being gathered."""

    def __init__(self, replicas: TokenReplicas) -> None:
        self.replicas = replicas
        self.mutations: list[Mutation] = []
        self.captures: list[tuple[int, CdcCapture]] = []
        self.cells = 0

    def fits(self, cells: int, limits: StoreLimits) -> bool:
        return (
            len(self.mutations) < limits.max_batch_mutations
            and self.cells + cells <= limits.max_batch_cells
        )

    def add(self, mutation: Mutation, capture: CdcCapture | None, cells: int) -> None:
        if capture is not None:
            self.captures.append((len(self.mutations), capture))
        self.mutations.append(mutation)
        self.cells += cells

    def unit(self) -> WriteUnit:
        return WriteUnit(tuple(self.mutations), tuple(self.captures))
