"""``NetworkCqlShell``: the CQL protocol over the simulator's network, with a fake backend.

Proves the shell's own duties: STARTUP before statements (a restarted shell forgets the
connection, and says so), statements run on the worker and answered from their pending work
with no thread waiting, at most ``max_statements_in_flight`` started, at most
``max_pending_requests`` queued behind them (the rest answered Overloaded), errors mapped by
type, and a connection gone (a crash) answered by nobody.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

from ringflow.cluster.service._cql_shell import NetworkCqlShell
from ringflow.cql import (
    Consistency,
    ErrorResponse,
    Handled,
    Query,
    QueryParameters,
    Response,
    ServerLimits,
    SetKeyspaceResult,
    StatementRequest,
    VoidResult,
)
from ringflow.errors import ErrorCode, InvalidRequest
from ringflow.runtime import ClockExecutor, Runtime
from ringflow.sim import Simulation
from tests.sim._cql_client import SimCqlClient

SERVER = "10.0.0.1:9042"


@dataclass
class FakeBackend:
    """``PENDING n`` is answered when ``release(n)`` is called; ``INVALID`` raises."""

    pending: dict[str, concurrent.futures.Future[Response | Handled]] = field(default_factory=dict)
    executed: list[str] = field(default_factory=list)

    def open_session(self) -> None:
        return None

    def handle(self, _session: None, statement: StatementRequest) -> Response | Handled:
        assert isinstance(statement, Query)
        self.executed.append(statement.query)
        if statement.query == "INVALID":
            raise InvalidRequest("no such thing")
        if statement.query.startswith("PENDING"):
            future = self.pending[statement.query] = concurrent.futures.Future()
            return Handled(VoidResult(), pending=future)
        return SetKeyspaceResult(statement.query)

    def release(self, text: str) -> None:
        self.pending[text].set_result(SetKeyspaceResult(text))


@dataclass
class Setup:
    sim: Simulation
    backend: FakeBackend
    shells: list[NetworkCqlShell[None]] = field(default_factory=list)
    clients: list[SimCqlClient] = field(default_factory=list)
    answers: dict[str, Response | None] = field(default_factory=dict)

    def send(self, text: str) -> None:
        def done(response: Response | None) -> None:
            self.answers[text] = response

        self.clients[0].query(SERVER, text, QueryParameters(Consistency.ONE), done)


def setup(**limits: int) -> Setup:
    sim = Simulation(1)
    found = Setup(sim, FakeBackend())

    def server(runtime: Runtime) -> NetworkCqlShell[None]:
        worker = ClockExecutor(runtime.clock)
        shell = NetworkCqlShell(
            found.backend, runtime.network, SERVER, worker, ServerLimits(**limits)
        )
        shell.start()
        found.shells.append(shell)
        return shell

    def client(runtime: Runtime) -> SimCqlClient:
        made = SimCqlClient(runtime, "10.0.1.1:40000", timeout_ms=5_000)
        found.clients.append(made)
        return made

    sim.add_process("server", server)
    sim.add_process("client", client)
    return found


def test_statements_are_answered_and_errors_keep_their_code() -> None:
    found = setup()
    with found.sim:
        found.send("ks1")
        found.send("INVALID")
        assert found.sim.run_until_true(lambda: len(found.answers) == 2, timeout_ms=1_000)
    assert found.answers["ks1"] == SetKeyspaceResult("ks1")
    error = found.answers["INVALID"]
    assert isinstance(error, ErrorResponse) and error.code == ErrorCode.INVALID


def test_in_flight_bound_queue_bound_and_overloaded() -> None:
    found = setup(max_statements_in_flight=2, max_pending_requests=1)
    with found.sim:
        for index in range(1, 5):
            found.send(f"PENDING {index}")
        found.sim.run_for(100)
        assert found.backend.executed == ["PENDING 1", "PENDING 2"]
        shell = found.shells[0]
        assert shell.in_flight == 2
        overloaded = found.answers.get("PENDING 4")  # the queue holds one: PENDING 3
        assert isinstance(overloaded, ErrorResponse), found.answers
        assert overloaded.code == ErrorCode.OVERLOADED
        found.backend.release("PENDING 2")
        found.sim.run_for(100)
        assert found.answers["PENDING 2"] == SetKeyspaceResult("PENDING 2")
        assert found.backend.executed == ["PENDING 1", "PENDING 2", "PENDING 3"]
        found.backend.release("PENDING 1")
        found.backend.release("PENDING 3")
        found.sim.run_for(100)
        assert {"PENDING 1", "PENDING 3"} <= set(found.answers)
        assert shell.in_flight == 0 and shell.most_in_flight == 2


def test_a_restarted_shell_forgets_the_connection_and_says_so() -> None:
    found = setup()
    with found.sim:
        found.send("before")
        assert found.sim.run_until_true(lambda: "before" in found.answers, timeout_ms=1_000)
        found.sim.crash("server")
        found.sim.restart("server")
        found.send("after")
        assert found.sim.run_until_true(lambda: "after" in found.answers, timeout_ms=1_000)
        error = found.answers["after"]
        assert isinstance(error, ErrorResponse) and error.code == ErrorCode.PROTOCOL_ERROR
        assert "expecting STARTUP" in error.message
        found.send("again")  # the client starts its connection again
        assert found.sim.run_until_true(lambda: "again" in found.answers, timeout_ms=1_000)
        assert found.answers["again"] == SetKeyspaceResult("again")
        assert found.clients[0].restarts_seen == 1
