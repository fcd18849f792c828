"""What the job's coordinator reads from (and writes to) the edge cluster, through the driver.

The I/O of :mod:`._replica_coordinator`, which keeps the decisions pure (``replication.
plan_sends``, the permit broker, :mod:`._replica_ledger`). All reads and writes of the
replicated ``system_replication`` tables are at QUORUM (REPLICATION.md decision 4: a node
publishes its slices and then its watermark at QUORUM, so a QUORUM reader that sees the
watermark sees the slices); node-local tables go through sessions pinned to the node
(:mod:`._replica_reads`).

- **Hosts and liveness**: the driver's view (host id, address, DC, rack, up or down: the driver
  follows the cluster's gossip events and its own connections), so a node the job cannot reach
  counts as dead (``replication._planner``: "a node is live when gossip has it up *and* the job
  can read from it").
- **Ranks**: ``ringflow.ring`` strategies over the driver's token map and the keyspace's
  replication map (``system_schema.keyspaces``): a range's replicas in strategy order, primary
  first, for its end token in today's ring (``replication._ranks``).
- **Slices, watermarks, sent**: by partition, i.e. by (keyspace, table[, channel], slice start),
  only for the slice starts the coordinator still has to decide (bounded by its caller).
- **Channel progress**: the job's rows of ``channel_progress`` (``ringflow replication status``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cassandra import ConsistencyLevel
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import SimpleStatement

from ringflow.pipeline._channel_store import (
    ChannelProgressRow,
    load_channels,
    save_channel_progress,
)
from ringflow.pipeline._cluster_client import ClusterOptions, connect, load_table
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._replica_offsets import ReplicaReadError
from ringflow.pipeline._replica_reads import NodeAddress, copy_digests, held_slice_starts
from ringflow.replication import (
    REPLICATION_KEYSPACE,
    SENT_TABLE,
    SLICES_TABLE,
    WATERMARKS_TABLE,
    Channel,
    PlannedSend,
    ReplicasOf,
    SealedSlice,
    SealWatermark,
    SentRecord,
    sealed_slice_from_row,
    sent_from_row,
    sent_to_row,
    watermark_from_row,
)
from ringflow.ring import Host, RingError, TokenMetadata, TokenRange, replication_strategy
from ringflow.schema import Table

READ_CONCURRENCY: Final = 16
_KS = REPLICATION_KEYSPACE
_SLICES = (
    f"SELECT * FROM {_KS}.{SLICES_TABLE} WHERE keyspace_name = ? AND table_name = ? "
    "AND slice_start_ms = ?"
)
_SENT = (
    f"SELECT * FROM {_KS}.{SENT_TABLE} WHERE keyspace_name = ? AND table_name = ? "
    "AND channel = ? AND slice_start_ms = ?"
)
_WATERMARKS = f"SELECT * FROM {_KS}.{WATERMARKS_TABLE} WHERE keyspace_name = %s AND table_name = %s"
_SENT_COLUMNS = (
    "keyspace_name",
    "table_name",
    "channel",
    "slice_start_ms",
    "range_start",
    "range_end",
    "out_of_sequence",
    "node",
    "digest",
    "sent_at_ms",
)
_INSERT_SENT = (
    f"INSERT INTO {_KS}.{SENT_TABLE} ({', '.join(_SENT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _SENT_COLUMNS)})"
)


@dataclass(frozen=True, slots=True)
class HostState:
    """One node as the driver sees it."""

    host_id: uuid.UUID
    address: str
    dc: str
    rack: str
    up: bool


class ClusterView:
    """The coordinator's connection to the edge cluster (module docstring)."""

    def __init__(self, options: ClusterOptions) -> None:
        self.options = options
        self.cluster, self.session = connect(options)
        self._prepared: dict[str, Any] = {}
        self._replication: dict[str, Mapping[str, str]] = {}
        self._ring: tuple[frozenset[tuple[uuid.UUID, int]], TokenMetadata] | None = None

    def close(self) -> None:
        self.cluster.shutdown()

    def _statement(self, query: str) -> Any:
        statement = self._prepared.get(query)
        if statement is None:
            statement = self.session.prepare(query)
            statement.consistency_level = ConsistencyLevel.QUORUM
            self._prepared[query] = statement
        return statement

    # --- hosts, liveness, ranks ---------------------------------------------------------------

    def hosts(self) -> tuple[HostState, ...]:
        states = []
        for host in self.cluster.metadata.all_hosts():
            if host.host_id is None:
                continue
            states.append(
                HostState(
                    host.host_id,
                    str(host.address),
                    host.datacenter or "datacenter1",
                    host.rack or "rack1",
                    bool(host.is_up),
                )
            )
        return tuple(sorted(states, key=lambda state: state.address))

    def node(self, host_id: uuid.UUID) -> NodeAddress:
        """Where ``host_id`` listens (ReplicaReadError if the driver does not know it)."""
        for state in self.hosts():
            if state.host_id == host_id:
                options = self.options
                return NodeAddress(
                    state.address,
                    options.port,
                    options.connect_timeout_s,
                    options.request_timeout_s,
                    options.username,
                    options.password,
                    options.tls,
                )
        raise ReplicaReadError(f"node {host_id} is not in the edge cluster's ring")

    def _token_metadata(self) -> TokenMetadata:
        token_map = self.cluster.metadata.token_map
        if token_map is None:
            raise PipelineConfigError("the driver has no token map of the edge cluster yet")
        hosts = {state.host_id: state for state in self.hosts()}
        owned: dict[uuid.UUID, list[int]] = {}
        for token, owner in token_map.token_to_host_owner.items():
            if owner.host_id in hosts:
                owned.setdefault(owner.host_id, []).append(int(token.value))
        signature = frozenset((node, token) for node, tokens in owned.items() for token in tokens)
        if self._ring is None or self._ring[0] != signature:
            metadata = TokenMetadata(
                {
                    Host(node, hosts[node].address, hosts[node].dc, hosts[node].rack): tokens
                    for node, tokens in owned.items()
                }
            )
            self._ring = (signature, metadata)
        return self._ring[1]

    def ring_ranges(self) -> list[TokenRange]:
        """Today's vnode ranges of the ring, each ``(previous token, token]``."""
        metadata = self._token_metadata()
        return [metadata.range_ending_at(i) for i in range(len(metadata.sorted_tokens))]

    def replicas_of(self, keyspace: str) -> ReplicasOf:
        """A range's replicas (host ids) in ``keyspace``'s strategy order, today's ring."""
        replication = self._replication.get(keyspace)
        if replication is None:
            row = self.session.execute(
                SimpleStatement(
                    "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s"
                ),
                (keyspace,),
            ).one()
            if row is None:
                raise PipelineConfigError(f"unknown keyspace {keyspace!r}")
            replication = self._replication[keyspace] = dict(row["replication"])
        metadata = self._token_metadata()
        try:
            strategy = replication_strategy(replication, sorted(metadata.datacenters()))
        except RingError as error:
            raise PipelineConfigError(f"keyspace {keyspace}: {error}") from None

        def replicas(token_range: TokenRange) -> Sequence[uuid.UUID]:
            return [host.host_id for host in strategy.replicas(token_range.right, metadata)]

        return replicas

    def table(self, keyspace: str, name: str) -> Table:
        """The source table as it is now (its schema metadata refreshed first: a job follows
        an ``ALTER TABLE``); PipelineConfigError when it cannot be loaded."""
        try:
            self.cluster.refresh_table_metadata(keyspace, name)
        except Exception as error:  # the driver's many errors: the edge is not there now
            raise PipelineConfigError(f"cannot load {keyspace}.{name}: {error}") from None
        return load_table(self.cluster, keyspace, name)

    # --- system_replication ---------------------------------------------------------------------

    def channels(self) -> list[Channel]:
        return load_channels(self.session)

    def _partitions(self, query: str, params: Sequence[tuple[object, ...]]) -> list[Any]:
        rows: list[Any] = []
        if not params:
            return rows
        statement = self._statement(query)
        results = execute_concurrent_with_args(
            self.session, statement, params, concurrency=READ_CONCURRENCY, raise_on_first_error=True
        )
        for result in results:
            rows.extend(result.result_or_exc)
        return rows

    def sealed(self, keyspace: str, table: str, starts: Iterable[int]) -> list[SealedSlice]:
        params = [(keyspace, table, start) for start in sorted(set(starts))]
        return [sealed_slice_from_row(row) for row in self._partitions(_SLICES, params)]

    def sent(
        self, keyspace: str, table: str, channel: str, starts: Iterable[int]
    ) -> list[SentRecord]:
        params = [(keyspace, table, channel, start) for start in sorted(set(starts))]
        return [sent_from_row(row) for row in self._partitions(_SENT, params)]

    def watermarks(self, keyspace: str, table: str) -> list[SealWatermark]:
        statement = SimpleStatement(_WATERMARKS, consistency_level=ConsistencyLevel.QUORUM)
        return [
            watermark_from_row(row) for row in self.session.execute(statement, (keyspace, table))
        ]

    def write_sent(self, records: Sequence[SentRecord]) -> None:
        """``sent`` rows at QUORUM (the table's TTL applies); raises on the first failure."""
        params = [
            tuple(sent_to_row(record)[column] for column in _SENT_COLUMNS) for record in records
        ]
        self._partitions(_INSERT_SENT, params)

    def write_channel_progress(self, rows: Sequence[ChannelProgressRow]) -> None:
        """The channels' progress rows at QUORUM (``channel_progress``, TTL a day); raises on
        the first failure, each write bounded (``save_channel_progress``)."""
        save_channel_progress(self.session, rows)

    # --- node-local -----------------------------------------------------------------------------

    def held(
        self, keyspace: str, table: str, live: Iterable[uuid.UUID]
    ) -> tuple[dict[int, frozenset[uuid.UUID]], tuple[uuid.UUID, ...]]:
        """Slice start -> the live nodes holding a slice there (``local_slices``), and the live
        nodes that could not be asked (treated as dead this round by the caller)."""
        holders: dict[int, set[uuid.UUID]] = {}
        failed: list[uuid.UUID] = []
        for node in sorted(live):
            try:
                starts = held_slice_starts(self.node(node), keyspace, table)
            except ReplicaReadError:
                failed.append(node)
                continue
            for start in starts:
                holders.setdefault(start, set()).add(node)
        return {start: frozenset(nodes) for start, nodes in holders.items()}, tuple(failed)

    def copy_digests(self, node: uuid.UUID, copies: Sequence[PlannedSend]) -> list[list[int]]:
        return copy_digests(self.node(node), copies)
