"""The demo's replication part: replica-side replication (seed 002) running while the edge is
written to, through an edge node's crash and a hub outage (``ringflow demo``, issue 14 §3).

1. Three channels are created as a user does (``ringflow replication channel create``): the hub
   (priority 90), the Parquet lake (50) and PostgreSQL (30), each slicing the table in 5 s x 4
   slices.
2. ``ringflow replicate --capture replica --continuous`` starts in this process (its own thread,
   its log in ``job.log``), before the workload: every node captures what it stores, the job
   sends each sealed slice once, from its active replica.
3. Halfway through the workload the hub node is SIGKILLed (an edge site's link going down). It
   stays away at least ``HUB_OUTAGE_S``: the status table shows it ``unreachable since ...``
   with its backlog growing while the lake and PostgreSQL go on. Then it is restarted on its
   data and catches up.
4. Every few seconds a look at ``ringflow replication status`` is kept, for the plot of backlog
   and lag per channel over the run (``replication.png``).
5. Once each destination equals the edge table (bounded wait), the job stops; its summary gives
   sends per unique change per channel (1.00 means every change was sent once).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ringflow.cli import main as cli_main

if TYPE_CHECKING:
    from ringflow.cli._demo import Stage
    from ringflow.pipeline import ReplicationStatus

SLICE_WIDTH_S = 5
SLICE_COUNT = 4  # a 20 s window: longer than the edge node's outage and its hints' replay
HUB_OUTAGE_S = 15.0
REPORT_WAIT_S = 90.0
"""How long the demo waits for the job to report the hub unreachable: a loaded machine (a CI
run with other work beside it) made the job's report late by more than 30 s."""
SAMPLE_EVERY_S = 2.0
SAMPLES_KEPT = 2000
CHANNELS = (("hub", 90), ("lake", 50), ("postgres", 30))


def channel_urls(stage: Stage) -> dict[str, str]:
    return {
        "hub": stage.security.hub_url(stage.hub.endpoint),
        "lake": f"parquet:{stage.workdir / 'lake'}",
        "postgres": stage.postgres_url,
    }


def create_channels(console: Console, stage: Stage, table: str) -> None:
    """The channels, created through the CLI as a user would (the commands are shown)."""
    urls = channel_urls(stage)
    for name, priority in CHANNELS:
        arguments = [
            *("replication", "channel", "create", name, "--source", stage.edge.contact_points),
            *("--table", table, "--to", urls[name], "--priority", str(priority)),
            *("--slice-width-s", str(SLICE_WIDTH_S), "--slice-count", str(SLICE_COUNT)),
            *stage.security.edge_arguments(),
        ]
        shown = " ".join(arguments).replace(stage.postgres_url, "postgresql://...")
        console.print(f"[dim]$ ringflow {shown}")
        if cli_main(arguments) != 0:
            raise RuntimeError(f"could not create channel {name}")


@dataclass(slots=True)
class RunningJob:
    """The replica job in its thread, and the looks at the status taken meanwhile."""

    job: Any
    spark: Any
    stop: threading.Event
    thread: threading.Thread
    sampler: threading.Thread
    samples: deque[ReplicationStatus] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    summary: Any = None
    error: BaseException | None = None


@contextmanager
def replica_job(console: Console, stage: Stage, master: str) -> Iterator[RunningJob]:
    """The job running (module docstring, 2 and 4) until the block ends."""
    from ringflow.pipeline import (
        ChannelSpec,
        ReplicaJob,
        plan_replica_job,
        read_status,
        replica_spark,
        spark_settings,
        status_view,
    )

    security = stage.security
    plan = plan_replica_job(
        stage.edge.contact_points,
        stage.workdir / "checkpoints",
        ChannelSpec(),
        login=security.job_login(),
        tls=security.job_tls(),
    )
    console.print("[bold]starting Spark[/] (local mode) and the replica-side job ...")
    priorities = [p.channel.priority for p in plan.channels]
    spark = replica_spark(
        "ringflow-demo", spark_settings(master), priorities, stage.workdir / "checkpoints"
    )
    # the job reports each failure itself (job.log, the status); Spark's own ERROR lines with
    # the JVM stack of every failed attempt to reach the hub would bury the story
    spark.sparkContext.setLogLevel("OFF")
    log = (stage.workdir / "job.log").open("w")
    job = ReplicaJob(spark, plan, once=False, console=Console(file=log, width=160))
    stop = threading.Event()
    view = status_view(stage.edge.addresses, 9042, edge=security.edge(stage.edge.contact_points))

    def run() -> None:
        try:
            running.summary = job.run(stop)
        except BaseException as error:  # shown by the story; the thread must not die silently
            running.error = error

    def sample() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # a node down at that moment: look again
                running.samples.append(read_status(view))
            stop.wait(SAMPLE_EVERY_S)

    running = RunningJob(
        job,
        spark,
        stop,
        threading.Thread(target=run, name="replica-job", daemon=True),
        threading.Thread(target=sample, name="status-sampler", daemon=True),
    )
    running.thread.start()
    running.sampler.start()
    console.print(f"job running; its log: {stage.workdir / 'job.log'}")
    try:
        yield running
    finally:
        stop.set()
        running.thread.join(120)
        running.sampler.join(30)
        view.close()
        spark.stop()
        log.close()


def show_status(
    console: Console,
    stage: Stage,
    title: str,
    until: Callable[[ReplicationStatus], bool] | None = None,
    timeout_s: float = 30.0,
) -> ReplicationStatus | None:
    """``ringflow replication status``, printed under ``title``; with ``until``, the first look
    for which it holds (the job reports every few seconds), or the last at the timeout."""
    from ringflow.cli._replication_status import print_status
    from ringflow.pipeline import read_status, status_view

    edge = stage.security.edge(stage.edge.contact_points)
    view = status_view(stage.edge.addresses, 9042, edge=edge)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            status = read_status(view)
            if until is None or until(status) or time.monotonic() > deadline:
                break
            time.sleep(1.0)
    except Exception as error:  # the story goes on without this table
        console.print(f"[yellow]status not available: {error}")
        return None
    finally:
        view.close()
    console.print(f"[bold]$ ringflow replication status[/] ({title})")
    print_status(console, status)
    return status


def hub_reported(unreachable: bool) -> Callable[[ReplicationStatus], bool]:
    """Whether the hub channel's job has reported it unreachable (or, false: not any more)."""

    def reported(status: ReplicationStatus) -> bool:
        job = status.jobs.get("hub")
        return job is not None and job.state.startswith("unreachable") == unreachable

    return reported


def hub_outage(console: Console, stage: Stage, since: float) -> Callable[[], None]:
    """What ends the outage: wait until it lasted ``HUB_OUTAGE_S``, show the status, restart."""

    def end() -> None:
        left = HUB_OUTAGE_S - (time.monotonic() - since)
        if left > 0:
            console.print(f"the hub stays away {left:.0f}s more; the other channels go on")
            time.sleep(left)
        reported = hub_reported(unreachable=True)
        show_status(console, stage, "the hub is away", reported, timeout_s=REPORT_WAIT_S)
        stage.hub.start()
        console.print(
            f"[green]hub node restarted[/] after {time.monotonic() - since:.0f}s away: "
            "its channel catches up from its checkpoint"
        )

    return end


def wait_delivered(
    console: Console, check: Callable[[], bool], running: RunningJob, timeout_s: float
) -> float | None:
    """Seconds until ``check()`` (every destination equals the edge), or None at the timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if running.error is not None:
            console.print(f"[red]the job failed: {running.error}")
            return None
        try:
            if check():
                return time.monotonic() - started
        except Exception:  # a destination still restarting: look again
            pass
        time.sleep(2.0)
    return None


def plot_replication(running: RunningJob, path: Path) -> bool:
    from ringflow.pipeline import plot_status

    samples = list(running.samples)
    if not samples:
        return False
    plot_status(samples, path)
    return True
