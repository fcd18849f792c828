"""Fixtures of the cluster unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.cluster._coordinated import Coordinator, coordinated_nodes
from tests.unit.cql._exec_harness import ExecNode


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[ExecNode, ExecNode, Coordinator]]:
    """``coordinated_nodes``: source, local node over the coordinator, the coordinator."""
    yield from coordinated_nodes(tmp_path)
