"""Settings shared by every test: Hypothesis without per-example deadlines and without the
"too slow" health check.

The suite runs on 2 shared cores next to real node processes and Spark, where one example can
take seconds for reasons that have nothing to do with the code under test; a deadline there
fails a property by the clock, not by its outcome (STYLE.md: no timed assertions). The same
holds for the health check on how long examples take to generate: the stateful store machine
failed once at load ~10 with nothing in Hypothesis' database to replay (a health check is not a
falsifying example), and passed on every rerun.

Two guards against one CPython 3.11 fault. The AST constructor keeps its recursion counter in
interpreter-wide state (CPython gh-106905; the machine's Python is 3.11.7), so two threads building
ASTs at once corrupt each other's count and one fails with ``SystemError: AST constructor
recursion depth mismatch``. Formatting a traceback builds one (``ast.parse`` of the failing line,
for the carets), so a thread logging an exception while the main thread parses source
(Hypothesis' ``inspect.getsource``, pytest's assertion rewriting) failed the test: a driver
``Cluster`` left running by an earlier file logged its reconnection failures, with their
tracebacks, during the stateful store test of two CI runs (``tests/unit/storage``, whose log
showed them). Reproduced alone: one thread formatting tracebacks in a loop while the main
thread parses ``ast.py`` among garbage whose finalizers run Python code: all 56 parses of 5 s
failed without the lock below, none of 312 with it.

* ``ast.parse`` is serialized by one re-entrant lock for the whole test process.
* No test file leaves a driver ``Cluster`` running: the driver's scheduler thread ("Task
  Scheduler", one per ``Cluster``) lives until ``Cluster.shutdown``. The pipeline's
  process-wide session caches (what a Spark worker keeps between tasks, filled here by the
  sinks and commands a test runs in-process) are emptied at the end of each file first
  (``ringflow.pipeline.close_cached_sessions``): that file's clusters are gone. A session
  fixture's driver, meant to outlive the file that first used it, renames that thread
  (``tests/spark/conftest.py``, ``hub``)."""

import ast
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ringflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ringflow")

_parse = ast.parse
_PARSING = threading.RLock()


def _serialized_parse(*args: Any, **kwargs: Any) -> Any:
    with _PARSING:
        return _parse(*args, **kwargs)


ast.parse = _serialized_parse

_DRIVER_THREAD = "Task Scheduler"
_SHUTDOWN_GRACE_S = 5.0


def _running_drivers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == _DRIVER_THREAD and t.is_alive()}


@pytest.fixture(autouse=True, scope="module")
def _no_driver_left_running() -> Iterator[None]:
    before = _running_drivers()
    yield
    pipeline = sys.modules.get("ringflow.pipeline._cluster_client")  # loaded by a test if used
    if pipeline is not None:
        pipeline.close_cached_sessions()
    deadline = time.monotonic() + _SHUTDOWN_GRACE_S
    while (left := _running_drivers() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, (
        f"{len(left)} driver Cluster(s) of this file still running: shut each one down "
        "(tests/conftest.py says why)"
    )
