"""Failed logins per client address (``_login_throttle``), with time passed in: an address that
failed ``max_failures`` times within the window is refused (AuthenticationFailed, 0x0100, saying
when to try again) until its failures age out one by one; other addresses are not affected; a
refusal is not itself a failure; the table of addresses is bounded. The server's use of it
against a real node: ``tests/integration/cluster/test_auth.py`` (the flood test)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cql._login_throttle import LoginLimits, LoginThrottle
from ringflow.errors import ConfigurationError, ErrorCode


def test_an_address_over_the_limit_is_refused_until_its_failures_age_out() -> None:
    throttle = LoginThrottle(LoginLimits(max_failures=3, window_s=10.0))
    for now in (0.0, 1.0, 2.0):
        assert throttle.refusal("127.0.0.5", now) is None
        throttle.failed("127.0.0.5", now)
    refusal = throttle.refusal("127.0.0.5", 2.5)
    assert refusal is not None and refusal.code == ErrorCode.AUTHENTICATION_ERROR
    assert str(refusal) == (
        "Too many failed login attempts from 127.0.0.5 (3 in 10 s): try again in 8 s"
    )
    assert throttle.refusal("127.0.0.6", 2.5) is None  # another address
    assert throttle.refusal("127.0.0.5", 9.9) is not None
    assert throttle.refusal("127.0.0.5", 10.0) is None  # the first failure aged out
    throttle.failed("127.0.0.5", 10.0)
    assert throttle.refusal("127.0.0.5", 10.5) is not None  # 1.0, 2.0 and 10.0 in the window
    assert throttle.refusal("127.0.0.5", 12.0) is None
    assert throttle.refused == 3
    throttle.validate()


def test_the_addresses_kept_are_bounded_the_least_recent_dropped() -> None:
    throttle = LoginThrottle(LoginLimits(max_failures=1, window_s=100.0, max_addresses=2))
    for index, address in enumerate(("a", "b", "c")):
        throttle.failed(address, float(index))
    assert throttle.refusal("a", 3.0) is None  # dropped to keep the table bounded
    assert throttle.refusal("b", 3.0) is not None and throttle.refusal("c", 3.0) is not None
    throttle.validate()


@settings(max_examples=60)
@given(
    events=st.lists(st.tuples(st.sampled_from("abcd"), st.floats(0, 5), st.booleans()), max_size=80)
)
def test_never_more_than_the_limit_in_any_window(
    events: list[tuple[str, float, bool]],
) -> None:
    """Whatever the clients do, an address gets at most ``max_failures`` password checks that
    fail within any window: a check only happens when ``refusal`` is None."""
    limits = LoginLimits(max_failures=3, window_s=2.0, max_addresses=10)
    throttle = LoginThrottle(limits)
    now = 0.0
    checked: dict[str, list[float]] = {}
    for address, step, fails in events:
        now += step
        if throttle.refusal(address, now) is None and fails:
            throttle.failed(address, now)
            checked.setdefault(address, []).append(now)
        throttle.validate()
    for times in checked.values():
        for start in times:
            inside = [t for t in times if start <= t < start + limits.window_s]
            assert len(inside) <= limits.max_failures


@pytest.mark.parametrize(
    "limits",
    [{"max_failures": 0}, {"window_s": 0}, {"window_s": 1e9}, {"max_addresses": 0}],
)
def test_bad_limits_are_refused(limits: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        LoginLimits(**limits)  # type: ignore[arg-type]
