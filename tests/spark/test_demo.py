"""``ringflow demo --rows 300`` as a user runs it: a subprocess that starts two nodes and
PostgreSQL, writes (with a kill -9 of the edge node half-way), replicates, verifies, plots and
stops everything, within a bounded time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMO_TIMEOUT_S = 420


@pytest.mark.slow
def test_demo_runs_the_whole_story(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    script = Path(sys.executable).parent / "ringflow"
    command = [str(script), "demo", "--rows", "300", "--workdir", str(workdir)]
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
    assert result.returncode == 0, output[-6000:]
    assert "kill -9" in output and "restarted" in output
    assert "OK: every destination equals the edge table" in output
    for destination in ("hub", "lake", "postgres"):
        assert destination in output
    plot = workdir / "lag.png"
    assert plot.exists() and plot.stat().st_size > 10_000
    # every process the demo started is gone: nothing listens on its data directories
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert str(workdir) not in ps.stdout
