"""What the replica job tells of its channels (``pipeline._replica_job``: metrics figures).

What it proves: a channel's backlog is its planned copies plus those granted and not committed
(rows and oldest slice likewise); the figures of a channel that backs off say unreachable since
when, with its failures, and a channel the coordinator has no progress of yet leaves the
backlog and sends out (unknown, not 0).
"""

from __future__ import annotations

from ringflow.pipeline._replica_coordinator import ChannelProgress
from ringflow.pipeline._replica_job import ChannelRun, channel_figures
from ringflow.pipeline._replica_plan import ReplicaChannelPlan
from ringflow.replication import Channel
from ringflow.schema import INT, TEXT, Table

TABLE = Table.create("ks", "t", partition_key=[("id", INT)], regular=[("name", TEXT)])
NOW_MS = 1_800_000_000_000


def run(name: str) -> ChannelRun:
    plan = ReplicaChannelPlan(Channel(name, "ks", "t", "parquet:/lake"), TABLE, None)
    return ChannelRun(plan, None, TABLE)


def test_the_backlog_is_planned_plus_in_flight_copies() -> None:
    progress = ChannelProgress(
        pending_copies=3,
        pending_rows=30,
        oldest_pending_ms=5_000,
        ready=1,
        handed=2,
        in_flight_rows=12,
        oldest_in_flight_ms=2_000,
    )
    assert (progress.backlog_copies, progress.backlog_rows) == (6, 42)
    assert progress.oldest_backlog_ms == 2_000
    assert ChannelProgress().oldest_backlog_ms is None
    assert ChannelProgress(oldest_pending_ms=7).oldest_backlog_ms == 7


def test_figures_say_backlog_lag_sends_and_an_unreachable_destination() -> None:
    lake, hub = run("lake"), run("hub")
    lake.rows, lake.batches = 120, 4
    hub.failures = 2
    hub.backoff.failed(NOW_MS - 30_000, "ConnectionRefused")
    progress = {
        "lake": ChannelProgress(
            pending_copies=2,
            pending_rows=20,
            oldest_pending_ms=NOW_MS - 9_000,
            sends=125,
            unique=120,
            lag_ms=3_500,
        )
    }
    figures = channel_figures(progress, {"lake": lake, "hub": hub}, NOW_MS)
    assert figures["lake"].reachable and figures["lake"].unreachable_since_seconds is None
    assert (figures["lake"].rows, figures["lake"].batches) == (120, 4)
    assert (figures["lake"].backlog_slices, figures["lake"].backlog_rows) == (2, 20)
    assert figures["lake"].backlog_oldest_seconds == 9.0
    assert (figures["lake"].sends, figures["lake"].unique_changes) == (125, 120)
    assert figures["lake"].lag_seconds == 3.5
    assert not figures["hub"].reachable
    assert figures["hub"].unreachable_since_seconds == (NOW_MS - 30_000) / 1000
    assert figures["hub"].failures == 2
    # no progress from the coordinator yet: unknown, not 0
    assert figures["hub"].backlog_slices is None and figures["hub"].sends is None
    assert figures["hub"].lag_seconds is None
