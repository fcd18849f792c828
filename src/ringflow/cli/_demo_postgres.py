"""A throwaway PostgreSQL server for ``ringflow demo`` and the Spark tests' ``postgres_url``
fixture (``tests/spark/conftest.py``): initdb + pg_ctl in a temp directory.

A fresh cluster in a temporary directory, listening on 127.0.0.1 only (plus a Unix socket in
that directory) with trust authentication, fsync off, stopped with ``-m immediate`` and deleted
afterwards.
``initdb`` and ``postgres`` refuse to run as root, so as root they run as ``nobody`` (via
``runuser``, else ``setpriv``) with the directory handed to that user. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from ringflow.errors import ConfigurationError

PG_USER = "nobody"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class PostgresUnavailable(ConfigurationError):
    """No PostgreSQL binaries on this machine, or the server would not start."""


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS's pick)."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _as_postgres_user(command: list[str]) -> list[str]:
    """``command`` run as an unprivileged user when we are root (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser"):
        return ["runuser", "-u", PG_USER, "--", *command]
    entry = pwd.getpwnam(PG_USER)
    return [
        "setpriv",
        f"--reuid={entry.pw_uid}",
        f"--regid={entry.pw_gid}",
        "--clear-groups",
        *command,
    ]


def postgres_binary(name: str) -> str:
    """The path of a PostgreSQL server program (PATH, else the newest /usr/lib/postgresql)."""
    found = shutil.which(name)
    if found is not None:
        return found
    for directory in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (directory / name).exists():
            return str(directory / name)
    raise PostgresUnavailable(f"PostgreSQL program {name!r} not found (install postgresql)")


class PostgresServer:
    """One throwaway server; ``start()`` returns it, ``stop()`` is idempotent."""

    def __init__(self, parent: Path | None = None, *, tls: tuple[Path, Path] | None = None) -> None:
        """``tls``: a server certificate and key (PEM): the server then has ``ssl = on`` and
        accepts TCP connections over TLS only (``hostssl`` in ``pg_hba.conf``)."""
        self.base = Path(tempfile.mkdtemp(prefix="ringflow-pg-", dir=parent))
        self.tls = tls
        self.data = self.base / "data"
        self.port = 0
        self.started = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, command: list[str], timeout_s: float) -> None:
        try:
            subprocess.run(
                _as_postgres_user(command), check=True, capture_output=True, timeout=timeout_s
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            output = getattr(error, "stderr", b"") or b""
            raise PostgresUnavailable(
                f"{Path(command[0]).name} failed: {output.decode(errors='replace')[-800:]}"
            ) from None

    def start(self) -> PostgresServer:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(PG_USER)
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        initdb = [postgres_binary("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"]
        self._run([*initdb, "--no-sync", "-E", "UTF8", "--locale=C"], START_TIMEOUT_S)
        self.port = free_port()
        options = f"-k {self.base} -h 127.0.0.1 -p {self.port} -F -c max_connections=50"
        if self.tls is not None:
            options += self._tls_options(*self.tls)
        pg_ctl = postgres_binary("pg_ctl")
        log = str(self.base / "log")
        self._run(
            [pg_ctl, "-D", str(self.data), "-o", options, "-l", log, "-w", "start"],
            START_TIMEOUT_S,
        )
        self.started = True
        self._wait_ready()
        return self

    def _tls_options(self, certificate: Path, key: Path) -> str:
        """Copy the certificate and key where the server's user owns them (PostgreSQL refuses
        a key others can read), allow TLS connections only, and the options that turn it on."""
        copies = []
        for source, name in ((certificate, "server.crt"), (key, "server.key")):
            target = self.base / name
            target.write_bytes(source.read_bytes())
            target.chmod(0o600)
            if os.geteuid() == 0:
                entry = pwd.getpwnam(PG_USER)
                os.chown(target, entry.pw_uid, entry.pw_gid)
            copies.append(target)
        hba = self.data / "pg_hba.conf"
        hba.write_text(
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n"
            "hostnossl all all 0.0.0.0/0 reject\n"
        )
        return f" -c ssl=on -c ssl_cert_file={copies[0]} -c ssl_key_file={copies[1]}"

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=2):
                    return
            except psycopg.OperationalError as error:
                if time.monotonic() > deadline:
                    raise PostgresUnavailable(f"PostgreSQL did not accept: {error}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server (immediate mode) and delete its directory."""
        if self.started:
            self.started = False
            stop = [postgres_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w"]
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(
                    _as_postgres_user([*stop, "stop"]),
                    check=False,
                    capture_output=True,
                    timeout=STOP_TIMEOUT_S,
                )
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
