"""Auth on a cluster node's statement path (issue 21 §1): logins, role and permission
statements, a DDL's grants and a statement's grants read and write ``system_auth`` through the
coordinator with no thread waiting. The real processor, ``ProcessorBackend`` and
``ClusterDataPlane``; the coordinator answers from another store (the replicas) on a real
event loop, so every read and write here goes through it."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql import AuthService, AuthSettings, ProcessorBackend, SessionState
from ringflow.cql._auth_model import AuthenticationFailed
from ringflow.cql._requests import Query, QueryParameters
from ringflow.cql._responses import Response
from ringflow.cql._results import RowsResult, SchemaChangeResult, VoidResult
from ringflow.cql._server import Handled, when_answered
from ringflow.cql._wire import Consistency
from ringflow.errors import ErrorCode, ReadTimeout
from tests.unit.cluster._coordinated import TIMEOUT_S, Coordinator, coordinated_nodes
from tests.unit.cql._exec_harness import ExecNode, decode_rows


def _token(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


class Auth:
    """The local node with auth on, answering through its backend as its CQL server does."""

    def __init__(self, source: ExecNode, local: ExecNode, coordinator: Coordinator) -> None:
        self.source, self.local, self.coordinator = source, local, coordinator
        self.now_ms = 0.0
        self.auth = local.processor.enable_auth(
            AuthSettings(authenticate=True, authorize=True, validity_ms=2000),
            lambda: self.now_ms,
        )
        self.backend = ProcessorBackend(local.processor)
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="auth")
        local.processor._auth_submit = self.pool.submit  # as ``use_data_plane`` gives it

    def login(self, user: str, password: str) -> SessionState:
        session = SessionState()
        self.backend.authenticate(session, _token(user, password)).result(TIMEOUT_S)
        return session

    def run(self, session: SessionState, text: str) -> Response:
        parameters = QueryParameters(Consistency.QUORUM)
        handled = self.backend.handle(session, Query(text, parameters))
        answered: concurrent.futures.Future[Handled] = concurrent.futures.Future()
        when_answered(handled, answered.set_result, answered.set_exception)
        return answered.result(TIMEOUT_S).response

    def ok(self, session: SessionState, text: str) -> Response:
        response = self.run(session, text)
        assert isinstance(response, VoidResult | RowsResult | SchemaChangeResult), (text, response)
        return response

    def refused(self, session: SessionState, text: str) -> tuple[int, str]:
        response = self.run(session, text)
        code, message = getattr(response, "code", None), getattr(response, "message", None)
        assert isinstance(code, int) and isinstance(message, str), (text, response)
        return code, message


@pytest.fixture
def auth(tmp_path: Path) -> Iterator[Auth]:
    nodes = coordinated_nodes(tmp_path)
    source, local, coordinator = next(nodes)
    found = Auth(source, local, coordinator)
    yield found
    found.pool.shutdown(wait=True)
    next(nodes, None)


def test_the_default_superuser_is_written_through_the_coordinator_and_logs_in(auth: Auth) -> None:
    assert auth.local.processor.run_auth(lambda a: a.setup_default_superuser()).result(TIMEOUT_S)
    assert auth.coordinator.writes == 1
    roles = auth.source.q("SELECT role, is_superuser FROM system_auth.roles")
    assert roles == [("cassandra", True)], "on the replicas, not only here"
    assert not auth.local.store.read_mutation(("system_auth", "roles"), (b"cassandra",))
    session = auth.login("cassandra", "cassandra")
    assert session.user == "cassandra"
    with pytest.raises(AuthenticationFailed):
        auth.login("cassandra", "wrong")
    assert auth.auth.failed_logins == 1
    assert not auth.local.processor.run_auth(lambda a: a.setup_default_superuser()).result(
        TIMEOUT_S
    ), "a role exists: nothing written"
    assert auth.coordinator.writes == 1


def test_roles_and_grants_go_through_the_coordinator_and_hold(auth: Auth) -> None:
    auth.local.processor.run_auth(lambda a: a.setup_default_superuser()).result(TIMEOUT_S)
    admin = auth.login("cassandra", "cassandra")
    auth.ok(admin, "CREATE ROLE alice WITH PASSWORD = 'secret' AND LOGIN = true")
    auth.ok(admin, "CREATE ROLE readers")
    auth.ok(admin, "GRANT SELECT ON KEYSPACE ks TO readers")
    auth.ok(admin, "GRANT readers TO alice")
    granted = auth.source.q("SELECT role, resource FROM system_auth.role_permissions")
    assert ("readers", "data/ks") in granted
    members = auth.source.q("SELECT role, member FROM system_auth.role_members")
    assert members == [("readers", "alice")]

    alice = auth.login("alice", "secret")
    assert decode_rows(auth.run(alice, "SELECT k FROM ks.t WHERE k = 1"))  # type: ignore[arg-type]
    code, message = auth.refused(alice, "INSERT INTO ks.t (k, c, v) VALUES (9, 9, 'x')")
    assert code == ErrorCode.UNAUTHORIZED and "has no MODIFY permission" in message
    listed = auth.run(admin, "LIST ROLES")
    assert isinstance(listed, RowsResult)
    assert [row[0] for row in decode_rows(listed)] == ["alice", "cassandra", "readers"]

    auth.ok(admin, "REVOKE readers FROM alice")
    auth.now_ms += 2001  # another node's caches: within the validity
    code, message = auth.refused(alice, "SELECT k FROM ks.t WHERE k = 1")
    assert code == ErrorCode.UNAUTHORIZED and "has no SELECT permission" in message
    auth.ok(admin, "DROP ROLE readers")
    assert not [r for r in auth.source.q("SELECT role FROM system_auth.roles") if r == ("readers",)]


def test_a_ddl_grants_its_creator_through_the_coordinator(auth: Auth) -> None:
    auth.local.processor.run_auth(lambda a: a.setup_default_superuser()).result(TIMEOUT_S)
    admin = auth.login("cassandra", "cassandra")
    auth.ok(admin, "CREATE ROLE bob WITH PASSWORD = 'pw' AND LOGIN = true")
    auth.ok(admin, "GRANT CREATE ON ALL KEYSPACES TO bob")
    bob = auth.login("bob", "pw")
    before = auth.coordinator.writes
    auth.ok(
        bob,
        "CREATE KEYSPACE bobs WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}",
    )
    assert auth.coordinator.writes == before + 1, "the creator's grants, one write"
    granted = auth.source.q("SELECT role, resource FROM system_auth.role_permissions")
    assert ("bob", "data/bobs") in granted


def test_a_statement_whose_grants_cannot_be_read_answers_the_read_error(auth: Auth) -> None:
    auth.local.processor.run_auth(lambda a: a.setup_default_superuser()).result(TIMEOUT_S)
    admin = auth.login("cassandra", "cassandra")
    auth.now_ms += 5000  # nothing cached any more
    auth.coordinator.failing = ReadTimeout(Consistency.QUORUM, 1, 2, False)
    code, _message = auth.refused(admin, "SELECT k FROM ks.t WHERE k = 1")
    assert code == ErrorCode.READ_TIMEOUT


def test_no_thread_waits_for_a_role_read_and_later_runs_go_to_the_auth_pool(
    auth: Auth, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The login's first run is on the caller's thread; it lacks the role, whose read is only
    started; the run that checks the password is on the auth pool once the role is here."""
    auth.local.processor.run_auth(lambda a: a.setup_default_superuser()).result(TIMEOUT_S)
    threads: list[str] = []
    original = AuthService.authenticate

    def recording(service: AuthService, token: bytes | None) -> str:
        threads.append(threading.current_thread().name)
        return original(service, token)

    monkeypatch.setattr(AuthService, "authenticate", recording)
    auth.now_ms += 5000
    auth.coordinator.delay_s = 0.05  # the read is still out when the first run ends
    session = SessionState()
    started = auth.backend.authenticate(session, _token("cassandra", "cassandra"))
    started.result(TIMEOUT_S)
    assert session.user == "cassandra"
    assert threads[0] == threading.current_thread().name
    assert threads[-1].startswith("auth"), threads
