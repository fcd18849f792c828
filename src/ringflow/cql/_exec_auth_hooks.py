"""Where the statement executor meets authentication and authorization (issue 18).

``QueryProcessor`` (``_executor``) calls these at fixed points of a request; each is a no-op
when the node runs without auth (``auth`` None) or the session is internal (``user`` None), so
the executor reads the same with auth on or off:

* ``make_auth_service``: the ``AuthService`` of ``enable_auth``, its ``system_auth`` rows read
  and written through the processor's data plane (``PlaneAuthRows``, ``PlaneAuthIO``);
* ``check_statement``: Unauthorized (0x2100) unless the role may run the statement
  (``AuthService.authorize_all`` / ``authorize``, ``CassandraAuthorizer`` semantics), against
  the grants the shell resolved for the statement (``SessionState.grants``);
* ``role_statement_work``: a role or permission statement (``_exec_roles``), to run once the
  lock is released (``_auth_runs``: no thread waits for its reads and writes); Invalid when the
  node has no authenticator or authorizer;
* ``schema_change_work``: what a DDL's answer leads to (the creator's grants, the grants on what
  was dropped), also after the lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ringflow.cql._ast import Statement
from ringflow.cql._ast_auth import AuthStatement
from ringflow.cql._auth_rows import PlaneAuthRows
from ringflow.cql._exec_auth import AuthService, AuthSettings, EffectivePermissions
from ringflow.cql._exec_roles import RoleStatements
from ringflow.cql._responses import Response
from ringflow.cql._results import SchemaChangeResult
from ringflow.errors import InvalidRequest
from ringflow.schema import SchemaState

if TYPE_CHECKING:
    from ringflow.cql._executor import DataPlane

AuthWork = Callable[[AuthService], Response | None]


def make_auth_service(
    plane: Callable[[], DataPlane],
    clock_us: Callable[[], int],
    settings: AuthSettings,
    clock_ms: Callable[[], float],
    next_timestamp_us: Callable[[], int],
) -> AuthService:
    """The node's ``AuthService``, its rows going through the (current) data plane."""
    rows = PlaneAuthRows(plane, clock_us)
    return AuthService(rows, settings, clock_ms=clock_ms, next_timestamp_us=next_timestamp_us)


def check_statement(
    auth: AuthService | None,
    user: str | None,
    statement: Statement,
    keyspace: str | None,
    schema: SchemaState,
    grants: EffectivePermissions | None = None,
) -> None:
    """Unauthorized unless ``user`` may run ``statement`` (each statement of a text batch; a
    statement of a BATCH message is checked alone the same way), against ``grants`` when the
    shell resolved them."""
    if auth is not None and user is not None:
        auth.authorize_all(user, statement, keyspace, schema, grants)


def role_statement_work(
    auth: AuthService | None,
    statement: AuthStatement,
    user: str | None,
    keyspace: str | None,
    schema: SchemaState,
) -> AuthWork:
    """A role or permission statement, to run once the lock is released over the service it
    is given (``run_auth``: its reads and writes go through the cluster)."""
    if auth is None:
        raise InvalidRequest(
            "Roles and permissions need an authenticator or authorizer: start the node "
            "with authenticator: PasswordAuthenticator (ringflow cluster start --auth)"
        )
    return lambda service: RoleStatements(service, schema).execute(statement, user, keyspace)


def schema_change_work(
    auth: AuthService | None, user: str | None, response: Response
) -> Callable[[AuthService], None] | None:
    """The grants a DDL's answer leads to (a creator's, or none left on what was dropped)."""
    if auth is None or not isinstance(response, SchemaChangeResult):
        return None
    return auth.schema_change_work(user, response.change)
