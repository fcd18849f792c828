"""The CI sample of simulation seeds: regression seeds first, a window that moves with every
commit and covers the whole pool, and overrides a person can type (issue 22)."""

from __future__ import annotations

import pytest

from tests.sim._seeds import SEEDS_VARIABLE, ci_seeds, parse_seeds, replay_command, window


def test_windows_of_successive_commits_cover_the_pool() -> None:
    covered: set[int] = set()
    for commits in range(500, 567):  # ceil(2000 / 30) successive commits, from any start
        seeds = window(30, 2_000, commits)
        assert len(seeds) == len(set(seeds)) == 30
        covered.update(seeds)
    assert covered == set(range(2_000))
    assert window(30, 2_000, 66) == (*range(1_980, 2_000), *range(10))  # wraps within the pool


def test_overrides_and_regressions(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_seeds("3") == (0, 1, 2)
    assert parse_seeds("7-9") == (7, 8, 9)
    assert parse_seeds("5,70,5") == (5, 70, 5)
    with pytest.raises(ValueError, match="empty"):
        parse_seeds("9-7")
    monkeypatch.setenv(SEEDS_VARIABLE, "69-71")
    assert ci_seeds((70, 71), per_run=30, pool=2_000) == (70, 71, 69)
    command = replay_command("tests/sim/x.py::t[70]", 70)
    assert command.startswith(f"{SEEDS_VARIABLE}=70-70 ") and "'tests/sim/x.py::t[70]'" in command
