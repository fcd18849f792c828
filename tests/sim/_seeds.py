"""Which simulation seeds a test run covers (issue 22).

Every seed is a whole seeded cluster history, so more seeds find more bugs, but CI has a time
budget. A scenario's CI sample is its *regression seeds* (each one failed once; kept for good,
with the bug named where it is listed) plus a *window* of ``per_run`` seeds out of a pool of
``pool`` seeds. The window moves by ``per_run`` seeds with every commit (its offset is the
number of commits reachable from HEAD, ``git rev-list --count HEAD``), so successive commits
cover the whole pool, and a given commit always runs the same seeds: a failure replays.

``RINGFLOW_SIM_SEEDS`` overrides the window (regression seeds still run): ``N`` (seeds 0 to
N-1), ``A-B`` (A to B inclusive) or ``A,B,C``. ``make sim SEEDS=N`` runs many more through
``tests/sim/run_seeds.py``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

SEEDS_VARIABLE = "RINGFLOW_SIM_SEEDS"
_REPOSITORY = Path(__file__).resolve().parents[2]


def parse_seeds(text: str) -> tuple[int, ...]:
    """``N``, ``A-B`` or ``A,B,C`` (module docstring)."""
    text = text.strip()
    if "," in text:
        return tuple(int(part) for part in text.split(",") if part.strip())
    if "-" in text:
        low, high = (int(part) for part in text.split("-", 1))
        if high < low:
            raise ValueError(f"{SEEDS_VARIABLE}={text!r}: the range is empty")
        return tuple(range(low, high + 1))
    count = int(text)
    if count < 1:
        raise ValueError(f"{SEEDS_VARIABLE}={text!r}: at least one seed")
    return tuple(range(count))


def commit_count() -> int:
    """Commits reachable from HEAD, or 0 outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "rev-list", "--count", "HEAD"],
            cwd=_REPOSITORY,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return int(done.stdout.strip())
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0


def window(per_run: int, pool: int, commits: int) -> tuple[int, ...]:
    """The ``per_run`` consecutive seeds (wrapping within ``pool``) this commit runs."""
    start = (commits * per_run) % pool
    return tuple((start + i) % pool for i in range(min(per_run, pool)))


def ci_seeds(regressions: Sequence[int], per_run: int, pool: int) -> tuple[int, ...]:
    """The regression seeds, then this run's window (or ``RINGFLOW_SIM_SEEDS``), no repeats."""
    override = os.environ.get(SEEDS_VARIABLE)
    sample = parse_seeds(override) if override else window(per_run, pool, commit_count())
    return tuple(dict.fromkeys([*regressions, *sample]))


def replay_command(node_id: str, seed: int) -> str:
    """The command that runs exactly this parametrized test again (its seed collected)."""
    return f"{SEEDS_VARIABLE}={seed}-{seed} .venv/bin/python -m pytest '{node_id}'"
