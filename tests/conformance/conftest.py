"""Fixtures parametrizing every conformance test over the simulated and the real implementation."""

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


@pytest.fixture(params=["sim", "asyncio"])
def net(request: pytest.FixtureRequest) -> Iterator[NetHarness]:
    harness: NetHarness = SimNetHarness() if request.param == "sim" else AsyncioNetHarness()
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
