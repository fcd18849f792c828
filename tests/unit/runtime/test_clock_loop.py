"""``ClockLoop`` and ``ClockExecutor``: a loop's hand-offs and an executor over a ``Clock``."""

from __future__ import annotations

import asyncio

import pytest

from ringflow.runtime import ClockExecutor, ClockLoop, Runtime
from ringflow.sim import Simulation


def clock_of(sim: Simulation) -> Runtime:
    found: list[Runtime] = []
    sim.add_process("p", lambda runtime: found.append(runtime))
    return found[0]


def test_hand_offs_run_after_the_current_callback_in_order_and_timers_round_up() -> None:
    with Simulation(1) as sim:
        runtime = clock_of(sim)
        loop, ran = ClockLoop(runtime.clock), []
        loop.call_soon_threadsafe(ran.append, "first")
        loop.call_soon_threadsafe(ran.append, "second")
        late = loop.call_later(0.0101, ran.append, "late")
        assert ran == []  # nothing runs inside the caller's callback
        sim.run_for(0)
        assert ran == ["first", "second"]
        sim.run_for(10)
        assert ran == ["first", "second"]  # 10.1 ms is 11 ms, not 10
        sim.run_for(1)
        assert ran == ["first", "second", "late"]
        late.cancel()


def test_the_executor_runs_work_in_order_and_its_futures_carry_results_and_errors() -> None:
    with Simulation(1) as sim:
        runtime = clock_of(sim)
        executor = ClockExecutor(runtime.clock)
        ok = executor.submit(lambda a, b: a + b, 2, 3)
        failed = executor.submit(lambda: 1 // 0)
        assert not ok.done()
        sim.run_for(0)
        assert ok.result() == 5
        assert isinstance(failed.exception(), ZeroDivisionError)
        cancelled = executor.submit(lambda: "never")
        assert cancelled.cancel()
        sim.run_for(0)
        assert cancelled.cancelled()
        executor.shutdown()
        with pytest.raises(RuntimeError):
            executor.submit(lambda: None)


def test_work_of_a_crashed_incarnation_never_runs() -> None:
    with Simulation(1) as sim:
        runtime = clock_of(sim)
        future = ClockExecutor(runtime.clock).submit(lambda: "ran")
        sim.crash("p")
        sim.run_for(10)
        assert not future.done()


def test_coroutines_run_on_the_clock_with_asyncio_primitives() -> None:
    """Tasks, futures, ``wait_for``, ``shield``, ``gather`` and ``Lock`` run over the clock:
    a timeout fires at the clock's time, not the machine's, and a task sees the loop as
    asyncio's running loop."""
    with Simulation(1) as sim:
        runtime = clock_of(sim)
        loop = ClockLoop(runtime.clock)
        lock = asyncio.Lock()
        order: list[str] = []
        answer = loop.create_future()

        async def holder() -> None:
            async with lock:
                order.append("holder in")
                await asyncio.sleep(0.5)
                order.append("holder out")

        async def waiter() -> int:
            async with lock:
                order.append("waiter in")
            assert asyncio.get_running_loop() is loop
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.shield(answer), 2.0)
            timed_out = runtime.clock.monotonic_ms()
            loop.call_later(1.0, answer.set_result, 7)
            values = await asyncio.gather(answer, asyncio.sleep(0.25, result=3))
            return timed_out * 1000 + sum(values)

        started = runtime.clock.monotonic_ms()
        first, second = loop.create_task(holder()), loop.create_task(waiter())
        sim.run_for(10_000)
        assert first.done() and second.done()
        assert order == ["holder in", "holder out", "waiter in"]
        assert second.result() == (started + 500 + 2000) * 1000 + 10
        assert loop.time() == runtime.clock.monotonic_ms() / 1000


def test_a_task_of_a_crashed_incarnation_never_resumes() -> None:
    with Simulation(1) as sim:
        runtime = clock_of(sim)
        loop, ran = ClockLoop(runtime.clock), []

        async def sleeper() -> None:
            await asyncio.sleep(1.0)
            ran.append("resumed")

        task = loop.create_task(sleeper())
        sim.run_for(10)
        sim.crash("p")
        sim.run_for(5_000)
        assert ran == [] and not task.done()
