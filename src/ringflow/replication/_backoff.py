"""A destination that comes and goes: its backoff state machine (REPLICATION.md decision 8).

One :class:`DestinationBackoff` per channel's destination, in the job's driver. States:
**reachable**, or **unreachable since T** with the number of attempts that failed. The first
failure makes it unreachable and schedules a retry ``first_delay_s`` later; each later failed
attempt doubles the delay up to ``max_delay_s`` (1 s, 2 s, 4 s ... 32 s, 60 s, 60 s ...), and
the retries never end (DSE gives up on a message after one retry; an edge site's link comes
back, so we keep trying). A success makes it reachable again.

Failures reported before the retry is due (other copies that were in flight when the
destination went away) belong to the attempt already counted: they neither count as attempts
nor push the retry back. While unreachable, the channel is eligible for permits only when the
retry is due (:meth:`DestinationBackoff.may_attempt`; ``_permits``), so the other channels go
on. ``status`` reads ``unreachable since 2026-11-26T04:20:00Z (attempt 7, next in 32 s)``, where
"attempt 7" is the next try's number.

Pure: the caller passes the time (``now_ms``, epoch milliseconds). The state changes through
one transition table; an event whose time goes backwards raises with the recent story.
"""

from __future__ import annotations

import datetime
import enum
from collections import deque
from dataclasses import dataclass
from typing import Final

from ringflow.errors import invariant
from ringflow.replication._model import ReplicationArgumentError

DEFAULT_FIRST_DELAY_S: Final = 1
DEFAULT_MAX_DELAY_S: Final = 60
BACKOFF_DELAY_S_MAX: Final = 86_400
DEFAULT_STORY_LENGTH: Final = 16


class DestinationState(enum.Enum):
    REACHABLE = "reachable"
    UNREACHABLE = "unreachable"


class _Event(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


_TRANSITIONS: Final = {
    (DestinationState.REACHABLE, _Event.SUCCEEDED): DestinationState.REACHABLE,
    (DestinationState.REACHABLE, _Event.FAILED): DestinationState.UNREACHABLE,
    (DestinationState.UNREACHABLE, _Event.FAILED): DestinationState.UNREACHABLE,
    (DestinationState.UNREACHABLE, _Event.SUCCEEDED): DestinationState.REACHABLE,
}


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Retry delays: ``first_delay_s`` doubling to ``max_delay_s``."""

    first_delay_s: int = DEFAULT_FIRST_DELAY_S
    max_delay_s: int = DEFAULT_MAX_DELAY_S

    def __post_init__(self) -> None:
        for name, value in (
            ("first_delay_s", self.first_delay_s),
            ("max_delay_s", self.max_delay_s),
        ):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ReplicationArgumentError(f"{name} must be an int, got {value!r}")
            if not 1 <= value <= BACKOFF_DELAY_S_MAX:
                raise ReplicationArgumentError(
                    f"{name} must be in [1, {BACKOFF_DELAY_S_MAX}], got {value}"
                )
        if self.first_delay_s > self.max_delay_s:
            raise ReplicationArgumentError(
                f"first_delay_s {self.first_delay_s} must not exceed max_delay_s {self.max_delay_s}"
            )

    def delay_ms(self, failed_attempts: int) -> int:
        """The wait after ``failed_attempts`` (>= 1) attempts failed in a row."""
        if failed_attempts < 1:
            raise ReplicationArgumentError(f"failed_attempts must be >= 1, got {failed_attempts}")
        doublings = min(failed_attempts - 1, self.max_delay_s.bit_length())
        return min(self.first_delay_s << doublings, self.max_delay_s) * 1000


def format_utc(epoch_ms: int) -> str:
    """``2026-11-26T04:20:00Z`` (whole seconds, UTC)."""
    moment = datetime.datetime.fromtimestamp(epoch_ms // 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class DestinationBackoff:
    """One destination's reachability and retry schedule (module docstring)."""

    def __init__(
        self, policy: BackoffPolicy | None = None, *, story_length: int = DEFAULT_STORY_LENGTH
    ) -> None:
        if type(story_length) is not int or not 1 <= story_length <= 10_000:
            raise ReplicationArgumentError(f"story_length must be in [1, 10000]: {story_length!r}")
        self.policy = policy if policy is not None else BackoffPolicy()
        self.state = DestinationState.REACHABLE
        self.unreachable_since_ms: int | None = None
        self.failed_attempts = 0
        self.next_attempt_ms: int | None = None
        self.last_error: str | None = None
        self._last_event_ms: int | None = None
        self._story: deque[str] = deque(maxlen=story_length)

    def failed(self, now_ms: int, error: str = "") -> None:
        """A transmission to the destination failed at ``now_ms`` (``error`` says why)."""
        self._step(now_ms, _Event.FAILED)
        self.last_error = error or None
        due = self.next_attempt_ms
        if self.unreachable_since_ms is None:
            self.unreachable_since_ms = now_ms
        if due is not None and now_ms < due:
            self._story.append(f"{now_ms}: failure before the retry at {due}: same attempt")
            return
        self.failed_attempts += 1
        self.next_attempt_ms = now_ms + self.policy.delay_ms(self.failed_attempts)

    def succeeded(self, now_ms: int) -> None:
        """A transmission to the destination was committed at ``now_ms``."""
        self._step(now_ms, _Event.SUCCEEDED)
        self.unreachable_since_ms = None
        self.failed_attempts = 0
        self.next_attempt_ms = None
        self.last_error = None

    def may_attempt(self, now_ms: int) -> bool:
        """Reachable, or unreachable with its retry due."""
        return self.next_attempt_ms is None or now_ms >= self.next_attempt_ms

    def next_in_ms(self, now_ms: int) -> int | None:
        """How long until the retry; None when reachable, 0 when it is due."""
        return None if self.next_attempt_ms is None else max(0, self.next_attempt_ms - now_ms)

    def status(self, now_ms: int) -> str:
        """``reachable`` or ``unreachable since ... (attempt N, next in S s)``."""
        if self.state is DestinationState.REACHABLE or self.unreachable_since_ms is None:
            return "reachable"
        wait_ms = self.next_in_ms(now_ms) or 0
        wait_s = -(-wait_ms // 1000)
        return (
            f"unreachable since {format_utc(self.unreachable_since_ms)} "
            f"(attempt {self.failed_attempts + 1}, next in {wait_s} s)"
        )

    def story(self) -> tuple[str, ...]:
        """The latest events, oldest first (bounded by ``story_length``)."""
        return tuple(self._story)

    def validate(self) -> None:
        """The state's invariants (run after every step in tests)."""
        reachable = self.state is DestinationState.REACHABLE
        fields = (self.unreachable_since_ms, self.next_attempt_ms)
        consistent = (
            (fields == (None, None) and self.failed_attempts == 0)
            if reachable
            else (None not in fields and self.failed_attempts >= 1)
        )
        invariant(consistent, f"backoff {self.state.value} with {fields}; story: {self.story()}")

    def _step(self, now_ms: int, event: _Event) -> None:
        if not isinstance(now_ms, int) or isinstance(now_ms, bool) or now_ms < 0:
            raise ReplicationArgumentError(f"now_ms must be an int >= 0, got {now_ms!r}")
        if self._last_event_ms is not None and now_ms < self._last_event_ms:
            raise ReplicationArgumentError(
                f"{event.value} at {now_ms} ms is before the last event at "
                f"{self._last_event_ms} ms; story: {list(self._story)}"
            )
        self._last_event_ms = now_ms
        new_state = _TRANSITIONS[self.state, event]
        self._story.append(f"{now_ms}: {event.value}: {self.state.value} -> {new_state.value}")
        self.state = new_state
