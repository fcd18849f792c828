"""``ringflow replication status``: what replica-side replication has still to do, read from the
edge cluster (issue 14 §3; REPLICATION.md "What users see").

One look (:func:`read_status`) reads what the job's coordinator reads (:class:`ClusterView`:
the hosts and their liveness, the stored channels, per table the slice starts each live node
holds (``local_slices``), the published copies, seal watermarks and ``sent`` records of those
starts, the ranks) and hands them to the pure ``replication.channel_backlogs`` and
``replication.node_slices``, so the status and the job decide alike. To that it adds what the
job running each channel last said of it (``system_replication.channel_progress``, read by
``load_channel_progress``: state, ``unreachable since ...``, sends and unique changes, lag).

A node that is down is not asked what it holds: its slices show up once it is back (its copies
of a range are sent by others meanwhile). Open slices (not sealed yet) are not backlog: they
become so when they seal.

:func:`plot_status` draws a PNG of backlog (rows) and lag per channel over a series of looks
(``ringflow replication status --watch S --plot FILE``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from ringflow.pipeline._channel_store import ChannelProgressRow, load_channel_progress
from ringflow.pipeline._cluster_client import ClusterOptions
from ringflow.pipeline._replica_view import ClusterView
from ringflow.replication import (
    REPLICATION_KEYSPACE,
    Channel,
    ChannelBacklog,
    NodeSlices,
    channel_backlogs,
    node_slices,
)


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """A node: where it listens, and its ranks and copies (``replication.NodeSlices``)."""

    address: str
    slices: NodeSlices


@dataclass(slots=True)
class ReplicationStatus:
    """One look at the edge cluster (module docstring)."""

    at_ms: int
    channels: list[Channel]
    backlogs: dict[str, ChannelBacklog]
    jobs: dict[str, ChannelProgressRow]
    nodes: list[NodeStatus]
    unreachable_nodes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """Plain values (for ``--json``, scripts and tests)."""
        channels = []
        for channel in self.channels:
            backlog = self.backlogs.get(channel.name)
            job = self.jobs.get(channel.name)
            channels.append(
                {
                    "channel": channel.name,
                    "table": channel.source,
                    "destination": channel.display_destination,
                    "priority": channel.priority,
                    "order": channel.order.value,
                    "backlog_slices": backlog.slices if backlog else 0,
                    "backlog_waiting": backlog.waiting if backlog else 0,
                    "backlog_rows": backlog.rows if backlog else 0,
                    "oldest_age_s": backlog.oldest_age_s(self.at_ms) if backlog else None,
                    "state": job.state if job else None,
                    "unreachable_since_ms": job.unreachable_since_ms if job else None,
                    "sends": job.sends if job else None,
                    "unique_changes": job.unique_changes if job else None,
                    "sends_per_change": (
                        job.sends / job.unique_changes if job and job.unique_changes else None
                    ),
                    "lag_s": None if job is None or job.lag_ms is None else job.lag_ms / 1000,
                    "job_updated_at_ms": job.updated_at_ms if job else None,
                }
            )
        nodes = [
            {
                "node": str(node.slices.node),
                "address": node.address,
                "live": node.slices.live,
                "active_by_rank": list(node.slices.active_by_rank),
                "matched": node.slices.matched,
                "mismatched": node.slices.mismatched,
                "out_of_sequence": node.slices.out_of_sequence,
            }
            for node in self.nodes
        ]
        return {
            "at_ms": self.at_ms,
            "channels": channels,
            "nodes": nodes,
            "unreachable_nodes": self.unreachable_nodes,
        }


def read_status(view: ClusterView, now_ms: int | None = None) -> ReplicationStatus:
    """One look at the edge cluster through ``view`` (module docstring)."""
    at_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    hosts = view.hosts()
    live = {state.host_id for state in hosts if state.up}
    channels = sorted(view.channels(), key=lambda c: c.name)
    tables: dict[tuple[str, str], list[Channel]] = {}
    for channel in channels:
        tables.setdefault((channel.source_keyspace, channel.source_table), []).append(channel)
    backlogs: dict[str, ChannelBacklog] = {}
    unreachable: set[uuid.UUID] = set()
    per_keyspace: dict[str, list[NodeSlices]] = {}
    ring = view.ring_ranges()
    for (keyspace, table), table_channels in sorted(tables.items()):
        held, failed = view.held(keyspace, table, live - unreachable)
        unreachable.update(failed)
        starts = sorted(held)
        sealed = view.sealed(keyspace, table, starts)
        watermarks = view.watermarks(keyspace, table)
        sent = [r for c in table_channels for r in view.sent(keyspace, table, c.name, starts)]
        replicas_of = view.replicas_of(keyspace)
        up = live - unreachable
        backlogs.update(
            channel_backlogs(
                table_channels, sealed, watermarks, sent, replicas_of=replicas_of, live=up
            )
        )
        nodes_seen = node_slices(
            sealed,
            ranges=ring,
            replicas_of=replicas_of,
            live=up,
            nodes=[state.host_id for state in hosts],
        )
        per_keyspace.setdefault(keyspace, []).extend(nodes_seen.values())
    addresses = {state.host_id: state.address for state in hosts}
    nodes = [
        NodeStatus(addresses.get(node, "?"), slices)
        for node, slices in sorted(_summed(per_keyspace, live - unreachable).items())
    ]
    return ReplicationStatus(
        at_ms,
        channels,
        backlogs,
        load_channel_progress(view.session),
        nodes,
        sorted(addresses.get(node, str(node)) for node in unreachable),
    )


def _summed(
    per_keyspace: Mapping[str, Sequence[NodeSlices]], live: set[uuid.UUID]
) -> dict[uuid.UUID, NodeSlices]:
    """Each node's figures over every table: active ranges by rank per keyspace (a keyspace's
    tables share its ranges: counted once), copies summed over the tables."""
    active: dict[uuid.UUID, list[int]] = {}
    copies: dict[uuid.UUID, list[int]] = {}
    for entries in per_keyspace.values():
        ranks: dict[uuid.UUID, tuple[int, ...]] = {}
        for entry in entries:
            ranks[entry.node] = tuple(
                max(a, b)
                for a, b in zip_longest(
                    ranks.get(entry.node, ()), entry.active_by_rank, fillvalue=0
                )
            )
            counts = copies.setdefault(entry.node, [0, 0, 0])
            counts[0] += entry.matched
            counts[1] += entry.mismatched
            counts[2] += entry.out_of_sequence
        for node, by_rank in ranks.items():
            total = active.setdefault(node, [])
            total[:] = [a + b for a, b in zip_longest(total, by_rank, fillvalue=0)]
    return {
        node: NodeSlices(node, node in live, tuple(active.get(node, ())), *copies[node])
        for node in copies
    }


def status_view(
    hosts: Sequence[str], port: int, *, edge: ClusterOptions | None = None
) -> ClusterView:
    """The driver's view of the edge cluster the status reads (close it after); ``edge``: its
    options with a login and TLS (``edge_options``), which then name the hosts."""
    if edge is None:
        edge = ClusterOptions(
            tuple(hosts), REPLICATION_KEYSPACE, "channels", port, consistency="QUORUM"
        )
    return ClusterView(edge)


def plot_status(samples: Sequence[ReplicationStatus], path: Path) -> None:
    """Backlog rows and lag per channel over the looks in ``samples``, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start_ms = samples[0].at_ms if samples else 0
    figure, (backlog_axis, lag_axis) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    names = sorted({c.name for s in samples for c in s.channels})
    for name in names:
        xs = [(s.at_ms - start_ms) / 1000 for s in samples]
        rows = [_backlog_rows(s.backlogs, name) for s in samples]
        lags = [_lag_s(s.jobs.get(name)) for s in samples]
        backlog_axis.plot(xs, rows, label=name)
        lag_axis.plot(xs, lags, label=name)
    backlog_axis.set_ylabel("backlog (rows)")
    lag_axis.set_ylabel("lag (s)")
    lag_axis.set_xlabel("time (s)")
    backlog_axis.set_title("replica-side replication: backlog and lag per channel")
    for axis in (backlog_axis, lag_axis):
        axis.grid(alpha=0.3)
        if names:
            axis.legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _backlog_rows(backlogs: Mapping[str, ChannelBacklog], name: str) -> float:
    backlog = backlogs.get(name)
    return float(backlog.rows) if backlog else 0.0


def _lag_s(job: ChannelProgressRow | None) -> float:
    return float("nan") if job is None or job.lag_ms is None else job.lag_ms / 1000
