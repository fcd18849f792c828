"""Simulation runs say which seeds they covered, and a failing seed says how to replay it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator

import pytest

from tests.sim._seeds import replay_command

_COVERED: dict[str, list[int]] = defaultdict(list)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    callspec = getattr(item, "callspec", None)
    seed = None if callspec is None else callspec.params.get("seed")
    if not isinstance(seed, int) or report.when != "call":
        return
    _COVERED[item.nodeid.split("[", 1)[0]].append(seed)
    if report.failed:
        report.sections.append(("replay this seed", replay_command(item.nodeid, seed)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for test, seeds in sorted(_COVERED.items()):
        shown = ",".join(str(seed) for seed in seeds)
        terminalreporter.write_line(f"simulation seeds of {test}: {shown}")
