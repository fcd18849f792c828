"""What the replica job tells of its channels (``pipeline._replica_job``: metrics figures and
``channel_progress`` rows; ``pipeline._channel_store``: the rows written and read back).

What it proves: a channel's backlog is its planned copies plus those granted and not committed
(rows and oldest slice likewise); the figures of a channel that backs off say unreachable since
when, with its failures, and a channel the coordinator has no progress of yet leaves the
backlog and sends out (unknown, not 0); a progress row carries the run's state and the
coordinator's sends, unique changes and lag; rows are checked when made and when read back (a
negative count or a missing channel is refused naming it), and the store writes every row at
QUORUM and reads them back by channel; a job whose progress writes fail goes on (said once per
error) and its metrics still follow.
"""

from __future__ import annotations

import logging
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
from cassandra import ConsistencyLevel

from ringflow.pipeline import (
    ChannelProgressRow,
    ClusterOptions,
    JobMetrics,
    PipelineConfigError,
    ReplicaJob,
    load_channel_progress,
)
from ringflow.pipeline._channel_store import save_channel_progress
from ringflow.pipeline._replica_coordinator import ChannelProgress
from ringflow.pipeline._replica_job import ChannelRun, channel_figures, progress_rows
from ringflow.pipeline._replica_plan import ReplicaChannelPlan, ReplicaJobPlan
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


def test_progress_rows_carry_the_state_and_the_coordinators_figures() -> None:
    lake, hub = run("lake"), run("hub")
    lake.rows, lake.status = 120, "done"
    hub.backoff.failed(NOW_MS - 30_000, "ConnectionRefused")
    hub.status = hub.backoff.status(NOW_MS)
    progress = {"lake": ChannelProgress(sends=125, unique=120, lag_ms=3_500)}
    rows = {r.channel: r for r in progress_rows(progress, {"lake": lake, "hub": hub}, "j", NOW_MS)}
    assert rows["lake"] == ChannelProgressRow(
        "lake", "j", "done", None, 120, 125, 120, 3_500, NOW_MS
    )
    assert rows["hub"].state.startswith("unreachable since")
    assert rows["hub"].unreachable_since_ms == NOW_MS - 30_000
    assert (rows["hub"].sends, rows["hub"].lag_ms) == (0, None)
    assert rows["lake"].sends_per_unique == 125 / 120


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"rows": -1}, "rows"),
        ({"sends": True}, "sends"),
        ({"lag_ms": "3"}, "lag_ms"),
        ({"updated_at_ms": None}, "updated_at_ms"),
        ({"channel": None}, "channel"),
    ],
)
def test_a_bad_progress_row_is_refused_naming_the_column(
    change: dict[str, object], named: str
) -> None:
    row = {"channel": "lake", "job": "j", "state": "running", "unreachable_since_ms": None}
    row |= {"rows": 1, "sends": 1, "unique_changes": 1, "lag_ms": None, "updated_at_ms": 5}
    with pytest.raises(PipelineConfigError, match=named):
        ChannelProgressRow(**(row | change))  # type: ignore[arg-type]


class FakeSession:
    """Records the statements (with their consistency) and answers the SELECT with ``rows``."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.writes: list[tuple[str, Any, tuple[object, ...], float]] = []

    def execute_async(self, statement: Any, values: tuple[object, ...], timeout: float) -> Any:
        self.writes.append((statement.query_string, statement.consistency_level, values, timeout))

        class Done:
            def result(self) -> None:
                return None

        return Done()

    def execute(self, statement: Any) -> list[dict[str, Any]]:
        assert statement.consistency_level == ConsistencyLevel.QUORUM
        assert "channel_progress" in statement.query_string
        return self.rows


def test_rows_are_written_at_quorum_and_read_back_by_channel() -> None:
    rows = [
        ChannelProgressRow("lake", "j", "running", None, 10, 10, 10, 1_200, NOW_MS),
        ChannelProgressRow("hub", "j", "unreachable since x", NOW_MS - 5, 0, 0, 0, None, NOW_MS),
    ]
    session = FakeSession([])
    save_channel_progress(session, rows, timeout_s=1.5)
    assert [w[2] for w in session.writes] == [astuple(r) for r in rows]
    assert {(w[1], w[3]) for w in session.writes} == {(ConsistencyLevel.QUORUM, 1.5)}
    assert "INSERT INTO system_replication.channel_progress" in session.writes[0][0]
    columns = ChannelProgressRow.__dataclass_fields__
    stored = [dict(zip(columns, astuple(row), strict=True)) for row in rows]
    assert load_channel_progress(FakeSession(stored)) == {"hub": rows[1], "lake": rows[0]}
    with pytest.raises(PipelineConfigError, match="'lake' progress: rows"):
        load_channel_progress(FakeSession([stored[0] | {"rows": -3}]))


class FailingView:
    """A ClusterView whose progress writes fail (QUORUM away)."""

    def __init__(self) -> None:
        self.attempts = 0

    def write_channel_progress(self, rows: list[ChannelProgressRow]) -> None:
        self.attempts += 1
        raise OSError("Unavailable: QUORUM")


class FixedCoordinator:
    def progress(self, name: str) -> ChannelProgress:
        return ChannelProgress(sends=7, unique=7)


def test_a_progress_write_that_fails_leaves_the_job_and_its_metrics_going(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = ClusterOptions(("127.0.0.1",), "system_replication", "channels", 9042)
    plan = ReplicaJobPlan(source, (run("lake").plan,), Path("/nonexistent"), 1)
    metrics = JobMetrics()
    job = ReplicaJob(None, plan, metrics=metrics)
    view = FailingView()
    job._view = view  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="ringflow.replica"):
        for _ in range(3):
            job._tell(FixedCoordinator(), NOW_MS, write=True)  # type: ignore[arg-type]
    assert view.attempts == 3
    assert len(caplog.records) == 1, "said once per error"
    assert job.progress_write_error == "OSError: Unavailable: QUORUM"
    sends = [m for m in metrics.collect() if m.name == "ringflow_replication_sends"]
    assert [s.value for s in sends[0].samples if s.name.endswith("_total")] == [7]
