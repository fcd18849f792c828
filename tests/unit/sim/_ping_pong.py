"""A toy node and a fault scenario that prove the simulation harness, not any real protocol.

``PingPongNode`` is written only against ``ringflow.runtime.Runtime``: every ``period_ms`` it
pings each peer, it answers every ping with a pong, and it counts its boots in a file on its
disk. ``History`` is the test's outside view (Jepsen-style): what was sent, delivered and
answered, kept outside the nodes so it survives their crashes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ringflow.runtime import Backpressure, Runtime
from ringflow.sim import NetworkConfig, Simulation

PORT = 7000
PERIOD_MS = 50


def endpoint_of(name: str) -> str:
    return f"{name}:{PORT}"


@dataclass
class History:
    """Everything the nodes did, as seen from outside; ids are ``origin/boot/seq/target``."""

    now_ms: Callable[[], int]
    """The simulation's virtual time: the observer's clock, not any node's."""
    stop_sending_at_ms: int
    sent: dict[str, int] = field(default_factory=dict)
    """ping id -> virtual ms it was sent."""
    pings_delivered: dict[str, int] = field(default_factory=dict)
    pongs_received: dict[str, int] = field(default_factory=dict)
    refused: int = 0


class PingPongNode:
    def __init__(self, runtime: Runtime, name: str, peers: list[str], history: History) -> None:
        self.runtime = runtime
        self.name = name
        self.peers = [peer for peer in peers if peer != name]
        self.history = history
        disk = runtime.disk
        self.boot = int(disk.read_bytes("boots")) + 1 if disk.exists("boots") else 1
        disk.write_bytes_atomic("boots", str(self.boot).encode())
        self.seq = 0
        self.listener = runtime.network.listen(endpoint_of(name), self.on_message)
        runtime.clock.call_later(runtime.random.randint(0, PERIOD_MS), self.tick)

    def tick(self) -> None:
        sim_ms = self.history.now_ms()
        if sim_ms >= self.history.stop_sending_at_ms:
            return
        for peer in self.peers:
            self.seq += 1
            ping_id = f"{self.name}/{self.boot}/{self.seq}/{peer}"
            try:
                self.runtime.network.send(
                    endpoint_of(self.name), endpoint_of(peer), b"ping " + ping_id.encode()
                )
            except Backpressure:
                self.history.refused += 1
                continue
            self.history.sent[ping_id] = sim_ms
        self.runtime.clock.call_later(PERIOD_MS, self.tick)

    def on_message(self, src: str, payload: bytes) -> None:
        kind, ping_id = payload.decode().split(" ")
        if kind == "ping":
            self.history.pings_delivered.setdefault(ping_id, self.history.now_ms())
            try:
                self.runtime.network.send(endpoint_of(self.name), src, b"pong " + payload[5:])
            except Backpressure:
                self.history.refused += 1
        else:
            self.history.pongs_received.setdefault(ping_id, self.history.now_ms())


START_WALL_MS = 1_700_000_000_000
SKEW_MS = {"n1": 250, "n2": -400}
"""Clock skew of some nodes: their wall clocks disagree, their behaviour must not depend on it."""

NAMES = ["n0", "n1", "n2", "n3"]
PARTITION_MS = (1_000, 2_000)
CRASH_MS = 1_500
RESTART_MS = 2_200
FAULTS_END_MS = 2_500
STOP_SENDING_MS = 4_000


@dataclass
class Outcome:
    sim: Simulation
    history: History


def run_scenario(seed: int, faults: NetworkConfig | None = None) -> Outcome:
    """Drops, duplicates and reordering; a partition; a crash and a restart; then calm."""
    faults = faults or NetworkConfig(
        delay_us_min=500,
        delay_us_max=20_000,
        delay_distribution="exponential",
        drop_probability=0.05,
        duplicate_probability=0.02,
        reorder=True,
    )
    sim = Simulation(seed, network=faults, epoch_ms=START_WALL_MS, max_events_per_run=200_000)
    history = History(now_ms=sim.now_ms, stop_sending_at_ms=STOP_SENDING_MS)
    for name in NAMES:
        sim.add_process(
            name,
            lambda runtime, name=name: PingPongNode(runtime, name, NAMES, history),
            skew_ms=SKEW_MS.get(name, 0),
        )
    sim.add_invariant(sim.network.validate)
    sim.at(PARTITION_MS[0], lambda: sim.partition(["n0", "n1"], ["n2", "n3"]))
    sim.at(CRASH_MS, lambda: sim.crash("n3"))
    sim.at(PARTITION_MS[1], sim.heal)
    sim.at(RESTART_MS, lambda: sim.restart("n3"))
    calm = NetworkConfig(delay_us_min=500, delay_us_max=20_000, reorder=True)

    def faults_end() -> None:
        sim.configure_network(calm)
        sim.note("faults end")

    sim.at(FAULTS_END_MS, faults_end)
    sim.run_until(STOP_SENDING_MS)
    sim.run_until_quiet(max_events=100_000)
    sim.validate()
    return Outcome(sim, history)
