"""A round of background work every ``interval_ms`` on the node's thread, never two at once.

The replica capture's publication, channel watch and synch-delete (issue 14) each run one:
a round is a chain of callbacks (store work offloaded, coordinated reads and writes) that
calls ``finish`` once, whatever happened; a tick that finds the last round still running
skips (a slow disk or an unreachable quorum never piles rounds up). A round that has not
finished after ``round_timeout_ms`` (a callback that raised, a bug) is abandoned with an
ERROR and the next one starts; its late ``finish`` is ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ringflow.errors import invariant
from ringflow.runtime import Clock, TimerHandle

_log = logging.getLogger(__name__)

ROUND_TIMEOUT_MS = 60_000
Round = Callable[[Callable[[], None]], None]
"""Start one round; call the argument (``finish``) exactly once when it is over."""


class PeriodicRounds:
    """Run ``round`` every ``interval_ms`` of ``clock`` (module docstring)."""

    def __init__(
        self,
        clock: Clock,
        interval_ms: int,
        round_: Round,
        name: str,
        *,
        round_timeout_ms: int = ROUND_TIMEOUT_MS,
    ) -> None:
        invariant(type(interval_ms) is int and interval_ms > 0, f"bad interval {interval_ms!r}")
        self._clock = clock
        self.interval_ms = interval_ms
        self.round_timeout_ms = round_timeout_ms
        self._started_ms = 0
        self._round_id = 0
        self.abandoned = 0
        self._round = round_
        self._name = name
        self._timer: TimerHandle | None = None
        self._stopped = False
        self.running = False
        self.rounds = 0
        self.skipped = 0

    def start(self) -> None:
        self._schedule()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()

    def _schedule(self) -> None:
        if not self._stopped:
            self._timer = self._clock.call_later(self.interval_ms, self._tick)

    def _tick(self) -> None:
        if self._stopped:
            return
        self._schedule()
        now_ms = self._clock.monotonic_ms()
        if self.running:
            if now_ms - self._started_ms < self.round_timeout_ms:
                self.skipped += 1
                return
            _log.error(
                "%s round %d did not finish in %d ms: abandoned",
                self._name, self._round_id, self.round_timeout_ms,
            )  # fmt: skip
            self.abandoned += 1
        self.running = True
        self._started_ms = now_ms
        self._round_id += 1
        finish = self._finisher(self._round_id)
        try:
            self._round(finish)
        except Exception:  # a bug in a round must not stop the next ones
            _log.exception("%s round failed", self._name)
            finish()

    def _finisher(self, round_id: int) -> Callable[[], None]:
        def finish() -> None:
            if round_id == self._round_id and self.running:
                self.running = False
                self.rounds += 1

        return finish
