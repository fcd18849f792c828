"""The demo's security (issue 18): every connection of ``ringflow demo`` logs in and runs TLS.

* The edge cluster starts with ``ringflow cluster start --tls --auth``: a local CA and node
  certificates under ``<workdir>/edge/tls``, TLS required on the native port and between nodes,
  PasswordAuthenticator + CassandraAuthorizer.
* The hub node gets a certificate from the same CA and runs TLS (required) and the same auth;
  PostgreSQL gets one too and accepts TLS connections only (``sslmode=verify-full``).
* Roles, as an operator sets them up: the default superuser ``cassandra`` of the edge and of the
  hub gets a random password (its default-password warning stops); the job logs in to the edge
  as ``replicator`` (SELECT on the demo keyspace, SELECT and MODIFY on ``system_replication``),
  the hub sink to the hub as ``hub_writer`` (SELECT and MODIFY on the demo keyspace). Passwords
  are random, kept in ``<workdir>/secrets/<role>`` (mode 0600, the directory 0700), and reach
  the commands as ``--password-file`` and the hub URL's ``password_file=``, never on a command
  line.
* A new role is usable on every node once each node has read it: ``wait_logins`` tries each
  node (bounded) before the story goes on.

``ringflow demo --no-security`` runs without any of it (``DemoSecurity(enabled=False)``: every
method then gives what a plaintext, anonymous connection needs).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringflow.runtime import (
    ClientEncryptionOptions,
    client_context,
    format_option_map,
    make_local_tls,
)

if TYPE_CHECKING:
    from ringflow.pipeline import ClusterOptions, DriverTls

SUPERUSER = "cassandra"
REPLICATOR = "replicator"
HUB_WRITER = "hub_writer"
LOGIN_TIMEOUT_S = 60.0
LOGIN_RETRY_S = 0.5
"""Between tries of a login a node does not accept yet (a role cache holds an old password
for up to 2 s): a few failed logins, far below the node's limit per client address."""
POSTGRES_ADDRESS = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class DemoSecurity:
    """Where the demo's CA and passwords are, and the options each connection needs."""

    tls_dir: Path
    secrets_dir: Path
    enabled: bool = True

    @property
    def ca(self) -> Path:
        return self.tls_dir / "ca.crt"

    def cluster_options(self) -> tuple[str, ...]:
        """``ringflow cluster start`` options of the edge cluster."""
        return ("--tls", "--auth") if self.enabled else ()

    def hub_arguments(self, address: str) -> list[str]:
        """``ringflow node start`` options of the hub: a certificate from the edge's CA."""
        if not self.enabled:
            return []
        make_local_tls(self.tls_dir, [address])
        client = ClientEncryptionOptions(
            enabled=True,
            certificate=self.tls_dir / f"{address}.crt",
            keyfile=self.tls_dir / f"{address}.key",
        )
        return [
            *("--client-encryption-options", format_option_map(client.to_map())),
            *("--authenticator", "PasswordAuthenticator", "--authorizer", "CassandraAuthorizer"),
        ]

    def postgres_tls(self) -> tuple[Path, Path] | None:
        """PostgreSQL's certificate and key (its address's, from the CA), or None."""
        if not self.enabled:
            return None
        make_local_tls(self.tls_dir, [POSTGRES_ADDRESS])
        return self.tls_dir / f"{POSTGRES_ADDRESS}.crt", self.tls_dir / f"{POSTGRES_ADDRESS}.key"

    def postgres_url(self, url: str) -> str:
        if not self.enabled:
            return url
        return f"{url}?sslmode=verify-full&sslrootcert={self.ca}"

    def password_file(self, role: str) -> Path:
        return self.secrets_dir / role

    def password(self, role: str) -> str:
        return self.password_file(role).read_text().strip()

    def new_password(self, role: str) -> str:
        """A random password for ``role``, kept in its file (0600)."""
        self.secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        password = secrets.token_urlsafe(18)
        path = self.password_file(role)
        path.touch(mode=0o600)
        path.write_text(password + "\n")
        return password

    def driver_options(self, role: str = SUPERUSER, password: str | None = None) -> dict[str, Any]:
        """The driver ``Cluster`` options of a session logged in as ``role``."""
        if not self.enabled:
            return {}
        from cassandra.auth import PlainTextAuthProvider

        secret = self.password(role) if password is None else password
        return {
            "ssl_context": client_context(self.ca),
            "auth_provider": PlainTextAuthProvider(role, secret),
        }

    def edge_arguments(self) -> list[str]:
        """How ``ringflow replication ...`` commands reach the edge (as the replicator)."""
        if not self.enabled:
            return []
        return [
            *("--username", REPLICATOR, "--password-file", str(self.password_file(REPLICATOR))),
            *("--ssl-ca", str(self.ca)),
        ]

    def job_login(self) -> dict[str, str]:
        if not self.enabled:
            return {}
        return {"username": REPLICATOR, "password": self.password(REPLICATOR)}

    def job_tls(self) -> DriverTls | None:
        from ringflow.pipeline import DriverTls

        return DriverTls(str(self.ca)) if self.enabled else None

    def edge(self, contact_points: str) -> ClusterOptions:
        """The edge as the job and the status reads reach it."""
        from ringflow.pipeline import edge_options

        return edge_options(contact_points, self.job_login(), self.job_tls())

    def hub_url(self, endpoint: str) -> str:
        """The hub channel's URL: TLS with the job's CA, logged in as ``hub_writer``."""
        if not self.enabled:
            return f"ringflow://{endpoint}?consistency=ONE"
        secret = self.password_file(HUB_WRITER)
        return f"ringflow://{HUB_WRITER}@{endpoint}?consistency=ONE&ssl=true&password_file={secret}"


def _login(contact: str, port: int, options: dict[str, Any]) -> Any:
    """A driver cluster connected to ``contact`` only (the caller shuts it down)."""
    from cassandra.cluster import Cluster
    from cassandra.policies import WhiteListRoundRobinPolicy

    cluster = Cluster(
        [contact],
        port=port,
        protocol_version=4,
        connect_timeout=10,
        load_balancing_policy=WhiteListRoundRobinPolicy([contact]),
        **options,
    )
    try:
        cluster.connect()
    except Exception:
        cluster.shutdown()
        raise
    return cluster


def wait_logins(endpoints: Sequence[tuple[str, int]], options: dict[str, Any]) -> None:
    """Until a session with ``options`` logs in through every endpoint (bounded): a role just
    created or changed reaches each node's reads and caches within moments."""
    for address, port in endpoints:
        deadline = time.monotonic() + LOGIN_TIMEOUT_S
        while True:
            try:
                _login(address, port, options).shutdown()
                break
            except Exception:  # AuthenticationFailed / NoHostAvailable until the node has it
                if time.monotonic() > deadline:
                    raise
                time.sleep(LOGIN_RETRY_S)


@contextmanager
def superuser_session(
    security: DemoSecurity, endpoints: Sequence[tuple[str, int]]
) -> Iterator[Any]:
    """A session as the default superuser with its default password, once it logs in (the
    first node to start writes it moments after the cluster is up)."""
    options = security.driver_options(SUPERUSER, SUPERUSER)
    wait_logins(endpoints[:1], options)
    cluster = _login(endpoints[0][0], endpoints[0][1], options)
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


def secure_roles(security: DemoSecurity, session: Any, keyspace: str, role: str) -> None:
    """The superuser's default password replaced, and ``role`` (``REPLICATOR`` on the edge,
    ``HUB_WRITER`` on the hub) created with the grants it needs on ``keyspace``."""
    password = security.new_password(role)
    session.execute(f"CREATE ROLE {role} WITH PASSWORD = '{password}' AND LOGIN = true")
    session.execute(f"GRANT SELECT ON KEYSPACE {keyspace} TO {role}")
    if role == REPLICATOR:
        session.execute(f"GRANT SELECT ON KEYSPACE system_replication TO {role}")
        session.execute(f"GRANT MODIFY ON KEYSPACE system_replication TO {role}")
    else:
        session.execute(f"GRANT MODIFY ON KEYSPACE {keyspace} TO {role}")
    superuser = security.password_file(SUPERUSER)
    secret = security.password(SUPERUSER) if superuser.exists() else None
    secret = secret or security.new_password(SUPERUSER)
    session.execute(f"ALTER ROLE {SUPERUSER} WITH PASSWORD = '{secret}'")
