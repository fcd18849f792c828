"""Harnesses that let one test body drive either implementation of the runtime interfaces.

trio's ``check_*_stream`` suites (reliability-and-style.md §B2) take a factory of stream pairs;
ours take a harness: a ``Network`` and a ``Clock`` plus the two things a test needs from the
world around them, letting time pass (``pass_time``) and waiting, bounded, for a condition
(``wait_until``). The simulated harness runs virtual time; the asyncio harness runs a private
event loop on real loopback sockets (127.0.0.x, ephemeral ports), every wait with a timeout.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ringflow.runtime import (
    AsyncioNetwork,
    AsyncioNetworkConfig,
    Clock,
    Disk,
    Endpoint,
    LocalDisk,
    Network,
    SystemClock,
)
from ringflow.sim import NetworkConfig, SimDisk, Simulation

MAX_FRAME_BYTES = 1024 * 1024
MAX_QUEUED = 16
"""Both harnesses use the same limits, so the tests can state exact expectations."""


class NetHarness(Protocol):
    name: str
    network: Network
    clock: Clock

    def address(self, index: int) -> Endpoint: ...

    def wait_until(self, predicate: Callable[[], bool], timeout_ms: int) -> bool: ...

    def pass_time(self, duration_ms: int) -> None: ...

    def close(self) -> None: ...


class SimNetHarness:
    name = "sim"

    def __init__(self, seed: int = 7) -> None:
        config = NetworkConfig(
            delay_us_min=100,
            delay_us_max=3_000,
            max_in_flight_per_link=MAX_QUEUED,
            max_frame_bytes=MAX_FRAME_BYTES,
        )
        self.sim = Simulation(seed, network=config, max_events_per_run=200_000)
        self.network: Network = self.sim.network
        self.clock: Clock = self.sim.clock

    def address(self, index: int) -> Endpoint:
        return f"127.0.0.{index + 2}:0"

    def wait_until(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        return self.sim.run_until_true(predicate, timeout_ms=timeout_ms)

    def pass_time(self, duration_ms: int) -> None:
        self.sim.run_for(duration_ms)

    def close(self) -> None:
        self.sim.validate()
        self.sim.close()


class AsyncioNetHarness:
    """The real network on asyncio's event loop, or on uvloop's (``loop="uvloop"``: what node
    processes run on when it is installed)."""

    def __init__(self, loop: str = "asyncio") -> None:
        self.name = loop
        if loop == "uvloop":
            uvloop = importlib.import_module("uvloop")
            self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        else:
            self.loop = asyncio.new_event_loop()
        config = AsyncioNetworkConfig(
            max_frame_bytes=MAX_FRAME_BYTES,
            max_queued_messages=MAX_QUEUED,
            reconnect_delay_ms_min=5,
            reconnect_delay_ms_max=200,
            connect_timeout_ms=1_000,
            write_buffer_bytes_high=64 * 1024,
            socket_buffer_bytes=64 * 1024,
        )
        self.real_network = AsyncioNetwork(config, loop=self.loop)
        self.network: Network = self.real_network
        self.clock: Clock = SystemClock(self.loop)

    def address(self, index: int) -> Endpoint:
        return f"127.0.0.{index + 2}:0"

    def wait_until(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        async def poll() -> bool:
            deadline = self.loop.time() + timeout_ms / 1000.0
            while not predicate():
                if self.loop.time() >= deadline:
                    return predicate()
                await asyncio.sleep(0.001)
            return True

        return self.loop.run_until_complete(poll())

    def pass_time(self, duration_ms: int) -> None:
        self.loop.run_until_complete(asyncio.sleep(duration_ms / 1000.0))

    def close(self) -> None:
        try:
            self.real_network.validate()
            self.loop.run_until_complete(self.real_network.aclose(timeout_ms=5_000))
        finally:
            self.loop.close()


class DiskHarness(Protocol):
    name: str
    disk: Disk

    def restart(self) -> Disk:
        """What a process restart leaves: the same directory, every open handle gone."""
        ...

    def close(self) -> None: ...


class SimDiskHarness:
    name = "sim"

    def __init__(self, root: Path) -> None:
        self.sim_disk = SimDisk(root)
        self.disk: Disk = self.sim_disk

    def restart(self) -> Disk:
        self.sim_disk.crash()
        return self.disk

    def close(self) -> None:
        self.sim_disk.validate()
        self.sim_disk.close()


class LocalDiskHarness:
    name = "local"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.local_disk = LocalDisk(root)
        self.disk: Disk = self.local_disk

    def restart(self) -> Disk:
        self.local_disk.close()
        self.local_disk = LocalDisk(self.root)
        self.disk = self.local_disk
        return self.disk

    def close(self) -> None:
        self.local_disk.validate()
        self.local_disk.close()
