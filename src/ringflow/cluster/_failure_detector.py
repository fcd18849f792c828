"""The phi-accrual failure detector: heartbeat arrival windows and conviction.

Owns ``shared/reference/cassandra-core.md`` §8.2 (C41 ``gms/FailureDetector.java`` semantics) and
the seed's "Ring Membership and Failure Detection" (seed 003). Pure: every time is an argument in
milliseconds, nothing reads a clock.

Rules:

* ``ArrivalWindow`` keeps the last ``sample_size`` inter-arrival times in a circular buffer with
  a running sum. Its first sample is ``initial_value_ms`` (twice the gossip interval), and an
  interval longer than ``max_interval_ms`` is ignored, not recorded, so a node coming back after
  a partition does not poison the mean.
* ``phi(now) = (now - last arrival) / mean``: the exponential-distribution simplification of
  CASSANDRA-2597. Conviction is ``PHI_FACTOR * phi > phi_convict_threshold`` with
  ``PHI_FACTOR = 1 / ln 10``, i.e. silence longer than ``threshold * ln 10 * mean`` (about
  18.4 x mean at the default 8).
* Local-pause guard: if two consecutive ``interpret`` calls are more than ``max_local_pause_ms``
  apart, *we* were paused (GC, a stopped VM, an overloaded event loop), not our peers; nothing is
  convicted until ``max_local_pause_ms`` has passed since that pause was noticed.
* The detector only *judges* heartbeats. Who is up or down in the cluster is the gossiper's
  business (it marks a node up only after an echo round trip); ``is_alive`` here means "reported
  and not convicted since its last report".
"""

from __future__ import annotations

import math
from typing import Final, final

from ringflow.errors import ConfigurationError, InvalidRequest, invariant

SAMPLE_SIZE: Final = 1000
"""Inter-arrival times kept per endpoint (Cassandra ``SAMPLE_SIZE``)."""
INITIAL_VALUE_MS: Final = 2000
"""First sample of a new window: twice the 1000 ms gossip interval (``fd_initial_value_ms``)."""
MAX_INTERVAL_MS: Final = 2000
"""Intervals above this are ignored (``fd_max_interval_ms``, defaulting to the initial value)."""
MAX_LOCAL_PAUSE_MS: Final = 5000
"""A gap between ``interpret`` calls above this is a local pause (``max_local_pause_in_ms``)."""
PHI_FACTOR: Final = 1.0 / math.log(10.0)
"""Converts the natural-log phi of the exponential model to Hayashibara's log10 phi (≈ 0.434)."""
DEFAULT_PHI_CONVICT_THRESHOLD: Final = 8.0
PHI_CONVICT_THRESHOLD_MIN: Final = 5.0
PHI_CONVICT_THRESHOLD_MAX: Final = 16.0


def _check_positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be a positive int, got {value!r}")
    return value


def _check_time(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidRequest(f"{name} must be a non-negative int of milliseconds, got {value!r}")
    return value


@final
class ArrivalWindow:
    """Inter-arrival times of one endpoint's heartbeats, with their running mean."""

    __slots__ = (
        "_count",
        "_intervals_ms",
        "_last_arrival_ms",
        "_next_index",
        "_sum_ms",
        "initial_value_ms",
        "max_interval_ms",
        "sample_size",
    )

    def __init__(
        self,
        sample_size: int = SAMPLE_SIZE,
        initial_value_ms: int = INITIAL_VALUE_MS,
        max_interval_ms: int = MAX_INTERVAL_MS,
    ) -> None:
        self.sample_size = _check_positive_int("sample_size", sample_size)
        self.initial_value_ms = _check_positive_int("initial_value_ms", initial_value_ms)
        self.max_interval_ms = _check_positive_int("max_interval_ms", max_interval_ms)
        self._intervals_ms = [0] * sample_size
        self._next_index = 0
        self._count = 0
        self._sum_ms = 0
        self._last_arrival_ms: int | None = None

    @property
    def last_arrival_ms(self) -> int | None:
        return self._last_arrival_ms

    @property
    def sample_count(self) -> int:
        return self._count

    def intervals_ms(self) -> list[int]:
        """The recorded intervals, oldest first."""
        if self._count < self.sample_size:
            return self._intervals_ms[: self._count]
        start = self._next_index
        return self._intervals_ms[start:] + self._intervals_ms[:start]

    def add(self, arrival_ms: int) -> None:
        """Record a heartbeat arriving at ``arrival_ms``."""
        _check_time("arrival_ms", arrival_ms)
        last = self._last_arrival_ms
        if last is None:
            self._record(self.initial_value_ms)
        else:
            if arrival_ms < last:
                raise InvalidRequest(
                    f"arrival at {arrival_ms} ms is before the previous one at {last} ms"
                )
            interval_ms = arrival_ms - last
            if interval_ms <= self.max_interval_ms:
                self._record(interval_ms)
        self._last_arrival_ms = arrival_ms

    def _record(self, interval_ms: int) -> None:
        if self._count == self.sample_size:
            self._sum_ms -= self._intervals_ms[self._next_index]
        else:
            self._count += 1
        self._intervals_ms[self._next_index] = interval_ms
        self._sum_ms += interval_ms
        self._next_index = (self._next_index + 1) % self.sample_size

    def mean_ms(self) -> float:
        invariant(self._count > 0, "mean of an empty arrival window")
        return self._sum_ms / self._count

    def phi(self, now_ms: int) -> float:
        """Unscaled phi: silence since the last arrival over the mean interval."""
        last = self._last_arrival_ms
        if last is None:
            raise InvalidRequest("phi of an endpoint that never reported a heartbeat")
        return max(now_ms - last, 0) / self.mean_ms()

    def validate(self) -> None:
        invariant(
            0 <= self._count <= self.sample_size, lambda: f"window count {self._count} out of range"
        )
        invariant(
            (self._count == 0) == (self._last_arrival_ms is None),
            "a window has samples exactly when it has seen an arrival",
        )
        recorded = self.intervals_ms()
        invariant(sum(recorded) == self._sum_ms, "running sum drifted from the samples")
        bound = max(self.max_interval_ms, self.initial_value_ms)
        invariant(
            not recorded or (min(recorded) >= 0 and max(recorded) <= bound),
            lambda: f"an interval outside [0, {bound}] was recorded: {recorded}",
        )


@final
class FailureDetector:
    """Per-endpoint arrival windows and the phi conviction rule, with the local-pause guard.

    Do not reach into the windows: mutate only through ``report``, ``interpret``,
    ``force_conviction`` and ``remove``.
    """

    __slots__ = (
        "_convicted",
        "_last_interpret_ms",
        "_last_pause_ms",
        "_windows",
        "initial_value_ms",
        "max_interval_ms",
        "max_local_pause_ms",
        "phi_convict_threshold",
        "sample_size",
    )

    def __init__(
        self,
        phi_convict_threshold: float = DEFAULT_PHI_CONVICT_THRESHOLD,
        *,
        sample_size: int = SAMPLE_SIZE,
        initial_value_ms: int = INITIAL_VALUE_MS,
        max_interval_ms: int = MAX_INTERVAL_MS,
        max_local_pause_ms: int = MAX_LOCAL_PAUSE_MS,
    ) -> None:
        if (
            not isinstance(phi_convict_threshold, int | float)
            or isinstance(phi_convict_threshold, bool)
            or not PHI_CONVICT_THRESHOLD_MIN <= phi_convict_threshold <= PHI_CONVICT_THRESHOLD_MAX
        ):
            raise ConfigurationError(
                f"phi_convict_threshold must be between {PHI_CONVICT_THRESHOLD_MIN:g} and "
                f"{PHI_CONVICT_THRESHOLD_MAX:g}, got {phi_convict_threshold!r}"
            )
        self.phi_convict_threshold = float(phi_convict_threshold)
        self.sample_size = _check_positive_int("sample_size", sample_size)
        self.initial_value_ms = _check_positive_int("initial_value_ms", initial_value_ms)
        self.max_interval_ms = _check_positive_int("max_interval_ms", max_interval_ms)
        self.max_local_pause_ms = _check_positive_int("max_local_pause_ms", max_local_pause_ms)
        self._windows: dict[str, ArrivalWindow] = {}
        self._convicted: set[str] = set()
        self._last_interpret_ms: int | None = None
        self._last_pause_ms: int | None = None

    def endpoints(self) -> list[str]:
        """Endpoints with an arrival window, sorted."""
        return sorted(self._windows)

    def window(self, endpoint: str) -> ArrivalWindow | None:
        return self._windows.get(endpoint)

    def report(self, endpoint: str, now_ms: int) -> None:
        """A heartbeat (a higher heartbeat version or generation) from ``endpoint`` arrived."""
        window = self._windows.get(endpoint)
        if window is None:
            window = ArrivalWindow(self.sample_size, self.initial_value_ms, self.max_interval_ms)
            self._windows[endpoint] = window
        window.add(now_ms)
        self._convicted.discard(endpoint)

    def phi(self, endpoint: str, now_ms: int) -> float | None:
        """Scaled phi (``PHI_FACTOR * phi``), comparable with the threshold; None if unknown."""
        window = self._windows.get(endpoint)
        if window is None:
            return None
        return PHI_FACTOR * window.phi(now_ms)

    def interpret(self, endpoint: str, now_ms: int) -> bool:
        """Judge ``endpoint`` at ``now_ms``; True if it is convicted (phi above the threshold).

        Every call counts for the local-pause guard, so the caller interprets every endpoint
        once per gossip round.
        """
        _check_time("now_ms", now_ms)
        window = self._windows.get(endpoint)
        if window is None:
            return False
        last_interpret_ms = self._last_interpret_ms
        self._last_interpret_ms = now_ms
        if last_interpret_ms is not None and now_ms - last_interpret_ms > self.max_local_pause_ms:
            self._last_pause_ms = now_ms
            return False
        if (
            self._last_pause_ms is not None
            and now_ms - self._last_pause_ms < self.max_local_pause_ms
        ):
            return False
        scaled_phi = PHI_FACTOR * window.phi(now_ms)
        if scaled_phi > self.phi_convict_threshold:
            self._convicted.add(endpoint)
            return True
        return False

    def is_alive(self, endpoint: str) -> bool:
        """Reported at least once and not convicted since its last report."""
        return endpoint in self._windows and endpoint not in self._convicted

    def force_conviction(self, endpoint: str) -> None:
        """Convict ``endpoint`` now, whatever its phi (an announced shutdown, an operator)."""
        if endpoint in self._windows:
            self._convicted.add(endpoint)

    def remove(self, endpoint: str) -> None:
        """Forget ``endpoint``'s history (it restarted while down, or left the cluster)."""
        self._windows.pop(endpoint, None)
        self._convicted.discard(endpoint)

    def validate(self) -> None:
        orphans = sorted(self._convicted - self._windows.keys())
        invariant(not orphans, f"convicted endpoints without a window: {orphans}")
        for window in self._windows.values():
            window.validate()
