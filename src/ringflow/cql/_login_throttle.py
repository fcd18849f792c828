"""Failed logins per client address, across connections: a limit on password guessing.

A pure core (STYLE.md: time is passed in, no clock here). ``CqlServer`` asks ``refusal`` before
it checks an AUTH_RESPONSE (the bcrypt check costs ~0.1 s of CPU) and reports each login that
failed with ``failed``:

* an address with ``max_failures`` failed logins within the last ``window_s`` seconds is
  refused without a password check, with ``AuthenticationFailed`` (0x0100, what a driver
  reports as bad credentials) saying how long until it may try again; its failures age out of
  the window one by one, so a client that stops guessing gets back in;
* a successful login does not clear the address's failures (one valid account must not let a
  client go on guessing another's password);
* at most ``max_addresses`` addresses are tracked, the least recently failing dropped first, so
  the table is bounded whatever the number of clients.

Cassandra has no such limit (it leaves it to the operator's network); Scylla neither. The
defaults (10 failures a minute) leave a person mistyping room and cut a guesser to 10 tries a
minute per address instead of as many as bcrypt allows.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from ringflow.cql._auth_model import AuthenticationFailed
from ringflow.errors import ConfigurationError, invariant

DEFAULT_MAX_FAILURES = 10
DEFAULT_WINDOW_S = 60.0
DEFAULT_MAX_ADDRESSES = 10_000


@dataclass(frozen=True, slots=True)
class LoginLimits:
    """How many failed logins an address may make in how long; how many addresses are kept."""

    max_failures: int = DEFAULT_MAX_FAILURES
    window_s: float = DEFAULT_WINDOW_S
    max_addresses: int = DEFAULT_MAX_ADDRESSES

    def __post_init__(self) -> None:
        if type(self.max_failures) is not int or self.max_failures < 1:
            raise ConfigurationError(
                f"login limits: max_failures must be an integer >= 1, got {self.max_failures!r}"
            )
        if not 0 < self.window_s <= 86_400:
            raise ConfigurationError(
                f"login limits: window_s must be in (0, 86400], got {self.window_s!r}"
            )
        if type(self.max_addresses) is not int or self.max_addresses < 1:
            raise ConfigurationError(
                f"login limits: max_addresses must be an integer >= 1, got {self.max_addresses!r}"
            )


class LoginThrottle:
    """The failed logins of each client address (module docstring)."""

    def __init__(self, limits: LoginLimits | None = None) -> None:
        self.limits = limits or LoginLimits()
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self.refused = 0
        """Logins refused without a password check since this throttle was made."""

    def refusal(self, address: str, now_s: float) -> AuthenticationFailed | None:
        """The error for a login from ``address`` now, or None when it may try."""
        times = self._recent(address, now_s)
        if times is None or len(times) < self.limits.max_failures:
            return None
        self.refused += 1
        wait_s = max(1, round(times[0] + self.limits.window_s - now_s))
        return AuthenticationFailed(
            f"Too many failed login attempts from {address} ({len(times)} in "
            f"{self.limits.window_s:g} s): try again in {wait_s} s"
        )

    def failed(self, address: str, now_s: float) -> None:
        """A login from ``address`` failed now (bad credentials)."""
        times = self._recent(address, now_s)
        if times is None:
            times = deque(maxlen=self.limits.max_failures)
            self._failures[address] = times
            while len(self._failures) > self.limits.max_addresses:
                self._failures.popitem(last=False)
        self._failures.move_to_end(address)
        times.append(now_s)

    def _recent(self, address: str, now_s: float) -> deque[float] | None:
        """``address``'s failures within the window (older ones dropped), or None."""
        times = self._failures.get(address)
        if times is None:
            return None
        while times and times[0] <= now_s - self.limits.window_s:
            times.popleft()
        if not times:
            del self._failures[address]
            return None
        return times

    def validate(self) -> None:
        invariant(
            len(self._failures) <= self.limits.max_addresses,
            f"{len(self._failures)} addresses tracked, above {self.limits.max_addresses}",
        )
        for address, times in self._failures.items():
            invariant(
                0 < len(times) <= self.limits.max_failures,
                f"{address}: {len(times)} failures kept",
            )
            invariant(list(times) == sorted(times), f"{address}: failure times out of order")
