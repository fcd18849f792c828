"""Settings shared by every test: Hypothesis without per-example deadlines and without the
"too slow" health check.

The suite runs on 2 shared cores next to real node processes and Spark, where one example can
take seconds for reasons that have nothing to do with the code under test; a deadline there
fails a property by the clock, not by its outcome (STYLE.md: no timed assertions). The same
holds for the health check on how long examples take to generate: the stateful store machine
failed once at load ~10 with nothing in Hypothesis' database to replay (a health check is not a
falsifying example), and passed on every rerun.

And a check: no test file leaves a driver ``Cluster`` running. One never shut down keeps its
control connection reconnecting to nodes its test has stopped, for the rest of the pytest
worker's run, logging each failure with its traceback from the driver's threads. Besides the
noise, on CPython 3.11 formatting a traceback parses source (``ast.parse``, for the carets), and
the AST constructor's recursion counter is shared by every thread: a later test parsing source
at the same moment (Hypothesis' ``inspect.getsource``) failed with ``SystemError: AST
constructor recursion depth mismatch``. The driver's scheduler thread ("Task Scheduler", one per
``Cluster``) lives until ``Cluster.shutdown``; a session fixture's driver, meant to outlive the
file that first used it, renames that thread (``tests/spark/conftest.py``, ``hub``)."""

import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ringflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ringflow")

_DRIVER_THREAD = "Task Scheduler"
_SHUTDOWN_GRACE_S = 5.0


def _running_drivers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == _DRIVER_THREAD and t.is_alive()}


@pytest.fixture(autouse=True, scope="module")
def _no_driver_left_running() -> Iterator[None]:
    before = _running_drivers()
    yield
    deadline = time.monotonic() + _SHUTDOWN_GRACE_S
    while (left := _running_drivers() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, (
        f"{len(left)} driver Cluster(s) of this file still running: shut each one down "
        "(tests/conftest.py says why)"
    )
