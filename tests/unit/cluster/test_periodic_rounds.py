"""``PeriodicRounds``, the pace of the capture's publication, channel watch and synch-delete
(issue 14): on a simulated clock, a round starts every interval while none is running, a
round still running makes ticks skip, one stuck past its timeout is abandoned (its late
finish ignored) and one that raises does not stop the next."""

from __future__ import annotations

from collections.abc import Callable

from ringflow.cluster.service._periodic import PeriodicRounds
from ringflow.sim import SimClock, SimLoop, Trace


def clock() -> tuple[SimLoop, SimClock]:
    loop = SimLoop()
    return loop, SimClock(loop, Trace(), epoch_us=1_700_000_000_000_000)


def test_rounds_follow_the_interval_and_never_overlap() -> None:
    loop, sim_clock = clock()
    started: list[int] = []
    pending: list[Callable[[], None]] = []

    def round_(finish: Callable[[], None]) -> None:
        started.append(loop.now_us // 1000)
        pending.append(finish)

    rounds = PeriodicRounds(sim_clock, 100, round_, "test", round_timeout_ms=10_000)
    rounds.start()
    loop.run_until(350_000)
    assert started == [100] and rounds.skipped == 2  # the first round is still running
    pending.pop()()
    loop.run_until(450_000)
    assert started == [100, 400] and rounds.rounds == 1
    rounds.stop()
    pending.pop()()
    loop.run_until(2_000_000)
    assert started == [100, 400] and rounds.rounds == 2


def test_a_stuck_round_is_abandoned_and_its_late_finish_ignored() -> None:
    loop, sim_clock = clock()
    finishes: list[Callable[[], None]] = []
    rounds = PeriodicRounds(sim_clock, 100, finishes.append, "test", round_timeout_ms=250)
    rounds.start()
    loop.run_until(400_000)
    assert len(finishes) == 2 and rounds.abandoned == 1  # started at 100 ms and 400 ms
    finishes[0]()  # the abandoned round's finish: the running one stays running
    assert rounds.running and rounds.rounds == 0
    finishes[1]()
    assert not rounds.running and rounds.rounds == 1
    rounds.stop()


def test_a_round_that_raises_does_not_stop_the_next() -> None:
    loop, sim_clock = clock()
    calls: list[int] = []

    def round_(finish: Callable[[], None]) -> None:
        calls.append(loop.now_us)
        raise RuntimeError("a bug")

    rounds = PeriodicRounds(sim_clock, 100, round_, "test")
    rounds.start()
    loop.run_until(300_000)
    assert len(calls) == 3 and rounds.rounds == 3 and not rounds.running
    rounds.stop()
