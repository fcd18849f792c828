"""``SimProcess``: incarnations, what a crash takes away, clock skew, and per-process randomness."""

from __future__ import annotations

import pytest

from ringflow.errors import ClientError
from ringflow.runtime import NotListening, Runtime
from ringflow.sim import (
    DEFAULT_EPOCH_MS,
    ProcessDead,
    ProcessState,
    Simulation,
    TimerFired,
)


class Recorder:
    """A node that listens on its name, keeps what it hears, and ticks every 10 ms."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        self.runtime = runtime
        self.name = name
        self.heard: list[bytes] = []
        self.ticks = 0
        self.draws = [runtime.random.random() for _ in range(3)]
        runtime.network.listen(name, lambda src, payload: self.heard.append(payload))
        runtime.clock.call_later(10, self.tick)

    def tick(self) -> None:
        self.ticks += 1
        self.runtime.clock.call_later(10, self.tick)


def recorder(name: str) -> object:
    return lambda runtime: Recorder(runtime, name)


def node_of(sim: Simulation, name: str) -> Recorder:
    node = sim.process(name).node
    assert isinstance(node, Recorder)
    return node


def test_a_crash_stops_timers_drops_messages_and_forgets_memory() -> None:
    with Simulation(1) as sim:
        sim.add_process("a", recorder("a"))  # type: ignore[arg-type]
        sim.add_process("b", recorder("b"))  # type: ignore[arg-type]
        sim.run_for(35)
        first = node_of(sim, "b")
        assert first.ticks == 3
        sim.network.listen("driver", lambda src, payload: None)
        sim.network.send("driver", "b", b"lost in flight")
        sim.crash("b")
        sim.run_for(100)
        assert first.ticks == 3 and first.heard == []
        assert sim.process("b").node is None and sim.process("b").state is ProcessState.CRASHED
        first_life = [t for t, event in sim.trace.timed(TimerFired) if event.owner == "b#1"]
        assert len(first_life) == 3 and max(first_life) <= 35_000

        second = sim.restart("b")
        assert isinstance(second, Recorder) and second is not first
        assert second.ticks == 0 and sim.process("b").incarnation == 2
        sim.network.send("driver", "b", b"after restart")
        sim.run_for(25)
        assert second.heard == [b"after restart"] and second.ticks == 2
        sim.validate()


def test_a_dead_incarnations_runtime_refuses_everything() -> None:
    with Simulation(2) as sim:
        sim.add_process("a", recorder("a"))  # type: ignore[arg-type]
        stale = node_of(sim, "a").runtime
        sim.crash("a")
        with pytest.raises(ProcessDead):
            stale.clock.call_later(1, lambda: None)
        with pytest.raises(ProcessDead):
            stale.network.send("a", "a", b"")
        with pytest.raises(ProcessDead):
            stale.network.listen("a2", lambda src, payload: None)


def test_a_process_may_only_send_as_its_own_endpoints() -> None:
    with Simulation(3) as sim:
        sim.add_process("a", recorder("a"))  # type: ignore[arg-type]
        sim.add_process("b", recorder("b"))  # type: ignore[arg-type]
        with pytest.raises(NotListening):
            node_of(sim, "a").runtime.network.send("b", "a", b"spoofed")
        assert sim.process("a").endpoints == ["a"]


def test_skew_moves_the_wall_clock_only() -> None:
    with Simulation(4) as sim:
        sim.add_process("fast", recorder("fast"), skew_ms=500)  # type: ignore[arg-type]
        sim.add_process("true", recorder("true"))  # type: ignore[arg-type]
        fast, true = node_of(sim, "fast").runtime.clock, node_of(sim, "true").runtime.clock
        sim.run_for(100)
        assert true.now_ms() == DEFAULT_EPOCH_MS + 100
        assert fast.now_ms() == DEFAULT_EPOCH_MS + 600
        monotonic_before = fast.monotonic_ms()
        sim.set_skew_ms("fast", -2_000)  # the wall clock jumps backwards
        assert fast.now_ms() == DEFAULT_EPOCH_MS + 100 - 2_000
        assert fast.monotonic_ms() == monotonic_before
        assert node_of(sim, "fast").ticks == node_of(sim, "true").ticks == 10


def test_skew_and_disk_survive_a_restart() -> None:
    with Simulation(5) as sim:
        process = sim.add_process("a", recorder("a"), skew_ms=-70)  # type: ignore[arg-type]
        process.disk.write_bytes_atomic("state", b"kept")
        sim.crash("a")
        sim.restart("a")
        clock = node_of(sim, "a").runtime.clock
        assert clock.now_ms() == DEFAULT_EPOCH_MS - 70
        assert node_of(sim, "a").runtime.disk.read_bytes("state") == b"kept"


def test_each_incarnation_has_its_own_seeded_random_stream() -> None:
    def draws(seed: int) -> tuple[list[float], list[float]]:
        with Simulation(seed) as sim:
            sim.add_process("a", recorder("a"))  # type: ignore[arg-type]
            first = node_of(sim, "a").draws
            sim.crash("a")
            sim.restart("a")
            return first, node_of(sim, "a").draws

    first, second = draws(6)
    assert first != second
    assert draws(6) == (first, second)
    assert draws(7)[0] != first


def test_lifecycle_misuse_is_refused() -> None:
    with Simulation(8) as sim:
        sim.add_process("a", recorder("a"))  # type: ignore[arg-type]
        with pytest.raises(ClientError):
            sim.process("a").start()
        with pytest.raises(ClientError):
            sim.add_process("a", recorder("a"))  # type: ignore[arg-type]
        with pytest.raises(ClientError):
            sim.add_process("../x", recorder("x"))  # type: ignore[arg-type]
        with pytest.raises(ClientError):
            sim.crash("nobody")
        sim.crash("a")
        with pytest.raises(ClientError):
            sim.crash("a")
        lazy = sim.add_process("lazy", recorder("lazy"), start=False)  # type: ignore[arg-type]
        assert lazy.state is ProcessState.CREATED and lazy.node is None
        sim.restart("lazy")
        assert lazy.running


def test_partitions_are_by_process_and_follow_restarts() -> None:
    with Simulation(9) as sim:
        sim.add_process("a", recorder("a"))  # type: ignore[arg-type]
        sim.add_process("b", recorder("b"))  # type: ignore[arg-type]
        sim.partition(["a"], ["b"])
        sim.crash("b")
        sim.restart("b")
        node_of(sim, "a").runtime.network.send("a", "b", b"blocked")
        sim.run_for(20)
        assert node_of(sim, "b").heard == []
        sim.heal()
        node_of(sim, "a").runtime.network.send("a", "b", b"through")
        sim.run_for(20)
        assert node_of(sim, "b").heard == [b"through"]


def test_the_acting_process_is_the_timer_owner_or_the_message_receiver() -> None:
    """``Simulation.acting_process``: what the last event ran the code of (invariant hooks
    check only that process); None for the scenario's own calls and for a dead owner."""
    with Simulation(7) as sim:
        sim.add_process("a", recorder("a"))
        sim.add_process("b", recorder("b"))
        acting: list[str | None] = []
        sim.add_invariant(lambda: acting.append(sim.acting_process()))
        sim.run_for(10)  # both tick
        assert sorted(a for a in acting if a) == ["a", "b"]
        acting.clear()
        node_of(sim, "a").runtime.network.send("a", "b", b"hello")
        sim.run_for(5)  # the delivery to b runs b's handler
        assert acting == ["b"]
        acting.clear()
        sim.after(1, lambda: None)
        sim.run_for(2)
        assert acting == [None]
        node_of(sim, "a").runtime.network.send("a", "b", b"again")
        sim.run_for(5)
        assert sim.acting_process() == "b"
        sim.crash("b")
        assert sim.acting_process() is None  # that incarnation is gone
