"""``LocalCluster`` (the demo's and the tests' cluster of real node processes): a start that
fails leaves no node running (a CI run once left three, gossiping for the rest of the run,
after its readiness wait timed out on a loaded machine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ringflow.cli._demo_cluster import LocalCluster, free_loopback_block
from ringflow.errors import ConfigurationError


def _processes_of(data: Path) -> list[int]:
    """The pids of the processes whose command line names ``data``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(data).encode() in command and state != "Z":
            found.append(int(entry))
    return found


def test_a_start_that_is_not_ready_in_time_stops_the_nodes_it_started(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    cluster = LocalCluster(data, 2, first_address=free_loopback_block(2), timeout_s=0.05)
    with pytest.raises(ConfigurationError, match="was not UP"):
        cluster.start()
    assert (data / "cluster.json").exists()  # it was laid out and started
    assert _processes_of(data) == []


def test_the_log_level_of_a_start_is_the_nodes_and_is_kept(tmp_path: Path) -> None:
    """``cluster start --log-level INFO`` (the demo's edge): the nodes log at INFO, and a later
    start without the option keeps it (it is in ``cluster.json``)."""
    data = tmp_path / "cluster"
    cluster = LocalCluster(
        data, 1, first_address=free_loopback_block(1), options=("--log-level", "INFO")
    )
    try:
        cluster.start()
        log = cluster.log(cluster.addresses[0], 20_000)
        assert " INFO ringflow." in log, log[-2000:]
        assert '"log_level": "INFO"' in (data / "cluster.json").read_text()
        (pid,) = _processes_of(data)
        assert b"--log-level\x00INFO" in Path(f"/proc/{pid}/cmdline").read_bytes()
        cluster.stop()
        cluster.wait_ready()  # ``cluster start`` with none of the first start's options
        (pid,) = _processes_of(data)
        assert b"--log-level\x00INFO" in Path(f"/proc/{pid}/cmdline").read_bytes()
    finally:
        cluster.stop()
    assert _processes_of(data) == []
