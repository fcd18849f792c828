"""``ringflow demo --rows 300`` as a user runs it: a subprocess that starts a 3-node edge cluster,
a hub node and PostgreSQL, creates replication channels, runs replica-side replication while it
writes at QUORUM (with a kill -9 and a restart of one edge node on the way, and the hub away for
a while), waits for the restarted node's hints and for every destination to catch up, verifies,
plots and stops everything, within a bounded time. (On a random free loopback block: other
engineers' nodes may hold 127.0.0.1-3 at the same time.)

Security is on, as the demo runs by default (issue 18): the edge cluster runs ``cluster start
--tls --auth``, the hub node TLS and auth, PostgreSQL TLS only; the job and the channel commands
log in as ``replicator``, the hub sink as ``hub_writer``, with random passwords kept in
``<workdir>/secrets``, none of which appears in the output or the job's log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringflow.cli._demo_cluster import free_loopback_block, random_loopback_address

DEMO_TIMEOUT_S = 420


@pytest.mark.slow
def test_demo_runs_the_whole_story(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    script = Path(sys.executable).parent / "ringflow"
    command = [
        *(str(script), "demo", "--rows", "300", "--workdir", str(workdir)),
        *("--edge-address", free_loopback_block(3), "--hub-address", random_loopback_address()),
    ]
    env = {**os.environ, "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:] + _logs(workdir)
    assert "kill -9" in output and "restarted" in output
    assert "hints replayed:" in output
    assert "unreachable since" in output  # the status while the hub is away
    assert "hub node restarted" in output and "caught up" in output
    assert "sends/change" in output
    assert "ringflow cluster stopped" in output
    assert "OK: every destination equals the edge table" in output
    for destination in ("hub", "lake", "postgres"):
        assert destination in output
    assert "security: TLS everywhere" in output and "--ssl-ca" in output
    assert "sslmode=verify-full" in output and "ssl=true&password_file=" in output
    passwords = [path.read_text().strip() for path in (workdir / "secrets").iterdir()]
    assert len(passwords) == 3  # the superusers', the replicator's, the hub writer's
    job_log = (workdir / "job.log").read_text()
    assert not any(password in output or password in job_log for password in passwords)
    plot = workdir / "replication.png"
    assert plot.exists() and plot.stat().st_size > 10_000
    # every process the demo started is gone: nothing listens on its data directories
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert str(workdir) not in ps.stdout


def _logs(workdir: Path, tail: int = 3000) -> str:
    """The tail of every node's and the job's log under ``workdir``: a failed run's story on
    the nodes' side (connections closed and why, at INFO), which the demo's output lacks."""
    found = sorted(workdir.rglob("*.log"))
    return "".join(
        f"\n--- {path.relative_to(workdir)}\n{path.read_text(errors='replace')[-tail:]}"
        for path in found
        if path.is_file()
    )
