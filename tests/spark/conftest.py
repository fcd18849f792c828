"""Session-scoped fixtures of the Spark tests: one local SparkSession, one PostgreSQL server.

The SparkSession costs ~10 s to start on the 2-core machines, so every test shares one
(pipelines-spark.md §10). The PostgreSQL 15 server is a throwaway cluster: ``initdb`` into a temp
directory, listening on 127.0.0.1 only with trust authentication, stopped and deleted at the end.
``initdb`` and ``postgres`` refuse to run as root, so as root they run as ``nobody`` (via
``runuser``/``setpriv``) with the directory handed to that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")
psycopg = pytest.importorskip("psycopg")

from pyspark.sql import SparkSession  # noqa: E402

from ringflow.pipeline import local_spark_session  # noqa: E402

_PG_USER = "nobody"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_spark_session("ringflow-tests")
    yield session
    session.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres_user(command: list[str]) -> list[str]:
    """``command`` run as an unprivileged user when we are root (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser"):
        return ["runuser", "-u", _PG_USER, "--", *command]
    entry = pwd.getpwnam(_PG_USER)
    return [
        "setpriv",
        f"--reuid={entry.pw_uid}",
        f"--regid={entry.pw_gid}",
        "--clear-groups",
        *command,
    ]


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        for directory in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
            if (directory / name).exists():
                return str(directory / name)
        pytest.skip(f"PostgreSQL binary {name!r} not found")
    return found


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server for the session; its URL (database ``postgres``)."""
    base = Path(tempfile.mkdtemp(prefix="ringflow-pg-"))
    data = base / "data"
    if os.geteuid() == 0:
        entry = pwd.getpwnam(_PG_USER)
        os.chown(base, entry.pw_uid, entry.pw_gid)
    port = _free_port()
    initdb = [_binary("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"]
    subprocess.run(
        _as_postgres_user([*initdb, "-E", "UTF8", "--locale=C"]),
        check=True,
        capture_output=True,
    )
    options = f"-k {base} -h 127.0.0.1 -p {port} -F -c max_connections=50"
    pg_ctl = _binary("pg_ctl")
    start = [pg_ctl, "-D", str(data), "-o", options, "-l", str(base / "log"), "-w", "start"]
    subprocess.run(_as_postgres_user(start), check=True, capture_output=True)
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    _wait_ready(url)
    try:
        yield url
    finally:
        stop = [pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]
        subprocess.run(_as_postgres_user(stop), check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _wait_ready(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
