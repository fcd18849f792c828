"""CQL clients against a simulated 3-node cluster under faults, checked Jepsen-style (issue 21 §3).

Every node is the real ``ClusterNode`` over a real SQLite store serving CQL through
``serve_cql``: the same codec, ``ServerConnection``, ``ClusterBackend``, ``QueryProcessor`` and
``ClusterDataPlane`` as a node process, over the simulator's network. Three client processes
(``SimCqlClient``) send, with client timestamps as the drivers do:

* prepared INSERTs at QUORUM (a unique value each), and LOGGED batches of two of them;
* prepared SELECTs of one key at QUORUM (``v`` and ``WRITETIME(v)``);
* now and then a whole-table SELECT at QUORUM, paged (``page_size`` 10) to its last page;
* the DDL at the start (keyspace, CDC table) through a client, answered once the schema agrees,
  and an ``ALTER TABLE ... ADD`` mid-run, under the faults (after healing every node must agree
  on the schema, with the column if the ALTER was acknowledged);
* a Merkle-tree repair of the table and its CDC log asked mid-run through a client (``CALL
  NodeOps.repairWithOptions``, async), running under the faults while the writes go on (it
  must not be refused for anything but a fault, and the final checks hold with it).

Faults, chosen by the seed: message delays (exponential), drops, reordering, one crash and
restart of a node, a partition and its healing, and clock skew on a node. Each client keeps a
few requests in flight and picks a node per request, whatever it knows of them.

After the operations the network heals, every node runs, and a client reads at ALL every key
and the whole CDC log (paged). ``_jepsen`` then checks the history (no phantom value, no value
from the future, every acknowledged write visible to later QUORUM reads) and the final state
(base rows and CDC log rows match the sent writes exactly: no missing, no phantom, no
duplicate log row).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ringflow.cluster.service import BuiltNode
from ringflow.cluster.service._cql_shell import NetworkCqlShell, serve_cql
from ringflow.cluster.service._node import ClusterNode
from ringflow.cql import (
    AnyErrorResponse,
    Consistency,
    QueryParameters,
    Response,
    RowsResult,
    SchemaChangeResult,
    SessionState,
)
from ringflow.errors import ErrorCode
from ringflow.runtime import Runtime
from ringflow.sim import DEFAULT_EPOCH_MS, NetworkConfig, Simulation
from tests.sim._cql_client import SimCqlClient, bigint_of, int_of, int_value
from tests.sim._harness import (
    KEYSPACE_RF3,
    NAMES,
    all_alive,
    check_acting_node,
    endpoint,
    open_store,
    random_faults,
    sim_host,
    start_layout_node,
)
from tests.sim._jepsen import History, LogRow, Outcome, Read, Scan, Write

_NAMESPACE = uuid.UUID("5a8f7a52-2d0e-4c1b-8a6e-2f7c0d9b1e33")
CDC_TABLE = "CREATE TABLE ks.kv (k int PRIMARY KEY, v int) WITH cdc = {'enabled': true}"
INSERT = "INSERT INTO ks.kv (k, v) VALUES (?, ?)"
SELECT = "SELECT v, WRITETIME(v) FROM ks.kv WHERE k = ?"
SCAN = "SELECT k, v, WRITETIME(v) FROM ks.kv"
LOG_SCAN = 'SELECT k, v, "cdc$time", WRITETIME(v) FROM ks.kv_scylla_cdc_log'
ALTERED_COLUMN = "extra"
ALTER = f"ALTER TABLE ks.kv ADD {ALTERED_COLUMN} int"
REPAIR_CALL = "CALL NodeOps.repairWithOptions('ks', ['kv', 'kv_scylla_cdc_log'], {'async': 'true'})"
CLIENTS = ("c1", "c2", "c3")
KEYS = 24
IN_FLIGHT_PER_CLIENT = 3
PAGE_SIZE = 10
"""A whole-table SELECT's page: its 24 keys come in three pages."""
LOG_PAGE_SIZE = 5_000
"""The final read of the CDC log: a page resumed re-reads its range chunk (``_plane``), so
few large pages."""
QUORUM = Consistency.QUORUM
ALL = Consistency.ALL


def cql_endpoint(name: str) -> str:
    return f"10.0.0.{NAMES.index(name) + 1}:9042"


def client_endpoint(name: str) -> str:
    return f"10.0.1.{CLIENTS.index(name) + 1}:40000"


WRITE_FAILURES = frozenset(
    {
        ErrorCode.UNAVAILABLE,
        ErrorCode.OVERLOADED,
        ErrorCode.PROTOCOL_ERROR,
        ErrorCode.UNPREPARED,
        ErrorCode.IS_BOOTSTRAPPING,
    }
)
"""Errors that say the write was not applied (refused before it was sent to a replica;
IS_BOOTSTRAPPING: a restarted node that has not heard the cluster's CDC generations yet)."""
EXPECTED_ERRORS = frozenset(
    {
        *WRITE_FAILURES,
        ErrorCode.WRITE_TIMEOUT,
        ErrorCode.READ_TIMEOUT,
        ErrorCode.WRITE_FAILURE,
        ErrorCode.READ_FAILURE,
        ErrorCode.SERVER_ERROR,
    }
)
"""Errors faults may cause; any other (Invalid, SyntaxError, ...) is a bug of the path."""


@dataclass
class Run:
    """One seed's run: the simulation, its nodes, clients and history."""

    sim: Simulation
    operations: int
    nodes: dict[str, ClusterNode] = field(default_factory=dict)
    shells: dict[str, NetworkCqlShell[SessionState]] = field(default_factory=dict)
    clients: dict[str, SimCqlClient] = field(default_factory=dict)
    history: History = field(default_factory=History)
    errors: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    open_ops: dict[int, str] = field(default_factory=dict)
    """The operations issued and not completed, described (for a run that does not end)."""
    issued: int = 0
    completed: int = 0
    next_ts: int = DEFAULT_EPOCH_MS * 1000
    next_value: int = 0
    faults: dict[int, list[Callable[[], object]]] = field(default_factory=dict)
    """What the faults do, by the operation number they come at."""
    alter_answers: list[Response | None] = field(default_factory=list)
    repair_answers: list[Response | None] = field(default_factory=list)
    final: dict[int, tuple[int, int]] = field(default_factory=dict)
    log: list[LogRow] = field(default_factory=list)

    def node_factory(self, name: str) -> Callable[[Runtime], BuiltNode]:
        host = sim_host(_NAMESPACE, name, endpoint(name))

        def make(runtime: Runtime) -> BuiltNode:
            built, _cdc = start_layout_node(runtime, name, host, open_store(runtime))
            self.shells[name] = serve_cql(built, cql_endpoint(name))
            self.nodes[name] = built.cluster
            return built

        return make

    def client_factory(self, name: str) -> Callable[[Runtime], SimCqlClient]:
        def make(runtime: Runtime) -> SimCqlClient:
            client = SimCqlClient(runtime, client_endpoint(name))
            self.clients[name] = client
            return client

        return make

    def running(self) -> list[str]:
        return [name for name in NAMES if self.sim.process(name).running]

    def validate(self) -> None:
        """After every event of the run: the invariants of the CQL shell of the node whose
        code it ran (the node's own: ``check_acting_node``)."""
        name = self.sim.acting_process()
        if name in self.shells:
            self.shells[name].validate()

    def now_ms(self) -> int:
        return self.sim.now_ms()

    def timestamp(self) -> int:
        self.next_ts += 1
        return self.next_ts

    def value(self) -> int:
        self.next_value += 1
        return self.next_value

    def note_error(self, what: str, response: Response | None) -> Outcome:
        """The outcome a write's answer gives (ok, fail or info), its error counted."""
        if response is None:
            self.errors["timeout"] += 1
            return "info"
        if not isinstance(response, AnyErrorResponse):
            return "ok"
        self.errors[response.code.name] += 1
        if response.code not in EXPECTED_ERRORS:
            self.unexpected.append(f"{what}: {response.code.name}: {response.message}")
        return "fail" if response.code in WRITE_FAILURES else "info"


def rows_of(response: Response | None) -> RowsResult | None:
    return response if isinstance(response, RowsResult) else None


def boot(seed: int, operations: int) -> Run:
    """Three nodes and three clients up, the CDC table created through CQL and agreed."""
    sim = Simulation(seed)
    run = Run(sim, operations)
    check_acting_node(sim)
    sim.add_invariant(run.validate)
    try:
        for name in NAMES:
            sim.add_process(name, run.node_factory(name))
        for name in CLIENTS:
            sim.add_process(name, run.client_factory(name))
        assert sim.run_until_true(
            lambda: all_alive(run.nodes, NAMES, endpoint), timeout_ms=60_000
        ), sim.describe()
        client = run.clients["c1"]
        for text in (KEYSPACE_RF3, CDC_TABLE):
            answers: list[Response | None] = []
            client.query(cql_endpoint("n1"), text, QueryParameters(QUORUM), answers.append)
            assert sim.run_until_true(answers.__len__, timeout_ms=60_000), sim.describe()
            assert isinstance(answers[0], SchemaChangeResult), (text, answers[0])
        assert sim.run_until_true(
            lambda: len({n.processor.schema_version for n in run.nodes.values()}) == 1,
            timeout_ms=60_000,
        ), sim.describe()
    except BaseException:
        sim.close()
        raise
    return run


def start_faults(run: Run) -> None:
    """Delays, drops and reordering from now on; one crash and restart of a node, one
    partition and its healing, one clock skewed, each at an operation number the seed picks."""
    sim, rng, total = run.sim, run.sim.rng, run.operations

    def at(fraction: float, action: Callable[[], object]) -> None:
        run.faults.setdefault(int(total * fraction), []).append(action)

    sim.configure_network(random_faults(rng, (2_000, 20_000, 100_000), (0.0, 0.01, 0.05)))
    victim = rng.choice(NAMES)
    crash_at = rng.uniform(0.1, 0.4)
    at(crash_at, lambda: sim.crash(victim))
    at(crash_at + rng.uniform(0.05, 0.3), lambda: sim.restart(victim))
    cut = rng.choice(NAMES)
    cut_at = rng.uniform(0.1, 0.7)
    at(cut_at, lambda: sim.partition([cut], [n for n in NAMES if n != cut]))
    at(cut_at + rng.uniform(0.02, 0.2), sim.heal)
    skewed = rng.choice(NAMES)
    at(rng.uniform(0.0, 0.5), lambda: sim.set_skew_ms(skewed, rng.randrange(-800, 800)))
    altering = rng.choice(NAMES)
    at(rng.uniform(0.2, 0.8), lambda: alter_table(run, altering))
    repairing = rng.choice(NAMES)
    at(rng.uniform(0.1, 0.6), lambda: repair_table(run, repairing))


def repair_table(run: Run, node: str) -> None:
    """A Merkle-tree repair of ``ks.kv`` and its CDC log asked through CQL mid-run (``CALL
    NodeOps.repairWithOptions``, async: answered once queued), running under the faults
    while the writes go on; the checks of the final state hold with it."""
    client = run.clients["c3"]
    client.query(
        cql_endpoint(node), REPAIR_CALL, QueryParameters(QUORUM), run.repair_answers.append
    )


def alter_table(run: Run, node: str) -> None:
    """A column added to ``ks.kv`` mid-run, under the faults, through client c2 (besides its
    operations); its answer is kept for ``schema_problems``."""
    client = run.clients["c2"]
    client.query(cql_endpoint(node), ALTER, QueryParameters(QUORUM), run.alter_answers.append)


def schema_problems(run: Run) -> list[str]:
    """After healing, every node agrees on the schema, and holds the added column if the
    ALTER was acknowledged (an ALTER that failed or timed out may have been applied or not)."""
    problems: list[str] = []
    having = {
        name: node.processor.schema.tables[("ks", "kv")].has_column(ALTERED_COLUMN)
        for name, node in run.nodes.items()
    }
    if len(set(having.values())) != 1:
        problems.append(f"schema: the nodes disagree on {ALTERED_COLUMN!r}: {having}")
    answer = run.alter_answers[0] if run.alter_answers else None
    if isinstance(answer, SchemaChangeResult) and not all(having.values()):
        problems.append(f"schema: the acknowledged ALTER is missing on {having}")
    if isinstance(answer, AnyErrorResponse) and answer.code not in EXPECTED_ERRORS:
        problems.append(f"schema: the ALTER was refused: {answer.code.name}: {answer.message}")
    return problems


RETRY_PAUSE_MS = 100
"""How long a client waits after an operation that failed before its next one, as an
application's retry policy backs off: a node refusing at once (UNAVAILABLE while it has not
seen its peers come back, IS_BOOTSTRAPPING while it learns the CDC generations) would
otherwise take the rest of the run's operations in the second after a fault heals (seed
5441: 1,540 operations in 0.9 s, 186 writes acknowledged of 2,000 operations)."""


def issue(run: Run, client_name: str) -> None:
    """Issue ``client_name``'s next operation; when it completes, the one after (after
    ``RETRY_PAUSE_MS`` when it failed)."""
    if run.issued >= run.operations:
        return
    run.issued += 1
    op = run.issued
    for action in run.faults.pop(op, ()):
        action()
    rng = run.sim.rng
    client = run.clients[client_name]
    node = cql_endpoint(rng.choice(NAMES))
    invoked = run.now_ms()

    def next_one(failed: bool) -> None:
        run.completed += 1
        run.open_ops.pop(op, None)
        if failed:
            run.sim.after(RETRY_PAUSE_MS, lambda: issue(run, client_name))
        else:
            issue(run, client_name)

    roll = rng.random()
    run.open_ops[op] = f"op {op} of {client_name} to {node} at {invoked} ms (roll {roll:.3f})"
    if roll < 0.5:
        keys = rng.sample(range(KEYS), 2 if roll < 0.08 else 1)
        cells = tuple((key, run.value()) for key in keys)
        ts = run.timestamp()

        def written(response: Response | None) -> None:
            outcome = run.note_error(f"write op {op}", response)
            run.history.append(Write(op, cells, ts, invoked, run.now_ms(), outcome))
            next_one(outcome != "ok")

        if len(cells) == 1:
            key, value = cells[0]
            parameters = QueryParameters(
                QUORUM, (int_value(key), int_value(value)), default_timestamp=ts
            )
            client.execute(node, INSERT, parameters, written)
        else:
            statements = [(INSERT, (int_value(k), int_value(v))) for k, v in cells]
            client.batch(node, statements, QUORUM, ts, written)
    elif roll < 0.97:
        key = rng.randrange(KEYS)

        def read(response: Response | None) -> None:
            rows = rows_of(response)
            if rows is None:
                run.note_error(f"read op {op}", response)
                run.history.append(Read(op, key, invoked, run.now_ms(), "fail"))
            else:
                found = None
                if rows.rows:
                    value, writetime = int_of(rows.rows[0][0]), bigint_of(rows.rows[0][1])
                    assert value is not None and writetime is not None, rows
                    found = (value, writetime)
                run.history.append(Read(op, key, invoked, run.now_ms(), "ok", found))
            next_one(rows is None)

        client.execute(node, SELECT, QueryParameters(QUORUM, (int_value(key),)), read)
    else:

        def scanned(found: dict[int, tuple[int, int]] | None, error: Response | None) -> None:
            if found is None:
                run.note_error(f"scan op {op}", error)
                run.history.append(Scan(op, invoked, run.now_ms(), "fail"))
            else:
                run.history.append(Scan(op, invoked, run.now_ms(), "ok", found))
            next_one(found is None)

        scan_table(client, node, SCAN, QUORUM, scanned)


def scan_table(
    client: SimCqlClient,
    node: str,
    text: str,
    consistency: Consistency,
    done: Callable[[dict[int, tuple[int, int]] | None, Response | None], None],
    log: list[LogRow] | None = None,
    page_size: int = PAGE_SIZE,
) -> None:
    """Every page of ``text`` (``k``, ``v``, ``WRITETIME(v)``, or the log's ``k``, ``v``,
    ``cdc$time``, ``WRITETIME(v)`` when ``log`` collects its rows) at ``consistency``."""
    found: dict[int, tuple[int, int]] = {}

    def page(paging_state: bytes | None) -> None:
        parameters = QueryParameters(consistency, page_size=page_size, paging_state=paging_state)
        client.query(node, text, parameters, answered)

    def answered(response: Response | None) -> None:
        rows = rows_of(response)
        if rows is None:
            done(None, response)
            return
        for row in rows.rows:
            key, value = int_of(row[0]), int_of(row[1])
            writetime = bigint_of(row[-1])
            assert key is not None, row
            if log is not None:
                assert writetime is not None, row
                log.append(LogRow(key, value, writetime))
            elif value is not None and writetime is not None:
                found[key] = (value, writetime)
        if rows.metadata.paging_state is None:
            done(found, None)
        else:
            page(rows.metadata.paging_state)

    page(None)


def heal_and_read(run: Run) -> tuple[dict[int, tuple[int, int]], list[LogRow]]:
    """Heal everything, wait until every node sees the others, then read at ALL the base
    table and the whole CDC log through one client."""
    sim = run.sim
    sim.heal()
    sim.configure_network(NetworkConfig())
    for name in NAMES:
        sim.set_skew_ms(name, 0)
        if not sim.process(name).running:
            sim.restart(name)
    assert sim.run_until_true(lambda: all_alive(run.nodes, NAMES, endpoint), timeout_ms=60_000), (
        sim.describe()
    )
    assert sim.run_until_true(
        lambda: len({node.processor.schema_version for node in run.nodes.values()}) == 1,
        timeout_ms=60_000,
    ), f"the schema did not agree after healing; {sim.describe()}"
    run.unexpected.extend(schema_problems(run))
    run.unexpected.extend(
        f"repair: refused: {answer.code.name}: {answer.message}"
        for answer in run.repair_answers
        if isinstance(answer, AnyErrorResponse) and answer.code not in EXPECTED_ERRORS
    )
    client = run.clients["c1"]
    final = read_at_all(run, client, "n1", SCAN, None, PAGE_SIZE)
    log: list[LogRow] = []
    read_at_all(run, client, "n2", LOG_SCAN, log, LOG_PAGE_SIZE)
    return final, log


FINAL_READ_ATTEMPTS = 5


def read_at_all(
    run: Run,
    client: SimCqlClient,
    node: str,
    text: str,
    log: list[LogRow] | None,
    page_size: int,
) -> dict[int, tuple[int, int]]:
    """``text`` read whole at ALL through ``node``, tried again (as a driver's retry policy
    would) when an attempt fails: a node restarted by the healing forgot the client's
    connection, a page may time out while hints are replayed."""
    failures: list[Response | None] = []
    for _ in range(FINAL_READ_ATTEMPTS):
        results: list[dict[int, tuple[int, int]] | None] = []
        errors: list[Response | None] = []
        rows: list[LogRow] = []

        def done(found: dict[int, tuple[int, int]] | None, error: Response | None) -> None:
            results.append(found)  # noqa: B023 - read within this attempt only
            errors.append(error)  # noqa: B023

        scan_table(
            client, cql_endpoint(node), text, ALL, done, None if log is None else rows, page_size
        )
        assert run.sim.run_until_true(results.__len__, timeout_ms=300_000), run.sim.describe()
        if results[0] is not None:
            if log is not None:
                log.extend(rows)
            return results[0]
        failures.append(errors[0])
    raise AssertionError(f"{text} at ALL failed {FINAL_READ_ATTEMPTS} times: {failures}")


def run_workload(seed: int, operations: int) -> Run:
    """Boot, run ``operations`` client operations under the seed's faults, heal, read the
    final state; the run's history is checked by the caller."""
    run = boot(seed, operations)
    with run.sim:
        start_faults(run)
        for name in CLIENTS:
            for _ in range(IN_FLIGHT_PER_CLIENT):
                issue(run, name)
        limit_ms = 60_000 + operations * 2_000  # a lost request costs its 12 s timeout
        assert run.sim.run_until_true(
            lambda: run.completed >= run.operations, timeout_ms=limit_ms
        ), (
            f"{run.completed} of {run.operations} operations completed, still open: "
            f"{list(run.open_ops.values())[:5]}; {run.sim.describe()}"
        )
        run.final, run.log = heal_and_read(run)
    return run
