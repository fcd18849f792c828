"""Fixtures parametrizing every conformance test over the simulated and the real implementation
(the network on asyncio's loop and on uvloop's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance._harness import (
    AsyncioNetHarness,
    DiskHarness,
    LocalDiskHarness,
    NetHarness,
    SimDiskHarness,
    SimNetHarness,
)


@pytest.fixture(params=["sim", "asyncio", "uvloop"])
def net(request: pytest.FixtureRequest) -> Iterator[NetHarness]:
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    harness: NetHarness = (
        SimNetHarness() if request.param == "sim" else AsyncioNetHarness(request.param)
    )
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture(params=["sim", "local"])
def disk_harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DiskHarness]:
    root = tmp_path / "disk"
    harness: DiskHarness = (
        SimDiskHarness(root) if request.param == "sim" else LocalDiskHarness(root)
    )
    try:
        yield harness
    finally:
        harness.close()
