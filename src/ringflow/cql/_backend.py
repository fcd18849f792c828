"""The ``Backend`` a CQL shell serves: statements through the node's ``QueryProcessor``.

Used by a single node's and a cluster node's ``CqlServer`` and by the simulator's CQL shell
alike: each statement's schema changes (to push as events), its warnings and the write or read
it leaves pending (a future the shell waits for with no thread waiting) come back with its
answer as one ``Handled``.

Every statement runs here, so the node's own reactions to a schema change are here too: the
``SchemaReaction`` the backend is built with (a node's ``system.local`` row, a cluster node's
announcement to its peers) is called once per statement that changed the schema, with its
changes, on the thread that ran it, before its answer. A reaction that fails is logged; the
change stands.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from ringflow.cql._auth_model import PASSWORD_AUTHENTICATOR
from ringflow.cql._exec_auth import EffectivePermissions
from ringflow.cql._executor import QueryProcessor, SessionState
from ringflow.cql._requests import Execute, Prepare, Query
from ringflow.cql._responses import Response
from ringflow.cql._results import SchemaChange, VoidResult
from ringflow.cql._server import Handled
from ringflow.cql._server import Statement as StatementRequest
from ringflow.errors import Consistency, InternalError

_log = logging.getLogger(__name__)

SchemaReaction = Callable[[tuple[SchemaChange, ...]], None]
"""The node's reaction to a statement's schema changes (module docstring)."""


class ProcessorBackend:
    """Adapts the ``QueryProcessor`` to the server's ``Backend`` protocol: each statement's
    answer with its schema changes (all of them: creating a CDC table also creates its log
    table, so the server pushes one SCHEMA_CHANGE event per change), its warnings and the work
    it left pending, as the processor hands them back for the request."""

    authenticator_class = PASSWORD_AUTHENTICATOR

    def __init__(
        self, processor: QueryProcessor, *, on_schema_change: SchemaReaction | None = None
    ) -> None:
        self._processor = processor
        self._on_schema_change = on_schema_change

    def open_session(self) -> SessionState:
        return SessionState(None)

    def authenticate(
        self, session: SessionState, token: bytes | None
    ) -> concurrent.futures.Future[None]:
        """SASL PLAIN login (the server's ``Authenticator``), on a login thread (bcrypt is
        CPU): the role is read with no thread waiting (``QueryProcessor.run_auth``); the
        future is done once ``session`` holds the role, or fails (AuthenticationFailed)."""
        if self._processor.auth is None:
            raise InternalError("authenticate called on a node without an authenticator")
        logged_in: concurrent.futures.Future[None] = concurrent.futures.Future()

        def checked(done: concurrent.futures.Future[str]) -> None:
            try:
                session.user = done.result()
            except BaseException as error:
                logged_in.set_exception(error)
            else:
                logged_in.set_result(None)

        self._processor.run_auth(lambda service: service.authenticate(token)).add_done_callback(
            checked
        )
        return logged_in

    def server_authenticator(self) -> ProcessorBackend | None:
        """This backend as the server's authenticator when logins are required, else None."""
        auth = self._processor.auth
        return self if auth is not None and auth.settings.authenticate else None

    def handle(self, session: SessionState, statement: StatementRequest) -> Handled:
        """Runs on the statement thread; the changes, warnings and pending write collected are
        this thread's. The statement is checked against its user's grants: resolved first
        (cached, or read with no thread waiting: then the statement runs on the thread that
        finished resolving them, and its answer is pending)."""
        processor = self._processor
        resolving = (
            None if isinstance(statement, Prepare) else processor.resolve_grants(session.user)
        )
        if resolving is None or isinstance(resolving, EffectivePermissions):
            return self._handle(session, statement, resolving)
        if resolving.done():
            return self._resolved(session, statement, resolving)
        handled: concurrent.futures.Future[Response | Handled] = concurrent.futures.Future()

        def resolved(done: concurrent.futures.Future[EffectivePermissions]) -> None:
            try:
                handled.set_result(self._resolved(session, statement, done))
            except BaseException as error:  # a bug: answered ServerError (``when_answered``)
                handled.set_exception(error)

        resolving.add_done_callback(resolved)
        return Handled(VoidResult(), pending=handled)

    def _resolved(
        self,
        session: SessionState,
        statement: StatementRequest,
        resolving: concurrent.futures.Future[EffectivePermissions],
    ) -> Handled:
        """The statement run against the grants resolved, or answered with what refused
        them (e.g. Unavailable: too few replicas of ``system_auth``)."""
        error = resolving.exception()
        if isinstance(error, Exception):
            return Handled(self._processor.error_response(error, _consistency(statement)))
        return self._handle(session, statement, resolving.result())

    def _handle(
        self,
        session: SessionState,
        statement: StatementRequest,
        grants: EffectivePermissions | None,
    ) -> Handled:
        processor = self._processor
        if isinstance(statement, Query):
            response = processor.query(statement, session, grants)
        elif isinstance(statement, Prepare):
            response = processor.prepare(statement, session)
        elif isinstance(statement, Execute):
            response = processor.execute(statement, session, grants)
        else:
            response = processor.batch(statement, session, grants)
        changes = processor.take_schema_changes()
        if changes and self._on_schema_change is not None:
            try:
                self._on_schema_change(changes)
            except Exception:  # the change is committed: a failed reaction must not undo it
                _log.exception("the reaction to the schema changes %s failed", changes)
        pending = processor.take_pending()
        if pending is None:
            return Handled(response, changes, processor.take_warnings())
        future, consistency = pending
        if future.done():  # committed or read at once (nothing else was waiting)
            error = future.exception()
            if isinstance(error, Exception):
                response = processor.error_response(error, consistency)
            elif error is not None:
                raise error
            else:
                found = future.result()
                response = response if found is None else found
            return Handled(response, changes, processor.take_warnings())
        answer = response
        answered: concurrent.futures.Future[Response | Handled] = concurrent.futures.Future()

        def finish(done: concurrent.futures.Future[Any]) -> None:  # nothing blocks on it
            try:
                found = done.result()
            except Exception as error:
                answered.set_result(processor.error_response(error, consistency))
            except BaseException as error:
                answered.set_exception(error)
            else:
                answered.set_result(answer if found is None else found)

        future.add_done_callback(finish)
        return Handled(response, changes, processor.take_warnings(), answered)


def _consistency(statement: StatementRequest) -> Consistency:
    if isinstance(statement, Query | Execute):
        return statement.parameters.consistency
    if isinstance(statement, Prepare):
        return Consistency.ONE
    return statement.consistency
