"""``ringflow demo``: the whole story on one machine, from an empty directory to a verified copy.

1. Start an edge cluster of 3 real node processes (127.0.0.1-3, the code of ``ringflow cluster
   start``), a hub node (127.0.0.11) and a throwaway PostgreSQL server (``_demo_cluster``,
   ``_demo_postgres``); every wait is bounded.
2. Create ``shop.orders`` (RF 3, CDC enabled) on the edge and the same table on the hub, and
   three replication channels (``ringflow replication channel create``): the hub (priority 90),
   a Parquet change lake (50) and PostgreSQL (30), in 5 s x 4 time slices.
3. Start ``ringflow replicate --capture replica --continuous`` (replica-side replication, seed
   002: every edge node captures what it stores; each sealed slice is sent once, by its active
   replica), then run a write workload through the Scylla driver (token-aware, QUORUM, prepared
   statements): inserts (some with a 2 h TTL), updates (some with a 1 s TTL, expired long
   before the check), set additions, column, row and range deletes. (Short TTLs go on UPDATEs,
   not INSERTs: the hub sink cannot replay the expired row marker of an INSERT whose TTL ran
   out before replication, so a short-TTL INSERT over an older row would leave the row alive
   on the hub.)
4. A third of the way in, SIGKILL one edge node; the workload goes on at QUORUM with 2 of 3
   replicas (the coordinators keep hints for the dead one; its ranges fail over to the next
   replica for transmission). Halfway, SIGKILL the hub node: the hub channel backs off,
   ``ringflow replication status`` shows it ``unreachable since ...`` with its backlog, the
   lake and PostgreSQL go on. Two thirds of the way in, restart the edge node. After the
   workload (and at least 15 s of hub outage) restart the hub on its data: it catches up.
   Wait (bounded) until the restarted edge node alone, read at ONE, has every row (hints).
5. Wait (bounded) until every destination equals the edge table read at ALL (keys, values and
   write timestamps: the edge and the hub through ``WRITETIME``, the lake through
   ``materialize``, PostgreSQL through its ``_live`` view and ``_wt_`` columns; each row
   classified by ``ringflow diff``'s row core, read through the driver rather than a Spark job,
   which keeps the wait's frequent looks cheap); stop the job;
   print its summary (sends per unique change: 1.00 when each change was sent once), the
   status, the verification, and plot backlog and lag per channel to ``replication.png``.
6. Stop everything, also on Ctrl-C or an error.

Exit code 0 only when every destination matched (and the restarted node caught up).
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from ringflow.cli import EXIT_FAILURE, EXIT_OK
from ringflow.cli._demo_cluster import LocalCluster, NodeGroup, NodeProcess
from ringflow.cli._demo_postgres import PostgresServer
from ringflow.cli._demo_security import DemoSecurity
from ringflow.runtime import TLS_DIR_NAME

if TYPE_CHECKING:
    from ringflow.cli import Subcommands
    from ringflow.pipeline import ReplicaSummary
    from ringflow.schema import Table

EDGE_ADDRESS = "127.0.0.1"  # the first of the edge nodes' addresses
EDGE_NODES = 3
REPLICATION_FACTOR = 3
HUB_ADDRESS = "127.0.0.11"
KEYSPACE, TABLE = "shop", "orders"
ORDERS_PER_CUSTOMER = 40
SHORT_TTL_S = 1
LONG_TTL_S = 7200
RETRY_TIMEOUT_S = 90.0
CATCH_UP_TIMEOUT_S = 90.0
DELIVERY_TIMEOUT_S = 240.0
NOT_A_TERMINAL_WIDTH = 160  # whole table rows in a log
# 4 vnodes a node, not 16: the CDC source plans one Spark task per vnode and each task opens its
# own driver session, which dominates a micro-batch on two cores.
NUM_TOKENS = 4
ATOMIC = ("status", "qty", "amount", "placed")
COLUMNS = (*ATOMIC, "tags")
DDL = (
    "CREATE TABLE {ks}.{t} (customer int, order_id int, status text, qty int, amount double, "
    "placed timestamp, tags set<text>, PRIMARY KEY (customer, order_id)){cdc}"
)
STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "demo",
        help="the whole story: edge cluster + hub + PostgreSQL, workload, crash, replicate, verify",
        description="Start a 3-node edge cluster (RF 3), a hub node and PostgreSQL, write a "
        "workload at QUORUM (with a kill -9 and a restart of one edge node on the way), "
        "replicate to the hub, a Parquet lake and PostgreSQL, and verify every destination "
        "equals the edge table.",
    )
    parser.add_argument("--rows", type=int, default=1500, help="write operations (default 1500)")
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=7, help="workload random seed")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument(
        "--edge-address",
        default=EDGE_ADDRESS,
        help=f"the first edge node's loopback address; the others follow (default {EDGE_ADDRESS})",
    )
    parser.add_argument(
        "--hub-address", default=HUB_ADDRESS, help=f"the hub's address (default {HUB_ADDRESS})"
    )
    parser.add_argument(
        "--no-security",
        action="store_true",
        help="run every connection in plaintext without logins (default: TLS and auth on the "
        "edge, the hub and PostgreSQL)",
    )
    parser.set_defaults(handler=run)


# --- the workload ---------------------------------------------------------------------------------


@dataclass(slots=True)
class WorkloadStats:
    """What the workload did."""

    by_kind: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    seconds: float = 0.0
    last_write_ms: int = 0
    victim: str = ""
    killed_after: int = 0
    restarted_after: int = 0
    hub_killed_after: int = 0

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())


class Workload:
    """Prepared statements of the demo table and one random operation at a time."""

    def __init__(self, session: Any, rows: int, seed: int, keyspace: str = KEYSPACE) -> None:
        self.session = session
        self.rng = random.Random(seed)
        self.customers = max(8, rows // 25)
        table = f"{keyspace}.{TABLE}"
        columns = "customer, order_id, status, qty, amount, placed, tags"
        prepare = session.prepare
        self.insert = prepare(f"INSERT INTO {table} ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?)")
        self.insert_ttl = prepare(
            f"INSERT INTO {table} ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?"
        )
        where = "WHERE customer = ? AND order_id = ?"
        self.update = prepare(f"UPDATE {table} SET status = ?, qty = ? {where}")
        self.update_ttl = prepare(f"UPDATE {table} USING TTL ? SET status = ?, qty = ? {where}")
        self.add_tag = prepare(f"UPDATE {table} SET tags = tags + ? {where}")
        self.delete_column = prepare(f"DELETE amount FROM {table} {where}")
        self.delete_row = prepare(f"DELETE FROM {table} {where}")
        self.delete_range = prepare(
            f"DELETE FROM {table} WHERE customer = ? AND order_id >= ? AND order_id < ?"
        )

    def next_operation(self) -> tuple[str, Any, tuple[object, ...]]:
        """(kind, statement, values) of one random write."""
        rng = self.rng
        key = (rng.randrange(self.customers), rng.randrange(ORDERS_PER_CUSTOMER))
        roll = rng.random()
        if roll < 0.62:
            row = (
                *key,
                rng.choice(STATUSES),
                rng.randint(1, 9),
                round(rng.uniform(1, 500), 2),
                datetime_now_ms(),
                {rng.choice(("gift", "express", "bulk", "fragile"))},
            )
            if roll < 0.07:
                return "update ttl 1s", self.update_ttl, (SHORT_TTL_S, *row[2:4], *key)
            if roll < 0.14:
                return "insert ttl 2h", self.insert_ttl, (*row, LONG_TTL_S)
            return "insert", self.insert, row
        if roll < 0.77:
            return "update", self.update, (rng.choice(STATUSES), rng.randint(1, 9), *key)
        if roll < 0.84:
            return "add tag", self.add_tag, ({rng.choice(("vip", "late", "promo"))}, *key)
        if roll < 0.89:
            return "delete column", self.delete_column, key
        if roll < 0.97:
            return "delete row", self.delete_row, key
        low = rng.randrange(ORDERS_PER_CUSTOMER - 4)
        return "delete range", self.delete_range, (key[0], low, low + rng.randint(1, 4))


def datetime_now_ms() -> Any:
    import datetime

    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _execute_retrying(session: Any, statement: Any, values: tuple[object, ...]) -> int:
    """Execute, retrying (bounded) on a failure; the number of failed attempts. (At QUORUM a
    write fails only on a connection to the node just killed, or on the restarted node before it
    has loaded the CDC generation: until then it refuses the CDC writes it coordinates.)"""
    deadline = time.monotonic() + RETRY_TIMEOUT_S
    failures = 0
    while True:
        try:
            session.execute(statement, values, timeout=10.0)
            return failures
        except Exception:  # the driver's NoHostAvailable / OperationTimedOut / connection errors
            failures += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run_workload(
    console: Console,
    session: Any,
    edge: LocalCluster,
    rows: int,
    seed: int,
    hub_away: Callable[[], None] | None = None,
) -> WorkloadStats:
    """``rows`` writes at QUORUM with a progress bar; one edge node is SIGKILLed a third of the
    way in and restarted (on its data) two thirds of the way in, the workload going on;
    ``hub_away`` is called halfway."""
    workload = Workload(session, rows, seed)
    stats = WorkloadStats(victim=edge.addresses[1], killed_after=rows // 3)
    stats.restarted_after = 2 * rows // 3
    stats.hub_killed_after = rows // 2
    started = time.monotonic()
    columns = (
        TextColumn("[bold]workload"),
        BarColumn(bar_width=32),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("workload", total=rows, note="")
        for step in range(rows):
            if step == stats.killed_after:
                edge.kill(stats.victim)
                console.print(f"[red]kill -9[/] edge node {stats.victim} after {step} writes")
                bar.update(task, note=f"[red]{stats.victim} down: QUORUM on 2 of 3")
            elif step == stats.restarted_after:
                edge.restart(stats.victim)
                console.print(
                    f"[green]restarted[/] edge node {stats.victim} on its data after {step} writes"
                )
                bar.update(task, note="")
            if step == stats.hub_killed_after and hub_away is not None:
                hub_away()
            kind, statement, values = workload.next_operation()
            stats.retried += _execute_retrying(session, statement, values)
            stats.by_kind[kind] = stats.by_kind.get(kind, 0) + 1
            bar.advance(task)
    stats.seconds = time.monotonic() - started
    stats.last_write_ms = time.time_ns() // 1_000_000
    return stats


# --- reading and comparing --------------------------------------------------------------------

Row = tuple[dict[str, object], dict[str, int]]


def _plain(value: object) -> object:
    if hasattr(value, "items"):
        return dict(value.items())
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        return value
    return list(value)


def read_cql_table(
    session: Any, table: Table, consistency: str | None = None
) -> dict[tuple[object, ...], Row]:
    """``table`` (the demo's columns) through the driver (at ``consistency``, default: the
    session's): values and WRITETIME of the atomic columns."""
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    from ringflow.pipeline import canonical_value

    times = ", ".join(f"WRITETIME({c}) AS wt_{c}" for c in ATOMIC)
    source = f"{table.keyspace}.{table.name}"
    query = f"SELECT customer, order_id, {', '.join(COLUMNS)}, {times} FROM {source}"
    level = None if consistency is None else ConsistencyLevel.name_to_value[consistency]
    result: dict[tuple[object, ...], Row] = {}
    for row in session.execute(SimpleStatement(query, consistency_level=level), timeout=60.0):
        values = {
            c: canonical_value(table.column(c).type, _plain(row[c]))
            for c in COLUMNS
            if row[c] is not None
        }
        wts = {c: int(row[f"wt_{c}"]) for c in ATOMIC if row[c] is not None}
        result[(row["customer"], row["order_id"])] = (values, wts)
    return result


def live_rows(rows: Mapping[tuple[object, ...], Any]) -> dict[tuple[object, ...], Row]:
    """materialize / read_postgres_live rows in the compare form (atomic write times)."""
    result: dict[tuple[object, ...], Row] = {}
    for key, live in rows.items():
        values = {k: v for k, v in live.values.items() if v is not None}
        times = {k: int(t) for k, t in live.write_times_us.items() if k in ATOMIC and k in values}
        result[tuple(key)] = (values, times)
    return result


def compare(
    expected: Mapping[tuple[object, ...], Row], actual: Mapping[tuple[object, ...], Row]
) -> tuple[int, list[str]]:
    """(rows compared, every mismatch): each key's rows seen and classified by ``ringflow
    diff``'s row core (missing, extra, values, writetime), in its canonical texts."""
    from ringflow.pipeline import classify_difference, row_image

    problems: list[str] = []
    for key in sorted(set(expected) | set(actual), key=repr):
        source = row_image(key, *expected[key]) if key in expected else None
        target = row_image(key, *actual[key]) if key in actual else None
        difference = classify_difference(source, target)
        if difference is None:
            continue
        if difference.target == "-" or difference.source == "-":
            problems.append(f"{key}: {difference.kind.value}")
        else:
            problems.append(
                f"{key}: {difference.kind.value} {difference.source} != {difference.target}"
            )
    return len(expected), problems


# --- the story ------------------------------------------------------------------------------------


def driver_cluster(
    contact_points: list[str], port: int, policy: Any, consistency: str, **options: Any
) -> Any:
    """A driver ``Cluster`` (protocol v4) whose requests use ``policy`` at ``consistency``, rows
    as dicts; it reconnects to a restarted node within a second. ``options`` go to the
    ``Cluster`` (``ssl_context``, ``auth_provider``)."""
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import ConstantReconnectionPolicy
    from cassandra.query import dict_factory

    profile = ExecutionProfile(
        load_balancing_policy=policy,
        consistency_level=ConsistencyLevel.name_to_value[consistency],
        row_factory=dict_factory,
        request_timeout=30.0,
    )
    return Cluster(
        contact_points,
        port=port,
        protocol_version=4,
        connect_timeout=10,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        reconnection_policy=ConstantReconnectionPolicy(0.3, None),
        **options,
    )


def _connect(stage: Stage, name: str, driver: Any) -> Any:
    stage.clusters.append(driver)
    session = driver.connect()
    stage.sessions[name] = session
    return session


def _open_sessions(stage: Stage) -> None:
    """``edge``: token-aware over the 3 edge nodes at QUORUM; ``hub``: the hub at ONE (both as
    the superuser, over TLS, when the demo runs secured)."""
    from cassandra.policies import DCAwareRoundRobinPolicy, RoundRobinPolicy, TokenAwarePolicy

    login = stage.security.driver_options()
    edge_policy = TokenAwarePolicy(DCAwareRoundRobinPolicy())
    edge = driver_cluster(stage.edge.addresses, 9042, edge_policy, "QUORUM", **login)
    _connect(stage, "edge", edge)
    hub = driver_cluster([stage.hub.address], stage.hub.port, RoundRobinPolicy(), "ONE", **login)
    _connect(stage, "hub", hub)


def _pinned_session(stage: Stage, address: str) -> Any:
    """A session whose every request goes to ``address`` (at ONE)."""
    from cassandra.policies import WhiteListRoundRobinPolicy

    policy = WhiteListRoundRobinPolicy([address])
    login = stage.security.driver_options()
    pinned = driver_cluster([address], 9042, policy, "ONE", **login)
    return _connect(stage, f"pinned {address}", pinned)


def _prepare(console: Console, stage: Stage) -> None:
    """The schema, and with security the roles (``_demo_security``); then the sessions."""
    security = stage.security
    if not security.enabled:
        _open_sessions(stage)
        _create_schema(stage.sessions["edge"], stage.sessions["hub"])
        return
    from ringflow.cli import _demo_security as secured

    edge_nodes = [(address, 9042) for address in stage.edge.addresses]
    hub_node = [(stage.hub.address, stage.hub.port)]
    with (
        secured.superuser_session(security, edge_nodes) as edge,
        secured.superuser_session(security, hub_node) as hub,
    ):
        _create_schema(edge, hub)
        secured.secure_roles(security, edge, KEYSPACE, secured.REPLICATOR)
        secured.secure_roles(security, hub, KEYSPACE, secured.HUB_WRITER)
    for endpoints, role in ((edge_nodes, secured.REPLICATOR), (hub_node, secured.HUB_WRITER)):
        for who in (role, secured.SUPERUSER):
            secured.wait_logins(endpoints, security.driver_options(who))
    console.print(
        f"security: TLS everywhere (CA {security.ca}); the job logs in as "
        f"{secured.REPLICATOR}, the hub sink as {secured.HUB_WRITER}; the superusers' default "
        f"passwords replaced; passwords in {security.secrets_dir}"
    )
    _open_sessions(stage)


def _create_schema(edge_session: Any, hub_session: Any) -> None:
    for session, rf, cdc in (
        (edge_session, REPLICATION_FACTOR, " WITH cdc = {'enabled': true}"),
        (hub_session, 1, ""),
    ):
        replication = f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
        session.execute(f"CREATE KEYSPACE {KEYSPACE} WITH replication = {replication}")
        session.execute(DDL.format(ks=KEYSPACE, t=TABLE, cdc=cdc))


@contextmanager
def _workdir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path.absolute()
        return
    temporary = Path(tempfile.mkdtemp(prefix="ringflow-demo-"))
    try:
        yield temporary
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


@dataclass(slots=True)
class Stage:
    """Where everything runs, and how it is reached (``security``)."""

    workdir: Path
    edge: LocalCluster
    hub: NodeProcess
    postgres: PostgresServer
    security: DemoSecurity
    sessions: dict[str, Any] = field(default_factory=dict)
    clusters: list[Any] = field(default_factory=list)

    @property
    def postgres_url(self) -> str:
        return self.security.postgres_url(self.postgres.url)


def _print_places(console: Console, stage: Stage) -> None:
    places = RichTable(title="ringflow demo", show_header=True)
    places.add_column("what")
    places.add_column("where")
    edge = f"{', '.join(stage.edge.addresses)}  data {stage.edge.data}"
    places.add_row(f"edge cluster ({len(stage.edge.addresses)} nodes, RF 3, CDC on)", edge)
    places.add_row("hub node", f"{stage.hub.endpoint}  data {stage.hub.data_dir}")
    places.add_row("PostgreSQL", stage.postgres_url)
    security = stage.security
    places.add_row(
        "security",
        f"TLS (CA {security.ca}) and auth on the edge, the hub, PostgreSQL"
        if security.enabled
        else "none (--no-security)",
    )
    places.add_row("Parquet lake", str(stage.workdir / "lake"))
    places.add_row("Spark checkpoints", str(stage.workdir / "checkpoints"))
    console.print(places)


def wait_caught_up(stage: Stage, table: Table, victim: str) -> tuple[float | None, list[str]]:
    """Wait (bounded) until each edge node alone, read at ONE, holds the same rows: the
    restarted ``victim`` got the writes it missed from the coordinators' hints (reads at ONE
    repair nothing). (seconds it took or None, the last differences)"""
    started = time.monotonic()
    sessions = {address: _pinned_session(stage, address) for address in stage.edge.addresses}
    problems: list[str] = []
    while time.monotonic() - started < CATCH_UP_TIMEOUT_S:
        try:
            reference = read_cql_table(sessions[stage.edge.addresses[0]], table)
            problems = []
            for address, session in sessions.items():
                _, differences = compare(reference, read_cql_table(session, table))
                problems.extend(f"{address} {problem}" for problem in differences)
        except Exception as error:  # a node still warming up: try again until the deadline
            problems = [f"read failed: {error}"]
        if not problems:
            return time.monotonic() - started, []
        time.sleep(1.0)
    return None, problems


@dataclass(slots=True)
class Verdict:
    """One destination's comparison with the edge table."""

    name: str
    compared: int
    problems: list[str]
    read_s: float


def verify(stage: Stage, table: Table) -> list[Verdict]:
    """Each destination against the edge table (read at ALL) at one pinned ``now``."""
    from ringflow.pipeline import materialize, read_lake_changes, read_postgres_live

    now_s = int(time.time())
    edge = read_cql_table(stage.sessions["edge"], table, "ALL")
    readers: dict[str, Callable[[], dict[tuple[object, ...], Row]]] = {
        "hub": lambda: read_cql_table(stage.sessions["hub"], table),
        "lake": lambda: live_rows(
            materialize(
                table, read_lake_changes(stage.workdir / "lake", f"{KEYSPACE}.{TABLE}"), now_s
            )
        ),
        "postgres": lambda: live_rows(
            read_postgres_live(stage.postgres_url, f"{KEYSPACE}_{TABLE}", table, now_s)
        ),
    }
    verdicts = []
    for name, read in readers.items():
        started = time.monotonic()
        compared, problems = compare(edge, read())
        verdicts.append(Verdict(name, compared, problems, time.monotonic() - started))
    return verdicts


def _report(
    console: Console,
    workload: WorkloadStats,
    summary: ReplicaSummary | None,
    verdicts: list[Verdict],
) -> None:
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(workload.by_kind.items()))
    rate = workload.total / workload.seconds if workload.seconds else 0.0
    console.print(
        f"workload: {workload.total:,} writes in {workload.seconds:.1f}s ({rate:,.0f}/s; {kinds}); "
        f"{workload.retried} failed attempt(s) during the crash, retried"
    )
    console.print(
        f"edge: node {workload.victim} SIGKILLed after {workload.killed_after:,} writes, "
        f"restarted after {workload.restarted_after:,}; every write at QUORUM (2 of 3 replicas); "
        f"the hub SIGKILLed after {workload.hub_killed_after:,} writes"
    )
    by_channel = {c.channel: c for c in summary.channels} if summary else {}
    report = RichTable(title="verification: each destination vs the edge table")
    for name in ("destination", "rows compared", "mismatches", "changes sent", "sends/change"):
        report.add_column(name, justify="left" if name == "destination" else "right")
    for verdict in verdicts:
        channel = by_channel.get(verdict.name)
        ratio = None if channel is None else channel.sends_per_unique
        colour = "green" if not verdict.problems else "red"
        report.add_row(
            verdict.name,
            f"{verdict.compared:,}",
            f"[{colour}]{len(verdict.problems)}",
            f"{channel.sends:,}" if channel else "-",
            "-" if ratio is None else f"{ratio:.2f}",
        )
    console.print(report)
    console.print(
        "sends/change: change rows handed to the destination per distinct change (1.00: each "
        "change sent once, by one replica; every replica sending would be 3.00 at RF 3). The "
        "20 s window of open slices outlasts the edge node's outage: its hinted writes land in "
        "the slices its replicas hold, and the copies match"
    )
    for verdict in verdicts:
        for problem in verdict.problems[:5]:
            console.print(f"[red]{verdict.name}[/]: {problem}")


def _story(console: Console, stage: Stage, arguments: argparse.Namespace) -> bool:
    from ringflow.cli import _demo_replica as replica
    from ringflow.pipeline import print_replica_summary

    _print_places(console, stage)
    _prepare(console, stage)
    console.print(f"created {KEYSPACE}.{TABLE} (RF 3, CDC enabled) on the edge and on the hub")
    replica.create_channels(console, stage, f"{KEYSPACE}.{TABLE}")
    with replica.replica_job(console, stage, arguments.master) as running:
        table = running.job.plan.channels[0].table
        outage: dict[str, float] = {}

        def hub_away() -> None:
            stage.hub.kill()
            outage["since"] = time.monotonic()
            console.print(f"[red]kill -9[/] the hub node {stage.hub.endpoint}: its link is down")

        workload = run_workload(
            console,
            stage.sessions["edge"],
            stage.edge,
            arguments.rows,
            arguments.seed,
            hub_away=hub_away,
        )
        replica.show_status(console, stage, "the workload is done, the hub is away")
        replica.hub_outage(console, stage, outage["since"])()
        console.print(f"waiting for {workload.victim} to rejoin and get its hints ...")
        stage.edge.wait_ready()
        caught_up_s, lagging = wait_caught_up(stage, table, workload.victim)
        if caught_up_s is None:
            console.print(f"[red]the edge nodes still differ after {CATCH_UP_TIMEOUT_S:.0f}s[/]")
            for problem in lagging[:5]:
                console.print(f"[red]  {problem}")
        else:
            console.print(
                f"hints replayed: {workload.victim} alone (read at ONE) has the rows of the "
                f"other edge nodes ({caught_up_s:.1f}s after the cluster was UP)"
            )

        def delivered() -> bool:
            return all(not v.problems for v in verify(stage, table))

        took = replica.wait_delivered(console, delivered, running, DELIVERY_TIMEOUT_S)
        if took is None:
            console.print(
                f"[red]not every destination equals the edge after {DELIVERY_TIMEOUT_S:.0f}s"
            )
        else:
            console.print(f"every destination caught up {took:.0f}s after the hub came back")
        replica.show_status(console, stage, "caught up", replica.hub_reported(unreachable=False))
    summary = running.summary
    if summary is not None:
        print_replica_summary(console, summary)
    verdicts = verify(stage, table)
    _report(console, workload, summary, verdicts)
    plot = stage.workdir / "replication.png"
    if replica.plot_replication(running, plot):
        console.print(f"backlog and lag per channel over the run: {plot}")
    return (
        all(not v.problems for v in verdicts)
        and summary is not None
        and caught_up_s is not None
        and running.error is None
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(arguments: argparse.Namespace) -> int:
    console = Console(width=None if sys.stdout.isatty() else NOT_A_TERMINAL_WIDTH)
    started = time.monotonic()
    # Ctrl-C and SIGTERM both unwind through the clean-ups below (a shell may have started us
    # with SIGINT ignored, hence the explicit handlers).
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    with _workdir(arguments.workdir) as workdir, NodeGroup() as nodes:
        postgres = PostgresServer()
        security = DemoSecurity(
            workdir / "edge" / TLS_DIR_NAME, workdir / "secrets", not arguments.no_security
        )
        try:
            console.print(f"[bold]ringflow demo[/] in {workdir}")
            edge_cluster = LocalCluster(
                workdir / "edge",
                EDGE_NODES,
                first_address=arguments.edge_address,
                num_tokens=NUM_TOKENS,
                # INFO as the hub's: a node's reasons for closing a client connection
                options=(*security.cluster_options(), "--log-level", "INFO"),
            )
            console.print(f"starting the edge cluster ({EDGE_NODES} nodes) ...")
            edge = nodes.cluster(edge_cluster)
            hub_args = ["--num-tokens", str(NUM_TOKENS)]
            hub_args += security.hub_arguments(arguments.hub_address)
            hub = nodes.node("hub", arguments.hub_address, workdir / "hub" / "data", *hub_args)
            postgres.tls = security.postgres_tls()
            postgres.start()
            stage = Stage(workdir, edge, hub, postgres, security)
            try:
                ok = _story(console, stage, arguments)
            finally:
                for cluster in stage.clusters:
                    cluster.shutdown()
        except KeyboardInterrupt:
            console.print("[yellow]interrupted: stopping everything")
            return 130
        finally:
            postgres.stop()
    verdict = "[green]OK: every destination equals the edge table" if ok else "[red]MISMATCH"
    console.print(f"{verdict}[/] ({time.monotonic() - started:.0f}s)")
    return EXIT_OK if ok else EXIT_FAILURE
